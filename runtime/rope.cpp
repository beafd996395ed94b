#include "fa/rope.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

#include "fa/half.hpp"

namespace fa {

RopeTables rope_tables(int positions, int head_dim, double base) {
  if (positions < 1 || head_dim < 2 || head_dim % 2 != 0 || !(base > 1.0))
    throw std::invalid_argument("rope_tables: need positions >= 1, an even head_dim >= 2 and base > 1, got " +
                                std::to_string(positions) + ", " + std::to_string(head_dim) + ", " + std::to_string(base));
  RopeTables t;
  t.positions = positions;
  t.half = head_dim / 2;
  t.cos.resize(size_t(positions) * t.half);
  t.sin.resize(size_t(positions) * t.half);
  for (int i = 0; i < t.half; ++i) {
    const double theta = std::pow(base, -2.0 * i / head_dim);
    for (int pos = 0; pos < positions; ++pos) {
      const double angle = pos * theta;
      t.cos[size_t(pos) * t.half + i] = static_cast<float>(std::cos(angle));
      t.sin[size_t(pos) * t.half + i] = static_cast<float>(std::sin(angle));
    }
  }
  return t;
}



void rope_rotate_rounded(std::vector<double>& x, int head_dim, int seqlen, int first_position, const RopeTables& tables,
                         DType t) {
  const int half = head_dim / 2;
  if (half != tables.half || seqlen < 1 || first_position < 0 || first_position + seqlen > tables.positions)
    throw std::invalid_argument("rope_rotate_rounded: the tables do not cover these rows");
  for (size_t row = 0; row < x.size() / head_dim; ++row) {
    const size_t pos = row % seqlen + first_position;
    double* v = &x[row * head_dim];
    for (int i = 0; i < half; ++i) {
      const float a = static_cast<float>(v[i]), b = static_cast<float>(v[i + half]);
      const float c = tables.cos[pos * half + i], s = tables.sin[pos * half + i];
      const float bs = b * s, as = a * s;  // rounded to fp32 on their own, then one fma each
      v[i] = from_storage(t, to_storage(t, std::fma(a, c, -bs)));
      v[i + half] = from_storage(t, to_storage(t, std::fma(b, c, as)));
    }
  }
}

}  // namespace fa
