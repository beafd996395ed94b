// Your copy of this lesson, generated from solutions/08_pipelining/kernel.cu by fa-skeleton.
// Lesson 08: feeding the tensor cores. Lesson 07's kernel computes with mma.sync but waits for
// every K/V tile it loads, and its ldmatrix reads collide in shared-memory banks. Here:
//   1. cp.async copies K/V tiles global -> shared without passing through registers, and a ring
//      of `stages` buffers keeps the next tiles in flight while the current one is computed;
//   2. the tiles are stored swizzled (tiles.hpp): ldmatrix reads 8 rows in 8 different bank
//      groups, no conflicts, with 16-byte accesses everywhere;
//   3. each warp owns 32 query rows (two m16 tiles) instead of 16, so every K and V fragment read
//      from shared memory feeds two mma instead of one; Q stays in shared memory (registers are
//      needed for the two accumulators) and is re-read with ldmatrix;
//   4. the tile shape per head dim was chosen by measurement (README, "Choosing the tiles").
// The kernel and its launch are in attention.cuh (TODOs 3-4; lessons 09 and 12 run it too), its
// tile copy in load_tile.cuh (TODO 2; lessons 11 and 12 copy with it too); this file runs it, one
// instantiation per configuration of tiles.hpp.
// Build, test, profile:
//   cmake --build --preset student --target check-lesson08
//   lessons/08_pipelining/profile.sh
#include <string>

#include "attention.cuh"
#include "fa/cuda_check.hpp"
#include "fa/params.hpp"
#include "tiles.hpp"

namespace {

using lesson08::kConfigs;

template <class T, int kIndex>
void launch_config(const fa::AttnParams& p, cudaStream_t stream) {
  const dim3 grid(fa::ceil_div(p.seqlen_q, kConfigs[kIndex].rows), p.batch * p.heads_q);
  lesson08::launch<T, kIndex>(p, grid, {}, stream);
}

// Runs configuration `index` of kConfigs: a variant's (the runtime checked its head dim) or
// config_for's, checked here (a line added to kConfigs moves the indices config_for names).
void run_config(const fa::AttnParams& p, int index, cudaStream_t stream) {
  lesson08::throw_if_copy_todos_left("08_pipelining");
  fa::throw_if_todos_left("08_pipelining", lesson08::kAttentionTodosLeft);
  if (index < 0 || index >= lesson08::kNumConfigs || kConfigs[index].head_dim != p.head_dim)
    throw fa::InvalidArgument("lesson 08_pipelining: tiles.hpp has no configuration " + std::to_string(index) +
                              " for head_dim " + std::to_string(p.head_dim));
  FA_DISPATCH_DTYPE(p.dtype, T, fa::dispatch_index(index, std::make_integer_sequence<int, lesson08::kNumConfigs>{}, [&](auto i) {
    launch_config<T, i>(p, stream);
  }));
}

// Variant 0 runs the configuration config_for picks for this GPU and head dim; variant i + 1 runs
// kConfigs[i] (the lesson's tests run every one; tune.sh times them).
void forward(const fa::AttnParams& p, cudaStream_t stream) {
  run_config(p, p.variant > 0 ? p.variant - 1 : lesson08::config_for(fa::current_device().sm, p.head_dim), stream);
}

}  // namespace

// What the lesson supports, its id and title: its fa_add_lesson line in CMakeLists.txt, generated
// into fa_lesson_08_declared(); to it the descriptor adds the entry points, variants and limits.
fa::LessonInfo fa_lesson_08_declared();

const fa::LessonInfo& fa_lesson_08() {
  static const fa::LessonInfo info = [] {
    fa::LessonInfo l = fa_lesson_08_declared();
    l.forward = &forward;
    l.variants = {{"auto", "the configuration tiles.hpp's config_for picks for this GPU and head dim"}};
    for (int i = 0; i < lesson08::kNumConfigs; ++i) l.variants.push_back(lesson08::config_variant(i));
    l.max_batch_heads = 65535;  // (batch, head) is the grid's y
    return l;
  }();
  return info;
}
