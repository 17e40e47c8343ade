#include "client/connection_flags.h"

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

ABSL_FLAG(std::string, api_key, "", "API key (visible in process lists: prefer --api_key_file)");
ABSL_FLAG(std::string, api_key_file, "", "file whose first line is the API key");
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
    std::string line;
    if (!in || !std::getline(in, line)) {
      return absl::InvalidArgumentError(absl::StrCat("--api_key_file ", key_file,
                                                     " cannot be read"));
    }
    options->api_key = std::string(absl::StripAsciiWhitespace(line));
    if (options->api_key.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("--api_key_file ", key_file,
                                                     ": the first line is empty"));
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
  return R"(  --api_key_file FILE API key (the file's first line; or $ZOOM_API_KEY, or
                      --api_key KEY, which process lists show)
  --tls_ca FILE       TLS: CA certificates (PEM) the server's must chain to
  --tls_cert FILE     mTLS: this client's certificate (PEM), with --tls_key FILE
  --tls_server_name N the name to verify in the server's certificate
)";
}

}  // namespace zoom::client
