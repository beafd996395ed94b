// A tile map: the work tiles of a batch of sequences (packed, or dense: equal lengths), as
// (sequence, tile) pairs, heaviest first, built on the device by one block, so that the host sizes
// the grid by a bound and never waits for the sequences' lengths (lesson 12's README, "The tile
// map" and "Heaviest first"). Lesson 12's kernels run over one: block x of a head takes entry x,
// and exits past the count.
#pragma once

#include <cstdint>

#include "fa/cuda_check.hpp"

namespace fa {

// The plan's block: one thread a bucket of work.
constexpr int kPlanThreads = 1024;

struct TileMap {
  int* tile_start = nullptr;  // batch + 1 entries: the tiles of the sequences before b; the last, all
  int2* order = nullptr;      // every tile as (sequence, tile), heaviest first
  int* count = nullptr;       // how many tiles there are
  int64_t entries = 0;        // the grid's bound on them
};

// The map of `batch` sequences of `total` rows in all, in tiles of `tile` rows: the sum over the
// sequences of ceil(len / tile) is at most total / tile + batch (each adds one partial tile at most).
inline TileMap take_tile_map(Carver& c, int batch, int64_t total, int tile) {
  TileMap m;
  m.entries = total / tile + batch;
  m.tile_start = c.take<int>(batch + 1);
  m.order = c.take<int2>(m.entries);
  m.count = c.take<int>(1);
  return m;
}

// The exclusive prefix sum of x over the block's kPlanThreads threads (Hillis-Steele, in buf);
// *total gets the sum of all.
__device__ inline int block_exclusive_scan(int x, int* buf, int* total) {
  const int tid = threadIdx.x;
  buf[tid] = x;
  __syncthreads();
  for (int off = 1; off < kPlanThreads; off *= 2) {  // log2(1024) steps
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
__device__ inline int2 tile_at(const int* tile_start, int batch, int x) {
  int lo = 0, hi = batch - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (tile_start[mid] <= x) lo = mid; else hi = mid - 1;
  }
  return make_int2(lo, x - tile_start[lo]);
}

// Builds map m, by all kPlanThreads threads of one block: tiles(b) is the number of tiles of
// sequence b, bucket(b, t) the bucket of work of its tile t, in [0, kPlanThreads), 0 the heaviest.
// A counting sort:
//   1. tile_start = the exclusive prefix sum of tiles(b), in chunks of kPlanThreads sequences;
//   2. a histogram of the tiles' buckets;
//   3. its exclusive prefix sum: where each bucket's tiles start in `order`;
//   4. each tile takes the next place of its bucket (atomicAdd in shared memory).
// The order within a bucket varies from run to run; no result may depend on it. With
// heaviest_first false the sorted map is then overwritten in packed order, (sequence, tile)
// ascending, so that both orders cost the same plan. Once per kernel: its shared memory is not
// fenced off from a second call.
template <class Tiles, class Bucket>
__device__ void plan_tiles(int batch, Tiles tiles, Bucket bucket, bool heaviest_first, const TileMap& m) {
  __shared__ int buf[kPlanThreads];
  __shared__ int hist[kPlanThreads];
  const int tid = threadIdx.x;
  int carry = 0;  // step 1
  for (int b0 = 0; b0 < batch; b0 += kPlanThreads) {
    const int b = b0 + tid;
    int chunk = 0;
    const int before = block_exclusive_scan(b < batch ? tiles(b) : 0, buf, &chunk);
    if (b < batch) m.tile_start[b] = carry + before;
    carry += chunk;
  }
  const int total = carry;
  if (tid == 0) m.tile_start[batch] = *m.count = total;
  hist[tid] = 0;
  __syncthreads();  // tile_start (global) and hist visible to the whole block
  for (int x = tid; x < total; x += kPlanThreads) {  // step 2
    const int2 e = tile_at(m.tile_start, batch, x);
    atomicAdd(&hist[bucket(e.x, e.y)], 1);
  }
  __syncthreads();
  int unused = 0;
  const int place = block_exclusive_scan(hist[tid], buf, &unused);  // step 3
  hist[tid] = place;
  __syncthreads();
  for (int x = tid; x < total; x += kPlanThreads) {  // step 4
    const int2 e = tile_at(m.tile_start, batch, x);
    m.order[atomicAdd(&hist[bucket(e.x, e.y)], 1)] = e;
  }
  if (!heaviest_first) {
    __syncthreads();  // the sorted entries are written
    for (int x = tid; x < total; x += kPlanThreads) m.order[x] = tile_at(m.tile_start, batch, x);
  }
}

}  // namespace fa
