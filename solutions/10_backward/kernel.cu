// Lesson 10, part 2: the backward pass on the GPU (CUDA cores, fp32 arithmetic, no tensor cores).
//
// What is new: gradients. The forward stored O and the LSE; from them, Q, K, V and dO this file
// computes dQ, dK and dV with three kernels, the three steps of the CPU model (model.cpp):
//   1. row_dot_kernel  D_i = dO_i . O_i, one warp per query row, into a scratch buffer (fp32);
//   2. dkdv_kernel     one block per (key tile of 32 keys, batch, kv head). The tile's K and V rows
//                      and its dK and dV accumulators stay in registers while every query tile
//                      that can see it streams through shared memory (Q, dO, LSE, D); P and dS are
//                      recomputed on the way. With GQA the block walks all the query heads of its
//                      group, so dK and dV need no atomics either;
//   3. dq_kernel       one block per (query tile of 32 rows, batch, head), lesson 04's shape: K and
//                      V stream through shared memory, dQ = scale dS K accumulates in registers.
// Why a second pass for dQ and not fp32 atomics from the dK/dV kernel: dQ_i sums over every key
// tile, and those live in different blocks. A second pass makes every output element the work of
// exactly one block: no race, no order-dependent rounding (the same bits every run, so
// p.deterministic needs nothing), and each kernel reads like its equations. The price is computing
// S, P and dP twice: 7 matrix products where 5 are needed. Lesson 11 measures the other choice.
// Causal: the dK/dV blocks start at the first query tile that sees their keys, the dQ blocks stop
// after the last key tile their rows see (backward.hpp); the mask is tested per pair, not skipped
// on interior tiles (lesson 06's split is left out to keep the kernels short).
// What it should do to speed: at best the SIMT forward's rate per product (lessons 04-06): every
// FMA reads one operand from shared memory, and each (query, key) pair is a chain of two dot
// products, four shuffles and an exp2. fa-bench counts 5 products, this file does 7, so its
// reported TFLOP/s are its FMA rate / 1.4. dkdv_kernel keeps its tile's K, V, dK and dV in
// registers, so few blocks fit on an SM; ptxas's register counts (printed when the lesson builds,
// README "The thread layout") and the measured times per kernel (README, "How to profile").
// Build, test, profile:
//   cmake --build --preset student --target check-lesson10        (the CPU model in model.cpp first)
//   lessons/10_backward/profile.sh
#include <string>

#include "backward.hpp"
#include "fa/cuda_check.hpp"
#include "fa/device.cuh"
#include "fa/params.hpp"

namespace {

using lesson10::first_query_tile;
using lesson10::key_tile_end;
using lesson10::tile_count;
using lesson10::visible;

constexpr int kRows = 32;                 // query rows per tile (Br), in both passes
constexpr int kKeys = 32;                 // keys per tile (Bc): one dK/dV block owns one key tile
constexpr int kGroup = 4;                 // threads per key row (dK/dV) or per query row (dQ), as in lesson 04
constexpr int kThreads = kKeys * kGroup;  // 128 threads, = kRows * kGroup as well
constexpr int kWarpRows = kThreads / 32;  // query rows per block of row_dot_kernel: one warp each
static_assert(kRows * kGroup == kThreads && kKeys == kRows, "one block shape and one tile shape for both passes");

// Each entry is a TODO of this file you have not written yet; the tests stop at the first one
// with "lesson 10 not implemented yet: <it>". Delete an entry when you have written its code.
const fa::TodoList kTodosLeft = {
    // @todos-left
};

// Rows r0 .. r0 + kRows - 1 (or keys: both tiles have 32 rows) of one head into shared memory as
// floats, all threads together; rows from `valid` on are zero. Element e = threadIdx.x,
// threadIdx.x + kThreads, ... is row e / D, column e % D: neighbouring threads read neighbouring
// addresses (lesson 04's load).
template <class T, int D>
__device__ __forceinline__ void load_tile(float (&dst)[kRows][D], const T* base, int64_t row_stride, int r0, int valid) {
  for (int e = threadIdx.x; e < kRows * D; e += kThreads) {
    const int r = e / D, x = e % D;
    dst[r][x] = r < valid ? fa::to_float(base[(r0 + r) * row_stride + x]) : 0.f;
  }
}

// Step 1: D_i = dO_i . O_i. Warp w of block (x, bh) takes row i = 4x + w of head bh; lane l
// multiplies dims l, l + 32, ... and the warp adds its 32 parts.
template <class T, int D>
__global__ void __launch_bounds__(kThreads) row_dot_kernel(const fa::AttnParams p, float* __restrict__ delta) {
  const int bh = blockIdx.y, b = bh / p.heads_q, h = bh % p.heads_q;
  const int i = blockIdx.x * kWarpRows + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (i >= p.seqlen_q) return;  // the whole warp leaves: its lanes share i
  const T* orow = static_cast<const T*>(p.o) + b * p.o_stride.batch + h * p.o_stride.head + i * p.o_stride.row;
  const T* dorow = static_cast<const T*>(p.dout) + b * p.do_stride.batch + h * p.do_stride.head + i * p.do_stride.row;
  float part = 0.f;
#pragma unroll
  for (int x = lane; x < D; x += 32) part += fa::to_float(dorow[x]) * fa::to_float(orow[x]);
  part = fa::group_sum<32>(part);
  if (lane == 0) delta[static_cast<int64_t>(bh) * p.seqlen_q + i] = part;
}

// Step 2: dK and dV of one key tile. Thread t works on key j = k0 + t / 4 as member g = t % 4 of
// its group and owns head dims g, g + 4, ... (lesson 04's layout, with keys in place of queries):
// it keeps its k, v, dk and dv values in registers for the whole walk.
template <class T, int D>
__global__ void __launch_bounds__(kThreads) dkdv_kernel(const fa::AttnParams p, const float* __restrict__ delta) {
  constexpr int kDims = D / kGroup;  // head dims per thread
  __shared__ float Qs[kRows][D];
  __shared__ float dOs[kRows][D];
  __shared__ float lse2_s[kRows];   // LSE_i * log2(e): P = exp2(S * log2(e) - lse2)
  __shared__ float delta_s[kRows];  // D_i
  const int bh = blockIdx.y, b = bh / p.heads_kv, hk = bh % p.heads_kv;
  const int group = p.heads_q / p.heads_kv;
  const int sq = p.seqlen_q, sk = p.seqlen_k;
  const int g = threadIdx.x % kGroup;
  const int k0 = blockIdx.x * kKeys, j = k0 + threadIdx.x / kGroup;  // this thread's key
  const bool key_valid = j < sk;
  const float scale_log2 = p.scale * fa::kLog2e;

  const T* krow = static_cast<const T*>(p.k) + b * p.k_stride.batch + hk * p.k_stride.head + j * p.k_stride.row;
  const T* vrow = static_cast<const T*>(p.v) + b * p.v_stride.batch + hk * p.v_stride.head + j * p.v_stride.row;
  float k[kDims], v[kDims], dk[kDims], dv[kDims];
#pragma unroll
  for (int x = 0; x < kDims; ++x) {
    k[x] = key_valid ? fa::to_float(krow[x * kGroup + g]) : 0.f;
    v[x] = key_valid ? fa::to_float(vrow[x * kGroup + g]) : 0.f;
    dk[x] = dv[x] = 0.f;
  }

  const int qt_begin = first_query_tile(k0, kRows, sq, sk, p.causal);  // causal early start
  for (int h = hk * group; h < (hk + 1) * group; ++h) {  // GQA: the query heads that share this K, V
    const T* qbase = static_cast<const T*>(p.q) + b * p.q_stride.batch + h * p.q_stride.head;
    const T* dobase = static_cast<const T*>(p.dout) + b * p.do_stride.batch + h * p.do_stride.head;
    const int64_t row0 = (static_cast<int64_t>(b) * p.heads_q + h) * sq;  // (b, h)'s rows of LSE and D
    for (int qt = qt_begin; qt < tile_count(sq, kRows); ++qt) {
      const int q0 = qt * kRows, rows = min(kRows, sq - q0);
      __syncthreads();  // everyone is done with the previous tile
      load_tile<T, D>(Qs, qbase, p.q_stride.row, q0, rows);
      load_tile<T, D>(dOs, dobase, p.do_stride.row, q0, rows);
      if (threadIdx.x < rows) {
        lse2_s[threadIdx.x] = p.lse[row0 + q0 + threadIdx.x] * fa::kLog2e;  // +inf stays +inf
        delta_s[threadIdx.x] = delta[row0 + q0 + threadIdx.x];
      }
      __syncthreads();
      // Every thread runs every row (the shuffles need the whole warp); `rows` is the same for all.
      for (int r = 0; r < rows; ++r) {
        const int i = q0 + r;
        // TODO(7): P, dP and dS of row i and this thread's key j, then the dv and dk updates.
        //   As in the model's pair_grad: q_i . k_j is this thread's kDims products of k[] and
        //   Qs[r][x * kGroup + g], summed over the group with fa::group_sum<kGroup>; p =
        //   exp2(q_i . k_j * scale_log2 - lse2_s[r]), or 0 when the key is past seqlen_k or (causal)
        //   not visible; dp = dO_i . v_j the same way (dOs and v[]); ds = p * (dp - delta_s[r]).
        //   Then dv[x] += p * dOs[r][x * kGroup + g] and dk[x] += ds * Qs[r][x * kGroup + g].
        // BEGIN SOLUTION
        float part = 0.f;
#pragma unroll
        for (int x = 0; x < kDims; ++x) part += k[x] * Qs[r][x * kGroup + g];
        const float s = fa::group_sum<kGroup>(part) * scale_log2;
        const bool live = key_valid && (!p.causal || visible(i, j, sq, sk));
        const float pij = live ? exp2f(s - lse2_s[r]) : 0.f;  // a row with LSE = +inf gets 0, not NaN
        float dp_part = 0.f;
#pragma unroll
        for (int x = 0; x < kDims; ++x) {
          const float o = dOs[r][x * kGroup + g];
          dp_part += v[x] * o;
          dv[x] += pij * o;
        }
        const float ds = pij * (fa::group_sum<kGroup>(dp_part) - delta_s[r]);
#pragma unroll
        for (int x = 0; x < kDims; ++x) dk[x] += ds * Qs[r][x * kGroup + g];
        // END SOLUTION
      }
    }
  }

  if (!key_valid) return;
  T* dkrow = static_cast<T*>(p.dk) + b * p.dk_stride.batch + hk * p.dk_stride.head + j * p.dk_stride.row;
  T* dvrow = static_cast<T*>(p.dv) + b * p.dv_stride.batch + hk * p.dv_stride.head + j * p.dv_stride.row;
#pragma unroll
  for (int x = 0; x < kDims; ++x) {
    dkrow[x * kGroup + g] = fa::from_float<T>(dk[x] * p.scale);  // the scale, once
    dvrow[x * kGroup + g] = fa::from_float<T>(dv[x]);
  }
}

// Step 3: dQ of one query tile. Thread t works on row i = q0 + t / 4 as member g = t % 4 and owns
// head dims g, g + 4, ... of q_i, dO_i and dq_i, in registers.
template <class T, int D>
__global__ void __launch_bounds__(kThreads) dq_kernel(const fa::AttnParams p, const float* __restrict__ delta) {
  constexpr int kDims = D / kGroup;
  __shared__ float Ks[kKeys][D];
  __shared__ float Vs[kKeys][D];
  const int bh = blockIdx.y, b = bh / p.heads_q, h = bh % p.heads_q;
  const int hk = h / (p.heads_q / p.heads_kv);
  const int sq = p.seqlen_q, sk = p.seqlen_k;
  const int g = threadIdx.x % kGroup;
  // Causal blocks have unequal work (the last query tile sees every key): heaviest first (lesson 06).
  const int qt = p.causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
  const int q0 = qt * kRows, i = q0 + threadIdx.x / kGroup;  // this thread's query row
  const bool row_valid = i < sq;
  const float scale_log2 = p.scale * fa::kLog2e;

  const T* qrow = static_cast<const T*>(p.q) + b * p.q_stride.batch + h * p.q_stride.head + i * p.q_stride.row;
  const T* dorow = static_cast<const T*>(p.dout) + b * p.do_stride.batch + h * p.do_stride.head + i * p.do_stride.row;
  float q[kDims], dout[kDims], dq[kDims];
#pragma unroll
  for (int x = 0; x < kDims; ++x) {
    q[x] = row_valid ? fa::to_float(qrow[x * kGroup + g]) : 0.f;
    dout[x] = row_valid ? fa::to_float(dorow[x * kGroup + g]) : 0.f;
    dq[x] = 0.f;
  }
  const int64_t row = static_cast<int64_t>(bh) * sq + i;
  const float lse2 = row_valid ? p.lse[row] * fa::kLog2e : INFINITY;  // rows past the end: P = 0
  const float delta_i = row_valid ? delta[row] : 0.f;

  const T* kbase = static_cast<const T*>(p.k) + b * p.k_stride.batch + hk * p.k_stride.head;
  const T* vbase = static_cast<const T*>(p.v) + b * p.v_stride.batch + hk * p.v_stride.head;
  const int kt_end = key_tile_end(q0, kRows, kKeys, sq, sk, p.causal);  // causal early stop
  for (int kt = 0; kt < kt_end; ++kt) {
    const int k0 = kt * kKeys;
    __syncthreads();
    load_tile<T, D>(Ks, kbase, p.k_stride.row, k0, sk - k0);
    load_tile<T, D>(Vs, vbase, p.v_stride.row, k0, sk - k0);
    __syncthreads();
    for (int c = 0; c < kKeys; ++c) {
      const int j = k0 + c;
      // TODO(8): P, dP and dS of key j and this thread's row i, then the dq update.
      //   As in TODO(7) with the roles swapped: q[] and dout[] in registers, Ks[c] and Vs[c] in
      //   shared memory, p = 0 for j >= sk or (causal) a key the row does not see, the row's
      //   lse2 and delta_i; then dq[x] += ds * Ks[c][x * kGroup + g].
      // BEGIN SOLUTION
      float part = 0.f;
#pragma unroll
      for (int x = 0; x < kDims; ++x) part += q[x] * Ks[c][x * kGroup + g];
      const float s = fa::group_sum<kGroup>(part) * scale_log2;
      const bool live = j < sk && (!p.causal || visible(i, j, sq, sk));
      const float pij = live ? exp2f(s - lse2) : 0.f;
      float dp_part = 0.f;
#pragma unroll
      for (int x = 0; x < kDims; ++x) dp_part += dout[x] * Vs[c][x * kGroup + g];
      const float ds = pij * (fa::group_sum<kGroup>(dp_part) - delta_i);
#pragma unroll
      for (int x = 0; x < kDims; ++x) dq[x] += ds * Ks[c][x * kGroup + g];
      // END SOLUTION
    }
  }

  if (!row_valid) return;
  T* dqrow = static_cast<T*>(p.dq) + b * p.dq_stride.batch + h * p.dq_stride.head + i * p.dq_stride.row;
#pragma unroll
  for (int x = 0; x < kDims; ++x) dqrow[x * kGroup + g] = fa::from_float<T>(dq[x] * p.scale);
}

template <class T, int D>
void launch(const fa::AttnParams& p, cudaStream_t stream) {
  // D (fp32, batch * heads_q * seqlen_q) lives in the process's device scratch (fa::device_scratch:
  // grown when a call needs more, kept for the next; an allocation per call would be timed too).
  float* delta = static_cast<float*>(fa::device_scratch(static_cast<size_t>(p.batch) * p.heads_q * p.seqlen_q * sizeof(float)));
  row_dot_kernel<T, D><<<dim3(tile_count(p.seqlen_q, kWarpRows), p.batch * p.heads_q), kThreads, 0, stream>>>(p, delta);
  FA_CHECK_LAUNCH();
  dkdv_kernel<T, D><<<dim3(tile_count(p.seqlen_k, kKeys), p.batch * p.heads_kv), kThreads, 0, stream>>>(p, delta);
  FA_CHECK_LAUNCH();
  dq_kernel<T, D><<<dim3(tile_count(p.seqlen_q, kRows), p.batch * p.heads_q), kThreads, 0, stream>>>(p, delta);
  FA_CHECK_LAUNCH();
}

void backward(const fa::AttnParams& p, cudaStream_t stream) {
  fa::throw_if_todos_left("10_backward", lesson10::kTilesTodosLeft);
  fa::throw_if_todos_left("10_backward", kTodosLeft);
  // p.deterministic is ignored: this backward is always deterministic (no atomics, one writer
  // per output element).
  FA_DISPATCH_DTYPE(p.dtype, T, {
    if (p.head_dim == 64) launch<T, 64>(p, stream);
    else launch<T, 128>(p, stream);
  });
}

}  // namespace

// What the lesson supports, its id and title: its fa_add_lesson line in CMakeLists.txt, generated
// into fa_lesson_10_declared(); to it the descriptor adds the entry points, variants and limits.
fa::LessonInfo fa_lesson_10_declared();

const fa::LessonInfo& fa_lesson_10() {
  static const fa::LessonInfo info = [] {
    fa::LessonInfo l = fa_lesson_10_declared();
    l.forward = nullptr;        // no forward: pair this backward with lesson 08's forward
    l.backward = &backward;
    l.max_batch_heads = 65535;  // (batch, head) is the grid's y
    return l;
  }();
  return info;
}
