// The tensor-core and async-copy instructions of lessons 07 and later, one thin inline-PTX
// wrapper each (PTX ISA: "Warp-level matrix instructions" and "cp.async"). They run on sm_80 and
// later. Lesson 07's README draws what each lane holds; lesson 07's fragments.hpp has the same
// layouts as plain functions, unit-tested on the CPU.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace fa {

// The shared-memory address PTX wants (32 bits in the shared window), from a generic pointer.
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ldmatrix.x4: four 8x8 matrices of 16-bit values. Lane l gives the address of row (l % 8) of
// matrix (l / 8); afterwards register r of lane l holds row (l / 4), columns 2 (l % 4) and
// 2 (l % 4) + 1 of matrix r. With .trans each matrix arrives transposed: row 2 (l % 4) and
// 2 (l % 4) + 1, column l / 4.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// D = A B + D for a 16x8x16 tile, A (16x16) and B (16x8) in T (__half or __nv_bfloat16), C and D
// in fp32: A in 4 registers of two values, B in 2, C/D in 4 floats (layouts: lesson 07).
template <class T>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, __half>) {
    asm(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Two floats rounded to T and packed in one register, the first in the low half (the element
// with the smaller column index, as the fragments want it).
template <class T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __half>) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  } else {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
}

// The inverse of pack2: the two 16-bit values of a register as floats, the low half first.
template <class T>
__device__ __forceinline__ float2 unpack2(uint32_t r) {
  if constexpr (std::is_same_v<T, __half>) {
    return __half22float2(*reinterpret_cast<const __half2*>(&r));
  } else {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&r));
  }
}

// 8 consecutive 16-bit values of two rows (one 16-byte load each, so 16-byte aligned), multiplied
// pairwise and added to `sum` in fp32: a thread's part of a row's dot product, as the backward's
// preprocess takes D_i = O_i . dO_i (lessons 11, 12 and 14).
template <class T>
__device__ __forceinline__ float dot8(const T* a, const T* b, float sum = 0.f) {
  const uint4 av = *reinterpret_cast<const uint4*>(a), bv = *reinterpret_cast<const uint4*>(b);
  const uint32_t aw[4] = {av.x, av.y, av.z, av.w}, bw[4] = {bv.x, bv.y, bv.z, bv.w};
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    const float2 x = unpack2<T>(aw[w]), e = unpack2<T>(bw[w]);
    sum = fmaf(x.x, e.x, fmaf(x.y, e.y, sum));
  }
  return sum;
}

// 2^x by the MUFU.EX2 unit alone (ex2.approx.ftz: about 2 ulp, results below 2^-126 flushed to 0).
// exp2f without --use_fast_math adds range tests and a rescale around it for subnormal results,
// which cost instructions and, in a kernel that holds 200+ live registers, registers too.
// FlashAttention-2 gets the same instruction by compiling with --use_fast_math.
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// cp.async: copy 16 bytes global -> shared without passing through registers; with `valid`
// false nothing is read and the 16 bytes are zero-filled (the tail rows of a tile).
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most `n` of this thread's committed groups are still in flight.
template <int n>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(n));
}

}  // namespace fa
