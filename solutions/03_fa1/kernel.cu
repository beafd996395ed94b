// Lesson 03, part 2: the FlashAttention-1 loop order on the GPU (CUDA cores).
//
// What changed since lesson 02: S and P are gone. A block owns one (batch, head); it loads each
// K/V tile into shared memory once (outer loop), and for every query tile (inner loop) reads that
// tile's running O, m and l from an fp32 workspace in HBM, folds the K/V tile in, normalises O
// and writes all three back (FlashAttention-1, Algorithm 1). Memory is O(N d), not O(N^2).
// What it costs: O makes a round trip through HBM once per K/V tile (seqlen_k / kKeys times: 32
// round trips at N = 1024), Q is re-read as often, and there are only batch * heads blocks, too
// few to fill 132 SMs when sequences are long. Lesson 04 swaps the loops to fix all three.
// At long N the workspace no longer fits in L2, and each rewrite goes to DRAM (README, "How to
// profile", has the measured TFLOP/s and bytes).
// Thread layout as in lesson 04: kGroup = 4 threads per query row, thread g owns dims g, g + 4, ...
// Build, test, profile:
//   cmake --build --preset student --target check-lesson03   (the CPU model in model.cpp first)
//   lessons/03_fa1/profile.sh
#include "fa/cuda_check.hpp"
#include "fa/device.cuh"
#include "fa/params.hpp"

namespace {

constexpr int kRows = 32;                 // query rows per inner-loop tile
constexpr int kGroup = 4;                 // threads per query row
constexpr int kThreads = kRows * kGroup;  // 128 threads
constexpr int kKeys = 32;                 // keys per K/V tile

// Each entry is a TODO of this file you have not written yet; the tests stop at the first one
// with "lesson 03 not implemented yet: <it>". Delete an entry when you have written its code.
const fa::TodoList kTodosLeft = {
    // @todos-left
};

// The workspace in HBM: O in fp32 (normalised after every K/V tile), and each row's m and l. m
// and l are kept per thread of the row's group (kGroup copies) so no thread ever reads a value
// another thread is rewriting. l == 0 means "no visible key yet" (the workspace starts zeroed).
struct Workspace {
  float* o;  // (batch * heads_q, seqlen_q, head_dim)
  float* m;  // (batch * heads_q, seqlen_q, kGroup)
  float* l;  // (batch * heads_q, seqlen_q, kGroup)
};

template <class T, int D>
__global__ void __launch_bounds__(kThreads) fa1_kernel(const fa::AttnParams p, const Workspace ws) {
  constexpr int kDims = D / kGroup;
  __shared__ float Ks[kKeys][D];
  __shared__ float Vs[kKeys][D];
  const int bh = blockIdx.x, b = bh / p.heads_q, h = bh % p.heads_q;
  const int hk = h / (p.heads_q / p.heads_kv);
  const int r = threadIdx.x / kGroup, g = threadIdx.x % kGroup;
  const T* qbase = static_cast<const T*>(p.q) + b * p.q_stride.batch + h * p.q_stride.head;
  const T* kbase = static_cast<const T*>(p.k) + b * p.k_stride.batch + hk * p.k_stride.head;
  const T* vbase = static_cast<const T*>(p.v) + b * p.v_stride.batch + hk * p.v_stride.head;
  float* O = ws.o + static_cast<int64_t>(bh) * p.seqlen_q * D;
  float* M = ws.m + static_cast<int64_t>(bh) * p.seqlen_q * kGroup;
  float* L = ws.l + static_cast<int64_t>(bh) * p.seqlen_q * kGroup;

  for (int k0 = 0; k0 < p.seqlen_k; k0 += kKeys) {  // outer loop: K/V tiles
    __syncthreads();
    for (int e = threadIdx.x; e < kKeys * D; e += kThreads) {
      const int j = e / D, c = e % D;
      const bool in = k0 + j < p.seqlen_k;
      Ks[j][c] = in ? fa::to_float(kbase[(k0 + j) * p.k_stride.row + c]) : 0.f;
      Vs[j][c] = in ? fa::to_float(vbase[(k0 + j) * p.v_stride.row + c]) : 0.f;
    }
    __syncthreads();
    for (int q0 = 0; q0 < p.seqlen_q; q0 += kRows) {  // inner loop: every query tile
      const int i = q0 + r;
      const bool row_valid = i < p.seqlen_q;
      float q[kDims];
#pragma unroll
      for (int c = 0; c < kDims; ++c) q[c] = row_valid ? fa::to_float(qbase[i * p.q_stride.row + c * kGroup + g]) * p.scale : 0.f;
      float s[kKeys];
      float m_tile = fa::kNegInf;
#pragma unroll
      for (int j = 0; j < kKeys; ++j) {
        float part = 0.f;
#pragma unroll
        for (int c = 0; c < kDims; ++c) part += q[c] * Ks[j][c * kGroup + g];
        const float dot = fa::group_sum<kGroup>(part);  // every lane takes part: no branch above
        const int key = k0 + j;
        s[j] = (key < p.seqlen_k && (!p.causal || key <= i + p.seqlen_k - p.seqlen_q)) ? dot : fa::kNegInf;
        m_tile = fmaxf(m_tile, s[j]);
      }
      if (!row_valid || m_tile == fa::kNegInf) continue;  // nothing of this tile is visible to row i

      // TODO(1): this tile's own softmax and P V for row i: p_j, l_tile and pv.
      //   p_j = exp(s[j] - m_tile), l_tile = sum_j p_j, pv[c] = sum_j p_j * Vs[j][c * kGroup + g].
      float pv[kDims];
      float l_tile = 0.f;
      // BEGIN SOLUTION
#pragma unroll
      for (int c = 0; c < kDims; ++c) pv[c] = 0.f;
#pragma unroll
      for (int j = 0; j < kKeys; ++j) {
        const float pj = expf(s[j] - m_tile);
        l_tile += pj;
#pragma unroll
        for (int c = 0; c < kDims; ++c) pv[c] += pj * Vs[j][c * kGroup + g];
      }
      // END SOLUTION
      // TODO(2): the round trip through HBM: read this row's O, m, l, merge the tile, write back.
      //   Read l and m from L and M (slot
      //   i * kGroup + g; l == 0 means nothing seen yet: then m = -inf and O = 0) and its O from
      //   O[i * D + c * kGroup + g]. Merge: m_new = max(m, m_tile), a = exp(m - m_new),
      //   b = exp(m_tile - m_new), l_new = a l + b l_tile, O = (a l O + b pv) / l_new. Write O,
      //   m_new and l_new back.
      // BEGIN SOLUTION
      const int slot = i * kGroup + g;
      const float l = L[slot];
      const float m = l > 0.f ? M[slot] : fa::kNegInf;
      const float m_new = fmaxf(m, m_tile);
      const float a = expf(m - m_new), bb = expf(m_tile - m_new);
      const float l_new = a * l + bb * l_tile;
      const float inv = 1.f / l_new;
#pragma unroll
      for (int c = 0; c < kDims; ++c) {
        float* o = &O[static_cast<int64_t>(i) * D + c * kGroup + g];
        *o = (a * l * (l > 0.f ? *o : 0.f) + bb * pv[c]) * inv;
      }
      M[slot] = m_new;
      L[slot] = l_new;
      // END SOLUTION
    }
  }

  // Epilogue: O is already normalised; convert it to the storage type and write the LSE. Each
  // thread finishes the rows and dims it owned in the loop above, so no barrier is needed.
  for (int q0 = 0; q0 < p.seqlen_q; q0 += kRows) {
    const int i = q0 + r;
    if (i >= p.seqlen_q) break;
    const float l = L[i * kGroup + g];
    T* orow = static_cast<T*>(p.o) + b * p.o_stride.batch + h * p.o_stride.head + i * p.o_stride.row;
#pragma unroll
    for (int c = 0; c < kDims; ++c)
      orow[c * kGroup + g] = fa::from_float<T>(l > 0.f ? O[static_cast<int64_t>(i) * D + c * kGroup + g] : 0.f);
    if (g == 0) p.lse[static_cast<int64_t>(bh) * p.seqlen_q + i] = l > 0.f ? M[i * kGroup] + logf(l) : INFINITY;
  }
}

void forward(const fa::AttnParams& p, cudaStream_t stream) {
  fa::throw_if_todos_left("03_fa1", kTodosLeft);
  const size_t rows = static_cast<size_t>(p.batch) * p.heads_q * p.seqlen_q;
  Workspace ws{};
  FA_CUDA_CHECK(cudaMallocAsync(&ws.o, rows * p.head_dim * sizeof(float), stream));
  FA_CUDA_CHECK(cudaMallocAsync(&ws.m, rows * kGroup * sizeof(float), stream));
  FA_CUDA_CHECK(cudaMallocAsync(&ws.l, rows * kGroup * sizeof(float), stream));
  FA_CUDA_CHECK(cudaMemsetAsync(ws.l, 0, rows * kGroup * sizeof(float), stream));  // l = 0: nothing seen yet
  FA_DISPATCH_DTYPE(p.dtype, T, {
    if (p.head_dim == 64) fa1_kernel<T, 64><<<p.batch * p.heads_q, kThreads, 0, stream>>>(p, ws);
    else fa1_kernel<T, 128><<<p.batch * p.heads_q, kThreads, 0, stream>>>(p, ws);
    FA_CHECK_LAUNCH();
  });
  for (float* x : {ws.o, ws.m, ws.l}) FA_CUDA_CHECK(cudaFreeAsync(x, stream));
}

}  // namespace

// What the lesson supports, its id and title: its fa_add_lesson line in CMakeLists.txt, generated
// into fa_lesson_03_declared(); to it the descriptor adds the entry points, variants and limits.
fa::LessonInfo fa_lesson_03_declared();

const fa::LessonInfo& fa_lesson_03() {
  static const fa::LessonInfo info = [] {
    fa::LessonInfo l = fa_lesson_03_declared();
    l.forward = &forward;
    return l;
  }();
  return info;
}
