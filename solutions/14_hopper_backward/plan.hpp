// Lesson 14's plan, as plain functions the CPU tests check (tests/lesson14_test.cpp): the tiles,
// which query tiles a key block visits, the order in which the deterministic mode adds dQ, where
// each float of dQ's accumulator lives, and the shared memory a block takes.
#pragma once

#include "fa/params.hpp"

namespace lesson14 {

// This file's TODOs you have not written yet (kernel.cu checks them first): delete an entry when
// its code is written.
inline const fa::TodoList kPlanTodosLeft = {
    // @todos-left
};

constexpr int kRows = 64;    // query rows per tile of the ring
constexpr int kKeys = 128;   // keys per block: 64 per consumer warpgroup
constexpr int kStages = 2;   // query tiles in flight (3 measured no faster: README)

// The first query tile (of kRows rows) holding a row that sees key k0: row i sees key j iff
// j <= i + offset (offset = seqlen_k - seqlen_q). Without the causal mask, tile 0.
__host__ __device__ constexpr int first_query_tile(int k0, int offset, bool causal) {
  // TODO(1): the tile of row k0 - offset, clamped at 0; 0 without the causal mask.
  // BEGIN SOLUTION
  return !causal || k0 - offset <= 0 ? 0 : (k0 - offset) / kRows;
  // END SOLUTION
  // BEGIN SKELETON
  // return 0;
  // END SKELETON
}

// The highest key block that visits query tile qt (of n_kt blocks): block kt visits it iff
// first_query_tile(kt kKeys) <= qt, so the visitors are blocks 0 .. last_key_block. The
// deterministic mode adds into tile qt from this block down: block kt's turn is last - kt.
__host__ __device__ constexpr int last_key_block(int qt, int n_kt, int offset, bool causal) {
  if (!causal) return n_kt - 1;
  const int k = ((qt + 1) * kRows - 1 + offset) / kKeys;
  return k < n_kt - 1 ? k : n_kt - 1;
}

// dQ's fp32 accumulator keeps each consumer warpgroup's share of a query tile (kRows rows x
// `cols` = D / 2 columns) in the order the threads hold it: cols / 8 chunks of 128 threads x 4
// floats, thread tid's accumulator floats 4 c .. 4 c + 3 in chunk c. So the kernel adds 16 bytes
// per thread and instruction, a warp's 512 bytes contiguous. The offset of element (r, col) of a
// share: lesson 13's acc_element inverted (float i = 4 (col / 8) + 2 ((r % 16) / 8) + col % 2 of
// thread 32 (r / 16) + 4 (r % 8) + (col % 8) / 2).
__host__ __device__ constexpr int dq_share_offset(int r, int col) {
  const int tid = 32 * (r / 16) + 4 * (r % 8) + (col % 8) / 2;
  return ((col / 8) * 128 + tid) * 4 + 2 * ((r % 16) / 8) + col % 2;
}

// Shared memory: K and V (kKeys x D each, as D / 64 column blocks of 128-byte rows, 128-byte
// swizzled by TMA), the ring's Q and dO tiles (kRows x D), dS^T twice (kKeys x kRows: one column
// block), the two warpgroups' dQ shares (bulk reduce-add), the ring's LSE2 and D rows, then the
// barriers. Every tile starts on a 1024-byte boundary.
template <int D>
struct Smem {
  static constexpr int kv_bytes = kKeys * D * 2, q_bytes = kRows * D * 2, ds_bytes = kKeys * kRows * 2;
  static constexpr int dq_bytes = kRows * (D / 2) * 4;  // a warpgroup's fp32 share of a dQ tile
  static constexpr int stat_bytes = kRows * 4;
  static constexpr int k = 0, v = kv_bytes, q = 2 * kv_bytes, dout = q + kStages * q_bytes, ds = dout + kStages * q_bytes;
  static constexpr int dq = ds + 2 * ds_bytes;
  static constexpr int lse = dq + 2 * dq_bytes, delta = lse + kStages * stat_bytes, bars = delta + kStages * stat_bytes;
  static constexpr int total = bars + 8 * (1 + 2 * kStages) + 1024;  // + slack to align the base
};
constexpr int kMaxSmem = 227 * 1024;  // a block's shared memory on Hopper

}  // namespace lesson14
