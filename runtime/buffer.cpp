#include <cstdlib>
#include <cstring>
#include <sstream>
#include <utility>

#include "fa/buffer.hpp"
#include "fa/cuda_check.hpp"

namespace fa {

Buffer::Buffer(Memory where, size_t bytes, std::string name) : where_(where), bytes_(bytes), name_(std::move(name)) {
  const size_t total = bytes_ + 2 * kGuardBytes;
  if (where_ == Memory::kDevice) {
    void* p = nullptr;
    FA_CUDA_CHECK(cudaMalloc(&p, total));
    base_ = static_cast<uint8_t*>(p);
    FA_CUDA_CHECK(cudaMemset(base_, kGuardByte, total));
  } else {
    base_ = static_cast<uint8_t*>(std::aligned_alloc(kGuardBytes, (total + kGuardBytes - 1) / kGuardBytes * kGuardBytes));
    if (base_ == nullptr) throw Error("out of host memory allocating " + name_);
    std::memset(base_, kGuardByte, total);
  }
}

Buffer::~Buffer() { release(); }

void Buffer::release() {
  if (base_ == nullptr) return;
  if (where_ == Memory::kDevice) {
    cudaFree(base_);  // no throw from a destructor; a sticky error surfaces at the next checked call
  } else {
    std::free(base_);
  }
  base_ = nullptr;
}

Buffer::Buffer(Buffer&& o) noexcept
    : where_(o.where_), base_(std::exchange(o.base_, nullptr)), bytes_(o.bytes_), name_(std::move(o.name_)) {}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    release();
    where_ = o.where_;
    base_ = std::exchange(o.base_, nullptr);
    bytes_ = o.bytes_;
    name_ = std::move(o.name_);
  }
  return *this;
}

void Buffer::poison() {
  if (where_ == Memory::kDevice) {
    FA_CUDA_CHECK(cudaMemset(data(), kPoisonByte, bytes_));
  } else {
    std::memset(data(), kPoisonByte, bytes_);
  }
}

void Buffer::upload(const void* host, size_t n) {
  if (n > bytes_) throw Error("upload of " + std::to_string(n) + " bytes into " + name_ + " of " + std::to_string(bytes_));
  if (where_ == Memory::kDevice) {
    FA_CUDA_CHECK(cudaMemcpy(data(), host, n, cudaMemcpyHostToDevice));
  } else {
    std::memcpy(data(), host, n);
  }
}

void Buffer::download(void* host, size_t n) const {
  if (n > bytes_) throw Error("download of " + std::to_string(n) + " bytes from " + name_ + " of " + std::to_string(bytes_));
  if (where_ == Memory::kDevice) {
    FA_CUDA_CHECK(cudaMemcpy(host, data(), n, cudaMemcpyDeviceToHost));
  } else {
    std::memcpy(host, data(), n);
  }
}

void Buffer::check_guards() const {
  std::vector<uint8_t> front(kGuardBytes), back(kGuardBytes);
  const uint8_t* payload_end = base_ + kGuardBytes + bytes_;
  if (where_ == Memory::kDevice) {
    FA_CUDA_CHECK(cudaMemcpy(front.data(), base_, kGuardBytes, cudaMemcpyDeviceToHost));
    FA_CUDA_CHECK(cudaMemcpy(back.data(), payload_end, kGuardBytes, cudaMemcpyDeviceToHost));
  } else {
    std::memcpy(front.data(), base_, kGuardBytes);
    std::memcpy(back.data(), payload_end, kGuardBytes);
  }
  for (size_t i = 0; i < kGuardBytes; ++i) {
    // Report the byte nearest the payload first: that is where an off-by-one lands.
    const size_t f = kGuardBytes - 1 - i;
    if (front[f] != kGuardByte || back[i] != kGuardByte) {
      std::ostringstream os;
      if (front[f] != kGuardByte)
        os << "out-of-bounds write before " << name_ << ": byte " << (kGuardBytes - f) << " before the start";
      else
        os << "out-of-bounds write after " << name_ << ": byte " << i << " past the end (buffer is " << bytes_
           << " bytes)";
      throw Error(os.str());
    }
  }
}

}  // namespace fa
