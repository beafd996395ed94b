// The one tolerance and comparison helper. An element passes when
//     |got - want| <= atol + rtol * |want|,
// got is never NaN, and an infinite want (LSE of a fully masked row) is matched exactly.
// The report names the worst element (by how far past its allowance), its index in the
// tensor's dimensions, and the counts of failing, NaN and inf elements.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "fa/params.hpp"

namespace fa {

struct Tolerance {
  double atol = 0, rtol = 0;
  const char* reason = "";
};

// O, dQ, dK, dV stored in `t`, compared with the fp64 reference run on the same rounded inputs.
Tolerance output_tolerance(DType t);
// LSE: fp32 by definition, so the tolerance is fp32's, not the storage type's.
Tolerance lse_tolerance();
// u, the unit roundoff of a gradient's storage type: 2^-11 (fp16), 2^-8 (bf16). The backward
// suite allows element e an error of 4u mag_e + 2u |ref_e|, mag_e being the sum of the sizes of the
// terms that make it (runtime/compare.cpp says why).
double gradient_unit(DType t);
// fa-bench's simpler check of sampled rows of randn problems (no cancellation there): atol
// 4u * the largest reference value `ref_max_abs`, rtol 2u.
Tolerance gradient_tolerance(DType t, double ref_max_abs);
// The backward suite's elementwise rule, for gradients whose terms may cancel (dg, or dQ of equal
// keys): element e may be off by 4u mag_e + 2u |ref_e|, mag_e the sum of the sizes of its terms,
// plus 2^-25 in fp16 (half a subnormal step of the output's rounding). The tolerance holds the
// fixed part; terms_atol(t, mag) gives the 4u mag_e to pass to compare() as atol_each.
Tolerance gradient_terms_tolerance(DType t);
std::vector<double> terms_atol(DType t, const std::vector<double>& mag);
// FlashAttention-2's rule for gradients: the kernel's max abs error at most this many times the
// max abs error of a naive computation at the storage precision (tests/gradients.cpp).
constexpr double kNaiveErrorFactor = 3.0;

struct CompareReport {
  bool ok = true;
  size_t count = 0, n_bad = 0, n_nan = 0, n_inf = 0;
  size_t worst = 0;  // flat index of the worst element
  double worst_got = 0, worst_want = 0, worst_err = 0, worst_allowed = 0;
  double max_abs_err = 0;  // over finite elements
  std::string text;        // a full, human-readable verdict
  std::string brief;       // the verdict in a few words, for a one-line summary
};

// `dims` and `dim_names` (outermost first) turn the flat index into "(b=0, h=1, i=127, d=3)".
// `atol_each`, if given, adds a per-element atol (the gradients' 4u mag_e).
CompareReport compare(const std::string& what, const std::vector<double>& got,
                      const std::vector<double>& want, const Tolerance& tol,
                      const std::vector<int>& dims, const std::vector<std::string>& dim_names,
                      const std::vector<double>* atol_each = nullptr);

}  // namespace fa
