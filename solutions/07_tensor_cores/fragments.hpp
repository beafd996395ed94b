// Lesson 07's layouts: which (row, col) of a tile each lane holds in the registers of
// mma.sync.m16n8k16 and which row address it gives ldmatrix. Plain functions: the CPU tests
// (tests/lesson07_test.cpp) check them against the PTX ISA's rules and against each other, and
// the kernels use them. Notation: g = lane / 4 (the "group"), t = lane % 4 (the thread in it).
#pragma once

#include "fa/params.hpp"

namespace lesson07 {

// This file's TODOs you have not written yet (kernel.cu checks them first): delete an entry when
// its code is written.
inline const fa::TodoList kFragmentsTodosLeft = {
    // @todos-left
};

struct RowCol {
  int row, col;
};

// A (16 x 16, row-major): register r = 0..3 of a lane holds two values, h = 0 (low 16 bits) and
// h = 1 (high). Registers 0 and 2 are rows g, 1 and 3 rows g + 8; registers 0 and 1 are columns
// 2t + h, registers 2 and 3 the same columns + 8.
__host__ __device__ constexpr RowCol mma_a(int lane, int r, int h) {
  // TODO(1): mma_a: row g + 8 (r % 2), column 2 t + h + 8 (r / 2).
  // BEGIN SOLUTION
  return {lane / 4 + 8 * (r % 2), 2 * (lane % 4) + h + 8 * (r / 2)};
  // END SOLUTION
  // BEGIN SKELETON
  // return {0, 0};
  // END SKELETON
}

// B (16 x 8, "col": stored as its transpose, one column of B per row): register r = 0..1, value
// h; row (the k index) 2t + h + 8r, column (the n index) g.
__host__ __device__ constexpr RowCol mma_b(int lane, int r, int h) {
  // TODO(2): mma_b: row 2 t + h + 8 r, column g.
  // BEGIN SOLUTION
  return {2 * (lane % 4) + h + 8 * r, lane / 4};
  // END SOLUTION
  // BEGIN SKELETON
  // return {0, 0};
  // END SKELETON
}

// C and D (16 x 8, fp32): float i = 0..3; row g (i < 2) or g + 8, column 2t + i % 2.
__host__ __device__ constexpr RowCol mma_c(int lane, int i) {
  // TODO(3): mma_c: row g + 8 (i / 2), column 2 t + i % 2.
  // BEGIN SOLUTION
  return {lane / 4 + 8 * (i / 2), 2 * (lane % 4) + i % 2};
  // END SOLUTION
  // BEGIN SKELETON
  // return {0, 0};
  // END SKELETON
}

// ldmatrix.x4 reads four 8 x 8 matrices; lane l gives the address of row l % 8 of matrix l / 8.
// These say which row and starting column of a 16 x 16 tile lane l points at, so that register r
// afterwards is register r of the fragment we want.
//   A operand (Q, or P in shared memory), 16 rows x 16 columns, row-major: matrices 0..3 are
//   (rows 0-7, cols 0-7), (rows 8-15, cols 0-7), (rows 0-7, cols 8-15), (rows 8-15, cols 8-15).
__host__ __device__ constexpr RowCol ldmatrix_a(int lane) {
  // TODO(4): ldmatrix_a: row lane % 16, column 8 (lane / 16).
  // BEGIN SOLUTION
  return {lane % 16, 8 * (lane / 16)};
  // END SOLUTION
  // BEGIN SKELETON
  // return {0, 0};
  // END SKELETON
}
//   B operands of two n8 tiles from a K tile stored [key][dim] (16 keys x 16 dims): registers 0, 1
//   are B's registers for keys 0-7, registers 2, 3 for keys 8-15; dims 0-7 in registers 0 and 2.
__host__ __device__ constexpr RowCol ldmatrix_b(int lane) {
  // TODO(5): ldmatrix_b: row (key) lane % 8 + 8 (lane / 16), column (dim) 8 ((lane / 8) % 2).
  // BEGIN SOLUTION
  return {lane % 8 + 8 * (lane / 16), 8 * ((lane / 8) % 2)};
  // END SOLUTION
  // BEGIN SKELETON
  // return {0, 0};
  // END SKELETON
}
//   B operands of two n8 tiles from a V tile stored [key][dim], read with .trans (16 keys x 16
//   dims): registers 0, 1 are B's registers for dims 0-7 (keys 0-7, then 8-15), 2, 3 for dims 8-15.
__host__ __device__ constexpr RowCol ldmatrix_b_trans(int lane) {
  // TODO(6): ldmatrix_b_trans: row (key) lane % 8 + 8 ((lane / 8) % 2), column (dim) 8 (lane / 16).
  // BEGIN SOLUTION
  return {lane % 8 + 8 * ((lane / 8) % 2), 8 * (lane / 16)};
  // END SOLUTION
  // BEGIN SKELETON
  // return {0, 0};
  // END SKELETON
}

}  // namespace lesson07
