// The RoPE tables the kernels read (lesson 09): cos and sin of position * theta_i, with
// theta_i = base^(-2i/d), for positions 0 .. positions - 1 and pairs i = 0 .. d/2 - 1, row-major
// (positions, d/2). Computed in fp64 and stored in fp32 (docs/conventions.md, RoPE): an fp32
// sincos of an angle near 16k radians is already ~1e-3 off, rounding the fp64 value costs ~6e-8.
#pragma once

#include <vector>

#include "fa/params.hpp"  // DType

namespace fa {

struct RopeTables {
  int positions = 0, half = 0;
  std::vector<float> cos, sin;
};
RopeTables rope_tables(int positions, int head_dim, double base = 10000.0);

// What a kernel's tensor cores multiply after RoPE, computed on the host for the checks (tests,
// fa-bench): rows of x (rows x head_dim, row r at position r % seqlen + first_position) turned
// by the course's definition of the rotation, bit for bit (lesson 09's rope.hpp, rotate_pairs:
// fp32 with these tables, x2 sin rounded, then one fused multiply-add), then rounded to `t`.
void rope_rotate_rounded(std::vector<double>& x, int head_dim, int seqlen, int first_position, const RopeTables& tables,
                         DType t);

}  // namespace fa
