// The device side of fa-bench: random inputs made on the GPU, the L2 flush, and the ceilings.
#pragma once

#include <cstddef>
#include <cstdint>

#include "fa/params.hpp"

namespace fa::bench {

// Fills n 16-bit elements with N(0, 1) values rounded to `t` (a hash of (seed, index): no state).
void fill_randn(void* x, size_t n, DType t, uint64_t seed);
// Overwrites a buffer several times the L2 size, so the next kernel starts with a cold L2.
class L2Flusher {
 public:
  L2Flusher();
  ~L2Flusher();
  void flush(cudaStream_t stream);
  size_t bytes() const { return bytes_; }
 private:
  void* buf_ = nullptr;
  size_t bytes_ = 0;
};
// The FP32 FMA throughput ceiling of this GPU in TFLOP/s (2 FLOPs per FMA), measured by a kernel
// of independent FMA chains filling every SM: the roof of the CUDA-core lessons (01-06).
double measure_fp32_fma_tflops();
// The mma.sync throughput ceiling (m16n8k16, fp16 inputs, fp32 accumulators) in TFLOP/s, by a
// kernel of independent mma chains on every SM: the roof of the tensor-core lessons (07-12).
double measure_mma_sync_tflops();
// The cuBLAS fp16 GEMM (fp32 accumulation, 8192^3) in TFLOP/s: on Hopper it runs on wgmma, the roof
// of lesson 13. 0 when fa-bench was built without cuBLAS.
double measure_cublas_gemm_tflops();

}  // namespace fa::bench
