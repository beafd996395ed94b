// Host-side access to one head of a 16-bit tensor described by strides: the CPU lessons and CPU
// models read their inputs and write their outputs through these.
#pragma once

#include <vector>

#include "fa/params.hpp"

namespace fa {

// Head (b, h) of a (batch, heads, rows, dim) tensor as row-major fp32 (rows x dim). fp16 and bf16
// values are exact in fp32.
std::vector<float> read_head(const void* base, const Strides& s, DType t, int b, int h, int rows, int dim);
// Rounds x (rows x dim, row-major) to `t` and writes it to head (b, h).
void write_head(const std::vector<float>& x, void* base, const Strides& s, DType t, int b, int h, int rows, int dim);
// The LSE of (b, h), row i: index into the (batch, heads_q, seqlen_q) LSE tensor.
inline size_t lse_index(const AttnParams& p, int b, int h, int i) {
  return (static_cast<size_t>(b) * p.heads_q + h) * p.seqlen_q + i;
}

}  // namespace fa
