// GPU smoke tests of the harness: device buffers, their guards and poison, CUDA error reporting,
// and the shared device parts (tensor maps, counters, the scratch's pieces, tile maps). These need
// a GPU; without one the executable skips (or fails with FA_REQUIRE_GPU=1).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "fa/buffer.hpp"
#include "fa/cuda_check.hpp"
#include "fa/half.hpp"
#include "fa/tensor_map.hpp"
#include "fa/tile_map.cuh"

namespace {
__global__ void write_range(float* x, int begin, int end) {
  const int i = begin + static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < end) x[i] = 1.0f;
}
}  // namespace

TEST_CASE("harness gpu: device buffer guards catch out-of-bounds writes") {
  fa::Buffer b(fa::Memory::kDevice, 1000 * sizeof(float), "o");
  write_range<<<8, 128>>>(static_cast<float*>(b.data()), 0, 1000);  // exactly in bounds
  FA_CHECK_LAUNCH();
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  CHECK_NOTHROW(b.check_guards());
  const auto v = b.to_host<float>();
  CHECK(v.front() == 1.0f);
  CHECK(v.back() == 1.0f);
  write_range<<<8, 128>>>(static_cast<float*>(b.data()), 0, 1001);  // one element too far
  FA_CHECK_LAUNCH();
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  CHECK_THROWS_WITH_AS(b.check_guards(), doctest::Contains("after o: byte 0 past the end"), fa::Error);
  fa::Buffer c(fa::Memory::kDevice, 64 * sizeof(float), "lse");
  write_range<<<1, 32>>>(static_cast<float*>(c.data()) - 1, 0, 1);  // one element before
  FA_CHECK_LAUNCH();
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  CHECK_THROWS_WITH_AS(c.check_guards(), doctest::Contains("before lse"), fa::Error);
}

TEST_CASE("harness gpu: poisoned device outputs read back as NaN") {
  fa::Buffer b(fa::Memory::kDevice, 256, "o");
  b.poison();
  const auto h = b.to_host<uint16_t>();
  const auto f = b.to_host<float>();
  for (uint16_t x : h) REQUIRE(std::isnan(fa::f16_to_float(x)));
  for (float x : f) REQUIRE(std::isnan(x));
  CHECK_NOTHROW(b.check_guards());  // poisoning stays inside the payload
}

TEST_CASE("harness gpu: CUDA errors name the call and the line") {
  fa::Buffer b(fa::Memory::kDevice, 64, "x");
  write_range<<<1, 4096>>>(static_cast<float*>(b.data()), 0, 1);  // more threads than a block may have
  // (CUDA 13 reports cudaErrorInvalidValue here; older runtimes cudaErrorInvalidConfiguration)
  CHECK_THROWS_WITH_AS(FA_CHECK_LAUNCH(), doctest::Contains("harness_gpu_test.cu:"), fa::CudaError);
  CHECK_THROWS_WITH_AS(FA_CUDA_CHECK(cudaMemcpy(nullptr, b.data(), 1 << 30, cudaMemcpyDeviceToHost)),
                       doctest::Contains("cudaMemcpy"), fa::CudaError);
  // Both errors are non-sticky: clear the one cudaMemcpy recorded, and the context still works.
  (void)cudaGetLastError();
  CHECK_NOTHROW(FA_CUDA_CHECK(cudaDeviceSynchronize()));
  CHECK_NOTHROW(b.poison());
}

TEST_CASE("harness gpu: tensor maps are kept per pointer and shape") {
  // 2 x 256 rows of 128 fp16 values, twice: two tensors of one shape.
  fa::Buffer a(fa::Memory::kDevice, 2 * 256 * 128 * 2, "a"), b(fa::Memory::kDevice, 2 * 256 * 128 * 2, "b");
  auto same = [](const CUtensorMap& x, const CUtensorMap& y) { return std::memcmp(&x, &y, sizeof(x)) == 0; };
  const long long before = fa::tensor_maps_encoded();
  const CUtensorMap first = fa::make_tensor_map("test", a.data(), fa::DType::kF16, 2, 256, 128, 64);
  CHECK(fa::tensor_maps_encoded() == before + 1);
  const CUtensorMap again = fa::make_tensor_map("test", a.data(), fa::DType::kF16, 2, 256, 128, 64);
  CHECK(fa::tensor_maps_encoded() == before + 1);  // kept, not encoded again
  CHECK(same(first, again));
  // Another pointer, dtype, length or box is another map.
  const CUtensorMap other = fa::make_tensor_map("test", b.data(), fa::DType::kF16, 2, 256, 128, 64);
  CHECK(fa::tensor_maps_encoded() == before + 2);
  CHECK_FALSE(same(first, other));
  fa::make_tensor_map("test", a.data(), fa::DType::kBF16, 2, 256, 128, 64);
  fa::make_tensor_map("test", a.data(), fa::DType::kF16, 2, 200, 128, 64);
  fa::make_tensor_map("test", a.data(), fa::DType::kF16, 2, 256, 128, 128);
  CHECK(fa::tensor_maps_encoded() == before + 5);
  // The kept maps are the recent ones: 40 others push the first out.
  for (int s = 1; s <= 40; ++s) fa::make_tensor_map("test", a.data(), fa::DType::kF16, 1, s, 128, 64);
  const long long full = fa::tensor_maps_encoded();
  CHECK(same(fa::make_tensor_map("test", a.data(), fa::DType::kF16, 2, 256, 128, 64), first));
  CHECK(fa::tensor_maps_encoded() == full + 1);
}

namespace {
__global__ void add_to(unsigned long long* c, unsigned long long v) { atomicAdd(c, v); }
unsigned long long read_counter(const unsigned long long* c) {
  unsigned long long v = 0;
  FA_CUDA_CHECK(cudaMemcpy(&v, c, sizeof(v), cudaMemcpyDeviceToHost));
  return v;
}
}  // namespace

TEST_CASE("harness gpu: a stream's counter is kept, zeroed at every call, and no other stream's") {
  cudaStream_t s1 = nullptr, s2 = nullptr;
  FA_CUDA_CHECK(cudaStreamCreate(&s1));
  FA_CUDA_CHECK(cudaStreamCreate(&s2));
  unsigned long long* a = fa::zeroed_counter(s1);
  add_to<<<1, 1, 0, s1>>>(a, 7);
  FA_CHECK_LAUNCH();
  unsigned long long* b = fa::zeroed_counter(s2);
  add_to<<<1, 1, 0, s2>>>(b, 5);
  FA_CHECK_LAUNCH();
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  CHECK(a != b);  // concurrent streams never share one
  CHECK(read_counter(a) == 7);
  CHECK(read_counter(b) == 5);
  CHECK(fa::zeroed_counter(s1) == a);  // the same stream's, kept ...
  FA_CUDA_CHECK(cudaStreamSynchronize(s1));
  CHECK(read_counter(a) == 0);  // ... and zeroed on its stream
  CHECK(read_counter(b) == 5);  // the other stream's untouched
  FA_CUDA_CHECK(cudaStreamDestroy(s1));
  FA_CUDA_CHECK(cudaStreamDestroy(s2));
}

namespace {
// fa::plan_tiles over sequences of lengths len in tiles of 4 rows, with buckets spread over all
// kPlanThreads and depending on the sequence as well as the tile.
__host__ __device__ int plan_bucket(int b, int t) { return (37 * b + 101 * t) % fa::kPlanThreads; }
__global__ void __launch_bounds__(fa::kPlanThreads) plan_test_kernel(const int* len, int batch, bool heaviest_first, fa::TileMap m) {
  auto tiles = [&](int b) { return (len[b] + 3) / 4; };
  auto bucket = [](int b, int t) { return plan_bucket(b, t); };
  fa::plan_tiles(batch, tiles, bucket, heaviest_first, m);
}
// Leaves garbage in the shared memory the next kernel may get: the plan must clear what it uses.
__global__ void __launch_bounds__(fa::kPlanThreads) dirty_shared(int* out) {
  __shared__ int junk[2 * fa::kPlanThreads];
  junk[threadIdx.x] = 0x5a5a5a5a + threadIdx.x;
  junk[threadIdx.x + fa::kPlanThreads] = 77;
  __syncthreads();
  out[threadIdx.x] = junk[(threadIdx.x + 1) % fa::kPlanThreads] + junk[threadIdx.x + fa::kPlanThreads];  // kept
}
}  // namespace

TEST_CASE("harness gpu: a tile map lists every tile once, heaviest first or in packed order") {
  // 2,500 sequences (the prefix sum in three chunks of 1,024), empty ones among them.
  std::vector<int> len(2500);
  int64_t total = 0;
  for (size_t b = 0; b < len.size(); ++b) total += len[b] = int((b * 7919) % 61) * (b % 5 == 3 ? 0 : 1);
  std::vector<int> start(len.size() + 1, 0);
  for (size_t b = 0; b < len.size(); ++b) start[b + 1] = start[b] + (len[b] + 3) / 4;
  for (bool heaviest_first : {true, false}) {
    CAPTURE(heaviest_first);
    fa::Buffer lens(fa::Memory::kDevice, len.size() * sizeof(int), "len");
    FA_CUDA_CHECK(cudaMemcpy(lens.data(), len.data(), len.size() * sizeof(int), cudaMemcpyHostToDevice));
    fa::TileMap m;
    size_t bytes = 0;
    fa::carve_scratch([&](fa::Carver& c) {
      m = fa::take_tile_map(c, int(len.size()), total, 4);
      bytes = c.used();
    });
    REQUIRE(m.entries >= start.back());
    FA_CUDA_CHECK(cudaMemset(m.tile_start, 0xff, bytes));  // every piece of the map: nothing left from before
    fa::Buffer junk(fa::Memory::kDevice, fa::kPlanThreads * sizeof(int), "junk");
    dirty_shared<<<1, fa::kPlanThreads>>>(static_cast<int*>(junk.data()));
    FA_CHECK_LAUNCH();
    plan_test_kernel<<<1, fa::kPlanThreads>>>(static_cast<const int*>(lens.data()), int(len.size()), heaviest_first, m);
    FA_CHECK_LAUNCH();
    std::vector<int> tile_start(len.size() + 1), count(1);
    std::vector<int2> order(start.back());
    FA_CUDA_CHECK(cudaMemcpy(tile_start.data(), m.tile_start, tile_start.size() * sizeof(int), cudaMemcpyDeviceToHost));
    FA_CUDA_CHECK(cudaMemcpy(count.data(), m.count, sizeof(int), cudaMemcpyDeviceToHost));
    FA_CUDA_CHECK(cudaMemcpy(order.data(), m.order, order.size() * sizeof(int2), cudaMemcpyDeviceToHost));
    CHECK(tile_start == start);
    REQUIRE(count[0] == start.back());
    std::vector<int> seen(start.back(), 0);
    int worst = 0;
    for (size_t x = 0; x < order.size(); ++x) {
      const int b = order[x].x, t = order[x].y;
      REQUIRE(b >= 0);
      REQUIRE(b < int(len.size()));
      REQUIRE(t >= 0);
      REQUIRE(t < start[b + 1] - start[b]);
      ++seen[start[b] + t];
      if (heaviest_first) {
        CHECK(plan_bucket(b, t) >= worst);  // the buckets never go back: heaviest first
        worst = std::max(worst, plan_bucket(b, t));
      } else {
        CHECK(start[b] + t == int(x));  // packed order: (sequence, tile) ascending
      }
    }
    CHECK(std::count(seen.begin(), seen.end(), 1) == start.back());  // every tile exactly once
  }
}

TEST_CASE("harness gpu: the scratch is carved into 256-byte aligned pieces") {
  double* a = nullptr;
  int* b = nullptr;
  float* c = nullptr;
  size_t used = 0;
  fa::carve_scratch([&](fa::Carver& cv) {
    a = cv.take<double>(3);
    b = cv.take<int>(0);
    c = cv.take<float>(100);
    used = cv.used();
  });
  CHECK(used == 256 + 0 + 512);
  REQUIRE(a != nullptr);
  CHECK(reinterpret_cast<uintptr_t>(a) % 256 == 0);
  CHECK(reinterpret_cast<char*>(b) == reinterpret_cast<char*>(a) + 256);
  CHECK(reinterpret_cast<char*>(c) == reinterpret_cast<char*>(a) + 256);  // an empty piece takes no room
  FA_CUDA_CHECK(cudaMemset(c, 0, 100 * sizeof(float)));  // the pieces are device memory
  FA_CUDA_CHECK(cudaDeviceSynchronize());
}
