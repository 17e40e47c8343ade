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
//
// They measure what zoombench measures in process, the same way: the data
// set (Dataset: common/vector_dataset.h), the tie-aware recall
// (common/recall.h), the tables and JSON lines (common/report_table.h), the
// process figures (common/process.h).
#ifndef ZOOM_LOADTEST_SERVER_WORKLOAD_H_
#define ZOOM_LOADTEST_SERVER_WORKLOAD_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/metric.h"
#include "common/report_table.h"
#include "loadtest/zoomd_child.h"

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
// (the first of cosine, l2, ip with ground truth), as zoombench does
// (MetricOrDefault).
absl::StatusOr<Metric> MetricFor(const std::string& dir);
// --k checked: InvalidArgument unless 1..1000.
absl::StatusOr<uint32_t> KFlag();

// What StartZoomd does with the data dir it is given.
enum class DataDir {
  kKeep,  // serve what is there (or start empty)
  kWipe,  // remove it and its log first
};

// The zoomd of --zoomd (ZoomdFlag) started on `data_dir`, its output
// appended to data_dir + ".log", with `flags` after the fixed ones
// (ZoomdChildOptions::flags) and ZoomdChildOptions' default timeouts.
// Returns it once it serves; errors: ZoomdFlag's, a data dir that cannot be
// wiped, ZoomdChild::Start's. Call from the thread that will stop it
// (ZoomdChild).
absl::StatusOr<std::unique_ptr<ZoomdChild>> StartZoomd(const std::string& data_dir, DataDir mode,
                                                       std::vector<std::string> flags);

}  // namespace zoom::load

#endif  // ZOOM_LOADTEST_SERVER_WORKLOAD_H_
