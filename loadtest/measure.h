// File: loadtest/measure.h
//
// The measurement helpers of zoomload's server workloads (grpc, fgd, scale:
// server_workload.h), which measure a zoomd they start themselves and print
// what zoombench's workloads print, in zoombench's formats, so that a
// driver can put their rows beside zoombench's in-process ones
// (loadtest/grpc_overhead.py):
//
//   JsonLines      one JSON object per line (zoombench's --json format);
//   Table          a fixed-width table printed as rows arrive (zoombench's);
//   Percentile     nearest rank over a sorted sample;
//   ScoredSet      a data set folder with its exact ground truth, and the
//                  tie-aware recall zoombench scores every answer with;
//   process figures: CPU seconds, RSS and peak RSS of this process or a
//                  child, the load average.
//
// These mirror bench/bench_util.h and bench/bench_dataset.h: loadtest/ may
// not use bench/ (ARCHITECTURE.md), and the same figures must mean the same
// on both sides of the comparison.
#ifndef ZOOM_LOADTEST_MEASURE_H_
#define ZOOM_LOADTEST_MEASURE_H_

#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/metric.h"
#include "common/texmex.h"

namespace zoom::load {

// ---- Output -----------------------------------------------------------------------

// JSON lines: one object per call, flushed at once ("" = none written).
class JsonLines {
 public:
  explicit JsonLines(const std::string& path);
  ~JsonLines();
  JsonLines(const JsonLines&) = delete;
  JsonLines& operator=(const JsonLines&) = delete;
  bool ok() const { return path_.empty() || file_ != nullptr; }

  using Value = std::variant<std::string, double, int64_t, bool>;
  using Fields = std::vector<std::pair<std::string, Value>>;
  // Doubles as %.6g (null when not finite), as zoombench writes them.
  void Line(const Fields& fields);

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
};

// A fixed-width table on stdout: the header and a rule before the first
// row, each cell right-aligned in `width` characters.
class Table {
 public:
  explicit Table(std::vector<std::string> headers, int width = 12);
  void Row(const std::vector<std::string>& cells);

 private:
  std::vector<std::string> headers_;
  int width_;
  bool printed_header_ = false;
};

// "%.*f" of `v`.
std::string Fmt(double v, int digits = 1);
// The p-th percentile (0..100) of `sorted` (ascending), nearest rank; NaN
// when empty.
double Percentile(const std::vector<double>& sorted, double p);
// A comma list of positive integers ("1,2,4").
absl::StatusOr<std::vector<int>> ParseIntList(const std::string& text);

// ---- Data and recall ------------------------------------------------------------------

// A data set folder (common/vector_dataset.h) in memory for one metric: the
// base (widened to float, as stored: never normalised), the first queries
// and their exact ground truth with scores.
struct ScoredSet {
  std::string name, dir;
  Metric metric = Metric::kL2;
  bool is_uint8 = false;  // base.bvecs
  VecsMatrix<float> base;
  VecsMatrix<float> queries;
  VecsMatrix<int32_t> gt;
  VecsMatrix<float> gt_dist;  // l2: squared distance ascending; ip, cosine: descending
  uint32_t dim() const { return base.dim; }
};

// Loads DIR: every base row, at most `max_queries` queries (0: all) and
// their ground truth for `metric`.
absl::StatusOr<ScoredSet> LoadScoredSet(const std::string& dir, Metric metric,
                                        uint64_t max_queries);

// Tie-aware recall@k of query q's answer ids[0..n_ids) (best first, -1 =
// none), as zoombench's RecallAtK: an id counts when its exact score (in
// double) is at least as good as the k-th ground-truth score, within a
// 1e-6 relative tolerance; each id once. hits / k, NaN when the ground
// truth has fewer than k columns.
double RecallAtK(const ScoredSet& set, size_t q, const int64_t* ids, size_t n_ids, size_t k);

// ---- Processes ------------------------------------------------------------------------

// CPU time (user + system, every thread) in seconds: this process
// (getrusage), another one (/proc/PID/stat; 0 when unavailable).
double ProcessCpuSeconds();
double CpuSecondsOf(int pid);
// VmRSS and VmHWM of a process in bytes (/proc/PID/status; 0 when unavailable).
uint64_t RssBytesOf(int pid);
uint64_t PeakRssBytesOf(int pid);
// The 1-minute load average, -1 when unavailable. The machine is shared:
// the workloads print it beside their timings.
double LoadAverage1m();
// The directory of this executable ("." when unknown).
std::string SelfDir();
// Runs `command` through the shell; its standard output, or an error with
// its exit status.
absl::StatusOr<std::string> RunCommand(const std::string& command);

}  // namespace zoom::load

#endif  // ZOOM_LOADTEST_MEASURE_H_
