#include "server/engine/key_value_text.h"

#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace zoom::server {
namespace {

absl::string_view AV(std::string_view s) { return absl::string_view(s.data(), s.size()); }

absl::Status BadValue(std::string_view key) {
  return absl::DataLossError(absl::StrCat("bad value for ", AV(key)));
}

}  // namespace

absl::StatusOr<KeyValueText> KeyValueText::Parse(std::string_view text, std::string_view what) {
  KeyValueText out;
  for (absl::string_view line : absl::StrSplit(AV(text), '\n', absl::SkipEmpty())) {
    const size_t eq = line.find('=');
    if (eq == absl::string_view::npos) {
      return absl::DataLossError(absl::StrCat("malformed ", AV(what), " line '", line, "'"));
    }
    out.kv_[std::string(line.substr(0, eq))] = std::string(line.substr(eq + 1));
  }
  return out;
}

std::string KeyValueText::String(std::string_view key, std::string_view fallback) const {
  auto it = kv_.find(AV(key));
  return it == kv_.end() ? std::string(fallback) : it->second;
}

absl::Status KeyValueText::Number(std::string_view key, uint64_t* out) const {
  auto it = kv_.find(AV(key));
  if (it == kv_.end()) return absl::OkStatus();
  if (!absl::SimpleAtoi(it->second, out)) return BadValue(key);
  return absl::OkStatus();
}

absl::Status KeyValueText::Number(std::string_view key, uint32_t* out) const {
  auto it = kv_.find(AV(key));
  if (it == kv_.end()) return absl::OkStatus();
  uint64_t v = 0;
  if (!absl::SimpleAtoi(it->second, &v) || v > std::numeric_limits<uint32_t>::max()) {
    return BadValue(key);
  }
  *out = static_cast<uint32_t>(v);
  return absl::OkStatus();
}

absl::Status KeyValueText::Number(std::string_view key, double* out) const {
  auto it = kv_.find(AV(key));
  if (it == kv_.end()) return absl::OkStatus();
  if (!absl::SimpleAtod(it->second, out)) return BadValue(key);
  return absl::OkStatus();
}

absl::Status KeyValueText::NumberList(std::string_view key, std::vector<uint32_t>* out) const {
  out->clear();
  auto it = kv_.find(AV(key));
  if (it == kv_.end()) return absl::OkStatus();
  for (absl::string_view part : absl::StrSplit(it->second, ',', absl::SkipEmpty())) {
    uint32_t v = 0;
    if (!absl::SimpleAtoi(part, &v)) return BadValue(key);
    out->push_back(v);
  }
  return absl::OkStatus();
}

}  // namespace zoom::server
