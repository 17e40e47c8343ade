// ivf_hnsw_pq's error radii and the distance intervals drawn from them
// (ivf_hnsw_pq_index.h; VectorIndex::DistanceIntervals): the engine reads
// only the candidates whose rank the intervals leave in doubt (issue 48).

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "index/distance_kernels.h"
#include "index/index_internal.h"
#include "index/ivf_hnsw_pq_index.h"

namespace zoom::index::internal {
namespace {

constexpr size_t kCalibrationQueries = 256;
constexpr size_t kCalibrationNeighbours = 32;
// The rows the neighbours are looked for among (the sample's first ones):
// the pass costs queries x rows x dim (MNIST-784: 1.6 G flops at 8,192,
// against 6.6 G over a 32,768-row sample).
constexpr size_t kCalibrationPool = 8192;

}  // namespace

void IvfHnswPqIndex::SetRadiusUnit(const float* x, size_t n) {
  radius_unit_ = 0;
  error_dims_ = static_cast<float>(spec_.dim);
  if (n == 0) return;
  const size_t d = spec_.dim, pd = pq_.padded_dim(), m = pq_.code_size();
  std::vector<uint32_t> assign(n);
  std::vector<uint8_t> codes(n * m);
  std::vector<float> terms(n), factors(rabitq_ ? n : 0), errors(n);
  Encode(x, n, assign.data(), codes.data(), terms.data(), factors.data(), errors.data());
  std::vector<float> r(n);
  for (size_t i = 0; i < n; ++i) r[i] = std::sqrt(std::max(0.0f, errors[i]));
  {
    std::vector<float> sorted = r;
    const size_t at = std::min(n - 1, static_cast<size_t>(0.999 * static_cast<double>(n)));
    std::nth_element(sorted.begin(), sorted.begin() + at, sorted.end());
    // Headroom for points added after the build (a drifting distribution
    // gets kUnknownRadius, read as no bound, past 1.5x); a positive unit
    // even when the sample's codes are exact.
    radius_unit_ = std::max(1.5f * sorted[at] / 254.0f, std::numeric_limits<float>::min());
  }
  // The error dimensions: for sample rows as queries and their nearest
  // other rows (among the first kCalibrationPool) as candidates, z = <w, e> / (|w| |e|) in the quantiser's
  // space (a rotation of the original), w the estimate's query side (see
  // vector_index.h); D = 1 / mean(z^2).
  const bool l2 = UsesL2(spec_.metric);
  const size_t nq = std::min(kCalibrationQueries, n);
  const size_t stride = std::max<size_t>(1, n / nq);
  double z2 = 0;
  size_t pairs = 0;
  const size_t pool = std::min(n, kCalibrationPool);
  std::vector<float> dist(pool), diff(d), wt(pd), et(pd), rt(pd), rhat(pd);
  std::vector<uint32_t> order(pool);
  for (size_t qi = 0; qi < nq; ++qi) {
    const float* q = x + qi * stride * d;
    L2SqrBatch(q, x, pool, d, dist.data());
    std::iota(order.begin(), order.end(), 0u);
    const size_t take = std::min(kCalibrationNeighbours + 1, pool);
    std::partial_sort(order.begin(), order.begin() + take, order.end(),
                      [&](uint32_t a, uint32_t b) { return dist[a] < dist[b]; });
    for (size_t t = 0; t < take; ++t) {
      const uint32_t i = order[t];
      if (i == qi * stride || r[i] <= 0) continue;
      // The point's residual and its code's reconstruction, rotated.
      const float* ci = centroids_.data() + size_t{assign[i]} * d;
      for (size_t j = 0; j < d; ++j) diff[j] = x[i * d + j] - ci[j];
      pq_.Transform(diff.data(), rt.data());
      pq_.DecodeTransformed(codes.data() + i * m, rhat.data());
      if (rabitq_) {
        for (size_t j = 0; j < pd; ++j) rhat[j] *= factors[i];
      }
      for (size_t j = 0; j < pd; ++j) et[j] = rt[j] - rhat[j];
      // The query side: q itself (inner product), q - c (rabitq), or
      // q - c - r^ (PQ under L2), rotated.
      for (size_t j = 0; j < d; ++j) diff[j] = l2 ? q[j] - ci[j] : q[j];
      pq_.Transform(diff.data(), wt.data());
      if (l2 && !rabitq_) {
        for (size_t j = 0; j < pd; ++j) wt[j] -= rhat[j];
      }
      const double wn = std::sqrt(static_cast<double>(InnerProduct(wt.data(), wt.data(), pd)));
      if (!(wn > 0)) continue;
      const double z = InnerProduct(wt.data(), et.data(), pd) / (wn * r[i]);
      if (!std::isfinite(z)) continue;
      z2 += z * z;
      ++pairs;
    }
  }
  if (pairs >= 64 && z2 > 0) {
    error_dims_ = static_cast<float>(
        std::clamp(static_cast<double>(pairs) / z2, 1.0, static_cast<double>(pd)));
  }
}

uint8_t IvfHnswPqIndex::RadiusByte(float error) const {
  if (!(radius_unit_ > 0) || !(error >= 0)) return kUnknownRadius;
  const double units = std::ceil(std::sqrt(static_cast<double>(error)) / radius_unit_);
  return units <= 254 ? static_cast<uint8_t>(units) : kUnknownRadius;
}

bool IvfHnswPqIndex::DistanceIntervals(const float* query,
                                       absl::Span<const Neighbor> candidates,
                                       double confidence, float* lo, float* hi) const {
  if (!(radius_unit_ > 0)) return false;
  const size_t d = spec_.dim;
  thread_local std::vector<float> q;
  q.assign(query, query + d);
  if (spec_.metric == Metric::kCosine) NormalizeL2(q.data(), d);
  const bool l2 = UsesL2(spec_.metric);
  const double q_norm = std::sqrt(static_cast<double>(InnerProduct(q.data(), q.data(), d)));
  // The share of the hard half-width: confidence deviations of about
  // 1 / sqrt(error_dims_) each, at most all of it.
  const double share =
      std::min(1.0, confidence / std::sqrt(std::max(1.0, static_cast<double>(error_dims_))));
  const uint32_t pos_bits = PosBits();
  const uint32_t unknown = UnknownPos();
  constexpr float kInf = std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < candidates.size(); ++i) {
    const Neighbor& c = candidates[i];
    lo[i] = -kInf;
    hi[i] = kInf;
    if (c.id >= size()) continue;
    const uint32_t place = *list_of_.Row(c.id);
    const uint32_t l = static_cast<uint32_t>(uint64_t{place} >> pos_bits);
    const InvertedList& list = *lists_[l];
    const uint32_t size = list.size.load(std::memory_order_acquire);
    uint32_t pos = place & unknown;
    if (pos == unknown) pos = FindPosition(list, size, 0, c.id);
    if (pos >= size) continue;
    const uint8_t b = *list.radii.Row(pos);
    if (b == kUnknownRadius) continue;
    const double r = static_cast<double>(b) * radius_unit_;
    const double est = c.distance;
    double low = est, high = est;
    if (!l2) {
      // -<q, x> = -<q, x^> - <q, e>, e = x - x^.
      low = est - share * q_norm * r;
      high = est + share * q_norm * r;
    } else if (!rabitq_) {
      // ||q - x||^2 = ||q - x^||^2 - 2 <q - x^, e> + |e|^2, the estimate
      // ||q - x^||^2 (the ADC over the list's residual code), |e| <= r (r
      // rounded up): with a = share * ||q - x^||, the true distance is in
      // est + t^2 -+ 2 a t for some t in [0, r]; the low end's least is at
      // t = min(a, r).
      const double a = share * std::sqrt(std::max(0.0, est));
      low = a >= r ? est + r * r - 2 * a * r : est - a * a;
      high = est + r * r + 2 * a * r;
    } else {
      // The rabitq estimate keeps the exact |r|^2 and errs by twice the
      // inner product of the code's error with the query less the centroid.
      const float* ct = centroids_.data() + size_t{l} * d;
      const double half =
          2 * share * std::sqrt(std::max(0.0, static_cast<double>(L2Sqr(q.data(), ct, d)))) * r;
      low = est - half;
      high = est + half;
    }
    // The float ADC's own rounding.
    const double slack = 1e-5 * (std::abs(est) + std::abs(high - low) + r * r) + 1e-6;
    lo[i] = static_cast<float>(low - slack);
    hi[i] = static_cast<float>(high + slack);
  }
  return true;
}

}  // namespace zoom::index::internal
