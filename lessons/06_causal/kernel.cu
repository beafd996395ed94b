// Your copy of this lesson, generated from solutions/06_causal/kernel.cu by fa-skeleton.
// Lesson 06: causal attention by skipping work, not by masking it.
//
// What changed since lesson 05: with a causal mask, query row i sees keys j <= i + (seqlen_k -
// seqlen_q). Lesson 05 computed every K/V tile and masked the invisible scores to -inf: about half
// of all the work was thrown away. Here a block
//   1. stops at the diagonal: K/V tiles after its last row's last visible key are never loaded;
//   2. splits its loop in two: the tiles every one of its rows sees completely run without any mask
//      test (process_tile<false>), and only the few tiles on the diagonal (and a partial last tile)
//      run the masked version (process_tile<true>);
//   3. starts with the heaviest query tiles: causal blocks have unequal work (the last query tile
//      sees every key, the first almost none), so blocks are numbered last tile first, and the
//      long ones do not start last and run alone at the end.
// What it should do to speed: causal FLOPs are about half of non-causal (the course counts only
// visible pairs), so lesson 05 ran causal at about half its non-causal TFLOP/s; with the early
// stop causal should come close to the non-causal rate, less so at short N, where the half-masked
// diagonal tiles and each block's fixed cost weigh more (README, "What to expect"; "How to
// profile" has the measurements).
// Build, test, profile:
//   cmake --build --preset student --target check-lesson06
//   lessons/06_causal/profile.sh
#include "fa/cuda_check.hpp"
#include "fa/device.cuh"
#include "fa/params.hpp"

namespace {

constexpr int kRows = 32;                    // query rows per block (Br)
constexpr int kGroup = 4;                    // threads per query row
constexpr int kThreads = kRows * kGroup;     // 128 threads
constexpr int kKeys = 32;                    // keys per K/V tile (Bc)
constexpr float kLn2 = 0.6931471805599453f;  // ln(2)

// Each entry is a TODO of this file you have not written yet; the tests stop at the first one
// with "lesson 06 not implemented yet: <it>". Delete an entry when you have written its code.
const fa::TodoList kTodosLeft = {
    "TODO(1) in kernel.cu: the early stop: when causal, k_end = one past the last key the block's last row sees.",
    "TODO(2) in kernel.cu: the unmasked part: when causal, k_unmasked = the end of the tiles every row sees whole.",
    "TODO(3) in kernel.cu: the two loops: process_tile<false> while k0 < k_unmasked, then <true> while k0 < k_end.",
};

// One row's running softmax state and this thread's share of its output.
template <int kDims>
struct RowState {
  float q[kDims], acc[kDims];
  float m = fa::kNegInf, l = 0.f;
};

// Loads keys k0 .. k0 + kKeys - 1 into shared memory (0 past seqlen_k) and folds them into the
// row's state: lesson 05's loop body. With kMasked = false no score is tested against the mask or
// the end of the sequence: the caller guarantees every key of the tile is visible to every row.
template <bool kMasked, class T, int D>
__device__ __forceinline__ void process_tile(RowState<D / kGroup>& st, float (&Ks)[kKeys][D], float (&Vs)[kKeys][D],
                                             const T* kbase, const T* vbase, const fa::AttnParams& p, int k0,
                                             int last_visible, int g) {
  constexpr int kDims = D / kGroup;
  if (threadIdx.x == 0) fa::tile_count_visit(p, fa::block_work());
  __syncthreads();
  for (int e = threadIdx.x; e < kKeys * D; e += kThreads) {
    const int j = e / D, c = e % D;
    const bool in = !kMasked || k0 + j < p.seqlen_k;
    Ks[j][c] = in ? fa::to_float(kbase[(k0 + j) * p.k_stride.row + c]) : 0.f;
    Vs[j][c] = in ? fa::to_float(vbase[(k0 + j) * p.v_stride.row + c]) : 0.f;
  }
  __syncthreads();
  float s[kKeys];
  float m_tile = fa::kNegInf;
#pragma unroll
  for (int j = 0; j < kKeys; ++j) {
    float part = 0.f;
#pragma unroll
    for (int c = 0; c < kDims; ++c) part += st.q[c] * Ks[j][c * kGroup + g];
    s[j] = fa::group_sum<kGroup>(part);
    if (kMasked) {
      const int key = k0 + j;
      if (key >= p.seqlen_k || (p.causal && key > last_visible)) s[j] = fa::kNegInf;
    }
    m_tile = fmaxf(m_tile, s[j]);
  }
  const float m_new = fmaxf(st.m, m_tile);
  if (m_new == fa::kNegInf) return;  // only possible in a masked tile
  const float alpha = exp2f(st.m - m_new);
  st.l *= alpha;
#pragma unroll
  for (int c = 0; c < kDims; ++c) st.acc[c] *= alpha;
#pragma unroll
  for (int j = 0; j < kKeys; ++j) {
    const float pj = exp2f(s[j] - m_new);
    st.l += pj;
#pragma unroll
    for (int c = 0; c < kDims; ++c) st.acc[c] += pj * Vs[j][c * kGroup + g];
  }
  st.m = m_new;
}

template <class T, int D>
__global__ void __launch_bounds__(kThreads) causal_kernel(const fa::AttnParams p) {
  constexpr int kDims = D / kGroup;
  __shared__ float Ks[kKeys][D];
  __shared__ float Vs[kKeys][D];
  const int bh = blockIdx.y, b = bh / p.heads_q, h = bh % p.heads_q;
  const int hk = h / (p.heads_q / p.heads_kv);
  const int r = threadIdx.x / kGroup, g = threadIdx.x % kGroup;
  // Heaviest query tiles first when causal (see the header): block 0 takes the last tile.
  const int tile = p.causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
  const int i0 = tile * kRows;  // the block's first row
  if (threadIdx.x == 0) fa::tile_count_begin(p, fa::block_work(), i0, kRows, kKeys);
  const int i = i0 + r;
  const bool row_valid = i < p.seqlen_q;
  const int offset = p.seqlen_k - p.seqlen_q;  // query i sees keys j <= i + offset
  const T* kbase = static_cast<const T*>(p.k) + b * p.k_stride.batch + hk * p.k_stride.head;
  const T* vbase = static_cast<const T*>(p.v) + b * p.v_stride.batch + hk * p.v_stride.head;
  const T* qrow = static_cast<const T*>(p.q) + b * p.q_stride.batch + h * p.q_stride.head + i * p.q_stride.row;

  RowState<kDims> st;
  const float q_scale = p.scale * fa::kLog2e;
#pragma unroll
  for (int c = 0; c < kDims; ++c) {
    st.q[c] = row_valid ? fa::to_float(qrow[c * kGroup + g]) * q_scale : 0.f;
    st.acc[c] = 0.f;
  }

  int k_end = p.seqlen_k;                        // keys this block must visit: [0, k_end)
  int k_unmasked = p.seqlen_k / kKeys * kKeys;   // tiles [0, k_unmasked) need no mask test
  // TODO(1): the early stop: when causal, k_end = one past the last key the block's last row sees.
  //   The last row is min(i0 + kRows, seqlen_q) - 1 and sees keys up to (that row) + offset;
  //   k_end is at most seqlen_k and may be <= 0 (the block sees nothing).
  // TODO(2): the unmasked part: when causal, k_unmasked = the end of the tiles every row sees whole.
  //   Every row of the block sees key j iff the first row does (j <= i0 + offset), so that is
  //   (i0 + offset + 1) / kKeys * kKeys, never below 0 and never past seqlen_k / kKeys * kKeys.
  // TODO(3): the two loops: process_tile<false> while k0 < k_unmasked, then <true> while k0 < k_end.
  //   Tiles start at k0 = 0, kKeys, 2 kKeys, ...; pass last_visible = i + offset.

  if (!row_valid) return;
  T* orow = static_cast<T*>(p.o) + b * p.o_stride.batch + h * p.o_stride.head + i * p.o_stride.row;
  const float inv_l = st.l > 0.f ? 1.f / st.l : 0.f;
#pragma unroll
  for (int c = 0; c < kDims; ++c) orow[c * kGroup + g] = fa::from_float<T>(st.acc[c] * inv_l);
  if (g == 0) p.lse[static_cast<int64_t>(bh) * p.seqlen_q + i] = st.l > 0.f ? (st.m + log2f(st.l)) * kLn2 : INFINITY;
}

template <class T, int D>
void launch(const fa::AttnParams& p, cudaStream_t stream) {
  const dim3 grid(fa::ceil_div(p.seqlen_q, kRows), p.batch * p.heads_q);
  causal_kernel<T, D><<<grid, kThreads, 0, stream>>>(p);
  FA_CHECK_LAUNCH();
}

void forward(const fa::AttnParams& p, cudaStream_t stream) {
  fa::throw_if_todos_left("06_causal", kTodosLeft);
  FA_DISPATCH_DTYPE(p.dtype, T, {
    if (p.head_dim == 64) launch<T, 64>(p, stream);
    else launch<T, 128>(p, stream);
  });
}

}  // namespace

// What the lesson supports, its id and title: its fa_add_lesson line in CMakeLists.txt, generated
// into fa_lesson_06_declared(); to it the descriptor adds the entry points, variants and limits.
fa::LessonInfo fa_lesson_06_declared();

const fa::LessonInfo& fa_lesson_06() {
  static const fa::LessonInfo info = [] {
    fa::LessonInfo l = fa_lesson_06_declared();
    l.forward = &forward;
    l.max_batch_heads = 65535;  // (batch, head) is the grid's y
    return l;
  }();
  return info;
}
