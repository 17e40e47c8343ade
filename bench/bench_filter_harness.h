// File: bench/bench_filter_harness.h
//
// The measuring half of zoombench's filter workloads (bench_filter.cc: the
// generated attributes; bench_filter_labels.cc: a data set's real labels):
// the vectors in the engine's distance order, a case (a filter per query and
// the same as a predicate over base rows), the exact filtered oracle (brute
// force in RAM), and one configuration's run of a case's queries on N
// threads with tie-aware recall@10 against it.
#ifndef ZOOM_BENCH_FILTER_HARNESS_H_
#define ZOOM_BENCH_FILTER_HARNESS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bench/bench_dataset.h"
#include "common/query_stats.h"
#include "index/distance_kernels.h"
#include "server/engine/filter.h"

namespace zoom::bench::filter_bench {

constexpr size_t kK = 10;

// Distance in the engine's order (lower is better): squared L2, or the
// negated inner product (ip; cosine on unit vectors).
struct Space {
  size_t d = 0;
  bool ip = false;
  std::vector<float> base, queries;  // prepared (unit for cosine)
  float Dist(const float* a, const float* b) const {
    return ip ? -index::InnerProduct(a, b, d) : index::L2Sqr(a, b, d);
  }
  const float* Base(size_t i) const { return base.data() + i * d; }
  const float* Query(size_t q) const { return queries.data() + q * d; }
};

// The base and the first `nq` queries of `ds`.
Space Prepare(const Dataset& ds, size_t nq);
// The base and the queries `rows` of `ds` (query q of the space is
// ds.queries row rows[q]).
Space Prepare(const Dataset& ds, const std::vector<size_t>& rows);

// Runs fn(i) for i in [0, n) on 2 threads.
void ParallelFor(size_t n, const std::function<void(size_t)>& fn);

// A kMatch condition: `key` == v.
server::Condition Match(const std::string& key, server::FieldScalar v);

struct Case {
  std::string name, kind;
  double target = 0;
  // The filter of query q, and the same as a predicate over base rows.
  std::function<server::Filter(size_t q)> filter;
  std::function<bool(uint32_t id, size_t q)> pass;
  bool per_query = false;
};

// The exact filtered top-k of each query of a case.
struct Truth {
  std::vector<uint64_t> matches;             // per query
  std::vector<std::vector<uint32_t>> ids;    // best first
  std::vector<float> kth;                    // the k-th distance (or +inf)
};

// Brute force over the `n` base rows, on 2 threads.
Truth Oracle(const Space& s, const Case& c, size_t n, size_t nq);

struct Outcome {
  size_t queries = 0;
  double recall = 0, qps = 0, p50_us = 0, p99_us = 0, reads = 0;
  // Means of the engine's stage times and preview work (zoomd only): what
  // the planner's cost model (query.h) is fitted to.
  double preview_us = 0, fullview_us = 0, rerank_us = 0, distance_evals = 0;
  uint64_t short_answers = 0, violations = 0;
  std::map<std::string, int> strategies;
  // The worst query's recall@10, and how many queries fell below 0.9 and
  // below 0.5.
  double min_recall = 1;
  uint64_t below_0_9 = 0, below_0_5 = 0;
};

// Answers query q: writes kK ids (best first; -1 = none) to out and may
// fill *stats. Called from several threads at once.
using QueryFn = std::function<absl::Status(size_t q, int64_t* out, QueryStats* stats)>;

// Runs the case's queries on `threads` threads until done or the budget
// is spent; recall against the oracle.
absl::StatusOr<Outcome> RunCase(const Space& s, const Case& c, const Truth& t, size_t nq,
                                int threads, double budget_s, const QueryFn& fn);

// "strategy:count,..." of the planner's choices.
std::string Strategies(const Outcome& o);

struct Row {
  std::string system, params;
  int threads = 1;
  Outcome o;
};

// zoomd's search knobs as the filter workloads sweep them.
struct ZoomKnobs {
  uint32_t ef, nprobe, rerank;
  std::string Label() const;
};

// The sweep: K' in {20, 50, 100, 200} x nprobe in {16, 32, 64, 128} (ef 64)
// for ivf_hnsw_pq, or x ef in {64, 128, 256, 512} (nprobe 16) for hnsw_pq.
std::vector<ZoomKnobs> ZoomSweep(bool ivf);

// The best of a system's rows: the fastest at recall@10 >= 0.95, else the
// most accurate.
const Row* Best(const std::vector<Row>& rows);

}  // namespace zoom::bench::filter_bench

#endif  // ZOOM_BENCH_FILTER_HARNESS_H_
