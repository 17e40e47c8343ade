// File: common/query_stats.h
//
// Per-query counters filled by index/ and storage/ and read by server/metrics
// and the benchmarks. A plain struct: no locks, one per query (or summed).
#ifndef ZOOM_COMMON_QUERY_STATS_H_
#define ZOOM_COMMON_QUERY_STATS_H_

#include <cstdint>

namespace zoom {

// How a filtered query was searched (server/engine's planner).
enum class FilterStrategy : uint8_t {
  kNone = 0,             // no filter
  kExact = 1,            // brute force over the matching points' full vectors
  kFilteredPreview = 2,  // the preview admits matching points only
  kPostFilter = 3,       // the plain preview, oversampled, then filtered
  kMatchScan = 4,        // every matching point's code scored, no navigation
};
inline const char* FilterStrategyName(FilterStrategy s) {
  switch (s) {
    case FilterStrategy::kNone: return "none";
    case FilterStrategy::kExact: return "exact";
    case FilterStrategy::kFilteredPreview: return "filtered_preview";
    case FilterStrategy::kPostFilter: return "post_filter";
    case FilterStrategy::kMatchScan: return "match_scan";
  }
  return "unknown";
}

struct QueryStats {
  // Wall time of the stages, microseconds.
  double preview_us = 0;   // compressed ranking in RAM
  double fullview_us = 0;  // reading the candidates' full vectors
  double rerank_us = 0;    // exact distances over the full vectors
  // I/O of the fullview.
  uint64_t reads = 0;       // read requests sent to the device
  uint64_t bytes_read = 0;  // bytes those requests transferred
  uint64_t read_errors = 0;
  // Batches of reads the fullview waited for: 1, or more when the re-rank
  // stops early (SearchParams::rerank_stop_sd) and reads in rounds.
  uint32_t fullview_rounds = 0;
  // The band (SearchParams::band_confidence): candidates certainly in the
  // top k (returned unread unless exact scores were asked for) and
  // certainly out (never read).
  uint64_t certain_in = 0;
  uint64_t certain_out = 0;
  // Work of the preview.
  uint64_t candidates = 0;      // ids handed from preview to fullview
  uint64_t distance_evals = 0;  // distances computed in the preview
  uint64_t hops = 0;            // graph nodes expanded
  // DRAM cache of full vectors (off by default).
  uint64_t cache_hits = 0;
  uint64_t cache_misses = 0;
  // The answer is the preview ranking only (the fullview did not finish).
  bool degraded = false;
  // The answer is brute force over every stored vector (asked for, or no
  // index yet).
  bool exact = false;
  // A filter: the strategy that answered (the last one tried), the points
  // that match it, how many times the preview was widened (or fell back)
  // to find enough matching candidates, and whether it was evaluated from
  // the stored payloads (a field without a ready index: a scan).
  FilterStrategy filter_strategy = FilterStrategy::kNone;
  uint64_t filter_matches = 0;
  uint32_t filter_expansions = 0;
  bool filter_scan = false;
  // A filtered preview's membership tests (ivf_hnsw_pq: the codes of the
  // lists it scanned) and the matching ones among them: the filter's share
  // near the query, against its global share (not sent to clients).
  uint64_t filter_tested = 0;
  uint64_t filter_matched = 0;
  // Recall as a knob (server/engine/calibration.h): the recall@10 the
  // knobs were chosen for (0: none), the recall those knobs reached in the
  // index's calibration, and whether any calibrated knobs reached the
  // target (false: the highest-recall ones ran, or no calibration existed:
  // knobs_calibrated false). calibrated_recall is 0 unless the calibration
  // chose every knob.
  float target_recall = 0;
  float calibrated_recall = 0;
  bool target_reached = false;
  bool knobs_calibrated = false;
  // The knobs the search started with (the request's, the calibration's or
  // the defaults; a filtered search may widen them), set by the Collection.
  uint32_t knob_ef = 0;
  uint32_t knob_nprobe = 0;
  uint32_t knob_rerank = 0;
  float knob_band = 0;  // band_confidence (0: every candidate read)

  // Adds `other` to this (counters and times; `degraded` and `exact` are
  // or-ed).
  void Merge(const QueryStats& other) {
    preview_us += other.preview_us;
    fullview_us += other.fullview_us;
    rerank_us += other.rerank_us;
    fullview_rounds += other.fullview_rounds;
    AddCounts(other);
    exact = exact || other.exact;
    if (other.filter_strategy != FilterStrategy::kNone) filter_strategy = other.filter_strategy;
  }

  // Adds `other`, the stats of a part that ran beside this one (a shard of
  // a clustered collection): counters summed, stage times the slowest
  // part's, `degraded` and `filter_scan` or-ed; the first part with a
  // filter strategy names it; a recall target is reached only when every
  // part reached it (calibrated_recall: the lowest); the knobs are the
  // first part's. `first`: this holds nothing yet (takes `other` as is).
  // `exact` is the caller's (it depends on which parts had hits).
  void MergeParallel(const QueryStats& other, bool first) {
    if (first) {
      *this = other;
      return;
    }
    preview_us = preview_us > other.preview_us ? preview_us : other.preview_us;
    fullview_us = fullview_us > other.fullview_us ? fullview_us : other.fullview_us;
    rerank_us = rerank_us > other.rerank_us ? rerank_us : other.rerank_us;
    fullview_rounds =
        fullview_rounds > other.fullview_rounds ? fullview_rounds : other.fullview_rounds;
    AddCounts(other);
    if (filter_strategy == FilterStrategy::kNone) filter_strategy = other.filter_strategy;
    target_reached = target_reached && other.target_reached;
    calibrated_recall =
        calibrated_recall < other.calibrated_recall ? calibrated_recall : other.calibrated_recall;
    knobs_calibrated = knobs_calibrated && other.knobs_calibrated;
  }

 private:
  // The counters both merges sum, and the flags both or.
  void AddCounts(const QueryStats& other) {
    reads += other.reads;
    bytes_read += other.bytes_read;
    certain_in += other.certain_in;
    certain_out += other.certain_out;
    read_errors += other.read_errors;
    candidates += other.candidates;
    distance_evals += other.distance_evals;
    hops += other.hops;
    cache_hits += other.cache_hits;
    cache_misses += other.cache_misses;
    degraded = degraded || other.degraded;
    filter_matches += other.filter_matches;
    filter_expansions += other.filter_expansions;
    filter_scan = filter_scan || other.filter_scan;
    filter_tested += other.filter_tested;
    filter_matched += other.filter_matched;
  }
};

}  // namespace zoom

#endif  // ZOOM_COMMON_QUERY_STATS_H_
