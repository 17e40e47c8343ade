// File: common/metric.h
//
// The similarity metrics a collection can use, and how their scores order.
#ifndef ZOOM_COMMON_METRIC_H_
#define ZOOM_COMMON_METRIC_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"

namespace zoom {

enum class Metric {
  kL2,            // squared Euclidean distance; smaller is better
  kInnerProduct,  // <q, x>; larger is better
  kCosine,        // <q, x> / (|q| |x|); larger is better. Vectors are
                  // normalised at insert, so it is ranked as inner product.
};

// "l2" | "ip" | "cosine" (also "inner_product", "angular"), case-insensitive.
absl::StatusOr<Metric> ParseMetric(std::string_view name);
// The canonical short name: "l2", "ip" or "cosine".
const char* MetricName(Metric metric);

// True when a larger score is a better match (IP and cosine).
constexpr bool HigherIsBetter(Metric metric) { return metric != Metric::kL2; }

// True when `a` is a strictly better score than `b` under `metric`.
constexpr bool IsBetter(Metric metric, float a, float b) {
  return HigherIsBetter(metric) ? a > b : a < b;
}

// The one convention between a metric's score (what clients see: squared
// L2 ascending, inner product / cosine descending) and the index's distance
// (lower is better: squared L2 for kL2, and for kCosine over unit vectors,
// where cosine = 1 - d / 2; the negated inner product for kInnerProduct).
// The fullview's re-rank, the preview's answer, the calibration and the
// merges of shards' answers convert and order through it.
class Scorer {
 public:
  constexpr explicit Scorer(Metric metric) : metric_(metric) {}
  constexpr Metric metric() const { return metric_; }
  // The score of an index distance.
  constexpr float Score(float distance) const {
    return metric_ == Metric::kL2       ? distance
           : metric_ == Metric::kCosine ? 1.0f - distance / 2
                                        : -distance;
  }
  // The index distance of a score (in double: the re-rank's statistics).
  constexpr double Distance(float score) const {
    return metric_ == Metric::kL2       ? static_cast<double>(score)
           : metric_ == Metric::kCosine ? 2.0 - 2.0 * static_cast<double>(score)
                                        : -static_cast<double>(score);
  }
  // True when score `a` is strictly better than `b`.
  constexpr bool Better(float a, float b) const { return IsBetter(metric_, a, b); }
  // The answer's order: the better score first, then the lower id.
  constexpr bool Before(float score_a, uint64_t id_a, float score_b, uint64_t id_b) const {
    return score_a != score_b ? Better(score_a, score_b) : id_a < id_b;
  }
  // The score that ranks last (what a NaN score ranks as).
  float Worst() const;
  // The query as the points are stored: scaled to unit length for cosine
  // (left as it is when it has no direction: false). Other metrics: true,
  // unchanged.
  bool PrepareQuery(float* query, size_t dim) const;

 private:
  Metric metric_;
};

// Scales `v` (length `dim`) to unit L2 norm in place. Returns false (leaving
// `v` unchanged) if its norm is zero or not finite.
bool NormalizeL2(float* v, size_t dim);

// Reference scalar kernels (double accumulation); the fast SIMD kernels of
// index/ are tested against these.
float L2SquaredReference(const float* a, const float* b, size_t dim);
float InnerProductReference(const float* a, const float* b, size_t dim);

}  // namespace zoom

#endif  // ZOOM_COMMON_METRIC_H_
