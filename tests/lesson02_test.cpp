// Lesson 02's own tests: the online softmax statistics, on their own, against the two-pass ones.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "fa/params.hpp"
#include "fa/random.hpp"
#include "online_softmax.hpp"

const fa::LessonInfo& fa_lesson_02_model();

namespace {

const float kInf = std::numeric_limits<float>::infinity();

// The textbook way, in fp64: pass 1 the max, pass 2 the sum.
void two_pass(const std::vector<float>& x, double& m, double& l) {
  m = -INFINITY;
  for (float v : x) m = std::max<double>(m, v);
  l = 0;
  if (m == -INFINITY) return;
  for (float v : x) l += std::exp(double(v) - m);
}

fa::lesson02::SoftmaxStats stats(const std::vector<float>& x) {
  try {
    return fa::lesson02::online_softmax_stats(x.data(), static_cast<int>(x.size()));
  } catch (const fa::NotImplemented& e) {
    FAIL(std::string(e.what()));
  }
  return {};
}

// The model's TODO list guards online_softmax_stats too: run the model once on a 1 x 1 problem,
// so a skeleton reports "lesson 02 not implemented yet" here rather than wrong numbers.
void require_started() {
  uint16_t q = 0x3c00, k = 0x3c00, v = 0x3c00, o = 0;
  float lse = 0;
  fa::AttnParams p;
  p.batch = p.heads_q = p.heads_kv = p.seqlen_q = p.seqlen_k = p.head_dim = 1;
  p.scale = 1.f;
  p.q = &q;
  p.k = &k;
  p.v = &v;
  p.o = &o;
  p.lse = &lse;
  fa::set_contiguous_strides(p);
  try {
    fa::run_forward(fa_lesson_02_model(), p);
  } catch (const fa::NotImplemented& e) {
    FAIL(std::string(e.what()));
  }
}

}  // namespace

TEST_CASE("lesson02: online stats equal the two-pass max and sum") {
  require_started();
  fa::Rng rng(fa::seed_for("lesson02 stats"));
  for (int n : {1, 2, 7, 64, 1000}) {
    for (double spread : {1.0, 30.0}) {
      std::vector<float> x(n);
      for (float& v : x) v = static_cast<float>(spread * rng.normal());
      double m, l;
      two_pass(x, m, l);
      const auto s = stats(x);
      CHECK(s.m == m);  // the max is exact
      CHECK_MESSAGE(std::fabs(s.l - l) <= 1e-5 * l, "n = ", n, ": online l = ", s.l, ", two-pass l = ", l);
    }
  }
  // Increasing values move the max at every step, so every step rescales l.
  std::vector<float> up(100);
  for (int j = 0; j < 100; ++j) up[j] = 0.5f * j;
  double m, l;
  two_pass(up, m, l);
  const auto s = stats(up);
  CHECK(s.m == 49.5f);
  CHECK(std::fabs(s.l - l) <= 1e-5 * l);
}

TEST_CASE("lesson02: masked and extreme rows") {
  require_started();
  const auto all_masked = stats({-kInf, -kInf, -kInf});
  CHECK(all_masked.m == -kInf);
  CHECK(all_masked.l == 0.f);
  const auto some = stats({-kInf, 2.f, -kInf, 1.f});
  CHECK(some.m == 2.f);
  CHECK(some.l == doctest::Approx(1.0 + std::exp(-1.0)).epsilon(1e-6));
  // exp(1000) overflows fp32, exp(1000 - 1000) does not: the running max must be subtracted.
  const auto big = stats({1000.f, 999.f, -1000.f});
  CHECK(big.m == 1000.f);
  CHECK(big.l == doctest::Approx(1.0 + std::exp(-1.0)).epsilon(1e-6));
  // A max that arrives last rescales everything before it.
  const auto late = stats({0.f, 0.f, 100.f});
  CHECK(late.m == 100.f);
  CHECK(late.l == doctest::Approx(1.0).epsilon(1e-6));
}

TEST_CASE("lesson02: bytes per row of a 3-pass and a 2-pass softmax") {
  require_started();  // the function is given; the test belongs to the lesson's work all the same
  // 3 reads + 1 write of 4-byte scores against 2 reads + 1 write: a quarter less traffic.
  CHECK(fa::lesson02::softmax_row_bytes(4096, 3) == 4.0 * 4096 * 4);
  CHECK(fa::lesson02::softmax_row_bytes(4096, 2) == 4.0 * 4096 * 3);
  CHECK(fa::lesson02::softmax_row_bytes(4096, 2) / fa::lesson02::softmax_row_bytes(4096, 3) == 0.75);
}
