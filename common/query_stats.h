// File: common/query_stats.h
//
// Per-query counters filled by index/ and storage/ and read by server/metrics
// and the benchmarks. A plain struct: no locks, one per query (or summed).
#ifndef ZOOM_COMMON_QUERY_STATS_H_
#define ZOOM_COMMON_QUERY_STATS_H_

#include <cstdint>

namespace zoom {

struct QueryStats {
  // Wall time of the stages, microseconds.
  double preview_us = 0;   // compressed ranking in RAM
  double fullview_us = 0;  // reading the candidates' full vectors
  double rerank_us = 0;    // exact distances over the full vectors
  // I/O of the fullview.
  uint64_t reads = 0;       // read requests sent to the device
  uint64_t bytes_read = 0;  // bytes those requests transferred
  uint64_t read_errors = 0;
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

  // Adds `other` to this (counters and times; `degraded` and `exact` are
  // or-ed).
  void Merge(const QueryStats& other) {
    preview_us += other.preview_us;
    fullview_us += other.fullview_us;
    rerank_us += other.rerank_us;
    reads += other.reads;
    bytes_read += other.bytes_read;
    read_errors += other.read_errors;
    candidates += other.candidates;
    distance_evals += other.distance_evals;
    hops += other.hops;
    cache_hits += other.cache_hits;
    cache_misses += other.cache_misses;
    degraded = degraded || other.degraded;
    exact = exact || other.exact;
  }
};

}  // namespace zoom

#endif  // ZOOM_COMMON_QUERY_STATS_H_
