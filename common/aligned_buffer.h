// File: common/aligned_buffer.h
//
// AlignedBuffer: an owning, move-only block of memory whose start address is
// a multiple of a power-of-two alignment (O_DIRECT needs the file's DMA
// alignment; SIMD kernels like 64). The alignment is a property of the
// buffer, checked at allocation, never assumed.
//
// Thread safety: a buffer is plain memory; share it only with external
// synchronisation.
#ifndef ZOOM_COMMON_ALIGNED_BUFFER_H_
#define ZOOM_COMMON_ALIGNED_BUFFER_H_

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace zoom {

class AlignedBuffer {
 public:
  // An empty buffer (data() == nullptr, size() == 0).
  AlignedBuffer() = default;

  // Allocates `size` bytes aligned to `alignment`. REQUIRES: `alignment` is a
  // power of two and >= sizeof(void*). The memory is zero-filled when `zero`.
  // Returns InvalidArgument for a bad alignment, ResourceExhausted when the
  // allocation fails.
  static absl::StatusOr<AlignedBuffer> Allocate(size_t size, size_t alignment,
                                                bool zero = true);

  AlignedBuffer(AlignedBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)),
        size_(std::exchange(other.size_, 0)),
        alignment_(std::exchange(other.alignment_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept {
    if (this != &other) {
      std::free(data_);
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
      alignment_ = std::exchange(other.alignment_, 0);
    }
    return *this;
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer() { std::free(data_); }

  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  size_t alignment() const { return alignment_; }
  bool empty() const { return size_ == 0; }

  absl::Span<uint8_t> span() { return absl::MakeSpan(data_, size_); }
  absl::Span<const uint8_t> span() const {
    return absl::MakeConstSpan(data_, size_);
  }

  // Views the buffer as `T`s. REQUIRES: alignment() >= alignof(T).
  template <typename T>
  T* as() {
    return reinterpret_cast<T*>(data_);
  }
  template <typename T>
  const T* as() const {
    return reinterpret_cast<const T*>(data_);
  }

 private:
  AlignedBuffer(uint8_t* data, size_t size, size_t alignment)
      : data_(data), size_(size), alignment_(alignment) {}

  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  size_t alignment_ = 0;
};

// Rounds `x` up / down to a multiple of `a` (a power of two).
constexpr uint64_t AlignUp(uint64_t x, uint64_t a) { return (x + a - 1) & ~(a - 1); }
constexpr uint64_t AlignDown(uint64_t x, uint64_t a) { return x & ~(a - 1); }
constexpr bool IsPowerOfTwo(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }
inline bool IsAligned(const void* p, size_t a) {
  return (reinterpret_cast<uintptr_t>(p) & (a - 1)) == 0;
}

}  // namespace zoom

#endif  // ZOOM_COMMON_ALIGNED_BUFFER_H_
