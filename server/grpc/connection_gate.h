// File: server/grpc/connection_gate.h
//
// ConnectionGate: zoomd's own TCP listener in front of gRPC, with caps on
// the connections in all and per client address and a reserve of file
// descriptors (ServerOptions::Connections, docs/operations.md "zoomd flags",
// deploy/README.md "Connections and file descriptors").
//
// gRPC 1.51 cannot cap connections (no GRPC_ARG_MAX_ALLOWED_INCOMING_
// CONNECTIONS; ResourceQuota bounds memory and threads), and its TCP
// listener gives up on the port for good after one failed accept4 (EMFILE:
// tcp_server_posix.cc logs "Failed accept4" and never re-arms it). So on a
// host:port address zoomd listens itself: one thread accepts, decides, and
// hands each admitted socket to gRPC through an external connection acceptor
// (which runs the same handshake, TLS included, with the server's channel
// arguments). unix: addresses are left to gRPC (no gate, no caps).
//
//   - A connection is handed over once its first bytes arrive (a gRPC
//     client sends its preface or TLS hello at once). Until then it is
//     "silent": it holds a descriptor only, is closed at the handshake
//     timeout, and is the first to go when a cap is reached: the oldest
//     silent connection (of the same address for the per-address cap) is
//     reset to make room for the newcomer. A flood of connections that never
//     speak only churns among themselves.
//   - Otherwise a connection over a cap is reset at once: the client sees
//     UNAVAILABLE and backs off instead of waiting in the kernel's queue.
//
// The caps (Resolve) come from RLIMIT_NOFILE's soft limit at Start:
//   fd_reserve       descriptors connections never take (files, peers,
//                    NATS): 0 = limit / 8, between 32 and 4096 (at most
//                    half the limit);
//   max_connections  open connections: 0 = limit - fd_reserve (larger is
//                    lowered to that);
//   max_connections_per_peer  from one client IP address: 0 =
//                    max_connections / 4 (at least 1).
// An address holding no connection (a health probe, a new client) may go
// fd_reserve / 2 beyond both caps: the other half of the reserve is never
// given to a connection. A connection is also refused when its descriptor
// number reaches the limit less the reserve. When accept4 fails for want of
// descriptors (EMFILE, ENFILE) the oldest silent connection is reset, or
// else a spare descriptor kept for that is freed to take and reset the
// newcomer, so that the kernel's queue drains instead of filling (with
// neither, the listener pauses for 100 ms).
//
// gRPC closes a connection's descriptor without telling anyone: the gate
// knows each one by (descriptor, device, inode) and a sweep (every 500 ms,
// and before refusing for a count) drops those that no longer match.
// Refusals and closed silent connections are logged at most once every
// 10 s (a WARNING line with the counts).
//
//   ConnectionGate::Limits limits = ConnectionGate::Resolve(options, &notes);
//   if (ConnectionGate::SplitHostPort(address, &host, &port)) {
//     acceptor = builder.experimental().AddExternalConnectionAcceptor(...);
//     gate = std::make_unique<ConnectionGate>(limits);
//     ZOOM_RETURN_IF_ERROR(gate->Listen(address, host, port));
//     server = builder.BuildAndStart();
//     ZOOM_RETURN_IF_ERROR(gate->Start(std::move(acceptor)));
//   }
//   ... gate->Stop();  // before the gRPC server shuts down
//
// Thread safety: Listen, Start and Stop from one thread (Stop, idempotent,
// also from the destructor: it joins the gate's thread); port() once
// Listen has returned; Stats from any thread. The gate's own thread does
// the accepting, the hand-over and the timeouts.
#ifndef ZOOM_SERVER_GRPC_CONNECTION_GATE_H_
#define ZOOM_SERVER_GRPC_CONNECTION_GATE_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <grpcpp/server_builder.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace zoom::server {

// RLIMIT_NOFILE now (soft, hard; RLIM_INFINITY and anything above 2^30 as
// 2^30; 1024 both when it cannot be read).
struct FdLimits {
  int soft = 0;
  int hard = 0;
};

FdLimits CurrentFdLimits();

// What the connection gate (ServerOptions::Connections) holds and has
// refused since Start.
struct ConnectionStats {
  bool gated = false;  // false: gRPC's own listener (a unix: address), no caps
  int fd_limit = 0;    // RLIMIT_NOFILE at Start (soft, hard)
  int fd_hard_limit = 0;
  int fd_reserve = 0;  // the resolved caps
  int max_connections = 0;
  int max_connections_per_peer = 0;
  int64_t open = 0;    // connections accepted and not yet closed
  int64_t silent = 0;  // of which not handed to gRPC yet: no byte received
  int64_t peers = 0;   // client addresses among them
  int64_t accepted = 0;
  // Silent connections closed since Start: to make room for a new
  // connection at a cap, and at the handshake timeout.
  int64_t silent_evicted = 0;
  int64_t silent_expired = 0;
  // Refused since Start: over max_connections, over the per-address cap,
  // and for descriptors (the fd headroom, or accept4 EMFILE/ENFILE).
  int64_t refused_total_cap = 0;
  int64_t refused_peer_cap = 0;
  int64_t refused_fds = 0;
};

class ConnectionGate {
 public:
  // The caps asked for (ServerOptions::Connections' fields; 0: the
  // defaults above).
  struct Options {
    int fd_reserve = 0;
    int max_connections = 0;
    int max_connections_per_peer = 0;
    // A silent connection is reset after it; <= 0: 120 s (gRPC's default).
    absl::Duration handshake_timeout = absl::Seconds(10);
  };

  // The caps in force.
  struct Limits {
    int fd_limit = 0;
    int fd_hard_limit = 0;
    int fd_reserve = 0;
    int max_connections = 0;
    int max_per_peer = 0;
    absl::Duration silent_timeout = absl::Seconds(10);
  };

  // The caps from the options and RLIMIT_NOFILE now; `notes` gets what was
  // lowered (for the start line).
  static Limits Resolve(const Options& c, std::string* notes);

  // host:port (or [v6]:port): true and the parts; false for what gRPC
  // listens on itself (unix:, vsock:, other URIs).
  static bool SplitHostPort(const std::string& address, std::string* host, int* port);

  explicit ConnectionGate(const Limits& limits) : limits_(limits) {}
  ~ConnectionGate() { Stop(); }

  ConnectionGate(const ConnectionGate&) = delete;
  ConnectionGate& operator=(const ConnectionGate&) = delete;

  // Binds and listens on every address of `host` (a wildcard: [::] taking
  // IPv4 too, or 0.0.0.0 without IPv6); port 0: one free port for all.
  absl::Status Listen(const std::string& address, const std::string& host, int port);

  // The port listened on (the one picked for port 0).
  int port() const { return port_; }

  // Starts the gate's thread, which hands the connections it admits to
  // `acceptor` (the gRPC server built with it must be started).
  absl::Status Start(std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> acceptor);

  // Stops accepting, closes the listening sockets and the silent
  // connections (those handed over are gRPC's). Idempotent.
  void Stop();

  // Shuts down (shutdown(2), SHUT_RDWR: the descriptor stays gRPC's, to
  // close) every connection handed to gRPC that is still open (descriptor,
  // device and inode as recorded); returns how many. For the end of a
  // drain (zoom_server.h): a call a client sends after it fails on the
  // client's side as UNAVAILABLE (the connection broke: retryable), where
  // a call reaching a gRPC server that is shutting down is answered
  // CANCELLED, which clients do not retry. After Stop: no new connection
  // comes. A descriptor gRPC closes and the process reuses between the
  // check and the shutdown would be hit: the window is a system call wide,
  // and the caller is stopping.
  int Sever();

  // The caps in force and the counts (gated: true).
  ConnectionStats Stats() const;

 private:
  enum Verdict { kAdmit = -1, kTotalCap = 0, kPeerCap = 1, kFds = 2 };
  enum Tag : uint64_t { kWake = 0, kListener = 1, kSilent = 2 };
  struct Conn {
    dev_t dev;
    ino_t ino;
    std::string peer;
    int listener;
    uint64_t seq;  // != 0 while silent (the key in silent_ and the peer's)
    absl::Time since;
  };
  struct Peer {
    int held = 0;                     // silent and handed over
    std::map<uint64_t, int> silent;   // seq -> fd, oldest first
  };

  bool Watch(int fd, Tag tag, uint32_t events);
  void Run();

  // Until the next thing to do without an event: a silent connection's
  // timeout, a paused listener, or the sweep (500 ms).
  int NextWakeMs();

  // Accepts what is queued on listener l (a bounded batch: back to
  // epoll_wait, which reports the rest at once).
  void Drain(size_t l);

  // A silent connection has bytes (hand it to gRPC), is closed by its
  // client (close it), or nothing yet (keep it).
  void OnSilentReady(int fd, bool hand_over = false);

  // Silent connections past the handshake timeout are reset.
  void ExpireSilent(absl::Time now);

  bool EvictOldestSilent(const std::string* peer);

  // accept4 failed for want of descriptors (another part of the process
  // holds them) and no silent connection can give one back: free the spare
  // descriptor, take the connection, reset it, take the spare back, so that
  // the queue drains instead of filling. False without a spare.
  bool ShedWithSpare(int lfd, int err);

  Verdict DecideLocked(int fd, const std::string& peer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int OldestSilentLocked(const std::string* peer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Forgets a connection (the caller closes it, or gRPC has).
  void RemoveLocked(int fd) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // A descriptor number the kernel just handed out: a connection recorded
  // under it was closed by gRPC.
  void ForgetLocked(int fd) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { RemoveLocked(fd); }

  void SweepLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void NoteRefusalLocked(Verdict v, const std::string& peer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // At most one line every 10 s while connections are refused or silent
  // ones closed (the first at once).
  void MaybeLog();

  const Limits limits_;
  std::vector<int> listeners_;
  std::vector<std::string> bound_;
  std::vector<absl::Time> paused_until_;  // InfinitePast: listening
  int port_ = 0;
  int epoll_ = -1;
  int wake_[2] = {-1, -1};
  int spare_fd_ = -1;
  std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> acceptor_;
  std::thread thread_;

  mutable absl::Mutex mu_;
  std::unordered_map<int, Conn> conns_ ABSL_GUARDED_BY(mu_);
  std::unordered_map<std::string, Peer> peers_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, int> silent_ ABSL_GUARDED_BY(mu_);  // seq -> fd, oldest first
  uint64_t seq_ ABSL_GUARDED_BY(mu_) = 0;
  ConnectionStats counts_ ABSL_GUARDED_BY(mu_);
  absl::Time last_sweep_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int64_t window_[3] ABSL_GUARDED_BY(mu_) = {0, 0, 0};
  int64_t window_evicted_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t window_expired_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t out_of_fds_ ABSL_GUARDED_BY(mu_) = 0;
  int last_errno_ ABSL_GUARDED_BY(mu_) = 0;
  std::string last_refused_peer_ ABSL_GUARDED_BY(mu_);
  absl::Time logged_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace zoom::server

#endif  // ZOOM_SERVER_GRPC_CONNECTION_GATE_H_
