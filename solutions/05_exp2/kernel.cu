// Lesson 05: exp2. The FA2 kernel of lesson 04 with log2(e) folded into the softmax scale.
//
// What changed since lesson 04: exp(x) = exp2(x * log2(e)). Multiplying q by scale * log2(e) once
// (instead of by scale) puts every score in base 2, so the softmax needs exp2 only, and exp2 is
// one instruction on the GPU's special-function unit (MUFU.EX2) plus an FFMA for s - m. expf,
// without --use_fast_math (the course never uses it), is a range reduction around the same
// MUFU.EX2: about 6 more FP32-pipe instructions (the README has the SASS). The running max m is then in base 2 too, and the LSE
// is converted back to natural log once per row: lse = (m + log2(l)) * ln(2).
// What it should do to speed: the scores cost fewer FP32 instructions, but the time hardly moves
// (README, "How to profile", has the counts): here the two matrix products (an FFMA and a
// shared-memory load per multiply) dominate, not the exponentials. Once the products move to
// tensor cores (lesson 07) the softmax is what is left on the FP32 pipe, and exp2 pays more.
// Build, test, profile:
//   cmake --build --preset student --target check-lesson05
//   lessons/05_exp2/profile.sh
#include "fa/cuda_check.hpp"
#include "fa/device.cuh"
#include "fa/params.hpp"

namespace {

constexpr int kRows = 32;                   // query rows per block (Br)
constexpr int kGroup = 4;                   // threads per query row
constexpr int kThreads = kRows * kGroup;    // 128 threads
constexpr int kKeys = 32;                   // keys per K/V tile (Bc): 32 scores per thread in registers
constexpr float kLn2 = 0.6931471805599453f;  // ln(2): LSE back from base 2 to natural log

// Each entry is a TODO of this file you have not written yet; the tests stop at the first one
// with "lesson 05 not implemented yet: <it>". Delete an entry when you have written its code.
const fa::TodoList kTodosLeft = {
    // @todos-left
};

template <class T, int D>
__global__ void __launch_bounds__(kThreads) fa2_exp2_kernel(const fa::AttnParams p) {
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
  // TODO(1): fold log2(e) into the scale that multiplies q: q_scale = scale * fa::kLog2e.
  //   Every score below is then in base 2 (s * log2(e)), and the softmax can use exp2.
  // BEGIN SOLUTION
  const float q_scale = p.scale * fa::kLog2e;
  // END SOLUTION
  // BEGIN SKELETON
  // const float q_scale = p.scale;
  // END SKELETON
#pragma unroll
  for (int c = 0; c < kDims; ++c) {
    q[c] = row_valid ? fa::to_float(qrow[c * kGroup + g]) * q_scale : 0.f;
    acc[c] = 0.f;
  }
  float m = fa::kNegInf, l = 0.f;
  const int last_visible = i + p.seqlen_k - p.seqlen_q;  // causal: keys j <= last_visible

  for (int k0 = 0; k0 < p.seqlen_k; k0 += kKeys) {
    __syncthreads();  // everyone is done reading the previous tile
    for (int e = threadIdx.x; e < kKeys * D; e += kThreads) {
      const int j = e / D, c = e % D;
      const bool in = k0 + j < p.seqlen_k;
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
      for (int c = 0; c < kDims; ++c) part += q[c] * Ks[j][c * kGroup + g];
      const float dot = fa::group_sum<kGroup>(part);
      const int key = k0 + j;
      const bool visible = key < p.seqlen_k && (!p.causal || key <= last_visible);
      s[j] = visible ? dot : fa::kNegInf;
      m_tile = fmaxf(m_tile, s[j]);
    }

    const float m_new = fmaxf(m, m_tile);
    if (m_new == fa::kNegInf) continue;  // every key so far is masked for this row
    // TODO(2): use exp2f where lesson 04 used expf (twice: alpha and p): scores and m are base 2.
    //   exp2f(x) compiles to one MUFU.EX2; expf(x) adds a range reduction of ~6 FP32 instructions.
    // BEGIN SOLUTION
    const float alpha = exp2f(m - m_new);
    // END SOLUTION
    // BEGIN SKELETON
    // const float alpha = expf(m - m_new);
    // END SKELETON
    l *= alpha;
#pragma unroll
    for (int c = 0; c < kDims; ++c) acc[c] *= alpha;
#pragma unroll
    for (int j = 0; j < kKeys; ++j) {
      // BEGIN SOLUTION
      const float pj = exp2f(s[j] - m_new);
      // END SOLUTION
      // BEGIN SKELETON
      // const float pj = expf(s[j] - m_new);
      // END SKELETON
      l += pj;
#pragma unroll
      for (int c = 0; c < kDims; ++c) acc[c] += pj * Vs[j][c * kGroup + g];
    }
    m = m_new;
  }

  if (!row_valid) return;
  T* orow = static_cast<T*>(p.o) + b * p.o_stride.batch + h * p.o_stride.head + i * p.o_stride.row;
  float* lse = p.lse + (static_cast<int64_t>(bh) * p.seqlen_q + i);
  const float inv_l = l > 0.f ? 1.f / l : 0.f;
#pragma unroll
  for (int c = 0; c < kDims; ++c) orow[c * kGroup + g] = fa::from_float<T>(acc[c] * inv_l);
  // TODO(3): the LSE back in natural log: lse = (m + log2f(l)) * kLn2, from thread g == 0.
  //   A row that saw no key (l == 0) gets +inf.
  // BEGIN SOLUTION
  if (g == 0) *lse = l > 0.f ? (m + log2f(l)) * kLn2 : INFINITY;
  // END SOLUTION
}

template <class T, int D>
void launch(const fa::AttnParams& p, cudaStream_t stream) {
  const dim3 grid(fa::ceil_div(p.seqlen_q, kRows), p.batch * p.heads_q);
  fa2_exp2_kernel<T, D><<<grid, kThreads, 0, stream>>>(p);
  FA_CHECK_LAUNCH();
}

void forward(const fa::AttnParams& p, cudaStream_t stream) {
  fa::throw_if_todos_left("05_exp2", kTodosLeft);
  FA_DISPATCH_DTYPE(p.dtype, T, {
    if (p.head_dim == 64) launch<T, 64>(p, stream);
    else launch<T, 128>(p, stream);
  });
}

}  // namespace

// What the lesson supports, its id and title: its fa_add_lesson line in CMakeLists.txt, generated
// into fa_lesson_05_declared(); to it the descriptor adds the entry points, variants and limits.
fa::LessonInfo fa_lesson_05_declared();

const fa::LessonInfo& fa_lesson_05() {
  static const fa::LessonInfo info = [] {
    fa::LessonInfo l = fa_lesson_05_declared();
    l.forward = &forward;
    l.max_batch_heads = 65535;  // (batch, head) is the grid's y
    return l;
  }();
  return info;
}
