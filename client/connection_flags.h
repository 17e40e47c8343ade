// File: client/connection_flags.h
//
// The connection flags zoomctl and zoomload share (defined once, in the
// zoom_client_flags library those binaries link):
//
//   --api_key_file FILE   the API key (the file's first line); or the
//                         ZOOM_API_KEY environment variable; or --api_key
//                         KEY (visible in process lists: prefer the others)
//   --tls_ca FILE         TLS: CA certificates (PEM) the server's must chain to
//   --tls_cert FILE       mTLS: this client's certificate chain (PEM)
//   --tls_key FILE        mTLS: this client's private key (PEM)
//   --tls_server_name N   the name to verify in the server's certificate
#ifndef ZOOM_CLIENT_CONNECTION_FLAGS_H_
#define ZOOM_CLIENT_CONNECTION_FLAGS_H_

#include "absl/status/status.h"
#include "client/zoom_client.h"

namespace zoom::client {

// Fills the API key and TLS fields of `options` from the flags above.
// InvalidArgument when the key file cannot be read or is empty.
absl::Status ApplyConnectionFlags(ClientOptions* options);

// The usage text of the flags above (for --help).
const char* ConnectionFlagsUsage();

}  // namespace zoom::client

#endif  // ZOOM_CLIENT_CONNECTION_FLAGS_H_
