// File: common/echo.h
//
// EchoForMessage: a value a client sent, as it may appear in an error
// message: at most `max_bytes` of it (then "..." and its full length), with
// every byte that is not printable ASCII written as \xNN. Status messages
// travel in gRPC trailers (8 KiB by default on the client): echoing a 10 KB
// name whole made the client fail with "metadata size exceeds limit"
// instead of seeing the error; raw bytes could make the message invalid
// UTF-8.
#ifndef ZOOM_COMMON_ECHO_H_
#define ZOOM_COMMON_ECHO_H_

#include <cstddef>
#include <string>
#include <string_view>

namespace zoom {

inline std::string EchoForMessage(std::string_view s, size_t max_bytes = 64) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  const size_t n = s.size() < max_bytes ? s.size() : max_bytes;
  out.reserve(n + 16);
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    }
  }
  if (s.size() > max_bytes) {
    out += "... (";
    out += std::to_string(s.size());
    out += " bytes)";
  }
  return out;
}

// A description of the character at s[pos] for "has the character X"
// messages: the printable ASCII character quoted, else its UTF-8 sequence
// as a code point (U+00E9) when valid, else the byte (\xNN).
inline std::string DescribeCharAt(std::string_view s, size_t pos) {
  const unsigned char c = static_cast<unsigned char>(s[pos]);
  if (c >= 0x20 && c < 0x7f) return std::string("'") + static_cast<char>(c) + "'";
  int len = c >= 0xf0 && c < 0xf8 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 && c < 0xe0 ? 2 : 0;
  if (c >= 0xf8) len = 0;
  char buf[32];
  if (len > 0 && pos + len <= s.size()) {
    uint32_t cp = c & (0x7f >> len);
    bool ok = true;
    for (int i = 1; i < len; ++i) {
      const unsigned char d = static_cast<unsigned char>(s[pos + i]);
      if ((d & 0xc0) != 0x80) ok = false;
      cp = (cp << 6) | (d & 0x3f);
    }
    if (ok) {
      std::snprintf(buf, sizeof(buf), "U+%04X", cp);
      return std::string("'") + std::string(s.substr(pos, len)) + "' (" + buf + ")";
    }
  }
  std::snprintf(buf, sizeof(buf), "the byte \\x%02x", c);
  return buf;
}

}  // namespace zoom

#endif  // ZOOM_COMMON_ECHO_H_
