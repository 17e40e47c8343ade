// File: loadtest/server_workload.h
//
// zoomload's server workloads: benchmarks that start their own zoomd (a
// ZoomdChild, zoomd_child.h) on loopback and measure it through the
// client, the over-the-wire twins of zoombench's in-process workloads. One
// file per workload, each registering itself:
//
//   grpc   (workload_grpc.cc)   Search / SearchBatch: recall, QPS, latency,
//                               CPU per query of client + server, at 1..16
//                               callers; beside zoombench --benchmarks=
//                               collection over the same data dir
//                               (loadtest/grpc_overhead.py puts them side by side);
//   fgd    (workload_fgd.cc)    TopK and StreamTopK per context; beside
//                               zoombench --benchmarks=fgd's in-process time;
//   scale  (workload_scale.cc)  how the server's costs grow with N.
//
// The shape: zoomload_main checks that every flag given is one the workload
// reads (ServerWorkloadInfo::flags, besides --workload and --json), then
// calls, in order, ReadFlags (a bad value: a usage error, exit 2), Setup
// (load the data, start zoomd, prepare it), Run (the measurements: tables
// on stdout as they come, JSON lines to --json) and Report (the closing
// lines; stops zoomd). An error from Setup, Run or Report ends the run with
// exit status 1.
#ifndef ZOOM_LOADTEST_SERVER_WORKLOAD_H_
#define ZOOM_LOADTEST_SERVER_WORKLOAD_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/metric.h"
#include "loadtest/measure.h"

// Defined in zoomload_main.cc, shared with the load-test workloads.
ABSL_DECLARE_FLAG(std::string, dataset);
ABSL_DECLARE_FLAG(std::string, metric);
ABSL_DECLARE_FLAG(uint32_t, k);
ABSL_DECLARE_FLAG(uint32_t, ef);
ABSL_DECLARE_FLAG(uint32_t, nprobe);
ABSL_DECLARE_FLAG(uint32_t, rerank);
// Defined in server_workload.cc, for the server workloads only.
ABSL_DECLARE_FLAG(std::string, zoomd);
ABSL_DECLARE_FLAG(uint64_t, max_queries);

namespace zoom::load {

class ServerWorkload {
 public:
  virtual ~ServerWorkload() = default;
  // Reads and checks the workload's flags; InvalidArgument for a bad value.
  virtual absl::Status ReadFlags() = 0;
  virtual absl::Status Setup() = 0;
  virtual absl::Status Run(JsonLines& json) = 0;
  virtual absl::Status Report(JsonLines& json) = 0;
};

struct ServerWorkloadInfo {
  std::string summary;             // one line for the usage
  std::vector<std::string> flags;  // the flags it reads (besides --workload, --json)
  std::function<std::unique_ptr<ServerWorkload>()> make;
};

// By name; filled before main() by RegisterServerWorkload objects.
std::map<std::string, ServerWorkloadInfo>& ServerWorkloads();
struct RegisterServerWorkload {
  RegisterServerWorkload(const std::string& name, ServerWorkloadInfo info) {
    ServerWorkloads()[name] = std::move(info);
  }
};

// --zoomd resolved: the flag, or DefaultZoomdBinary(); NotFound when it is
// not an executable file.
absl::StatusOr<std::string> ZoomdFlag();
// --metric resolved for the folder `dir`: the flag, or the folder's default
// (the first of cosine, l2, ip with ground truth), as zoombench does.
absl::StatusOr<Metric> MetricFor(const std::string& dir);

}  // namespace zoom::load

#endif  // ZOOM_LOADTEST_SERVER_WORKLOAD_H_
