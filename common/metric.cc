#include "common/metric.h"

#include <cmath>
#include <limits>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace zoom {

absl::StatusOr<Metric> ParseMetric(std::string_view name) {
  const std::string lower = absl::AsciiStrToLower(
      absl::string_view(name.data(), name.size()));
  if (lower == "l2" || lower == "euclidean") return Metric::kL2;
  if (lower == "ip" || lower == "inner_product" || lower == "dot") {
    return Metric::kInnerProduct;
  }
  if (lower == "cosine" || lower == "angular") return Metric::kCosine;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown metric '", lower, "': use l2, ip or cosine"));
}

const char* MetricName(Metric metric) {
  switch (metric) {
    case Metric::kL2:
      return "l2";
    case Metric::kInnerProduct:
      return "ip";
    case Metric::kCosine:
      return "cosine";
  }
  return "unknown";
}

float Scorer::Worst() const {
  return HigherIsBetter(metric_) ? -std::numeric_limits<float>::infinity()
                                 : std::numeric_limits<float>::infinity();
}

bool Scorer::PrepareQuery(float* query, size_t dim) const {
  return metric_ != Metric::kCosine || NormalizeL2(query, dim);
}

bool NormalizeL2(float* v, size_t dim) {
  double sum = 0;
  for (size_t i = 0; i < dim; ++i) sum += double{v[i]} * v[i];
  if (!(sum > 0) || !std::isfinite(sum)) return false;
  const double inv = 1.0 / std::sqrt(sum);
  for (size_t i = 0; i < dim; ++i) v[i] = static_cast<float>(v[i] * inv);
  return true;
}

float L2SquaredReference(const float* a, const float* b, size_t dim) {
  double sum = 0;
  for (size_t i = 0; i < dim; ++i) {
    const double d = double{a[i]} - b[i];
    sum += d * d;
  }
  return static_cast<float>(sum);
}

float InnerProductReference(const float* a, const float* b, size_t dim) {
  double sum = 0;
  for (size_t i = 0; i < dim; ++i) sum += double{a[i]} * b[i];
  return static_cast<float>(sum);
}

}  // namespace zoom
