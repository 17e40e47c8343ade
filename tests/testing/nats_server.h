// File: tests/testing/nats_server.h
//
// nats-server (Debian's package) as a child process of a test, with
// JetStream, on loopback ports reserved before it starts (RefusedPort,
// shareable), its store in a directory of the test's. NatsCluster: three of
// them routed to each other (a JetStream cluster, R=3 streams possible).
//
// A server can be killed (SIGKILL, SIGSTOP...) and started again on the same
// ports and store, as a restarted machine would.
//
// Its max_payload is zoomd's (kZoomdNatsMaxPayload, 8 MB: a log entry holds
// a point's payload and fields, up to 1 MiB as sent, with its vector;
// nats-server's default of 1 MB is too small, docs/cluster.md), set in a
// config file beside its store (nats-server 2.9 has no flag for it);
// set_max_payload gives a test another one.
#ifndef ZOOM_TESTS_TESTING_NATS_SERVER_H_
#define ZOOM_TESTS_TESTING_NATS_SERVER_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "tests/testing/test_env.h"

namespace zoom::testing {

// The nats-server binary ("" when not installed).
std::string NatsServerBinary();

// The max_payload the servers get unless a test says otherwise.
inline constexpr int64_t kZoomdNatsMaxPayload = int64_t{8} << 20;

class NatsServer {
 public:
  // `store_dir`: JetStream's store (created by the server). `routes`: the
  // cluster ports of the peers (empty: a single server, no cluster).
  NatsServer(std::string name, std::string store_dir, std::vector<int> route_ports = {},
             bool clustered = false);
  ~NatsServer();
  NatsServer(const NatsServer&) = delete;
  NatsServer& operator=(const NatsServer&) = delete;

  // Starts the process; false if it could not (the log says why). Then
  // waits until the client port accepts connections (at most `timeout`).
  bool Start(absl::Duration timeout = absl::Seconds(20));
  // Sends `sig`; SIGKILL/SIGTERM also reap the process.
  void Signal(int sig);
  bool running() const { return pid_ > 0; }

  std::string url() const { return "nats://127.0.0.1:" + std::to_string(client_.port()); }
  int cluster_port() const { return cluster_.port(); }
  void set_route_ports(std::vector<int> ports) { route_ports_ = std::move(ports); }
  // Takes effect at the next Start.
  void set_max_payload(int64_t bytes) { max_payload_ = bytes; }
  // The server's log so far (for failure messages).
  std::string Log() const;

 private:
  std::string name_, store_dir_, log_path_, config_path_;
  int64_t max_payload_ = kZoomdNatsMaxPayload;
  std::vector<int> route_ports_;
  bool clustered_;
  RefusedPort client_{true}, cluster_{true};
  pid_t pid_ = -1;
};

// Three clustered servers on loopback, started together.
class NatsCluster {
 public:
  explicit NatsCluster(const std::string& dir, int size = 3);
  bool Start(absl::Duration timeout = absl::Seconds(30));
  NatsServer& server(int i) { return *servers_[i]; }
  int size() const { return static_cast<int>(servers_.size()); }
  std::vector<std::string> urls() const;

 private:
  std::vector<std::unique_ptr<NatsServer>> servers_;
};

}  // namespace zoom::testing

#endif  // ZOOM_TESTS_TESTING_NATS_SERVER_H_
