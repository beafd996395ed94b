// Your copy of this lesson, generated from solutions/11_fast_backward/dkdv.cuh by fa-skeleton.
// Lesson 11's dK/dV block: the backward's kernels, written once for any source of tiles, and the
// steps of one tile they call (the products on fragments, the dQ atomics, the stores): the
// preprocess, the dK/dV kernel (over a source of key tiles), convert_kernel, and the deterministic
// dQ pass (over a source of query tiles). kernel.cu's sources are the dense tensors'; lesson 12's
// are its packed sequences, with GQA and the gate (it includes this file).
#pragma once

#include <climits>
#include <cstdint>

#include "../08_pipelining/load_tile.cuh"
#include "fa/cuda_check.hpp"
#include "fa/device.cuh"
#include "fa/mma.cuh"
#include "fa/params.hpp"
#include "tiles.hpp"

namespace lesson11 {

// Each entry is a TODO of this file you have not written yet; the tests stop at the first TODO
// left, of this file or tiles.hpp, with "lesson 11 not implemented yet: <it>" (and lesson 12's,
// which runs these kernels, too). Delete an entry when you have written its code.
inline const fa::TodoList kDkdvTodosLeft = {
    "TODO(6) in dkdv.cuh: for each k16 step kc over the rows, P^T's and dS^T's A fragments from s and dp",
    "TODO(7) in dkdv.cuh: wait until every warp's dS^T is in sdS (__syncthreads), then acc = dS K over the",
    "TODO(4) in dkdv.cuh: the ring: wait for this iteration's tiles (cp_async_wait<0>), __syncthreads (the",
    "TODO(5) in dkdv.cuh: P^T and dS^T in place: s[kt][nt][e] (m16 tile kt of the warp's keys; the key and",
    "TODO(9) in dkdv.cuh: for each k16 step kc over the keys, dS's A fragment packed from dp (fa::pack2<T>)",
    "TODO(3) in dkdv.cuh: D_i: if i < len_q, this thread's part of O_i . dO_i: fa::dot8 of its 8 values of each",
    "TODO(8) in dkdv.cuh: dS = P (dP - D) in dp for the warp's rows (row = 16 warp + g + 8 (e / 2) from q0,",
};

// A value of shared memory read where it is used: the compiler may not keep a volatile read in a
// register across a loop, so it costs a register only for an instant. The dQ pass keeps its query
// tile's bounds so (lesson 12's kernels, at the 255-register limit, keep more).
template <class X>
__device__ __forceinline__ X fresh(const X& x) { return *static_cast<const volatile X*>(&x); }
// The same for 16 bytes at once (one shared-memory load): four ints, or two int64 (16-byte aligned).
__device__ __forceinline__ int4 fresh(const int4& x) {
  int4 v;
  asm volatile("ld.volatile.shared.v4.s32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(fa::smem_addr(&x)));
  return v;
}
__device__ __forceinline__ int2 fresh(const int2& x) {
  int2 v;
  asm volatile("ld.volatile.shared.v2.s32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "r"(fa::smem_addr(&x)));
  return v;
}
__device__ __forceinline__ longlong2 fresh_pair(const int64_t* x) {
  long long a, b;
  asm volatile("ld.volatile.shared.v2.s64 {%0, %1}, [%2];" : "=l"(a), "=l"(b) : "r"(fa::smem_addr(x)));
  return make_longlong2(a, b);
}

// The swizzled tiles assume that shared-memory rows of 128 bytes start at 128-byte boundaries. A
// kernel with static __shared__ variables gets its dynamic buffer after them, by default only
// 16-byte aligned, so it declares the buffer __align__(128): the buffer then starts at the next
// 128-byte boundary, at an address the compiler still knows. The check traps (an error at the
// next synchronisation) if a compiler ever places it otherwise.
__device__ __forceinline__ void check_tile_alignment(const void* tiles) {
  if (threadIdx.x == 0 && (fa::smem_addr(tiles) & 127u) != 0) __trap();
}

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

// The query tile (h, q0) as the dK/dV kernel's loop sees it against the key tile of bounds bd
// ({len_q, len_k, offset, k0}): {h, q0, whether it needs the mask, the mask's bound}. The bound:
// causal, q0 + offset - k0 (key k0 + k is masked past row q0 + r + offset, k > r + bound);
// otherwise len_k - k0 (masked at k >= bound).
template <int kKeys>
__device__ __forceinline__ int4 query_tile(int h, int q0, int4 bd, bool causal) {
  return make_int4(h, q0, needs_mask(q0, bd.w, kKeys, bd.y, bd.z, causal), causal ? q0 + bd.z - bd.w : bd.y - bd.w);
}


// ---- The dK/dV kernel, over any source of key tiles ----------------------------------------------
// One block per key tile: K and V stay in shared memory while the query tiles it sees (Q, dO, and
// their rows' LSE2 and D) stream past through a two-buffer cp.async ring. Each warp owns 16 kKT
// keys: it recomputes S^T = K Q^T and dP^T = V dO^T, turns them into P^T and dS^T in registers,
// and accumulates dV += P^T dO and dK += dS^T Q in registers, without a trip through memory.
// With kAtomicDq it also adds the tile's share of dQ to fp32 sums (atomic_dq).
//
// What the loop reads of its key tile, as the preprocess and the dQ pass read a QueryTile: written
// once by the block's thread 0 and read where it is used (fresh), the kernel being at the
// 255-register limit. Iteration `it` visits query tile first + it % per_head of head first_head +
// it / per_head (the heads of a kv head's group, one after the other).
struct KeyTile {
  int4 iters;       // {iterations, query tiles per head, the first query tile, the first query head}
  int4 bounds;      // {len_q, len_k, offset = len_k - len_q, k0 (the tile's first key)}
  int4 tile_of[2];  // per buffer: its query tile, as query_tile gives it (written as its loads start)
  alignas(16) int64_t origin[4];  // query head 0's row 0 in Q, dO, the statistics, the fp32 dQ sums
  alignas(16) int64_t kv[2], grads[2];  // the kv head's row 0 in K and V, and in dK and dV
  __device__ int2 head_row(int buf) const { return fresh(reinterpret_cast<const int2&>(tile_of[buf])); }
};
// The query tile after buffer buf's (h, q0): the head's next one, or the first of the next head.
template <int kRows>
__device__ __forceinline__ int2 next_query_tile(const KeyTile& blk, int buf) {
  const int2 t = blk.head_row(buf);
  return t.y + kRows >= fresh(blk.bounds.x) ? make_int2(t.x + 1, fresh(blk.iters.z) * kRows) : make_int2(t.x, t.y + kRows);
}
// The kernel's second parameter: Cols::Args is, or derives from, it. Head h's rows: + h strides.
struct KeyArgs {
  const float *lse2, *delta;
  float* dq_accum;
  int64_t stat_stride, accum_stride;  // a query head's rows of statistics, and of fp32 dQ sums
};
// Cols says which key tile a block takes and where its rows are: lesson 11's dense tensors
// (kernel.cu's DenseKeys), lesson 12's packed sequences (its backward.cuh's PackedKeys):
//   Cols::kKeys, Cols::kRows: the kernel's tile sizes (checked); Cols::Args (a KeyArgs);
//   Cols::Block      a KeyTile, and what else Cols keeps;
//   begin(p, a, blk) on thread 0: fills blk for the block's key tile; false if it has none;
//   Cols::Sums, Cols::kGate: lesson 12's gate, its sums of dS in shared memory (empty without)
//                    and its hooks (clear, start_tile, add_sums, end_tile, finish), called only then.
template <class T, int D, int kKeys, int kRows, int kSub, int kWarps, bool kAtomicDq, class Cols>
__global__ void __launch_bounds__(kWarps * 32, 1) dkdv_kernel(const fa::AttnParams p, const typename Cols::Args a) {
  constexpr int kThreads = kWarps * 32;
  constexpr int kKT = kKeys / (16 * kWarps);  // m16 tiles of keys per warp
  constexpr int kNT = kSub / 8;   // n8 tiles of the warp's S^T (16 kKT keys x kSub rows)
  constexpr int kDT = D / 8;      // n8 tiles of its dK and dV (16 keys x D)
  static_assert(Cols::kKeys == kKeys && Cols::kRows == kRows, "Cols's tiles are the kernel's");
  extern __shared__ __align__(128) uint4 smem[];  // 128-byte aligned: see check_tile_alignment
  T* sK = reinterpret_cast<T*>(smem);
  check_tile_alignment(smem);
  T* sV = sK + kKeys * D;
  T* sQ = sV + kKeys * D;        // two buffers
  T* sdO = sQ + 2 * kRows * D;   // two buffers
  T* sdS = sdO + 2 * kRows * D;  // dS^T, kKeys x kRows (atomic dQ only)
  float* sL = reinterpret_cast<float*>(sdS + kKeys * kRows);  // two buffers of kRows LSE (base 2)
  float* sDelta = sL + 2 * kRows;                            // two buffers of kRows D

  __shared__ typename Cols::Block blk;
  __shared__ bool has_tile;
  if (threadIdx.x == 0) has_tile = Cols::begin(p, a, blk);
  __syncthreads();
  if (!has_tile) return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, t = lane % 4;
  {
    const int4 bd = fresh(blk.bounds);
    if (threadIdx.x == 0) fa::tile_count_begin(p, fa::block_work(), bd.w, kKeys, kRows + fa::kKeysOwned);
    const longlong2 kv = fresh_pair(blk.kv);
    lesson08::load_tile<kThreads, kKeys, D>(sK, static_cast<const T*>(p.k) + kv.x, p.k_stride.row, bd.w, bd.y);
    lesson08::load_tile<kThreads, kKeys, D>(sV, static_cast<const T*>(p.v) + kv.y, p.v_stride.row, bd.w, bd.y);
  }
  // Starts the loads of query head h's tile at row q0 into buffer `buf`: Q, dO, and the rows' LSE2
  // and D (whole tiles of statistics: no guard); thread 0 writes the tile to blk.tile_of (query_tile).
  auto load_queries = [&](int h, int q0, int buf) {
    const int4 bd = fresh(blk.bounds);
    const longlong2 qd = fresh_pair(blk.origin);
    const T* qbase = static_cast<const T*>(p.q) + qd.x + h * p.q_stride.head;
    const T* dobase = static_cast<const T*>(p.dout) + qd.y + h * p.do_stride.head;
    lesson08::load_tile<kThreads, kRows, D>(sQ + buf * kRows * D, qbase, p.q_stride.row, q0, bd.x);
    lesson08::load_tile<kThreads, kRows, D>(sdO + buf * kRows * D, dobase, p.do_stride.row, q0, bd.x);
    const int64_t r0 = fresh(blk.origin[2]) + h * a.stat_stride + q0;
    const int x = threadIdx.x;
    if (x < kRows / 4) fa::cp_async_16(fa::smem_addr(sL + buf * kRows + 4 * x), a.lse2 + r0 + 4 * x, true);
    else if (x < kRows / 2)
      fa::cp_async_16(fa::smem_addr(sDelta + buf * kRows + 4 * (x - kRows / 4)), a.delta + r0 + 4 * (x - kRows / 4), true);
    if (x == 0) blk.tile_of[buf] = query_tile<kKeys>(h, q0, bd, p.causal);
  };
  {
    const int4 n = fresh(blk.iters);
    if (n.x > 0) load_queries(n.w, n.z * kRows, 0);
  }
  fa::cp_async_commit();

  float dk[kKT][kDT][4] = {}, dv[kKT][kDT][4] = {};
  __shared__ typename Cols::Sums sums;  // lesson 12's gate: the sums of dS it keeps (empty here)
  if constexpr (Cols::kGate) Cols::template clear<kThreads>(sums);  // before the loop's first barrier
  const float sl2 = p.scale * fa::kLog2e;
  // ldmatrix byte offsets: A from the warp's first 16 keys of K or V; B from Q or dO for S^T =
  // K Q^T and dP^T = V dO^T; .trans B from dO for dV, Q for dK, K for dQ.
  const uint32_t k_addr = fa::smem_addr(sK), v_addr = fa::smem_addr(sV);
  const uint32_t a_off = 2 * tile_offset(16 * kKT * warp + lane % 16, 8 * (lane / 16), D);
  const uint32_t b_off = 2 * tile_offset(lane % 8 + 8 * (lane / 16), 8 * ((lane / 8) % 2), D);
  const uint32_t t_off = 2 * tile_offset(lane % 8 + 8 * ((lane / 8) % 2), 8 * (lane / 16), D);
  const Offsets off{a_off, b_off, t_off};

  for (int it = 0;; ++it) {
    const int4 n = fresh(blk.iters);
    if (it >= n.x) break;
    if (threadIdx.x == 0) fa::tile_count_visit(p, fa::block_work());
    const int buf = it & 1;
    // TODO(4): the ring: wait for this iteration's tiles (cp_async_wait<0>), __syncthreads (the
    //   tiles visible to every warp, every warp done with the previous iteration's buffer and
    //   dS^T), then, if there is an iteration it + 1, start its query tile (next_query_tile) into
    //   buffer buf ^ 1 (load_queries); commit.
    float kg[kKT][2] = {};  // lesson 12's gate: this thread's keys' terms of the logits
    if constexpr (Cols::kGate) Cols::template start_tile<kAtomicDq>(p, a, blk, sums, it, buf, warp, lane, kg);
    const uint32_t q_addr = fa::smem_addr(sQ + buf * kRows * D), do_addr = fa::smem_addr(sdO + buf * kRows * D);
    const float* lse_s = sL + buf * kRows;
    const float* delta_s = sDelta + buf * kRows;

    // The mask, from the query tile's bound (lim), keys counted from the warp's first and rows from
    // the tile's first: causal, key > row + lim; otherwise key > lim - 1. One test for all three
    // modes, key > c row + l: c = 1 only for a causal tile that needs the mask, and l past every
    // key for a tile that needs none. So every tile runs one stretch of code without branches, in
    // which the scheduler overlaps the exponentials with the GEMMs around them. Causal, keys past
    // len_k are past row + offset for every row of the sequence, and rows past len_q have P = 0
    // anyway (LSE2 = +inf): no test of their own.
    const int4 mode = fresh(blk.tile_of[buf]);
    const int c = mode.z && p.causal;
    const int l = !mode.z ? INT_MAX : mode.w - 16 * kKT * warp - !p.causal;

    // The tile kSub rows at a time: one step's S^T and dP^T live at once. Not unrolled.
#pragma unroll 1
    for (int sub = 0; sub < kRows / kSub; ++sub) {
    const int r0 = sub * kSub;  // the step's first row within the tile
    // S^T = K Q^T and dP^T = V dO^T for the warp's 16 kKT keys and the step's kSub rows.
    float s[kKT][kNT][4] = {}, dp[kKT][kNT][4] = {};
    transposed_scores<T, D, kKT, kSub>(s, dp, k_addr, v_addr, q_addr, do_addr, off, r0);

    // TODO(5): P^T and dS^T in place: s[kt][nt][e] (m16 tile kt of the warp's keys; the key and
    //   row within their tiles from st_element) becomes P = exp2(s scale log2(e) - LSE2[row])
    //   (fa::ex2, LSE2 from lse_s; with Cols::kGate, LSE2 + kg[kt][e / 2]), 0 where the key is
    //   masked (key > c row + l, key = 16 kt + the element's key, row = r0 + the element's row),
    //   and dp[kt][nt][e] becomes dS = P (dP - D[row]) (D from delta_s).
    if constexpr (Cols::kGate) Cols::template add_sums<kAtomicDq>(sums, dp, r0, buf, warp, lane);

    // dV += P^T dO and dK += dS^T Q, and with kAtomicDq dS^T to sdS.
    accumulate_dkdv<T, D, kKT, kSub, kRows, kAtomicDq>(s, dp, dk, dv, sdS, q_addr, do_addr, off, r0, warp, lane);
    }  // sub

    // The iteration's query head and first row again, where S^T's fragments are dead.
    const int2 tile = blk.head_row(buf);
    if constexpr (Cols::kGate) Cols::template end_tile<kKT>(p, a, blk, sums, tile, warp, lane);
    if constexpr (kAtomicDq)  // dQ += dS K, added to the fp32 sums
      atomic_dq<T, D, kKeys, kRows, kWarps>(sdS, k_addr, off, tile.y, warp, lane, a.dq_accum,
                                             [&] { return fresh(blk.origin[3]) + tile.x * a.accum_stride; },
                                             [&] { return fresh(blk.bounds.x); });
  }
  if constexpr (Cols::kGate) Cols::template finish<kAtomicDq>(p, a, blk, sums);
  fa::cp_async_wait<0>();

  const int4 bd = fresh(blk.bounds);
  const longlong2 out = fresh_pair(blk.grads);
  store_dkdv<T>(dk, dv, static_cast<T*>(p.dk) + out.x, static_cast<T*>(p.dv) + out.y, p.dk_stride.row, p.dv_stride.row,
                bd.w, bd.y, p.scale, warp, lane);
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

// ---- The preprocess and the dQ pass, over any source of query tiles ------------------------------
// What a block of the preprocess or of the dQ pass needs of its query tile (kRows rows of query
// head h), written by the block's thread 0 (Rows::begin) and read back where it is used (fresh):
// no register holds it. Rows: lesson 11's dense tensors (kernel.cu's DenseRows), lesson 12's packed
// sequences with the gate (its backward.cuh's PackedRows).
struct QueryTile {
  int64_t k, v;              // element offsets of its K/V head's row 0 in K and V (a pair: fresh_pair)
  int64_t q, dout, dq, o;    // and of its head's row 0 in Q, dO, dQ and O
  int64_t lse, stats;        // index of that row 0 in the LSE, and in the statistics (lse2, delta)
  int4 loop;                 // what the key loop reads: n_tiles, n_full (lesson 06's bounds), len_k, q0 + offset
  int tile, len_q;           // tile -1: none (a spare block)
};
// The preprocess's and the dQ pass's second parameter: Rows::Args is, or derives from, it.
struct RowArgs {
  float *lse2, *delta;  // the statistics: the preprocess writes them, the dQ pass reads them
  int64_t stat_stride;  // a query head's rows of statistics
};

// D_i = dO_i . O_i and LSE2_i = LSE_i log2(e) (less the gate's row term, Rows::kGate) for the kRows
// rows of the block's query tile, D / 8 threads a row, 8 values each. The statistics have whole
// tiles of rows: the rows past len_q get LSE2 = +inf (so P = 0 there) and D = 0, and the dK/dV
// kernel loads whole tiles of both without a bounds check.
template <class T, int D, int kRows, class Rows>
__global__ void preprocess_kernel(const fa::AttnParams p, const typename Rows::Args a) {
  constexpr int kLanes = D / 8;
  __shared__ QueryTile qt;
  __shared__ typename Rows::Gate gate;
  if (threadIdx.x == 0) Rows::begin(p, a, kRows, kRows, qt, gate);
  __syncthreads();
  if (qt.tile < 0) return;
  const int c = threadIdx.x % kLanes, i = qt.tile * kRows + threadIdx.x / kLanes;
  float sum = 0.f;
  // TODO(3): D_i: if i < len_q, this thread's part of O_i . dO_i: fa::dot8 of its 8 values of each
  //   (columns 8 c .., from the tile's offsets qt.o and qt.dout, row i through the row strides);
  //   then add the row's lanes (fa::group_sum<kLanes>) and let lane c == 0 write, at statistics
  //   index qt.stats + i, a.delta (0 past len_q) and a.lse2 = lse[qt.lse + i] log2(e) (+inf past
  //   len_q), less Rows::row_term with Rows::kGate.
}

// The deterministic dQ pass: one block per query tile (kWarps x 16 rows), the key tiles streaming
// past in a two-stage ring, as in lesson 08's forward. Per key tile it recomputes S = Q K^T and
// dP = dO V^T, forms dS = P (dP - D) in registers and accumulates dQ += dS K: every dQ element is a
// sum in one fixed order, in one thread. Rows says which query tile a block takes and where its
// rows are: lesson 11's dense tensors (kernel.cu), lesson 12's packed sequences (its backward.cuh),
// whose gate also adds each key's term to the logits (Rows::kGate: keys, row_terms).
template <class T, int D, int kKeys, int kWarps, class Rows>
__global__ void __launch_bounds__(kWarps * 32, 2) dq_kernel(const fa::AttnParams p, const typename Rows::Args a) {
  constexpr int kThreads = kWarps * 32, kRows = 16 * kWarps, kNT = kKeys / 8, kDT = D / 8;
  extern __shared__ __align__(128) uint4 smem[];  // 128-byte aligned: see check_tile_alignment
  T* sQ = reinterpret_cast<T*>(smem);
  check_tile_alignment(smem);
  T* sdO = sQ + kRows * D;
  T* sK = sdO + kRows * D;  // two stages
  T* sV = sK + 2 * kKeys * D;
  __shared__ QueryTile qt;
  __shared__ typename Rows::Gate gate;  // Rows's own (lesson 12: the gate's G and anchor)
  if (threadIdx.x == 0) Rows::begin(p, a, kRows, kKeys, qt, gate);
  __syncthreads();
  if (qt.tile < 0) return;
  auto q0 = [&] { return fresh(qt.tile) * kRows; };
  auto len_k = [&] { return fresh(qt.loop.z); };
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const T* kbase = static_cast<const T*>(p.k);
  const T* vbase = static_cast<const T*>(p.v);

  lesson08::load_tile<kThreads, kRows, D>(sQ, static_cast<const T*>(p.q) + qt.q, p.q_stride.row, q0(), qt.len_q);
  lesson08::load_tile<kThreads, kRows, D>(sdO, static_cast<const T*>(p.dout) + qt.dout, p.do_stride.row, q0(), qt.len_q);
  if (fresh(qt.loop.x) > 0) {
    const longlong2 kv = fresh_pair(&qt.k);
    lesson08::load_tile<kThreads, kKeys, D>(sK, kbase + kv.x, p.k_stride.row, 0, len_k());
    lesson08::load_tile<kThreads, kKeys, D>(sV, vbase + kv.y, p.v_stride.row, 0, len_k());
  }
  fa::cp_async_commit();

  // This thread's two rows (g and g + 8 of the warp's 16): their LSE (base 2) and D.
  const int64_t r0 = qt.stats + q0() + 16 * warp + g;
  const float l2[2] = {a.lse2[r0], a.lse2[r0 + 8]}, dd[2] = {a.delta[r0], a.delta[r0 + 8]};
  const float sl2 = p.scale * fa::kLog2e;
  float acc[kDT][4] = {};
  float rows[2] = {0.f, 0.f};  // Rows::kGate: this thread's part of its two rows' sums of dS
  const uint32_t q_addr = fa::smem_addr(sQ), do_addr = fa::smem_addr(sdO), k_addr = fa::smem_addr(sK),
                 v_addr = fa::smem_addr(sV);
  const uint32_t a_off = 2 * tile_offset(16 * warp + lane % 16, 8 * (lane / 16), D);
  const uint32_t b_off = 2 * tile_offset(lane % 8 + 8 * (lane / 16), 8 * ((lane / 8) % 2), D);
  const uint32_t t_off = 2 * tile_offset(lane % 8 + 8 * ((lane / 8) % 2), 8 * (lane / 16), D);
  const Offsets off{a_off, b_off, t_off};

  for (int j = 0;; ++j) {
    const int4 top = fresh(qt.loop);
    if (j >= top.x) break;
    fa::cp_async_wait<0>();
    __syncthreads();
    if (j + 1 < top.x) {
      const int slot = (j + 1) % 2;
      const longlong2 kv = fresh_pair(&qt.k);
      lesson08::load_tile<kThreads, kKeys, D>(sK + slot * kKeys * D, kbase + kv.x, p.k_stride.row, (j + 1) * kKeys, top.z);
      lesson08::load_tile<kThreads, kKeys, D>(sV + slot * kKeys * D, vbase + kv.y, p.v_stride.row, (j + 1) * kKeys, top.z);
    }
    fa::cp_async_commit();
    const uint32_t kj = k_addr + (j % 2) * kKeys * D * 2, vj = v_addr + (j % 2) * kKeys * D * 2;

    // S = Q K^T and dP = dO V^T for the warp's 16 rows.
    float s[kNT][4] = {}, dp[kNT][4] = {};
    scores<T, D, kKeys>(s, dp, q_addr, do_addr, kj, vj, off);
    // The tile's bounds (and Rows's key terms), read once after S, where Q's and K's fragments
    // are dead. Rows are counted from q0: key col is masked at or past len_k (lim.z), or (causal)
    // past row + q0 + offset (lim.w); only tiles from n_full (lim.y) on need the mask.
    const int4 lim = fresh(qt.loop);
    const typename Rows::Keys keys = Rows::keys(a, gate);
    // TODO(8): dS = P (dP - D) in dp for the warp's rows (row = 16 warp + g + 8 (e / 2) from q0,
    //   column col = j kKeys + nt 8 + 2 t + e % 2), P = exp2(s scale log2(e) - lg) with lg the
    //   row's LSE2 (plus, with Rows::kGate, kg[e % 2]), and 0 where j >= n_full and col is masked.
    accumulate_dq<T, D, kKeys>(dp, acc, kj, off);  // dQ += dS K
  }
  fa::cp_async_wait<0>();

  if constexpr (Rows::kGate) Rows::row_terms(a, qt, gate, rows, q0() + 16 * warp + g, lane);
  store_dq<T>(acc, static_cast<T*>(p.dq) + qt.dq, p.dq_stride.row, [&] { return q0() + 16 * warp; }, qt.len_q, p.scale,
              lane);
}

// ---- The launches, over any sources of tiles ----------------------------------------------------
// The backward with configuration kIndex of tiles.hpp over the sources Keys (the dK/dV kernel's key
// tiles) and Rows (the query tiles of the preprocess, kPreRows rows, and of the dQ pass): kernel.cu
// runs it over the dense tensors, lesson 12 over its packed sequences. The preprocess, then the
// dK/dV kernel with dQ by atomics and convert_kernel (atomic_dq: into dq_accum, the fp32 sums,
// per_head x batches x heads_q rows of D floats, as convert_kernel reads them) or the dK/dV kernel
// and the dQ pass. keys(dq_accum or nullptr) makes the dK/dV kernel's arguments.
struct Grids {
  dim3 preprocess, dkdv, dq;
};
template <class T, int kIndex, int kPreRows, class Keys, class Rows, class MakeKeys>
void launch_backward(const fa::AttnParams& p, const Grids& grids, const typename Rows::Args& rows, MakeKeys keys,
                     bool atomic_dq, float* dq_accum, int64_t per_head, int batches, cudaStream_t stream) {
  constexpr Config c = kConfigs[kIndex];
  constexpr int D = c.head_dim, smem = smem_bytes(c);
  static_assert(well_formed(c), "a configuration in tiles.hpp is not well formed");
  preprocess_kernel<T, D, kPreRows, Rows><<<grids.preprocess, kPreRows * (D / 8), 0, stream>>>(p, rows);
  FA_CHECK_LAUNCH();
  if (atomic_dq) {
    const int64_t sums = per_head * batches * p.heads_q * D;
    FA_CUDA_CHECK(cudaMemsetAsync(dq_accum, 0, sums * sizeof(float), stream));
    auto kernel = dkdv_kernel<T, D, c.keys, c.rows, c.sub, c.warps, true, Keys>;
    fa::allow_smem(kernel, smem);
    kernel<<<grids.dkdv, threads(c), smem, stream>>>(p, keys(dq_accum));
    FA_CHECK_LAUNCH();
    convert_kernel<T, D><<<fa::grid_blocks((sums / 8 + 255) / 256, "convert_kernel"), 256, 0, stream>>>(p, dq_accum, per_head, batches);
    FA_CHECK_LAUNCH();
  } else {
    auto kernel = dkdv_kernel<T, D, c.keys, c.rows, c.sub, c.warps, false, Keys>;
    fa::allow_smem(kernel, smem);
    kernel<<<grids.dkdv, threads(c), smem, stream>>>(p, keys(nullptr));
    FA_CHECK_LAUNCH();
    auto dq = dq_kernel<T, D, kDqKeys, kDqWarps, Rows>;
    fa::allow_smem(dq, dq_smem_bytes(D));
    dq<<<grids.dq, kDqWarps * 32, dq_smem_bytes(D), stream>>>(p, rows);
    FA_CHECK_LAUNCH();
  }
}

}  // namespace lesson11
