// Lesson 14 on the GPU, beyond the backward suite: the shapes where a K/V-stationary Hopper
// backward goes wrong quietly. Many key blocks adding into one query tile's dQ (atomics, and the
// ordered adds of the deterministic mode), the group loop of GQA and MQA over several query tiles,
// one query against many keys and the reverse, rows that see no key, tails in both lengths at
// once, and the third dQ path (the unordered bulk reduce-add); both dtypes and head dims, against
// the fp64 reference gradients.
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
        INFO(hq, " query heads on ", hkv, " kv heads, ", det ? "deterministic" : "atomic", " dQ");
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
        INFO(sq, " queries on ", sk, " keys, ", det ? "deterministic" : "atomic", " dQ");
        FA_CHECK_OUTCOME(fa::test::check_backward(lesson, make(sq, sk, d, fa::DType::kF16, true, 2, 1), det));
      }
}

TEST_CASE("lesson14: dQ by the bulk reduce-add (FA_LESSON14_DQ=bulk) matches the reference too") {
  // The default adds dQ with atomics and the deterministic mode with the ordered bulk reduce-add;
  // the unordered bulk reduce-add is the third path (README, "dQ"): the same shapes as above, once.
  struct Env {
    Env() { setenv("FA_LESSON14_DQ", "bulk", 1); }
    ~Env() { unsetenv("FA_LESSON14_DQ"); }
  } env;
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
  for (bool causal : {false, true}) {
    INFO("causal ", causal);
    FA_CHECK_OUTCOME(fa::test::check_backward(lesson, make(64, 40000, 64, fa::DType::kF16, causal, 1, 1), true));
  }
  // Bitwise across runs where the suite does not look: head dim 64, bf16, six query heads on two
  // K/V heads, four key blocks per query tile.
  for (bool causal : {false, true}) {
    fa::test::Case c = make(333, 400, 64, fa::DType::kBF16, causal, 6, 2);
    FA_CHECK_OUTCOME(fa::test::check_backward_deterministic(lesson, c));
  }
}
