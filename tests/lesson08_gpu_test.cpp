// Lesson 08 on the GPU: every configuration in tiles.hpp, not only the one this GPU uses, against
// the fp64 reference (the forward suite covers the chosen ones in depth). A configuration that is
// wrong would otherwise wait, untested, for the GPU that picks it.
#include <doctest/doctest.h>

#include <string>

#include "check.hpp"
#include "tiles.hpp"

void fa_lesson08_forward_config(const fa::AttnParams& p, int index, cudaStream_t stream);

namespace {
int g_config = 0;
void forward_with_config(const fa::AttnParams& p, cudaStream_t stream) { fa_lesson08_forward_config(p, g_config, stream); }
}  // namespace

TEST_CASE("lesson08: every tile configuration matches the reference") {
  fa::LessonInfo lesson = fa::test::lesson_under_test();
  lesson.forward = &forward_with_config;
  for (int i = 0; i < lesson08::kNumConfigs; ++i) {
    g_config = i;
    const lesson08::Config& cfg = lesson08::kConfigs[i];
    for (fa::DType t : {fa::DType::kF16, fa::DType::kBF16})
      for (bool causal : {false, true})
        for (auto [sq, sk] : {std::pair{1, 1}, std::pair{129, 129}, std::pair{70, 300}, std::pair{300, 130}}) {
          fa::test::Case c;
          c.heads_q = 2;
          c.heads_kv = 1;
          c.seqlen_q = sq;
          c.seqlen_k = sk;
          c.head_dim = cfg.head_dim;
          c.dtype = t;
          c.causal = causal;
          INFO("configuration ", i, " (", cfg.rows, " x ", cfg.keys, ", ", cfg.warps, " warps, ", cfg.stages, " stages)");
          FA_CHECK_OUTCOME(fa::test::check_forward(lesson, c));
        }
  }
}
