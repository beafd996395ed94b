// Lesson 14 on the GPU, beyond the backward suite: the shapes where a K/V-stationary Hopper
// backward goes wrong quietly. Many key blocks adding into one query tile's dQ (the dQ writers'
// bulk reduce-adds, and the ordered ones of the deterministic mode), the group loop of GQA and MQA
// over several query tiles, one query against many keys and the reverse, rows that see no key,
// tails in both lengths at once, the third dQ path (part 1's atomics), and the dQ staging buffers
// under a writer that lags (stress mode); both dtypes and head dims, against the fp64 reference
// gradients.
#include <doctest/doctest.h>

#include <cstdlib>

#include "check.hpp"

namespace {

fa::test::Case make(int sq, int sk, int d, fa::DType t, bool causal, int hq, int hkv) {
  fa::test::Case c;
  c.batch = 1;
  c.heads_q = hq;
  c.heads_kv = hkv;
  c.seqlen_q = sq;
  c.seqlen_k = sk;
  c.head_dim = d;
  c.dtype = t;
  c.causal = causal;
  return c;
}

}  // namespace

TEST_CASE("lesson14: many key blocks per query tile, GQA and MQA groups, tails in both lengths") {
  // 333 = 5 x 64 + 13 queries on 400 = 3 x 128 + 16 keys: four key blocks add into each query
  // tile's dQ, the last of each length a tail. Every (head dim, causal, dQ mode) once, the dtype
  // and the group (4 query heads on 1 K/V head, 6 on 2) alternating.
  const fa::LessonInfo& lesson = fa::test::lesson_under_test();
  int n = 0;
  for (int d : {64, 128})
    for (bool causal : {false, true})
      for (bool det : {false, true}) {
        const bool odd = n++ % 2 == 1;
        const fa::DType t = odd ? fa::DType::kBF16 : fa::DType::kF16;
        const int hq = odd ? 6 : 4, hkv = odd ? 2 : 1;
        INFO(hq, " query heads on ", hkv, " kv heads, ", det ? "deterministic" : "bulk", " dQ");
        FA_CHECK_OUTCOME(fa::test::check_backward(lesson, make(333, 400, d, t, causal, hq, hkv), det));
      }
}

TEST_CASE("lesson14: one query against many keys, many queries against one key, rows that see no key") {
  // Causal and bottom-right aligned, every key is seen by the last row, so every key block visits
  // at least one query tile; with 300 queries on 130 keys, rows 0-169 see no key (LSE = +inf) and
  // the key blocks start at different query tiles.
  const fa::LessonInfo& lesson = fa::test::lesson_under_test();
  for (int d : {64, 128})
    for (bool det : {false, true})
      for (auto [sq, sk] : {std::pair{1, 700}, std::pair{700, 1}, std::pair{300, 130}}) {
        INFO(sq, " queries on ", sk, " keys, ", det ? "deterministic" : "bulk", " dQ");
        FA_CHECK_OUTCOME(fa::test::check_backward(lesson, make(sq, sk, d, fa::DType::kF16, true, 2, 1), det));
      }
}

namespace {

// Sets an environment variable for one test case's scope.
struct ScopedEnv {
  const char* name;
  ScopedEnv(const char* n, const char* v) : name(n) { setenv(n, v, 1); }
  ~ScopedEnv() { unsetenv(name); }
};

}  // namespace

TEST_CASE("lesson14: dQ by atomics (FA_LESSON14_DQ=atomic) matches the reference too") {
  // The default adds dQ with the dQ writers' bulk reduce-adds and the deterministic mode with the
  // ordered ones; part 1's atomics from the consumers are the third path (README, "dQ"): the same
  // shapes as above, once.
  ScopedEnv env("FA_LESSON14_DQ", "atomic");
  const fa::LessonInfo& lesson = fa::test::lesson_under_test();
  for (int d : {64, 128})
    for (bool causal : {false, true}) {
      INFO("head dim ", d, ", causal ", causal);
      FA_CHECK_OUTCOME(fa::test::check_backward(lesson, make(333, 400, d, d == 64 ? fa::DType::kF16 : fa::DType::kBF16, causal, 6, 2)));
      FA_CHECK_OUTCOME(fa::test::check_backward(lesson, make(1, 700, d, fa::DType::kF16, causal, 4, 1)));
    }
}

TEST_CASE("lesson14: deterministic mode with more key blocks than fit on the GPU, and bitwise across runs") {
  // 64 queries on 40,000 keys: 313 key blocks of one head, more than a GPU holds at once (one block
  // per SM), so blocks wait for their turn to add dQ while others are not yet running. Blocks may
  // only wait for blocks launched before them, or this hangs (ctest's timeout ends it).
  const fa::LessonInfo& lesson = fa::test::lesson_under_test();
  for (int d : {64, 128})
    for (bool causal : {false, true}) {
      INFO("head dim ", d, ", causal ", causal);
      FA_CHECK_OUTCOME(fa::test::check_backward(lesson, make(64, 40000, d, fa::DType::kF16, causal, 1, 1), true));
    }
  // Bitwise across runs where the suite does not look: six query heads on two K/V heads, four key
  // blocks per query tile, at head dim 64 in bf16 and 128 in fp16.
  for (int d : {64, 128})
    for (bool causal : {false, true}) {
      INFO("head dim ", d, ", causal ", causal);
      fa::test::Case c = make(333, 400, d, d == 64 ? fa::DType::kBF16 : fa::DType::kF16, causal, 6, 2);
      FA_CHECK_OUTCOME(fa::test::check_backward_deterministic(lesson, c));
    }
}

TEST_CASE("lesson14: dQ staging under a lagging writer (FA_LESSON14_STRESS=1), default and deterministic") {
  // The dQ writers wait up to about 8 us before each add, so the consumers run ahead and reach each
  // staging buffer while the previous share in it may still be unread: a buffer released too early
  // (before its bulk reduce-add has read it) loses a share and adds another twice. Four key blocks
  // per query tile, six query tiles per head, GQA 4/1: 24 tiles a block, so each buffer is reused.
  ScopedEnv env("FA_LESSON14_STRESS", "1");
  const fa::LessonInfo& lesson = fa::test::lesson_under_test();
  for (int d : {64, 128})
    for (bool det : {false, true}) {
      INFO("head dim ", d, ", ", det ? "deterministic" : "bulk", " dQ");
      FA_CHECK_OUTCOME(fa::test::check_backward(lesson, make(333, 400, d, fa::DType::kF16, d == 128, 4, 1), det));
    }
}
