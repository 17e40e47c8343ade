// File: bench/bench_util.h
//
// zoombench's workload registry and the shape every workload has. What a
// workload prints (tables, JSON lines, percentiles) is common/report_table.h,
// shared with zoomload's server workloads.
#ifndef ZOOM_BENCH_UTIL_H_
#define ZOOM_BENCH_UTIL_H_

#include <functional>
#include <map>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "common/report_table.h"

namespace zoom::bench {

// A named workload: `zoombench --benchmarks=NAME`. It writes a table on
// stdout and, with --json, one JSON line per configuration to `rep`.
using WorkloadFn = std::function<absl::Status(JsonLines& rep)>;
std::map<std::string, WorkloadFn>& Workloads();
struct RegisterWorkload {
  RegisterWorkload(const std::string& name, WorkloadFn fn) {
    Workloads()[name] = std::move(fn);
  }
};

// The shape of a workload: Setup reads its flags and loads or builds what
// it measures (nothing timed), Run measures (a table row and a JSON line per
// configuration, printed as they come), Report prints what sums the rows
// up (side by side, Pareto front, the load average). An error from a step
// ends the workload. Registered by name with RunWorkload<TheWorkload> as
// its WorkloadFn.
class Workload {
 public:
  virtual ~Workload() = default;
  virtual absl::Status Setup() = 0;
  virtual absl::Status Run(JsonLines& rep) = 0;
  virtual absl::Status Report(JsonLines& rep) = 0;
};

// Makes a W and runs its three steps in order.
template <typename W>
absl::Status RunWorkload(JsonLines& rep) {
  W workload;
  Workload& w = workload;
  if (absl::Status st = w.Setup(); !st.ok()) return st;
  if (absl::Status st = w.Run(rep); !st.ok()) return st;
  return w.Report(rep);
}

}  // namespace zoom::bench

#endif  // ZOOM_BENCH_UTIL_H_
