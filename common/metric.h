// File: common/metric.h
//
// The similarity metrics a collection can use, and how their scores order.
#ifndef ZOOM_COMMON_METRIC_H_
#define ZOOM_COMMON_METRIC_H_

#include <cstddef>
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

// Scales `v` (length `dim`) to unit L2 norm in place. Returns false (leaving
// `v` unchanged) if its norm is zero or not finite.
bool NormalizeL2(float* v, size_t dim);

// Reference scalar kernels (double accumulation); the fast SIMD kernels of
// index/ are tested against these.
float L2SquaredReference(const float* a, const float* b, size_t dim);
float InnerProductReference(const float* a, const float* b, size_t dim);

}  // namespace zoom

#endif  // ZOOM_COMMON_METRIC_H_
