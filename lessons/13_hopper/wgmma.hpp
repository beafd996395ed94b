// Your copy of this lesson, generated from solutions/13_hopper/wgmma.hpp by fa-skeleton.
// Lesson 13's layouts, as plain functions the CPU tests check (tests/lesson13_test.cpp): how TMA
// stores a tile with the 128-byte swizzle, the shared-memory descriptors wgmma reads that tile
// through, the address wgmma computes from a descriptor (the PTX ISA's canonical layouts, as the
// tests model them), and which elements of S and O each thread of a warpgroup holds.
// Notation: a warpgroup is 4 warps (128 threads); w = warp in it, g = lane / 4, t = lane % 4.
#pragma once

#include <cstdint>

#include "fa/params.hpp"

namespace lesson13 {

// This file's TODOs you have not written yet (kernel.cu checks them first): delete an entry when
// its code is written.
inline const fa::TodoList kWgmmaTodosLeft = {
    "TODO(1) in wgmma.hpp: the address with bits 4-6 XORed with bits 7-9.",
    "TODO(2) in wgmma.hpp: the start of step kk: block (16 kk) / 64 of the tile, byte 32 (kk % 4) of its rows.",
    "TODO(3) in wgmma.hpp: the start of step kk (row 16 kk), LBO = the block stride rows * 128, SBO = 1024.",
    "TODO(4) in wgmma.hpp: row 16 w + g + 8 ((i / 2) % 2), column 8 (i / 4) + 2 t + i % 2.",
};

// ---- Tiles in shared memory, as TMA writes them (CU_TENSOR_MAP_SWIZZLE_128B) -----------------
// A tile of `rows` x D 16-bit values is stored as D / 64 column blocks; block c holds columns
// 64 c .. 64 c + 63 as `rows` rows of 128 bytes. With the 128-byte swizzle, the 16-byte chunk j
// (values 8 j .. 8 j + 7) of row r sits at chunk j ^ (r % 8) of that row: bits 4-6 of the byte
// address are XORed with bits 7-9. Each block starts on a 1024-byte boundary (rows % 8 == 0), so
// bits 7-9 of the address are r % 8.
constexpr int kBlockCols = 64;     // 16-bit values per 128-byte row of a block
constexpr int kSwizzleBytes = 1024;  // the pattern repeats every 8 rows of 128 bytes

// The swizzle as the hardware applies it to a byte address (relative to a 1024-byte boundary).
__host__ __device__ constexpr uint32_t swizzle128(uint32_t addr) {
  // TODO(1): the address with bits 4-6 XORed with bits 7-9.
  return addr;
}

// Byte offset of element (r, c) of a rows x D tile.
__host__ __device__ constexpr uint32_t tile_offset(int rows, int r, int c) {
  const uint32_t linear = uint32_t(c / kBlockCols) * rows * 128 + uint32_t(r) * 128 + uint32_t(c % kBlockCols) * 2;
  return swizzle128(linear);
}

// ---- wgmma's shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format") ------------
// bits  0-13  start address >> 4          bits 32-45  stride byte offset (SBO) >> 4
// bits 16-29  leading byte offset (LBO) >> 4   bits 62-63  swizzle: 1 = 128-byte
constexpr uint64_t kSwizzle128Mode = 1;
__host__ __device__ constexpr uint64_t make_desc(uint32_t smem_addr, uint32_t lbo, uint32_t sbo) {
  return uint64_t((smem_addr & 0x3FFFF) >> 4) | (uint64_t((lbo & 0x3FFFF) >> 4) << 16) |
         (uint64_t((sbo & 0x3FFFF) >> 4) << 32) | (kSwizzle128Mode << 62);
}
struct DescFields {
  uint32_t start, lbo, sbo, swizzle;
};
__host__ __device__ constexpr DescFields desc_fields(uint64_t d) {
  return {uint32_t(d & 0x3FFF) << 4, uint32_t((d >> 16) & 0x3FFF) << 4, uint32_t((d >> 32) & 0x3FFF) << 4,
          uint32_t(d >> 62)};
}

// K-major operand (Q as A and K as B of S = Q K^T: the k index, the head dimension, is the
// contiguous one). One wgmma reads k = 16 kk .. 16 kk + 15: inside one 128-byte row of block
// (16 kk) / 64, at byte 32 (kk % 4) of it. Rows advance by 128 bytes, and 8-row groups by SBO =
// 1024; LBO is unused for this layout (the 16 k values never leave the row), by convention 16.
__host__ __device__ constexpr uint64_t kmajor_desc(uint32_t tile_addr, int rows, int kk) {
  // TODO(2): the start of step kk: block (16 kk) / 64 of the tile, byte 32 (kk % 4) of its rows.
  return make_desc(tile_addr, 16, 1024);
}

// MN-major operand (V as B of O = P V, read transposed: the n index, the head dimension, is the
// contiguous one; k is the key). One wgmma reads keys 16 kk .. 16 kk + 15 (rows of V) and every
// n: 64 n values per block, blocks LBO = rows * 128 bytes apart, 8-key groups SBO = 1024 apart.
__host__ __device__ constexpr uint64_t mnmajor_desc(uint32_t tile_addr, int rows, int kk) {
  // TODO(3): the start of step kk (row 16 kk), LBO = the block stride rows * 128, SBO = 1024.
  return make_desc(tile_addr, 16, 1024);
}

// The byte address wgmma reads for element (mn, k) of one k16 step through a descriptor, as the
// PTX ISA's canonical 128-byte-swizzle layouts define it (what the CPU tests model; the GPU suite
// is the judge). K-major: (mn, k), mn < 64 or N, k < 16. MN-major: (k, n), k < 16.
__host__ __device__ constexpr uint32_t kmajor_read(uint64_t desc, int mn, int k) {
  const DescFields f = desc_fields(desc);
  return swizzle128(f.start + uint32_t(mn / 8) * f.sbo + uint32_t(mn % 8) * 128 + uint32_t(k) * 2);
}
__host__ __device__ constexpr uint32_t mnmajor_read(uint64_t desc, int k, int n) {
  const DescFields f = desc_fields(desc);
  return swizzle128(f.start + uint32_t(n / kBlockCols) * f.lbo + uint32_t(k / 8) * f.sbo + uint32_t(k % 8) * 128 +
                    uint32_t(n % kBlockCols) * 2);
}

// ---- Registers ----------------------------------------------------------------------------------
struct RowCol {
  int row, col;
};

// The fp32 accumulator of wgmma m64nNk16: thread `tid` (0..127) of the warpgroup holds N / 2
// floats; float i is row 16 w + g + 8 ((i / 2) % 2), column 8 (i / 4) + 2 t + i % 2 (the
// mma.sync C layout of lesson 07, one 8-column block after another).
__host__ __device__ constexpr RowCol acc_element(int tid, int i) {
  // TODO(4): row 16 w + g + 8 ((i / 2) % 2), column 8 (i / 4) + 2 t + i % 2.
  return {0, 0};
}

// The A operand from registers (wgmma ...k16 with A in registers): 4 registers of two 16-bit
// values, register r value h: row 16 w + g + 8 (r % 2), column 2 t + h + 8 (r / 2) (lesson 07's
// mma_a, per warp). P's accumulator floats 8 kk .. 8 kk + 7 are exactly A's registers 0-3 of step kk
// in order, so P goes from S's registers to O's A operand without moving.
__host__ __device__ constexpr RowCol a_element(int tid, int r, int h) {
  const int w = tid / 32, lane = tid % 32;
  return {16 * w + lane / 4 + 8 * (r % 2), 2 * (lane % 4) + h + 8 * (r / 2)};
}

}  // namespace lesson13
