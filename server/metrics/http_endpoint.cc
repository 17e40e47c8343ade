#include "server/metrics/http_endpoint.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace zoom::server {
namespace {

void WriteAll(int fd, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    const ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpEndpoint>> HttpEndpoint::Start(
    const std::string& address, const std::string& path, std::function<std::string()> body) {
  std::string host, port;
  if (!address.empty() && address.front() == '[') {
    const size_t close = address.find("]:");
    if (close == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("bad address ", address));
    }
    host = address.substr(1, close - 1);
    port = address.substr(close + 2);
  } else if (const size_t colon = address.rfind(':'); colon != std::string::npos) {
    host = address.substr(0, colon);
    port = address.substr(colon + 1);
  } else {
    port = address;
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICHOST | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &res);
      rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics address ", address, ": ", gai_strerror(rc)));
  }
  std::unique_ptr<HttpEndpoint> ep(new HttpEndpoint());
  std::string error = "no address";
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      error = std::strerror(errno);
      continue;
    }
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, 64) == 0) {
      ep->listen_fd_ = fd;
      break;
    }
    error = std::strerror(errno);
    ::close(fd);
  }
  freeaddrinfo(res);
  if (ep->listen_fd_ < 0) {
    return absl::UnavailableError(absl::StrCat("metrics: cannot listen on \"", address, "\": ",
                                               error));
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  getsockname(ep->listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len);
  ep->port_ = ntohs(bound.ss_family == AF_INET6
                        ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                        : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  ep->path_ = path;
  ep->body_ = std::move(body);
  HttpEndpoint* raw = ep.get();
  ep->thread_ = std::thread([raw] { raw->Serve(); });
  return ep;
}

HttpEndpoint::~HttpEndpoint() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

void HttpEndpoint::Serve() {
  while (!stop_.load()) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    Handle(fd);
    ::close(fd);
  }
}

void HttpEndpoint::Handle(int fd) {
  timeval tv{2, 0};  // a stalled client cannot hold the endpoint for long
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  std::string request;
  char buf[2048];
  while (request.find("\r\n\r\n") == std::string::npos && request.size() < 16384) {
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    request.append(buf, static_cast<size_t>(n));
  }
  const size_t line_end = request.find("\r\n");
  const std::string line = request.substr(0, line_end);
  // "GET /path HTTP/1.x"
  const size_t sp1 = line.find(' ');
  const size_t sp2 = line.find(' ', sp1 + 1);
  const std::string method = line.substr(0, sp1);
  std::string target = sp1 == std::string::npos ? "" : line.substr(sp1 + 1, sp2 - sp1 - 1);
  if (const size_t q = target.find('?'); q != std::string::npos) target.resize(q);
  if (method != "GET" && method != "HEAD") {
    WriteAll(fd, "HTTP/1.0 405 Method Not Allowed\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    return;
  }
  if (target != path_) {
    const std::string msg = absl::StrCat("not found; metrics are at ", path_, "\n");
    WriteAll(fd, absl::StrCat("HTTP/1.0 404 Not Found\r\nContent-Type: text/plain\r\n"
                              "Content-Length: ", msg.size(), "\r\nConnection: close\r\n\r\n", msg));
    return;
  }
  const std::string body = body_();
  WriteAll(fd, absl::StrCat("HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4; "
                            "charset=utf-8\r\nContent-Length: ", body.size(),
                            "\r\nConnection: close\r\n\r\n"));
  if (method == "GET") WriteAll(fd, body);
}

}  // namespace zoom::server
