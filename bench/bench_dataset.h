// File: bench/bench_dataset.h
//
// The measurement harness shared by zoombench's search workloads: loading a
// data set folder with its exact ground truth, tie-aware recall, running the
// queries from N threads with per-query latency, memory helpers, and the
// reporting of one configuration (table row + JSON line) and of many
// (side-by-side at recall targets, Pareto front).
//
// A data set folder is laid out like ../shared/data/<set>/ and read by
// common/vector_dataset.h, the reader zoomload shares.
//
// Flags shared by the workloads are defined in bench_dataset.cc and declared
// here: --dataset, --metric, --threads, --k, --max_queries. Read them through
// the helpers below (DatasetDirFlag(), MetricFlag(), ThreadsFlag()), which
// resolve the defaults.
#ifndef ZOOM_BENCH_DATASET_H_
#define ZOOM_BENCH_DATASET_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/metric.h"
#include "common/query_stats.h"
#include "common/texmex.h"
#include "bench/bench_util.h"

// Data set folder; "" = DefaultDataRoot() + "/glove-6b-100d".
ABSL_DECLARE_FLAG(std::string, dataset);
// l2 | ip | cosine; "" = DatasetFolder::DefaultMetric() (the first of
// cosine, l2, ip with ground truth; l2 when none).
ABSL_DECLARE_FLAG(std::string, metric);
// Comma list of search thread counts, e.g. "1,2".
ABSL_DECLARE_FLAG(std::string, threads);
// Neighbours returned per query.
ABSL_DECLARE_FLAG(int32_t, k);
// Queries used (the first ones of the file); 0 = all.
ABSL_DECLARE_FLAG(int64_t, max_queries);

namespace zoom::bench {

// A data set in memory. Vectors are as stored (never normalised): a workload
// that needs unit vectors (cosine) makes its own copies.
struct Dataset {
  std::string name;  // folder name, e.g. "glove-6b-100d"
  std::string dir;
  Metric metric = Metric::kL2;
  bool is_uint8 = false;        // base was .bvecs
  VecsMatrix<float> base;       // widened to float when uint8; NOT normalised
  VecsMatrix<uint8_t> base_u8;  // filled only when is_uint8
  VecsMatrix<float> queries;    // NOT normalised
  VecsMatrix<int32_t> gt;       // top-100 ids per query, best first
  // Matching scores: l2 = squared distance ascending; ip / cosine =
  // similarity descending.
  VecsMatrix<float> gt_dist;

  size_t dim() const { return base.dim; }
};

// Loads DIR for `metric`: all base vectors and at most `max_queries` queries
// (0 = all) with their ground-truth rows. Errors name the missing file, or
// say which dimensions or row counts disagree.
absl::StatusOr<Dataset> LoadDataset(const std::string& dir, Metric metric,
                                    size_t max_queries = 0);

// The default root of the data set folders: "../shared/data" relative to the
// current directory when it exists, else relative to the source tree
// (ZOOM_SOURCE_DIR "/../shared/data", normalised).
std::string DefaultDataRoot();

// --dataset resolved: the flag, or DefaultDataRoot() + "/glove-6b-100d".
std::string DatasetDirFlag();
// --metric resolved for folder `dir` (see the flag's default rule).
absl::StatusOr<Metric> MetricFlag(const std::string& dir);
// --threads parsed ("1,2" -> {1, 2}); every entry must be >= 1.
absl::StatusOr<std::vector<int>> ThreadsFlag();
// Parses a comma list of positive integers ("16,32,64").
absl::StatusOr<std::vector<int>> ParseIntList(const std::string& s);

// The exact score of base row `id` for query `q` under ds.metric, in double:
// squared L2, inner product, or cosine similarity.
double TrueScore(const Dataset& ds, size_t q, size_t id);

// Tie-aware recall@k for query q of the returned ids `ids[0..n_ids)` (best
// first; -1 = none). Only the first min(n_ids, k) ids are considered. An id
// counts if its true score (TrueScore) is at least as good as
// gt_dist[q][k-1], with a 1e-6 relative tolerance for float32 rounding of
// the stored scores; each id counts once. Returns hits / k, or NaN when the
// ground truth has fewer than k columns or k == 0.
double RecallAtK(const Dataset& ds, size_t q, const int64_t* ids,
                 size_t n_ids, size_t k);

struct RunResult {
  // Mean tie-aware recall; NaN when the run's k (or the ground truth) is too
  // small for that cut-off.
  double recall_at_1 = std::numeric_limits<double>::quiet_NaN();
  double recall_at_10 = std::numeric_limits<double>::quiet_NaN();
  double recall_at_100 = std::numeric_limits<double>::quiet_NaN();
  double qps = 0;  // queries / wall time of the timed pass
  double p50_us = 0, p99_us = 0, p999_us = 0;  // per-call latency
  double reads_per_query = 0, bytes_per_query = 0;  // from QueryStats
  // Per-stage latency percentiles from QueryStats (0 for systems that do not
  // fill it): the preview in RAM, the fullview's reads, the exact re-rank.
  double preview_p50_us = 0, preview_p99_us = 0;
  double fullview_p50_us = 0, fullview_p99_us = 0;
  double rerank_p50_us = 0, rerank_p99_us = 0;
  size_t queries = 0;
  // The process's CPU time (user + system, every thread: a server in the
  // same process counts too) over the timed pass, per query.
  double cpu_us_per_query = 0;
};

// Answers query `q`: writes up to `k` ids (best first) to out_ids[0..k),
// padding with -1, and may fill `stats` (zeroed before the call). Called
// concurrently from `threads` threads, so it must be thread-safe.
using SearchFn = std::function<absl::Status(size_t q, size_t k,
                                            int64_t* out_ids,
                                            QueryStats* stats)>;

// Runs every query of `ds` once with `threads` threads (each thread takes the
// next query from a shared counter), timing each call. A warm-up pass over
// the first min(200, nq) queries runs first and is not counted. QPS =
// queries / wall time of the timed pass. Recall is computed after the timed
// pass from the returned ids. Returns the first error a SearchFn returned
// (the remaining queries are then skipped).
absl::StatusOr<RunResult> RunQueries(const Dataset& ds, size_t k, int threads,
                                     const SearchFn& fn);

// Resident set size (VmRSS) and its peak (VmHWM) of this process in bytes,
// from /proc/self/status; 0 when unavailable.
uint64_t CurrentRssBytes();
uint64_t PeakRssBytes();
// The same of another process (/proc/PID/status); 0 when unavailable.
uint64_t RssBytesOf(int pid);
uint64_t PeakRssBytesOf(int pid);
// The 1-minute load average (/proc/loadavg), -1 when unavailable. This
// machine is shared: a load above the core count means the timings are
// contaminated by other processes, so workloads print it beside them.
double LoadAverage1m();
// This process's CPU time so far (user + system, all threads), in seconds.
double ProcessCpuSeconds();

// One configuration of one system.
struct ConfigResult {
  std::string name;     // system, e.g. "faiss_hnsw_flat"; "zoomd..." = ours
  std::string dataset;  // Dataset::name
  std::string params;   // the knobs, e.g. "ef=64,kf=4"
  int threads = 1;
  size_t k = 10;
  RunResult run;
  uint64_t resident_bytes = 0;  // the index's own memory, from its structures
  uint64_t n_vectors = 0;       // indexed vectors (for bytes per vector)
  uint64_t rss_bytes = 0;       // process RSS when measured
};

// The table Report() prints rows into (column headers matching Report).
Table MakeResultTable();
// Prints `r` as a row of `table` and writes it as one JSON line with the
// fields name, dataset, params, recall_at_1, recall_at_10, recall_at_100,
// qps, p50_us, p99_us, p999_us, reads_per_query, bytes_per_query,
// resident_bytes, bytes_per_vector, rss_bytes, threads, k, queries.
void Report(Reporter& rep, Table& table, const ConfigResult& r);

// True for the systems that are not baselines (names starting with "zoomd").
bool IsOurs(const std::string& name);

// For each thread count present, each target in `targets` and each system
// (in order of first appearance), prints the fastest configuration whose
// recall@10 >= target: QPS, p99, resident bytes, bytes per vector and the QPS
// ratio to the best baseline at that target and thread count.
void PrintSideBySide(const std::vector<ConfigResult>& results,
                     const std::vector<double>& targets);

// The configurations of `results` not dominated in (recall@10 higher, QPS
// higher), sorted by recall@10 ascending. Callers usually pass one system at
// one thread count. Results with NaN recall@10 are ignored.
std::vector<ConfigResult> ParetoFront(const std::vector<ConfigResult>& results);

}  // namespace zoom::bench

#endif  // ZOOM_BENCH_DATASET_H_
