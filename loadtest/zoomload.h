// File: loadtest/zoomload.h
//
// The testable parts of zoomload, the gRPC load generator of zoomd:
//
//   LatencyHistogram  a log-bucketed latency histogram (about 0.8% bucket
//                     width, exact below 128 ns) with nearest-rank
//                     percentiles;
//   PoissonSchedule   the open loop's arrival times: exponential
//                     inter-arrival gaps from a seeded RNG;
//   RunStep           one measured step, closed loop (N workers, each sends
//                     its next request after the reply) or open loop (a
//                     dispatcher issues asynchronous requests at their
//                     scheduled times; latency counts from the INTENDED send
//                     time, so a slow server cannot hide its queueing delay:
//                     no coordinated omission);
//   StepResult        a step's figures, and the writers: summary table, JSON
//                     report, SVG latency-vs-load plot, and the knee.
//
// The workloads (what a request is) live in zoomload_main.cc behind the
// RequestSource interface. The server workloads (grpc, fgd, scale: a zoomd
// started as a child process and measured) are server_workload.h's.
#ifndef ZOOM_LOADTEST_ZOOMLOAD_H_
#define ZOOM_LOADTEST_ZOOMLOAD_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace zoom::load {

using Clock = std::chrono::steady_clock;

// ---- LatencyHistogram ---------------------------------------------------------

// Counts non-negative integer values (nanoseconds here) in logarithmic
// buckets: values below 2^kSubBits are exact; above, each power-of-two range
// [2^e, 2^(e+1)) is cut into 2^kSubBits equal buckets, so a bucket is at most
// 1/128 (0.78%) of its lower bound wide and a reported percentile (the
// bucket's midpoint, clamped to the exact min and max) is within 0.4% of the
// true sample. Covers the whole uint64 range in 7424 buckets.
//
// Not thread-safe: callers serialise Record and the readers.
class LatencyHistogram {
 public:
  static constexpr int kSubBits = 7;
  static constexpr uint64_t kSubCount = uint64_t{1} << kSubBits;  // 128
  static constexpr int kBuckets = (64 - kSubBits + 1) * kSubCount;

  LatencyHistogram();

  void Record(uint64_t value, uint64_t times = 1);
  void Merge(const LatencyHistogram& other);
  void Clear();

  uint64_t count() const { return count_; }
  uint64_t min() const { return count_ == 0 ? 0 : min_; }
  uint64_t max() const { return max_; }
  double mean() const;

  // The nearest-rank p-th percentile (0 <= p <= 100): the smallest sample
  // such that at least p% of the samples are <= it, as the midpoint of its
  // bucket. p = 0 gives min(), p = 100 max(); 0 when empty.
  double Percentile(double p) const;

  // Bucket geometry: index of a value, and the [low, high) range of an index.
  static int BucketIndex(uint64_t value);
  static uint64_t BucketLow(int index);
  static uint64_t BucketHigh(int index);  // exclusive; saturates at 2^64-1

  // The non-empty buckets in ascending order: (index, count).
  std::vector<std::pair<int, uint64_t>> NonEmptyBuckets() const;

 private:
  std::vector<uint64_t> counts_;
  uint64_t count_ = 0;
  uint64_t min_ = std::numeric_limits<uint64_t>::max();
  uint64_t max_ = 0;
  long double sum_ = 0;
};

// ---- PoissonSchedule --------------------------------------------------------------

// Arrival times of a Poisson process of `rate` events per second: each call
// of Next() adds an exponential gap of mean 1/rate seconds (inverse CDF of a
// uniform from a std::mt19937_64 seeded with `seed`, so the sequence is the
// same on every platform) and returns the time since the start, in seconds.
class PoissonSchedule {
 public:
  PoissonSchedule(double rate, uint64_t seed);
  double NextGap();  // seconds
  double Next();     // seconds since the start
  double rate() const { return rate_; }

 private:
  double rate_;
  std::mt19937_64 rng_;
  double t_ = 0;
};

// ---- Requests -----------------------------------------------------------------------

// What one completed request reports to the runner.
struct Outcome {
  int code = 0;                // grpc::StatusCode (0 = OK)
  const char* op = "search";   // "search", "upsert", "delete", "topk"
  // recall@k of a search (NaN when not scored: no ground truth, an error).
  double recall = std::numeric_limits<double>::quiet_NaN();
  int64_t ssd_reads = -1;      // QueryStats.ssd_reads; -1 = not reported
};

// A workload: Start() issues request number `seq` asynchronously and
// returns at once; `done` is called exactly once, on any thread, when the
// reply (or error) arrives. Must be callable from several threads at once.
class RequestSource {
 public:
  virtual ~RequestSource() = default;
  virtual void Start(uint64_t seq, std::function<void(const Outcome&)> done) = 0;
};

// ---- RunStep ---------------------------------------------------------------------------

struct StepConfig {
  bool open_loop = false;
  int concurrency = 1;   // closed loop: workers
  double rate = 0;       // open loop: offered requests per second
  double warmup_s = 0;   // requests started (open loop: scheduled) before
                         // start + warmup are not counted
  double duration_s = 1; // measured window; no request starts after it
  uint64_t max_requests = 0;  // measured requests issued at most (0: no cap)
  uint64_t seed = 1;          // PoissonSchedule seed
  // Open loop: at most this many requests in flight; the dispatcher waits
  // (the waiting time still counts as latency, from the intended time).
  int max_in_flight = 4096;
  // Progress on stderr: "" = none, else a line prefix. Redrawn with '\r'
  // four times a second on a terminal; one line per second otherwise.
  std::string progress_label;
  bool progress_tty = false;
};

struct OpStats {
  LatencyHistogram latency;  // successful requests only, nanoseconds
  uint64_t ok = 0;
  uint64_t errors = 0;
};

struct StepResult {
  // What was offered.
  bool open_loop = false;
  int concurrency = 0;
  double offered_rate = 0;    // the --rate asked for
  double scheduled_rate = 0;  // measured requests issued / duration (open
                              // loop: the Poisson schedule's own realised rate)
  double duration_s = 0;      // the configured measured window
  double warmup_s = 0;
  // What happened (measured requests only).
  // From the end of the warm-up to the last completion, at least duration_s
  // unless max_requests ended the step early; qps() = requests / window_s.
  double window_s = 0;
  uint64_t issued = 0;
  uint64_t requests = 0;  // completed: ok + errors
  uint64_t ok = 0;
  uint64_t errors = 0;
  std::map<std::string, uint64_t> errors_by_code;  // "DEADLINE_EXCEEDED" -> n
  LatencyHistogram latency;  // every successful request, nanoseconds
  std::map<std::string, OpStats> by_op;
  double recall_sum = 0;
  uint64_t recall_samples = 0;
  double reads_sum = 0;
  uint64_t reads_samples = 0;
  // Open loop: how late the dispatcher issued requests (actual - intended).
  LatencyHistogram send_lag;
  uint64_t warmup_requests = 0;

  double qps() const { return window_s > 0 ? requests / window_s : 0; }
  double recall() const;           // mean recall@k; NaN when none scored
  double reads_per_query() const;  // NaN when no search reported stats
  double p_us(double p) const { return latency.Percentile(p) / 1000.0; }
};

// Runs one step against `source` and returns its figures. Returns when every
// issued request has completed (each request carries its own deadline).
StepResult RunStep(RequestSource& source, const StepConfig& config);

// ---- Reports ----------------------------------------------------------------------------

// The percentiles listed in every report.
inline constexpr double kReportPercentiles[] = {0,  50,   75,    90,   95,
                                                99, 99.9, 99.99, 100};

// Context written beside the figures in the JSON report.
struct ReportContext {
  std::string workload;
  std::string target;
  std::string collection;  // or the model for topk
  std::string dataset;
  uint32_t k = 0;
  std::string knobs;  // e.g. "ef=64 nprobe=0 rerank=0"
};

// The knee of a sweep (document: the rule is also in zoomload's --help):
// steps are taken in order; step i "keeps up" when
//   * at most 1% of its requests failed, and
//   * its p99 is at most 10x the first step's p99, and
//   * open loop: its achieved QPS is at least 95% of its scheduled rate;
//     closed loop: its QPS is at least 5% above the best QPS of the earlier
//     steps (more workers still buy throughput; the first step passes).
// The knee is the last step of the leading run of steps that keep up, or
// nullopt when the first step already fails.
std::optional<size_t> FindKnee(const std::vector<StepResult>& steps);

// One JSON object for a step (keys: see zoomload's --help).
std::string StepJson(const StepResult& step, const ReportContext& context,
                     bool knee);
// The whole report: one object for a single step, else an array.
std::string ReportJson(const std::vector<StepResult>& steps,
                       const ReportContext& context, bool sweep);

// The summary table: a header and one row per step, then the errors by
// code and, for mixed workloads, the latency by operation.
std::string SummaryTable(const std::vector<StepResult>& steps);

// An SVG plot of p50 / p99 / p99.9 latency (log y axis) against the offered
// load (rate or concurrency) of each step, the knee marked; `subtitle` (a
// smaller second line, e.g. the knobs and recall) may be empty.
std::string LatencySvg(const std::vector<StepResult>& steps, const std::string& title,
                       const std::string& subtitle = "");

// Writes `text` to `path` (truncating).
absl::Status WriteTextFile(const std::string& path, const std::string& text);

// "1.23 ms"-style rendering of a latency in microseconds.
std::string HumanMicros(double us);

// Comma list of positive numbers ("100,200,400"); integers when `integers`.
absl::StatusOr<std::vector<double>> ParseNumberList(const std::string& text,
                                                    bool integers);

}  // namespace zoom::load

#endif  // ZOOM_LOADTEST_ZOOMLOAD_H_
