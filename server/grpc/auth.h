// File: server/grpc/auth.h
//
// ApiKeys / Authenticator: API keys for zoomd's services.
//
// The key file (--api_key_file) has one key per line, "ROLE KEY", ROLE
// `admin` (every call) or `read` (the read class: Search, SearchBatch, Get,
// GetCollection, ListCollections, ListSnapshots, GetServerInfo, ListModels, TopK,
// StreamTopK); KEY is 16
// to 256 printable ASCII characters without spaces; blank lines and lines
// starting with '#' are ignored. A client sends its key as
// `authorization: Bearer KEY` or `api-key: KEY`. Keys are kept as SHA-256
// digests and a presented key is compared against every one of them in
// constant time (no early exit, no length leak).
//
// Without a key file every call is allowed (the embedded default on
// loopback). grpc.health.v1.Health stays open (probes carry no key); every
// other service checks, both reflection versions (grpc.reflection.v1 and
// v1alpha) included.
//
// Thread safety: Authorize is safe from many threads, also during Reload
// (SIGHUP), which swaps the key set atomically; a failed reload keeps the
// previous keys.
#ifndef ZOOM_SERVER_GRPC_AUTH_H_
#define ZOOM_SERVER_GRPC_AUTH_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace grpc {
class ServerContextBase;
}

namespace zoom::server {

enum class Role { kNone = 0, kRead = 1, kAdmin = 2 };

class ApiKeys {
 public:
  // Parses a key file's text; InvalidArgument naming the line.
  static absl::StatusOr<ApiKeys> Parse(std::string_view text);
  static absl::StatusOr<ApiKeys> Load(const std::string& path);
  // The role of `key` (kNone when it matches none), in constant time for a
  // given number of keys.
  Role Check(std::string_view key) const;
  size_t size() const { return keys_.size(); }

 private:
  struct Entry {
    std::array<uint8_t, 32> digest;
    Role role;
  };
  std::vector<Entry> keys_;
};

class Authenticator {
 public:
  // No file: every call allowed. Otherwise Load() must succeed first.
  explicit Authenticator(std::string key_file = "") : path_(std::move(key_file)) {}
  // (Re)reads the key file; on error the previous keys stay.
  absl::Status Load();
  bool enabled() const { return !path_.empty(); }
  // OK when the call's metadata carries a key of at least `needed`;
  // UNAUTHENTICATED (no or unknown key) or PERMISSION_DENIED (a read key
  // for a call that writes or administers) otherwise.
  absl::Status Authorize(const grpc::ServerContextBase& ctx, Role needed) const;
  // The same for a header value ("Bearer KEY").
  absl::Status AuthorizeHeader(std::string_view authorization, Role needed) const;

 private:
  std::string path_;
  mutable absl::Mutex mu_;
  std::shared_ptr<const ApiKeys> keys_ ABSL_GUARDED_BY(mu_);
};

}  // namespace zoom::server

#endif  // ZOOM_SERVER_GRPC_AUTH_H_
