// The shared backward suite (lessons 10 on): compiled once and linked into every backward
// lesson's test executable (fa_add_lesson BACKWARD_SUITE) and its CPU model's. Each run takes O
// and the LSE from the fp64 reference (a correct forward's outputs; the forward suites check the
// forward), poisons dQ, dK and dV with NaN, guards every buffer, and compares the gradients with
// the fp64 reference gradients on the same rounded inputs three ways (tests/gradients.cpp,
// check_gradient): elementwise atol + rtol |ref|, the relative error of each tensor, and
// FlashAttention-2's rule (at most 3x the error of a naive 16-bit computation).
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "check.hpp"
#include "fa/params.hpp"

namespace {

using fa::DType;
using fa::test::Case;
using fa::test::Direction;
using fa::test::Pattern;

const fa::LessonInfo& lesson() { return fa::test::lesson_under_test(); }
const fa::test::Requirements& req() { return fa::test::required(); }

std::vector<DType> dtypes() {
  std::vector<DType> t;
  if (req().features.fp16 || lesson().features.fp16) t.push_back(DType::kF16);
  if (req().features.bf16 || lesson().features.bf16) t.push_back(DType::kBF16);
  return t;
}

Case make(int sq, int sk, int d, DType t, bool causal, Pattern p = Pattern::kRandn) {
  Case c = fa::test::dense_case(sq, sk, d, t, causal);
  c.pattern = p;
  return c;
}

// Both modes of a lesson: the default (which may use atomics) and the deterministic one.
void check_both_modes(const Case& c) {
  FA_CHECK_OUTCOME(fa::test::check_backward(lesson(), c, false));
  FA_CHECK_OUTCOME(fa::test::check_backward(lesson(), c, true));
}

void run_pattern(Pattern p) {
  for (DType t : dtypes())
    for (int d : req().head_dims)
      for (bool causal : {false, true}) {
        Case c = make(130, 200, d, t, causal, p);
        c.heads_q = c.heads_kv = 2;
        FA_CHECK_OUTCOME(fa::test::check_backward(lesson(), c));
      }
}

// Varlen batches (Case::set_lengths), smaller than the forward suite's: the naive computation of
// the gradient check is O(N^2 head_dim) per head on the CPU.
struct Lengths {
  std::vector<int> q, k;
  int heads_q, heads_kv;
};
const std::vector<Lengths> kVarlenSets = {
    // An empty sequence, a length-1 one, lengths on and off the 64- and 128-row tile edges.
    {{1, 17, 64, 130, 0, 100}, {1, 17, 64, 130, 0, 100}, 2, 2},
    // Key lengths unlike the query lengths: causal rows that see no key (64 queries, 1 key), a
    // sequence without keys (3, 0) and one without queries (0, 7).
    {{5, 100, 0, 64, 3}, {30, 100, 7, 1, 0}, 2, 2},
    {{100, 33, 65}, {64, 90, 129}, 4, 2},  // grouped-query heads: dK and dV sum two heads
};

Case varlen_case(const std::vector<int>& q, const std::vector<int>& k, int hq, int hkv, int d, DType t, bool causal) {
  Case c = make(1, 1, d, t, causal);
  c.set_lengths(q, k);
  c.heads_q = hq;
  c.heads_kv = hkv;
  return c;
}

// `check` where the lesson must or does support the case, else its clear rejection.
template <class Check>
void check_or_rejected(const Case& c, Check&& check) {
  const std::string lacks = fa::test::rejection_expected(lesson(), req(), c);
  if (lacks.empty())
    check(c);
  else
    FA_CHECK_OUTCOME(fa::test::check_feature_rejected(lesson(), c, lacks, Direction::kBackward));
}

}  // namespace

TEST_CASE("backward: declares the required features") {
  const std::string missing = fa::test::missing_features(lesson(), req());
  CHECK_MESSAGE(missing.empty(), "lesson ", std::string(lesson().id), " must support: ", missing);
  const bool has_backward = lesson().backward != nullptr;
  CHECK_MESSAGE(has_backward, "lesson ", std::string(lesson().id), " has no backward entry point");
}

TEST_CASE("backward: sequence lengths 1 17 127 128 129 300") {
  for (DType t : dtypes())
    for (int d : req().head_dims)
      for (bool causal : {false, true})
        for (int n : {1, 17, 127, 128, 129, 300}) FA_CHECK_OUTCOME(fa::test::check_backward(lesson(), make(n, n, d, t, causal)));
}

TEST_CASE("backward: several batches and heads with different data") {
  for (DType t : dtypes())
    for (bool causal : {false, true}) {
      Case c = make(67, 67, req().head_dims.front(), t, causal);
      c.batch = 3;
      c.heads_q = c.heads_kv = 5;
      check_both_modes(c);
    }
}

TEST_CASE("backward: seqlen_q differs from seqlen_k") {
  for (DType t : dtypes())
    for (int d : req().head_dims)
      for (bool causal : {false, true})
        for (auto [sq, sk] : {std::pair{1, 128}, std::pair{17, 300}, std::pair{129, 64}, std::pair{300, 17}, std::pair{64, 1}}) {
          Case c = make(sq, sk, d, t, causal);
          c.batch = 2;
          FA_CHECK_OUTCOME(fa::test::check_backward(lesson(), c));
        }
}

TEST_CASE("backward: fully masked rows (LSE = +inf) give finite gradients") {
  // Causal with seqlen_q > seqlen_k: the first seqlen_q - seqlen_k rows see no key, their LSE is
  // +inf and their P must be exp(s - inf) = 0, not NaN; their dQ rows are 0 and they add nothing
  // to dK and dV.
  for (DType t : dtypes())
    for (int d : req().head_dims)
      for (auto [sq, sk] : {std::pair{100, 30}, std::pair{257, 128}, std::pair{5, 1}})
        FA_CHECK_OUTCOME(fa::test::check_backward(lesson(), make(sq, sk, d, t, true)));
}

TEST_CASE("backward: varlen batches or a clear rejection") {
  for (DType t : dtypes())
    for (int d : req().head_dims)
      for (bool causal : {false, true})
        for (const Lengths& l : kVarlenSets)
          check_or_rejected(varlen_case(l.q, l.k, l.heads_q, l.heads_kv, d, t, causal), check_both_modes);
}

TEST_CASE("backward: decay gate or a clear rejection") {
  // Causal only, as the gate is defined. Four heads: every gate magnitude of make_inputs (1, 0.1,
  // 0.01, 0). dg is checked like dQ, dK and dV.
  for (DType t : dtypes())
    for (int d : req().head_dims)
      for (auto [sq, sk] : {std::pair{1, 1}, std::pair{129, 129}, std::pair{300, 300}, std::pair{70, 200}, std::pair{200, 70}}) {
        Case c = make(sq, sk, d, t, true);
        c.batch = 2;
        c.heads_q = c.heads_kv = 4;
        c.gate = true;
        check_or_rejected(c, [](const Case& x) { FA_CHECK_OUTCOME(fa::test::check_backward(lesson(), x)); });
      }
}

TEST_CASE("backward: GQA with varlen and the gate together") {
  // Six query heads on two kv heads (all four gate magnitudes); every sequence has its own query
  // and key lengths: no queries (0, 5), length 1 against 3 keys, more keys than queries, more
  // queries than keys (rows that see no key), and no keys at all (9, 0). Both modes, and the
  // deterministic one bitwise across runs.
  for (DType t : dtypes())
    for (int d : req().head_dims) {
      Case c = varlen_case({0, 1, 70, 130, 9}, {5, 3, 200, 64, 0}, 6, 2, d, t, true);
      c.gate = true;
      check_or_rejected(c, [](const Case& x) {
        check_both_modes(x);
        FA_CHECK_OUTCOME(fa::test::check_backward_deterministic(lesson(), x));
      });
    }
}

TEST_CASE("backward: large positive logits") { run_pattern(Pattern::kLargePositive); }
TEST_CASE("backward: large negative logits") { run_pattern(Pattern::kLargeNegative); }
TEST_CASE("backward: row max in the last key tile") { run_pattern(Pattern::kMaxInLastTile); }
TEST_CASE("backward: all-equal scores") { run_pattern(Pattern::kAllEqual); }

TEST_CASE("backward: long sequence 2048") {
  // Long enough that dK and dV sum over 2048 queries: accumulators kept in 16 bits lose to the
  // naive computation here.
  for (bool causal : {false, true}) {
    Case c = make(2048, 2048, req().head_dims.back(), dtypes().front(), causal);
    check_both_modes(c);
  }
}

TEST_CASE("backward: deterministic mode is bitwise identical across runs") {
  for (bool causal : {false, true}) {
    Case c = make(1000, 1000, req().head_dims.back(), dtypes().front(), causal);
    c.heads_q = c.heads_kv = 2;
    FA_CHECK_OUTCOME(fa::test::check_backward_deterministic(lesson(), c));
  }
}

TEST_CASE("backward: grouped-query heads or a clear rejection") {
  for (auto [hq, hkv] : {std::pair{4, 2}, std::pair{6, 1}}) {
    Case c = make(129, 129, req().head_dims.front(), dtypes().front(), true);
    c.heads_q = hq;
    c.heads_kv = hkv;
    c.batch = 2;
    if (req().features.gqa || lesson().features.gqa)
      FA_CHECK_OUTCOME(fa::test::check_backward(lesson(), c));
    else
      FA_CHECK_OUTCOME(fa::test::check_feature_rejected(lesson(), c, "grouped-query", Direction::kBackward));
  }
}

TEST_CASE("backward: strided layout or a clear rejection") {
  Case c = make(77, 77, req().head_dims.front(), dtypes().front(), true);
  c.heads_q = c.heads_kv = 3;
  c.batch = 2;
  c.bshd = true;  // (batch, seqlen, heads, head_dim) for every tensor, gradients included
  if (req().features.any_strides || lesson().features.any_strides)
    FA_CHECK_OUTCOME(fa::test::check_backward(lesson(), c));
  else
    FA_CHECK_OUTCOME(fa::test::check_feature_rejected(lesson(), c, "contiguous", Direction::kBackward));
}

TEST_CASE("backward: bad input rejected before launch") {
  const Case c = make(64, 64, req().head_dims.front(), dtypes().front(), false);
  const auto bwd = Direction::kBackward;
  Case cd = c;
  cd.head_dim = lesson().features.head_dims.empty() ? 300 : 72;
  FA_CHECK_OUTCOME(fa::test::check_rejected(lesson(), cd, [](fa::AttnParams&) {}, "head_dim", bwd));
  FA_CHECK_OUTCOME(fa::test::check_rejected(lesson(), c, [](fa::AttnParams& p) { p.dout = nullptr; }, "dout is a null pointer", bwd));
  FA_CHECK_OUTCOME(fa::test::check_rejected(lesson(), c, [](fa::AttnParams& p) { p.dk = nullptr; }, "dk is a null pointer", bwd));
  FA_CHECK_OUTCOME(fa::test::check_rejected(lesson(), c, [](fa::AttnParams& p) { p.lse = nullptr; }, "lse is a null pointer", bwd));
  FA_CHECK_OUTCOME(fa::test::check_rejected(
      lesson(), c, [](fa::AttnParams& p) { p.dq = static_cast<char*>(p.dq) + 1; }, "aligned", bwd));
  FA_CHECK_OUTCOME(fa::test::check_rejected(lesson(), c, [](fa::AttnParams& p) { p.dv_stride.row = 0; }, "dv has invalid strides", bwd));
  FA_CHECK_OUTCOME(fa::test::check_rejected(lesson(), c, [](fa::AttnParams& p) { p.seqlen_q = 0; }, "seqlen_q must be >= 1", bwd));
  FA_CHECK_OUTCOME(fa::test::check_rejected(lesson(), c, [](fa::AttnParams& p) { p.scale = 0.f; }, "scale", bwd));
  if (lesson().features.gate) {  // dg is written as fp32: 2 bytes off must be refused, not written across
    Case cg = make(64, 64, req().head_dims.front(), dtypes().front(), true);
    cg.gate = true;
    FA_CHECK_OUTCOME(fa::test::check_rejected(
        lesson(), cg, [](fa::AttnParams& p) { p.dgate = reinterpret_cast<float*>(reinterpret_cast<char*>(p.dgate) + 2); },
        "dgate must be 4-byte aligned", bwd));
  }
}
