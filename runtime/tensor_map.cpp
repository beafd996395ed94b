#include "fa/tensor_map.hpp"

#include <cuda_runtime_api.h>

#include <atomic>
#include <deque>
#include <mutex>
#include <string>

#include "fa/cuda_check.hpp"

namespace fa {
namespace {

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*, const cuuint64_t*,
                                 const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                 CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
EncodeTiled encode_tiled(const char* who) {
  static const EncodeTiled fn = [who] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    FA_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q));
    if (q != cudaDriverEntryPointSuccess || f == nullptr)
      throw Error(std::string("lesson ") + who + ": the driver has no cuTensorMapEncodeTiled (CUDA 12.0 or later needed)");
    return reinterpret_cast<EncodeTiled>(f);
  }();
  return fn;
}

// What a map encodes: the tensor's address and shape and the box (not its contents, so a map stays
// valid for memory freed and allocated again at the same address with the same shape).
struct Key {
  const void* ptr;
  DType t;
  int bh, seqlen, d, rows;
  bool operator==(const Key& o) const {
    return ptr == o.ptr && t == o.t && bh == o.bh && seqlen == o.seqlen && d == o.d && rows == o.rows;
  }
};
constexpr size_t kCached = 32;  // the most recent maps kept: a few calls' Q, K, V, dO (and O)
std::atomic<long long> g_encoded{0};

CUtensorMap encode(const char* who, const Key& k) {
  CUtensorMap map{};
  const cuuint64_t dims[3] = {cuuint64_t(k.d), cuuint64_t(k.seqlen), cuuint64_t(k.bh)};
  const cuuint64_t strides[2] = {cuuint64_t(k.d) * 2, cuuint64_t(k.seqlen) * k.d * 2};  // bytes, dims 1 and 2
  const cuuint32_t box[3] = {64, cuuint32_t(k.rows), 1};
  const cuuint32_t elem[3] = {1, 1, 1};
  const CUresult r = encode_tiled(who)(&map, k.t == DType::kF16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3,
                                       const_cast<void*>(k.ptr), dims, strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                       CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) throw Error(std::string("lesson ") + who + ": cuTensorMapEncodeTiled failed (" + std::to_string(int(r)) + ")");
  ++g_encoded;
  return map;
}

}  // namespace

CUtensorMap make_tensor_map(const char* who, const void* ptr, DType t, int bh, int seqlen, int d, int rows) {
  // A call encodes its maps on the host, a few microseconds each; a model calls attention with the
  // same tensors' shapes and often the same buffers layer after layer, so the recent maps are kept.
  static std::mutex mutex;
  static std::deque<std::pair<Key, CUtensorMap>> cache;  // the most recent last
  const Key key{ptr, t, bh, seqlen, d, rows};
  const std::lock_guard<std::mutex> lock(mutex);
  for (auto it = cache.begin(); it != cache.end(); ++it)
    if (it->first == key) {
      const CUtensorMap map = it->second;
      cache.erase(it);
      cache.emplace_back(key, map);
      return map;
    }
  const CUtensorMap map = encode(who, key);
  cache.emplace_back(key, map);
  if (cache.size() > kCached) cache.pop_front();
  return map;
}

long long tensor_maps_encoded() { return g_encoded.load(); }

}  // namespace fa
