// Your copy of this lesson, generated from solutions/08_pipelining/tiles.hpp by fa-skeleton.
// Lesson 08's index math, as plain functions the CPU tests check (tests/lesson08_test.cpp):
// the swizzle of a shared-memory tile, and the tile configurations with their shared-memory cost
// against each architecture's limit.
#pragma once

#include <string>

#include "fa/params.hpp"

namespace lesson08 {

// This file's TODOs you have not written yet (kernel.cu checks them first): delete an entry when
// its code is written.
inline const fa::TodoList kTilesTodosLeft = {
    "TODO(1) in tiles.hpp: the swizzled chunk of (row, chunk): chunk XOR (row mod 8).",
};

// A tile of `rows` x D 16-bit values in shared memory is stored row by row (D * 2 bytes per row:
// 128 bytes at D = 64, 256 at D = 128), in 16-byte chunks of 8 values. Unswizzled, ldmatrix's 8
// row addresses (same chunk, 8 consecutive rows) all fall in the same 4 banks: an 8-way conflict.
// The swizzle stores chunk c of row r at chunk c ^ (r % 8): 8 consecutive rows then use 8
// different chunks of their 128-byte line, all 32 banks, and each row is still a permutation of
// its own chunks (nothing moves to another row, so cp.async can still write whole chunks).
__host__ __device__ constexpr int swizzle_chunk(int row, int chunk) {
  // TODO(1): the swizzled chunk of (row, chunk): chunk XOR (row mod 8).
  return chunk;
}

// Offset in elements of (row, col) in a swizzled tile with D columns (D a multiple of 64).
__host__ __device__ constexpr int tile_offset(int row, int col, int D) {
  return row * D + swizzle_chunk(row, col / 8) * 8 + col % 8;
}

// One kernel configuration: query rows per block (Br), keys per K/V tile (Bc), keys per softmax
// step (a tile is computed `sub` keys at a time), warps, and how many K/V tiles are in flight
// (stages), and the blocks per SM the registers are capped for (__launch_bounds__: 65536
// registers / (blocks x threads), at most 255). Each warp owns Br / warps query rows, in m16 tiles.
struct Config {
  int head_dim, rows, keys, sub, warps, stages, blocks;
};

// Shared memory of a configuration: the Q tile and `stages` K tiles and V tiles, 2 bytes a value.
constexpr int smem_bytes(const Config& c) { return (c.rows + 2 * c.stages * c.keys) * c.head_dim * 2; }

// What a configuration must satisfy to compile and run: whole m16 tiles per warp, whole k16
// steps, Bc a multiple of 16, at least 2 stages, and the cp.async loops even over the threads.
constexpr bool well_formed(const Config& c) {
  const int threads = c.warps * 32;
  return c.head_dim % 64 == 0 && c.rows % (16 * c.warps) == 0 && c.sub % 16 == 0 && c.keys % c.sub == 0 &&
         c.stages >= 2 &&
         (c.rows * c.head_dim / 8) % threads == 0 && (c.keys * c.head_dim / 8) % threads == 0;
}

// Every configuration the kernel is compiled for (kernel.cu instantiates each one).
constexpr Config kConfigs[] = {
    // head_dim, rows, keys, sub, warps, stages, blocks
    {64, 128, 128, 128, 4, 2, 2},  // 0
    {64, 128, 128, 64, 4, 2, 2},   // 1
    {64, 64, 64, 64, 4, 3, 2},     // 2
    {128, 128, 64, 64, 4, 2, 2},   // 3
    {128, 128, 32, 32, 4, 3, 2},   // 4
    {128, 64, 64, 64, 4, 2, 2},    // 5
};
constexpr int kNumConfigs = sizeof(kConfigs) / sizeof(kConfigs[0]);

// The shared memory one block may use (cudaDevAttrMaxSharedMemoryPerBlockOptin), per compute
// capability, from the CUDA C++ Programming Guide's table of compute-capability limits.
struct Arch {
  int sm;             // compute capability x 10
  int smem_per_block; // bytes
  int smem_per_sm;    // bytes: how many blocks fit is smem_per_sm / (their smem + 1 KB reserved)
};
constexpr Arch kArchs[] = {
    {80, 163 * 1024, 164 * 1024},
    {86, 99 * 1024, 100 * 1024},
    {89, 99 * 1024, 100 * 1024},
    {90, 227 * 1024, 228 * 1024},
    {120, 99 * 1024, 100 * 1024},  // GeForce RTX 50 (Blackwell): sm_86/89's budget
};

// The configuration used on an architecture, per head dim: an index into kConfigs, or -1. On sm_90
// it was chosen by measurement on an H200 (README, "Choosing the tiles"); the others are the
// shapes FlashAttention-2 uses on those GPUs, within their limits, not measured by the course.
// Any other GPU gets sm_90's choice: on sm_120 it fits the 99 KB too (one block per SM, unmeasured).
constexpr int config_for(int sm, int head_dim) {
  if (head_dim == 64) return sm == 86 || sm == 89 ? 2 : 0;
  if (head_dim == 128) return sm == 86 || sm == 89 ? 5 : 3;
  return -1;
}

// Configuration i as a variant of the lesson (and of lesson 09, which runs on these tiles): its
// name, "config<i>", what it is, and the head dim it runs.
inline fa::Variant config_variant(int i) {
  const Config& c = kConfigs[i];
  return {"config" + std::to_string(i),
          "d" + std::to_string(c.head_dim) + ": " + std::to_string(c.rows) + " query rows x " + std::to_string(c.keys) + " keys (" +
              std::to_string(c.sub) + " a step), " + std::to_string(c.warps) + " warps, " + std::to_string(c.stages) + " stages",
          fa::Variant::Pass::kBoth, c.head_dim};
}

}  // namespace lesson08
