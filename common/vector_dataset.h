// File: common/vector_dataset.h
//
// The one reader of a vector data set folder, shared by zoombench (bench/)
// and zoomload (loadtest/). A folder is laid out like ../shared/data/<set>/
// (see its README):
//
//   base.fvecs | base.bvecs        the points (bvecs: uint8)
//   query.fvecs | query.bvecs      the queries
//   groundtruth_<metric>.ivecs     exact top-k ids per query, best first
//   groundtruth_<metric>_dist.fvecs  their scores (l2: squared distance
//                                  ascending; ip / cosine: similarity
//                                  descending)
//
// with <metric> one of l2, ip, cosine. OpenDatasetFolder looks at the files
// (names, dimensions, row counts; nothing is loaded); the Load functions
// read them, checking that they agree; LoadDataset reads what a benchmark
// measures against into one Dataset (its recall: common/recall.h). Errors
// name the file and say what to fix.
#ifndef ZOOM_COMMON_VECTOR_DATASET_H_
#define ZOOM_COMMON_VECTOR_DATASET_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/metric.h"
#include "common/texmex.h"

namespace zoom {

struct DatasetFolder {
  std::string dir;   // without a trailing '/'
  std::string name;  // the folder's name, e.g. "glove-6b-100d"
  std::string base_path;   // "" when the folder has no base file
  std::string query_path;  // "" when the folder has no query file
  bool base_is_uint8 = false;
  uint64_t base_rows = 0, query_rows = 0;
  uint32_t base_dim = 0, query_dim = 0;
  // The metrics with a groundtruth_<metric>.ivecs, in the order cosine,
  // l2, ip.
  std::vector<Metric> ground_truth_metrics;

  std::string GroundTruthPath(Metric metric) const;      // ids (.ivecs)
  std::string GroundTruthDistPath(Metric metric) const;  // scores (_dist.fvecs)
  bool HasGroundTruth(Metric metric) const;
  // The metric a tool uses when none is given: the first of
  // ground_truth_metrics (cosine, then l2, then ip); l2 when there is none.
  Metric DefaultMetric() const;
  // "cosine, l2" (or "none"), for messages.
  std::string GroundTruthMetricNames() const;
};

// Looks at `dir`: NotFound when it is not a directory, or lacks the query
// file (or, with need_base, the base file); FailedPrecondition when the
// base and query dimensions differ or a required file is empty.
absl::StatusOr<DatasetFolder> OpenDatasetFolder(const std::string& dir, bool need_base);

// The first `max_rows` queries (0 = all) as float.
absl::StatusOr<VecsMatrix<float>> LoadQueries(const DatasetFolder& folder,
                                              uint64_t max_rows = 0);
// The first `max_rows` base rows (0 = all) widened to float.
absl::StatusOr<VecsMatrix<float>> LoadBase(const DatasetFolder& folder, uint64_t max_rows = 0);

// The exact ground truth for `metric` of the first `max_rows` queries (0 =
// all): ids, and (when `dist` is not null) their scores. NotFound naming
// the metrics the folder has; FailedPrecondition when the rows do not match
// the query file's (the ground truth must cover every query), or an id is
// outside the base's rows.
absl::StatusOr<VecsMatrix<int32_t>> LoadGroundTruth(const DatasetFolder& folder, Metric metric,
                                                    uint64_t max_rows = 0,
                                                    VecsMatrix<float>* dist = nullptr);

// The metric named by `name` (ParseMetric) or, when `name` is empty, the
// folder's DefaultMetric(): how zoombench and zoomload read their --metric
// flag. Errors: ParseMetric's, OpenDatasetFolder's.
absl::StatusOr<Metric> MetricOrDefault(const std::string& name, const std::string& dir);

// A data set folder in memory for one metric, what zoombench's workloads
// measure and zoomload's server workloads import and score. The vectors are
// as stored, never normalised: a workload that needs unit vectors (cosine)
// makes its own copies.
struct Dataset {
  std::string name;  // the folder's name, e.g. "glove-6b-100d"
  std::string dir;   // without a trailing '/'
  Metric metric = Metric::kL2;
  // base.bvecs: every base value is an integer in 0..255, so narrowing
  // `base` back to uint8 is exact.
  bool is_uint8 = false;
  VecsMatrix<float> base;     // every row, widened to float when uint8
  VecsMatrix<float> queries;  // the first max_queries (LoadDataset)
  VecsMatrix<int32_t> gt;     // per query, the exact top ids, best first
  // Their scores: l2, squared distance ascending; ip and cosine, similarity
  // descending (float32 roundings of float64 values).
  VecsMatrix<float> gt_dist;

  uint32_t dim() const { return base.dim; }
};

// Loads the folder `dir` for `metric`: every base row, at most
// `max_queries` queries (0 = all) and their ground truth with scores.
// Errors: OpenDatasetFolder's (with the base required), LoadGroundTruth's.
absl::StatusOr<Dataset> LoadDataset(const std::string& dir, Metric metric,
                                    uint64_t max_queries = 0);

}  // namespace zoom

#endif  // ZOOM_COMMON_VECTOR_DATASET_H_
