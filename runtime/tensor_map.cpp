#include "fa/tensor_map.hpp"

#include <cuda_runtime_api.h>

#include <string>

#include "fa/cuda_check.hpp"

namespace fa {
namespace {

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*, const cuuint64_t*,
                                 const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                 CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
EncodeTiled encode_tiled(const char* who) {
  static EncodeTiled fn = nullptr;
  if (fn == nullptr) {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    FA_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q));
    if (q != cudaDriverEntryPointSuccess || f == nullptr)
      throw Error(std::string("lesson ") + who + ": the driver has no cuTensorMapEncodeTiled (CUDA 12.0 or later needed)");
    fn = reinterpret_cast<EncodeTiled>(f);
  }
  return fn;
}

}  // namespace

CUtensorMap make_tensor_map(const char* who, const void* ptr, DType t, int bh, int seqlen, int d, int rows) {
  CUtensorMap map{};
  const cuuint64_t dims[3] = {cuuint64_t(d), cuuint64_t(seqlen), cuuint64_t(bh)};
  const cuuint64_t strides[2] = {cuuint64_t(d) * 2, cuuint64_t(seqlen) * d * 2};  // bytes, dims 1 and 2
  const cuuint32_t box[3] = {64, cuuint32_t(rows), 1};
  const cuuint32_t elem[3] = {1, 1, 1};
  const CUresult r = encode_tiled(who)(&map, t == DType::kF16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3,
                                       const_cast<void*>(ptr), dims, strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                       CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) throw Error(std::string("lesson ") + who + ": cuTensorMapEncodeTiled failed (" + std::to_string(int(r)) + ")");
  return map;
}

}  // namespace fa
