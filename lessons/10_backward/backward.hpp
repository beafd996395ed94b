// Your copy of this lesson, generated from solutions/10_backward/backward.hpp by fa-skeleton.
// Lesson 10's index math, as plain functions the CPU tests check (tests/lesson10_test.cpp): how
// many tiles cover a sequence, the causal mask, and which tiles a block may skip under it. The CPU
// model (model.cpp) and the kernels (kernel.cu) walk their loops with these same functions.
#pragma once

#include "fa/params.hpp"

namespace lesson10 {

// This file's TODOs you have not written yet (model.cpp and kernel.cu check them first): delete
// an entry when its code is written.
inline const fa::TodoList kTilesTodosLeft = {
    "TODO(1) in backward.hpp: the causal early start: the first query tile with a row that sees key k0.",
    "TODO(2) in backward.hpp: the causal early stop: one past the key tile of the last key the tile's rows see.",
};

// Tiles of `size` covering n items; the last one may be partial.
__host__ __device__ constexpr int tile_count(int n, int size) { return (n + size - 1) / size; }

// The course's causal mask, bottom-right aligned (docs/conventions.md): key j is visible to
// query i iff j <= i + (seqlen_k - seqlen_q).
__host__ __device__ constexpr bool visible(int i, int j, int seqlen_q, int seqlen_k) {
  return j <= i + (seqlen_k - seqlen_q);
}

// The dK/dV pass: a block owns the key tile that starts at key k0 and walks the query tiles of
// `rows` rows. Under the causal mask the early query tiles see none of its keys: this is the first
// tile it must visit, the one that holds the first query row seeing key k0 (a row that sees any
// key of the tile sees k0, the tile's smallest). tile_count(seqlen_q, rows) when no query row
// sees the tile at all (the walk is empty and dK = dV = 0). Without the mask: 0.
__host__ __device__ constexpr int first_query_tile(int k0, int rows, int seqlen_q, int seqlen_k, bool causal) {
  // TODO(1): the causal early start: the first query tile with a row that sees key k0.
  //   Query i sees key k0 iff i >= k0 - (seqlen_k - seqlen_q): the first such row, clamped to 0,
  //   divided by `rows`, and at most tile_count(seqlen_q, rows). Without the mask: 0.
  return 0;
}

// The dQ pass: a block owns the query tile that starts at row q0 (`rows` rows, fewer at the end of
// the sequence) and walks the key tiles of `keys` keys. Under the causal mask it stops after the
// tile that holds the last key its last row sees: this returns one past that tile, 0 when no row
// of the tile sees any key. Without the mask: every key tile.
__host__ __device__ constexpr int key_tile_end(int q0, int rows, int keys, int seqlen_q, int seqlen_k, bool causal) {
  // TODO(2): the causal early stop: one past the key tile of the last key the tile's rows see.
  //   The tile's last row is min(q0 + rows, seqlen_q) - 1; it sees keys up to (that row) +
  //   (seqlen_k - seqlen_q). One past that key's tile, at most tile_count(seqlen_k, keys), and 0
  //   when that key is negative. Without the mask: tile_count(seqlen_k, keys).
  return tile_count(seqlen_k, keys);
}

}  // namespace lesson10
