// Lesson 09's CPU tests: RoPE's positions and rotation (rope.hpp) against the fp64 reference and
// the README's worked example at head_dim 4, the runtime's fp32 tables against the reference's
// fp64 ones, and the copy plan that lets each thread rotate its own pairs: without a GPU.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "../08_pipelining/tiles.hpp"
#include "fa/half.hpp"
#include "fa/random.hpp"
#include "fa/rope.hpp"
#include "reference.hpp"
#include "rope.hpp"
#include "check.hpp"

namespace {

void require_started() { fa::test::require_started("09_rope_fusion", lesson09::kRopeTodosLeft); }

// Rotates one row of head_dim values with rotate_pairs, 8 pairs at a time (as the kernels do),
// with the runtime's fp32 tables.
std::vector<double> rotate_row(const std::vector<double>& x, int pos, const fa::RopeTables& t) {
  const int half = t.half;
  std::vector<double> y = x;
  for (int c = 0; c < half; c += 8) {
    const int n = std::min(8, half - c);
    float x1[8] = {}, x2[8] = {}, cs[8] = {}, sn[8] = {};
    for (int e = 0; e < n; ++e) {
      x1[e] = static_cast<float>(x[c + e]);
      x2[e] = static_cast<float>(x[c + e + half]);
      cs[e] = t.cos[size_t(pos) * half + c + e];
      sn[e] = t.sin[size_t(pos) * half + c + e];
    }
    lesson09::rotate_pairs<8>(x1, x2, cs, sn);
    for (int e = 0; e < n; ++e) y[c + e] = x1[e], y[c + e + half] = x2[e];
  }
  return y;
}

}  // namespace

TEST_CASE("lesson09: query positions align with the causal mask") {
  require_started();
  // The last query and the last key share a position whatever the lengths; equal lengths: i.
  for (auto [sq, sk] : {std::pair{1, 1}, std::pair{5, 5}, std::pair{1, 300}, std::pair{70, 300}, std::pair{128, 129}}) {
    CHECK_MESSAGE(lesson09::query_position(sq - 1, sq, sk) == sk - 1, "seqlen_q ", sq, ", seqlen_k ", sk);
    CHECK_MESSAGE(lesson09::query_position(0, sq, sk) == sk - sq, "seqlen_q ", sq, ", seqlen_k ", sk);
  }
  for (int i = 0; i < 10; ++i) CHECK(lesson09::query_position(i, 10, 10) == i);
}

TEST_CASE("lesson09: rotate_pairs reproduces the head_dim 4 worked example") {
  require_started();
  // The README's worked example: head_dim 4 (pairs (0, 2) and (1, 3), theta = 1 and 0.01), the
  // first head's rows at positions 0-3, and their rotated halves to 4 decimals.
  const double q[4][4] = {{0.3581, 0.1616, 0.5714, 0.4795}, {0.5468, 0.3008, 0.9154, 0.3457},
                          {0.4201, 0.1406, 0.2273, 0.5269}, {0.1441, 0.1024, 0.8580, 0.8310}};
  const double want1[4][2] = {{0.3581, 0.1616}, {-0.4748, 0.2973}, {-0.3815, 0.1300}, {-0.2637, 0.0774}};
  const double want2[4][2] = {{0.5714, 0.4795}, {0.9547, 0.3487}, {0.2874, 0.5296}, {-0.8291, 0.8337}};
  const fa::RopeTables t = fa::rope_tables(4, 4);
  for (int pos = 0; pos < 4; ++pos) {
    float x1[2] = {float(q[pos][0]), float(q[pos][1])}, x2[2] = {float(q[pos][2]), float(q[pos][3])};
    const float cs[2] = {t.cos[pos * 2], t.cos[pos * 2 + 1]}, sn[2] = {t.sin[pos * 2], t.sin[pos * 2 + 1]};
    lesson09::rotate_pairs<2>(x1, x2, cs, sn);
    for (int i = 0; i < 2; ++i) {
      CHECK_MESSAGE(std::fabs(x1[i] - want1[pos][i]) < 1e-4, "position ", pos, " first half ", i, ": ", x1[i]);
      CHECK_MESSAGE(std::fabs(x2[i] - want2[pos][i]) < 1e-4, "position ", pos, " second half ", i, ": ", x2[i]);
    }
  }
}

TEST_CASE("lesson09: rotate_pairs matches the reference rotation") {
  require_started();
  // fp32 rotation with fp32 tables against fp64 throughout, at positions up to 16k: each value
  // is a 2-term fp32 expression of |x| <= ~4, so a few fp32 ulps (1e-6 absolute is ~10 of them).
  fa::Rng rng(fa::seed_for("lesson09 rotate_pairs"));
  for (int D : {64, 128}) {
    const int positions = 16384;
    const fa::RopeTables t = fa::rope_tables(positions, D);
    for (int pos : {0, 1, 2, 63, 64, 1000, 4095, 16383}) {
      std::vector<double> x(D);
      for (double& v : x) v = static_cast<float>(rng.normal());
      std::vector<double> want = x;
      fa::ref::rope_rotate(want, 1, D, {pos}, 10000.0);
      const std::vector<double> got = rotate_row(x, pos, t);
      double worst = 0;
      for (int i = 0; i < D; ++i) worst = std::max(worst, std::fabs(got[i] - want[i]));
      CHECK_MESSAGE(worst < 1e-6, "D = ", D, ", position ", pos, ": max |fp32 - fp64| = ", worst);
    }
  }
}

TEST_CASE("lesson09: rotate_pairs computes the course's rotation bit for bit") {
  require_started();
  // The checks round exactly what the course defines (fa::rope_rotate_rounded, rope.hpp): a
  // rotation that rounds differently fails here, deterministically, instead of flipping a 16-bit
  // value now and then on the GPU.
  fa::Rng rng(fa::seed_for("lesson09 bit for bit"));
  for (fa::DType t : {fa::DType::kF16, fa::DType::kBF16}) {
    const int D = 128, rows = 2048;
    const fa::RopeTables tables = fa::rope_tables(rows, D);
    std::vector<double> x(size_t(rows) * D);
    for (double& v : x) v = fa::from_storage(t, fa::to_storage(t, 2 * rng.normal()));
    std::vector<double> want = x;
    fa::rope_rotate_rounded(want, D, rows, 0, tables, t);
    int differ = 0;
    for (int r = 0; r < rows; ++r) {
      const std::vector<double> row(x.begin() + size_t(r) * D, x.begin() + size_t(r + 1) * D);
      const std::vector<double> got = rotate_row(row, r, tables);
      for (int i = 0; i < D; ++i)
        differ += fa::from_storage(t, fa::to_storage(t, got[i])) != want[size_t(r) * D + i];
    }
    CHECK_MESSAGE(differ == 0, fa::name(t), ": ", differ, " of ", rows * D,
                  " rotated values round differently from the definition (fmaf(x1, cos, -mul_rn(x2, sin)), ...)");
  }
}

TEST_CASE("lesson09: the fp32 tables are the fp64 angles rounded once") {
  require_started();  // (checks the course's tables, not the student's code: no points before TODO 1)
  // fa::rope_tables (what the kernels read) against the reference's fp64 tables: each entry is
  // the fp64 value rounded to fp32, so within half an fp32 ulp of a value <= 1 (2^-25 ~ 3e-8).
  for (int D : {4, 64, 128}) {
    const int positions = 16384;
    const fa::RopeTables t = fa::rope_tables(positions, D);
    const fa::ref::RopeTables want = fa::ref::rope_tables(positions, D);
    REQUIRE(t.cos.size() == want.cos.size());
    double worst = 0;
    for (size_t i = 0; i < t.cos.size(); ++i)
      worst = std::max({worst, std::fabs(t.cos[i] - want.cos[i]), std::fabs(t.sin[i] - want.sin[i])});
    CHECK_MESSAGE(worst <= 0x1p-25, "D = ", D, ": max |fp32 table - fp64| = ", worst);
  }
  CHECK_THROWS_AS(fa::rope_tables(0, 64), std::invalid_argument);
  CHECK_THROWS_AS(fa::rope_tables(16, 63), std::invalid_argument);
}

TEST_CASE("lesson09: each thread copies whole pairs and the tile exactly once") {
  require_started();
  // For every configuration of lesson 08's tiles.hpp, Q (rows x D) and K (keys x D) tiles:
  // pair_task's chunk and its partner D/2 further cover every chunk of the tile exactly once,
  // and each step stays a whole number of swizzle groups (rows move by a multiple of 8).
  for (int i = 0; i < lesson08::kNumConfigs; ++i) {
    const lesson08::Config& c = lesson08::kConfigs[i];
    const int threads = c.warps * 32, D = c.head_dim, pairs = D / 16;
    REQUIRE((threads / pairs) % 8 == 0);
    for (int rows : {c.rows, c.keys}) {
      std::vector<int> hits(size_t(rows) * (D / 8), 0);
      for (int step = 0; step < rows / (threads / pairs); ++step)
        for (int x = 0; x < threads; ++x) {
          const lesson09::PairTask t = lesson09::pair_task(x, step, threads, D);
          REQUIRE((t.row >= 0 && t.row < rows && t.chunk >= 0 && t.chunk < pairs));
          ++hits[size_t(t.row) * (D / 8) + t.chunk];
          ++hits[size_t(t.row) * (D / 8) + t.chunk + pairs];
        }
      int wrong = 0;
      for (int h : hits) wrong += h != 1;
      CHECK_MESSAGE(wrong == 0, "configuration ", i, ", a ", rows, " x ", D, " tile: ", wrong,
                    " chunks copied other than once");
    }
  }
}

TEST_CASE("lesson09: a chunk's partner is one XOR away in the swizzled tile") {
  require_started();  // (given code: no points before TODO 1)
  for (int D : {64, 128})
    for (int r = 0; r < 128; ++r)
      for (int col = 0; col < D / 2; ++col)
        REQUIRE_MESSAGE(lesson09::partner_offset(lesson08::tile_offset(r, col, D), D) ==
                            lesson08::tile_offset(r, col + D / 2, D),
                        "D = ", D, ", row ", r, ", column ", col);
}
