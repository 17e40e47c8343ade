// File: tests/testing/test_data.h
//
// Test data shared by the index and engine tests: the small real SIFT subset
// under tests/data/sift-ngt-5k (origin: its README), loaded once per
// process, and deterministic clustered Gaussian data.
#ifndef ZOOM_TESTS_TESTING_TEST_DATA_H_
#define ZOOM_TESTS_TESTING_TEST_DATA_H_

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "common/texmex.h"
#include "tests/testing/test_env.h"

namespace zoom::testing {

// tests/data/sift-ngt-5k: the base vectors (5,000 x 128), and the first
// `n` queries (the first call's n stays).
inline const VecsMatrix<float>& SiftBase() {
  static const auto* m =
      new VecsMatrix<float>(LoadVecsAsFloat(TestDataPath("sift-ngt-5k/base.bvecs")).value());
  return *m;
}
inline const VecsMatrix<float>& SiftQueries(size_t n) {
  static const auto* m = new VecsMatrix<float>(
      LoadVecsAsFloat(TestDataPath("sift-ngt-5k/query.bvecs"), n).value());
  return *m;
}

// n points of d dimensions around 16 Gaussian centres (spread 4, unit
// noise), deterministic in `seed`.
inline std::vector<float> Clustered(size_t n, size_t d, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0, 1);
  std::vector<float> centers(16 * d);
  for (auto& c : centers) c = 4 * g(rng);
  std::vector<float> x(n * d);
  for (size_t i = 0; i < n; ++i) {
    const float* c = centers.data() + (rng() % 16) * d;
    for (size_t j = 0; j < d; ++j) x[i * d + j] = c[j] + g(rng);
  }
  return x;
}

}  // namespace zoom::testing

#endif  // ZOOM_TESTS_TESTING_TEST_DATA_H_
