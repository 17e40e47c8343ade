#include "server/grpc/connection_gate.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/logging.h"

namespace zoom::server {
namespace {

// The client's IP address as bytes (an IPv4-mapped IPv6 address as IPv4).
std::string PeerKeyOf(const sockaddr_storage& ss) {
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    return std::string(reinterpret_cast<const char*>(&a->sin_addr), 4);
  }
  if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    const char* bytes = reinterpret_cast<const char*>(&a->sin6_addr);
    if (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr)) return std::string(bytes + 12, 4);
    return std::string(bytes, 16);
  }
  return std::string();
}

std::string FormatPeer(const std::string& key) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (key.size() == 4) inet_ntop(AF_INET, key.data(), buf, sizeof(buf));
  if (key.size() == 16) inet_ntop(AF_INET6, key.data(), buf, sizeof(buf));
  return buf[0] != 0 ? std::string(buf) : std::string("?");
}

// A refused connection: reset (no TIME_WAIT, the client learns at once).
void ResetAndClose(int fd) {
  linger l{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
  close(fd);
}

int ListenBacklog() {
  int n = 4096;
  if (FILE* f = std::fopen("/proc/sys/net/core/somaxconn", "r")) {
    if (std::fscanf(f, "%d", &n) != 1 || n <= 0) n = 4096;
    std::fclose(f);
  }
  return n;
}

std::string SockaddrString(const sockaddr* sa) {
  char host[INET6_ADDRSTRLEN] = {0};
  if (sa->sa_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(sa);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
    return absl::StrCat(host, ":", ntohs(a->sin_port));
  }
  const auto* a = reinterpret_cast<const sockaddr_in6*>(sa);
  inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
  return absl::StrCat("[", host, "]:", ntohs(a->sin6_port));
}

}  // namespace

FdLimits CurrentFdLimits() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return {1024, 1024};
  auto to_int = [](rlim_t v) {
    return v == RLIM_INFINITY || v > (1u << 30) ? (1 << 30) : static_cast<int>(v);
  };
  return {to_int(rl.rlim_cur), to_int(rl.rlim_max)};
}

ConnectionGate::Limits ConnectionGate::Resolve(const Options& c, std::string* notes) {
  const FdLimits fds = CurrentFdLimits();
  Limits l;
  l.fd_limit = fds.soft;
  l.fd_hard_limit = fds.hard;
  l.fd_reserve = c.fd_reserve > 0 ? c.fd_reserve : std::clamp(fds.soft / 8, 32, 4096);
  if (l.fd_reserve > fds.soft / 2) {
    if (c.fd_reserve > 0) {
      absl::StrAppend(notes, " (--fd_reserve ", c.fd_reserve, " lowered to half the limit)");
    }
    l.fd_reserve = fds.soft / 2;
  }
  const int most = std::max(1, fds.soft - l.fd_reserve);
  l.max_connections = c.max_connections > 0 ? std::min(c.max_connections, most) : most;
  if (c.max_connections > most) {
    absl::StrAppend(notes, " (--max_connections ", c.max_connections,
                    " lowered to RLIMIT_NOFILE - fd reserve)");
  }
  l.max_per_peer = c.max_connections_per_peer > 0
                       ? std::min(c.max_connections_per_peer, l.max_connections)
                       : std::max(1, l.max_connections / 4);
  l.silent_timeout = c.handshake_timeout > absl::ZeroDuration() ? c.handshake_timeout
                                                                : absl::Seconds(120);
  return l;
}

bool ConnectionGate::SplitHostPort(const std::string& address, std::string* host, int* port) {
  for (const char* scheme : {"unix:", "unix-abstract:", "vsock:", "ipv4:", "ipv6:", "dns:",
                             "external:"}) {
    if (address.rfind(scheme, 0) == 0) return false;
  }
  std::string port_text;
  if (!address.empty() && address.front() == '[') {
    const size_t close = address.find(']');
    if (close == std::string::npos || close + 1 >= address.size() || address[close + 1] != ':') {
      return false;
    }
    *host = address.substr(1, close - 1);
    port_text = address.substr(close + 2);
  } else {
    const size_t colon = address.rfind(':');
    if (colon == std::string::npos) return false;
    *host = address.substr(0, colon);
    if (host->find(':') != std::string::npos) return false;  // a bare IPv6 address
    port_text = address.substr(colon + 1);
  }
  if (host->empty() || port_text.empty() || port_text.size() > 5 ||
      port_text.find_first_not_of("0123456789") != std::string::npos) {
    return false;
  }
  *port = std::stoi(port_text);
  return *port <= 65535;
}

absl::Status ConnectionGate::Listen(const std::string& address, const std::string& host,
                                    int port) {
  const bool wildcard = host == "0.0.0.0" || host == "::";
  std::vector<sockaddr_storage> addrs;
  if (wildcard) {
    sockaddr_storage v6{};
    auto* a6 = reinterpret_cast<sockaddr_in6*>(&v6);
    a6->sin6_family = AF_INET6;
    a6->sin6_addr = in6addr_any;
    addrs.push_back(v6);
  } else {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    addrinfo* res = nullptr;
    const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
    if (rc != 0) {
      return absl::UnavailableError(
          absl::StrCat("cannot listen on ", address, ": ", gai_strerror(rc)));
    }
    for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
      if (ai->ai_family != AF_INET && ai->ai_family != AF_INET6) continue;
      sockaddr_storage ss{};
      std::memcpy(&ss, ai->ai_addr, ai->ai_addrlen);
      bool dup = false;
      for (const sockaddr_storage& o : addrs) dup = dup || std::memcmp(&o, &ss, sizeof(ss)) == 0;
      if (!dup) addrs.push_back(ss);
    }
    freeaddrinfo(res);
  }
  const int backlog = ListenBacklog();
  std::string first_error;
  int first_errno = 0;
  for (size_t i = 0; i < addrs.size(); ++i) {
    sockaddr_storage ss = addrs[i];
    const bool v6 = ss.ss_family == AF_INET6;
    const socklen_t len = v6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
    if (v6) {
      reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port = htons(static_cast<uint16_t>(port));
    } else {
      reinterpret_cast<sockaddr_in*>(&ss)->sin_port = htons(static_cast<uint16_t>(port));
    }
    const int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int err = errno;
    if (fd >= 0) {
      const int one = 1, zero = 0;
      setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      if (v6 && wildcard) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
      if (bind(fd, reinterpret_cast<sockaddr*>(&ss), len) == 0 && listen(fd, backlog) == 0) {
        sockaddr_storage bound{};
        socklen_t blen = sizeof(bound);
        getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &blen);
        port = ntohs(bound.ss_family == AF_INET6
                         ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                         : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
        listeners_.push_back(fd);
        bound_.push_back(SockaddrString(reinterpret_cast<sockaddr*>(&bound)));
        continue;
      }
      err = errno;
      close(fd);
    }
    if (first_errno == 0) {
      first_errno = err;
      first_error = absl::StrCat("bind ", SockaddrString(reinterpret_cast<sockaddr*>(&ss)));
    }
    if (v6 && wildcard && addrs.size() == 1) {  // no IPv6 here: the IPv4 wildcard
      sockaddr_storage v4{};
      auto* a4 = reinterpret_cast<sockaddr_in*>(&v4);
      a4->sin_family = AF_INET;
      a4->sin_addr.s_addr = htonl(INADDR_ANY);
      addrs.push_back(v4);
    }
  }
  if (listeners_.empty()) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", address, ": ", first_error.empty() ? "no address" : first_error,
        ": ", std::strerror(first_errno != 0 ? first_errno : EADDRNOTAVAIL)));
  }
  if (first_errno != 0 && !wildcard) {
    ZOOM_LOG(WARNING, "listening on ", absl::StrJoin(bound_, ", "), " only: ", first_error,
             ": ", std::strerror(first_errno));
  }
  port_ = port;
  return absl::OkStatus();
}

absl::Status ConnectionGate::Start(
    std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> acceptor) {
  acceptor_ = std::move(acceptor);
  epoll_ = epoll_create1(EPOLL_CLOEXEC);
  if (epoll_ < 0 || pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
    return absl::InternalError(absl::StrCat("connection gate: ", std::strerror(errno)));
  }
  Watch(wake_[0], kWake, EPOLLIN);
  for (size_t i = 0; i < listeners_.size(); ++i) Watch(listeners_[i], kListener, EPOLLIN);
  spare_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
  paused_until_.assign(listeners_.size(), absl::InfinitePast());
  thread_ = std::thread([this] { Run(); });
  return absl::OkStatus();
}

void ConnectionGate::Stop() {
  if (thread_.joinable()) {
    const char b = 1;
    [[maybe_unused]] ssize_t n = write(wake_[1], &b, 1);
    thread_.join();
  }
  std::vector<int> silent;
  {
    absl::MutexLock l(&mu_);
    for (const auto& [seq, fd] : silent_) silent.push_back(fd);
    for (int fd : silent) RemoveLocked(fd);
  }
  for (int fd : silent) ResetAndClose(fd);
  for (int fd : listeners_) close(fd);
  listeners_.clear();
  for (int* fd : {&wake_[0], &wake_[1], &epoll_, &spare_fd_}) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
  }
}

int ConnectionGate::Sever() {
  absl::MutexLock l(&mu_);
  int severed = 0;
  for (const auto& [fd, conn] : conns_) {
    if (conn.seq != 0) continue;  // silent: never handed over (Stop closes them)
    struct stat st {};
    if (fstat(fd, &st) != 0 || st.st_ino != conn.ino || st.st_dev != conn.dev) continue;
    if (shutdown(fd, SHUT_RDWR) == 0) ++severed;
  }
  return severed;
}

ConnectionStats ConnectionGate::Stats() const {
  absl::MutexLock l(&mu_);
  ConnectionStats s = counts_;
  s.gated = true;
  s.fd_limit = limits_.fd_limit;
  s.fd_hard_limit = limits_.fd_hard_limit;
  s.fd_reserve = limits_.fd_reserve;
  s.max_connections = limits_.max_connections;
  s.max_connections_per_peer = limits_.max_per_peer;
  s.open = static_cast<int64_t>(conns_.size());
  s.silent = static_cast<int64_t>(silent_.size());
  s.peers = static_cast<int64_t>(peers_.size());
  return s;
}

bool ConnectionGate::Watch(int fd, Tag tag, uint32_t events) {
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = (static_cast<uint64_t>(tag) << 32) | static_cast<uint32_t>(fd);
  return epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &ev) == 0;
}

void ConnectionGate::Run() {
  std::vector<epoll_event> events(256);
  for (;;) {
    int n = epoll_wait(epoll_, events.data(), static_cast<int>(events.size()), NextWakeMs());
    if (n < 0) {
      if (errno != EINTR) {
        ZOOM_LOG(ERROR, "connection gate: epoll_wait: ", std::strerror(errno));
        absl::SleepFor(absl::Milliseconds(10));
      }
      n = 0;
    }
    for (int i = 0; i < n; ++i) {
      const int fd = static_cast<int>(events[i].data.u64 & 0xffffffffu);
      switch (events[i].data.u64 >> 32) {
        case kWake:
          return;
        case kListener:
          for (size_t l = 0; l < listeners_.size(); ++l) {
            if (listeners_[l] == fd) Drain(l);
          }
          break;
        default:
          OnSilentReady(fd);
          break;
      }
    }
    const absl::Time now = absl::Now();
    for (size_t l = 0; l < listeners_.size(); ++l) {
      if (paused_until_[l] != absl::InfinitePast() && paused_until_[l] <= now) {
        paused_until_[l] = absl::InfinitePast();
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.u64 = (uint64_t{kListener} << 32) | static_cast<uint32_t>(listeners_[l]);
        epoll_ctl(epoll_, EPOLL_CTL_MOD, listeners_[l], &ev);
      }
    }
    ExpireSilent(now);
    {
      absl::MutexLock l(&mu_);
      if (now - last_sweep_ >= absl::Milliseconds(500)) SweepLocked();
    }
    MaybeLog();
  }
}

int ConnectionGate::NextWakeMs() {
  absl::Time next = absl::Now() + absl::Milliseconds(500);
  for (const absl::Time t : paused_until_) {
    if (t != absl::InfinitePast()) next = std::min(next, t);
  }
  {
    absl::MutexLock l(&mu_);
    if (!silent_.empty()) {
      next = std::min(next, conns_.at(silent_.begin()->second).since + limits_.silent_timeout);
    }
  }
  return static_cast<int>(
      std::clamp<int64_t>(absl::ToInt64Milliseconds(next - absl::Now()) + 1, 0, 500));
}

void ConnectionGate::Drain(size_t l) {
  const int lfd = listeners_[l];
  for (int batch = 0; batch < 256; ++batch) {
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    int fd =
        accept4(lfd, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      const int err = errno;
      if (err == EINTR || err == ECONNABORTED || err == EPROTO || err == EPERM) continue;
      if (err == EAGAIN || err == EWOULDBLOCK) return;
      if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
        if (EvictOldestSilent(nullptr) || ShedWithSpare(lfd, err)) continue;
      } else {
        ZOOM_LOG(ERROR, "connection gate: accept4: ", std::strerror(err));
      }
      // Out of descriptors with nothing to give back: try again in 100 ms.
      paused_until_[l] = absl::Now() + absl::Milliseconds(100);
      epoll_event ev{};
      ev.data.u64 = (uint64_t{kListener} << 32) | static_cast<uint32_t>(lfd);
      epoll_ctl(epoll_, EPOLL_CTL_MOD, lfd, &ev);
      return;
    }
    const std::string peer = PeerKeyOf(ss);
    int victim = -1;
    bool admit = true;
    {
      absl::MutexLock lock(&mu_);
      ForgetLocked(fd);  // the kernel handed out this number: its old holder is closed
      const Verdict v = DecideLocked(fd, peer);
      if (v != kAdmit) {
        // Room from a connection that has not said a word yet, the oldest
        // (of this address for its own cap); else the newcomer goes.
        victim = OldestSilentLocked(v == kPeerCap ? &peer : nullptr);
        if (victim >= 0) {
          RemoveLocked(victim);
          ++counts_.silent_evicted;
          ++window_evicted_;
        } else {
          admit = false;
          NoteRefusalLocked(v, peer);
        }
      }
    }
    if (!admit) {
      ResetAndClose(fd);
      continue;
    }
    if (victim >= 0) {
      epoll_ctl(epoll_, EPOLL_CTL_DEL, victim, nullptr);
      linger lg{1, 0};  // reset, as ResetAndClose
      setsockopt(victim, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
      if (fd > victim && dup3(fd, victim, O_CLOEXEC) == victim) {
        // The newcomer takes the victim's (lower) number, so that the
        // descriptors in use stay below the fd rule's line.
        close(fd);
        fd = victim;
      } else {
        close(victim);
      }
    }
    {
      absl::MutexLock lock(&mu_);
      struct stat st {};
      fstat(fd, &st);
      const uint64_t seq = ++seq_;
      conns_[fd] = Conn{st.st_dev, st.st_ino, peer, lfd, seq, absl::Now()};
      Peer& p = peers_[peer];
      ++p.held;
      p.silent[seq] = fd;
      silent_[seq] = fd;
      ++counts_.accepted;
    }
    // Handed to gRPC once it speaks (often already: check now); at once
    // when it cannot be watched (fs.epoll.max_user_watches).
    const bool watched = Watch(fd, kSilent, EPOLLIN | EPOLLRDHUP);
    OnSilentReady(fd, /*hand_over=*/!watched);
  }
}

void ConnectionGate::OnSilentReady(int fd, bool hand_over) {
  char c;
  ssize_t r = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
    if (!hand_over) return;
    r = 1;
  }
  int listener = -1;
  {
    absl::MutexLock l(&mu_);
    const auto it = conns_.find(fd);
    if (it == conns_.end() || it->second.seq == 0) return;
    if (r > 0) {
      Conn& conn = it->second;
      peers_[conn.peer].silent.erase(conn.seq);
      silent_.erase(conn.seq);
      conn.seq = 0;
      listener = conn.listener;
    } else {
      RemoveLocked(fd);
    }
  }
  epoll_ctl(epoll_, EPOLL_CTL_DEL, fd, nullptr);
  if (r <= 0) {
    close(fd);
    return;
  }
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  grpc::experimental::ExternalConnectionAcceptor::NewConnectionParameters p;
  p.listener_fd = listener;
  p.fd = fd;
  acceptor_->HandleNewConnection(&p);
}

void ConnectionGate::ExpireSilent(absl::Time now) {
  std::vector<int> expired;
  {
    absl::MutexLock l(&mu_);
    while (!silent_.empty()) {
      const int fd = silent_.begin()->second;
      if (conns_.at(fd).since + limits_.silent_timeout > now) break;
      RemoveLocked(fd);
      expired.push_back(fd);
    }
    counts_.silent_expired += static_cast<int64_t>(expired.size());
    window_expired_ += static_cast<int64_t>(expired.size());
  }
  for (int fd : expired) {
    epoll_ctl(epoll_, EPOLL_CTL_DEL, fd, nullptr);
    ResetAndClose(fd);
  }
}

bool ConnectionGate::EvictOldestSilent(const std::string* peer) {
  int victim;
  {
    absl::MutexLock l(&mu_);
    victim = OldestSilentLocked(peer);
    if (victim < 0) return false;
    RemoveLocked(victim);
    ++counts_.silent_evicted;
    ++window_evicted_;
  }
  epoll_ctl(epoll_, EPOLL_CTL_DEL, victim, nullptr);
  ResetAndClose(victim);
  return true;
}

bool ConnectionGate::ShedWithSpare(int lfd, int err) {
  if (spare_fd_ < 0) spare_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (spare_fd_ < 0) return false;
  close(spare_fd_);
  spare_fd_ = -1;
  const int fd = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd >= 0) ResetAndClose(fd);
  spare_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  absl::MutexLock l(&mu_);
  ++out_of_fds_;
  last_errno_ = err;
  NoteRefusalLocked(kFds, std::string());
  return true;
}

ConnectionGate::Verdict ConnectionGate::DecideLocked(int fd, const std::string& peer) {
  for (int attempt = 0;; ++attempt) {
    const auto it = peers_.find(peer);
    const int held = it == peers_.end() ? 0 : it->second.held;
    // An address holding nothing (a probe, a new client) may use half the
    // reserve; the other half is never a connection's.
    const int slack = held == 0 ? limits_.fd_reserve / 2 : 0;
    if (fd >= limits_.fd_limit - limits_.fd_reserve + slack) return kFds;
    Verdict v = kAdmit;
    if (held >= limits_.max_per_peer) {
      v = kPeerCap;
    } else if (static_cast<int64_t>(conns_.size()) >= limits_.max_connections + slack) {
      v = kTotalCap;
    }
    // Before refusing on a count: drop the connections gRPC has closed.
    if (v == kAdmit || attempt > 0 || absl::Now() - last_sweep_ < absl::Milliseconds(20)) {
      return v;
    }
    SweepLocked();
  }
}

int ConnectionGate::OldestSilentLocked(const std::string* peer) {
  if (peer == nullptr) return silent_.empty() ? -1 : silent_.begin()->second;
  const auto it = peers_.find(*peer);
  if (it == peers_.end() || it->second.silent.empty()) return -1;
  return it->second.silent.begin()->second;
}

void ConnectionGate::RemoveLocked(int fd) {
  const auto it = conns_.find(fd);
  if (it == conns_.end()) return;
  const auto p = peers_.find(it->second.peer);
  if (p != peers_.end()) {
    if (it->second.seq != 0) p->second.silent.erase(it->second.seq);
    if (--p->second.held <= 0) peers_.erase(p);
  }
  if (it->second.seq != 0) silent_.erase(it->second.seq);
  conns_.erase(it);
}

void ConnectionGate::SweepLocked() {
  std::vector<int> gone;
  for (const auto& [fd, conn] : conns_) {
    if (conn.seq != 0) continue;  // silent: ours, open
    struct stat st {};
    if (fstat(fd, &st) != 0 || st.st_ino != conn.ino || st.st_dev != conn.dev) {
      gone.push_back(fd);
    }
  }
  for (int fd : gone) RemoveLocked(fd);
  last_sweep_ = absl::Now();
}

void ConnectionGate::NoteRefusalLocked(Verdict v, const std::string& peer) {
  switch (v) {
    case kTotalCap: ++counts_.refused_total_cap; break;
    case kPeerCap: ++counts_.refused_peer_cap; break;
    default: ++counts_.refused_fds; break;
  }
  if (v >= 0) ++window_[v];
  if (!peer.empty()) last_refused_peer_ = peer;
}

void ConnectionGate::MaybeLog() {
  std::string line;
  {
    absl::MutexLock l(&mu_);
    const int64_t refused = window_[0] + window_[1] + window_[2];
    const absl::Time now = absl::Now();
    if (refused + window_evicted_ + window_expired_ == 0 ||
        now - logged_at_ < absl::Seconds(10)) {
      return;
    }
    const std::string when =
        logged_at_ == absl::InfinitePast()
            ? std::string()
            : absl::StrCat(" in the last ",
                           absl::FormatDuration(absl::Trunc(now - logged_at_, absl::Seconds(1))));
    line = absl::StrCat("connections", when, ": ");
    if (window_evicted_ + window_expired_ > 0) {
      absl::StrAppend(&line, window_evicted_ + window_expired_,
                      " closed without a byte sent (", window_evicted_,
                      " to make room for new ones, ", window_expired_,
                      " at the handshake timeout); ");
    }
    absl::StrAppend(
        &line, refused, " refused (", window_[0], " over --max_connections ",
        limits_.max_connections, ", ", window_[1], " over --max_connections_per_peer ",
        limits_.max_per_peer,
        last_refused_peer_.empty() ? std::string()
                                   : absl::StrCat(", the last from ", FormatPeer(last_refused_peer_)),
        ", ", window_[2], " for file descriptors: RLIMIT_NOFILE ", limits_.fd_limit,
        " less --fd_reserve ", limits_.fd_reserve,
        out_of_fds_ > 0 ? absl::StrCat(", ", out_of_fds_, " while the process had none left (",
                                       last_errno_ == ENFILE ? "ENFILE" : "EMFILE", ")")
                        : std::string(),
        "); ", conns_.size(), " open (", silent_.size(), " silent) from ", peers_.size(),
        " addresses");
    window_[0] = window_[1] = window_[2] = 0;
    window_evicted_ = window_expired_ = out_of_fds_ = 0;
    logged_at_ = now;
  }
  ZOOM_LOG(WARNING, line);
}

}  // namespace zoom::server
