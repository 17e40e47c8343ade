// File: tests/testing/http_get.h
//
// A minimal HTTP/1.0 GET over a plain POSIX socket, for tests of the
// metrics endpoint (no HTTP client library in the project):
//
//   ASSERT_OK_AND_ASSIGN(std::string body,
//                        HttpGet("127.0.0.1", metrics->port(), "/metrics"));
#ifndef ZOOM_TESTS_TESTING_HTTP_GET_H_
#define ZOOM_TESTS_TESTING_HTTP_GET_H_

#include <string>

#include "absl/status/statusor.h"

namespace zoom::testing {

// GETs http://host:port/path and returns the body of a 200 response
// (chunked transfer encoding is decoded). `host` is a name or a numeric
// address. Unavailable if the connection fails or the whole exchange takes
// longer than `timeout_ms`; Internal for a non-200 status or a malformed
// response.
absl::StatusOr<std::string> HttpGet(const std::string& host, int port,
                                    const std::string& path,
                                    int timeout_ms = 30000);
// As above with `extra_headers` ("Name: value\r\n" lines) in the request.
absl::StatusOr<std::string> HttpGet(const std::string& host, int port,
                                    const std::string& path, int timeout_ms,
                                    const std::string& extra_headers);

}  // namespace zoom::testing

#endif  // ZOOM_TESTS_TESTING_HTTP_GET_H_
