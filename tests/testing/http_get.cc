// File: tests/testing/http_get.cc
#include "tests/testing/http_get.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace zoom::testing {
namespace {

using Clock = std::chrono::steady_clock;

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

int RemainingMs(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - Clock::now());
  return static_cast<int>(std::max<int64_t>(0, left.count()));
}

// Waits for `events` on `fd` until `deadline`.
absl::Status Wait(int fd, short events, Clock::time_point deadline,
                  absl::string_view what) {
  while (true) {
    pollfd p = {fd, events, 0};
    const int n = poll(&p, 1, RemainingMs(deadline));
    if (n > 0) return absl::OkStatus();
    if (n == 0) return absl::UnavailableError(absl::StrCat("timeout ", what));
    if (errno != EINTR) {
      return absl::UnavailableError(
          absl::StrCat("poll ", what, ": ", std::strerror(errno)));
    }
  }
}

// Connects a non-blocking socket to the first address of host:port that
// accepts.
absl::StatusOr<int> Connect(const std::string& host, int port,
                            Clock::time_point deadline) {
  addrinfo hints;
  std::memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* addrs = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &addrs);
      rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("resolve ", host, ": ", gai_strerror(rc)));
  }
  absl::Status last = absl::UnavailableError("no address for " + host);
  for (addrinfo* a = addrs; a != nullptr; a = a->ai_next) {
    const int fd = socket(a->ai_family,
                          a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                          a->ai_protocol);
    if (fd < 0) {
      last = absl::UnavailableError(absl::StrCat("socket: ", strerror(errno)));
      continue;
    }
    int rc = connect(fd, a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      last = Wait(fd, POLLOUT, deadline, "connecting");
      int error = 0;
      socklen_t len = sizeof(error);
      if (last.ok() &&
          getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) == 0) {
        rc = error == 0 ? 0 : -1;
        errno = error;
      } else {
        rc = -1;
      }
    }
    if (rc == 0) {
      freeaddrinfo(addrs);
      return fd;
    }
    if (last.ok()) {
      last = absl::UnavailableError(absl::StrCat(
          "connect ", host, ":", port, ": ", std::strerror(errno)));
    }
    close(fd);
  }
  freeaddrinfo(addrs);
  return last;
}

absl::StatusOr<std::string> DecodeChunked(absl::string_view in) {
  std::string out;
  while (true) {
    const size_t eol = in.find("\r\n");
    if (eol == absl::string_view::npos) {
      return absl::InternalError("chunked body: missing chunk size");
    }
    // The size may be followed by ";extensions".
    absl::string_view size_text = in.substr(0, eol);
    size_text = size_text.substr(0, size_text.find(';'));
    uint64_t size = 0;
    if (!absl::SimpleHexAtoi(absl::StripAsciiWhitespace(size_text), &size)) {
      return absl::InternalError("chunked body: bad chunk size");
    }
    in.remove_prefix(eol + 2);
    if (size == 0) return out;
    if (in.size() < size + 2) {
      return absl::InternalError("chunked body: truncated chunk");
    }
    out.append(in.data(), size);
    in.remove_prefix(size + 2);
  }
}

}  // namespace

absl::StatusOr<std::string> HttpGet(const std::string& host, int port,
                                    const std::string& path, int timeout_ms) {
  return HttpGet(host, port, path, timeout_ms, "");
}

absl::StatusOr<std::string> HttpGet(const std::string& host, int port,
                                    const std::string& path, int timeout_ms,
                                    const std::string& extra_headers) {
  const Clock::time_point deadline =
      Clock::now() + std::chrono::milliseconds(timeout_ms);
  absl::StatusOr<int> fd_or = Connect(host, port, deadline);
  if (!fd_or.ok()) return fd_or.status();
  Fd fd(*fd_or);

  const std::string request =
      absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: ", host, ":", port,
                   "\r\n", extra_headers, "Connection: close\r\n\r\n");
  size_t sent = 0;
  while (sent < request.size()) {
    const ssize_t n = send(fd.get(), request.data() + sent,
                           request.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (absl::Status s = Wait(fd.get(), POLLOUT, deadline, "sending");
          !s.ok()) {
        return s;
      }
    } else {
      return absl::UnavailableError(
          absl::StrCat("send: ", std::strerror(errno)));
    }
  }

  std::string response;
  char buf[16384];
  while (true) {
    const ssize_t n = recv(fd.get(), buf, sizeof(buf), 0);
    if (n > 0) {
      response.append(buf, static_cast<size_t>(n));
    } else if (n == 0) {
      break;
    } else if (errno == EAGAIN || errno == EINTR) {
      if (absl::Status s = Wait(fd.get(), POLLIN, deadline, "receiving");
          !s.ok()) {
        return s;
      }
    } else {
      return absl::UnavailableError(
          absl::StrCat("recv: ", std::strerror(errno)));
    }
  }

  const size_t header_end = response.find("\r\n\r\n");
  if (header_end == std::string::npos) {
    return absl::InternalError("HTTP response without a header end");
  }
  const absl::string_view head(response.data(), header_end);
  std::vector<absl::string_view> lines = absl::StrSplit(head, "\r\n");
  // "HTTP/1.1 200 OK"
  std::vector<absl::string_view> status_line =
      absl::StrSplit(lines[0], absl::MaxSplits(' ', 2));
  int status = 0;
  if (status_line.size() < 2 || !absl::StartsWith(status_line[0], "HTTP/") ||
      !absl::SimpleAtoi(status_line[1], &status)) {
    return absl::InternalError(
        absl::StrCat("bad HTTP status line: ", lines[0]));
  }
  if (status != 200) {
    return absl::InternalError(absl::StrCat("HTTP GET ", path, ": ", lines[0]));
  }
  bool chunked = false;
  for (size_t i = 1; i < lines.size(); ++i) {
    const size_t colon = lines[i].find(':');
    if (colon == absl::string_view::npos) continue;
    if (absl::EqualsIgnoreCase(
            absl::StripAsciiWhitespace(lines[i].substr(0, colon)),
            "transfer-encoding") &&
        absl::StrContains(absl::AsciiStrToLower(lines[i].substr(colon + 1)),
                          "chunked")) {
      chunked = true;
    }
  }
  const absl::string_view body =
      absl::string_view(response).substr(header_end + 4);
  if (chunked) return DecodeChunked(body);
  return std::string(body);
}

}  // namespace zoom::testing
