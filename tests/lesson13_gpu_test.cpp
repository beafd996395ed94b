// Lesson 13 on the GPU: every step of the schedule against the fp64 reference (the forward suite
// runs the default step in depth), and the persistent grid (step 4) with a few blocks only, so
// that each block takes many work tiles: heavy and light causal ones, tails, heads of different
// K/V heads and tiles that see no key. With one block per SM the suite's small shapes give each
// block one tile, and what a block must reset or carry between tiles would go untested.
#include <doctest/doctest.h>

#include <utility>

#include "check.hpp"

void fa_lesson13_forward_step(const fa::AttnParams& p, int step, int max_blocks, cudaStream_t stream);

namespace {
int g_step = 0, g_blocks = 0;
void forward_with_step(const fa::AttnParams& p, cudaStream_t stream) { fa_lesson13_forward_step(p, g_step, g_blocks, stream); }
}  // namespace

TEST_CASE("lesson13: every step of the schedule matches the reference") {
  fa::LessonInfo lesson = fa::test::lesson_under_test();
  lesson.forward = &forward_with_step;
  g_blocks = 0;
  for (int step = 1; step <= 4; ++step) {
    g_step = step;
    for (int d : {64, 128})
      for (fa::DType t : {fa::DType::kF16, fa::DType::kBF16})
        for (bool causal : {false, true})
          for (auto [sq, sk] : {std::pair{1, 1}, std::pair{129, 129}, std::pair{70, 300}, std::pair{300, 130}, std::pair{640, 1000}}) {
            fa::test::Case c;
            c.heads_q = 2;
            c.heads_kv = 1;
            c.seqlen_q = sq;
            c.seqlen_k = sk;
            c.head_dim = d;
            c.dtype = t;
            c.causal = causal;
            INFO("step ", step);
            FA_CHECK_OUTCOME(fa::test::check_forward(lesson, c));
          }
  }
}

TEST_CASE("lesson13: the persistent grid with fewer blocks than work tiles") {
  fa::LessonInfo lesson = fa::test::lesson_under_test();
  lesson.forward = &forward_with_step;
  g_step = 4;
  for (int blocks : {1, 2, 5})
    for (int d : {64, 128})
      for (bool causal : {false, true})
        // 2 x 6 heads of 2 K/V heads; 700 x 700 (6 query tiles of 1 to 6 key tiles, causal) and
        // 500 x 300 (causal: the first two query tiles see no key).
        for (auto [sq, sk] : {std::pair{700, 700}, std::pair{500, 300}}) {
          fa::test::Case c;
          c.batch = 2;
          c.heads_q = 6;
          c.heads_kv = 2;
          c.seqlen_q = sq;
          c.seqlen_k = sk;
          c.head_dim = d;
          c.dtype = d == 64 ? fa::DType::kBF16 : fa::DType::kF16;
          c.causal = causal;
          g_blocks = blocks;
          INFO(blocks, " blocks");
          FA_CHECK_OUTCOME(fa::test::check_forward(lesson, c));
        }
  g_blocks = 0;
}

TEST_CASE("lesson13: a step outside 1-4 or a negative block cap is rejected before launch") {
  fa::LessonInfo lesson = fa::test::lesson_under_test();
  lesson.forward = &forward_with_step;
  fa::test::Case c;
  c.seqlen_q = c.seqlen_k = 64;
  g_blocks = 0;
  g_step = 5;
  FA_CHECK_OUTCOME(fa::test::check_rejected(lesson, c, [](fa::AttnParams&) {}, "steps 1 to 4"));
  g_step = 4;
  g_blocks = -1;
  FA_CHECK_OUTCOME(fa::test::check_rejected(lesson, c, [](fa::AttnParams&) {}, "max_blocks must be >= 0"));
  g_blocks = 0;
}

TEST_CASE("lesson13: a batch above 65535 runs on the persistent grid and is rejected by steps 1-3") {
  fa::LessonInfo lesson = fa::test::lesson_under_test();
  lesson.forward = &forward_with_step;
  fa::test::Case c;
  c.batch = 66000;  // past grid z's 65535: steps 1-3 cannot launch it, step 4 takes it as work tiles
  c.seqlen_q = c.seqlen_k = 3;
  c.causal = true;
  g_blocks = 0;
  g_step = 4;
  FA_CHECK_OUTCOME(fa::test::check_forward(lesson, c));
  g_step = 3;
  FA_CHECK_OUTCOME(fa::test::check_rejected(lesson, c, [](fa::AttnParams&) {}, "at most 65535"));
  g_step = 4;
}
