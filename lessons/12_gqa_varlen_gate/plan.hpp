// Your copy of this lesson, generated from solutions/12_gqa_varlen_gate/plan.hpp by fa-skeleton.
// Lesson 12's index math, as plain functions the CPU tests check (tests/lesson12_test.cpp): how
// much work a tile of a sequence is, the bucket the heaviest-first map sorts it into, the padded
// rows of the backward's per-row statistics, and the anchor the gate's differences are taken from.
// The GPU kernels (kernel.cu) and their tile map call exactly these.
#pragma once

#include "../11_fast_backward/tiles.hpp"
#include "fa/params.hpp"

namespace lesson12 {

// This file's TODOs you have not written yet (kernel.cu checks them first): delete an entry when
// its code is written.
inline const fa::TodoList kPlanTodosLeft = {
    "TODO(1) in plan.hpp: the number of key tiles, 0 when the tile sees no key.",
    "TODO(2) in plan.hpp: varlen: h * per_head + tile_start_b * kStatRows + i; dense: (b * heads_q + h) * per_head + i.",
    "TODO(3) in plan.hpp: q0 + len_k - len_q, clamped into [0, len_k - 1].",
};

__host__ __device__ constexpr int tiles_of(int len, int tile) { return (len + tile - 1) / tile; }
__host__ __device__ constexpr int min_of(int a, int b) { return a < b ? a : b; }
__host__ __device__ constexpr int max_of(int a, int b) { return a > b ? a : b; }

// The forward's work for query tile `t` (rows t * rows .. of a sequence of len_q queries and len_k
// keys): how many key tiles of `keys` it visits. Causal (bottom-right aligned, lesson 06): its last
// row i = min(len_q, (t + 1) rows) - 1 sees keys j <= i + len_k - len_q.
__host__ __device__ constexpr int key_tiles_visited(int t, int rows, int keys, int len_q, int len_k, bool causal) {
  // TODO(1): the number of key tiles, 0 when the tile sees no key.
  return tiles_of(len_k, keys);
}

// The backward's work for key tile `t`: how many query tiles of `rows` visit it (per query head),
// from the first one that sees any of its keys (lesson 11's first_query_tile).
__host__ __device__ constexpr int query_tiles_visited(int t, int keys, int rows, int len_q, int len_k, bool causal) {
  return max_of(0, tiles_of(len_q, rows) - lesson11::first_query_tile(t * keys, len_k - len_q, rows, causal));
}

// The tile map sorts tiles heaviest first with a counting sort: one bucket per amount of work,
// bucket 0 the heaviest. Work beyond kBuckets - 1 tiles shares the heaviest bucket.
constexpr int kBuckets = 1024;
__host__ __device__ constexpr int bucket_of(int work) { return kBuckets - 1 - min_of(work, kBuckets - 1); }

// The backward keeps each query row's LSE (base 2, minus the gate's anchored G) and D in fp32
// rows padded per sequence to whole tiles of kStatRows, so its kernels load a tile's statistics
// as whole 16-byte chunks. Row `i` of sequence `b`, head `h`: varlen sequences are stacked per
// head (tile_start[b] = the tiles of the sequences before b), dense ones padded one by one.
constexpr int kStatRows = 64;
__host__ __device__ constexpr int64_t stat_row(bool varlen, int b, int h, int i, int heads_q, int64_t per_head,
                                               int tile_start_b) {
  // TODO(2): varlen: h * per_head + tile_start_b * kStatRows + i; dense: (b * heads_q + h) * per_head + i.
  return (int64_t(b) * heads_q + h) * per_head + i;
}

// The gate's anchor for a query tile whose first row is q0: the key position of that row
// (q0 + len_k - len_q), clamped into the sequence's keys. The kernels add
//   float(G[pos_i] - G[anchor]) - float(G[j] - G[anchor])
// to the logits, differences taken in fp64 and rounded once, never G itself in fp32.
__host__ __device__ constexpr int gate_anchor(int q0, int len_q, int len_k) {
  // TODO(3): q0 + len_k - len_q, clamped into [0, len_k - 1].
  return q0;
}

// The forward's tiles are lesson 08's configurations (kConfigs): the one lesson 08 chooses for the
// GPU (config_for), except that with the gate its sm_90 choices give way to these two, with half
// as many keys a step (kernel.cu says why).
constexpr int kFwdGate64 = 1, kFwdGate128 = 4;

}  // namespace lesson12
