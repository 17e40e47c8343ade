#include "server/grpc/auth.h"

#include <grpcpp/grpcpp.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/binary_io.h"
#include "common/status_macros.h"

namespace zoom::server {
namespace {

std::array<uint8_t, 32> Sha256(std::string_view s) {
  std::array<uint8_t, 32> d;
  SHA256(reinterpret_cast<const unsigned char*>(s.data()), s.size(), d.data());
  return d;
}

constexpr char kHowToSend[] =
    "send 'authorization: Bearer <key>' (or 'api-key: <key>') with the call";

}  // namespace

absl::StatusOr<ApiKeys> ApiKeys::Parse(std::string_view text) {
  ApiKeys keys;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(absl::string_view(text.data(), text.size()), '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    const size_t sp = line.find_first_of(" \t");
    if (sp == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("API key file line ", line_no, ": want 'admin KEY' or 'read KEY'"));
    }
    const absl::string_view role = line.substr(0, sp);
    const absl::string_view key = absl::StripLeadingAsciiWhitespace(line.substr(sp));
    Role r;
    if (role == "admin") {
      r = Role::kAdmin;
    } else if (role == "read") {
      r = Role::kRead;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "API key file line ", line_no, ": unknown role (want admin or read)"));
    }
    if (key.size() < 16 || key.size() > 256) {
      return absl::InvalidArgumentError(absl::StrCat(
          "API key file line ", line_no, ": a key must be 16..256 characters (it has ",
          key.size(), ")"));
    }
    for (char c : key) {
      if (c <= 0x20 || c >= 0x7f) {
        return absl::InvalidArgumentError(absl::StrCat(
            "API key file line ", line_no, ": a key is printable ASCII without spaces"));
      }
    }
    keys.keys_.push_back({Sha256(std::string_view(key.data(), key.size())), r});
  }
  if (keys.keys_.empty()) {
    return absl::InvalidArgumentError("the API key file holds no key");
  }
  return keys;
}

absl::StatusOr<ApiKeys> ApiKeys::Load(const std::string& path) {
  auto text = ReadFileToString(path);
  if (!text.ok()) {
    return absl::Status(text.status().code(),
                        absl::StrCat("API key file ", path, ": ", text.status().message()));
  }
  return Parse(*text);
}

Role ApiKeys::Check(std::string_view key) const {
  const std::array<uint8_t, 32> d = Sha256(key);
  int role = 0;
  for (const Entry& e : keys_) {
    // Constant time: every digest is compared in full, whatever matched.
    const int match = CRYPTO_memcmp(d.data(), e.digest.data(), d.size()) == 0;
    const int r = static_cast<int>(e.role);
    role = (role | (-match & r));
  }
  return role >= static_cast<int>(Role::kAdmin) ? Role::kAdmin
         : role == static_cast<int>(Role::kRead) ? Role::kRead
                                                 : Role::kNone;
}

absl::Status Authenticator::Load() {
  if (path_.empty()) return absl::OkStatus();
  ZOOM_ASSIGN_OR_RETURN(ApiKeys keys, ApiKeys::Load(path_));
  auto shared = std::make_shared<const ApiKeys>(std::move(keys));
  absl::MutexLock l(&mu_);
  keys_ = std::move(shared);
  return absl::OkStatus();
}

absl::Status Authenticator::AuthorizeHeader(std::string_view authorization, Role needed) const {
  if (path_.empty()) return absl::OkStatus();
  std::shared_ptr<const ApiKeys> keys;
  {
    absl::MutexLock l(&mu_);
    keys = keys_;
  }
  absl::string_view value(authorization.data(), authorization.size());
  value = absl::StripAsciiWhitespace(value);
  if (value.size() > 7 && absl::EqualsIgnoreCase(value.substr(0, 7), "bearer ")) {
    value = absl::StripLeadingAsciiWhitespace(value.substr(7));
  }
  if (value.empty()) {
    return absl::UnauthenticatedError(absl::StrCat("this server requires an API key: ", kHowToSend));
  }
  const Role role = keys ? keys->Check(std::string_view(value.data(), value.size())) : Role::kNone;
  if (role == Role::kNone) {
    return absl::UnauthenticatedError(absl::StrCat("the API key is not valid: ", kHowToSend));
  }
  if (static_cast<int>(role) < static_cast<int>(needed)) {
    return absl::PermissionDeniedError(
        "this API key may only read (Search, SearchBatch, Count, Scroll, Get, GetCollection, "
        "ListCollections, ListSnapshots, GetServerInfo, ListModels, TopK, StreamTopK); this call "
        "needs an admin key");
  }
  return absl::OkStatus();
}

absl::Status Authenticator::Authorize(const grpc::ServerContextBase& ctx, Role needed) const {
  if (path_.empty()) return absl::OkStatus();
  const auto& md = ctx.client_metadata();
  for (const char* name : {"authorization", "api-key"}) {
    auto it = md.find(name);
    if (it != md.end()) {
      return AuthorizeHeader(std::string_view(it->second.data(), it->second.size()), needed);
    }
  }
  return AuthorizeHeader("", needed);
}

}  // namespace zoom::server
