#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>

#include "fa/cuda_check.hpp"

namespace fa {

void throw_cuda_error(cudaError_t err, const char* what, const char* file, int line) {
  std::ostringstream os;
  os << "CUDA error " << cudaGetErrorName(err) << " (" << cudaGetErrorString(err) << ") in " << what << " at "
     << file << ":" << line;
  throw CudaError(os.str());
}

bool no_gpu(std::string* why) {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err == cudaSuccess && n > 0) return false;
  if (why != nullptr) {
    *why = err == cudaSuccess ? std::string("no CUDA device")
                              : std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
  }
  return true;
}

const DeviceInfo& current_device() {
  static std::mutex mutex;
  static std::map<int, DeviceInfo> known;  // by device number; entries never move
  int dev = 0;
  FA_CUDA_CHECK(cudaGetDevice(&dev));
  const std::lock_guard<std::mutex> lock(mutex);
  const auto it = known.find(dev);
  if (it != known.end()) return it->second;
  int major = 0, minor = 0, sms = 0;
  FA_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  FA_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  FA_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  return known[dev] = DeviceInfo{major * 10 + minor, sms};
}

void* device_scratch(size_t bytes) {
  struct Scratch {
    void* ptr = nullptr;
    size_t bytes = 0;
  };
  static std::mutex mutex;
  static std::map<int, Scratch> per_device;
  int dev = 0;
  FA_CUDA_CHECK(cudaGetDevice(&dev));
  const std::lock_guard<std::mutex> lock(mutex);
  Scratch& s = per_device[dev];
  if (bytes > s.bytes) {
    if (s.ptr != nullptr) FA_CUDA_CHECK(cudaFree(s.ptr));  // synchronises the device: no kernel still reads it
    s.ptr = nullptr;
    s.bytes = 0;
    FA_CUDA_CHECK(cudaMalloc(&s.ptr, bytes));
    s.bytes = bytes;
  }
  return s.ptr;
}

void allow_smem_of(const void* kernel, int bytes) {
  static std::mutex mutex;
  static std::set<std::tuple<int, const void*, int>> allowed;  // (device, kernel, bytes), once each
  int dev = 0;
  FA_CUDA_CHECK(cudaGetDevice(&dev));
  const std::lock_guard<std::mutex> lock(mutex);
  if (allowed.count({dev, kernel, bytes}) != 0) return;
  FA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  allowed.insert({dev, kernel, bytes});  // only once it succeeded: a refusal is thrown at every call
}

unsigned grid_blocks(int64_t blocks, const char* what) {
  if (blocks > INT32_MAX)
    throw InvalidArgument(std::string(what) + ": the grid needs " + std::to_string(blocks) + " blocks, more than 2^31 - 1");
  return static_cast<unsigned>(blocks);
}

unsigned long long* zeroed_counter(cudaStream_t stream) {
  static std::mutex mutex;
  static std::map<std::pair<int, cudaStream_t>, unsigned long long*> counters;  // never freed: 8 bytes a stream
  int dev = 0;
  FA_CUDA_CHECK(cudaGetDevice(&dev));
  unsigned long long* c = nullptr;
  {
    const std::lock_guard<std::mutex> lock(mutex);
    unsigned long long*& slot = counters[{dev, stream}];
    if (slot == nullptr) FA_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&slot), sizeof(*slot)));
    c = slot;
  }
  FA_CUDA_CHECK(cudaMemsetAsync(c, 0, sizeof(*c), stream));
  return c;
}

}  // namespace fa
