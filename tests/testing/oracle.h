// File: tests/testing/oracle.h
//
// Recall helpers against a brute-force oracle: exact top-k ids computed by
// SearchEngine::ExactSearch (the same interface as the approximate path).
#ifndef ZOOM_TESTS_TESTING_ORACLE_H_
#define ZOOM_TESTS_TESTING_ORACLE_H_

#include <algorithm>
#include <cstddef>
#include <vector>

#include "server/engine/search_engine.h"

namespace zoom::testing {

// |approx ∩ exact| / |exact| over the first k of each.
inline double RecallOf(const std::vector<server::Hit>& approx,
                       const std::vector<server::Hit>& exact, size_t k) {
  size_t hit = 0;
  const size_t ke = std::min(k, exact.size());
  for (size_t i = 0; i < std::min(k, approx.size()); ++i) {
    for (size_t j = 0; j < ke; ++j) {
      if (approx[i].id == exact[j].id) {
        ++hit;
        break;
      }
    }
  }
  return ke == 0 ? 1.0 : double(hit) / double(ke);
}

}  // namespace zoom::testing

#endif  // ZOOM_TESTS_TESTING_ORACLE_H_
