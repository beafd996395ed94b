// Lesson 11 on the GPU: every configuration in tiles.hpp with both dQ strategies (fp32 atomics,
// and the deterministic second pass), not only the ones this GPU uses, against the fp64 reference
// gradients. The backward suite covers the chosen configuration in depth.
#include <doctest/doctest.h>

#include <string>

#include "check.hpp"
#include "tiles.hpp"

void fa_lesson11_backward_config(const fa::AttnParams& p, int index, bool atomic_dq, cudaStream_t stream);

namespace {
int g_config = 0;
bool g_atomic = true;
void backward_with_config(const fa::AttnParams& p, cudaStream_t stream) {
  fa_lesson11_backward_config(p, g_config, g_atomic, stream);
}
}  // namespace

TEST_CASE("lesson11: every tile configuration and both dQ strategies match the reference") {
  fa::LessonInfo lesson = fa::test::lesson_under_test();
  lesson.backward = &backward_with_config;
  for (int i = 0; i < lesson11::kNumConfigs; ++i)
    for (bool atomic : {true, false}) {
      g_config = i;
      g_atomic = atomic;
      const lesson11::Config& cfg = lesson11::kConfigs[i];
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
            INFO("configuration ", i, " (", cfg.keys, " keys x ", cfg.rows, " rows, ", cfg.warps, " warps), dQ by ",
                 atomic ? "atomics" : "second pass");
            FA_CHECK_OUTCOME(fa::test::check_backward(lesson, c));
          }
    }
}
