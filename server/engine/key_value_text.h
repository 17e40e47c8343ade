// File: server/engine/key_value_text.h
//
// The "key=value" line text of the engine's small durable records (the
// collection config, the collection manifest, a snapshot's manifest): one
// parser and one typed reader, so every record reads alike. Unknown keys are
// kept (a reader ignores what it does not know); a missing key leaves the
// caller's default.
#ifndef ZOOM_SERVER_ENGINE_KEY_VALUE_TEXT_H_
#define ZOOM_SERVER_ENGINE_KEY_VALUE_TEXT_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace zoom::server {

class KeyValueText {
 public:
  // DataLoss naming `what` for a line without '='.
  static absl::StatusOr<KeyValueText> Parse(std::string_view text, std::string_view what);

  bool Has(std::string_view key) const {
    return kv_.contains(absl::string_view(key.data(), key.size()));
  }
  // The value, or `fallback` when the key is absent.
  std::string String(std::string_view key, std::string_view fallback = "") const;
  // Leaves *out as it is when the key is absent; DataLoss for a value that
  // is not a number of T's range.
  absl::Status Number(std::string_view key, uint32_t* out) const;
  absl::Status Number(std::string_view key, uint64_t* out) const;
  absl::Status Number(std::string_view key, double* out) const;
  // A comma-separated list of uint32 ("" or absent: empty).
  absl::Status NumberList(std::string_view key, std::vector<uint32_t>* out) const;

 private:
  absl::flat_hash_map<std::string, std::string> kv_;
};

}  // namespace zoom::server

#endif  // ZOOM_SERVER_ENGINE_KEY_VALUE_TEXT_H_
