// Your copy of this lesson, generated from solutions/04_fa2/kernel.cu by fa-skeleton.
// Lesson 04, part 2: the FlashAttention-2 loop order on the GPU (CUDA cores, no tensor cores).
//
// What changed since lesson 03: the loops are swapped. A block owns one query tile for its whole
// life and streams every K/V tile through shared memory; the running max m, sum l and the
// unnormalised output stay in registers, and O is divided by l once, at the end. The grid covers
// (query tiles, batch * heads), so even one long sequence fills the GPU.
// Why it is faster: O, m and l never leave the chip until the end (lesson 03 wrote them to HBM
// once per K/V tile), and there are N / kRows blocks instead of batch * heads. K and V are read
// N / kRows times, mostly from L2 (profile.sh shows DRAM and L2 bytes side by side).
// The rate is about the same at every N (README, "How to profile", has the numbers); causal runs
// at half of it, since every tile is computed, then masked (lesson 06 skips that work).
// Thread layout: kGroup = 4 threads share one query row; thread g owns head dims g, g + 4, g + 8,
// ..., so a warp reading one K row from shared memory touches 4 consecutive words (no bank
// conflicts), and the 4 partial dot products meet through 2 shuffles.
// Build, test, profile:
//   cmake --build --preset student --target check-lesson04   (the CPU model in model.cpp first)
//   lessons/04_fa2/profile.sh
#include "fa/cuda_check.hpp"
#include "fa/device.cuh"
#include "fa/params.hpp"

namespace {

constexpr int kRows = 32;                   // query rows per block (Br)
constexpr int kGroup = 4;                   // threads per query row
constexpr int kThreads = kRows * kGroup;    // 128 threads
constexpr int kKeys = 32;                   // keys per K/V tile (Bc): 32 scores per thread in registers

// Each entry is a TODO of this file you have not written yet; the tests stop at the first one
// with "lesson 04 not implemented yet: <it>". Delete an entry when you have written its code.
const fa::TodoList kTodosLeft = {
    "TODO(1) in kernel.cu: load keys k0 .. k0 + kKeys - 1 of K and V into Ks and Vs as floats.",
    "TODO(2) in kernel.cu: the scores s[j] of row i against this tile, and their max m_tile.",
    "TODO(3) in kernel.cu: the online update of m, l and acc with this tile, as in the CPU model.",
    "TODO(4) in kernel.cu: write O = acc / l (one division per row, here at the end) and the LSE.",
};

template <class T, int D>
__global__ void __launch_bounds__(kThreads) fa2_kernel(const fa::AttnParams p) {
  constexpr int kDims = D / kGroup;  // head dims per thread
  __shared__ float Ks[kKeys][D];
  __shared__ float Vs[kKeys][D];
  const int bh = blockIdx.y, b = bh / p.heads_q, h = bh % p.heads_q;
  const int hk = h / (p.heads_q / p.heads_kv);
  const int r = threadIdx.x / kGroup, g = threadIdx.x % kGroup;
  const int i = blockIdx.x * kRows + r;  // this thread's query row
  const bool row_valid = i < p.seqlen_q;
  const T* kbase = static_cast<const T*>(p.k) + b * p.k_stride.batch + hk * p.k_stride.head;
  const T* vbase = static_cast<const T*>(p.v) + b * p.v_stride.batch + hk * p.v_stride.head;
  const T* qrow = static_cast<const T*>(p.q) + b * p.q_stride.batch + h * p.q_stride.head + i * p.q_stride.row;

  float q[kDims], acc[kDims];
#pragma unroll
  for (int c = 0; c < kDims; ++c) {
    q[c] = row_valid ? fa::to_float(qrow[c * kGroup + g]) * p.scale : 0.f;  // the scale folded into q
    acc[c] = 0.f;
  }
  float m = fa::kNegInf, l = 0.f;
  const int last_visible = i + p.seqlen_k - p.seqlen_q;  // causal: keys j <= last_visible

  for (int k0 = 0; k0 < p.seqlen_k; k0 += kKeys) {
    __syncthreads();  // everyone is done reading the previous tile
    // TODO(1): load keys k0 .. k0 + kKeys - 1 of K and V into Ks and Vs as floats.
    //   All threads together: element e = threadIdx.x, threadIdx.x + kThreads, ... is row e / D,
    //   column e % D, so neighbouring threads read neighbouring addresses. Rows past seqlen_k get 0.
    __syncthreads();

    float s[kKeys];
    float m_tile = fa::kNegInf;
    // TODO(2): the scores s[j] of row i against this tile, and their max m_tile.
    //   s[j] = q . Ks[j]: this thread's kDims products, summed over the kGroup threads of the row
    //   with fa::group_sum<kGroup>. Keys past seqlen_k, and (causal) keys after last_visible: -inf.

    // TODO(3): the online update of m, l and acc with this tile, as in the CPU model.
    //   m_new = max(m, m_tile) (skip the tile while it is -inf); alpha = exp(m - m_new) rescales
    //   l and acc; p = exp(s[j] - m_new) adds p to l and p * Vs[j] (this thread's dims) to acc.
  }

  if (!row_valid) return;
  T* orow = static_cast<T*>(p.o) + b * p.o_stride.batch + h * p.o_stride.head + i * p.o_stride.row;
  float* lse = p.lse + (static_cast<int64_t>(bh) * p.seqlen_q + i);
  // TODO(4): write O = acc / l (one division per row, here at the end) and the LSE.
  //   One thread of the group (g == 0) writes lse = m + log(l); a row with l == 0 gets O = 0, +inf.
}

template <class T, int D>
void launch(const fa::AttnParams& p, cudaStream_t stream) {
  const dim3 grid(fa::ceil_div(p.seqlen_q, kRows), p.batch * p.heads_q);
  fa2_kernel<T, D><<<grid, kThreads, 0, stream>>>(p);
  FA_CHECK_LAUNCH();
}

void forward(const fa::AttnParams& p, cudaStream_t stream) {
  fa::throw_if_todos_left("04_fa2", kTodosLeft);
  FA_DISPATCH_DTYPE(p.dtype, T, {
    if (p.head_dim == 64) launch<T, 64>(p, stream);
    else launch<T, 128>(p, stream);
  });
}

}  // namespace

// What the lesson supports, its id and title: its fa_add_lesson line in CMakeLists.txt, generated
// into fa_lesson_04_declared(); to it the descriptor adds the entry points, variants and limits.
fa::LessonInfo fa_lesson_04_declared();

const fa::LessonInfo& fa_lesson_04() {
  static const fa::LessonInfo info = [] {
    fa::LessonInfo l = fa_lesson_04_declared();
    l.forward = &forward;
    l.max_batch_heads = 65535;  // (batch, head) is the grid's y
    return l;
  }();
  return info;
}
