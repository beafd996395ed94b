// Your copy of this lesson, generated from solutions/09_rope_fusion/rope.hpp by fa-skeleton.
// Lesson 09's RoPE math, as plain functions the CPU tests check (tests/lesson09_test.cpp): the
// position of a row, the rotation of a run of pairs, and which thread copies and rotates which
// part of a tile. The kernel (kernel.cu) is lesson 08's with these three put to work.
#pragma once

#include <cmath>

#include "fa/params.hpp"

namespace lesson09 {

// This file's TODOs you have not written yet (kernel.cu checks them first): delete an entry when
// its code is written.
inline const fa::TodoList kRopeTodosLeft = {
    "TODO(1) in rope.hpp: the position of query row i.",
    "TODO(2) in rope.hpp: the rotation of each pair by its angle, as defined above (both from the old x1",
    "TODO(3) in rope.hpp: the pair of chunks thread `thread` copies in step `step`: with D / 16 chunk pairs per",
};

// The position RoPE turns a row by (docs/conventions.md, RoPE): key j sits at position j, query
// i at i + seqlen_k - seqlen_q, aligned like the causal mask, so that the last query and the last
// key share a position whatever the two lengths are.
__host__ __device__ constexpr int query_position(int i, int seqlen_q, int seqlen_k) {
  // TODO(1): the position of query row i.
  return i;
}

// A product rounded to fp32 on its own: never fused into a neighbouring add by the compiler.
__host__ __device__ inline float mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

// Turns n pairs by their angles: x1[e] is column c + e of a row and x2[e] its partner c + e + d/2
// (half-split pairs), cs[e] and sn[e] the cos and sin of position * theta_{c+e} from the tables:
//   x1' = x1 cos - x2 sin,  x2' = x2 cos + x1 sin.
// The course defines the rotated value bit for bit, so that the reference can round exactly what
// the kernel rounds: in fp32, the second product rounded first, then one fused multiply-add,
//   x1' = fmaf(x1, cos, -(x2 sin)),  x2' = fmaf(x2, cos, x1 sin)   (products by mul_rn).
// Written as x1 * cos - x2 * sin, the compiler may fuse either product, and the two choices
// round differently about once in 4000 values; one such value is a 1-ulp change of a 16-bit
// element, which moves a score by up to ~1e-4, the whole LSE tolerance (README, "Rounding").
template <int n>
__host__ __device__ inline void rotate_pairs(float (&x1)[n], float (&x2)[n], const float (&cs)[n], const float (&sn)[n]) {
  // TODO(2): the rotation of each pair by its angle, as defined above (both from the old x1
  //   and x2): x1' = fmaf(x1, cos, -mul_rn(x2, sin)), x2' = fmaf(x2, cos, mul_rn(x1, sin)).
}

// Who copies which part of a tile. Lesson 08 let thread x copy 16-byte chunk x % (D / 8) of a row,
// so a chunk and its RoPE partner, D / 2 columns (D / 16 chunks) further, came from two different
// threads: rotating them would need a __syncthreads between the copy and the rotation. Here
// thread x copies both: in step s it copies chunk `chunk` and chunk `chunk + D / 16` of row `row`.
// cp.async.wait_group makes a thread's own copies visible to itself, so it can rotate its pairs
// as soon as they land, and the ring's one barrier per tile publishes the rotated tile.
struct PairTask {
  int row, chunk;
};
__host__ __device__ constexpr PairTask pair_task(int thread, int step, int threads, int D) {
  // TODO(3): the pair of chunks thread `thread` copies in step `step`: with D / 16 chunk pairs per
  //   row, thread x takes pair x % (D / 16) of row x / (D / 16); each step moves threads / (D / 16)
  //   rows down.
  return {0, 0};
}

// Where a chunk's partner lies in a swizzled tile (lesson 08's tile_offset): for a column c in
// the first half, tile_offset(r, c + D/2, D) == tile_offset(r, c, D) ^ (D/2). The partner's chunk
// index is the chunk's with the half-row bit (D/16) set, and the swizzle is an XOR too: at
// D = 128 that bit lies above the swizzle's 3 bits, at D = 64 among them, and either way the two
// XORs commute, so the partner is the same swizzled chunk with that one bit flipped. One XOR
// instead of a second address register per chunk (tests/lesson09_test.cpp checks every cell).
__host__ __device__ constexpr int partner_offset(int offset, int D) { return offset ^ (D / 2); }

}  // namespace lesson09
