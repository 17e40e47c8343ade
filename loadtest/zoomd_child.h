// File: loadtest/zoomd_child.h
//
// ZoomdChild: the zoomd binary as a child process of zoomload's server
// workloads (grpc, fgd, scale), so that what is measured is a real server
// in its own process: its RSS and CPU time are its own (/proc/PID), and a
// client reaches it over loopback as any client would.
//
// zoomd listens on a port the OS picks (--grpc_address=127.0.0.1:0) and
// writes it to --port_file; Start waits for the file and for Health to
// answer SERVING. Its stdout and stderr go to a log file (appended). The
// child gets SIGKILL when zoomload ends however it ends (PR_SET_PDEATHSIG),
// and from the destructor.
//
// Not thread-safe: Start and Stop from one thread (the one that forked:
// PDEATHSIG follows it); client() may be used from several threads.
#ifndef ZOOM_LOADTEST_ZOOMD_CHILD_H_
#define ZOOM_LOADTEST_ZOOMD_CHILD_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/zoom_client.h"

namespace zoom::load {

struct ZoomdChildOptions {
  std::string binary;    // the zoomd executable
  std::string data_dir;  // --data_dir (kept: the caller wipes it when it wants)
  std::string log_path;  // stdout and stderr, appended
  // Flags after the fixed ones (--data_dir, --port_file,
  // --grpc_address=127.0.0.1:0, --metrics_address=), e.g. "--threads=16".
  std::vector<std::string> flags;
  absl::Duration client_timeout = absl::Hours(3);  // builds and compactions at 10M
  absl::Duration start_timeout = absl::Minutes(30);
};

class ZoomdChild {
 public:
  explicit ZoomdChild(ZoomdChildOptions options);
  ~ZoomdChild();
  ZoomdChild(const ZoomdChild&) = delete;
  ZoomdChild& operator=(const ZoomdChild&) = delete;

  // Starts zoomd and waits until it answers SERVING; the seconds that took.
  // An error when it exits first (see the log) or takes longer than
  // start_timeout.
  absl::StatusOr<double> Start();
  // SIGTERM and wait for the exit (SIGKILL after 10 min); an error unless
  // it exits 0. No-op when not running.
  absl::Status Stop();

  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  const std::string& target() const { return target_; }  // "127.0.0.1:PORT"
  const std::string& log_path() const { return options_.log_path; }
  // The client of the running server (its options' client_timeout).
  client::ZoomClient& client() { return *client_; }

  uint64_t Rss() const;      // VmRSS
  uint64_t PeakRss() const;  // VmHWM
  // Resets VmHWM to the current RSS (Linux >= 4.0).
  void ResetPeak() const;
  double CpuSeconds() const;  // user + system, every thread

 private:
  ZoomdChildOptions options_;
  std::string port_file_;
  std::string target_;
  pid_t pid_ = -1;
  std::unique_ptr<client::ZoomClient> client_;
};

// The default zoomd binary: ../server/main/zoomd next to this executable
// (the build tree's layout).
std::string DefaultZoomdBinary();

// The SIMD kernels zoomd's start-up line names (", kernels X, sync "): X of
// the log's last such line, or "?" when it has none.
std::string KernelsFromLog(const std::string& log_path);

}  // namespace zoom::load

#endif  // ZOOM_LOADTEST_ZOOMD_CHILD_H_
