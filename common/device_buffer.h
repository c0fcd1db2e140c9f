/// \file device_buffer.h
/// \brief RAII ownership of device memory.
#pragma once

#include <cstddef>
#include <utility>

#include "common/cuda_check.h"

namespace fa {

/// \brief Owns `bytes` of device memory from cudaMalloc; freed on destruction. Move-only.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  /// \brief Allocates `bytes` (none when 0). \param bytes the size
  explicit DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
    if (bytes_ > 0) CUDA_CHECK(cudaMalloc(&ptr_, bytes_));
  }
  ~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  /// \brief Takes over `o`'s memory; `o` is left empty. \param o the buffer moved from
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  /// \brief Frees this buffer's memory, then takes over `o`'s.
  /// \param o the buffer moved from \return *this
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      if (ptr_) cudaFree(ptr_);
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }

  /// \return the device pointer (null when empty)
  void* get() const { return ptr_; }
  /// \return the device pointer as `T*`
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  /// \return the size in bytes
  std::size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace fa
