// File: bench/bench_zoom.h
//
// zoomd's engine as the zoom workloads build it (bench_zoom.cc), for the
// workloads in other files (the filter benchmark).
#ifndef ZOOM_BENCH_ZOOM_H_
#define ZOOM_BENCH_ZOOM_H_

#include <string>

#include "absl/status/statusor.h"
#include "bench/bench_dataset.h"
#include "common/metric.h"
#include "server/engine/search_engine.h"

namespace zoom::bench {

struct ZoomBuilt {
  const Dataset* ds = nullptr;
  const server::SearchEngine* engine = nullptr;  // store + preview index
  std::string params;                            // the build key
};

// Whether the index's breadth knob is nprobe (lists scanned; else ef, the
// walk's list): index::TraitsOf, so that the workloads name no kind.
bool ScansLists(const index::VectorIndex& idx);

// The engine over --dataset with the index flags (--index_kind, --pq_m,
// ...), built or loaded from --work_dir; owned by the workloads' cache
// (valid until another dataset or index is asked for).
absl::StatusOr<ZoomBuilt> GetZoomBuilt();
// The same over data set folder `dir` under `metric` (not --dataset and
// --metric; --max_queries and the index flags apply).
absl::StatusOr<ZoomBuilt> GetZoomBuiltFor(const std::string& dir, Metric metric);

// The queries of --dataset through that engine at knobs `p` (k, preview
// only etc. as set), on `threads` threads: recall against the ground
// truth, QPS, latency (the sweep's row, named "zoomd").
absl::StatusOr<ConfigResult> RunZoomConfig(const server::SearchParams& p, int threads, size_t k);

}  // namespace zoom::bench

#endif  // ZOOM_BENCH_ZOOM_H_
