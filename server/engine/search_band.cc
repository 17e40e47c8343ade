#include "server/engine/search_band.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace zoom::server::search_internal {

void PlanBand(const index::VectorIndex& idx, const float* query,
              absl::Span<const index::Neighbor> candidates, size_t k, double confidence,
              BandPlan* plan) {
  plan->on = false;
  plan->in = plan->out = 0;
  const size_t n = candidates.size();
  if (!(confidence > 0) || n == 0 || k == 0) return;
  thread_local std::vector<float> lo, hi;
  lo.resize(n);
  hi.resize(n);
  if (!idx.DistanceIntervals(query, candidates, confidence, lo.data(), hi.data())) return;
  ClassifyBand(candidates, lo.data(), hi.data(), k, plan);
}

void ClassifyBand(absl::Span<const index::Neighbor> candidates, const float* lo,
                  const float* hi, size_t k, BandPlan* plan) {
  const size_t n = candidates.size();
  plan->on = true;
  plan->in = plan->out = 0;
  plan->cls.clear();
  plan->estimate.clear();
  if (n == 0 || k == 0) return;
  thread_local std::vector<float> sorted;
  constexpr float kInf = std::numeric_limits<float>::infinity();
  // The (k+1)-th smallest lower bound and the k-th smallest upper bound
  // (infinite when there are not that many candidates).
  sorted.assign(lo, lo + n);
  float lo_k1 = kInf;
  if (n > k) {
    std::nth_element(sorted.begin(), sorted.begin() + k, sorted.end());
    lo_k1 = sorted[k];
  }
  sorted.assign(hi, hi + n);
  float hi_k = kInf;
  if (n >= k) {
    std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end());
    hi_k = sorted[k - 1];
  }
  plan->cls.assign(n, BandClass::kRead);
  plan->estimate.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const bool finite = std::isfinite(lo[i]) && std::isfinite(hi[i]);
    plan->estimate[i] = finite ? 0.5f * (lo[i] + hi[i]) : candidates[i].distance;
    if (hi[i] < lo_k1) {
      plan->cls[i] = BandClass::kIn;
      ++plan->in;
    } else if (lo[i] > hi_k) {
      plan->cls[i] = BandClass::kOut;
      ++plan->out;
    }
  }
}

}  // namespace zoom::server::search_internal
