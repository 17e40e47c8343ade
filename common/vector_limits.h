// File: common/vector_limits.h
//
// The magnitude rule: which float vectors zoomd accepts, per metric, so that
// every score between two accepted vectors, every index training step
// (FAISS k-means and PQ training, whose assertions abort the process on
// non-finite distances) and every kernel result stays inside float range.
//
//   l2, ip   every component finite and the Euclidean norm at most
//            kMaxVectorNorm (1e18). Then |x|^2 <= 1e36 and any squared
//            distance |a - b|^2 <= (|a| + |b|)^2 <= 4e36 and any inner
//            product |<a, b>| <= 1e36, far below FLT_MAX (3.4e38); so are the
//            centroids (means of accepted vectors) and their distances.
//   cosine   every component finite and the vector non-zero: vectors are
//            normalised in double precision (NormalizeL2), so any finite
//            magnitude becomes a unit vector.
//
// The same rule holds for stored points, queries and decoder contexts, and is
// checked again on training input at every index build.
#ifndef ZOOM_COMMON_VECTOR_LIMITS_H_
#define ZOOM_COMMON_VECTOR_LIMITS_H_

#include <cstddef>

#include "absl/status/status.h"
#include "common/metric.h"

namespace zoom {

inline constexpr double kMaxVectorNorm = 1e18;

// Ok, or InvalidArgument saying which component breaks the rule and what is
// accepted (the caller prefixes which vector, e.g. "point 7 (#3): ").
absl::Status CheckVectorMagnitude(Metric metric, const float* v, size_t dim);

// The rule without a message (hot loops); true when accepted.
bool VectorMagnitudeOk(Metric metric, const float* v, size_t dim);

}  // namespace zoom

#endif  // ZOOM_COMMON_VECTOR_LIMITS_H_
