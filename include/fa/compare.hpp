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

struct CompareReport {
  bool ok = true;
  size_t count = 0, n_bad = 0, n_nan = 0, n_inf = 0;
  size_t worst = 0;  // flat index of the worst element
  double worst_got = 0, worst_want = 0, worst_err = 0, worst_allowed = 0;
  double max_abs_err = 0;  // over finite elements
  std::string text;        // a full, human-readable verdict
};

// `dims` and `dim_names` (outermost first) turn the flat index into "(b=0, h=1, i=127, d=3)".
CompareReport compare(const std::string& what, const std::vector<double>& got,
                      const std::vector<double>& want, const Tolerance& tol,
                      const std::vector<int>& dims, const std::vector<std::string>& dim_names);

}  // namespace fa
