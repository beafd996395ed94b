// Your copy of this lesson, generated from solutions/11_fast_backward/tiles.hpp by fa-skeleton.
// Lesson 11's index math, as plain functions the CPU tests check (tests/lesson11_test.cpp): which
// query tiles a key tile visits under the causal mask and which of them need the mask, where
// each lane's values of S^T land, and the shared-memory budget of each configuration.
#pragma once

#include "fa/params.hpp"

namespace lesson11 {

// This file's TODOs you have not written yet (kernel.cu checks them first): delete an entry when
// its code is written.
inline const fa::TodoList kTilesTodosLeft = {
    "TODO(1) in tiles.hpp: the first query tile of the causal case (clamped at 0); 0 otherwise.",
    "TODO(2) in tiles.hpp: true when k0 + keys > seqlen_k, or causal and q0 + offset < k0 + keys - 1.",
};

// The dK/dV kernel: one block per key tile of `keys` (Bc) keys, `warps` warps, warp w owning
// keys / warps of them (w keys / warps on) in m16 tiles: 16 keys, or 32 (each Q and dO fragment
// read then feeds two mma; only at D = 64 do dK and dV leave the registers for it); the query tiles of `rows` (Br) rows stream
// past it, two in flight (the next one loads while this one is computed), each computed `sub`
// rows at a time (S^T and dP^T of 16 keys x sub rows are sub / 2 registers each: at D = 128, where
// dK and dV hold 128, 64 rows at once do not fit in 255).
struct Config {
  int head_dim, keys, rows, sub, warps;
};

constexpr int threads(const Config& c) { return 32 * c.warps; }

// Shared memory of the dK/dV kernel: K and V (keys x D each), two buffers of Q and dO (rows x D
// each), dS^T (keys x rows), and two buffers of the rows' LSE (base 2) and D (fp32): 2 bytes a
// 16-bit value.
constexpr int smem_bytes(const Config& c) {
  return (2 * c.keys * c.head_dim + 4 * c.rows * c.head_dim + c.keys * c.rows) * 2 + 4 * c.rows * 4;
}

// The deterministic dQ pass (dq_kernel; lesson 12's is the same): one block of kDqWarps warps per
// 16 x kDqWarps query rows, the key tiles of kDqKeys keys streaming past in a two-stage ring.
constexpr int kDqKeys = 64, kDqWarps = 4;

// Its shared memory: Q and dO (16 x kDqWarps rows x D each) and two stages of K and V (kDqKeys x D
// each), 2 bytes a 16-bit value.
constexpr int dq_smem_bytes(int head_dim) { return (2 * 16 * kDqWarps + 4 * kDqKeys) * head_dim * 2; }

// What the kernel's loops need: 16 keys per warp, whole k16 steps over the rows, swizzled tiles
// (D and rows multiples of 64), the dQ product's warps as 2 x (warps / 2) with whole n16 steps
// each, and the cp.async loops even over the threads.
constexpr bool well_formed(const Config& c) {
  const int t = threads(c);
  return c.keys % (16 * c.warps) == 0 && c.keys / (16 * c.warps) <= 2 && c.head_dim % 64 == 0 && c.rows % 64 == 0 && c.warps % 2 == 0 &&
         c.sub % 16 == 0 && c.rows % c.sub == 0 &&
         (c.head_dim / (c.warps / 2)) % 16 == 0 && (c.keys * c.head_dim / 8) % t == 0 &&
         (c.rows * c.head_dim / 8) % t == 0 && c.rows / 4 <= t;
}

constexpr Config kConfigs[] = {
    // head_dim, keys, rows, sub, warps
    {64, 128, 64, 64, 8},   // 0
    {128, 128, 64, 32, 8},  // 1
    {64, 64, 64, 64, 4},    // 2
    {64, 128, 128, 64, 8},  // 3
    {128, 128, 64, 64, 8},  // 4
    {64, 128, 64, 32, 4},   // 5: 32 keys a warp
    {64, 256, 64, 32, 8},   // 6: 32 keys a warp
};
constexpr int kNumConfigs = sizeof(kConfigs) / sizeof(kConfigs[0]);

// The configuration per head dim (chosen by measurement on the H200: README, "Choosing the tiles").
constexpr int config_for(int head_dim) { return head_dim == 64 ? 5 : head_dim == 128 ? 4 : -1; }

// The first query tile (of `rows` rows) that sees any key of the key tile starting at k0: query i
// sees key j iff j <= i + offset (offset = seqlen_k - seqlen_q), so the tile's first key k0 is seen
// from query k0 - offset on. Without the causal mask every tile is visited (0).
__host__ __device__ constexpr int first_query_tile(int k0, int offset, int rows, bool causal) {
  // TODO(1): the first query tile of the causal case (clamped at 0); 0 otherwise.
  return 0;
}

// Does the (query tile at q0, key tile at k0) pair need the mask? Under the causal mask, unless its
// first query already sees its last key; and the key tile that runs past seqlen_k, always (its
// zero-filled keys must get P = 0: exp(0 - LSE) is not 0, and can even overflow).
__host__ __device__ constexpr bool needs_mask(int q0, int k0, int keys, int seqlen_k, int offset, bool causal) {
  // TODO(2): true when k0 + keys > seqlen_k, or causal and q0 + offset < k0 + keys - 1.
  return false;
}

// Where element e (0..3) of n8 tile nt of S^T (keys x rows, the warp's 16 keys) sits, for lane
// `lane`: the key within the warp's 16 and the query row within the tile. It is lesson 07's
// accumulator layout (row lane / 4 (+ 8 for e >= 2), column 2 (lane % 4) + e % 2), with S^T's rows
// being keys and its columns queries.
struct KeyRow {
  int key, row;
};
__host__ __device__ constexpr KeyRow st_element(int lane, int nt, int e) {
  return {lane / 4 + 8 * (e / 2), nt * 8 + 2 * (lane % 4) + e % 2};
}

// dQ = dS K takes dS as its A operand (rows x keys), but dS^T is what the warps hold and store
// (keys x rows, tile_offset(key, row, rows)). ldmatrix .trans reads each 8 x 8 matrix transposed,
// so an A fragment comes straight from the transposed tile: lane l points at stored row (key)
// l % 8 + 8 (l / 16), column (row of dS) 8 ((l / 8) % 2). (Lesson 07's ldmatrix_a is the same
// fragment from a row-major tile.)
struct RowCol {
  int row, col;
};
__host__ __device__ constexpr RowCol ldmatrix_a_trans(int lane) {
  return {lane % 8 + 8 * (lane / 16), 8 * ((lane / 8) % 2)};
}

// The swizzled offset (elements) of (row, col) in a shared tile with `cols` columns (a multiple of
// 64), lesson 08's swizzle: chunk c of row r stored at chunk c ^ (r % 8).
__host__ __device__ constexpr int tile_offset(int row, int col, int cols) {
  return row * cols + (((col / 8) ^ (row & 7)) * 8) + col % 8;
}

}  // namespace lesson11
