// File: common/crc32c.h
//
// CRC-32C (Castagnoli), the checksum of every zoomd file format. Uses the
// SSE4.2 instruction when the CPU has it (checked at run time), else a table.
#ifndef ZOOM_COMMON_CRC32C_H_
#define ZOOM_COMMON_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace zoom {

// Returns the CRC-32C of `data[0, n)` continued from `crc` (0 to start):
// Crc32cExtend(Crc32cExtend(0, a), b) == crc of a followed by b.
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n);
inline uint32_t Crc32c(const void* data, size_t n) {
  return Crc32cExtend(0, data, n);
}

}  // namespace zoom

#endif  // ZOOM_COMMON_CRC32C_H_
