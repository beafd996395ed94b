// Lesson 09: RoPE fused into the attention kernel. Rotary position embedding turns each pair
// (i, i + d/2) of a query or key by an angle proportional to its position (rope.hpp), so that
// q_rot . k_rot depends only on the distance between the two positions. Two ways to run it:
//   rotate-outside  a standalone kernel writes rotated Q and K to memory, then lesson 08's
//                   attention kernel runs unchanged on them (the variant outside);
//   fused           the attention kernel rotates the Q tile once when it lands in shared memory,
//                   and each K tile as it streams in, before any QK^T (the default).
// Both run the same attention kernel with the same tiles (lesson 08's tiles.hpp): the only
// difference is where the rotation happens, so the experiment in the README measures that alone.
// Build, test, profile:
//   cmake --build --preset student --target check-lesson09
//   lessons/09_rope_fusion/profile.sh
#include <climits>
#include <string>

#include "../08_pipelining/tiles.hpp"
#include "fa/cuda_check.hpp"
#include "fa/device.cuh"
#include "fa/mma.cuh"
#include "fa/params.hpp"
#include "rope.hpp"

namespace {

using lesson08::Config;
using lesson08::kConfigs;
using lesson08::tile_offset;
using lesson09::pair_task;
using lesson09::PairTask;
constexpr float kLn2 = 0.6931471805599453f;

// Each entry is a TODO of this file you have not written yet; the tests stop at the first one
// with "lesson 09 not implemented yet: <it>". Delete an entry when you have written its code.
const fa::TodoList kTodosLeft = {
    // @todos-left
};

// 8 consecutive 16-bit values (one 16-byte chunk) <-> 8 floats.
template <class T>
__device__ __forceinline__ void unpack8(const uint4& c, float (&x)[8]) {
  const uint32_t w[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = fa::unpack2<T>(w[i]);
    x[2 * i] = f.x, x[2 * i + 1] = f.y;
  }
}
template <class T>
__device__ __forceinline__ uint4 pack8(const float (&x)[8]) {
  return make_uint4(fa::pack2<T>(x[0], x[1]), fa::pack2<T>(x[2], x[3]), fa::pack2<T>(x[4], x[5]), fa::pack2<T>(x[6], x[7]));
}
// threadIdx.x, read where it is used: the compiler may not move a volatile asm out of a loop.
__device__ __forceinline__ int thread_index() {
  int x;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(x));
  return x;
}
// 8 consecutive floats of a table row (16-byte aligned: validation checks the table pointers).
__device__ __forceinline__ void load8(float (&x)[8], const float* at) {
  const float4 a = __ldg(reinterpret_cast<const float4*>(at)), b = __ldg(reinterpret_cast<const float4*>(at) + 1);
  x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w, x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
}

// ---------------------------------------------------------------------------------------------
// Rotate-outside: one thread per (row, chunk pair) of Q and of K, Q's rows first. Reads 2 x 16
// bytes of the row and 4 x 16 bytes of the tables, writes the 2 rotated chunks to a contiguous
// (batch, heads, seqlen, D) copy.
template <class T, int D>
__global__ void __launch_bounds__(256) rope_kernel(const fa::AttnParams p, T* q_out, T* k_out) {
  constexpr int kPairs = D / 16;
  const int64_t q_rows = int64_t(p.batch) * p.heads_q * p.seqlen_q;
  const int64_t k_rows = int64_t(p.batch) * p.heads_kv * p.seqlen_k;
  const int64_t task = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t row = task / kPairs;
  const int chunk = static_cast<int>(task % kPairs);
  if (row >= q_rows + k_rows) return;
  // TODO(4): the rotation of one pair of chunks: find whether `row` is a row of Q (row < q_rows)
  //   or of K (row - q_rows), its (b, h, s) and position (query_position for Q, s for K); read
  //   chunks `chunk` and `chunk + kPairs` of that row through the strides, the 8 cos and 8 sin at
  //   (position, 8 chunk) of the tables, rotate with rotate_pairs, and write both chunks to
  //   q_out / k_out + row * D (contiguous).
  // BEGIN SOLUTION
  const bool is_q = row < q_rows;
  if (!is_q) row -= q_rows;
  const int heads = is_q ? p.heads_q : p.heads_kv, seqlen = is_q ? p.seqlen_q : p.seqlen_k;
  const int s = static_cast<int>(row % seqlen);
  const int64_t bh = row / seqlen;
  const int64_t b = bh / heads, h = bh % heads;
  const fa::Strides& st = is_q ? p.q_stride : p.k_stride;
  const T* src = static_cast<const T*>(is_q ? p.q : p.k) + b * st.batch + h * st.head + s * st.row + 8 * chunk;
  T* dst = (is_q ? q_out : k_out) + row * D + 8 * chunk;
  const int pos = is_q ? lesson09::query_position(s, p.seqlen_q, p.seqlen_k) : s;
  float x1[8], x2[8], cs[8], sn[8];
  unpack8<T>(*reinterpret_cast<const uint4*>(src), x1);
  unpack8<T>(*reinterpret_cast<const uint4*>(src + D / 2), x2);
  load8(cs, p.rope_cos + int64_t(pos) * (D / 2) + 8 * chunk);
  load8(sn, p.rope_sin + int64_t(pos) * (D / 2) + 8 * chunk);
  lesson09::rotate_pairs<8>(x1, x2, cs, sn);
  *reinterpret_cast<uint4*>(dst) = pack8<T>(x1);
  *reinterpret_cast<uint4*>(dst + D / 2) = pack8<T>(x2);
  // END SOLUTION
}

// ---------------------------------------------------------------------------------------------
// Lesson 08's copy of a tile, unchanged: thread x copies chunk x % (D / 8) of its rows. V, and Q
// and K when nothing is rotated, are loaded this way.
template <int kThreads, int kTileRows, int D, class T>
__device__ __forceinline__ void load_tile(T* tile, const T* base, int64_t row_stride, int row0, int nrows) {
  constexpr int kChunks = D / 8;
  constexpr int kStepRows = kThreads / kChunks;
  static_assert(kStepRows % 8 == 0 && kTileRows % kStepRows == 0, "whole steps of whole swizzle groups");
  const int c = threadIdx.x % kChunks, r = threadIdx.x / kChunks;
  const uint32_t dst = fa::smem_addr(tile + tile_offset(r, 8 * c, D));
  const T* src = base + (row0 + r) * row_stride + 8 * c;
#pragma unroll
  for (int i = 0; i < kTileRows / kStepRows; ++i) {
    const bool valid = row0 + r + i * kStepRows < nrows;
    fa::cp_async_16(dst + i * kStepRows * D * 2, valid ? src : base, valid);
    src += kStepRows * row_stride;
  }
}

// Fused. Starts the copy of rows [row0, row0 + kTileRows) of a (rows x D) matrix into a swizzled
// shared tile, each thread copying whole RoPE pairs of chunks (rope.hpp, pair_task). Rows at or
// past `nrows` are zero-filled.
template <int kThreads, int kTileRows, int D, class T>
__device__ __forceinline__ void load_pairs(T* tile, const T* base, int64_t row_stride, int row0, int nrows) {
  constexpr int kStepRows = kThreads / (D / 16);  // rows per step (a multiple of 8)
  static_assert(kStepRows % 8 == 0 && kTileRows % kStepRows == 0, "whole steps of whole swizzle groups");
  // TODO(5): the copy: in step i (0 .. kTileRows / kStepRows - 1), task = pair_task(threadIdx.x,
  //   i, kThreads, D); copy chunk task.chunk of row task.row (source base + (row0 + row) *
  //   row_stride + 8 chunk, target tile + tile_offset(row, 8 chunk, D)) and its partner D / 2
  //   columns further, both with fa::cp_async_16 (valid only when row0 + row < nrows).
  // BEGIN SOLUTION
  const PairTask t = pair_task(threadIdx.x, 0, kThreads, D);
  // Moving down kStepRows rows keeps row % 8, so both swizzled targets just move by kStepRows * D;
  // the partner chunk is one XOR away (rope.hpp, partner_offset; bytes are 2 per value).
  const uint32_t lo = 2 * tile_offset(t.row, 8 * t.chunk, D), hi = lo ^ D;
  const uint32_t at = fa::smem_addr(tile);
  const T* src = base + (row0 + t.row) * row_stride + 8 * t.chunk;
#pragma unroll
  for (int i = 0; i < kTileRows / kStepRows; ++i) {
    const bool valid = row0 + t.row + i * kStepRows < nrows;
    fa::cp_async_16(at + lo + i * kStepRows * D * 2, valid ? src : base, valid);
    fa::cp_async_16(at + hi + i * kStepRows * D * 2, valid ? src + D / 2 : base, valid);
    src += kStepRows * row_stride;
  }
  // END SOLUTION
}

// Q and K: in pairs of chunks when they are rotated in the kernel, as in lesson 08 otherwise.
template <bool kPairs, int kThreads, int kTileRows, int D, class T>
__device__ __forceinline__ void load_qk(T* tile, const T* base, int64_t row_stride, int row0, int nrows) {
  if constexpr (kPairs) load_pairs<kThreads, kTileRows, D>(tile, base, row_stride, row0, nrows);
  else load_tile<kThreads, kTileRows, D>(tile, base, row_stride, row0, nrows);
}

// Rotates, in place, the pairs this thread copied with load_pairs into `tile` (rows row0 .. of
// the matrix, the first at position pos0). Call it after cp_async_wait has seen this thread's
// copies land: they are visible to this thread, and nobody else touches these chunks. Rows past
// `nrows` hold zeros (and may lie past the tables): leave them.
template <int kThreads, int kTileRows, int D, class T>
__device__ __forceinline__ void rotate_own_pairs(T* tile, const float* cos_tab, const float* sin_tab, int row0,
                                                 int nrows, int pos0) {
  constexpr int kStepRows = kThreads / (D / 16);
  // TODO(6): for each step's task (as in load_pairs) whose row exists: read the two chunks from
  //   the tile, the 8 cos and 8 sin at (pos0 + task.row, 8 task.chunk) of the tables (row-major,
  //   D / 2 per position), rotate them with rotate_pairs, and write them back to the same places.
  // BEGIN SOLUTION
  // One step at a time, half a chunk (4 pairs) at a time: the attention kernel holds O's
  // accumulators in 128 registers throughout, and at 255 registers ptxas spills as soon as more
  // table and data values are live at once (README, "Registers").
  // (thread_index() rather than threadIdx.x: its offsets are then recomputed at each call, not
  // hoisted out of the key loop by the compiler to sit in registers through the whole loop.)
  const PairTask t = pair_task(thread_index(), 0, kThreads, D);
  const int off = tile_offset(t.row, 8 * t.chunk, D);  // steps of kStepRows rows keep row % 8
  const int64_t at = int64_t(pos0 + t.row) * (D / 2) + 8 * t.chunk;
#pragma unroll 1
  for (int i = 0; row0 + t.row + i * kStepRows < min(nrows, row0 + kTileRows); ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      uint2* lo = reinterpret_cast<uint2*>(tile + off + i * kStepRows * D + 4 * h);
      uint2* hi = reinterpret_cast<uint2*>(tile + lesson09::partner_offset(off, D) + i * kStepRows * D + 4 * h);
      const float4 c4 = __ldg(reinterpret_cast<const float4*>(cos_tab + at + i * kStepRows * (D / 2) + 4 * h));
      const float4 s4 = __ldg(reinterpret_cast<const float4*>(sin_tab + at + i * kStepRows * (D / 2) + 4 * h));
      const uint2 a = *lo, b = *hi;
      const float2 a0 = fa::unpack2<T>(a.x), a1 = fa::unpack2<T>(a.y), b0 = fa::unpack2<T>(b.x), b1 = fa::unpack2<T>(b.y);
      float x1[4] = {a0.x, a0.y, a1.x, a1.y}, x2[4] = {b0.x, b0.y, b1.x, b1.y};
      const float cs[4] = {c4.x, c4.y, c4.z, c4.w}, sn[4] = {s4.x, s4.y, s4.z, s4.w};
      lesson09::rotate_pairs<4>(x1, x2, cs, sn);
      *lo = make_uint2(fa::pack2<T>(x1[0], x1[1]), fa::pack2<T>(x1[2], x1[3]));
      *hi = make_uint2(fa::pack2<T>(x2[0], x2[1]), fa::pack2<T>(x2[2], x2[3]));
    }
  }
  // END SOLUTION
}

// Lesson 08's kernel, with kRope: rotate Q and each K tile in shared memory (fused), or not (the
// attention kernel the rotate-outside path runs). Warp w owns query rows w * kWarpRows .. of the
// block, as kMT m16 tiles; each thread holds, per m16 tile, two rows (lane / 4 and lane / 4 + 8).
template <class T, int D, int kRows, int kKeys, int kSub, int kWarps, int kStages, int kBlocksPerSM, bool kRope>
__global__ void __launch_bounds__(kWarps * 32, kBlocksPerSM) rope_attention_kernel(const fa::AttnParams p) {
  constexpr int kThreads = kWarps * 32;
  constexpr int kWarpRows = kRows / kWarps;
  constexpr int kMT = kWarpRows / 16;  // m16 tiles per warp
  constexpr int kNT = kSub / 8;        // n8 tiles of S per m16 tile
  constexpr int kDT = D / 8;           // n8 tiles of O per m16 tile
  extern __shared__ uint4 smem[];      // uint4: 16-byte aligned
  T* sQ = reinterpret_cast<T*>(smem);
  T* sK = sQ + kRows * D;
  T* sV = sK + kStages * kKeys * D;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int bh = blockIdx.y, b = bh / p.heads_q, h = bh % p.heads_q;
  const int hk = h / (p.heads_q / p.heads_kv);
  const int tile = p.causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;  // heaviest tiles first
  const int q0 = tile * kRows;
  const int offset = p.seqlen_k - p.seqlen_q;  // query i sees keys j <= i + offset
  const T* qbase = static_cast<const T*>(p.q) + b * p.q_stride.batch + h * p.q_stride.head;
  const T* kbase = static_cast<const T*>(p.k) + b * p.k_stride.batch + hk * p.k_stride.head;
  const T* vbase = static_cast<const T*>(p.v) + b * p.v_stride.batch + hk * p.v_stride.head;

  // Lesson 06's loop bounds, in tiles of kKeys: n_tiles to visit, the first n_full without a mask.
  int k_end = p.seqlen_k;
  int n_full = p.seqlen_k / kKeys;
  if (p.causal) {
    k_end = min(p.seqlen_k, min(q0 + kRows, p.seqlen_q) + offset);
    n_full = max(0, min(n_full, (q0 + offset + 1) / kKeys));
  }
  const int n_tiles = k_end > 0 ? fa::ceil_div(k_end, kKeys) : 0;

  // Lesson 08's prologue: the Q tile, then K and V tiles 0 .. kStages - 2, one commit group each.
  load_qk<kRope, kThreads, kRows, D>(sQ, qbase, p.q_stride.row, q0, p.seqlen_q);
  fa::cp_async_commit();
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < n_tiles) {
      load_qk<kRope, kThreads, kKeys, D>(sK + s * kKeys * D, kbase, p.k_stride.row, s * kKeys, p.seqlen_k);
      load_tile<kThreads, kKeys, D>(sV + s * kKeys * D, vbase, p.v_stride.row, s * kKeys, p.seqlen_k);
    }
    fa::cp_async_commit();
  }
  if constexpr (kRope) {
    // TODO(7): rotate the Q tile: wait until this thread's Q copies have landed (Q is the oldest
    //   of kStages commit groups, so at most kStages - 1 may stay pending), then rotate them
    //   (rotate_own_pairs; query row q0 sits at query_position(q0, ...)). No barrier: the loop's
    //   first __syncthreads publishes the rotated tile before any warp reads it.
    // BEGIN SOLUTION
    fa::cp_async_wait<kStages - 1>();
    rotate_own_pairs<kThreads, kRows, D>(sQ, p.rope_cos, p.rope_sin, q0, p.seqlen_q,
                                         lesson09::query_position(q0, p.seqlen_q, p.seqlen_k));
    // END SOLUTION
  }

  float o[kMT][kDT][4] = {};
  float m[kMT][2], l[kMT][2];  // running max (raw score units) and this thread's part of the sum
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
    for (int hh = 0; hh < 2; ++hh) m[mt][hh] = fa::kNegInf, l[mt][hh] = 0.f;
  const float sl2 = p.scale * fa::kLog2e;
  const int g = lane / 4, t = lane % 4;  // the accumulator's row and column pair (lesson 07)
  // ldmatrix addresses, in bytes: lane l's row of the first step, then for step k along the
  // columns and i m16 tiles down, tile_offset(r + 16 i, c + 16 k) = tile_offset(r, c) ^ 16 k + 16 i D
  // (tiles.hpp): one XOR and one add per ldmatrix, no per-step address registers.
  const uint32_t q_addr = fa::smem_addr(sQ), k_addr = fa::smem_addr(sK), v_addr = fa::smem_addr(sV);
  const uint32_t q_off = 2 * tile_offset(warp * kWarpRows + lane % 16, 8 * (lane / 16), D);     // A: Q
  const uint32_t k_off = 2 * tile_offset(lane % 8 + 8 * (lane / 16), 8 * ((lane / 8) % 2), D);  // B: K
  const uint32_t v_off = 2 * tile_offset(lane % 8 + 8 * ((lane / 8) % 2), 8 * (lane / 16), D);  // B: V, .trans

  for (int j = 0; j < n_tiles; ++j) {
    // Lesson 08's ring: wait for tile j, one barrier, start tile j + kStages - 1.
    if constexpr (kRope) {
      // TODO(8): rotate K tile j (ring slot j % kStages; key j * kKeys + r sits at position
      //   j * kKeys + r): wait for the tile, then rotate_own_pairs, before the barrier: this
      //   thread's copies are in, and the barrier then publishes the whole rotated tile. V is
      //   never rotated.
      // BEGIN SOLUTION
      fa::cp_async_wait<kStages - 2>();
      rotate_own_pairs<kThreads, kKeys, D>(sK + (j % kStages) * kKeys * D, p.rope_cos, p.rope_sin, j * kKeys, p.seqlen_k,
                                           j * kKeys);
      // END SOLUTION
    } else {
      fa::cp_async_wait<kStages - 2>();
    }
    __syncthreads();
    {
      const int next = j + kStages - 1;
      if (next < n_tiles) {
        const int slot = next % kStages;
        load_qk<kRope, kThreads, kKeys, D>(sK + slot * kKeys * D, kbase, p.k_stride.row, next * kKeys, p.seqlen_k);
        load_tile<kThreads, kKeys, D>(sV + slot * kKeys * D, vbase, p.v_stride.row, next * kKeys, p.seqlen_k);
      }
      fa::cp_async_commit();
    }

    // The tile is computed kSub keys at a time: a whole softmax step each (S of 64 keys for two
    // m16 tiles is 64 more registers beside O's 128; 32 keys leave room). Not unrolled: one
    // sub-tile's registers at a time.
#pragma unroll 1
    for (int sub = 0; sub < kKeys / kSub; ++sub) {
    // S = Q K^T for the warp's kMT x kNT accumulator tiles (lesson 07, with swizzled addresses).
    const uint32_t kj = k_addr + ((j % kStages) * kKeys + sub * kSub) * D * 2;
    float s[kMT][kNT][4] = {};
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t qa[kMT][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) fa::ldmatrix_x4(qa[mt], q_addr + ((q_off ^ (32 * kk)) + mt * 32 * D));
#pragma unroll
      for (int nj = 0; nj < kSub / 16; ++nj) {
        uint32_t kb[4];
        fa::ldmatrix_x4(kb, kj + ((k_off ^ (32 * kk)) + nj * 32 * D));
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          fa::mma_m16n8k16<T>(s[mt][2 * nj], qa[mt], kb[0], kb[1]);
          fa::mma_m16n8k16<T>(s[mt][2 * nj + 1], qa[mt], kb[2], kb[3]);
        }
      }
    }

    if (j >= n_full) {  // a diagonal or tail tile: -inf where the key is past the end or the mask
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int row = q0 + warp * kWarpRows + mt * 16 + g + 8 * (e / 2);
            const int col = j * kKeys + sub * kSub + nt * 8 + 2 * t + e % 2;
            if (col >= p.seqlen_k || (p.causal && col > row + offset)) s[mt][nt][e] = fa::kNegInf;
          }
    }

    // The online softmax on fragments: a row's values are spread over the 4 lanes of a quad.
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        float mx = m[mt][hh];
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * hh], s[mt][nt][2 * hh + 1]));
        mx = fa::group_max<4>(mx);
        // A row with nothing visible yet keeps m = -inf; subtract 0 then, never -inf - -inf.
        const float m_scaled = mx == fa::kNegInf ? 0.f : mx * sl2;
        const float alpha = fa::ex2(m[mt][hh] * sl2 - m_scaled);
        m[mt][hh] = mx;
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
          for (int e = 2 * hh; e < 2 * hh + 2; ++e) s[mt][nt][e] = fa::ex2(fmaf(s[mt][nt][e], sl2, -m_scaled));
        l[mt][hh] *= alpha;  // the new P's row sums are added below, as P is packed
        // Once the running max has settled, most tiles leave every row's max unchanged (alpha = 1
        // exactly): skip the 2 kDT multiplications unless some row of the warp needs them.
        if (__any_sync(0xffffffffu, alpha != 1.f)) {
#pragma unroll
          for (int dt = 0; dt < kDT; ++dt) o[mt][dt][2 * hh] *= alpha, o[mt][dt][2 * hh + 1] *= alpha;
        }
      }

    // O += P V: the S accumulators of keys 16 kc .. 16 kc + 15 are P's A fragment (lesson 07),
    // rounded to T and packed two values a register. The row sums are taken here too, where each
    // value of P is used for the last time (summed in the softmax loop above, they kept S's
    // registers busy longer, and this kernel is at the 255-register limit).
    const uint32_t vj = v_addr + ((j % kStages) * kKeys + sub * kSub) * D * 2;
#pragma unroll
    for (int kc = 0; kc < kSub / 16; ++kc) {
      uint32_t pa[kMT][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        l[mt][0] += (s[mt][2 * kc][0] + s[mt][2 * kc][1]) + (s[mt][2 * kc + 1][0] + s[mt][2 * kc + 1][1]);
        l[mt][1] += (s[mt][2 * kc][2] + s[mt][2 * kc][3]) + (s[mt][2 * kc + 1][2] + s[mt][2 * kc + 1][3]);
        pa[mt][0] = fa::pack2<T>(s[mt][2 * kc][0], s[mt][2 * kc][1]);
        pa[mt][1] = fa::pack2<T>(s[mt][2 * kc][2], s[mt][2 * kc][3]);
        pa[mt][2] = fa::pack2<T>(s[mt][2 * kc + 1][0], s[mt][2 * kc + 1][1]);
        pa[mt][3] = fa::pack2<T>(s[mt][2 * kc + 1][2], s[mt][2 * kc + 1][3]);
      }
#pragma unroll
      for (int dn = 0; dn < D / 16; ++dn) {
        uint32_t vb[4];
        fa::ldmatrix_x4_trans(vb, vj + ((v_off ^ (32 * dn)) + kc * 32 * D));
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          fa::mma_m16n8k16<T>(o[mt][2 * dn], pa[mt], vb[0], vb[1]);
          fa::mma_m16n8k16<T>(o[mt][2 * dn + 1], pa[mt], vb[2], vb[3]);
        }
      }
    }
    }  // sub
  }
  fa::cp_async_wait<0>();  // nothing may be in flight when the block exits

  // One division per row at the end; the quad's partial sums are added first.
  T* obase = static_cast<T*>(p.o) + b * p.o_stride.batch + h * p.o_stride.head;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const float sum = fa::group_sum<4>(l[mt][hh]);
      const int row = q0 + warp * kWarpRows + mt * 16 + g + 8 * hh;
      if (row >= p.seqlen_q) continue;
      const float inv = sum > 0.f ? 1.f / sum : 0.f;
      T* orow = obase + row * p.o_stride.row;
#pragma unroll
      for (int dt = 0; dt < kDT; ++dt)
        *reinterpret_cast<uint32_t*>(orow + dt * 8 + 2 * t) =
            fa::pack2<T>(o[mt][dt][2 * hh] * inv, o[mt][dt][2 * hh + 1] * inv);
      if (t == 0)
        p.lse[static_cast<int64_t>(bh) * p.seqlen_q + row] = sum > 0.f ? (m[mt][hh] * sl2 + log2f(sum)) * kLn2 : INFINITY;
    }
}

template <class T, int kIndex, bool kRope>
void launch_attention(const fa::AttnParams& p, cudaStream_t stream) {
  constexpr Config c = kConfigs[kIndex];
  static_assert(lesson08::well_formed(c), "a configuration in tiles.hpp is not well formed");
  constexpr int smem = lesson08::smem_bytes(c);
  auto kernel = rope_attention_kernel<T, c.head_dim, c.rows, c.keys, c.sub, c.warps, c.stages, c.blocks, kRope>;
  static bool configured = false;  // the opt-in above 48 KB, once per kernel
  if (!configured) {
    fa::allow_smem(kernel, smem);
    configured = true;
  }
  const dim3 grid(fa::ceil_div(p.seqlen_q, c.rows), p.batch * p.heads_q);
  kernel<<<grid, c.warps * 32, smem, stream>>>(p);
  FA_CHECK_LAUNCH();
}

template <class T, bool kRope, int... kIndex>
void launch_index(const fa::AttnParams& p, int index, cudaStream_t stream, std::integer_sequence<int, kIndex...>) {
  ((index == kIndex ? launch_attention<T, kIndex, kRope>(p, stream) : void()), ...);
}

// Rotate-outside: rope_kernel writes rotated Q and K, then the attention kernel without RoPE.
template <class T, int D>
void rotate_then_attend(const fa::AttnParams& p, int index, cudaStream_t stream) {
  const int64_t q_elems = int64_t(p.batch) * p.heads_q * p.seqlen_q * D;
  const int64_t k_elems = int64_t(p.batch) * p.heads_kv * p.seqlen_k * D;
  T* q_rot = static_cast<T*>(fa::device_scratch(size_t(q_elems + k_elems) * sizeof(T)));
  T* k_rot = q_rot + q_elems;
  const int64_t tasks = (q_elems + k_elems) / 16;  // one per pair of 8-value chunks
  constexpr int kThreads = 256;
  const int64_t blocks = (tasks + kThreads - 1) / kThreads;
  if (blocks > INT32_MAX) throw fa::InvalidArgument("lesson 09_rope_fusion: too many rows for one rotation launch");
  rope_kernel<T, D><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(p, q_rot, k_rot);
  FA_CHECK_LAUNCH();
  fa::AttnParams r = p;
  r.q = q_rot;
  r.k = k_rot;
  r.q_stride = {int64_t(p.heads_q) * p.seqlen_q * D, int64_t(p.seqlen_q) * D, D};
  r.k_stride = {int64_t(p.heads_kv) * p.seqlen_k * D, int64_t(p.seqlen_k) * D, D};
  r.rope_cos = r.rope_sin = nullptr;
  launch_index<T, false>(r, index, stream, std::make_integer_sequence<int, lesson08::kNumConfigs>{});
}

// The lesson's variants: the RoPE path and the tiles (README, "The experiment").
enum Variant { kFused, kOutside, kSmallTiles };
static_assert(kConfigs[2].head_dim == 64 && kConfigs[4].head_dim == 128, "the small tiles: lesson 08's configurations 2 and 4");

// Without tables, plain attention; with them, RoPE fused (kFused, kSmallTiles) or rotated outside
// (kOutside), on lesson 08's configuration for this GPU and head dim, or its smaller tiles
// (kSmallTiles: 64 x 64 at head dim 64, 128 x 32 at 128).
void forward(const fa::AttnParams& p, cudaStream_t stream) {
  fa::throw_if_todos_left("09_rope_fusion (its tiles come from lesson 08's tiles.hpp)", lesson08::kTilesTodosLeft);
  fa::throw_if_todos_left("09_rope_fusion", lesson09::kRopeTodosLeft);
  fa::throw_if_todos_left("09_rope_fusion", kTodosLeft);
  const int index = p.variant == kSmallTiles ? (p.head_dim == 64 ? 2 : 4) : lesson08::config_for(fa::current_device().sm, p.head_dim);
  if (index < 0 || index >= lesson08::kNumConfigs || kConfigs[index].head_dim != p.head_dim)
    throw fa::InvalidArgument("lesson 09_rope_fusion: lesson 08's tiles.hpp has no configuration " + std::to_string(index) +
                              " for head_dim " + std::to_string(p.head_dim));
  const auto seq = std::make_integer_sequence<int, lesson08::kNumConfigs>{};
  FA_DISPATCH_DTYPE(p.dtype, T, {
    if (p.rope_cos == nullptr) {
      launch_index<T, false>(p, index, stream, seq);
    } else if (p.variant != kOutside) {
      launch_index<T, true>(p, index, stream, seq);
    } else if (p.head_dim == 64) {
      rotate_then_attend<T, 64>(p, index, stream);
    } else {
      rotate_then_attend<T, 128>(p, index, stream);
    }
  });
}

}  // namespace

// What the lesson supports, its id and title: its fa_add_lesson line in CMakeLists.txt, generated
// into fa_lesson_09_declared(); to it the descriptor adds the entry points, variants and limits.
fa::LessonInfo fa_lesson_09_declared();

const fa::LessonInfo& fa_lesson_09() {
  static const fa::LessonInfo info = [] {
    fa::LessonInfo l = fa_lesson_09_declared();
    l.forward = &forward;
    l.variants = {{"fused", "RoPE in the attention kernel's tile loads, on lesson 08's tiles for this GPU"},
                  {"outside", "rope_kernel writes rotated Q and K, then the same attention kernel and tiles without RoPE"},
                  {"small-tiles", "fused, on lesson 08's smaller tiles (configuration 2 at head dim 64, 4 at 128)"}};
    l.max_batch_heads = 65535;  // (batch, head) is the grid's y
    return l;
  }();
  return info;
}
