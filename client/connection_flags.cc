#include "client/connection_flags.h"

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

ABSL_FLAG(std::string, api_key, "", "API key (visible in process lists: prefer --api_key_file)");
ABSL_FLAG(std::string, api_key_file, "",
          "file holding the API key (alone on a line; or the server's key file: its first "
          "admin key)");
ABSL_FLAG(std::string, tls_ca, "", "TLS: CA certificates (PEM) the server's must chain to");
ABSL_FLAG(std::string, tls_cert, "", "mTLS: this client's certificate chain (PEM)");
ABSL_FLAG(std::string, tls_key, "", "mTLS: this client's private key (PEM)");
ABSL_FLAG(std::string, tls_server_name, "", "TLS: the name to verify in the server's certificate");

namespace zoom::client {

absl::Status ApplyConnectionFlags(ClientOptions* options) {
  options->api_key = absl::GetFlag(FLAGS_api_key);
  const std::string key_file = absl::GetFlag(FLAGS_api_key_file);
  if (!key_file.empty()) {
    std::ifstream in(key_file);
    if (!in) {
      return absl::InvalidArgumentError(absl::StrCat("--api_key_file ", key_file,
                                                     " cannot be read"));
    }
    // The key alone on the first line that is not blank or a '#' comment;
    // or the server's own key file ("ROLE KEY" lines, ROLE admin or read):
    // its first admin key, else its first read key.
    std::string line, admin, read;
    bool server_format = false;
    while (std::getline(in, line)) {
      const absl::string_view t = absl::StripAsciiWhitespace(line);
      if (t.empty() || t.front() == '#') continue;
      const std::vector<absl::string_view> words =
          absl::StrSplit(t, absl::ByAnyChar(" \t"), absl::SkipEmpty());
      if (words.size() == 1 && !server_format) {
        options->api_key = std::string(words[0]);
        break;
      }
      if (words.size() == 2 && (words[0] == "admin" || words[0] == "read")) {
        server_format = true;
        std::string& slot = words[0] == "admin" ? admin : read;
        if (slot.empty()) slot = std::string(words[1]);
        continue;
      }
      return absl::InvalidArgumentError(absl::StrCat(
          "--api_key_file ", key_file,
          ": expected the key alone on a line, or the server's key file (lines \"admin KEY\" "
          "or \"read KEY\")"));
    }
    if (server_format) options->api_key = !admin.empty() ? admin : read;
    if (options->api_key.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("--api_key_file ", key_file,
                                                     ": no key in it"));
    }
  } else if (options->api_key.empty()) {
    if (const char* env = std::getenv("ZOOM_API_KEY")) options->api_key = env;
  }
  options->tls_ca_file = absl::GetFlag(FLAGS_tls_ca);
  options->tls_cert_file = absl::GetFlag(FLAGS_tls_cert);
  options->tls_key_file = absl::GetFlag(FLAGS_tls_key);
  options->tls_server_name = absl::GetFlag(FLAGS_tls_server_name);
  return absl::OkStatus();
}

const char* ConnectionFlagsUsage() {
  return R"(  --api_key_file FILE API key (alone on its first line, or the server's key
                      file: its first admin key; or $ZOOM_API_KEY, or
                      --api_key KEY, which process lists show)
  --tls_ca FILE       TLS: CA certificates (PEM) the server's must chain to
  --tls_cert FILE     mTLS: this client's certificate (PEM), with --tls_key FILE
  --tls_server_name N the name to verify in the server's certificate
)";
}

}  // namespace zoom::client
