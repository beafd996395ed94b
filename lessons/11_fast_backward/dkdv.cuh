// Your copy of this lesson, generated from solutions/11_fast_backward/dkdv.cuh by fa-skeleton.
// Lesson 11's dK/dV block: the steps of the dK/dV kernel and of the dQ pass on one tile, as device
// functions. kernel.cu's kernels call them between their own ring and mask code, and so do lesson
// 12's (GQA, packed sequences and the gate around the same steps; it includes this file).
#pragma once

#include <cstdint>

#include "fa/device.cuh"
#include "fa/mma.cuh"
#include "fa/params.hpp"
#include "tiles.hpp"

namespace lesson11 {

// Each entry is a TODO of this file you have not written yet; the tests stop at the first TODO
// left, of this file or kernel.cu, with "lesson 11 not implemented yet: <it>" (and lesson 12's,
// which runs these steps, too). Delete an entry when you have written its code.
inline const fa::TodoList kDkdvTodosLeft = {
    "TODO(6) in dkdv.cuh: for each k16 step kc over the rows, P^T's and dS^T's A fragments from s and dp",
    "TODO(7) in dkdv.cuh: wait until every warp's dS^T is in sdS (__syncthreads), then acc = dS K over the",
    "TODO(9) in dkdv.cuh: for each k16 step kc over the keys, dS's A fragment packed from dp (fa::pack2<T>)",
};

// A lane's ldmatrix byte offsets (lesson 08's patterns; step k along the columns is an XOR with
// 32 k), computed by the kernel once:
//   a: A operand, the warp's first 16 rows (row-major m16 x k16; the next m16 tile is 16 rows,
//      32 D bytes, further);
//   b: B operand from a [n][k] tile;
//   t: B operand from a [k][n] tile with .trans.
struct Offsets {
  uint32_t a, b, t;
};

// ---- The dK/dV kernel's steps (a warp owns 16 kKT keys; a step is kSub query rows from r0) ----

// S^T = K Q^T and dP^T = V dO^T for the warp's keys and the step's rows, added to s and dp (zero
// on entry): each Q and dO fragment read feeds kKT mma.
template <class T, int D, int kKT, int kSub>
__device__ __forceinline__ void transposed_scores(float (&s)[kKT][kSub / 8][4], float (&dp)[kKT][kSub / 8][4],
                                                  uint32_t k_addr, uint32_t v_addr, uint32_t q_addr, uint32_t do_addr,
                                                  const Offsets& off, int r0) {
  // Unrolled, but on sm_120 (GeForce RTX 50): there lesson 11's deterministic kernel with 32 keys
  // a warp spills (ptxas wants more than 255 registers) unless this loop stays rolled, and lesson
  // 12's kernels, which call this step too, get the rolled loop as well. Every other GPU gets the
  // unrolled loop (sm_80 and sm_90 fit in 255 registers).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1200
#pragma unroll 1
#else
#pragma unroll
#endif
  for (int kk = 0; kk < D / 16; ++kk) {
    uint32_t ka[kKT][4], va[kKT][4];
#pragma unroll
    for (int kt = 0; kt < kKT; ++kt) {
      fa::ldmatrix_x4(ka[kt], k_addr + (off.a ^ (32 * kk)) + kt * 32 * D);
      fa::ldmatrix_x4(va[kt], v_addr + (off.a ^ (32 * kk)) + kt * 32 * D);
    }
#pragma unroll
    for (int nj = 0; nj < kSub / 16; ++nj) {
      uint32_t qb[4], ob[4];
      fa::ldmatrix_x4(qb, q_addr + ((off.b ^ (32 * kk)) + (r0 / 16 + nj) * 32 * D));
      fa::ldmatrix_x4(ob, do_addr + ((off.b ^ (32 * kk)) + (r0 / 16 + nj) * 32 * D));
#pragma unroll
      for (int kt = 0; kt < kKT; ++kt) {
        fa::mma_m16n8k16<T>(s[kt][2 * nj], ka[kt], qb[0], qb[1]);
        fa::mma_m16n8k16<T>(s[kt][2 * nj + 1], ka[kt], qb[2], qb[3]);
        fa::mma_m16n8k16<T>(dp[kt][2 * nj], va[kt], ob[0], ob[1]);
        fa::mma_m16n8k16<T>(dp[kt][2 * nj + 1], va[kt], ob[2], ob[3]);
      }
    }
  }
}

// dV += P^T dO and dK += dS^T Q for the step's rows, from P^T in s and dS^T in dp (the warp `warp`'s
// keys); with kAtomicDq, dS^T also goes to sdS (kKeys x kRows) for the dQ product.
template <class T, int D, int kKT, int kSub, int kRows, bool kAtomicDq>
__device__ __forceinline__ void accumulate_dkdv(const float (&s)[kKT][kSub / 8][4], const float (&dp)[kKT][kSub / 8][4],
                                                float (&dk)[kKT][D / 8][4], float (&dv)[kKT][D / 8][4], T* sdS,
                                                uint32_t q_addr, uint32_t do_addr, const Offsets& off, int r0, int warp,
                                                int lane) {
  const int g = lane / 4, t = lane % 4;
  // TODO(6): for each k16 step kc over the rows, P^T's and dS^T's A fragments from s and dp
  //   (lesson 07's accumulator -> A repacking, fa::pack2<T>: register i of m16 tile kt packs
  //   n8 tiles 2 kc and 2 kc + 1), dO and Q as B fragments with ldmatrix .trans at off.t (step dn
  //   along D: ^ 32 dn; rows r0 + 16 kc on: + (r0 / 16 + kc) 32 D bytes); with kAtomicDq, also
  //   store dS^T's packed registers to sdS (kKeys x kRows, swizzled: tile_offset(key, row,
  //   kRows)): register 0 at (key, row), 1 at (key + 8, row), 2 at (key, row + 8), 3 at (key + 8,
  //   row + 8), key = 16 (kKT warp + kt) + g (the block's keys), row = r0 + 16 kc + 2 t.
}

// The atomic strategy's dQ share of one query tile: dQ (kRows x D) += dS (kRows x kKeys) K (kKeys
// x D) from the dS^T every warp stored to sdS, added to the fp32 sums with atomics. The warps as
// 2 x (kWarps / 2), each a (kRows / 2)-row by kDW-column piece (kMQ m16 tiles), summed over the
// tile's keys. Two warps down and the rest across reads the fewest fragments. The tile's first row
// is q0; the sums are rows of D floats from dq_accum, the tile's head's first at head_row(), and
// rows_end() bounds the rows stored: both read after the product, where its fragments are dead.
template <class T, int D, int kKeys, int kRows, int kWarps, class HeadRow, class RowsEnd>
__device__ __forceinline__ void atomic_dq(const T* sdS, uint32_t k_addr, const Offsets& off, int q0, int warp, int lane,
                                          float* dq_accum, HeadRow head_row, RowsEnd rows_end) {
  constexpr int kNW = kWarps / 2, kDW = D / kNW, kMQ = kRows / 32;
  const int mw = warp % 2, nw = warp / 2, g = lane / 4, t = lane % 4;
  // TODO(7): wait until every warp's dS^T is in sdS (__syncthreads), then acc = dS K over the
  //   kKeys / 16 key steps: dS's A fragments with ldmatrix .trans from sdS (it is stored
  //   transposed: lesson11::ldmatrix_a_trans), K's B fragments with .trans at off.t (columns
  //   nw * kDW onwards); then add acc to row head_row() + row of the sums with atomicAdd
  //   (float2 on sm_90 and newer), row = q0 + 16 (mw kMQ + mt) + g + 8 hh for rows below
  //   rows_end() only.
}

// dK = scale dS^T Q (the scale once, here) and dV, rounded once, for the warp's keys of the key tile
// at k0; keys at or past len_k are not stored.
template <class T, int kKT, int kDT>
__device__ __forceinline__ void store_dkdv(const float (&dk)[kKT][kDT][4], const float (&dv)[kKT][kDT][4], T* dkb,
                                           T* dvb, int64_t dk_row, int64_t dv_row, int k0, int len_k, float scale,
                                           int warp, int lane) {
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int kt = 0; kt < kKT; ++kt)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int key = k0 + 16 * (kKT * warp + kt) + g + 8 * hh;
      if (key >= len_k) continue;
#pragma unroll
      for (int dt = 0; dt < kDT; ++dt) {
        *reinterpret_cast<uint32_t*>(dkb + key * dk_row + dt * 8 + 2 * t) =
            fa::pack2<T>(dk[kt][dt][2 * hh] * scale, dk[kt][dt][2 * hh + 1] * scale);
        *reinterpret_cast<uint32_t*>(dvb + key * dv_row + dt * 8 + 2 * t) =
            fa::pack2<T>(dv[kt][dt][2 * hh], dv[kt][dt][2 * hh + 1]);
      }
    }
}

// The atomic strategy's last kernel: dQ = scale * (the fp32 sums), rounded to T, through dQ's
// strides, 8 values a thread. The sums are rows of D floats, `per_head` rows for each of `batches`
// x heads_q (batch, head) pairs: dense, (batch, heads_q, seqlen_q, D); packed sequences (lesson 12),
// one batch of total_q tokens a head, whose row i is token i (dQ's batch stride unused).
template <class T, int D>
__global__ void convert_kernel(const fa::AttnParams p, const float* dq_accum, int64_t per_head, int batches) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t rows = int64_t(batches) * p.heads_q * per_head;
  if (idx >= rows * (D / 8)) return;
  const int64_t row = idx / (D / 8);
  const int c = static_cast<int>(idx % (D / 8));
  const int64_t bh = row / per_head, i = row % per_head;
  const int b = static_cast<int>(bh / p.heads_q), h = static_cast<int>(bh % p.heads_q);
  const float4 x0 = *reinterpret_cast<const float4*>(dq_accum + row * D + 8 * c);
  const float4 x1 = *reinterpret_cast<const float4*>(dq_accum + row * D + 8 * c + 4);
  const float s = p.scale;
  uint4 out;
  out.x = fa::pack2<T>(x0.x * s, x0.y * s);
  out.y = fa::pack2<T>(x0.z * s, x0.w * s);
  out.z = fa::pack2<T>(x1.x * s, x1.y * s);
  out.w = fa::pack2<T>(x1.z * s, x1.w * s);
  *reinterpret_cast<uint4*>(static_cast<T*>(p.dq) + b * p.dq_stride.batch + h * p.dq_stride.head + i * p.dq_stride.row +
                            8 * c) = out;
}

// ---- The dQ pass's steps (a warp owns 16 query rows; a key tile is kKeys keys) ----

// S = Q K^T and dP = dO V^T for the warp's rows and the key tile at kj (K) and vj (V), added to s
// and dp (zero on entry).
template <class T, int D, int kKeys>
__device__ __forceinline__ void scores(float (&s)[kKeys / 8][4], float (&dp)[kKeys / 8][4], uint32_t q_addr,
                                       uint32_t do_addr, uint32_t kj, uint32_t vj, const Offsets& off) {
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    uint32_t qa[4], oa[4];
    fa::ldmatrix_x4(qa, q_addr + (off.a ^ (32 * kk)));
    fa::ldmatrix_x4(oa, do_addr + (off.a ^ (32 * kk)));
#pragma unroll
    for (int nj = 0; nj < kKeys / 16; ++nj) {
      uint32_t kb[4], vb[4];
      fa::ldmatrix_x4(kb, kj + ((off.b ^ (32 * kk)) + nj * 32 * D));
      fa::mma_m16n8k16<T>(s[2 * nj], qa, kb[0], kb[1]);
      fa::mma_m16n8k16<T>(s[2 * nj + 1], qa, kb[2], kb[3]);
      fa::ldmatrix_x4(vb, vj + ((off.b ^ (32 * kk)) + nj * 32 * D));
      fa::mma_m16n8k16<T>(dp[2 * nj], oa, vb[0], vb[1]);
      fa::mma_m16n8k16<T>(dp[2 * nj + 1], oa, vb[2], vb[3]);
    }
  }
}

// dQ += dS K for the warp's rows: dS (in dp) repacked into A fragments, K's B fragments with
// ldmatrix .trans from the key tile at kj.
template <class T, int D, int kKeys>
__device__ __forceinline__ void accumulate_dq(const float (&dp)[kKeys / 8][4], float (&acc)[D / 8][4], uint32_t kj,
                                              const Offsets& off) {
  // TODO(9): for each k16 step kc over the keys, dS's A fragment packed from dp (fa::pack2<T>)
  //   and K's B fragments with ldmatrix .trans at off.t, into acc.
}

// dQ = scale acc, rounded once, for the warp's two rows a thread (row0() + g and + 8, read
// per row); rows at or past len_q are not stored.
template <class T, int kDT, class Row0>
__device__ __forceinline__ void store_dq(const float (&acc)[kDT][4], T* dqb, int64_t dq_row, Row0 row0, int len_q,
                                         float scale, int lane) {
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int row = row0() + g + 8 * hh;
    if (row >= len_q) continue;
#pragma unroll
    for (int dt = 0; dt < kDT; ++dt)
      *reinterpret_cast<uint32_t*>(dqb + row * dq_row + dt * 8 + 2 * t) =
          fa::pack2<T>(acc[dt][2 * hh] * scale, acc[dt][2 * hh + 1] * scale);
  }
}

}  // namespace lesson11
