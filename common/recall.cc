#include "common/recall.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "common/metric.h"

namespace zoom {

double TrueScore(const Dataset& ds, size_t q, size_t id) {
  const float* a = ds.queries.row(q);
  const float* b = ds.base.row(id);
  const size_t d = ds.base.dim;
  switch (ds.metric) {
    case Metric::kL2: {
      double sum = 0;
      for (size_t i = 0; i < d; ++i) {
        const double diff = double{a[i]} - double{b[i]};
        sum += diff * diff;
      }
      return sum;
    }
    case Metric::kInnerProduct: {
      double dot = 0;
      for (size_t i = 0; i < d; ++i) dot += double{a[i]} * double{b[i]};
      return dot;
    }
    case Metric::kCosine: {
      double dot = 0, na = 0, nb = 0;
      for (size_t i = 0; i < d; ++i) {
        dot += double{a[i]} * double{b[i]};
        na += double{a[i]} * double{a[i]};
        nb += double{b[i]} * double{b[i]};
      }
      if (!(na > 0) || !(nb > 0)) return 0;
      return dot / (std::sqrt(na) * std::sqrt(nb));
    }
  }
  return 0;
}

double RecallAtK(const Dataset& ds, size_t q, const int64_t* ids, size_t n_ids, size_t k) {
  if (k == 0 || k > ds.gt_dist.dim || q >= ds.gt_dist.rows) {
    return std::numeric_limits<double>::quiet_NaN();
  }
  const double threshold = ds.gt_dist.row(q)[k - 1];
  // The stored scores are float32 roundings of float64 values.
  const double tol = 1e-6 * std::max(std::abs(threshold), 1e-12);
  std::vector<int64_t> unique(ids, ids + std::min(n_ids, k));
  std::sort(unique.begin(), unique.end());
  unique.erase(std::unique(unique.begin(), unique.end()), unique.end());
  size_t hits = 0;
  for (int64_t id : unique) {
    if (id < 0 || static_cast<uint64_t>(id) >= ds.base.rows) continue;
    const double s = TrueScore(ds, q, static_cast<size_t>(id));
    const bool good = HigherIsBetter(ds.metric) ? s >= threshold - tol : s <= threshold + tol;
    if (good) ++hits;
  }
  return static_cast<double>(hits) / static_cast<double>(k);
}

}  // namespace zoom
