#include <cmath>
#include <sstream>

#include "fa/compare.hpp"

namespace fa {

Tolerance output_tolerance(DType t) {
  // Both storage types round the output once (half an ulp: 2^-11 relative in fp16, 2^-9 in bf16)
  // and, from lesson 07 on, round P to 16 bits before PV, which moves O by at most
  // u * sum_j P_ij |v_j|: another half ulp relative to the values being averaged. rtol covers the
  // two roundings (2u); atol covers the P rounding where O cancels to near zero (for randn V the
  // sum is ~1 and u * 1 is 5e-4 in fp16). fp16's atol is the common lab bar of 1e-3 max abs.
  if (t == DType::kF16) return {1e-3, 0x1p-10, "fp16: output rounding + P rounding, 2 * 2^-11 relative; atol 1e-3 (the usual lab bar)"};
  return {8e-3, 0x1p-7, "bf16: output rounding + P rounding, 2 * 2^-8 relative; atol 8e-3 (8x fp16, bf16 has 3 fewer bits)"};
}

Tolerance lse_tolerance() {
  // fp32 throughout: scores summed over head_dim products and exp/log in fp32 give errors of a few
  // ulps of the largest logit (fp32 ulp is 1.2e-7 relative); 1e-5 relative leaves room for exp2
  // folding and fast-math intrinsics, 1e-4 absolute for LSE near 0.
  return {1e-4, 1e-5, "fp32 LSE: a few fp32 ulps of the logits"};
}

// Gradients: sums of many terms that can cancel (dQ of a row whose keys are all equal is exactly
// 0), so an error bound is relative to the size of the terms, not of the result. A backward kernel
// rounds P to 16 bits before dV = P^T dO, and dS (whose terms dP and D come from the stored,
// rounded O) before dK = dS^T Q and dQ = dS K: each term of those sums moves by at most about 2u
// of its size (u = 2^-11 fp16, 2^-8 bf16). So element e may be off by 4u * mag_e (2x margin), mag
// being the same sum over |terms| (tests/gradients.cpp computes it), plus 2u |ref| for the output's
// own rounding.
double gradient_unit(DType t) { return t == DType::kF16 ? 0x1p-11 : 0x1p-8; }

Tolerance gradient_tolerance(DType t, double ref_max_abs) {
  const double u = gradient_unit(t);
  return {4 * u * ref_max_abs, 2 * u,
          t == DType::kF16 ? "fp16 gradient: P and dS rounded to 16 bits + output rounding; atol 4u max|ref|, rtol 2u (u = 2^-11)"
                           : "bf16 gradient: P and dS rounded to 16 bits + output rounding; atol 4u max|ref|, rtol 2u (u = 2^-8)"};
}

Tolerance gradient_terms_tolerance(DType t) {
  return {t == DType::kF16 ? 0x1p-25 : 0.0, 2 * gradient_unit(t),
          t == DType::kF16 ? "fp16 gradient: atol_e = 4u mag_e (the sizes of its terms) + 2^-25, rtol 2u, u = 2^-11"
                           : "bf16 gradient: atol_e = 4u mag_e (the sizes of its terms), rtol 2u, u = 2^-8"};
}

std::vector<double> terms_atol(DType t, const std::vector<double>& mag) {
  std::vector<double> atol(mag.size());
  for (size_t i = 0; i < mag.size(); ++i) atol[i] = 4 * gradient_unit(t) * mag[i];
  return atol;
}

CompareReport compare(const std::string& what, const std::vector<double>& got, const std::vector<double>& want,
                      const Tolerance& tol, const std::vector<int>& dims, const std::vector<std::string>& dim_names,
                      const std::vector<double>* atol_each) {
  CompareReport r;
  r.count = want.size();
  double worst_ratio = -1;
  if (got.size() != want.size()) {
    r.ok = false;
    r.text = what + " MISMATCH: got " + std::to_string(got.size()) + " elements, want " + std::to_string(want.size());
    return r;
  }
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = got[i], w = want[i];
    double err, allowed = tol.atol + (atol_each ? (*atol_each)[i] : 0.0) + tol.rtol * std::fabs(w), ratio;
    bool bad;
    if (std::isnan(g)) {
      ++r.n_nan;
      bad = true;
      err = INFINITY;
      ratio = INFINITY;
    } else if (std::isinf(g) || std::isinf(w)) {
      if (std::isinf(g)) ++r.n_inf;
      bad = g != w;
      err = bad ? INFINITY : 0.0;
      ratio = bad ? INFINITY : 0.0;
    } else {
      err = std::fabs(g - w);
      bad = err > allowed;
      ratio = err / allowed;
      if (err > r.max_abs_err) r.max_abs_err = err;
    }
    if (bad) ++r.n_bad;
    if (ratio > worst_ratio) {
      worst_ratio = ratio;
      r.worst = i;
      r.worst_got = g;
      r.worst_want = w;
      r.worst_err = err;
      r.worst_allowed = allowed;
    }
  }
  r.ok = r.n_bad == 0;

  std::ostringstream idx;  // the flat index in the tensor's own dimensions, outermost first
  {
    std::vector<size_t> coord(dims.size());
    size_t rest = r.worst;
    for (size_t d = dims.size(); d-- > 0;) {
      coord[d] = dims[d] > 0 ? rest % dims[d] : 0;
      rest = dims[d] > 0 ? rest / dims[d] : rest;
    }
    idx << "(";
    for (size_t d = 0; d < dims.size(); ++d)
      idx << (d ? ", " : "") << (d < dim_names.size() ? dim_names[d] : "?") << "=" << coord[d];
    idx << ")";
  }
  std::ostringstream os;
  os.precision(6);
  if (r.ok) {
    os << what << " within tolerance: max abs error " << r.max_abs_err << " over " << r.count << " elements";
  } else {
    os << what << " MISMATCH: " << r.n_bad << " of " << r.count << " elements outside |got - want| <= "
       << (atol_each ? "atol_e" : std::to_string(tol.atol)) << " + " << tol.rtol << " * |want| [" << tol.reason << "]; "
       << r.n_nan << " NaN, " << r.n_inf
       << " inf in the output\n"
       << "    worst at " << idx.str() << ": got " << r.worst_got << ", want " << r.worst_want;
    if (std::isinf(r.worst_want) && !std::isinf(r.worst_got))
      os << " (no key is visible to this row, so it must be +inf; yours saw some)";
    else if (std::isinf(r.worst_got) && !std::isinf(r.worst_want))
      os << " (yours is infinite: the row saw no key, or a sum overflowed)";
    else if (!std::isnan(r.worst_got))
      os << ", error " << r.worst_err << " (allowed " << r.worst_allowed << ")";
    if (r.n_nan == r.count) os << "\n    every element is NaN: the output was never written (it is poisoned with NaN before each run)";
  }
  r.text = os.str();
  std::ostringstream brief;
  brief.precision(4);
  if (r.ok)
    brief << what << " ok";
  else
    brief << what << " " << r.n_bad << " of " << r.count << " wrong (" << r.n_nan << " NaN), worst at " << idx.str() << ": got "
          << r.worst_got << ", want " << r.worst_want;
  r.brief = brief.str();
  return r;
}

}  // namespace fa
