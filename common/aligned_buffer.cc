#include "common/aligned_buffer.h"

#include "absl/strings/str_cat.h"

namespace zoom {

absl::StatusOr<AlignedBuffer> AlignedBuffer::Allocate(size_t size,
                                                      size_t alignment,
                                                      bool zero) {
  if (!IsPowerOfTwo(alignment) || alignment < sizeof(void*)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "alignment ", alignment, " is not a power of two >= ", sizeof(void*)));
  }
  if (size == 0) return AlignedBuffer(nullptr, 0, alignment);
  void* p = nullptr;
  // Round the size up so that a whole number of aligned units is owned.
  const size_t bytes = AlignUp(size, alignment);
  if (posix_memalign(&p, alignment, bytes) != 0 || p == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot allocate ", size, " bytes aligned to ", alignment));
  }
  if (zero) std::memset(p, 0, bytes);
  return AlignedBuffer(static_cast<uint8_t*>(p), size, alignment);
}

}  // namespace zoom
