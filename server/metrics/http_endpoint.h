// File: server/metrics/http_endpoint.h
//
// HttpEndpoint: a minimal HTTP/1.0 server for GET /metrics: one thread
// running a poll loop over non-blocking sockets, one request per
// connection. Connections are served concurrently; each has a deadline for
// the whole exchange (request_timeout), and at most max_connections are
// open (the oldest is closed for a new one), so idle or trickling clients
// cannot hold scrapes back. It replaces prometheus-cpp's civetweb
// Exposer: civetweb's Debian build runs handlers on 100 KiB stacks, and
// glibc's printf overflows them once libquadmath (loaded with OpenBLAS via
// libgfortran) has registered its printf modifiers, crashing the server on
// the first scrape.
//
// Thread safety: the body callback runs on the endpoint's thread and must be
// thread-safe; Start/destruction from one thread.
#ifndef ZOOM_SERVER_METRICS_HTTP_ENDPOINT_H_
#define ZOOM_SERVER_METRICS_HTTP_ENDPOINT_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "absl/time/time.h"

#include "absl/status/statusor.h"

namespace zoom::server {

struct HttpEndpointOptions {
  // A connection is closed when its request and answer take longer.
  absl::Duration request_timeout = absl::Seconds(5);
  int max_connections = 256;
  // Called with the request's Authorization header ("" when absent); false
  // answers 401. Empty: every request is allowed.
  std::function<bool(std::string_view authorization)> authorize;
};

class HttpEndpoint {
 public:
  // Listens on `address` ("port", "ipv4:port" or "[ipv6]:port"; port 0 =
  // any) and answers GET `path` with body() as text/plain (version 0.0.4),
  // other paths with 404. Unavailable if it cannot listen.
  static absl::StatusOr<std::unique_ptr<HttpEndpoint>> Start(
      const std::string& address, const std::string& path,
      std::function<std::string()> body, const HttpEndpointOptions& options = {});
  ~HttpEndpoint();  // stops and joins

  int port() const { return port_; }

 private:
  struct Conn;
  HttpEndpoint() = default;
  void Serve();
  // The answer to a complete request (headers read).
  std::string Respond(const std::string& request) const;

  int listen_fd_ = -1;
  int port_ = 0;
  std::string path_;
  std::function<std::string()> body_;
  HttpEndpointOptions options_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace zoom::server

#endif  // ZOOM_SERVER_METRICS_HTTP_ENDPOINT_H_
