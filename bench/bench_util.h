// File: bench/bench_util.h
//
// Shared pieces of zoombench's workloads: the workload registry, latency
// percentiles, JSON lines output and plain-text tables.
#ifndef ZOOM_BENCH_UTIL_H_
#define ZOOM_BENCH_UTIL_H_

#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"

namespace zoom::bench {

// Where a workload writes its results: a human table on stdout and, when
// --json is given, one JSON object per line.
class Reporter {
 public:
  explicit Reporter(const std::string& json_path);  // "" = no JSON
  ~Reporter();
  bool ok() const { return json_path_.empty() || json_ != nullptr; }

  using Value = std::variant<std::string, double, int64_t, bool>;
  using Fields = std::vector<std::pair<std::string, Value>>;
  // Appends one JSON line (no-op without --json).
  void JsonLine(const Fields& fields);

 private:
  std::string json_path_;
  std::FILE* json_ = nullptr;
};

// A fixed-width text table printed as rows arrive.
class Table {
 public:
  explicit Table(std::vector<std::string> headers, int width = 12);
  void Row(const std::vector<std::string>& cells);

 private:
  std::vector<std::string> headers_;
  int width_;
  bool printed_header_ = false;
};

// The p-th percentile (0..100) of `sorted` (ascending), nearest-rank.
double Percentile(const std::vector<double>& sorted, double p);
// "%.*f" of `v`.
std::string Fmt(double v, int digits = 1);

// A named workload: `zoombench --benchmarks=NAME`.
using WorkloadFn = std::function<absl::Status(Reporter&)>;
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
  virtual absl::Status Run(Reporter& rep) = 0;
  virtual absl::Status Report(Reporter& rep) = 0;
};

// Makes a W and runs its three steps in order.
template <typename W>
absl::Status RunWorkload(Reporter& rep) {
  W workload;
  Workload& w = workload;
  if (absl::Status st = w.Setup(); !st.ok()) return st;
  if (absl::Status st = w.Run(rep); !st.ok()) return st;
  return w.Report(rep);
}

// Runs `cmd` through the shell and returns its standard output.
absl::Status RunCommand(const std::string& cmd, std::string* output);

}  // namespace zoom::bench

#endif  // ZOOM_BENCH_UTIL_H_
