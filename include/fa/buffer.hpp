// Buffers for the tests and tools: host or device memory with guard regions on both sides.
// The guards hold a known byte pattern; check_guards() after a run catches out-of-bounds
// writes. poison() fills the payload with 0xFF bytes, which is NaN in fp16, bf16 and fp32, so
// an element the kernel never wrote fails the comparison.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fa/params.hpp"

namespace fa {

class Buffer {
 public:
  static constexpr size_t kGuardBytes = 256;  // keeps the payload 256-byte aligned, like cudaMalloc
  static constexpr uint8_t kGuardByte = 0xA5;
  static constexpr uint8_t kPoisonByte = 0xFF;

  Buffer() = default;
  Buffer(Memory where, size_t bytes, std::string name);
  ~Buffer();
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() { return base_ + kGuardBytes; }
  const void* data() const { return base_ + kGuardBytes; }
  size_t bytes() const { return bytes_; }
  Memory where() const { return where_; }
  const std::string& name() const { return name_; }

  void poison();
  void upload(const void* host, size_t bytes);    // host -> payload
  void download(void* host, size_t bytes) const;  // payload -> host
  template <class T> std::vector<T> to_host() const {
    std::vector<T> v(bytes_ / sizeof(T));
    download(v.data(), v.size() * sizeof(T));
    return v;
  }
  // Throws fa::Error naming the buffer, the side and the first changed byte if a guard changed.
  void check_guards() const;

 private:
  void release();
  Memory where_ = Memory::kHost;
  uint8_t* base_ = nullptr;
  size_t bytes_ = 0;
  std::string name_;
};

}  // namespace fa
