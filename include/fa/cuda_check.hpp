// CUDA error checking: every runtime call and every launch is checked, and a failure throws
// fa::CudaError naming the call, the file and the line. Exit code 0 proves nothing.
#pragma once

#include <cstddef>

#include <cuda_runtime_api.h>

#include "fa/params.hpp"

namespace fa {
[[noreturn]] void throw_cuda_error(cudaError_t err, const char* what, const char* file, int line);
// True when the machine has no usable CUDA device. Without a driver cudaGetDeviceCount returns
// cudaErrorInsufficientDriver, not cudaErrorNoDevice: both mean "no GPU".
bool no_gpu(std::string* why = nullptr);
// The current device, queried once per device: its compute capability (major * 10 + minor), by
// which lessons pick a configuration, and its number of SMs (lesson 13's persistent grid).
struct DeviceInfo {
  int sm = 0;
  int sm_count = 0;
};
const DeviceInfo& current_device();
// The scratch a lesson needs beside its outputs (lesson 11's row statistics, lesson 12's tile maps
// and gate sums): at least `bytes` of device memory on the current device, grow-only, one buffer
// per device for the whole process, shared by every caller. It is valid until the next call that
// asks for more, so a caller carves all it needs from one call and uses it stream-ordered.
void* device_scratch(size_t bytes);
// The pieces a call takes of that scratch, each 256-byte aligned. carve_scratch(f) calls f(carver)
// twice: first to size the pieces (take returns nullptr, and nothing is allocated), then on
// device_scratch of that size; the pointers f keeps from the second call are the pieces.
class Carver {
 public:
  explicit Carver(char* base) : base_(base) {}
  template <class X>
  X* take(size_t count) {
    X* x = base_ == nullptr ? nullptr : reinterpret_cast<X*>(base_ + used_);
    used_ += (count * sizeof(X) + 255) / 256 * 256;
    return x;
  }
  size_t used() const { return used_; }

 private:
  char* base_;
  size_t used_ = 0;
};
template <class F>
void carve_scratch(F&& f) {
  Carver sizing(nullptr);
  f(sizing);
  Carver carver(static_cast<char*>(device_scratch(sizing.used())));
  f(carver);
}
// A one-dimensional grid of `blocks` blocks, or fa::InvalidArgument naming `what` past 2^31 - 1.
unsigned grid_blocks(int64_t blocks, const char* what);
// An 8-byte counter in device memory for the current device and `stream`, allocated at its first
// use and kept for the process, and zeroed on `stream` (cudaMemsetAsync) at every call: a
// persistent grid's work counter (lesson 13), correct for any number of streams, as each stream
// has its own. Allocating and freeing one on the stream at every call instead (cudaMallocAsync,
// cudaFreeAsync) made lesson 13 slower and its speed vary from process to process (its README,
// "The tile counter").
unsigned long long* zeroed_counter(cudaStream_t stream);
// Lets `kernel` take `bytes` of dynamic shared memory on the current device (above 48 KB a kernel
// must opt in), or throws. Once per (device, kernel, bytes): a launch may call it every time.
template <class Kernel>
void allow_smem(Kernel* kernel, int bytes);
void allow_smem_of(const void* kernel, int bytes);  // the same, for any kernel
}  // namespace fa

#define FA_CUDA_CHECK(expr)                                              \
  do {                                                                   \
    cudaError_t fa_err_ = (expr);                                        \
    if (fa_err_ != cudaSuccess) ::fa::throw_cuda_error(fa_err_, #expr, __FILE__, __LINE__); \
  } while (0)

// After a <<<...>>> launch: catches bad configurations at once (cudaGetLastError) and, in
// checked builds, faults inside the kernel (the tests synchronise after every run anyway).
#define FA_CHECK_LAUNCH() FA_CUDA_CHECK(cudaGetLastError())

template <class Kernel>
void fa::allow_smem(Kernel* kernel, int bytes) {
  allow_smem_of(reinterpret_cast<const void*>(kernel), bytes);
}
