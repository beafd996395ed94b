// Lesson 13's tile scheduler: the work tiles (kRows query rows of one (batch, head)), the order in
// which they are numbered, and which block takes which: one tile a block (steps 1-3), or a
// persistent grid whose blocks take the next tile from a counter (step 4). The kernel and the host
// share it.
#pragma once

#include <algorithm>
#include <climits>
#include <cstdint>

#include "fa/device.cuh"
#include "fa/params.hpp"

namespace lesson13 {

constexpr int kKeys = 128;  // keys per K/V tile

// A block has kConsumers consumer warpgroups of 64 query rows each, so a work tile has
// 64 kConsumers rows: two, or three (head dim 64, step 4; causal, from kThreeCausalFrom query rows;
// kernel.cu and section 8 of the README).
__host__ __device__ constexpr int rows_of(int consumers) { return 64 * consumers; }

// A work tile is kRows query rows of one (batch, head). They are numbered with the query tile
// fastest, so that the blocks running at one time share a few heads' K/V in L2, and causal, each
// head's heaviest (last) query tile first, so that its light ones fill the gaps at the end.
struct Tile {
  int q0, h, b, hk;
  int n_tiles;  // key tiles visited
  int n_full;   // tiles before n_full need no mask: every key exists and (causal) every row sees it
};
template <int kRows>
__device__ __forceinline__ Tile tile_of(const fa::AttnParams& p, int64_t w) {
  const int n_qtiles = fa::ceil_div(p.seqlen_q, kRows);
  Tile tl;
  int rank;
  // w = (b heads_q + h) n_qtiles + rank, divided in 32 bits where it fits: a 64-bit division is a
  // long subroutine, and every tile pays it, in the producer and in each consumer's step from one
  // tile to the next.
  auto split = [&](auto x) {
    using I = decltype(x);
    const I hb = x / I(n_qtiles);
    rank = int(x % I(n_qtiles));
    tl.h = int(hb % I(p.heads_q));
    tl.b = int(hb / I(p.heads_q));
  };
  if (w <= INT32_MAX) split(unsigned(w));
  else split(w);
  tl.hk = tl.h / (p.heads_q / p.heads_kv);
  // Causal, the tiles are counted back from the last row: rank 0 ends at seqlen_q, and a partial
  // tile (seqlen_q not a multiple of kRows) is the first rows, the lightest, its q0 below 0 (TMA
  // fills the rows before 0 with zeros; they are computed as padding rows are, and nothing is
  // stored for them). Counted from row 0, the partial tile would be the heaviest: with three
  // consumer warpgroups and seqlen_q = 4096, one tile in 22 of each head would see every key with
  // a third of its rows.
  const int q0 = p.causal ? p.seqlen_q - (rank + 1) * kRows : rank * kRows, offset = p.seqlen_k - p.seqlen_q;
  int k_end = p.seqlen_k;
  if (p.causal) k_end = min(p.seqlen_k, min(q0 + kRows, p.seqlen_q) + offset);
  tl.n_tiles = k_end > 0 ? fa::ceil_div(k_end, kKeys) : 0;
  const int n_full = p.causal ? max(0, min(p.seqlen_k / kKeys, (q0 + offset + 1) / kKeys)) : p.seqlen_k / kKeys;
  tl.q0 = q0;
  tl.n_full = n_full;
  return tl;
}

// Work tiles of a call.
inline int64_t work_tiles(const fa::AttnParams& p, int rows) { return int64_t(fa::ceil_div(p.seqlen_q, rows)) * p.heads_q * p.batch; }

// Which work tile a block takes first, and the next one after it: the persistent grid's blocks
// (gridDim.x of them) start with tiles 0 .. gridDim.x - 1 and then take the counter's next value
// (zero at launch) plus gridDim.x; a block of steps 1-3 takes its one tile (its index in the
// (query tiles, heads, batch) grid) and then none (n_work).
template <bool kPersistent>
struct Scheduler {
  __device__ __forceinline__ static int64_t first() {
    return kPersistent ? int64_t(blockIdx.x) : blockIdx.x + gridDim.x * (blockIdx.y + int64_t(gridDim.y) * blockIdx.z);
  }
  __device__ __forceinline__ static int64_t next(unsigned long long* counter, int64_t n_work) {
    return kPersistent ? int64_t(gridDim.x) + int64_t(atomicAdd(counter, 1ull)) : n_work;
  }
};

// Blocks a launch of this step and shape takes (steps 1-3: one per work tile; 4: one per SM, at
// most max_blocks when that is > 0).
inline int64_t blocks_of(const fa::AttnParams& p, int rows, int step, int max_blocks, int sm_count) {
  const int64_t n_work = work_tiles(p, rows);
  return step < 4 ? n_work : std::min<int64_t>(n_work, max_blocks > 0 ? max_blocks : sm_count);
}

}  // namespace lesson13
