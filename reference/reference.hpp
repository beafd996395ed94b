// The ground truth: attention in fp64 with Eigen, exactly per docs/conventions.md.
// Host C++ only; never include this from a .cu file (Eigen in nvcc costs warnings and host SIMD),
// and lesson libraries are linked without it (a student kernel cannot call the answer).
//
// Layouts (all contiguous, fp64 values of the already-rounded fp16/bf16 inputs):
//   dense:  q, o, dq: (batch, heads_q, seqlen_q, head_dim)   k, v, dk, dv: (batch, heads_kv, seqlen_k, head_dim)
//           lse: (batch, heads_q, seqlen_q)                   g, dg: (batch, heads_q, seqlen_k)
//   varlen: q: (total_q, heads_q, head_dim)  k, v: (total_k, heads_kv, head_dim)
//           lse: (heads_q, total_q)          g, dg: (heads_q, total_k)
#pragma once

#include <vector>

#include "fa/problem.hpp"  // fa::Problem: the problem computed

namespace fa::ref {

// The problem: fa::Problem (fa/problem.hpp); the reference ignores its dtype and bshd, and takes
// the inputs' values as given (already rounded to the storage type).

struct Inputs {
  std::vector<double> q, k, v;
  std::vector<double> g;  // only when Problem::gate
};

struct Forward {
  std::vector<double> o;    // the layout of q (only the sampled rows when rows were given)
  std::vector<double> lse;  // natural log; +inf for a row with no visible key (its O row is 0)
};

// `rows`, if given, limits the output to those query rows of every (sequence, head), in that
// order: o is then (batch, heads_q, rows.size(), head_dim) and lse (batch, heads_q, rows.size()).
// This is how large problems are validated (sampled rows). Dense problems only.
Forward forward(const Problem& p, const Inputs& in, const std::vector<int>* rows = nullptr);

struct Gradients {
  std::vector<double> dq, dk, dv;  // layouts of q, k, v
  std::vector<double> dg;          // layout of g, when Problem::gate
};
// Gradients of L = sum(dout * O) with respect to q, k, v and g.
Gradients backward(const Problem& p, const Inputs& in, const std::vector<double>& dout);

// Gradients of sampled rows of one dense head (batch = heads_q = heads_kv = 1, no RoPE) from the
// forward's saved outputs, the way a backward kernel uses them: P_ij = exp(s_ij - lse_i) and
// D_i = dout_i . o_i with the given o and lse. dq for query rows q_rows, dk and dv for key rows
// k_rows, (rows, head_dim) each. O(N head_dim) per row: fa-bench checks 16k-long problems with it.
// With Problem::gate, in.g is the head's g (seqlen_k values) and s_ij includes G_p(i) - G_j, and
// dg holds the gradient of g at the last `dg_last` key positions (ascending). Only the last ones
// are cheap: dg_t sums dS over the pairs whose query sits at a key position >= t or whose key is
// >= t, and under the causal mask all of them lie in the last dg_last query rows, so they cost
// O(dg_last N head_dim); a position in the middle would cost O(N^2 head_dim). dg cancels (the row
// sums of dS are about 0), so its rounding error scales with its terms, not with dg: dg_terms
// holds, for each position, the sum of |dS_ij| over the terms dg sums.
struct SampledGradients {
  std::vector<double> dq, dk, dv;
  // What dq and dk's fp32 rounding inside dS_ij = P_ij (dP_ij - D_i) is relative to: per element,
  // scale sum_j P_ij (sum_d |dO_id v_jd| + sum_d |dO_id O_id|) |k_jd| (dk: |q_id|, summed over i).
  std::vector<double> dq_cancel, dk_cancel;
  std::vector<double> dg, dg_terms;  // with the gate: dg_last positions each
};
SampledGradients backward_rows(const Problem& p, const Inputs& in, const std::vector<double>& dout,
                               const std::vector<double>& o, const std::vector<double>& lse,
                               const std::vector<int>& q_rows, const std::vector<int>& k_rows, int dg_last = 0);

// Is key j visible to query i? Bottom-right aligned: j <= i + (seqlen_k - seqlen_q).
inline bool visible(int i, int j, int seqlen_q, int seqlen_k) { return j <= i + (seqlen_k - seqlen_q); }

// RoPE tables in fp64: cos and sin of position * theta_i, theta_i = base^(-2i/d), for
// positions 0..positions-1 and i in 0..d/2-1; row-major (positions, d/2).
struct RopeTables {
  int positions = 0, half = 0;
  std::vector<double> cos, sin;
};
RopeTables rope_tables(int positions, int head_dim, double base = 10000.0);
// Rotates rows x (n, head_dim, row-major) at the given positions: pair (i, i + d/2) turns by
// position * theta_i. Positions may be negative (a rotation the other way).
void rope_rotate(std::vector<double>& x, int n, int head_dim, const std::vector<int>& positions, double base,
                 bool inverse = false);

// Number of visible (query, key) pairs, summed over sequences and heads: FLOPs are 4 * head_dim * this.
double visible_pairs(const Problem& p);

}  // namespace fa::ref
