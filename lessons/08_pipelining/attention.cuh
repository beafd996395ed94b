// Your copy of this lesson, generated from solutions/08_pipelining/attention.cuh by fa-skeleton.
// Lesson 08's attention kernel: the ring of K/V tiles (copied by load_tile.cuh's load_tile), the
// compute loop on swizzled tiles, the epilogue, and its launch (launch). In a header, so that
// lessons 09 and 12 run this kernel instead of a copy of it: lesson 09 with its own copies of Q
// and K (the Loads parameter), lesson 12 over its packed sequences (the Tiles parameter).
#pragma once

#include <cstdint>

#include "fa/cuda_check.hpp"
#include "fa/device.cuh"
#include "fa/mma.cuh"
#include "fa/params.hpp"
#include "load_tile.cuh"
#include "tiles.hpp"

namespace lesson08 {

// Each entry is a TODO of this file you have not written yet; the tests stop at the first one
// with "lesson 08 not implemented yet: <it>" (and lessons 09 and 12's, which run this kernel, too).
// Delete an entry when you have written its code.
inline const fa::TodoList kAttentionTodosLeft = {
    "TODO(3) in attention.cuh: the prologue: start the Q tile (copy_q), commit it as a group, then the K and V tiles",
    "TODO(4) in attention.cuh: the ring: wait for tile j here, the barrier and tile j + kStages - 1's copy below.",
};

constexpr float kLn2 = 0.6931471805599453f;

// What the kernel does with Q and K: lesson 08 copies them as it copies V, and nothing more.
// Lesson 09 runs the same kernel with its own Loads, which copy Q and K by RoPE pairs and rotate
// them in shared memory once they land.
struct PlainLoads {
  // Starts the copy of a Q tile or a K tile (load_tile's arguments).
  template <int kThreads, int kTileRows, int D, class T>
  __device__ __forceinline__ static void copy(T* tile, const T* base, int64_t row_stride, int row0, int nrows) {
    load_tile<kThreads, kTileRows, D>(tile, base, row_stride, row0, nrows);
  }
  // After the prologue has started its copies (the Q tile sQ of rows q0 .., the first K/V tiles).
  template <int kThreads, int kRows, int kStages, int D, class T>
  __device__ __forceinline__ static void prologue_started(const fa::AttnParams&, T*, int) {}
  // After this thread's copies of key tile j (in the ring slot sK_j) have landed, before the
  // barrier that makes the tile visible to every warp.
  template <int kThreads, int kKeys, int D, class T>
  __device__ __forceinline__ static void key_tile_landed(const fa::AttnParams&, T*, int) {}
};

// ---- The steps of one key sub-tile and the epilogue, for a warp of kMT m16 tiles of rows. A
// thread holds, per m16 tile, two rows (g = lane / 4 and g + 8) and, per n8 tile, the
// columns 2 t and 2 t + 1 (t = lane % 4): lesson 07's accumulator layout.

// S = Q K^T for the warp's kMT x (kSub / 8) accumulator tiles (lesson 07, with swizzled addresses:
// q_off and k_off are the lane's ldmatrix offsets, kj the sub-tile's first key in shared memory).
template <class T, int D, int kMT, int kSub>
__device__ __forceinline__ void scores(float (&s)[kMT][kSub / 8][4], uint32_t q_addr, uint32_t q_off, uint32_t kj,
                                       uint32_t k_off) {
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
}

// The online softmax on fragments (lesson 05, base 2): a row's values are spread over the 4 lanes
// of a quad. S (in score units, scaled by `scale` into base 2) becomes P in place; m is the running
// max in score units, l this thread's part of the row sum (P's sums are added by accumulate_pv),
// and O is rescaled by alpha when a row's max moves.
template <int kMT, int kNT, int kDT>
__device__ __forceinline__ void online_softmax(float (&s)[kMT][kNT][4], float (&m)[kMT][2], float (&l)[kMT][2],
                                               float (&o)[kMT][kDT][4], float scale) {
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      float mx = m[mt][hh];
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * hh], s[mt][nt][2 * hh + 1]));
      mx = fa::group_max<4>(mx);
      // A row with nothing visible yet keeps m = -inf; subtract 0 then, never -inf - -inf.
      const float m_scaled = mx == fa::kNegInf ? 0.f : mx * scale;
      const float alpha = fa::ex2(m[mt][hh] * scale - m_scaled);
      m[mt][hh] = mx;
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int e = 2 * hh; e < 2 * hh + 2; ++e) s[mt][nt][e] = fa::ex2(fmaf(s[mt][nt][e], scale, -m_scaled));
      l[mt][hh] *= alpha;  // the new P's row sums are added by accumulate_pv, as P is packed
      // Once the running max has settled, most tiles leave every row's max unchanged (alpha = 1
      // exactly): skip the 2 kDT multiplications unless some row of the warp needs them.
      if (__any_sync(0xffffffffu, alpha != 1.f)) {
#pragma unroll
        for (int dt = 0; dt < kDT; ++dt) o[mt][dt][2 * hh] *= alpha, o[mt][dt][2 * hh + 1] *= alpha;
      }
    }
}

// O += P V: the S accumulators of keys 16 kc .. 16 kc + 15 are P's A fragment (lesson 07), rounded
// to T and packed two values a register; V's B fragments with ldmatrix .trans from the sub-tile at
// vj. The row sums are taken here too, where each value of P is used for the last time (summed in
// the softmax, they kept S's registers busy longer, and the kernels are at the 255-register limit).
template <class T, int D, int kMT, int kSub>
__device__ __forceinline__ void accumulate_pv(const float (&s)[kMT][kSub / 8][4], float (&l)[kMT][2],
                                              float (&o)[kMT][D / 8][4], uint32_t vj, uint32_t v_off) {
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
}

// The epilogue: one division per row, the quad's partial sums added first; O rounded to T and the
// LSE (natural log, +inf for a row that saw no key) stored for the rows below len_q. The warp's
// first row is row0() (read per row) and row r's LSE goes to lse[r].
template <class T, int kMT, int kDT, class Row0>
__device__ __forceinline__ void store_o(const float (&o)[kMT][kDT][4], const float (&m)[kMT][2], const float (&l)[kMT][2],
                                        T* obase, int64_t o_row, float* lse, Row0 row0, int len_q, float scale, int lane) {
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const float sum = fa::group_sum<4>(l[mt][hh]);
      const int row = row0() + mt * 16 + g + 8 * hh;
      if (row >= len_q) continue;
      const float inv = sum > 0.f ? 1.f / sum : 0.f;
      T* orow = obase + row * o_row;
#pragma unroll
      for (int dt = 0; dt < kDT; ++dt)
        *reinterpret_cast<uint32_t*>(orow + dt * 8 + 2 * t) = fa::pack2<T>(o[mt][dt][2 * hh] * inv, o[mt][dt][2 * hh + 1] * inv);
      if (t == 0) lse[row] = sum > 0.f ? (m[mt][hh] * scale + log2f(sum)) * kLn2 : INFINITY;
    }
}

// Where a block's query tile is and what it sees: here, dense batches. Block (x, y) takes query
// tile x of (batch, head) y, causal the heaviest (last) first, with lesson 06's bounds of its key
// loop, all in registers, from the block index and the parameters. Lesson 12 runs this kernel
// over packed sequences with its own Tiles (its forward.cuh: kept in shared memory and read where
// used, and with the gate's terms added to the logits). What the kernel asks of a Tiles:
//   Args           the kernel's second parameter (nothing here);
//   begin<T, kRows, kKeys>(p, a, smem)   the block's Tile (every thread calls it);
// and of the Tile:
//   valid()        false: the block has no tile (it exits);
//   q0(), len_q(p), len_k(p)   its first row, and its sequence's lengths;
//   n_tiles(), n_full()   lesson 06's bounds: key tiles 0 .. n_tiles - 1 to visit, the first
//                  n_full without a mask;
//   q(p), kv(p), o(p), lse(p)   its head's row 0 in Q, in K and V, in O and in the LSE;
//   mask<kWarpRows>(p, s, col0, warp, lane)   a key tile from n_full on: S = -inf where the
//                  key is masked (col0: the thread's first key of the step); the Tiles' own loop,
//                  so each writes its test as it compiles best (a test per element, called from
//                  the kernel's loop, spilled);
//   scale(p)       what turns S into base-2 units in the softmax;
//   logits<kMT, kWarpRows>(p, warp, lane)   what is done to S after each product (add(s, col0)):
//                  nothing here; lesson 12's gate scales S into base 2 and adds its terms (its
//                  scale() is then 1).
struct DenseTiles {
  struct Args {};
  struct NoTerms {
    template <class S>
    __device__ void add(S&, int) const {}
  };
  template <class T>
  struct Tile {
    int b, h, q0_, offset;
    const T *qbase, *kbase, *vbase;
    int n_full_, n_tiles_;
    __device__ bool valid() const { return true; }
    __device__ int q0() const { return q0_; }
    __device__ int len_q(const fa::AttnParams& p) const { return p.seqlen_q; }
    __device__ int len_k(const fa::AttnParams& p) const { return p.seqlen_k; }
    __device__ int n_tiles() const { return n_tiles_; }
    __device__ int n_full() const { return n_full_; }
    __device__ const T* q(const fa::AttnParams&) const { return qbase; }
    struct KV { const T *k, *v; };
    __device__ KV kv(const fa::AttnParams&) const { return {kbase, vbase}; }
    __device__ T* o(const fa::AttnParams& p) const { return static_cast<T*>(p.o) + b * p.o_stride.batch + h * p.o_stride.head; }
    __device__ float* lse(const fa::AttnParams& p) const { return p.lse + static_cast<int64_t>(blockIdx.y) * p.seqlen_q; }
    // -inf where the key is past the end, or (causal) past row + offset; the thread's keys are
    // col0 + 8 nt + e % 2.
    template <int kWarpRows, int kMT, int kNT>
    __device__ void mask(const fa::AttnParams& p, float (&s)[kMT][kNT][4], int col0, int warp, int lane) const {
      const int g = lane / 4;
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int row = q0_ + warp * kWarpRows + mt * 16 + g + 8 * (e / 2);
            const int col = col0 + nt * 8 + e % 2;
            if (col >= p.seqlen_k || (p.causal && col > row + offset)) s[mt][nt][e] = fa::kNegInf;
          }
    }
    __device__ float scale(const fa::AttnParams& p) const { return p.scale * fa::kLog2e; }
    template <int kMT, int kWarpRows>
    __device__ NoTerms logits(const fa::AttnParams&, int, int) const { return {}; }
  };
  template <class T, int kRows, int kKeys>
  __device__ static Tile<T> begin(const fa::AttnParams& p, const Args&, const void*) {
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
    return {b, h, q0, offset, qbase, kbase, vbase, n_full, n_tiles};
  }
};

// The kernel of one configuration. Warp w owns query rows w * kWarpRows .. + kWarpRows - 1 of the
// block, as kMT m16 tiles; each thread holds, per m16 tile, two rows (lane / 4 and lane / 4 + 8).
template <class T, int D, int kRows, int kKeys, int kSub, int kWarps, int kStages, int kBlocksPerSM,
          class Loads = PlainLoads, class Tiles = DenseTiles>
__global__ void __launch_bounds__(kWarps * 32, kBlocksPerSM)
    pipelined_kernel(const fa::AttnParams p, const typename Tiles::Args a) {
  constexpr int kThreads = kWarps * 32;
  constexpr int kWarpRows = kRows / kWarps;
  constexpr int kMT = kWarpRows / 16;  // m16 tiles per warp
  constexpr int kNT = kSub / 8;        // n8 tiles of S per m16 tile
  constexpr int kDT = D / 8;           // n8 tiles of O per m16 tile
  extern __shared__ __align__(128) uint4 smem[];  // 128-byte aligned: lesson 12's Tiles keep static shared memory too
  T* sQ = reinterpret_cast<T*>(smem);
  T* sK = sQ + kRows * D;
  T* sV = sK + kStages * kKeys * D;

  const auto tl = Tiles::template begin<T, kRows, kKeys>(p, a, smem);
  if (!tl.valid()) return;  // a spare block (lesson 12)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) fa::tile_count_begin(p, fa::block_work(), tl.q0(), kRows, kKeys);

  // The copies: the Q tile, and key tile `tile` of K and V into ring slot `slot` (Q and K through
  // Loads, V with load_tile).
  auto copy_q = [&] { Loads::template copy<kThreads, kRows, D>(sQ, tl.q(p), p.q_stride.row, tl.q0(), tl.len_q(p)); };
  auto copy_kv = [&](int tile, int slot) {
    const auto kv = tl.kv(p);
    Loads::template copy<kThreads, kKeys, D>(sK + slot * kKeys * D, kv.k, p.k_stride.row, tile * kKeys, tl.len_k(p));
    load_tile<kThreads, kKeys, D>(sV + slot * kKeys * D, kv.v, p.v_stride.row, tile * kKeys, tl.len_k(p));
  };

  // TODO(3): the prologue: start the Q tile (copy_q), commit it as a group, then the K and V tiles
  //   0 .. kStages - 2 that exist (below tl.n_tiles()) into ring slots 0 .. kStages - 2 (copy_kv),
  //   one commit per tile (commit even when the tile does not exist, so that "wait until
  //   kStages - 2 groups are pending" always means "tile j is in").
  Loads::template prologue_started<kThreads, kRows, kStages, D>(p, sQ, tl.q0());

  float o[kMT][kDT][4] = {};
  float m[kMT][2], l[kMT][2];  // running max (raw score units) and this thread's part of the sum
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
    for (int hh = 0; hh < 2; ++hh) m[mt][hh] = fa::kNegInf, l[mt][hh] = 0.f;
  const float sl2 = tl.scale(p);
  const int t = lane % 4;  // the accumulator's column pair (lesson 07)
  const auto terms = tl.template logits<kMT, kWarpRows>(p, warp, lane);  // nothing here; lesson 12's gate
  // ldmatrix addresses, in bytes: lane l's row of the first step, then for step k along the
  // columns and i m16 tiles down, tile_offset(r + 16 i, c + 16 k) = tile_offset(r, c) ^ 16 k + 16 i D
  // (tiles.hpp): one XOR and one add per ldmatrix, no per-step address registers.
  const uint32_t q_addr = fa::smem_addr(sQ), k_addr = fa::smem_addr(sK), v_addr = fa::smem_addr(sV);
  const uint32_t q_off = 2 * tile_offset(warp * kWarpRows + lane % 16, 8 * (lane / 16), D);     // A: Q
  const uint32_t k_off = 2 * tile_offset(lane % 8 + 8 * (lane / 16), 8 * ((lane / 8) % 2), D);  // B: K
  const uint32_t v_off = 2 * tile_offset(lane % 8 + 8 * ((lane / 8) % 2), 8 * (lane / 16), D);  // B: V, .trans

  for (int j = 0; j < tl.n_tiles(); ++j) {
    if (threadIdx.x == 0) fa::tile_count_visit(p, fa::block_work());
    // TODO(4): the ring: wait for tile j here, the barrier and tile j + kStages - 1's copy below.
    //   Here: at most kStages - 2 groups pending. Below the given line: __syncthreads (tile j
    //   visible to every warp, and every warp done with tile j - 1), then copy_kv of tile
    //   j + kStages - 1 (if below tl.n_tiles()) into slot (j + kStages - 1) % kStages (the slot of
    //   tile j - 1), and commit.
    Loads::template key_tile_landed<kThreads, kKeys, D>(p, sK + (j % kStages) * kKeys * D, j);  // the given line

    // The tile is computed kSub keys at a time: a whole softmax step each (S of 64 keys for two
    // m16 tiles is 64 more registers beside O's 128; 32 keys leave room). Not unrolled: one
    // sub-tile's registers at a time.
#pragma unroll 1
    for (int sub = 0; sub < kKeys / kSub; ++sub) {
    // S = Q K^T for the warp's kMT x kNT accumulator tiles.
    const uint32_t kj = k_addr + ((j % kStages) * kKeys + sub * kSub) * D * 2;
    float s[kMT][kNT][4] = {};
    scores<T, D, kMT, kSub>(s, q_addr, q_off, kj, k_off);
    const int col0 = j * kKeys + sub * kSub + 2 * t;  // this thread's first key
    terms.add(s, col0);  // nothing here; lesson 12's gate

    if (j >= tl.n_full()) tl.template mask<kWarpRows>(p, s, col0, warp, lane);  // a diagonal or tail tile

    online_softmax(s, m, l, o, sl2);
    accumulate_pv<T, D, kMT, kSub>(s, l, o, v_addr + ((j % kStages) * kKeys + sub * kSub) * D * 2, v_off);
    }  // sub
  }
  fa::cp_async_wait<0>();  // nothing may be in flight when the block exits

  store_o(o, m, l, tl.o(p), p.o_stride.row, tl.lse(p), [&] { return tl.q0() + warp * kWarpRows; }, tl.len_q(p), sl2,
          lane);
}

// Launches configuration kIndex of tiles.hpp (lessons 08, 09 and 12 run it so): the opt-in to
// more than 48 KB of shared memory (fa::allow_smem: once per device), then the grid.
template <class T, int kIndex, class Loads = PlainLoads, class Tiles = DenseTiles>
void launch(const fa::AttnParams& p, dim3 grid, const typename Tiles::Args& a, cudaStream_t stream) {
  constexpr Config c = kConfigs[kIndex];
  static_assert(well_formed(c), "a configuration in tiles.hpp is not well formed");
  constexpr int smem = smem_bytes(c);
  auto kernel = pipelined_kernel<T, c.head_dim, c.rows, c.keys, c.sub, c.warps, c.stages, c.blocks, Loads, Tiles>;
  fa::allow_smem(kernel, smem);
  kernel<<<grid, c.warps * 32, smem, stream>>>(p, a);
  FA_CHECK_LAUNCH();
}

}  // namespace lesson08
