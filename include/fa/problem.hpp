// One attention problem: its shape, storage type, mask, scale, variable lengths, RoPE and gate.
// The course's one description of a problem, without a pointer in it:
//   - the fp64 reference computes it (reference/reference.hpp; it reads the shape, the mask, the
//     scale, the lengths, RoPE and the gate, and ignores the storage type and the layout);
//   - a suite's case is one (tests/support.hpp: Case adds the inputs' pattern, the rows compared
//     and the lesson's variant);
//   - fa-bench times one;
//   - fa::params_for (params.hpp) makes a kernel call's AttnParams of it (the shapes, the scale and
//     the strides; the caller adds the pointers).
// Host C++ only, no CUDA: the reference includes it.
#pragma once

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

namespace fa {

enum class DType { kF16, kBF16 };
inline const char* name(DType t) { return t == DType::kF16 ? "fp16" : "bf16"; }
inline int bytes_of(DType) { return 2; }  // both storage types are 16-bit

// The RoPE base of the course's tables (fa::rope_tables) and of its problems.
constexpr double kRopeBase = 10000.0;

struct Problem {
  int batch = 1, heads_q = 1, heads_kv = 1, seqlen_q = 1, seqlen_k = 1, head_dim = 64;
  DType dtype = DType::kF16;  // how Q, K, V, O, dO and the gradients are stored (the reference computes in fp64)
  bool causal = false;        // bottom-right aligned: row i sees key j iff j <= i + seqlen_k - seqlen_q
  double scale = 0;           // 0 means 1/sqrt(head_dim)
  // Varlen when not empty: batch + 1 prefix sums each (set_lengths fills them); the tensors are
  // then packed (total, heads, head_dim), and seqlen_q/k hold the longest sequence.
  std::vector<int> cu_seqlens_q, cu_seqlens_k;
  double rope_base = 0;  // > 0: rotate q and k with RoPE (half-split pairs, this base) before QK^T
  bool gate = false;     // add G_i - G_j, G the inclusive cumsum of the log-decay gate g (causal only)
  bool bshd = false;     // the kernel's tensors are (batch, seqlen, heads, head_dim), through strides (dense only)

  bool varlen() const { return !cu_seqlens_q.empty(); }
  bool rope() const { return rope_base > 0; }
  double softmax_scale() const { return scale > 0 ? scale : 1.0 / std::sqrt(double(head_dim)); }
  int sequences() const { return varlen() ? static_cast<int>(cu_seqlens_q.size()) - 1 : batch; }
  int len_q(int b) const { return varlen() ? cu_seqlens_q[b + 1] - cu_seqlens_q[b] : seqlen_q; }
  int len_k(int b) const { return varlen() ? cu_seqlens_k[b + 1] - cu_seqlens_k[b] : seqlen_k; }
  int total_q() const { return varlen() ? cu_seqlens_q.back() : batch * seqlen_q; }
  int total_k() const { return varlen() ? cu_seqlens_k.back() : batch * seqlen_k; }

  // Makes this a varlen problem of these lengths (one per sequence, 0: an empty sequence): the
  // prefix sums, batch = the number of sequences, seqlen_q and seqlen_k the longest (at least 1).
  void set_lengths(const std::vector<int>& q, const std::vector<int>& k) {
    if (q.size() != k.size() || q.empty()) throw std::invalid_argument("set_lengths: one query and one key length per sequence");
    cu_seqlens_q.assign(1, 0);
    cu_seqlens_k.assign(1, 0);
    seqlen_q = seqlen_k = 1;
    for (size_t b = 0; b < q.size(); ++b) {
      cu_seqlens_q.push_back(cu_seqlens_q.back() + q[b]);
      cu_seqlens_k.push_back(cu_seqlens_k.back() + k[b]);
      seqlen_q = std::max(seqlen_q, q[b]);
      seqlen_k = std::max(seqlen_k, k[b]);
    }
    batch = static_cast<int>(q.size());
  }

  // Throws std::invalid_argument for shapes the conventions do not define.
  void check() const {
    auto bad = [](const std::string& m) { throw std::invalid_argument("problem: " + m); };
    if (heads_q < 1 || heads_kv < 1 || head_dim < 1) bad("heads and head_dim must be >= 1");
    if (heads_q % heads_kv != 0) bad("heads_q must be a multiple of heads_kv");
    if (gate && !causal) bad("the decay gate is defined for causal attention only");
    if (rope() && head_dim % 2 != 0) bad("RoPE needs an even head_dim");
    if (varlen()) {
      if (cu_seqlens_k.size() != cu_seqlens_q.size() || cu_seqlens_q.size() < 2)
        bad("cu_seqlens_q and cu_seqlens_k need batch + 1 entries each");
      if (cu_seqlens_q[0] != 0 || cu_seqlens_k[0] != 0) bad("cu_seqlens must start at 0");
      for (int b = 0; b < sequences(); ++b)
        if (len_q(b) < 0 || len_k(b) < 0) bad("cu_seqlens must be non-decreasing");
    } else if (batch < 1 || seqlen_q < 1 || seqlen_k < 1) {
      bad("batch and sequence lengths must be >= 1");
    }
    if (rope())
      for (int b = 0; b < sequences(); ++b)
        if (len_q(b) > len_k(b)) bad("RoPE needs seqlen_q <= seqlen_k (query positions are i + seqlen_k - seqlen_q)");
  }
};

}  // namespace fa
