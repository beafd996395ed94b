// Lesson 14's plan, as plain functions the CPU tests check (tests/lesson14_test.cpp): the tiles,
// which query tiles a key block visits, the order in which the deterministic mode adds dQ, where
// each float of dQ's accumulator lives, and the shared memory a block takes.
#pragma once

#include <tuple>

#include "fa/params.hpp"

namespace lesson14 {

// This file's TODOs you have not written yet (kernel.cu checks them first): delete an entry when
// its code is written.
inline const fa::TodoList kPlanTodosLeft = {
    // @todos-left
};

constexpr int kRows = 64;    // query rows per tile of the ring
constexpr int kKeys = 128;   // keys per block: 64 per consumer warpgroup

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

// The launch order: which (K/V group, key block) block w owns, for n_bk groups (batch x K/V heads)
// of n_kt key blocks. The groups go in chunks of `chunk` (about one wave of blocks: launch_chunk);
// within a chunk the key block changes slowest, so every group's key block 0, the heaviest under
// the causal mask, starts before any group's key block 1, and the lightest blocks run last, where
// they fill the SMs the others leave. The last chunk may hold fewer groups. `from_last` (the
// deterministic mode) numbers the key blocks from the last instead: block (bk, kt) then always comes
// after (bk, kt + 1), whose add into a query tile's dQ it waits for (section 5).
struct BlockTile {
  int bk, kt;
};
__host__ __device__ constexpr BlockTile block_tile(long long w, int n_kt, int n_bk, int chunk, bool from_last) {
  const long long c0 = w / (static_cast<long long>(chunk) * n_kt) * chunk;  // the chunk's first group
  const int width = static_cast<int>(n_bk - c0 < chunk ? n_bk - c0 : chunk);
  const long long r = w - c0 * n_kt;  // the block's place in its chunk
  const int i = static_cast<int>(r / width);
  return {static_cast<int>(c0 + r % width), from_last ? n_kt - 1 - i : i};
}
// Groups per chunk. Many short blocks (8 or more a SM: no grouped-query heads, or long sequences)
// leave no tail worth reordering, so the groups go one by one (1), as the order was before step 7.
// Fewer, longer blocks (G query heads a group make a block G times longer and the grid G times
// smaller) go heaviest first across as many groups as one wave holds every key block of
// (sm_count / n_kt), so that all of a group's blocks still run at once and share its Q and dO tiles
// in L2; the chunks are equal (a divisor of n_bk), so no group is left to run alone at the end.
// README, "How it got here", step 7.
__host__ __device__ constexpr int launch_chunk(int n_kt, int n_bk, int sm_count) {
  if (static_cast<long long>(n_kt) * n_bk >= 8LL * sm_count) return 1;
  int c = sm_count / n_kt;
  if (c > n_bk) c = n_bk;
  if (c < 1) c = 1;
  while (n_bk % c != 0) --c;
  return c;
}

// The knobs of one build of the main kernel (README, "The sweep"): query tiles in flight in the
// ring (`stages`), dQ staging buffers per consumer warpgroup (`dq_buffers`), K and V held in
// registers as wgmma's A operand of S^T and dP^T (`kv_in_regs`: 64 registers a thread, head dim 64
// only), and dQ split between the warpgroups by keys (`dq_by_keys`: D / 2 floats a thread for dQ,
// head dim 64 only; see DqSplit). Default<D> is the build the sweep chose (README, "The sweep"):
// four stages at head dim 64, two at 128, where a third fits only beside one dQ buffer. The variants
// stages2, stages3, one-dq-buffer, kv-in-smem and dq-by-columns each change one knob of it (stages3
// at head dim 128 also takes one dQ buffer).
template <int D, int kStages, int kDqBuffers, bool kKvInRegs, bool kDqByKeys>
struct Config {
  static_assert(D == 64 || D == 128, "head dims 64 and 128");
  static_assert(!kKvInRegs || D == 64, "K and V in registers take 64 registers a thread: head dim 64 only");
  static_assert(!kDqByKeys || D == 64, "dQ by keys takes D / 2 floats a thread: head dim 64 only");
  static constexpr int head_dim = D, stages = kStages, dq_buffers = kDqBuffers;
  static constexpr bool kv_in_regs = kKvInRegs, dq_by_keys = kDqByKeys;
};
template <int D>
using Default = Config<D, D == 64 ? 4 : 2, 2, D == 64, D == 64>;

// Every build the kernel has, per head dim (kernel.cu instantiates these and no other): the default
// first, then the sweep's.
template <int D>
struct Builds;
template <>
struct Builds<64> {
  using type = std::tuple<Default<64>, Config<64, 2, 2, true, true>, Config<64, 3, 2, true, true>, Config<64, 4, 1, true, true>,
                          Config<64, 4, 2, false, true>, Config<64, 4, 2, true, false>>;
};
template <>
struct Builds<128> {
  using type = std::tuple<Default<128>, Config<128, 3, 1, false, false>, Config<128, 2, 1, false, false>>;
};

// The lesson's variants, in the order kernel.cu declares them (fa_lesson_14): the dQ paths (0-2)
// and the sweep's builds (3-7).
enum Variant { kWriters, kAtomicVariant, kStress, kStages2, kStages3, kOneDqBuffer, kKvInSmem, kDqByColumns, kVariants };

// A build's knobs as values, and the ones each variant runs at head dim D: the default's with one
// knob changed (stages3 at 128 two: one dQ buffer makes room for the third stage). kernel.cu runs
// the build of Builds<D> whose knobs these are; stages = 0 for a variant that does not run at D.
struct Knobs {
  int stages = 0, dq_buffers = 0;
  bool kv_in_regs = false, dq_by_keys = false;
};
constexpr bool operator==(Knobs a, Knobs b) {
  return a.stages == b.stages && a.dq_buffers == b.dq_buffers && a.kv_in_regs == b.kv_in_regs && a.dq_by_keys == b.dq_by_keys;
}
template <class C>
constexpr Knobs knobs() {
  return {C::stages, C::dq_buffers, C::kv_in_regs, C::dq_by_keys};
}
constexpr Knobs knobs_of(int variant, int d) {
  const bool k64 = d == 64;
  Knobs k = k64 ? knobs<Default<64>>() : knobs<Default<128>>();
  switch (variant) {
    case kStages2: k.stages = k64 ? 2 : 0; break;
    case kStages3: k.stages = 3, k.dq_buffers = k64 ? 2 : 1; break;
    case kOneDqBuffer: k.dq_buffers = 1; break;
    case kKvInSmem: k.stages = k64 ? k.stages : 0, k.kv_in_regs = false; break;
    case kDqByColumns: k.stages = k64 ? k.stages : 0, k.dq_by_keys = false; break;
    default: break;  // the dQ paths run the default build
  }
  return k;
}

// How a tile's dQ = dS K is split between the two consumer warpgroups. By columns (head dim 128,
// and the deterministic mode at 64): warpgroup c computes columns (c - 1) D / 2 .. c D / 2 - 1 over
// all 128 keys, so it reads the other warpgroup's half of dS^T and both meet at a barrier every
// tile. By keys (head dim 64 by default): warpgroup c multiplies only its own 64 keys into all D
// columns, a partial sum added into the same accumulator as the other's, so the warpgroups never
// wait for each other and drift apart (one's exponentials under the other's products). That takes
// 2 x 16 KB of adds a tile instead of 2 x 8 KB and D / 2 floats a thread for dQ, which fit at 64 and
// not at 128 (README, "How it got here"). The deterministic mode always splits by columns: by
// keys, the two partials of a tile would take turns on one tile's order, two ordered adds a tile in
// a row; by columns, each warpgroup's half has its own order and the two go at once.
template <int D, bool kByKeys>
struct DqSplit {
  static constexpr bool by_keys = kByKeys;
  static constexpr int cols = by_keys ? D : D / 2;  // a warpgroup's dQ columns
  // Where consumer warpgroup c's share of (batch, head, query tile) `tile` starts in the
  // accumulator: by columns, the tile's two halves one after the other; by keys, both add into the
  // whole tile.
  __host__ __device__ static constexpr long long share_start(long long tile, int c) {
    return by_keys ? tile * kRows * D : (tile * 2 + (c - 1)) * (kRows * D / 2);
  }
};
// The split a build of config C takes in a dQ mode (deterministic or not).
template <class C, bool kDeterministic>
using SplitOf = DqSplit<C::head_dim, C::dq_by_keys && !kDeterministic>;

// dQ's fp32 accumulator keeps each consumer warpgroup's share of a query tile (kRows rows x
// `cols` = DqSplit::cols columns) in the order the threads hold it: cols / 8 chunks of 128 threads x 4
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
// block), the two warpgroups' dQ staging buffers (the bulk reduce-add's; a buffer holds the larger
// share the build may take: D columns by keys, else D / 2), the ring's LSE2 and D rows, then the
// barriers. Every tile starts on a 1024-byte boundary.
template <class C>
struct Smem {
  static constexpr int D = C::head_dim, stages = C::stages, dq_buffers = C::dq_buffers;
  static constexpr int kv_bytes = kKeys * D * 2, q_bytes = kRows * D * 2, ds_bytes = kKeys * kRows * 2;
  static constexpr int dq_bytes = kRows * DqSplit<D, C::dq_by_keys>::cols * 4;  // a staging buffer
  static constexpr int stat_bytes = kRows * 4;
  static constexpr int k = 0, v = kv_bytes, q = 2 * kv_bytes, dout = q + stages * q_bytes, ds = dout + stages * q_bytes;
  static constexpr int dq = ds + 2 * ds_bytes;  // 2 warpgroups x dq_buffers
  static constexpr int lse = dq + 2 * dq_buffers * dq_bytes, delta = lse + stages * stat_bytes, bars = delta + stages * stat_bytes;
  // Barriers: K/V loaded, the ring's full and empty per stage, and per consumer warpgroup and dQ
  // staging buffer a full and an empty.
  static constexpr int n_bars = 1 + 2 * stages + 2 * 2 * dq_buffers;
  static constexpr int total = bars + 8 * n_bars + 1024;  // + slack to align the base
};
constexpr int kMaxSmem = 227 * 1024;  // a block's shared memory on Hopper

}  // namespace lesson14
