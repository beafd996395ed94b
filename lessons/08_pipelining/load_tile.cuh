// Your copy of this lesson, generated from solutions/08_pipelining/load_tile.cuh by fa-skeleton.
// Lesson 08's cp.async copy of a tile into swizzled shared memory: its attention kernel copies
// every tile with it, and so do lessons 11 and 12's kernels (they include this file).
#pragma once

#include <cstdint>
#include <string>

#include "fa/device.cuh"
#include "fa/mma.cuh"  // smem_addr, cp_async_16
#include "fa/params.hpp"
#include "tiles.hpp"

namespace lesson08 {

// Each entry is a TODO of this file you have not written yet; the tests stop at the first one
// with "lesson 08 not implemented yet: <it>" (and lessons 09, 11 and 12's, which copy with it).
// Delete an entry when you have written its code.
inline const fa::TodoList kLoadTileTodosLeft = {
    "TODO(2) in load_tile.cuh: the copy: thread x copies chunk c = x % kChunks of rows r = x / kChunks + i kStepRows",
};

// Starts the copy of rows [row0, row0 + kTileRows) of a (rows x D) matrix into a swizzled shared
// tile: 16 bytes per thread per step. Rows at or past `nrows` are zero-filled (a P of 0 times a
// garbage V could still be NaN).
template <int kThreads, int kTileRows, int D, class T>
__device__ __forceinline__ void load_tile(T* tile, const T* base, int64_t row_stride, int row0, int nrows) {
  constexpr int kChunks = D / 8;                // 16-byte chunks per row
  constexpr int kStepRows = kThreads / kChunks;  // rows the block copies per step (a multiple of 8)
  static_assert(kStepRows % 8 == 0 && kTileRows % kStepRows == 0, "whole steps of whole swizzle groups");
  // TODO(2): the copy: thread x copies chunk c = x % kChunks of rows r = x / kChunks + i kStepRows
  //   (i = 0 .. kTileRows / kStepRows - 1): source base + (row0 + r) * row_stride + 8 c (any
  //   valid address when row0 + r >= nrows), target tile + tile_offset(r, 8 c, D), with
  //   fa::cp_async_16(fa::smem_addr(target), source, row0 + r < nrows).
}

// Before any launch of a kernel that copies with load_tile: lesson 08's swizzle (tiles.hpp, TODO 1)
// and the copy (TODO 2) must be written, or the call stops with "lesson <who> not implemented yet".
inline void throw_if_copy_todos_left(const std::string& who) {
  fa::throw_if_todos_left(who.c_str(), kTilesTodosLeft);
  fa::throw_if_todos_left(who.c_str(), kLoadTileTodosLeft);
}

}  // namespace lesson08
