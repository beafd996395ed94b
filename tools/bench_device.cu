#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <vector>

#include "bench_device.hpp"
#include "fa/cuda_check.hpp"
#ifdef FA_HAVE_CUBLAS
#include <cublas_v2.h>
#endif
#include "fa/mma.cuh"

namespace fa::bench {
namespace {

__device__ uint64_t mix(uint64_t z) {  // splitmix64's finaliser
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

template <class T>
__global__ void randn_kernel(T* x, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint64_t a = mix(seed + 2 * i), b = mix(seed + 2 * i + 1);
    const float u1 = ((a >> 40) + 1) * 0x1.0p-24f, u2 = (b >> 40) * 0x1.0p-24f;  // u1 in (0, 1]
    const float z = sqrtf(-2.f * logf(u1)) * cospif(2.f * u2);
    if constexpr (std::is_same_v<T, __half>) x[i] = __float2half_rn(z);
    else x[i] = __float2bfloat16_rn(z);
  }
}

// 8 independent chains per thread keep the FMA pipes busy; the result is stored so nothing is
// optimised away.
__global__ void fma_kernel(float* out, int iters, float a, float b) {
  float x[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) x[k] = threadIdx.x + k;
  for (int it = 0; it < iters; ++it)
#pragma unroll
    for (int k = 0; k < 8; ++k) x[k] = fmaf(x[k], a, b);
  float s = 0.f;
#pragma unroll
  for (int k = 0; k < 8; ++k) s += x[k];
  if (s == 1.2345f) out[0] = s;  // practically never true; the compiler cannot know that
}

// 8 independent accumulators per warp keep the tensor pipe busy (mma.sync's latency is many
// cycles); the operands are nonzero values (the tensor cores' power, and so their clock, depends
// on the data), and the result is stored so nothing is optimised away.
__global__ void mma_kernel(float* out, int iters) {
  const int lane = threadIdx.x % 32;
  uint32_t a[4];
  for (int r = 0; r < 4; ++r) a[r] = fa::pack2<__half>(0.5f + 0.01f * lane + r, 1.f - 0.02f * r);
  const uint32_t b0 = fa::pack2<__half>(0.25f * lane, -0.5f), b1 = fa::pack2<__half>(0.75f, 0.01f * lane);
  float acc[8][4] = {};
  for (int it = 0; it < iters; ++it)
#pragma unroll
    for (int k = 0; k < 8; ++k) fa::mma_m16n8k16<__half>(acc[k], a, b0, b1);
  float s = 0.f;
#pragma unroll
  for (int k = 0; k < 8; ++k) s += acc[k][0] + acc[k][1] + acc[k][2] + acc[k][3];
  if (s == 1.2345f) out[0] = s;
}

// The median time of 6 launches after a warm-up, in ms.
template <class Launch>
double median_ms(Launch launch) {
  cudaEvent_t a, b;
  FA_CUDA_CHECK(cudaEventCreate(&a));
  FA_CUDA_CHECK(cudaEventCreate(&b));
  std::vector<float> ms;
  for (int rep = 0; rep < 7; ++rep) {
    FA_CUDA_CHECK(cudaEventRecord(a));
    launch();
    FA_CHECK_LAUNCH();
    FA_CUDA_CHECK(cudaEventRecord(b));
    FA_CUDA_CHECK(cudaEventSynchronize(b));
    float t = 0;
    FA_CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
    if (rep > 0) ms.push_back(t);  // the first launch is a warm-up
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

void fill_randn(void* x, size_t n, DType t, uint64_t seed) {
  if (t == DType::kF16) randn_kernel<<<1024, 256>>>(static_cast<__half*>(x), n, seed);
  else randn_kernel<<<1024, 256>>>(static_cast<__nv_bfloat16*>(x), n, seed);
  FA_CHECK_LAUNCH();
}

L2Flusher::L2Flusher() {
  int dev = 0, l2 = 0;
  FA_CUDA_CHECK(cudaGetDevice(&dev));
  FA_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
  bytes_ = std::max<size_t>(size_t(l2) * 4, size_t(64) << 20);
  FA_CUDA_CHECK(cudaMalloc(&buf_, bytes_));
}
L2Flusher::~L2Flusher() { cudaFree(buf_); }
void L2Flusher::flush(cudaStream_t stream) { FA_CUDA_CHECK(cudaMemsetAsync(buf_, 0x5a, bytes_, stream)); }

double measure_fp32_fma_tflops() {
  float* out = nullptr;
  FA_CUDA_CHECK(cudaMalloc(&out, sizeof(float)));
  const int blocks = fa::current_device().sm_count * 8, threads = 256, iters = 8192;
  const double ms = median_ms([&] { fma_kernel<<<blocks, threads>>>(out, iters, 0.999f, 0.001f); });
  cudaFree(out);
  return 2.0 * 8 * iters * double(blocks) * threads / (ms * 1e-3) / 1e12;
}

double measure_mma_sync_tflops() {
  float* out = nullptr;
  FA_CUDA_CHECK(cudaMalloc(&out, sizeof(float)));
  const int blocks = fa::current_device().sm_count * 4, threads = 256, iters = 4096;
  const double ms = median_ms([&] { mma_kernel<<<blocks, threads>>>(out, iters); });
  cudaFree(out);
  const double flops_per_mma = 2.0 * 16 * 8 * 16;
  return flops_per_mma * 8 * iters * double(blocks) * (threads / 32) / (ms * 1e-3) / 1e12;
}

double measure_cublas_gemm_tflops() {
#ifdef FA_HAVE_CUBLAS
  // C = A B, 8192^3, fp16 inputs and output, fp32 accumulation (as the attention kernels
  // accumulate); random inputs, since the tensor cores' clock depends on the data.
  const int n = 8192;
  const size_t elems = size_t(n) * n;
  void *a = nullptr, *b = nullptr, *c = nullptr;
  FA_CUDA_CHECK(cudaMalloc(&a, elems * 2));
  FA_CUDA_CHECK(cudaMalloc(&b, elems * 2));
  FA_CUDA_CHECK(cudaMalloc(&c, elems * 2));
  fill_randn(a, elems, DType::kF16, 11);
  fill_randn(b, elems, DType::kF16, 12);
  cublasHandle_t h = nullptr;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) throw Error("fa-bench: cublasCreate failed");
  const float one = 1.f, zero = 0.f;
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
  const double ms = median_ms([&] {
    const cublasStatus_t s = cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, CUDA_R_16F, n, b, CUDA_R_16F, n,
                                          &zero, c, CUDA_R_16F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS) status = s;
  });
  cublasDestroy(h);
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  if (status != CUBLAS_STATUS_SUCCESS) throw Error("fa-bench: cublasGemmEx failed (" + std::to_string(int(status)) + ")");
  return 2.0 * n * double(n) * n / (ms * 1e-3) / 1e12;
#else
  return 0;  // fa-bench was built without cuBLAS
#endif
}

}  // namespace fa::bench
