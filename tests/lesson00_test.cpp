// Lesson 00's own test: the worked example of its README, by hand, through the lesson.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "fa/half.hpp"
#include "fa/params.hpp"
#include "support.hpp"

TEST_CASE("lesson00: the README worked example") {
  // Q, K, V are (3 x 2), one batch and head, scale 1/sqrt(2); every input is exact in fp16.
  const double q[3][2] = {{1, 0}, {0, 2}, {1, 1}}, k[3][2] = {{2, 0}, {0, 1}, {1, -1}}, v[3][2] = {{1, 0}, {0, 1}, {1, 1}};
  // The README's O and LSE, rounded to 4 decimals; the lesson stores O in fp16 (1e-3 at most off).
  const double o_full[3][2] = {{0.8600, 0.4240}, {0.2321, 0.8133}, {0.7160, 0.4240}};
  const double lse_full[3] = {1.9659, 1.6783, 1.9659};
  const double o_causal[3][2] = {{1.0, 0.0}, {0.1956, 0.8044}, {0.7160, 0.4240}};
  const double lse_causal[3] = {1.4142, 1.6318, 1.9659};
  for (bool causal : {false, true}) {
    std::vector<uint16_t> qs, ks, vs, os(6, 0xffff);
    std::vector<float> lse(3, NAN);
    for (int i = 0; i < 3; ++i)
      for (int d = 0; d < 2; ++d) {
        qs.push_back(fa::float_to_f16(float(q[i][d])));
        ks.push_back(fa::float_to_f16(float(k[i][d])));
        vs.push_back(fa::float_to_f16(float(v[i][d])));
      }
    fa::AttnParams p;
    p.batch = p.heads_q = p.heads_kv = 1;
    p.seqlen_q = p.seqlen_k = 3;
    p.head_dim = 2;
    p.scale = static_cast<float>(fa::default_scale(2));
    p.causal = causal;
    p.q = qs.data();
    p.k = ks.data();
    p.v = vs.data();
    p.o = os.data();
    p.lse = lse.data();
    fa::set_contiguous_strides(p);
    try {
      fa::run_forward(fa::test::lesson_under_test(), p);
    } catch (const fa::NotImplemented& e) {
      FAIL(std::string(e.what()));
    }
    for (int i = 0; i < 3; ++i) {
      CHECK(std::fabs(lse[i] - (causal ? lse_causal : lse_full)[i]) <= 1e-4);
      for (int d = 0; d < 2; ++d)
        CHECK_MESSAGE(std::fabs(fa::f16_to_float(os[i * 2 + d]) - (causal ? o_causal : o_full)[i][d]) <= 1e-3,
                      (causal ? "causal" : "non-causal"), " O(", i, ", ", d, ") = ", fa::f16_to_float(os[i * 2 + d]));
    }
  }
}
