// Where an element of a test tensor lives, in the reference's layouts (reference/reference.hpp):
// shared by the suites' checks (run.hpp, verdict.cpp, gradients.cpp) and their hints (hints.cpp).
#pragma once

#include <cstddef>
#include <vector>

#include "reference.hpp"

namespace fa::test {

inline size_t at(int b, int h, int s, int d, int heads, int seqlen, int dim) {
  return ((size_t(b) * heads + h) * seqlen + s) * dim + d;
}

// Element (sequence b, head h, row s, column x) of a q-side tensor (q, o, dO, dQ) or a k-side one
// (k, v, dK, dV), dense (batch, heads, seqlen, dim) or varlen (total, heads, dim).
struct Layout {
  const Problem& p;
  bool q_side;
  size_t at(int b, int h, int s, int x) const {
    const int heads = q_side ? p.heads_q : p.heads_kv;
    if (p.varlen()) return (size_t((q_side ? p.cu_seqlens_q : p.cu_seqlens_k)[b] + s) * heads + h) * p.head_dim + x;
    return fa::test::at(b, h, s, x, heads, q_side ? p.seqlen_q : p.seqlen_k, p.head_dim);
  }
};

// The LSE (q side), g and dg (k side): (batch, heads_q, seqlen) dense, (heads_q, total) varlen.
inline size_t vec_at(const Problem& p, bool q_side, int b, int h, int s) {
  if (p.varlen()) return size_t(h) * (q_side ? p.total_q() : p.total_k()) + (q_side ? p.cu_seqlens_q : p.cu_seqlens_k)[b] + s;
  return (size_t(b) * p.heads_q + h) * (q_side ? p.seqlen_q : p.seqlen_k) + s;
}

// Rows 0..n-1 of head h of sequence b, contiguous (n x dim).
inline std::vector<double> head_rows(const std::vector<double>& t, const Layout& L, int b, int h, int n) {
  std::vector<double> out(size_t(n) * L.p.head_dim);
  for (int s = 0; s < n; ++s)
    for (int x = 0; x < L.p.head_dim; ++x) out[size_t(s) * L.p.head_dim + x] = t[L.at(b, h, s, x)];
  return out;
}

}  // namespace fa::test
