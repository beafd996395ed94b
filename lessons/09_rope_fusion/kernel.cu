// Your copy of this lesson, generated from solutions/09_rope_fusion/kernel.cu by fa-skeleton.
// Lesson 09: RoPE fused into the attention kernel. Rotary position embedding turns each pair
// (i, i + d/2) of a query or key by an angle proportional to its position (rope.hpp), so that
// q_rot . k_rot depends only on the distance between the two positions. Two ways to run it:
//   rotate-outside  a standalone kernel writes rotated Q and K to memory, then lesson 08's
//                   attention kernel runs unchanged on them (the variant outside);
//   fused           the attention kernel rotates the Q tile once when it lands in shared memory,
//                   and each K tile as it streams in, before any QK^T (the default).
// Both run the same attention kernel, lesson 08's (08_pipelining/attention.cuh: the fused path
// passes it FusedLoads below), with the same tiles (lesson 08's tiles.hpp): the only difference is
// where the rotation happens, so the experiment in the README measures that alone.
// Build, test, profile:
//   cmake --build --preset student --target check-lesson09
//   lessons/09_rope_fusion/profile.sh
#include <climits>
#include <string>
#include <type_traits>

#include "../08_pipelining/attention.cuh"
#include "../08_pipelining/tiles.hpp"
#include "fa/cuda_check.hpp"
#include "fa/device.cuh"
#include "fa/mma.cuh"
#include "fa/params.hpp"
#include "rope.hpp"

namespace {

using lesson08::kConfigs;
using lesson08::tile_offset;
using lesson09::pair_task;
using lesson09::PairTask;

// Each entry is a TODO of this file you have not written yet; the tests stop at the first one
// with "lesson 09 not implemented yet: <it>". Delete an entry when you have written its code.
const fa::TodoList kTodosLeft = {
    "TODO(4) in kernel.cu: the rotation of one pair of chunks: find whether `row` is a row of Q (row < q_rows)",
    "TODO(5) in kernel.cu: the copy: in step i (0 .. kTileRows / kStepRows - 1), task = pair_task(threadIdx.x,",
    "TODO(6) in kernel.cu: for each step's task (as in load_pairs) whose row exists: read the two chunks from",
    "TODO(7) in kernel.cu: rotate the Q tile: wait until this thread's Q copies have landed (Q is the oldest",
    "TODO(8) in kernel.cu: rotate K tile j (sK_j, its ring slot; key j * kKeys + r sits at position",
};

// 8 consecutive 16-bit values (one 16-byte chunk) <-> 8 floats.
template <class T>
__device__ __forceinline__ void unpack8(const uint4& c, float (&x)[8]) {
  const uint32_t w[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = fa::unpack2<T>(w[i]);
    x[2 * i] = f.x, x[2 * i + 1] = f.y;
  }
}
template <class T>
__device__ __forceinline__ uint4 pack8(const float (&x)[8]) {
  return make_uint4(fa::pack2<T>(x[0], x[1]), fa::pack2<T>(x[2], x[3]), fa::pack2<T>(x[4], x[5]), fa::pack2<T>(x[6], x[7]));
}
// threadIdx.x, read where it is used: the compiler may not move a volatile asm out of a loop.
__device__ __forceinline__ int thread_index() {
  int x;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(x));
  return x;
}
// 8 consecutive floats of a table row (16-byte aligned: validation checks the table pointers).
__device__ __forceinline__ void load8(float (&x)[8], const float* at) {
  const float4 a = __ldg(reinterpret_cast<const float4*>(at)), b = __ldg(reinterpret_cast<const float4*>(at) + 1);
  x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w, x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
}

// ---------------------------------------------------------------------------------------------
// Rotate-outside: one thread per (row, chunk pair) of Q and of K, Q's rows first. Reads 2 x 16
// bytes of the row and 4 x 16 bytes of the tables, writes the 2 rotated chunks to a contiguous
// (batch, heads, seqlen, D) copy.
template <class T, int D>
__global__ void __launch_bounds__(256) rope_kernel(const fa::AttnParams p, T* q_out, T* k_out) {
  constexpr int kPairs = D / 16;
  const int64_t q_rows = int64_t(p.batch) * p.heads_q * p.seqlen_q;
  const int64_t k_rows = int64_t(p.batch) * p.heads_kv * p.seqlen_k;
  const int64_t task = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t row = task / kPairs;
  const int chunk = static_cast<int>(task % kPairs);
  if (row >= q_rows + k_rows) return;
  // TODO(4): the rotation of one pair of chunks: find whether `row` is a row of Q (row < q_rows)
  //   or of K (row - q_rows), its (b, h, s) and position (query_position for Q, s for K); read
  //   chunks `chunk` and `chunk + kPairs` of that row through the strides, the 8 cos and 8 sin at
  //   (position, 8 chunk) of the tables, rotate with rotate_pairs, and write both chunks to
  //   q_out / k_out + row * D (contiguous).
}

// ---------------------------------------------------------------------------------------------
// Fused. Starts the copy of rows [row0, row0 + kTileRows) of a (rows x D) matrix into a swizzled
// shared tile, each thread copying whole RoPE pairs of chunks (rope.hpp, pair_task). Rows at or
// past `nrows` are zero-filled.
template <int kThreads, int kTileRows, int D, class T>
__device__ __forceinline__ void load_pairs(T* tile, const T* base, int64_t row_stride, int row0, int nrows) {
  constexpr int kStepRows = kThreads / (D / 16);  // rows per step (a multiple of 8)
  static_assert(kStepRows % 8 == 0 && kTileRows % kStepRows == 0, "whole steps of whole swizzle groups");
  // TODO(5): the copy: in step i (0 .. kTileRows / kStepRows - 1), task = pair_task(threadIdx.x,
  //   i, kThreads, D); copy chunk task.chunk of row task.row (source base + (row0 + row) *
  //   row_stride + 8 chunk, target tile + tile_offset(row, 8 chunk, D)) and its partner D / 2
  //   columns further, both with fa::cp_async_16 (valid only when row0 + row < nrows).
}

// Rotates, in place, the pairs this thread copied with load_pairs into `tile` (rows row0 .. of
// the matrix, the first at position pos0). Call it after cp_async_wait has seen this thread's
// copies land: they are visible to this thread, and nobody else touches these chunks. Rows past
// `nrows` hold zeros (and may lie past the tables): leave them.
template <int kThreads, int kTileRows, int D, class T>
__device__ __forceinline__ void rotate_own_pairs(T* tile, const float* cos_tab, const float* sin_tab, int row0,
                                                 int nrows, int pos0) {
  constexpr int kStepRows = kThreads / (D / 16);
  // TODO(6): for each step's task (as in load_pairs) whose row exists: read the two chunks from
  //   the tile, the 8 cos and 8 sin at (pos0 + task.row, 8 task.chunk) of the tables (row-major,
  //   D / 2 per position), rotate them with rotate_pairs, and write them back to the same places.
}

// Fused: lesson 08's kernel (08_pipelining/attention.cuh) with these copies of Q and K. Each
// thread copies whole RoPE pairs of chunks (load_pairs), so once its own copies have landed it can
// rotate them in shared memory (rotate_own_pairs) with no barrier: the kernel's next
// __syncthreads publishes the rotated tile before any warp reads it. V is never rotated.
struct FusedLoads {
  template <int kThreads, int kTileRows, int D, class T>
  __device__ __forceinline__ static void copy(T* tile, const T* base, int64_t row_stride, int row0, int nrows) {
    load_pairs<kThreads, kTileRows, D>(tile, base, row_stride, row0, nrows);
  }
  template <int kThreads, int kRows, int kStages, int D, class T>
  __device__ __forceinline__ static void prologue_started(const fa::AttnParams& p, T* sQ, int q0) {
    // TODO(7): rotate the Q tile: wait until this thread's Q copies have landed (Q is the oldest
    //   of kStages commit groups, so at most kStages - 1 may stay pending), then rotate them
    //   (rotate_own_pairs; query row q0 sits at query_position(q0, ...)). No barrier: the loop's
    //   first __syncthreads publishes the rotated tile before any warp reads it.
  }
  template <int kThreads, int kKeys, int D, class T>
  __device__ __forceinline__ static void key_tile_landed(const fa::AttnParams& p, T* sK_j, int j) {
    // TODO(8): rotate K tile j (sK_j, its ring slot; key j * kKeys + r sits at position
    //   j * kKeys + r) with rotate_own_pairs: the kernel has waited for this thread's copies, and
    //   its barrier then publishes the whole rotated tile.
  }
};

template <class T, int kIndex, bool kRope>
void launch_attention(const fa::AttnParams& p, cudaStream_t stream) {
  using Loads = std::conditional_t<kRope, FusedLoads, lesson08::PlainLoads>;
  const dim3 grid(fa::ceil_div(p.seqlen_q, kConfigs[kIndex].rows), p.batch * p.heads_q);
  lesson08::launch<T, kIndex, Loads>(p, grid, {}, stream);
}

template <class T, bool kRope>
void launch_index(const fa::AttnParams& p, int index, cudaStream_t stream) {
  const auto all = std::make_integer_sequence<int, lesson08::kNumConfigs>{};
  fa::dispatch_index(index, all, [&](auto i) { launch_attention<T, i, kRope>(p, stream); });
}

// Rotate-outside: rope_kernel writes rotated Q and K, then the attention kernel without RoPE.
template <class T, int D>
void rotate_then_attend(const fa::AttnParams& p, int index, cudaStream_t stream) {
  const int64_t q_elems = int64_t(p.batch) * p.heads_q * p.seqlen_q * D;
  const int64_t k_elems = int64_t(p.batch) * p.heads_kv * p.seqlen_k * D;
  T* q_rot = static_cast<T*>(fa::device_scratch(size_t(q_elems + k_elems) * sizeof(T)));
  T* k_rot = q_rot + q_elems;
  const int64_t tasks = (q_elems + k_elems) / 16;  // one per pair of 8-value chunks
  constexpr int kThreads = 256;
  const int64_t blocks = (tasks + kThreads - 1) / kThreads;
  rope_kernel<T, D><<<fa::grid_blocks(blocks, "lesson 09_rope_fusion's rotation"), kThreads, 0, stream>>>(p, q_rot, k_rot);
  FA_CHECK_LAUNCH();
  fa::AttnParams r = p;
  r.q = q_rot;
  r.k = k_rot;
  r.q_stride = {int64_t(p.heads_q) * p.seqlen_q * D, int64_t(p.seqlen_q) * D, D};
  r.k_stride = {int64_t(p.heads_kv) * p.seqlen_k * D, int64_t(p.seqlen_k) * D, D};
  r.rope_cos = r.rope_sin = nullptr;
  launch_index<T, false>(r, index, stream);
}

// The lesson's variants: the RoPE path and the tiles (README, "The experiment").
enum Variant { kFused, kOutside, kSmallTiles };
static_assert(kConfigs[2].head_dim == 64 && kConfigs[4].head_dim == 128, "the small tiles: lesson 08's configurations 2 and 4");

// Without tables, plain attention; with them, RoPE fused (kFused, kSmallTiles) or rotated outside
// (kOutside), on lesson 08's configuration for this GPU and head dim, or its smaller tiles
// (kSmallTiles: 64 x 64 at head dim 64, 128 x 32 at 128).
void forward(const fa::AttnParams& p, cudaStream_t stream) {
  lesson08::throw_if_copy_todos_left("09_rope_fusion (it runs lesson 08's kernel: tiles.hpp, load_tile.cuh)");
  fa::throw_if_todos_left("09_rope_fusion (it runs lesson 08's kernel, attention.cuh)", lesson08::kAttentionTodosLeft);
  fa::throw_if_todos_left("09_rope_fusion", lesson09::kRopeTodosLeft);
  fa::throw_if_todos_left("09_rope_fusion", kTodosLeft);
  const int index = p.variant == kSmallTiles ? (p.head_dim == 64 ? 2 : 4) : lesson08::config_for(fa::current_device().sm, p.head_dim);
  if (index < 0 || index >= lesson08::kNumConfigs || kConfigs[index].head_dim != p.head_dim)
    throw fa::InvalidArgument("lesson 09_rope_fusion: lesson 08's tiles.hpp has no configuration " + std::to_string(index) +
                              " for head_dim " + std::to_string(p.head_dim));
  FA_DISPATCH_DTYPE(p.dtype, T, {
    if (p.rope_cos == nullptr) {
      launch_index<T, false>(p, index, stream);
    } else if (p.variant != kOutside) {
      launch_index<T, true>(p, index, stream);
    } else if (p.head_dim == 64) {
      rotate_then_attend<T, 64>(p, index, stream);
    } else {
      rotate_then_attend<T, 128>(p, index, stream);
    }
  });
}

}  // namespace

// What the lesson supports, its id and title: its fa_add_lesson line in CMakeLists.txt, generated
// into fa_lesson_09_declared(); to it the descriptor adds the entry points, variants and limits.
fa::LessonInfo fa_lesson_09_declared();

const fa::LessonInfo& fa_lesson_09() {
  static const fa::LessonInfo info = [] {
    fa::LessonInfo l = fa_lesson_09_declared();
    l.forward = &forward;
    l.variants = {{"fused", "RoPE in the attention kernel's tile loads, on lesson 08's tiles for this GPU"},
                  {"outside", "rope_kernel writes rotated Q and K, then the same attention kernel and tiles without RoPE"},
                  {"small-tiles", "fused, on lesson 08's smaller tiles (configuration 2 at head dim 64, 4 at 128)"}};
    l.max_batch_heads = 65535;  // (batch, head) is the grid's y
    return l;
  }();
  return info;
}
