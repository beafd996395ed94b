// Lesson 12's sequences (dense or packed), the tile map the plan kernel builds on the device, the
// gate's cumulative sums (scan_kernel), and a block's tiles and work (lesson 08's tile copy, the
// map's entry of a block): what the forward and the backward kernels share.
// Part of kernel.cu, which alone includes it (its anonymous namespace is kernel.cu's).
#pragma once

#include <climits>
#include <cstdint>

#include "../08_pipelining/load_tile.cuh"
#include "../08_pipelining/tiles.hpp"
#include "../11_fast_backward/dkdv.cuh"
#include "../11_fast_backward/tiles.hpp"
#include "fa/device.cuh"
#include "fa/mma.cuh"
#include "fa/params.hpp"
#include "plan.hpp"

namespace {

// Each entry is a TODO of this file you have not written yet; the tests stop at the first one
// with "lesson 12 not implemented yet: <it>". Delete an entry when you have written its code.
const fa::TodoList kSequencesTodosLeft = {
    // @todos-left
};

using lesson11::tile_offset;  // lesson 08's swizzle (the same function in both tiles.hpp)
constexpr int kPlanThreads = lesson12::kBuckets;  // the plan scans its buckets one per thread

// ---- Sequences ---------------------------------------------------------------------------------
// One sequence of the batch as the kernels see it: its lengths and where its rows start. Dense
// batches reach sequence b through the batch strides; varlen ones through the token index
// cu_seqlens[b] times the row stride (one packed "batch").
// (AttnParams::is_varlen() is host code: params.hpp is plain C++.)
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

// Shared-memory values read where they are used (fresh, fresh_pair): lesson 11's, whose dQ pass
// keeps its bounds so too.
using lesson11::fresh;
using lesson11::fresh_pair;

// ---- The tile map ------------------------------------------------------------------------------
// One block of kPlanThreads threads: every tile of every sequence (tiles of `tile` rows of the
// "tiled" side, queries or keys), as (sequence, tile) pairs in `order`, heaviest first:
//   1. tile_start[b] = the tiles of sequences 0 .. b - 1 (an exclusive prefix sum, in chunks of
//      kPlanThreads sequences), tile_start[batch] = *count = all tiles;
//   2. a histogram of the tiles' work buckets (lesson12::bucket_of: bucket 0 the heaviest);
//   3. its exclusive prefix sum: where each bucket's tiles start in `order`;
//   4. each tile takes the next place of its bucket (atomicAdd in shared memory).
// The order within a bucket varies from run to run; no result depends on it (each tile's block
// computes alone). With heaviest_first false (the variant natural, the forward only: README,
// question 4) the sorted map is then overwritten in packed order, (sequence, tile) ascending, so
// both orders cost the same plan.
__device__ int block_exclusive_scan(int x, int* buf, int* total) {
  const int tid = threadIdx.x;
  buf[tid] = x;
  __syncthreads();
  for (int off = 1; off < kPlanThreads; off *= 2) {  // Hillis-Steele: log2(1024) steps
    const int y = tid >= off ? buf[tid - off] : 0;
    __syncthreads();
    buf[tid] += y;
    __syncthreads();
  }
  const int inclusive = buf[tid];
  *total = buf[kPlanThreads - 1];
  __syncthreads();  // buf is reused by the next call
  return inclusive - x;
}

// Tile x of the packed order, (sequence, tile) ascending: its sequence b is the last one with
// tile_start[b] <= x (a binary search), and it is tile x - tile_start[b] of that sequence.
__device__ int2 tile_at(const int* tile_start, int batch, int x) {
  int lo = 0, hi = batch - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (tile_start[mid] <= x) lo = mid; else hi = mid - 1;
  }
  return make_int2(lo, x - tile_start[lo]);
}

__global__ void __launch_bounds__(kPlanThreads)
    plan_kernel(const int* cu_tiled, const int* cu_other, int batch, int tile, int other_tile, bool causal,
                bool query_tiles, bool heaviest_first, int* tile_start, int2* order, int* count) {
  __shared__ int buf[kPlanThreads];
  __shared__ int hist[lesson12::kBuckets];
  const int tid = threadIdx.x;
  auto lengths = [&](int b, int& len_q, int& len_k) {
    const int a = cu_tiled[b + 1] - cu_tiled[b], o = cu_other[b + 1] - cu_other[b];
    len_q = query_tiles ? a : o;
    len_k = query_tiles ? o : a;
  };
  // TODO(12): the map: steps 1 to 4 above (tile_at finds tile x's sequence). Work of a tile:
  //   lesson12::key_tiles_visited (query tiles) or lesson12::query_tiles_visited (key tiles), with
  //   other_tile the other side's tile.
  // BEGIN SOLUTION
  int carry = 0;  // step 1
  for (int b0 = 0; b0 < batch; b0 += kPlanThreads) {
    const int b = b0 + tid;
    const int n = b < batch ? lesson12::tiles_of(cu_tiled[b + 1] - cu_tiled[b], tile) : 0;
    int chunk = 0;
    const int before = block_exclusive_scan(n, buf, &chunk);
    if (b < batch) tile_start[b] = carry + before;
    carry += chunk;
  }
  const int total = carry;
  if (tid == 0) tile_start[batch] = *count = total;
  hist[tid] = 0;
  __syncthreads();  // tile_start (global) and hist visible to the whole block
  auto bucket = [&](int2 m) {  // m: (sequence, tile)
    int len_q, len_k;
    lengths(m.x, len_q, len_k);
    const int work = query_tiles ? lesson12::key_tiles_visited(m.y, tile, other_tile, len_q, len_k, causal)
                                 : lesson12::query_tiles_visited(m.y, tile, other_tile, len_q, len_k, causal);
    return lesson12::bucket_of(work);
  };
  for (int x = tid; x < total; x += kPlanThreads)  // step 2
    atomicAdd(&hist[bucket(tile_at(tile_start, batch, x))], 1);
  __syncthreads();
  int unused = 0;
  const int place = block_exclusive_scan(hist[tid], buf, &unused);  // step 3
  hist[tid] = place;
  __syncthreads();
  for (int x = tid; x < total; x += kPlanThreads) {  // step 4
    const int2 m = tile_at(tile_start, batch, x);
    order[atomicAdd(&hist[bucket(m)], 1)] = m;
  }
  // END SOLUTION
  if (!heaviest_first) {  // the variant natural: packed order instead
    __syncthreads();  // the sorted entries are written, and tile_start is visible to every thread
    for (int x = tid; x < tile_start[batch]; x += kPlanThreads) order[x] = tile_at(tile_start, batch, x);
  }
}

// ---- The gate's cumulative sums ----------------------------------------------------------------
// G = cumsum(g) (forward) or dg = the reverse cumsum of dG = in + in2 (backward: the column and
// the row terms), in fp64, per (sequence, head): one warp each, 32 positions per step (a shuffle
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

// ---- Tiles and blocks --------------------------------------------------------------------------
// The swizzled tiles assume 128-byte aligned rows (lesson11::check_tile_alignment): each kernel
// below (and lesson 08's, which the forward runs) declares its dynamic buffer __align__(128), or
// the forward's 96 bytes of static __shared__ bounds (PackedTiles) would put every tile row across
// two 128-byte lines, and each cp.async row would take two shared-memory wavefronts instead of one
// (README, "The 96 bytes", has what it costs). Rounding the pointer up at run time instead makes
// every tile address a register, which is slower.
using lesson11::check_tile_alignment;

// Tiles are copied with lesson 08's load_tile (08_pipelining/load_tile.cuh).
using lesson08::load_tile;

// Which (sequence, tile) entry `e` of a grid is: varlen, entry e of the map (false past its end);
// dense, sequence e / n_tiles, its tiles heaviest first (causal: the last query tiles, or the
// first key tiles, are the heaviest) when last_heaviest, else in ascending order.
__device__ __forceinline__ bool work_item(const fa::AttnParams& p, const int2* map, const int* count, int e,
                                          int n_tiles, bool last_heaviest, int& b, int& tile) {
  if (is_varlen(p)) {
    // TODO(14): varlen: entry e of the map, if e is below its count.
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
  const int rank = e % n_tiles;
  b = e / n_tiles;
  tile = p.causal && last_heaviest ? n_tiles - 1 - rank : rank;
  return true;
}

// A grid of (entries x heads) blocks, the entries varying fastest: the blocks running at once
// share a head, so its K and V stay in the L2 (heads varying fastest would stream every head's
// K and V at once), as lesson 08's grid does.
__device__ __forceinline__ int entry(int heads) { return blockIdx.x % (gridDim.x / heads); }
__device__ __forceinline__ int head(int heads) { return blockIdx.x / (gridDim.x / heads); }

// A forward-style block (one query tile against the key tiles it sees, lesson 06's bounds): its
// sequence, tile (-1: past the end of the map), the causal offset, the key tiles it visits and
// the first that needs the mask. heaviest_first false: a dense batch's tiles in ascending order
// (the variant natural); a varlen map carries its own order.
struct Block {
  Seq s;
  int tile, offset, n_full, n_tiles;
};
__device__ Block block_of(const fa::AttnParams& p, const int2* map, const int* count, int e, int rows, int keys,
                          bool heaviest_first = true) {
  Block k{};
  int b = 0;
  k.tile = -1;
  if (!work_item(p, map, count, e, fa::ceil_div(p.seqlen_q, rows), heaviest_first, b, k.tile)) {
    k.tile = -1;
    return k;
  }
  k.s = sequence(p, b);
  const int q0 = k.tile * rows;
  k.offset = k.s.len_k - k.s.len_q;
  int k_end = k.s.len_k;
  k.n_full = k.s.len_k / keys;
  if (p.causal) {
    k_end = min(k.s.len_k, min(q0 + rows, k.s.len_q) + k.offset);
    k.n_full = max(0, min(k.n_full, (q0 + k.offset + 1) / keys));
  }
  k.n_tiles = k_end > 0 ? fa::ceil_div(k_end, keys) : 0;
  return k;
}

}  // namespace
