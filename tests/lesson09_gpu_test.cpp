// Lesson 09 on the GPU: every variant, the RoPE paths (fused on two tile shapes, and rotate-outside
// + the same attention kernel), against the fp64 reference (RoPE, then attention), the README's
// worked example, determinism, and the RoPE requests that must be refused before any launch. The
// forward suite runs the same kernel without RoPE.
#include <doctest/doctest.h>

#include <cmath>
#include <iterator>
#include <string>
#include <vector>

#include "check.hpp"
#include "fa/buffer.hpp"
#include "fa/cuda_check.hpp"
#include "fa/half.hpp"
#include "fa/rope.hpp"

namespace {

using fa::DType;
using fa::test::Case;

// The lesson's variants (its LessonInfo): the fused path on two tile shapes, and rotate-outside.
const char* const kFused[] = {"fused", "small-tiles"};
const char* const kPaths[] = {"fused", "outside", "small-tiles"};  // the declared order

Case rope_case(int sq, int sk, int d, DType t, bool causal) {
  Case c = fa::test::dense_case(sq, sk, d, t, causal);
  c.rope_base = fa::kRopeBase;
  return c;
}

void run_shapes(const char* variant) {
  const fa::LessonInfo& lesson = fa::test::lesson_under_test();
  for (DType t : {DType::kF16, DType::kBF16})
    for (int d : {64, 128})
      for (bool causal : {false, true}) {
        for (auto [sq, sk] : {std::pair{1, 1}, std::pair{17, 17}, std::pair{128, 128}, std::pair{129, 129},
                              std::pair{1000, 1000}, std::pair{1, 128}, std::pair{70, 300}, std::pair{129, 200}}) {
          Case c = rope_case(sq, sk, d, t, causal);
          c.variant = variant;
          FA_CHECK_OUTCOME(fa::test::check_forward(lesson, c));
        }
        // Several batches and heads with different data, grouped-query heads, and a
        // (batch, seqlen, heads, dim) layout: the tables are indexed by position only.
        Case c = rope_case(67, 150, d, t, causal);
        c.batch = 2;
        c.heads_q = 4;
        c.heads_kv = 2;
        c.bshd = true;
        c.variant = variant;
        FA_CHECK_OUTCOME(fa::test::check_forward(lesson, c));
      }
}

}  // namespace

TEST_CASE("lesson09: fused RoPE matches the reference") {
  // These tests run every variant the lesson declares: a new one must be added to kPaths.
  fa::test::check_declared_variants({std::begin(kPaths), std::end(kPaths)});
  for (const char* v : kFused) run_shapes(v);
}
TEST_CASE("lesson09: rotate-outside matches the reference") { run_shapes("outside"); }

TEST_CASE("lesson09: both paths on adversarial inputs and a long sequence") {
  const fa::LessonInfo& lesson = fa::test::lesson_under_test();
  for (const char* path : kPaths) {
    for (auto pattern : {fa::test::Pattern::kLargePositive, fa::test::Pattern::kLargeNegative,
                         fa::test::Pattern::kMaxInLastTile, fa::test::Pattern::kAllEqual})
      for (bool causal : {false, true}) {
        Case c = rope_case(130, 200, 128, DType::kF16, causal);
        c.pattern = pattern;
        c.variant = path;
        FA_CHECK_OUTCOME(fa::test::check_forward(lesson, c));
      }
    // Positions up to 8k: the fp32 tables must be indexed by position, not by a tile's row.
    for (bool causal : {false, true}) {
      Case c = rope_case(8192, 8192, 64, DType::kBF16, causal);
      c.sample_rows = {0, 1, 63, 64, 127, 128, 4095, 4096, 8000, 8191};
      c.variant = path;
      FA_CHECK_OUTCOME(fa::test::check_forward(lesson, c));
    }
  }
}

TEST_CASE("lesson09: both paths are bitwise deterministic") {
  for (const char* path : kPaths)
    for (bool causal : {false, true}) {
      Case c = rope_case(300, 300, 128, DType::kF16, causal);
      c.variant = path;
      FA_CHECK_OUTCOME(fa::test::check_deterministic(fa::test::lesson_under_test(), c));
    }
}

TEST_CASE("lesson09: the head_dim 4 worked example, on both paths") {
  // The README's worked example has head_dim 4: pairs (0, 2) and (1, 3), turning at theta = 1 and
  // 0.01.
  // At head_dim 64, pair 0 (columns 0, 32) turns at theta_0 = 1 and pair 16 (columns 16, 48) at
  // 10000^(-32/64) = 0.01: the example's four columns placed there, zeros elsewhere, give the
  // same rotated dot products. Q = K = V = the first head's 8 rows, causal, scale 1 (the example
  // gives raw scores). Its score matrix for positions 0-3 then fixes rows 0-3 of O and the LSE.
  const double x[8][4] = {{0.3581, 0.1616, 0.5714, 0.4795}, {0.5468, 0.3008, 0.9154, 0.3457},
                          {0.4201, 0.1406, 0.2273, 0.5269}, {0.1441, 0.1024, 0.8580, 0.8310},
                          {0.7828, 0.5347, 0.0038, 0.2535}, {0.3112, 0.3961, 0.2596, 0.3704},
                          {0.7789, 0.6267, 0.0297, 0.9068}, {0.9708, 0.1654, 0.0144, 0.4128}};
  const double scores[4][4] = {{0.7108, 0.5907, 0.3026, -0.1559}, {0.5907, 1.3469, 0.6789, -0.3526},
                               {0.3026, 0.6789, 0.5255, 0.3139}, {-0.1559, -0.3526, 0.3139, 1.4580}};
  const int D = 64, N = 8, cols[4] = {0, 16, 32, 48};
  const fa::LessonInfo& lesson = fa::test::lesson_under_test();
  for (const char* path : kPaths)
    for (DType t : {DType::kF16, DType::kBF16}) {
      std::vector<uint16_t> bits(N * D, fa::to_storage(t, 0.0));
      std::vector<double> v(N * D, 0.0);  // the rounded values, for the expected O
      for (int r = 0; r < N; ++r)
        for (int c = 0; c < 4; ++c) {
          bits[r * D + cols[c]] = fa::to_storage(t, x[r][c]);
          v[r * D + cols[c]] = fa::from_storage(t, bits[r * D + cols[c]]);
        }
      const fa::RopeTables tab = fa::rope_tables(N, D);
      fa::Buffer qkv(fa::Memory::kDevice, bits.size() * 2, "q = k = v"), o(fa::Memory::kDevice, bits.size() * 2, "o");
      fa::Buffer lse(fa::Memory::kDevice, N * 4, "lse"), cs(fa::Memory::kDevice, tab.cos.size() * 4, "cos"),
          sn(fa::Memory::kDevice, tab.sin.size() * 4, "sin");
      qkv.upload(bits.data(), bits.size() * 2);
      cs.upload(tab.cos.data(), tab.cos.size() * 4);
      sn.upload(tab.sin.data(), tab.sin.size() * 4);
      o.poison();
      lse.poison();
      fa::AttnParams p;
      p.batch = p.heads_q = p.heads_kv = 1;
      p.seqlen_q = p.seqlen_k = N;
      p.head_dim = D;
      p.dtype = t;
      p.causal = true;
      p.scale = 1.f;
      p.q = p.k = p.v = qkv.data();
      p.o = o.data();
      p.lse = static_cast<float*>(lse.data());
      p.rope_cos = static_cast<const float*>(cs.data());
      p.rope_sin = static_cast<const float*>(sn.data());
      p.rope_positions = N;
      fa::set_contiguous_strides(p);
      p.variant = fa::variant_index(lesson, path);
      try {
        fa::run_forward(lesson, p);
      } catch (const fa::NotImplemented& e) {
        FAIL(std::string(e.what()));
      }
      FA_CUDA_CHECK(cudaDeviceSynchronize());
      const std::vector<uint16_t> obits = o.to_host<uint16_t>();
      const std::vector<float> got_lse = lse.to_host<float>();
      // The printed scores carry 5e-5, the 16-bit inputs ~2e-4 (fp16) or ~2e-3 (bf16) per score;
      // a wrong angle or pairing moves them by 1e-1 or more.
      const double tol = t == DType::kF16 ? 2e-3 : 1e-2;
      for (int i = 0; i < 4; ++i) {
        double m = -1e300, sum = 0;
        for (int j = 0; j <= i; ++j) m = std::max(m, scores[i][j]);
        for (int j = 0; j <= i; ++j) sum += std::exp(scores[i][j] - m);
        const double want_lse = m + std::log(sum);
        INFO("variant ", std::string(path), ", ", std::string(fa::name(t)), ", row ", i);
        CHECK(std::fabs(got_lse[i] - want_lse) < tol);
        for (int c = 0; c < 4; ++c) {
          double want = 0;
          for (int j = 0; j <= i; ++j) want += std::exp(scores[i][j] - want_lse) * v[j * D + cols[c]];
          CHECK(std::fabs(fa::from_storage(t, obits[i * D + cols[c]]) - want) < tol);
        }
      }
    }
}

TEST_CASE("lesson09: RoPE requests it cannot serve are rejected before any launch") {
  const fa::LessonInfo& lesson = fa::test::lesson_under_test();
  for (const char* path : kPaths) {
    Case c = rope_case(64, 64, 64, DType::kF16, true);
    c.variant = path;
    FA_CHECK_OUTCOME(fa::test::check_rejected(lesson, c, [](fa::AttnParams& p) { p.rope_positions = 63; }, "positions"));
    FA_CHECK_OUTCOME(fa::test::check_rejected(lesson, c, [](fa::AttnParams& p) { p.rope_sin = nullptr; }, "rope_sin"));
    FA_CHECK_OUTCOME(fa::test::check_rejected(lesson, c, [](fa::AttnParams& p) { p.rope_cos += 1; }, "rope_cos must be aligned"));
    FA_CHECK_OUTCOME(fa::test::check_rejected(lesson, c, [](fa::AttnParams& p) { p.seqlen_k = 32; p.rope_positions = 32; },
                                              "seqlen_q <= seqlen_k"));
  }
}
