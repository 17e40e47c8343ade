#include "bench/datagen/ground_truth.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <queue>
#include <random>
#include <atomic>
#include <limits>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "cblas.h"
#include "common/status_macros.h"
#include "common/vector_dataset.h"

extern "C" void openblas_set_num_threads(int);

namespace zoom::datagen {
namespace {

constexpr uint32_t kMargin = 32;

// The k + margin best of one query so far: a max-heap on the key (lower is
// better: l2's |x|^2 - 2 q.x, ip's -q.x), ties to the lower id kept.
struct Best {
  std::vector<std::pair<float, int64_t>> heap;
  size_t cap = 0;
  void Offer(float key, int64_t id) {
    if (heap.size() < cap) {
      heap.emplace_back(key, id);
      std::push_heap(heap.begin(), heap.end());
    } else if (std::make_pair(key, id) < heap.front()) {
      std::pop_heap(heap.begin(), heap.end());
      heap.back() = {key, id};
      std::push_heap(heap.begin(), heap.end());
    }
  }
};

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

}  // namespace

namespace {

// The float pass: every row of `mix` against the queries `q` (nq x d,
// normalised for cosine), chunk by chunk from a shared counter, into each
// thread's candidate heaps per query (per_thread[t][i]).
void ScanChunks(const Mixture& mix, uint64_t n, const std::vector<float>& q, size_t nq, bool l2,
                uint64_t chunk_rows, std::vector<std::vector<Best>>* per_thread) {
  const uint32_t d = mix.dim();
  const uint64_t chunks = (n + chunk_rows - 1) / chunk_rows;
  std::atomic<uint64_t> next{0};
  auto work = [&](int t) {
    std::vector<float> x(chunk_rows * d), dots(nq * chunk_rows), norms(chunk_rows);
    std::vector<Best>& best = (*per_thread)[t];
    for (uint64_t c; (c = next.fetch_add(1)) < chunks;) {
      const uint64_t first = c * chunk_rows, rows = std::min(chunk_rows, n - first);
      mix.Rows(first, rows, x.data());
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(nq),
                  static_cast<int>(rows), static_cast<int>(d), 1.0f, q.data(),
                  static_cast<int>(d), x.data(), static_cast<int>(d), 0.0f, dots.data(),
                  static_cast<int>(rows));
      if (l2) {
        for (uint64_t j = 0; j < rows; ++j) {
          double s = 0;
          for (uint32_t i = 0; i < d; ++i) s += double{x[j * d + i]} * x[j * d + i];
          norms[j] = static_cast<float>(s);
        }
      }
      for (size_t i = 0; i < nq; ++i) {
        const float* row = &dots[i * rows];
        Best& b = best[i];
        for (uint64_t j = 0; j < rows; ++j) {
          const float key = l2 ? norms[j] - 2 * row[j] : -row[j];
          if (b.heap.size() < b.cap || key <= b.heap.front().first) {
            b.Offer(key, static_cast<int64_t>(first + j));
          }
        }
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < static_cast<int>(per_thread->size()); ++t) pool.emplace_back(work, t);
  work(0);
  for (auto& th : pool) th.join();
}

// Query i's top k into gt: its candidates of every thread scored again in
// double; the float key's worst kept value bounds what the float pass may
// have left out (a near cut is counted).
void FinishQuery(const Mixture& mix, uint64_t n, const float* qi, size_t i, bool l2, uint32_t k,
                 const std::vector<std::vector<Best>>& per_thread, GroundTruth* gt) {
  const uint32_t d = mix.dim();
  std::vector<float> row(d);
  Best all;
  all.cap = per_thread[0][i].cap;
  for (const auto& v : per_thread) {
    for (const auto& [key, id] : v[i].heap) all.Offer(key, id);
  }
  std::vector<std::pair<double, int64_t>> exact;  // lower is better
  float worst_key = -std::numeric_limits<float>::infinity();
  for (const auto& [key, id] : all.heap) {
    worst_key = std::max(worst_key, key);
    mix.Rows(static_cast<uint64_t>(id), 1, row.data());
    double s = 0;
    for (uint32_t t = 0; t < d; ++t) {
      s += l2 ? (double{row[t]} - qi[t]) * (double{row[t]} - qi[t]) : double{row[t]} * qi[t];
    }
    exact.emplace_back(l2 ? s : -s, id);
  }
  std::sort(exact.begin(), exact.end());
  for (uint32_t j = 0; j < k; ++j) {
    gt->ids[i * k + j] = static_cast<int32_t>(exact[j].second);
    gt->dist[i * k + j] = static_cast<float>(l2 ? exact[j].first : -exact[j].first);
  }
  if (all.heap.size() < n) {
    // The k-th exact key in the float pass's terms (l2: minus |q|^2).
    double qq = 0;
    for (uint32_t t = 0; t < d; ++t) qq += double{qi[t]} * qi[t];
    const double kth = l2 ? exact[k - 1].first - qq : exact[k - 1].first;
    const double scale = std::max({std::abs(kth), std::abs(double{worst_key}), 1e-30});
    if (double{worst_key} - kth < 1e-5 * scale) ++gt->near_cut;
  }
}

}  // namespace

absl::StatusOr<GroundTruth> ExactTopK(const Mixture& mix, uint64_t n, const float* queries,
                                      size_t nq, Metric metric, uint32_t k, int threads,
                                      uint64_t chunk_rows) {
  if (k == 0 || k > n) return absl::InvalidArgumentError("k must be 1..n");
  if (threads < 1) return absl::InvalidArgumentError("threads must be >= 1");
  const uint32_t d = mix.dim();
  std::vector<float> q(queries, queries + nq * d);
  if (metric == Metric::kCosine) {
    for (size_t i = 0; i < nq; ++i) NormalizeL2(&q[i * d], d);
  }
  const bool l2 = metric == Metric::kL2;
  openblas_set_num_threads(1);
  std::vector<std::vector<Best>> per_thread(threads, std::vector<Best>(nq));
  for (auto& v : per_thread) {
    for (Best& b : v) b.cap = std::min<uint64_t>(n, k + kMargin);
  }
  ScanChunks(mix, n, q, nq, l2, chunk_rows, &per_thread);
  GroundTruth gt;
  gt.k = k;
  gt.ids.resize(nq * k);
  gt.dist.resize(nq * k);
  for (size_t i = 0; i < nq; ++i) FinishQuery(mix, n, &q[i * d], i, l2, k, per_thread, &gt);
  return gt;
}

absl::StatusOr<Hardness> MeasureFolder(const std::string& dir, Metric metric, uint32_t lid_k,
                                       uint64_t max_queries, uint32_t random_points,
                                       uint64_t seed) {
  ZOOM_ASSIGN_OR_RETURN(DatasetFolder f, OpenDatasetFolder(dir, /*need_base=*/true));
  VecsMatrix<float> dist;
  ZOOM_ASSIGN_OR_RETURN(VecsMatrix<int32_t> gt, LoadGroundTruth(f, metric, max_queries, &dist));
  if (lid_k < 2 || lid_k > gt.dim) {
    return absl::InvalidArgumentError(
        absl::StrCat("lid_k must be 2..", gt.dim, " (the ground truth's depth)"));
  }
  ZOOM_ASSIGN_OR_RETURN(VecsMatrix<float> queries, LoadQueries(f, gt.rows));
  ZOOM_ASSIGN_OR_RETURN(VecsMatrix<float> base, LoadBase(f));
  const uint32_t d = base.dim;
  const bool cosine = metric == Metric::kCosine;
  if (cosine) {
    for (uint64_t i = 0; i < base.rows; ++i) NormalizeL2(&base.data[i * d], d);
    for (uint64_t i = 0; i < queries.rows; ++i) NormalizeL2(&queries.data[i * d], d);
  }
  // Euclidean distance from the ground truth's score.
  const auto euclid = [&](float score) {
    if (metric == Metric::kL2) return std::sqrt(std::max(0.0, double{score}));
    return std::sqrt(std::max(0.0, 2.0 - 2.0 * score));  // unit vectors
  };
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<uint64_t> pick(0, base.rows - 1);
  Hardness h;
  h.lid_k = lid_k;
  std::vector<double> lids, rcs;
  for (uint64_t i = 0; i < gt.rows; ++i) {
    const double rk = euclid(dist.row(i)[lid_k - 1]);
    if (rk <= 0) continue;
    double s = 0;
    for (uint32_t j = 0; j < lid_k; ++j) s += std::log(std::max(euclid(dist.row(i)[j]), 1e-300) / rk);
    if (s < 0) lids.push_back(-static_cast<double>(lid_k) / s);
    double mean = 0;
    for (uint32_t r = 0; r < random_points; ++r) {
      const float* x = base.row(pick(rng));
      double dd = 0;
      for (uint32_t t = 0; t < d; ++t) {
        const double v = double{x[t]} - queries.row(i)[t];
        dd += v * v;
      }
      mean += std::sqrt(dd);
    }
    mean /= std::max<uint32_t>(random_points, 1);
    const double nn = euclid(dist.row(i)[0]);
    if (nn > 0) rcs.push_back(mean / nn);
  }
  h.queries = gt.rows;
  if (!lids.empty()) h.lid_mean = std::accumulate(lids.begin(), lids.end(), 0.0) / lids.size();
  if (!rcs.empty()) h.rc_mean = std::accumulate(rcs.begin(), rcs.end(), 0.0) / rcs.size();
  h.lid_median = Median(lids);
  h.rc_median = Median(rcs);
  return h;
}

}  // namespace zoom::datagen
