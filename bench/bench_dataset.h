// File: bench/bench_dataset.h
//
// The measurement harness shared by zoombench's search workloads: the data
// set flags, running the queries from N threads with per-query latency,
// and the reporting of one configuration (table row + JSON line) and of
// many (side-by-side at recall targets, Pareto front).
//
// What zoomload's server workloads measure the same way is in common/:
// the data set in memory (Dataset, LoadDataset: common/vector_dataset.h,
// folders laid out like ../shared/data/<set>/), the tie-aware recall
// (common/recall.h), the tables, JSON lines and percentiles
// (common/report_table.h), and the process figures (common/process.h).
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
#include "common/report_table.h"
#include "common/vector_dataset.h"

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

// The default root of the data set folders: "../shared/data" relative to the
// current directory when it exists, else relative to the source tree
// (ZOOM_SOURCE_DIR "/../shared/data", normalised).
std::string DefaultDataRoot();

// --dataset resolved: the flag, or DefaultDataRoot() + "/glove-6b-100d".
std::string DatasetDirFlag();
// --metric resolved for folder `dir` (see the flag's default rule).
absl::StatusOr<Metric> MetricFlag(const std::string& dir);
// --threads parsed ("1,2" -> {1, 2}; ParseIntList); every entry must be >= 1.
absl::StatusOr<std::vector<int>> ThreadsFlag();

struct RunResult {
  // Mean tie-aware recall; NaN when the run's k (or the ground truth) is too
  // small for that cut-off.
  double recall_at_1 = std::numeric_limits<double>::quiet_NaN();
  double recall_at_10 = std::numeric_limits<double>::quiet_NaN();
  double recall_at_100 = std::numeric_limits<double>::quiet_NaN();
  // The worst query's recall@10 (NaN as recall_at_10): reported beside the
  // mean, since a mean hides the queries a release fails.
  double worst_recall_at_10 = std::numeric_limits<double>::quiet_NaN();
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
void Report(JsonLines& rep, Table& table, const ConfigResult& r);

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
