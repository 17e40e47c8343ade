// File: server/engine/search_band.h
//
// Internal to the engine (the SearchEngine, and the calibration's replay
// of it): the band (issue 48, "read only what is in
// doubt"). The index gives each of the K' preview candidates an interval
// for its true distance (index::VectorIndex::DistanceIntervals, at
// SearchParams::band_confidence). A candidate whose upper bound is below
// the (k+1)-th smallest lower bound is certainly in the top k of the K';
// one whose lower bound is above the k-th smallest upper bound certainly
// out. Only the rest, the band, is read; the answer is the certain-in
// (their scores the intervals' centres, Hit::estimated) and the band's
// best by exact score. When the intervals hold, that is the top k that
// reading all K' gives (the set; the order among estimated scores is the
// estimate's). With SearchParams::exact_scores or with_vectors the
// certain-in are read too (still no certain-out is). One round: reading
// the band only narrows intervals, so what was certain stays certain.
// Not part of the engine's API.
#ifndef ZOOM_SERVER_ENGINE_SEARCH_BAND_H_
#define ZOOM_SERVER_ENGINE_SEARCH_BAND_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "index/search_types.h"
#include "index/vector_index.h"

namespace zoom::server::search_internal {

enum class BandClass : uint8_t { kRead = 0, kIn = 1, kOut = 2 };

struct BandPlan {
  bool on = false;                 // the index gave intervals
  std::vector<BandClass> cls;      // per candidate
  std::vector<float> estimate;     // per candidate: its interval's centre (index distance)
  uint32_t in = 0, out = 0;        // certain-in / certain-out counts
};

// Plans the band of `candidates` for the top `k` (plan->on false, nothing
// else set, when the index keeps no intervals or confidence <= 0):
// DistanceIntervals, then ClassifyBand.
void PlanBand(const index::VectorIndex& idx, const float* query,
              absl::Span<const index::Neighbor> candidates, size_t k, double confidence,
              BandPlan* plan);

// The band of `candidates` given each one's interval [lo[i], hi[i]]
// (plan->on set). An interval depends on its candidate alone, so the
// intervals of a list's first K' are those of the list's prefix: the
// calibration classifies every K' of one list from one DistanceIntervals.
void ClassifyBand(absl::Span<const index::Neighbor> candidates, const float* lo,
                  const float* hi, size_t k, BandPlan* plan);

}  // namespace zoom::server::search_internal

#endif  // ZOOM_SERVER_ENGINE_SEARCH_BAND_H_
