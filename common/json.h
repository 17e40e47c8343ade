// File: common/json.h
//
// JsonQuote: a string as a JSON string literal (quotes included; ", \ and
// control characters escaped; other bytes, UTF-8 included, kept as they
// are). Shared by the tools that write JSON by hand (zoomctl, zoomload,
// zoombench).
#ifndef ZOOM_COMMON_JSON_H_
#define ZOOM_COMMON_JSON_H_

#include <string>
#include <string_view>

namespace zoom {

inline std::string JsonQuote(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "\"";
  out.reserve(s.size() + 2);
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += "\\u00";
          out += kHex[(c >> 4) & 0xf];
          out += kHex[c & 0xf];
        } else {
          out += c;
        }
    }
  }
  out += '"';
  return out;
}

}  // namespace zoom

#endif  // ZOOM_COMMON_JSON_H_
