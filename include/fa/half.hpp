// Host-side fp16 and bf16 conversions (round to nearest even), in plain C++ so that CPU code
// and tests need no CUDA headers for them. Device code uses cuda_fp16.h / cuda_bf16.h instead.
#pragma once

#include <cstdint>
#include <cstring>

#include "fa/params.hpp"

namespace fa {

inline uint32_t float_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float bits_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

uint16_t float_to_f16(float f);
float f16_to_float(uint16_t h);

inline uint16_t float_to_bf16(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<uint16_t>(u >> 16);
}
inline float bf16_to_float(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }

inline uint16_t to_storage(DType t, double x) {
  return t == DType::kF16 ? float_to_f16(static_cast<float>(x)) : float_to_bf16(static_cast<float>(x));
}
inline double from_storage(DType t, uint16_t b) {
  return t == DType::kF16 ? f16_to_float(b) : bf16_to_float(b);
}

}  // namespace fa
