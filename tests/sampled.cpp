// The reference comparisons the suites and fa-bench share (tests/support.hpp): a forward's O and
// LSE, everywhere or at sampled rows, and a large backward's gradients at sampled rows.
#include <algorithm>
#include <cmath>
#include <string>

#include "support.hpp"

namespace fa::test {

ForwardCheck compare_forward(const Problem& prob, const ref::Inputs& in, const std::vector<int>* rows, const std::vector<double>& got_o,
                             const std::vector<double>& got_lse, const std::vector<int>& o_dims, const std::vector<std::string>& o_names,
                             const std::vector<int>& lse_dims, const std::vector<std::string>& lse_names) {
  ForwardCheck c;
  c.want = ref::forward(prob, in, rows);
  c.o = compare("O", got_o, c.want.o, output_tolerance(prob.dtype), o_dims, o_names);
  c.lse = compare("LSE", got_lse, c.want.lse, lse_tolerance(), lse_dims, lse_names);
  return c;
}

std::string compare_sampled_gradients(const Problem& one, const ref::SampledGradients& got, const ref::SampledGradients& want,
                                      int q_rows, int k_rows, double* max_abs_err) {
  const int D = one.head_dim, len = one.seqlen_k;
  std::string bad;
  // dQ and dK also cancel inside dS_ij = P_ij (dP_ij - D_i): their fp32 rounding of dP_ij and D_i
  // (dot products of D terms: at most D 2^-24 of the sizes of their terms each) is not relative to
  // max|want|, which is 0 where every row sees one key (P = 1, dP = D exactly). So an element may
  // also be off by 2 D 2^-24 cancel_e (want.dq_cancel, want.dk_cancel), plus 2^-25 in fp16 (the
  // rounding of a subnormal result), where that is more.
  auto check = [&](const char* name, const std::vector<double>& g, const std::vector<double>& w, const std::vector<double>& cancel,
                   int n) {
    double scale = 0;
    for (double e : w) scale = std::max(scale, std::fabs(e));
    const Tolerance tol = gradient_tolerance(one.dtype, scale);
    std::vector<double> floor;
    if (!cancel.empty()) {
      floor.resize(cancel.size());
      for (size_t e = 0; e < cancel.size(); ++e)
        floor[e] = std::max(0.0, 2 * D * 0x1p-24 * cancel[e] + (one.dtype == DType::kF16 ? 0x1p-25 : 0.0) - tol.atol);
    }
    const CompareReport rep = compare(name, g, w, tol, {n, D}, {"sampled row", "d"}, floor.empty() ? nullptr : &floor);
    *max_abs_err = std::max(*max_abs_err, rep.max_abs_err);
    if (!rep.ok) bad += rep.text + " ";
  };
  check("dQ", got.dq, want.dq, want.dq_cancel, q_rows);
  check("dK", got.dk, want.dk, want.dk_cancel, k_rows);
  check("dV", got.dv, want.dv, {}, k_rows);
  const int dg_last = static_cast<int>(got.dg.size());
  if (dg_last > 0) {
    // O and the LSE are the kernel's own, so its dS_ij differ from the reference's by fp32 rounding
    // and at most their rounding to 16 bits: u |dS_ij|, or up to 2^-25 for a dS that is subnormal
    // in fp16. So dg_t may be off by 4u x (the sum of |dS_ij| over its terms: dg_terms) + 2^-25 per
    // term in fp16, and 2u |dg_t|. Its terms: every visible key of the rows at positions >= t, and
    // every visible row of the keys >= t (seqlen_q = seqlen_k: row i sees i + 1 keys).
    std::vector<double> atol = terms_atol(one.dtype, want.dg_terms);
    if (one.dtype == DType::kF16)
      for (int e = 0; e < dg_last; ++e) {
        const double t = len - dg_last + e, m = len - t;  // positions t .. len - 1
        atol[e] += 0x1p-25 * (m * (t + 1 + len) / 2 + m * (m + 1) / 2);
      }
    const CompareReport rep =
        compare("dg", got.dg, want.dg, gradient_terms_tolerance(one.dtype), {dg_last}, {"key - " + std::to_string(len - dg_last)}, &atol);
    *max_abs_err = std::max(*max_abs_err, rep.max_abs_err);
    if (!rep.ok) bad += rep.text + " ";
  }
  return bad;
}

}  // namespace fa::test
