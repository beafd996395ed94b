// Lesson 12's sequences (dense or packed), the tile map's plan, the gate's cumulative sums and a
// block's work: what the forward and the backward share. Part of kernel.cu, which alone includes it.
#pragma once

#include <cstdint>

#include "../11_fast_backward/dkdv.cuh"  // lesson 11's kernels, fresh and check_tile_alignment
#include "fa/tile_map.cuh"
#include "plan.hpp"

namespace {

// Delete an entry when its code is written; the tests stop at the lowest TODO left in the lesson.
const fa::TodoList kSequencesTodosLeft = {
    // @todos-left
};

// ---- Sequences ---------------------------------------------------------------------------------
// Sequence b as the kernels see it: its lengths and where its rows start, through the batch
// strides (dense) or its first token times the row stride (varlen). (params.hpp is host code.)
__device__ __forceinline__ bool is_varlen(const fa::AttnParams& p) { return p.cu_seqlens_q != nullptr; }
struct Seq {
  bool varlen;
  int b, len_q, len_k;
  int q_tok, k_tok;  // token index of row 0 in the packed tensors (varlen)
};

__device__ __forceinline__ Seq sequence(const fa::AttnParams& p, int b) {
  if (!is_varlen(p)) return {false, b, p.seqlen_q, p.seqlen_k, 0, 0};
  // TODO(11): varlen: the lengths and first tokens of sequence b from cu_seqlens_q and cu_seqlens_k.
  // BEGIN SOLUTION
  const int q = p.cu_seqlens_q[b], k = p.cu_seqlens_k[b];
  return {true, b, p.cu_seqlens_q[b + 1] - q, p.cu_seqlens_k[b + 1] - k, q, k};
  // END SOLUTION
  // BEGIN SKELETON
  // return {true, b, 0, 0, 0, 0};
  // END SKELETON
}
// Element offset of (head h, row 0) of sequence s in a tensor of the q side (q, o, dout, dq) or
// the k side (k, v, dk, dv).
__device__ __forceinline__ int64_t q_offset(const fa::Strides& st, const Seq& s, int h) {
  return (s.varlen ? int64_t(s.q_tok) * st.row : int64_t(s.b) * st.batch) + int64_t(h) * st.head;
}
__device__ __forceinline__ int64_t k_offset(const fa::Strides& st, const Seq& s, int h) {
  return (s.varlen ? int64_t(s.k_tok) * st.row : int64_t(s.b) * st.batch) + int64_t(h) * st.head;
}
// Index of (head h, row 0) in the LSE: (heads_q, total_q) varlen, (batch, heads_q, seqlen_q) dense;
// and in the gate g, G, dG and dg: (heads_q, total_k) varlen, (batch, heads_q, seqlen_k) dense.
__device__ __forceinline__ int64_t lse_index(const fa::AttnParams& p, const Seq& s, int h) {
  return s.varlen ? int64_t(h) * p.total_q + s.q_tok : (int64_t(s.b) * p.heads_q + h) * p.seqlen_q;
}
__device__ __forceinline__ int64_t gate_index(const fa::AttnParams& p, const Seq& s, int h) {
  return s.varlen ? int64_t(h) * p.total_k + s.k_tok : (int64_t(s.b) * p.heads_q + h) * p.seqlen_k;
}

// ---- The tile map ------------------------------------------------------------------------------
// Every tile of `tile` rows of the tiled side (queries or keys) of every sequence (a dense batch:
// equal lengths), heaviest first (fa/tile_map.cuh sorts them; packed order without heaviest_first):
// a tile's work is how many tiles of `other_tile` of the other side it meets, bucketed by bucket_of.
static_assert(lesson12::kBuckets == fa::kPlanThreads, "the plan sorts into one bucket a thread");
__global__ void __launch_bounds__(fa::kPlanThreads)
    plan_kernel(const fa::AttnParams p, int tile, int other_tile, bool query_tiles, bool heaviest_first, fa::TileMap m) {
  // TODO(12): tiles(b), the number of tiles of sequence b, and bucket(b, t), the bucket of its tile t.
  //   Its lengths from sequence(p, b), its tiles lesson12::tiles_of; the work of a tile: key_tiles_visited
  //   (query tiles) or query_tiles_visited (key tiles), the other side's tiles of other_tile.
  // BEGIN SOLUTION
  auto tiles = [&](int b) {
    const Seq s = sequence(p, b);
    return lesson12::tiles_of(query_tiles ? s.len_q : s.len_k, tile);
  };
  auto bucket = [&](int b, int t) {
    const Seq s = sequence(p, b);
    return lesson12::bucket_of(query_tiles ? lesson12::key_tiles_visited(t, tile, other_tile, s.len_q, s.len_k, p.causal)
                                           : lesson12::query_tiles_visited(t, tile, other_tile, s.len_q, s.len_k, p.causal));
  };
  // END SOLUTION
  // BEGIN SKELETON
  // auto tiles = [&](int) { return 0; };
  // auto bucket = [&](int, int) { return 0; };
  // END SKELETON
  fa::plan_tiles(p.batch, tiles, bucket, heaviest_first, m);
}

// ---- The gate's cumulative sums ----------------------------------------------------------------
// G = cumsum(g) (forward) or dg = the reverse cumsum of dG = in + in2 (backward: the column and
// the row terms), in fp64, per (sequence, head): one warp each, 32 positions a step (a shuffle
// scan), the running total carried over.
template <bool kReverse, class In, class Out>
__global__ void scan_kernel(const fa::AttnParams p, const In* in, const In* in2, Out* out) {
  const int w = static_cast<int>((int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32), lane = threadIdx.x % 32;
  if (w >= p.batch * p.heads_q) return;
  const Seq s = sequence(p, w / p.heads_q);
  const int64_t base = gate_index(p, s, w % p.heads_q);
  // TODO(13): the scan over the sequence's len_k positions (backwards when kReverse), in doubles.
  // BEGIN SOLUTION
  double carry = 0;
  for (int c0 = 0; c0 < s.len_k; c0 += 32) {
    const bool valid = c0 + lane < s.len_k;
    const int at = kReverse ? s.len_k - 1 - (c0 + lane) : c0 + lane;
    double x = valid ? double(in[base + at]) + (in2 != nullptr ? double(in2[base + at]) : 0.0) : 0.0;
#pragma unroll
    for (int o = 1; o < 32; o *= 2) {
      const double y = __shfl_up_sync(0xffffffffu, x, o);
      if (lane >= o) x += y;
    }
    if (valid) out[base + at] = static_cast<Out>(carry + x);
    carry += __shfl_sync(0xffffffffu, x, 31);
  }
  // END SOLUTION
}

// float(G[at] - anchor) log2(e): the gate's contribution in the exp2 units of the kernels.
__device__ __forceinline__ float gate_diff(const double* g, int at, double anchor) {
  return static_cast<float>(g[at] - anchor) * fa::kLog2e;
}

// ---- Blocks ------------------------------------------------------------------------------------
// Shared-memory values read where they are used (lesson 11's fresh), as lesson 11's dQ pass keeps
// its bounds. Lessons 08's and 11's kernels declare their dynamic buffer __align__(128), or this
// lesson's static __shared__ bounds would shift every swizzled tile row off its 128-byte line
// (README, "The 96 bytes"); lesson11::check_tile_alignment traps if it ever is.
using lesson11::fresh;

// Entry e of the tile map, if e is below its count: (sequence b, tile).
__device__ __forceinline__ bool work_item(const int2* map, const int* count, int e, int& b, int& tile) {
  // TODO(14): entry e of the map, if e is below its count.
  // BEGIN SOLUTION
  if (e >= *count) return false;
  const int2 m = map[e];
  b = m.x;
  tile = m.y;
  return true;
  // END SOLUTION
  // BEGIN SKELETON
  // return false;
  // END SKELETON
}

// A grid of (entries x heads) blocks, the entries varying fastest: the blocks running at once
// share a head, whose K and V stay in the L2, as in lesson 08's grid.
__device__ __forceinline__ int entry(int heads) { return blockIdx.x % (gridDim.x / heads); }
__device__ __forceinline__ int head(int heads) { return blockIdx.x / (gridDim.x / heads); }

// A query tile's block (lesson 06's bounds): its sequence, tile (-1: past the end of the map),
// the causal offset, the key tiles it visits and the first that needs the mask.
struct Block {
  Seq s;
  int tile, offset, n_full, n_tiles;
};
__device__ Block block_of(const fa::AttnParams& p, const int2* map, const int* count, int e, int rows, int keys) {
  Block k{};
  int b = 0;
  k.tile = -1;
  if (!work_item(map, count, e, b, k.tile)) return k;
  k.s = sequence(p, b);
  k.offset = k.s.len_k - k.s.len_q;
  k.n_tiles = lesson12::key_tiles_visited(k.tile, rows, keys, k.s.len_q, k.s.len_k, p.causal);
  k.n_full = k.s.len_k / keys;
  if (p.causal) k.n_full = max(0, min(k.n_full, (k.tile * rows + k.offset + 1) / keys));
  return k;
}

}  // namespace
