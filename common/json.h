// File: common/json.h
//
// JsonQuote: a string as a JSON string literal (quotes included; ", \ and
// control characters escaped; other bytes, UTF-8 included, kept as they
// are). Shared by the tools that write JSON by hand (zoomctl, zoomload,
// zoombench).
//
// JsonUintField: the value of the first `"key": <unsigned integer>` in a JSON
// text (at any depth; occurrences of "key" not followed by ':' and digits are
// skipped), for the small flat metadata files (model meta.json). nullopt when
// absent or not an integer of at most 19 digits (2.5 and 1e3 are not).
#ifndef ZOOM_COMMON_JSON_H_
#define ZOOM_COMMON_JSON_H_

#include <cstdint>
#include <optional>
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

inline std::optional<uint64_t> JsonUintField(std::string_view json, std::string_view key) {
  const std::string quoted = std::string("\"").append(key).append("\"");
  auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  size_t pos = 0;
  while ((pos = json.find(quoted, pos)) != std::string_view::npos) {
    size_t i = pos + quoted.size();
    while (i < json.size() && space(json[i])) ++i;
    if (i < json.size() && json[i] == ':') {
      ++i;
      while (i < json.size() && space(json[i])) ++i;
      uint64_t value = 0;
      size_t digits = 0;
      while (i < json.size() && json[i] >= '0' && json[i] <= '9' && digits < 19) {
        value = value * 10 + static_cast<uint64_t>(json[i] - '0');
        ++i;
        ++digits;
      }
      // An integer: not followed by more digits, a fraction or an exponent
      // ("2.5" is not 2).
      const bool more = i < json.size() && ((json[i] >= '0' && json[i] <= '9') ||
                                            json[i] == '.' || json[i] == 'e' || json[i] == 'E');
      if (digits > 0 && !more) return value;
    }
    pos += quoted.size();
  }
  return std::nullopt;
}

}  // namespace zoom

#endif  // ZOOM_COMMON_JSON_H_
