// Small device helpers shared by the GPU lessons: storage types, dtype dispatch, warp reductions.
// Only what every lesson needs and none of them teaches; the lesson kernels are written out in full.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <type_traits>
#include <utility>

#include "fa/params.hpp"

namespace fa {

constexpr float kLog2e = 1.4426950408889634f;  // log2(e): exp(x) = exp2(x * kLog2e)
constexpr float kNegInf = -INFINITY;

template <class T> __device__ __forceinline__ float to_float(T x);
template <> __device__ __forceinline__ float to_float<__half>(__half x) { return __half2float(x); }
template <> __device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }
template <class T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

__host__ __device__ constexpr int ceil_div(int a, int b) { return (a + b - 1) / b; }

// Reductions over groups of `width` consecutive lanes (a power of two, at most 32).
template <int width = 32> __device__ __forceinline__ float group_max(float x) {
#pragma unroll
  for (int o = width / 2; o > 0; o /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o, width));
  return x;
}
template <int width = 32> __device__ __forceinline__ float group_sum(float x) {
#pragma unroll
  for (int o = width / 2; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o, width);
  return x;
}

// ---- Tile counts (test builds) ------------------------------------------------------------------
// A lesson that skips work (causal early stop, K/V-stationary backward) is correct and slower when
// it visits a tile too many, and no output shows it. A test build (FA_COUNT_TILES, cmake's
// TILE_COUNTS) records, for every work tile, how many tiles it visited, and the tests compare that
// with the tiles its rows see (tests/tile_counts_test.cpp); fa/params.hpp describes a record.
// One thread per block calls these; every other build compiles them to nothing.
__device__ __forceinline__ void tile_count_begin(const AttnParams& p, int64_t work, int first, int length, int tile) {
#ifdef FA_COUNT_TILES
  if (p.tile_counts == nullptr) return;
  int* r = p.tile_counts + work * kTileRecord;
  r[1] = first;
  r[2] = length;
  r[3] = tile;
#else
  (void)p, (void)work, (void)first, (void)length, (void)tile;
#endif
}
__device__ __forceinline__ void tile_count_visit(const AttnParams& p, int64_t work) {
#ifdef FA_COUNT_TILES
  if (p.tile_counts != nullptr) atomicAdd(p.tile_counts + work * kTileRecord, 1);
#else
  (void)p, (void)work;
#endif
}
// The work tile of a block of a (tiles, heads) grid.
__device__ __forceinline__ int64_t block_work() { return int64_t(blockIdx.y) * gridDim.x + blockIdx.x; }

// A configuration chosen at run time, compiled as a template: calls f(std::integral_constant<int,
// i>{}) for the i of kIs equal to `index` (f's argument is then a constant expression); false if
// none is.
template <int... kIs, class F>
bool dispatch_index(int index, std::integer_sequence<int, kIs...>, F&& f) {
  return ((index == kIs && (f(std::integral_constant<int, kIs>{}), true)) || ...);
}

}  // namespace fa

// Runs `...` with `T` bound to the storage type of `dtype` (__half or __nv_bfloat16).
#define FA_DISPATCH_DTYPE(dtype, T, ...)       \
  do {                                         \
    if ((dtype) == ::fa::DType::kF16) {        \
      using T = __half;                        \
      __VA_ARGS__;                             \
    } else {                                   \
      using T = __nv_bfloat16;                 \
      __VA_ARGS__;                             \
    }                                          \
  } while (0)
