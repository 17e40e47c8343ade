// File: common/orthonormal.h
//
// Orthonormalising the rows of a square matrix, for random rotations (the
// rabitq code's, index/product_quantizer.h; the data generator's,
// bench/datagen): each caller fills the rows from its own random source.
#ifndef ZOOM_COMMON_ORTHONORMAL_H_
#define ZOOM_COMMON_ORTHONORMAL_H_

#include <cmath>
#include <cstddef>
#include <cstdint>

namespace zoom {

// Gram-Schmidt, twice (for orthogonality in floating point), then unit
// length, on the d rows of q (d x d, row-major). False when a row is
// (numerically) in the span of those before it: the caller draws again.
inline bool OrthonormalizeRows(double* q, uint32_t d) {
  for (uint32_t i = 0; i < d; ++i) {
    double* qi = q + size_t{i} * d;
    for (int pass = 0; pass < 2; ++pass) {
      for (uint32_t j = 0; j < i; ++j) {
        const double* qj = q + size_t{j} * d;
        double dot = 0;
        for (uint32_t t = 0; t < d; ++t) dot += qi[t] * qj[t];
        for (uint32_t t = 0; t < d; ++t) qi[t] -= dot * qj[t];
      }
    }
    double n = 0;
    for (uint32_t t = 0; t < d; ++t) n += qi[t] * qi[t];
    if (!(n > 1e-12)) return false;
    n = std::sqrt(n);
    for (uint32_t t = 0; t < d; ++t) qi[t] /= n;
  }
  return true;
}

}  // namespace zoom

#endif  // ZOOM_COMMON_ORTHONORMAL_H_
