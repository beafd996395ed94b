// Your copy of this lesson, generated from solutions/02_online_softmax/kernel.cu by fa-skeleton.
// Lesson 02, part 2: the online softmax on the GPU, in the naive pipeline of lesson 01.
//
// What changed since lesson 01: the softmax kernel reads each row of S twice instead of three
// times. Pass 1 keeps, in every lane, a running max and a running sum rescaled whenever the max
// grows (model.cpp has the recurrence); the lanes then merge their (m, l) pairs: m = max of the
// m's, l = sum of l * exp(m_lane - m). Pass 2 normalises and writes P. The scores and PV kernels
// are lesson 01's, unchanged.
// What it should do to speed: the softmax moves 12 bytes per score instead of 16 (4 bytes per
// read or write): it reads S twice instead of three times. The whole pipeline gains little, since
// the scores and PV kernels dominate its time (README, "How to profile", has the measurements).
// Why this is not yet FlashAttention: P is still written, and PV still reads it. One pass with no
// S or P at all needs PV inside the same loop, rescaled like l: lessons 03 and 04.
// Build, test, profile:
//   cmake --build --preset student --target check-lesson02   (the CPU model in model.cpp first)
//   lessons/02_online_softmax/profile.sh
#include "fa/cuda_check.hpp"
#include "fa/device.cuh"
#include "fa/params.hpp"

namespace {

constexpr int kTile = 16;          // scores and PV: 16 x 16 threads per block, one output each
constexpr int kWarpsPerBlock = 8;  // softmax: one warp per row of S

// Each entry is a TODO of this file you have not written yet; the tests stop at the first one
// with "lesson 02 not implemented yet: <it>". Delete an entry when you have written its code.
const fa::TodoList kTodosLeft = {
    "TODO(1) in kernel.cu: pass 1, online: each lane keeps a running m and l, then the lanes merge them.",
    "TODO(2) in kernel.cu: pass 2: s[j] = exp(s[j] - m_row) / l_row, and lane 0 writes lse = m_row + log(l_row).",
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
  if (p.causal && j > i + (p.seqlen_k - p.seqlen_q)) {
    *out = fa::kNegInf;
    return;
  }
  float dot = 0.f;
  for (int c = 0; c < p.head_dim; ++c) dot += fa::to_float(q[c]) * fa::to_float(k[c]);
  *out = p.scale * dot;
}

// One warp per row of S: two passes (online max and sum, then normalise), P written over S.
// A row with no visible key (its max is -inf) becomes P = 0 and LSE = +inf.
__global__ void online_softmax_kernel(float* __restrict__ S, float* __restrict__ lse, int64_t rows, int seqlen_k) {
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;  // whole warps leave together, so the shuffles below stay full-warp
  float* s = S + row * seqlen_k;
  float m = fa::kNegInf, l = 0.f;
  // TODO(1): pass 1, online: each lane keeps a running m and l, then the lanes merge them.
  //   Lane k visits j = k, k + 32, ... with the recurrence of model.cpp. Merge: m_row =
  //   fa::group_max(m), l_row = fa::group_sum(l * exp(m - m_row)) (a lane with l = 0 adds 0).
  const float m_row = m, l_row = l;
  // TODO(2): pass 2: s[j] = exp(s[j] - m_row) / l_row, and lane 0 writes lse = m_row + log(l_row).
  //   If m_row is -inf the row saw no key: s[j] = 0 and lse[row] = +inf.
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
  float acc = 0.f;
  for (int j = 0; j < p.seqlen_k; ++j) acc += prow[j] * fa::to_float(v[j * p.v_stride.row]);
  *o = fa::from_float<T>(acc);
}

void forward(const fa::AttnParams& p, cudaStream_t stream) {
  fa::throw_if_todos_left("02_online_softmax", kTodosLeft);
  const int64_t rows = static_cast<int64_t>(p.batch) * p.heads_q * p.seqlen_q;
  float* S = nullptr;  // the N^2 workspace this lesson is about; P overwrites it in place
  FA_CUDA_CHECK(cudaMallocAsync(&S, static_cast<size_t>(rows) * p.seqlen_k * sizeof(float), stream));
  const dim3 block(kTile, kTile);
  FA_DISPATCH_DTYPE(p.dtype, T, {
    scores_kernel<T><<<dim3(fa::ceil_div(p.seqlen_k, kTile), fa::ceil_div(p.seqlen_q, kTile), p.batch * p.heads_q),
                       block, 0, stream>>>(p, S);
    FA_CHECK_LAUNCH();
    online_softmax_kernel<<<static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock), 32 * kWarpsPerBlock, 0,
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
// into fa_lesson_02_declared(); to it the descriptor adds the entry points, variants and limits.
fa::LessonInfo fa_lesson_02_declared();

const fa::LessonInfo& fa_lesson_02() {
  static const fa::LessonInfo info = [] {
    fa::LessonInfo l = fa_lesson_02_declared();
    l.forward = &forward;
    l.bench_max_scores = int64_t(1) << 31;  // 8 GB of fp32 S: 32 heads at 8k
    l.bench_limit_reason = "this lesson keeps S in HBM and stops at 2^31 scores";
    l.max_batch_heads = 65535;  // (batch, head) is the grid's z
    return l;
  }();
  return info;
}
