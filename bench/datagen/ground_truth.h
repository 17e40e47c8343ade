// File: bench/datagen/ground_truth.h
//
// The exact top-k of a generated set's queries (brute force, streamed: the
// base rows are generated again chunk by chunk, never held whole), and the
// two numbers that say how hard a set is for nearest-neighbour search: the
// local intrinsic dimensionality (LID, the MLE of Levina & Bickel / Amsaleg
// et al. over the k nearest distances) and the relative contrast (mean
// distance to a random base point / distance to the nearest; He et al.
// 2012) — measured the same way on a real folder and a generated one.
#ifndef ZOOM_BENCH_DATAGEN_GROUND_TRUTH_H_
#define ZOOM_BENCH_DATAGEN_GROUND_TRUTH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/datagen/mixture.h"
#include "common/metric.h"

namespace zoom::datagen {

struct GroundTruth {
  uint32_t k = 0;
  std::vector<int32_t> ids;  // nq x k, best first, ties to the lower id
  std::vector<float> dist;   // l2: squared distance ascending; ip/cosine: similarity descending
  // Queries whose k-th exact score came within float precision of the
  // candidates a float pass left out (the margin was re-checked in double;
  // a non-zero count means a tie-level call at the cut).
  uint64_t near_cut = 0;
};

// Exact top-k of `queries` (nq x dim) over base rows [0, n) of `mix`
// (stream 0), by `metric` (kL2, or kInnerProduct / kCosine: the rows of an
// embedding-like set are unit norm, queries are normalised here for
// cosine). A float pass with BLAS over chunks of `chunk_rows` on `threads`
// threads keeps the k + 32 best of each query; those are scored again in
// double. InvalidArgument for k = 0, k > n or threads < 1.
absl::StatusOr<GroundTruth> ExactTopK(const Mixture& mix, uint64_t n, const float* queries,
                                      size_t nq, Metric metric, uint32_t k, int threads,
                                      uint64_t chunk_rows = 16384);

struct Hardness {
  uint64_t queries = 0;
  double lid_mean = 0, lid_median = 0;  // at lid_k neighbours
  double rc_mean = 0, rc_median = 0;    // relative contrast
  uint32_t lid_k = 0;
};

// LID and relative contrast of a data set folder (real or generated: base,
// queries, groundtruth_<metric> with its _dist file), over its first
// `max_queries` queries; relative contrast against `random_points` random
// base rows per query. Distances are Euclidean (cosine: of the normalised
// vectors).
absl::StatusOr<Hardness> MeasureFolder(const std::string& dir, Metric metric, uint32_t lid_k,
                                       uint64_t max_queries, uint32_t random_points,
                                       uint64_t seed);

}  // namespace zoom::datagen

#endif  // ZOOM_BENCH_DATAGEN_GROUND_TRUTH_H_
