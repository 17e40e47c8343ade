#include "common/vector_limits.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace zoom {
namespace {

// Squared norm in double (finite for any finite float vector of up to 2^40
// components: FLT_MAX^2 * 2^40 < DBL_MAX).
double SquaredNorm(const float* v, size_t dim) {
  double sum = 0;
  for (size_t j = 0; j < dim; ++j) sum += double{v[j]} * v[j];
  return sum;
}

}  // namespace

bool VectorMagnitudeOk(Metric metric, const float* v, size_t dim) {
  for (size_t j = 0; j < dim; ++j) {
    if (!std::isfinite(v[j])) return false;
  }
  const double sq = SquaredNorm(v, dim);
  if (metric == Metric::kCosine) return sq > 0;
  return sq <= kMaxVectorNorm * kMaxVectorNorm;
}

absl::Status CheckVectorMagnitude(Metric metric, const float* v, size_t dim) {
  size_t largest = 0;
  for (size_t j = 0; j < dim; ++j) {
    if (!std::isfinite(v[j])) {
      return absl::InvalidArgumentError(
          absl::StrCat("component ", j, " is ", v[j], "; vectors must be finite"));
    }
    if (std::fabs(v[j]) > std::fabs(v[largest])) largest = j;
  }
  const double sq = SquaredNorm(v, dim);
  if (metric == Metric::kCosine) {
    if (!(sq > 0)) {
      return absl::InvalidArgumentError("the zero vector has no cosine (cosine collections take any finite "
                                         "non-zero vector)");
    }
    return absl::OkStatus();
  }
  if (sq > kMaxVectorNorm * kMaxVectorNorm) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "norm %.3g (component %d is %.3g) is above 1e18; %s vectors must have a norm of at "
        "most 1e18 so that every distance stays inside float range (scale them down, or "
        "use a cosine collection)",
        std::sqrt(sq), largest, v[largest], MetricName(metric)));
  }
  return absl::OkStatus();
}

}  // namespace zoom
