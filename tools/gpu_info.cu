// fa-gpu-info: the constants of this machine's GPUs that the lessons' profiling questions use
// (SM count, L2 size, memory bandwidth, shared memory per SM, compute capability), so that a
// student can answer them for their own GPU. The lessons' profile.sh print it first; the
// READMEs' H200 answers come from plots/profiles/. No kernel: it runs on any GPU, and prints
// "no GPU" (exit status 0) where there is none.
//
// The memory clock and bus width come from cudaDeviceGetAttribute (CUDA 13 removed
// cudaDeviceProp::memoryClockRate). The peak bandwidth is 2 x clock x bus width (two transfers
// per clock, as the driver reports the clock of both GDDR and HBM): a peak that no kernel reaches,
// and not always the vendor's figure to the percent.
#include <cuda_runtime.h>

#include <cstdio>

namespace {

int attribute(cudaDeviceAttr what, int device) {
  int value = 0;
  if (cudaDeviceGetAttribute(&value, what, device) != cudaSuccess) return 0;
  return value;
}

void print_device(int device) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    std::printf("GPU %d: cudaGetDeviceProperties failed\n", device);
    return;
  }
  const int major = attribute(cudaDevAttrComputeCapabilityMajor, device);
  const int minor = attribute(cudaDevAttrComputeCapabilityMinor, device);
  const int sms = attribute(cudaDevAttrMultiProcessorCount, device);
  const double l2 = attribute(cudaDevAttrL2CacheSize, device);
  const double mem_khz = attribute(cudaDevAttrMemoryClockRate, device);
  const double bus_bits = attribute(cudaDevAttrGlobalMemoryBusWidth, device);
  const double sm_khz = attribute(cudaDevAttrClockRate, device);
  const double smem_sm = attribute(cudaDevAttrMaxSharedMemoryPerMultiprocessor, device);
  const double smem_block = attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  const double bandwidth = 2.0 * mem_khz * 1e3 * bus_bits / 8.0;  // bytes per second

  std::printf("GPU %d: %s, compute capability %d.%d (sm_%d%d)\n", device, prop.name, major, minor, major, minor);
  std::printf("  SMs                       %d\n", sms);
  std::printf("  L2 cache                  %.1f MB (%.1f MiB)\n", l2 / 1e6, l2 / 1048576.0);
  std::printf("  memory                    %.1f GB\n", static_cast<double>(prop.totalGlobalMem) / 1e9);
  if (mem_khz > 0 && bus_bits > 0)
    std::printf("  memory bandwidth (peak)   %.2f TB/s = 2 x %.0f MHz x %.0f bits / 8\n", bandwidth / 1e12,
                mem_khz / 1e3, bus_bits);
  else
    std::printf("  memory bandwidth (peak)   unknown (the driver reports no memory clock or bus width)\n");
  std::printf("  shared memory per SM      %.0f KiB (at most %.0f KiB per block)\n", smem_sm / 1024, smem_block / 1024);
  std::printf("  registers per SM          %d\n", attribute(cudaDevAttrMaxRegistersPerMultiprocessor, device));
  std::printf("  threads per SM (max)      %d\n", attribute(cudaDevAttrMaxThreadsPerMultiProcessor, device));
  if (sm_khz > 0) std::printf("  SM clock (max)            %.0f MHz\n", sm_khz / 1e3);
}

}  // namespace

int main() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    std::printf("no GPU (cudaGetDeviceCount: %s).\n"
                "The profiles need one; without it, answer the questions from the course's H200 profiles\n"
                "(plots/profiles/, quoted in each lesson README's \"How to profile\").\n",
                err != cudaSuccess ? cudaGetErrorString(err) : "no device");
    return 0;
  }
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  std::printf("CUDA driver %d.%d, runtime %d.%d; the lessons run on GPU 0 (CUDA_VISIBLE_DEVICES picks it)\n",
              driver / 1000, driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10);
  for (int d = 0; d < count; ++d) print_device(d);
  std::printf("The FP32 FMA ceiling is measured, not listed: fa-bench prints it (\"ceilings measured\") when it starts.\n");
  return 0;
}
