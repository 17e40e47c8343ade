// Connection limits (issue "Trust", case 6): a real zoomd under a small
// RLIMIT_NOFILE, flooded with idle TCP connections that never send a byte,
// keeps answering new clients; the soft limit is raised to the hard one; the
// caps are derived from the limit; idle gRPC connections are closed and the
// keepalive policy is enforced. Every wait is bounded; ports are the OS's.
#include <arpa/inet.h>
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/zoom_client.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "server/grpc/zoom_server.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_env.h"

namespace zoom {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::zoom::testing::TempDir;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// How long a wait may take before it fails: generous, as it only costs
// time when something is wrong (a loaded 2-core machine stalls threads for
// seconds).
constexpr absl::Duration kPatience = absl::Seconds(60);

// zoomd as a child under RLIMIT_NOFILE soft/hard, its stderr in a file.
class LimitedZoomd {
 public:
  LimitedZoomd(const TempDir& dir, rlim_t soft, rlim_t hard, std::vector<std::string> flags)
      : log_(dir.File("zoomd.log")), port_file_(dir.File("port")) {
    std::vector<std::string> args = {ZOOMD_BINARY,
                                     "--data_dir=" + dir.File("data"),
                                     "--grpc_address=127.0.0.1:0",
                                     "--metrics_address=",
                                     "--port_file=" + port_file_,
                                     "--auto_build_points=0",
                                     "--threads=2"};
    args.insert(args.end(), flags.begin(), flags.end());
    // Everything the child needs is made before fork.
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const int log_fd = open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(log_fd, 1);
      dup2(log_fd, 2);
      // Nothing of the test process's may count against the child's limit.
      syscall(SYS_close_range, 3u, ~0u, 0u);
      rlimit rl{soft, hard};
      if (setrlimit(RLIMIT_NOFILE, &rl) != 0) _exit(126);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(log_fd);
  }
  ~LimitedZoomd() {
    if (pid_ > 0) Kill(SIGKILL);
  }

  // The port file is written once the server is SERVING. No gRPC
  // connection is made here: the tests decide who connects first.
  bool WaitServing() {
    const absl::Time end = absl::Now() + absl::Seconds(60);
    while (absl::Now() < end) {
      int status;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        ADD_FAILURE() << "zoomd exited during start: "
                      << (WIFEXITED(status) ? absl::StrCat("status ", WEXITSTATUS(status))
                                            : absl::StrCat("signal ", WTERMSIG(status)))
                      << " (127: the exec failed; 126: setrlimit failed)";
        return false;
      }
      std::ifstream in(port_file_);
      if (in >> port_ && port_ > 0) return true;
      absl::SleepFor(absl::Milliseconds(20));
    }
    return false;
  }

  int Kill(int sig) {
    if (pid_ <= 0) return -1;
    kill(pid_, sig);
    int status = 0;
    const absl::Time end = absl::Now() + absl::Seconds(60);
    while (waitpid(pid_, &status, WNOHANG) != pid_) {
      if (absl::Now() > end) {
        ADD_FAILURE() << "zoomd did not exit within 60 s of signal " << sig;
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        break;
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  }

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string target() const { return absl::StrCat("127.0.0.1:", port_); }
  std::string log() const { return ReadAll(log_); }
  // Waits (bounded) until the log has `text`: zoomd logs a gate's refusals
  // after the batch of accepts that decided them, which may be after a
  // client accepted in the same batch has been served.
  bool WaitLogged(const std::string& text) const {
    const absl::Time end = absl::Now() + kPatience;
    while (log().find(text) == std::string::npos) {
      if (absl::Now() > end) return false;
      absl::SleepFor(absl::Milliseconds(20));
    }
    return true;
  }
  int OpenFds() const {
    int n = 0;
    std::error_code ec;
    for (auto it = std::filesystem::directory_iterator(absl::StrCat("/proc/", pid_, "/fd"), ec);
         !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
      ++n;
    }
    return n;
  }
  // "Max open files" of /proc/PID/limits: {soft, hard}.
  std::pair<std::string, std::string> FdLimits() const {
    std::ifstream in(absl::StrCat("/proc/", pid_, "/limits"));
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("Max open files", 0) != 0) continue;
      std::istringstream fields(line.substr(14));
      std::string soft, hard;
      fields >> soft >> hard;
      return {soft, hard};
    }
    return {};
  }

 private:
  std::string log_, port_file_;
  pid_t pid_ = -1;
  int port_ = 0;
};

// The HTTP/2 client preface, without the SETTINGS frame that must follow.
constexpr char kPreface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

// A TCP connection from `source` (any 127/8 address is loopback) to the
// port that sends `say` and then nothing. -1 on failure (errno says why).
//
// The kernel completes the handshake before zoomd accepts, and zoomd resets
// a connection it refuses at its accept, at once: that reset may land before
// `say` is sent (the test thread descheduled between connect and send, as on
// a loaded machine), or even before connect returns. Then send (connect)
// fails with ECONNRESET or EPIPE; that is the server's refusal, not a
// failure here: the descriptor is returned and ClosedByServer reports it.
//
// A blocking connect with a timeout (SO_SNDTIMEO) fails with EINTR when the
// thread is interrupted, even without a signal: with an in-process zoomd,
// the kernel's teardown of the io_uring ring its start-up probe made on this
// thread does so (task work queued with TWA_SIGNAL, some time after the
// close). The connection goes on: it is awaited (bounded).
int IdleConnection(const char* source, int port, const std::string& say = "") {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  const auto fail = [fd](int err) {
    close(fd);
    errno = err;
    return -1;
  };
  timeval tv{absl::ToInt64Seconds(kPatience), 0};  // a bounded connect
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  sockaddr_in src{};
  src.sin_family = AF_INET;
  inet_pton(AF_INET, source, &src.sin_addr);
  sockaddr_in dst{};
  dst.sin_family = AF_INET;
  dst.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &dst.sin_addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&src), sizeof(src)) != 0) return fail(errno);
  if (connect(fd, reinterpret_cast<sockaddr*>(&dst), sizeof(dst)) != 0) {
    int err = errno;
    if (err == EINTR) {
      const absl::Time end = absl::Now() + kPatience;
      for (;;) {
        pollfd pfd{fd, POLLOUT, 0};
        const int ms = static_cast<int>(
            std::max<int64_t>(0, absl::ToInt64Milliseconds(end - absl::Now())));
        const int n = poll(&pfd, 1, ms);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return fail(errno);
        if (n == 0) return fail(ETIMEDOUT);
        socklen_t len = sizeof(err);
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) return fail(errno);
        break;
      }
    }
    if (err == ECONNRESET) return fd;  // accepted and reset by zoomd
    if (err != 0) return fail(err);
  }
  if (!say.empty()) {
    ssize_t n;
    do {
      n = send(fd, say.data(), say.size(), MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == ECONNRESET || errno == EPIPE)) return fd;  // reset by zoomd
    if (n != static_cast<ssize_t>(say.size())) return fail(n < 0 ? errno : EIO);
  }
  return fd;
}

// Whether the server has closed or reset the connection; never blocks. What
// it sent first (an admitted connection gets the server's HTTP/2 SETTINGS)
// is read and dropped.
bool ClosedByServer(int fd) {
  char buf[4096];
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0) continue;
    if (n == 0) return true;  // EOF
    if (errno == EINTR) continue;
    return errno != EAGAIN && errno != EWOULDBLOCK;  // ECONNRESET: reset
  }
}

int CountClosed(const std::vector<int>& fds) {
  return static_cast<int>(std::count_if(fds.begin(), fds.end(), ClosedByServer));
}

// Waits (bounded) until `done` holds.
template <typename F>
bool WaitFor(F done, absl::Duration timeout) {
  const absl::Time end = absl::Now() + timeout;
  while (!done()) {
    if (absl::Now() > end) return false;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return true;
}

client::ClientOptions Bounded(absl::Duration timeout, bool wait_for_ready = false) {
  client::ClientOptions o;
  o.timeout = timeout;
  o.wait_for_ready = wait_for_ready;
  return o;
}

v1::CollectionSpec Spec(const std::string& name, uint32_t dim) {
  v1::CollectionSpec spec;
  spec.set_name(name);
  spec.set_dim(dim);
  spec.set_metric(v1::L2);
  return spec;
}

// ---- The caps come from RLIMIT_NOFILE ------------------------------------------

server::ServerOptions InProcessOptions(const TempDir& dir) {
  server::ServerOptions o;
  o.database.data_dir = dir.path();
  o.grpc_address = "127.0.0.1:0";
  o.metrics_address = "";
  o.threads = 2;
  return o;
}

TEST(ConnectionLimitsTest, CapsAreDerivedFromTheFdLimit) {
  rlimit rl{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &rl), 0);
  const int soft = static_cast<int>(std::min<rlim_t>(rl.rlim_cur, 1 << 30));
  {
    TempDir dir;
    server::ZoomServer s(InProcessOptions(dir));
    ASSERT_OK(s.Start());
    const server::ConnectionStats st = s.connection_stats();
    EXPECT_TRUE(st.gated);
    EXPECT_EQ(st.fd_limit, soft);
    const int reserve = std::min(std::clamp(soft / 8, 32, 4096), soft / 2);
    EXPECT_EQ(st.fd_reserve, reserve);
    EXPECT_EQ(st.max_connections, soft - reserve);
    EXPECT_EQ(st.max_connections_per_peer, std::max(1, (soft - reserve) / 4));
    // A client's connection goes through the gate.
    auto c = client::ZoomClient::Connect(absl::StrCat("127.0.0.1:", s.grpc_port()),
                                         Bounded(absl::Seconds(20)));
    ASSERT_OK_AND_ASSIGN(std::string health, c->Health());
    EXPECT_EQ(health, "SERVING");
    const server::ConnectionStats after = s.connection_stats();
    EXPECT_EQ(after.accepted, 1);
    EXPECT_EQ(after.open, 1);
    EXPECT_EQ(after.silent, 0);
    EXPECT_EQ(after.peers, 1);
    EXPECT_EQ(after.refused_total_cap + after.refused_peer_cap + after.refused_fds, 0);
  }
  {
    TempDir dir;
    server::ServerOptions o = InProcessOptions(dir);
    o.connections.fd_reserve = 100;
    o.connections.max_connections = 50;
    o.connections.max_connections_per_peer = 7;
    server::ZoomServer s(o);
    ASSERT_OK(s.Start());
    const server::ConnectionStats st = s.connection_stats();
    EXPECT_EQ(st.fd_reserve, std::min(100, soft / 2));
    EXPECT_EQ(st.max_connections, 50);
    EXPECT_EQ(st.max_connections_per_peer, 7);
  }
  {
    TempDir dir;
    server::ServerOptions o = InProcessOptions(dir);
    o.connections.fd_reserve = 64;
    o.connections.max_connections = 1 << 30;  // more than there are descriptors: lowered
    server::ZoomServer s(o);
    ASSERT_OK(s.Start());
    EXPECT_EQ(s.connection_stats().max_connections, soft - 64);
  }
}

// The per-address cap, in process. Connections that never send a byte give
// way, oldest first, to new ones; connections that have spoken (handed to
// gRPC) hold their place, and past the cap a new one is reset at once: the
// client fails fast (UNAVAILABLE, never a hang) and gets in when they go.
TEST(ConnectionLimitsTest, PerAddressCap) {
  TempDir dir;
  server::ServerOptions o = InProcessOptions(dir);
  o.connections.max_connections_per_peer = 5;
  o.connections.handshake_timeout = absl::Seconds(600);  // nothing times out here
  server::ZoomServer s(o);
  ASSERT_OK(s.Start());
  const std::string target = absl::StrCat("127.0.0.1:", s.grpc_port());

  std::vector<int> silent;
  for (int i = 0; i < 12; ++i) {
    const int fd = IdleConnection("127.0.0.1", s.grpc_port());
    ASSERT_GE(fd, 0) << std::strerror(errno);
    silent.push_back(fd);
  }
  ASSERT_TRUE(WaitFor([&] { return s.connection_stats().accepted == 12; }, kPatience));
  server::ConnectionStats st = s.connection_stats();
  EXPECT_EQ(st.silent_evicted, 7);
  EXPECT_EQ(st.open, 5);
  EXPECT_EQ(st.silent, 5);
  EXPECT_EQ(st.refused_peer_cap, 0);
  // The seven oldest were reset, the five newest are open.
  ASSERT_TRUE(WaitFor([&] { return CountClosed(silent) == 7; }, kPatience));
  for (int i = 0; i < 12; ++i) EXPECT_EQ(ClosedByServer(silent[i]), i < 7) << i;
  {
    // A client from the same address takes a silent one's place.
    auto c = client::ZoomClient::Connect(target, Bounded(kPatience));
    ASSERT_OK_AND_ASSIGN(std::string health, c->Health());
    EXPECT_EQ(health, "SERVING");
    st = s.connection_stats();
    EXPECT_EQ(st.silent_evicted, 8);
    EXPECT_EQ(st.silent, 4);
    EXPECT_TRUE(WaitFor([&] { return ClosedByServer(silent[7]); }, kPatience));
  }
  for (int fd : silent) close(fd);
  ASSERT_TRUE(WaitFor([&] { return s.connection_stats().open == 0; }, kPatience));

  // Five that speak (the HTTP/2 preface, then nothing) fill the cap.
  std::vector<int> talking;
  for (int i = 0; i < 5; ++i) {
    const int fd = IdleConnection("127.0.0.1", s.grpc_port(), kPreface);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    talking.push_back(fd);
  }
  ASSERT_TRUE(WaitFor(
      [&] {
        st = s.connection_stats();
        return st.open == 5 && st.silent == 0;
      },
      kPatience));
  // Refused at its accept (no silent one to make room): it is closed before
  // it could say anything, so it says nothing (sending the preface raced the
  // server's reset: EPIPE, one run in a few hundred).
  const int sixth = IdleConnection("127.0.0.1", s.grpc_port());
  ASSERT_GE(sixth, 0) << std::strerror(errno);
  ASSERT_TRUE(WaitFor([&] { return ClosedByServer(sixth); }, kPatience));
  close(sixth);
  {
    auto c = client::ZoomClient::Connect(target, Bounded(kPatience));
    EXPECT_THAT(c->Health().status(), ::zoom::testing::StatusIs(absl::StatusCode::kUnavailable));
  }
  st = s.connection_stats();
  EXPECT_GE(st.refused_peer_cap, 2);
  EXPECT_EQ(st.open, 5);
  for (int fd : talking) EXPECT_FALSE(ClosedByServer(fd));
  for (int fd : talking) close(fd);
  auto c = client::ZoomClient::Connect(target, Bounded(kPatience, /*wait_for_ready=*/true));
  ASSERT_OK_AND_ASSIGN(std::string health, c->Health());
  EXPECT_EQ(health, "SERVING");
  ASSERT_TRUE(WaitFor([&] { return s.connection_stats().open == 1; }, kPatience));
  EXPECT_EQ(s.connection_stats().peers, 1);
}

// ---- A real zoomd -------------------------------------------------------------

TEST(ConnectionLimitsTest, ZoomdRaisesTheSoftFdLimitToTheHardOne) {
  TempDir dir;
  LimitedZoomd zoomd(dir, 200, 256, {});
  ASSERT_TRUE(zoomd.WaitServing()) << zoomd.log();
  EXPECT_EQ(zoomd.FdLimits(), std::make_pair(std::string("256"), std::string("256")));
  const std::string log = zoomd.log();
  EXPECT_THAT(log, HasSubstr("RLIMIT_NOFILE: soft 200 -> 256, hard 256"));
  // The caps come from the raised limit: 256 / 8 = 32 reserved.
  EXPECT_THAT(log, HasSubstr("connections: RLIMIT_NOFILE 256 (hard 256), fd reserve 32, at most "
                             "224 open, 56 per client address"));
  EXPECT_EQ(zoomd.Kill(SIGTERM), 0);
}

// Health, admin calls and a search from a new client (127.0.0.1) while 320
// connections from eight other addresses (127.0.0.2-9) are held against a
// zoomd with 256 descriptors (64 reserved). Returns how many of them the
// server kept.
int FloodAndServe(LimitedZoomd& zoomd, const std::string& say) {
  constexpr int kPeers = 8, kPerPeer = 40;
  std::vector<int> idle;
  for (int p = 0; p < kPeers; ++p) {
    const std::string source = absl::StrCat("127.0.0.", 2 + p);
    for (int i = 0; i < kPerPeer; ++i) {
      const int fd = IdleConnection(source.c_str(), zoomd.port(), say);
      EXPECT_GE(fd, 0) << source << ": " << std::strerror(errno);
      if (fd < 0) {
        for (int open_fd : idle) close(open_fd);
        return -1;
      }
      idle.push_back(fd);
    }
  }
  // All 320 are queued before the client connects: the server decides them
  // first. (Its calls are bounded, generously: zoomd serving slowly on a
  // loaded machine is still serving.)
  {
    auto c = client::ZoomClient::Connect(zoomd.target(), Bounded(kPatience));
    absl::StatusOr<std::string> health = c->Health();
    EXPECT_OK(health.status());
    EXPECT_EQ(health.value_or(""), "SERVING");
    absl::StatusOr<std::vector<v1::CollectionInfo>> list = c->ListCollections();
    EXPECT_OK(list.status());
    // Admin calls open files (the reserve's other half).
    const std::string name = say.empty() ? "silent" : "talking";
    EXPECT_OK(c->CreateCollection(Spec(name, 4)).status());
    v1::UpsertRequest u;
    u.set_collection(name);
    for (uint64_t i = 0; i < 50; ++i) {
      v1::Point* p = u.add_points();
      p->set_id(i);
      for (int d = 0; d < 4; ++d) p->add_vector(static_cast<float>(i * 4 + d));
    }
    EXPECT_OK(c->Upsert(u).status());
    v1::SearchRequest q;
    q.set_collection(name);
    for (int d = 0; d < 4; ++d) q.add_vector(static_cast<float>(7 * 4 + d));
    q.set_k(3);
    absl::StatusOr<v1::SearchResponse> r = c->Search(q);
    EXPECT_OK(r.status());
    if (r.ok()) {
      EXPECT_GE(r->hits_size(), 1);
      if (r->hits_size() > 0) {
        EXPECT_EQ(r->hits(0).id(), 7u);
      }
    }
  }
  // With 256 descriptors and 64 reserved, at least 128 were reset.
  EXPECT_TRUE(WaitFor([&] { return CountClosed(idle) >= 320 - 192; }, kPatience))
      << CountClosed(idle) << " reset";
  const int held = static_cast<int>(idle.size()) - CountClosed(idle);
  EXPECT_LE(zoomd.OpenFds(), 256);
  // The connections go; the server's descriptors come back; a new client
  // gets in.
  for (int fd : idle) close(fd);
  EXPECT_TRUE(WaitFor([&] { return zoomd.OpenFds() < 100; }, kPatience))
      << zoomd.OpenFds() << " descriptors still open";
  auto c = client::ZoomClient::Connect(zoomd.target(), Bounded(kPatience));
  absl::StatusOr<std::vector<v1::CollectionInfo>> list = c->ListCollections();
  EXPECT_OK(list.status());
  EXPECT_FALSE(list.value_or(std::vector<v1::CollectionInfo>{}).empty());
  return held;
}

// The case: more connections that never send a byte than the
// process has descriptors. They never reach gRPC; the oldest give way to the
// newest; the server never runs out of descriptors.
TEST(ConnectionLimitsTest, SilentConnectionsPastTheFdLimitLeaveZoomdServing) {
  TempDir dir;
  // Nothing times out during the test, however long its bounded waits take.
  LimitedZoomd zoomd(dir, 256, 256,
                     {"--fd_reserve=64", "--max_connections_per_peer=40",
                      "--handshake_timeout_s=600"});
  ASSERT_TRUE(zoomd.WaitServing()) << zoomd.log();
  const int held = FloodAndServe(zoomd, "");
  EXPECT_GT(held, 100);  // on descriptors below 256 - 64, the server's own included
  EXPECT_LT(held, 192);
  std::printf("%d of 320 silent connections held\n", held);
  EXPECT_TRUE(zoomd.WaitLogged(" closed without a byte sent (")) << zoomd.log();
  const std::string log = zoomd.log();
  EXPECT_THAT(log, Not(HasSubstr("Too many open files")));
  EXPECT_THAT(log, Not(HasSubstr("accept4")));
  EXPECT_EQ(zoomd.Kill(SIGTERM), 0);
}

// The same with connections that send the HTTP/2 preface and then nothing
// (handed to gRPC, which waits for their settings): past the descriptors
// left after the reserve the new ones are reset; a client from an address
// holding none still gets in.
TEST(ConnectionLimitsTest, StalledConnectionsPastTheFdLimitLeaveZoomdServing) {
  TempDir dir;
  LimitedZoomd zoomd(dir, 256, 256,
                     {"--fd_reserve=64", "--max_connections_per_peer=40",
                      "--handshake_timeout_s=600"});
  ASSERT_TRUE(zoomd.WaitServing()) << zoomd.log();
  const int held = FloodAndServe(zoomd, kPreface);
  EXPECT_GT(held, 100);
  EXPECT_LT(held, 192);
  std::printf("%d of 320 stalled connections held\n", held);
  EXPECT_TRUE(
      zoomd.WaitLogged(" for file descriptors: RLIMIT_NOFILE 256 less --fd_reserve 64"))
      << zoomd.log();
  const std::string log = zoomd.log();
  EXPECT_THAT(log, Not(HasSubstr("Too many open files")));
  EXPECT_THAT(log, Not(HasSubstr("accept4")));
  EXPECT_EQ(zoomd.Kill(SIGTERM), 0);
}

// From the client's own address, past its cap: silent connections make room
// at once and are closed at the handshake timeout; stalled ones (handed to
// gRPC) refuse the client (UNAVAILABLE at once, not a hang) until gRPC's
// handshake timeout closes them.
TEST(ConnectionLimitsTest, TheHandshakeTimeoutClosesSilentAndStalledConnections) {
  TempDir dir;
  LimitedZoomd zoomd(dir, 256, 256, {"--max_connections_per_peer=50", "--handshake_timeout_s=1"});
  ASSERT_TRUE(zoomd.WaitServing()) << zoomd.log();
  std::vector<int> silent;
  for (int i = 0; i < 100; ++i) {
    const int fd = IdleConnection("127.0.0.1", zoomd.port());
    ASSERT_GE(fd, 0) << std::strerror(errno);
    silent.push_back(fd);
  }
  {
    auto c = client::ZoomClient::Connect(zoomd.target(), Bounded(kPatience));
    ASSERT_OK_AND_ASSIGN(std::string health, c->Health());
    EXPECT_EQ(health, "SERVING");
  }
  ASSERT_TRUE(WaitFor([&] { return CountClosed(silent) == 100; }, kPatience))
      << CountClosed(silent) << " of 100 closed";
  for (int fd : silent) close(fd);

  std::vector<int> stalled;
  for (int i = 0; i < 60; ++i) {
    const int fd = IdleConnection("127.0.0.1", zoomd.port(), kPreface);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    stalled.push_back(fd);
  }
  auto c = client::ZoomClient::Connect(zoomd.target(),
                                       Bounded(kPatience, /*wait_for_ready=*/true));
  ASSERT_OK_AND_ASSIGN(std::string health, c->Health());
  EXPECT_EQ(health, "SERVING");
  ASSERT_TRUE(WaitFor([&] { return CountClosed(stalled) == 60; }, kPatience))
      << CountClosed(stalled) << " of 60 closed";
  for (int fd : stalled) close(fd);
  ASSERT_OK_AND_ASSIGN(auto list, c->ListCollections());
  EXPECT_TRUE(list.empty());
  EXPECT_THAT(zoomd.log(), Not(HasSubstr("Too many open files")));
  EXPECT_EQ(zoomd.Kill(SIGTERM), 0);
}

// ---- Idle connections and the keepalive policy ----------------------------------

grpc_connectivity_state WaitForState(grpc::Channel& ch, grpc_connectivity_state want,
                                     absl::Duration timeout) {
  const absl::Time end = absl::Now() + timeout;
  grpc_connectivity_state s = ch.GetState(false);
  while (s != want && absl::Now() < end) {
    ch.WaitForStateChange(s, absl::ToChronoTime(std::min(end, absl::Now() + absl::Seconds(1))));
    s = ch.GetState(false);
  }
  return s;
}

bool HealthOk(grpc::Channel* ch) {
  auto stub = grpc::health::v1::Health::NewStub(std::shared_ptr<grpc::Channel>(ch, [](auto*) {}));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  grpc::health::v1::HealthCheckRequest req;
  grpc::health::v1::HealthCheckResponse resp;
  return stub->Check(&ctx, req, &resp).ok() &&
         resp.status() == grpc::health::v1::HealthCheckResponse::SERVING;
}

TEST(ConnectionLimitsTest, IdleConnectionsAreClosedAndPingFloodsEnded) {
  TempDir dir;
  server::ServerOptions o = InProcessOptions(dir);
  o.connections.max_connection_idle = absl::Seconds(1);
  server::ZoomServer s(o);
  ASSERT_OK(s.Start());
  const std::string target = absl::StrCat("127.0.0.1:", s.grpc_port());
  {
    // One call, then nothing: the server closes the connection (GOAWAY), the
    // channel goes IDLE, and its next call reconnects.
    auto ch = grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
    ASSERT_TRUE(HealthOk(ch.get()));
    EXPECT_EQ(ch->GetState(false), GRPC_CHANNEL_READY);
    EXPECT_EQ(WaitForState(*ch, GRPC_CHANNEL_IDLE, absl::Seconds(20)), GRPC_CHANNEL_IDLE);
    ASSERT_TRUE(HealthOk(ch.get()));
  }
  s.Shutdown();

  // A client pinging every 200 ms without calls (the policy: none without
  // calls, 2 strikes) is sent away (GOAWAY too_many_pings).
  TempDir dir2;
  o.database.data_dir = dir2.path();
  o.connections.max_connection_idle = absl::InfiniteDuration();
  server::ZoomServer s2(o);
  ASSERT_OK(s2.Start());
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 200);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  args.SetInt(GRPC_ARG_HTTP2_MIN_SENT_PING_INTERVAL_WITHOUT_DATA_MS, 0);
  auto ch = grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", s2.grpc_port()),
                                      grpc::InsecureChannelCredentials(), args);
  ASSERT_TRUE(HealthOk(ch.get()));
  EXPECT_EQ(WaitForState(*ch, GRPC_CHANNEL_IDLE, absl::Seconds(20)), GRPC_CHANNEL_IDLE);
  s2.Shutdown();
}

}  // namespace
}  // namespace zoom
