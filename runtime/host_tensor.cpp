#include "fa/host_tensor.hpp"

#include "fa/half.hpp"

namespace fa {

std::vector<float> read_head(const void* base, const Strides& s, DType t, int b, int h, int rows, int dim) {
  const auto* x = static_cast<const uint16_t*>(base) + b * s.batch + h * s.head;
  std::vector<float> out(static_cast<size_t>(rows) * dim);
  for (int i = 0; i < rows; ++i)
    for (int d = 0; d < dim; ++d) out[static_cast<size_t>(i) * dim + d] = static_cast<float>(from_storage(t, x[i * s.row + d]));
  return out;
}

void write_head(const std::vector<float>& x, void* base, const Strides& s, DType t, int b, int h, int rows, int dim) {
  auto* y = static_cast<uint16_t*>(base) + b * s.batch + h * s.head;
  for (int i = 0; i < rows; ++i)
    for (int d = 0; d < dim; ++d) y[i * s.row + d] = to_storage(t, x[static_cast<size_t>(i) * dim + d]);
}

}  // namespace fa
