// Your copy of this lesson, generated from solutions/01_naive_gpu/kernel.cu by fa-skeleton.
// Lesson 01: naive attention on the GPU, three kernels with S and P in HBM.
//
// What changed since lesson 00: the same three steps run on the GPU, one kernel each:
//   scores_kernel   S = scale * Q K^T (masked), fp32, written to HBM        one thread per score
//   softmax_kernel  P = softmax(S) in place, and the LSE                    one warp per row, 3 passes
//   pv_kernel       O = P V                                                 one thread per output
// Why: it is the baseline every later lesson is measured against. S and P are
// batch * heads * seqlen_q * seqlen_k floats that go to HBM and back, so its bytes grow as N^2
// (profile.sh shows it), and at N = 16k with 32 heads S alone is 34 GB. The README ("How to
// profile") has its measured TFLOP/s and bytes.
// Build, test, profile:
//   cmake --build --preset student --target check-lesson01
//   lessons/01_naive_gpu/profile.sh
#include "fa/cuda_check.hpp"
#include "fa/device.cuh"
#include "fa/params.hpp"

namespace {

constexpr int kTile = 16;          // scores and PV: 16 x 16 threads per block, one output each
constexpr int kWarpsPerBlock = 8;  // softmax: one warp per row of S

// Each entry is a TODO of this file you have not written yet; the tests stop at the first one
// with "lesson 01 not implemented yet: <it>". Delete an entry when you have written its code.
const fa::TodoList kTodosLeft = {
    "TODO(1) in kernel.cu: write the score of (i, j) to *out: scale * q . k, or -inf if the mask hides key j.",
    "TODO(2) in kernel.cu: the softmax of this row in three passes (max, sum, normalise) and its LSE.",
    "TODO(3) in kernel.cu: *o = sum over j < seqlen_k of prow[j] * v[j * p.v_stride.row].",
};

// S[bh][i][j] = scale * q_i . k_j, or -inf where the causal mask hides key j from query i.
// Grid: (key tiles, query tiles, batch * heads_q); thread (x, y) computes score (i = y, j = x).
template <class T>
__global__ void scores_kernel(const fa::AttnParams p, float* __restrict__ S) {
  const int j = blockIdx.x * kTile + threadIdx.x;
  const int i = blockIdx.y * kTile + threadIdx.y;
  const int bh = blockIdx.z, b = bh / p.heads_q, h = bh % p.heads_q;
  const int hk = h / (p.heads_q / p.heads_kv);  // grouped-query heads share a K/V head
  if (i >= p.seqlen_q || j >= p.seqlen_k) return;
  const T* q = static_cast<const T*>(p.q) + b * p.q_stride.batch + h * p.q_stride.head + i * p.q_stride.row;
  const T* k = static_cast<const T*>(p.k) + b * p.k_stride.batch + hk * p.k_stride.head + j * p.k_stride.row;
  float* out = S + (static_cast<int64_t>(bh) * p.seqlen_q + i) * p.seqlen_k + j;
  // TODO(1): write the score of (i, j) to *out: scale * q . k, or -inf if the mask hides key j.
  //   Masked: causal and j > i + (seqlen_k - seqlen_q). The dot product runs over head_dim, in
  //   fp32 (fa::to_float converts a __half or __nv_bfloat16 element).
}

// One warp per row of S: three passes over the row in HBM (max, sum, normalise), P written over S.
// A row with no visible key (its max is -inf) becomes P = 0 and LSE = +inf.
__global__ void softmax_kernel(float* __restrict__ S, float* __restrict__ lse, int64_t rows, int seqlen_k) {
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;  // whole warps leave together, so the shuffles below stay full-warp
  float* s = S + row * seqlen_k;
  // TODO(2): the softmax of this row in three passes (max, sum, normalise) and its LSE.
  //   Pass 1: m = the row max (lane k visits j = k, k + 32, ...; merge lanes with fa::group_max).
  //   Pass 2: l = sum_j exp(s[j] - m) (fa::group_sum). Pass 3: s[j] = exp(s[j] - m) / l, and lane 0
  //   writes lse[row] = m + log(l). If m is -inf: s[j] = 0, lse[row] = +inf (exp(-inf - -inf) = NaN).
}

// O[i][c] = sum_j P[i][j] * v[j][c]. Grid: (head_dim tiles, query tiles, batch * heads_q).
template <class T>
__global__ void pv_kernel(const fa::AttnParams p, const float* __restrict__ P) {
  const int c = blockIdx.x * kTile + threadIdx.x;
  const int i = blockIdx.y * kTile + threadIdx.y;
  const int bh = blockIdx.z, b = bh / p.heads_q, h = bh % p.heads_q;
  const int hk = h / (p.heads_q / p.heads_kv);
  if (i >= p.seqlen_q || c >= p.head_dim) return;
  const float* prow = P + (static_cast<int64_t>(bh) * p.seqlen_q + i) * p.seqlen_k;
  const T* v = static_cast<const T*>(p.v) + b * p.v_stride.batch + hk * p.v_stride.head + c;
  T* o = static_cast<T*>(p.o) + b * p.o_stride.batch + h * p.o_stride.head + i * p.o_stride.row + c;
  // TODO(3): *o = sum over j < seqlen_k of prow[j] * v[j * p.v_stride.row].
  //   Accumulate in fp32 and store with fa::from_float<T>.
}

void forward(const fa::AttnParams& p, cudaStream_t stream) {
  fa::throw_if_todos_left("01_naive_gpu", kTodosLeft);
  const int64_t rows = static_cast<int64_t>(p.batch) * p.heads_q * p.seqlen_q;
  float* S = nullptr;  // the N^2 workspace this lesson is about; P overwrites it in place
  FA_CUDA_CHECK(cudaMallocAsync(&S, static_cast<size_t>(rows) * p.seqlen_k * sizeof(float), stream));
  const dim3 block(kTile, kTile);
  FA_DISPATCH_DTYPE(p.dtype, T, {
    scores_kernel<T><<<dim3(fa::ceil_div(p.seqlen_k, kTile), fa::ceil_div(p.seqlen_q, kTile), p.batch * p.heads_q),
                       block, 0, stream>>>(p, S);
    FA_CHECK_LAUNCH();
    softmax_kernel<<<static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock), 32 * kWarpsPerBlock, 0,
                     stream>>>(S, p.lse, rows, p.seqlen_k);
    FA_CHECK_LAUNCH();
    pv_kernel<T><<<dim3(fa::ceil_div(p.head_dim, kTile), fa::ceil_div(p.seqlen_q, kTile), p.batch * p.heads_q),
                   block, 0, stream>>>(p, S);
    FA_CHECK_LAUNCH();
  });
  FA_CUDA_CHECK(cudaFreeAsync(S, stream));
}

}  // namespace

// What the lesson supports, its id and title: its fa_add_lesson line in CMakeLists.txt, generated
// into fa_lesson_01_declared(); to it the descriptor adds the entry points, variants and limits.
fa::LessonInfo fa_lesson_01_declared();

const fa::LessonInfo& fa_lesson_01() {
  static const fa::LessonInfo info = [] {
    fa::LessonInfo l = fa_lesson_01_declared();
    l.forward = &forward;
    l.bench_max_scores = int64_t(1) << 31;  // 8 GB of fp32 S: 32 heads at 8k
    l.bench_limit_reason = "this lesson keeps S in HBM and stops at 2^31 scores";
    l.max_batch_heads = 65535;  // (batch, head) is the grid's z
    return l;
  }();
  return info;
}
