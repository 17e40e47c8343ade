// File: common/endian.h
//
// Little-endian integers of 1..8 bytes appended to / read from byte
// strings, for the project's hand-laid file formats (snapshot archives and
// their entries).
#ifndef ZOOM_COMMON_ENDIAN_H_
#define ZOOM_COMMON_ENDIAN_H_

#include <cstdint>
#include <string>

namespace zoom {

// Appends the low `bytes` bytes of v, least significant first.
inline void PutLittleEndian(std::string* s, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) s->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// The `bytes`-byte little-endian number at p.
inline uint64_t GetLittleEndian(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

}  // namespace zoom

#endif  // ZOOM_COMMON_ENDIAN_H_
