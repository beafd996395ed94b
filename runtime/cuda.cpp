#include <sstream>

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

}  // namespace fa
