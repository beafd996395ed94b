// Your copy of this lesson, generated from solutions/07_tensor_cores/kernel.cu by fa-skeleton.
// Lesson 07: the tensor cores. Lessons 04-06 computed every score with FP32 FMAs on the CUDA
// cores, whose peak is a small fraction of the tensor cores' (the README has both). mma.sync hands
// a whole 16 x 8 x 16 product to a warp's tensor cores in one instruction: fp16 or bf16 inputs,
// fp32 accumulators. Two things are new, and fragments.hpp holds both as plain functions:
//   1. fragments: each operand is spread over the 32 lanes of a warp in a fixed layout; ldmatrix
//      loads those layouts from shared memory (and .trans the transposed one, for V);
//   2. P never leaves registers: the accumulator layout of S = Q K^T (16 x 8 tiles) is exactly
//      the A-operand layout of O += P V once two neighbouring tiles are packed to 16 bits.
// First the warm-up (one warp, one 16 x 16 tile), then the attention kernel: lesson 06's loop
// (early stop, masks on diagonal tiles only), one warp per 16 query rows, K and V tiles loaded with
// plain 16-byte loads into shared memory, waited for, then computed. Lesson 08 overlaps the loads.
// Build, test, profile:
//   cmake --build --preset student --target check-lesson07
//   lessons/07_tensor_cores/profile.sh
#include <string>

#include "fa/cuda_check.hpp"
#include "fa/device.cuh"
#include "fa/mma.cuh"
#include "fa/params.hpp"
#include "fragments.hpp"

namespace {

using lesson07::ldmatrix_a;
using lesson07::ldmatrix_b;
using lesson07::ldmatrix_b_trans;
using lesson07::mma_c;
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kRows = 16 * kWarps;  // query rows per block (Br): 16 per warp
constexpr int kKeys = 64;           // keys per K/V tile (Bc)
constexpr float kLn2 = 0.6931471805599453f;

// Each entry is a TODO of this file you have not written yet; the tests stop at the first one
// with "lesson 07 not implemented yet: <it>". Delete an entry when you have written its code.
const fa::TodoList kTodosLeft = {
    "TODO(7) in kernel.cu: the warm-up: ldmatrix A's fragment (ldmatrix_a), B^T's two n8 fragments from B stored",
    "TODO(8) in kernel.cu: S = Q K^T: for each 16 columns kk of Q and each 16 keys nj, ldmatrix the K tile's",
    "TODO(9) in kernel.cu: the online softmax on fragments. Values 0, 1 of every s[nt] are row g, values 2, 3",
    "TODO(10) in kernel.cu: O += P V. For keys 16 kc .. 16 kc + 15, P's A fragment is {pack2(s[2kc][0], s[2kc][1]),",
};

// ---- The warm-up: C = A B^T (the S = Q K^T pattern) and E = A B (the O = P V pattern) for
// 16 x 16 row-major A and B, by one warp.
template <class T>
__global__ void warmup_kernel(const T* A, const T* B, float* C, float* E) {
  __shared__ alignas(16) T sA[16 * 16];
  __shared__ alignas(16) T sB[16 * 16];
  const int lane = threadIdx.x;
  for (int e = lane; e < 256; e += 32) sA[e] = A[e], sB[e] = B[e];
  __syncwarp();
  float c[2][4] = {}, e[2][4] = {};
  // TODO(7): the warm-up: ldmatrix A's fragment (ldmatrix_a), B^T's two n8 fragments from B stored
  //   [n][k] like K (ldmatrix_b), B's two n8 fragments with .trans like V (ldmatrix_b_trans); then
  //   mma C tile n = 0 with registers 0, 1 and tile n = 1 with registers 2, 3 (the same for E).
  for (int nt = 0; nt < 2; ++nt)
    for (int i = 0; i < 4; ++i) {
      const lesson07::RowCol rc = mma_c(lane, i);
      C[rc.row * 16 + nt * 8 + rc.col] = c[nt][i];
      E[rc.row * 16 + nt * 8 + rc.col] = e[nt][i];
    }
}

// ---- The attention kernel.
// Copies rows [row0, row0 + kTileRows) of a (rows x D) matrix into shared memory (row-major, no
// padding), 16 bytes per thread per step; rows past `nrows` become zeros.
template <int kTileRows, int D, class T>
__device__ __forceinline__ void load_tile(T* tile, const T* base, int64_t row_stride, int row0, int nrows) {
  constexpr int kChunks = D / 8;
  for (int e = threadIdx.x; e < kTileRows * kChunks; e += kThreads) {
    const int r = e / kChunks, c = e % kChunks;
    uint4 x = make_uint4(0, 0, 0, 0);
    if (row0 + r < nrows) x = *reinterpret_cast<const uint4*>(base + (row0 + r) * row_stride + 8 * c);
    *reinterpret_cast<uint4*>(tile + r * D + 8 * c) = x;
  }
}

template <class T, int D>
__global__ void __launch_bounds__(kThreads) tensor_core_kernel(const fa::AttnParams p) {
  constexpr int kNT = kKeys / 8;  // n8 tiles of S
  constexpr int kDT = D / 8;      // n8 tiles of O
  __shared__ alignas(16) T sQ[kRows * D];
  __shared__ alignas(16) T sK[kKeys * D];
  __shared__ alignas(16) T sV[kKeys * D];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int bh = blockIdx.y, b = bh / p.heads_q, h = bh % p.heads_q;
  const int hk = h / (p.heads_q / p.heads_kv);
  const int tile = p.causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;  // heaviest tiles first
  const int q0 = tile * kRows;
  const int offset = p.seqlen_k - p.seqlen_q;
  const T* qbase = static_cast<const T*>(p.q) + b * p.q_stride.batch + h * p.q_stride.head;
  const T* kbase = static_cast<const T*>(p.k) + b * p.k_stride.batch + hk * p.k_stride.head;
  const T* vbase = static_cast<const T*>(p.v) + b * p.v_stride.batch + hk * p.v_stride.head;

  // Q: loaded once, and kept in registers as the warp's A fragments, one per 16 columns.
  load_tile<kRows, D>(sQ, qbase, p.q_stride.row, q0, p.seqlen_q);
  __syncthreads();
  uint32_t qa[D / 16][4];
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)
    fa::ldmatrix_x4(qa[kk], fa::smem_addr(sQ + (warp * 16 + ldmatrix_a(lane).row) * D + kk * 16 + ldmatrix_a(lane).col));

  // Lesson 06's bounds: tiles [0, n_tiles) are visited, the first n_full need no mask.
  int k_end = p.seqlen_k;
  int n_full = p.seqlen_k / kKeys;
  if (p.causal) {
    k_end = min(p.seqlen_k, min(q0 + kRows, p.seqlen_q) + offset);
    n_full = max(0, min(n_full, (q0 + offset + 1) / kKeys));
  }
  const int n_tiles = k_end > 0 ? fa::ceil_div(k_end, kKeys) : 0;

  float o[kDT][4] = {};
  float m[2] = {fa::kNegInf, fa::kNegInf}, l[2] = {0.f, 0.f};  // rows g and g + 8 of the warp
  const float sl2 = p.scale * fa::kLog2e;
  for (int j = 0; j < n_tiles; ++j) {
    __syncthreads();  // every warp is done with the previous tile
    load_tile<kKeys, D>(sK, kbase, p.k_stride.row, j * kKeys, p.seqlen_k);
    load_tile<kKeys, D>(sV, vbase, p.v_stride.row, j * kKeys, p.seqlen_k);
    __syncthreads();

    float s[kNT][4] = {};
    // TODO(8): S = Q K^T: for each 16 columns kk of Q and each 16 keys nj, ldmatrix the K tile's
    //   two B fragments at row nj * 16 + ldmatrix_b(lane).row, column kk * 16 + ldmatrix_b(lane).col,
    //   then mma s[2 nj] with registers 0, 1 and s[2 nj + 1] with registers 2, 3 (A: qa[kk]).

    if (j >= n_full) {  // a diagonal or tail tile
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int row = q0 + warp * 16 + mma_c(lane, e).row;
          const int col = j * kKeys + nt * 8 + mma_c(lane, e).col;
          if (col >= p.seqlen_k || (p.causal && col > row + offset)) s[nt][e] = fa::kNegInf;
        }
    }

    // TODO(9): the online softmax on fragments. Values 0, 1 of every s[nt] are row g, values 2, 3
    //   row g + 8; the other columns of a row are in the 3 other lanes of the quad (fa::group_max<4>).
    //   Per row hh: the new max mx; m_scaled = mx * sl2, or 0 if mx is -inf; alpha = exp2(m[hh] sl2 -
    //   m_scaled); p = exp2(s sl2 - m_scaled) in place; l[hh] = l[hh] alpha + this lane's sum of p
    //   (the quad's sums are added once, at the end); o's values of row hh times alpha.

    // TODO(10): O += P V. For keys 16 kc .. 16 kc + 15, P's A fragment is {pack2(s[2kc][0], s[2kc][1]),
    //   pack2(s[2kc][2], s[2kc][3]), pack2(s[2kc+1][0], s[2kc+1][1]), pack2(s[2kc+1][2], s[2kc+1][3])};
    //   for each 16 dims dn, ldmatrix_x4_trans V at row kc * 16 + ldmatrix_b_trans(lane).row, column
    //   dn * 16 + ldmatrix_b_trans(lane).col, then mma o[2 dn] with registers 0, 1, o[2 dn + 1] with 2, 3.
  }

  T* obase = static_cast<T*>(p.o) + b * p.o_stride.batch + h * p.o_stride.head;
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const float sum = fa::group_sum<4>(l[hh]);
    const int row = q0 + warp * 16 + mma_c(lane, 2 * hh).row;
    if (row >= p.seqlen_q) continue;
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
#pragma unroll
    for (int dt = 0; dt < kDT; ++dt)
      *reinterpret_cast<uint32_t*>(obase + row * p.o_stride.row + dt * 8 + mma_c(lane, 2 * hh).col) =
          fa::pack2<T>(o[dt][2 * hh] * inv, o[dt][2 * hh + 1] * inv);
    if (lane % 4 == 0)
      p.lse[static_cast<int64_t>(bh) * p.seqlen_q + row] = sum > 0.f ? (m[hh] * sl2 + log2f(sum)) * kLn2 : INFINITY;
  }
}

template <class T, int D>
void launch(const fa::AttnParams& p, cudaStream_t stream) {
  const dim3 grid(fa::ceil_div(p.seqlen_q, kRows), p.batch * p.heads_q);
  tensor_core_kernel<T, D><<<grid, kThreads, 0, stream>>>(p);
  FA_CHECK_LAUNCH();
}

void check_todos() {
  fa::throw_if_todos_left("07_tensor_cores", lesson07::kFragmentsTodosLeft);
  fa::throw_if_todos_left("07_tensor_cores", kTodosLeft);
}

void forward(const fa::AttnParams& p, cudaStream_t stream) {
  check_todos();
  FA_DISPATCH_DTYPE(p.dtype, T, {
    if (p.head_dim == 64) launch<T, 64>(p, stream);
    else launch<T, 128>(p, stream);
  });
}

}  // namespace

// The warm-up, for tests/lesson07_gpu_test.cpp: C = A B^T and E = A B, 16 x 16, on the GPU. It
// needs fragments.hpp and TODO(7) only, so it can be tested before the attention kernel is written.
void fa_lesson07_warmup(fa::DType t, const void* A, const void* B, float* C, float* E, cudaStream_t stream) {
  fa::throw_if_todos_left("07_tensor_cores", lesson07::kFragmentsTodosLeft);
  fa::TodoList warmup_todos;
  for (const char* todo : kTodosLeft)
    if (std::string(todo).rfind("TODO(7)", 0) == 0) warmup_todos.push_back(todo);
  fa::throw_if_todos_left("07_tensor_cores", warmup_todos);
  FA_DISPATCH_DTYPE(t, T, {
    warmup_kernel<T><<<1, 32, 0, stream>>>(static_cast<const T*>(A), static_cast<const T*>(B), C, E);
  });
  FA_CHECK_LAUNCH();
}

// What the lesson supports, its id and title: its fa_add_lesson line in CMakeLists.txt, generated
// into fa_lesson_07_declared(); to it the descriptor adds the entry points, variants and limits.
fa::LessonInfo fa_lesson_07_declared();

const fa::LessonInfo& fa_lesson_07() {
  static const fa::LessonInfo info = [] {
    fa::LessonInfo l = fa_lesson_07_declared();
    l.forward = &forward;
    l.max_batch_heads = 65535;  // (batch, head) is the grid's y
    return l;
  }();
  return info;
}
