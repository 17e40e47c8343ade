#include "server/metrics/http_endpoint.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/time/clock.h"

#include "absl/strings/str_cat.h"

namespace zoom::server {
absl::StatusOr<std::unique_ptr<HttpEndpoint>> HttpEndpoint::Start(
    const std::string& address, const std::string& path, std::function<std::string()> body,
    const HttpEndpointOptions& options) {
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
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                            ai->ai_protocol);
    if (fd < 0) {
      error = std::strerror(errno);
      continue;
    }
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, 256) == 0) {
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
  ep->options_ = options;
  HttpEndpoint* raw = ep.get();
  ep->thread_ = std::thread([raw] { raw->Serve(); });
  return ep;
}

HttpEndpoint::~HttpEndpoint() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

struct HttpEndpoint::Conn {
  int fd = -1;
  std::string in;
  std::string out;
  size_t sent = 0;
  bool answering = false;  // the request is complete; writing the answer
  absl::Time deadline;
  absl::Time opened;
};

void HttpEndpoint::Serve() {
  std::vector<Conn> conns;
  std::vector<pollfd> fds;
  auto close_conn = [&](size_t i) {
    ::close(conns[i].fd);
    conns[i] = std::move(conns.back());
    conns.pop_back();
  };
  char buf[4096];
  while (!stop_.load()) {
    fds.clear();
    fds.push_back({listen_fd_, POLLIN, 0});
    for (const Conn& c : conns) fds.push_back({c.fd, static_cast<short>(c.answering ? POLLOUT : POLLIN), 0});
    if (::poll(fds.data(), fds.size(), 100) < 0 && errno != EINTR) continue;
    const absl::Time now = absl::Now();
    // Connections first (indices match fds[1..] before any change).
    for (size_t i = conns.size(); i-- > 0;) {
      Conn& c = conns[i];
      const short re = fds[i + 1].revents;
      bool done = false;
      if (re & (POLLERR | POLLHUP | POLLNVAL)) {
        done = !(re & POLLIN);  // a half-closed client may still have sent its request
      }
      if (!done && !c.answering && (re & POLLIN)) {
        for (;;) {
          const ssize_t n = ::recv(c.fd, buf, sizeof(buf), 0);
          if (n > 0) {
            c.in.append(buf, static_cast<size_t>(n));
            if (c.in.size() > 16384) break;
            continue;
          }
          if (n == 0) done = c.in.find("\r\n\r\n") == std::string::npos;  // closed early
          break;  // EAGAIN or error
        }
        if (c.in.find("\r\n\r\n") != std::string::npos || c.in.size() > 16384) {
          c.out = Respond(c.in);
          c.answering = true;
          done = false;
        }
      }
      if (!done && c.answering && (re & POLLOUT || c.sent == 0)) {
        while (c.sent < c.out.size()) {
          const ssize_t n = ::send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent,
                                   MSG_NOSIGNAL);
          if (n > 0) {
            c.sent += static_cast<size_t>(n);
            continue;
          }
          if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) break;
          done = true;  // the client went away
          break;
        }
        if (c.sent >= c.out.size()) done = true;
      }
      if (!done && now > c.deadline) done = true;  // too slow: idle, or trickling
      if (done) close_conn(i);
    }
    // New connections (after the others: their fds are not in this poll).
    if (fds[0].revents & POLLIN) {
      for (;;) {
        const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) break;
        if (static_cast<int>(conns.size()) >= options_.max_connections) {
          // Make room: the oldest connection goes.
          size_t oldest = 0;
          for (size_t i = 1; i < conns.size(); ++i) {
            if (conns[i].opened < conns[oldest].opened) oldest = i;
          }
          close_conn(oldest);
        }
        Conn c;
        c.fd = fd;
        c.opened = now;
        c.deadline = now + options_.request_timeout;
        conns.push_back(std::move(c));
      }
    }
  }
  for (const Conn& c : conns) ::close(c.fd);
}

std::string HttpEndpoint::Respond(const std::string& request) const {
  const size_t line_end = request.find("\r\n");
  const std::string line = request.substr(0, line_end);
  // "GET /path HTTP/1.x"
  const size_t sp1 = line.find(' ');
  const size_t sp2 = line.find(' ', sp1 + 1);
  const std::string method = line.substr(0, sp1);
  std::string target = sp1 == std::string::npos ? "" : line.substr(sp1 + 1, sp2 - sp1 - 1);
  if (const size_t q = target.find('?'); q != std::string::npos) target.resize(q);
  if (method != "GET" && method != "HEAD") {
    return "HTTP/1.0 405 Method Not Allowed\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
  }
  if (options_.authorize) {
    // The Authorization header, case-insensitively.
    std::string auth;
    size_t pos = line_end == std::string::npos ? request.size() : line_end + 2;
    while (pos < request.size()) {
      const size_t end = request.find("\r\n", pos);
      const std::string header = request.substr(pos, end == std::string::npos ? end : end - pos);
      if (header.empty()) break;
      const size_t colon = header.find(':');
      if (colon != std::string::npos) {
        std::string name = header.substr(0, colon);
        for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        if (name == "authorization") {
          size_t v = colon + 1;
          while (v < header.size() && header[v] == ' ') ++v;
          auth = header.substr(v);
        }
      }
      if (end == std::string::npos) break;
      pos = end + 2;
    }
    if (!options_.authorize(auth)) {
      const std::string msg = "unauthorized: send Authorization: Bearer <admin key>\n";
      return absl::StrCat("HTTP/1.0 401 Unauthorized\r\nWWW-Authenticate: Bearer\r\n"
                          "Content-Type: text/plain\r\nContent-Length: ", msg.size(),
                          "\r\nConnection: close\r\n\r\n", msg);
    }
  }
  if (target != path_) {
    const std::string msg = absl::StrCat("not found; metrics are at ", path_, "\n");
    return absl::StrCat("HTTP/1.0 404 Not Found\r\nContent-Type: text/plain\r\n"
                        "Content-Length: ", msg.size(), "\r\nConnection: close\r\n\r\n", msg);
  }
  const std::string body = body_();
  std::string out = absl::StrCat("HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4; "
                                 "charset=utf-8\r\nContent-Length: ", body.size(),
                                 "\r\nConnection: close\r\n\r\n");
  if (method == "GET") out += body;
  return out;
}

}  // namespace zoom::server
