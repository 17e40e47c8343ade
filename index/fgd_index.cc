#include "index/fgd_index.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <mutex>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/binary_io.h"
#include "common/status_macros.h"
#include "index/distance_kernels.h"
#include "index/index_internal.h"

namespace zoom::index {
namespace {

constexpr char kFgdMagic[] = "ZOOMFGD";
constexpr uint16_t kFgdMajorVersion = 1;
constexpr uint16_t kFgdMinorVersion = 1;  // 1.1: the tail's cluster summaries
constexpr uint32_t kMaxDim = 65536;
// BLAS takes int sizes: the vocabulary must fit one.
constexpr uint64_t kMaxVocab = INT_MAX;
// The tail summaries: at most 256 clusters (a word's cluster is one byte),
// of about 39 rows or more (FAISS's advice for k-means), trained on up to
// 64 rows a cluster.
constexpr size_t kTailMaxClusters = 256;
constexpr size_t kTailMinClusterRows = 39;
constexpr size_t kTailTrainRowsPerCluster = 64;
// exp(logit - m) of a word outside the top k is normally <= 1; a
// distance-derived logit (or a cluster's estimate) of a context near the
// magnitude rule's bound loses all precision (|q|^2 dwarfs the logit), so
// the exponent is capped to keep the estimate finite (NaN counts as the
// cap).
constexpr double kMaxExponent = 80;
inline double CappedExp(double x) { return std::exp(x < kMaxExponent ? x : kMaxExponent); }
inline float CappedExp(float x) {
  return std::exp(x < static_cast<float>(kMaxExponent) ? x : static_cast<float>(kMaxExponent));
}

// log Φ(x), Φ the standard normal CDF: erfc down to x = −8 (Φ(−8) ≈ 6e-16,
// far from float's underflow), below it the asymptotic series
// Φ(x) ≈ φ(x)/|x| · (1 − 1/x² + 3/x⁴ − 15/x⁶) (relative error < 1e-6 there).
float LogNormalCdf(float x) {
  if (x > -8) return std::log(0.5f * std::erfc(-x * 0.70710678f));
  const float x2 = x * x;
  return -0.5f * x2 - std::log(-x) - 0.91893853f +  // ½ log(2π)
         std::log1p(-1 / x2 + 3 / (x2 * x2) - 15 / (x2 * x2 * x2));
}

// Logits buffered per exact-mode sgemm (floats): bounds the batch's RAM.
constexpr size_t kMaxLogitBuffer = size_t{1} << 22;

using internal::BlasSingleThreadScope;  // (index_internal.h)

// Per-thread search state, reused across calls (and indexes).
struct Scratch {
  HnswScratch graph;
  std::vector<Neighbor> found;
  std::vector<float> q;          // [h ; 1 ; 0]
  std::vector<float> z;          // exact-mode logits, rows × V
  std::vector<uint32_t> order;   // exact-mode id permutation
  std::vector<uint32_t> sorted;  // top ids ascending (tail sampling)
  std::vector<uint32_t> stamp;   // Floyd's sample membership by index
  uint32_t epoch = 0;
  std::vector<std::pair<float, uint32_t>> scored;
  std::vector<float> head_logit;  // logits of the candidates beyond the k
  std::mt19937_64 rng;

  // A fresh membership set over [0, n).
  void BeginSample(size_t n) {
    if (stamp.size() < n) stamp.resize(n, 0);
    if (++epoch == 0) {
      std::fill(stamp.begin(), stamp.end(), 0);
      epoch = 1;
    }
  }
  // True when `i` was not yet in the set (and adds it).
  bool Add(size_t i) {
    if (stamp[i] == epoch) return false;
    stamp[i] = epoch;
    return true;
  }
};

Scratch& ThreadScratch() {
  thread_local Scratch s;
  return s;
}

// Squared L2 from the transformed query to transformed rows; counts the
// distances it computes.
class RowComputer final : public DistanceComputer {
 public:
  RowComputer(const float* q, const float* data, size_t width)
      : q_(q), data_(data), width_(width) {}
  void Distances(const InternalId* ids, size_t n, float* out) override {
    for (size_t i = 0; i + 1 < n; ++i) {
      __builtin_prefetch(data_ + size_t{ids[i + 1]} * width_);
    }
    for (size_t i = 0; i < n; ++i) {
      out[i] = L2Sqr(q_, data_ + size_t{ids[i]} * width_, width_);
    }
    evals_ += n;
  }
  uint64_t evals() const { return evals_; }

 private:
  const float* q_;
  const float* data_;
  const size_t width_;
  uint64_t evals_ = 0;
};

// A stable 64-bit hash of a context's bytes (FNV-1a, then a SplitMix64
// finaliser): the default seed of its tail sample.
uint64_t HashContext(const float* h, size_t d) {
  const auto* p = reinterpret_cast<const unsigned char*>(h);
  uint64_t x = 1469598103934665603ull;
  for (size_t i = 0; i < d * sizeof(float); ++i) {
    x ^= p[i];
    x *= 1099511628211ull;
  }
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

// Best logit first; ties: lower id.
inline bool Better(float za, uint32_t a, float zb, uint32_t b) {
  return za > zb || (za == zb && a < b);
}

double MicrosSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
      .count();
}

}  // namespace

FgdIndex::~FgdIndex() = default;

absl::StatusOr<std::unique_ptr<FgdIndex>> FgdIndex::Build(const float* W, const float* b,
                                                          uint32_t vocab, uint32_t dim,
                                                          const FgdOptions& options) {
  if (vocab < 1 || vocab > kMaxVocab) {
    return absl::InvalidArgumentError(
        absl::StrCat("FGD vocabulary size ", vocab, " out of range 1..", kMaxVocab));
  }
  if (dim < 1 || dim > kMaxDim) {
    return absl::InvalidArgumentError(
        absl::StrCat("FGD dimension ", dim, " out of range 1..", kMaxDim));
  }
  if (W == nullptr || b == nullptr) {
    return absl::InvalidArgumentError("FGD weights or biases missing");
  }
  ZOOM_RETURN_IF_ERROR(options.hnsw.Validate());
  if (options.build_threads < 1 || options.build_threads > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("build_threads ", options.build_threads, " out of range 1..256"));
  }
  const size_t width = size_t{dim} + 2;
  for (size_t i = 0; i < size_t{vocab} * dim; ++i) {
    if (!std::isfinite(W[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("FGD weight of word ", i / dim, " is not finite"));
    }
  }
  for (uint32_t i = 0; i < vocab; ++i) {
    if (!std::isfinite(b[i])) {
      return absl::InvalidArgumentError(absl::StrCat("FGD bias of word ", i, " is not finite"));
    }
  }

  std::unique_ptr<FgdIndex> index(new FgdIndex());
  index->vocab_ = vocab;
  index->dim_ = dim;
  index->options_ = options;
  // ||r_i||² in double, so the padding is as exact as float storage allows.
  std::vector<double> norm_sq(vocab);
  double max_sq = 0;
  for (uint32_t i = 0; i < vocab; ++i) {
    const float* w = W + size_t{i} * dim;
    double s = double{b[i]} * b[i];
    for (uint32_t j = 0; j < dim; ++j) s += double{w[j]} * w[j];
    norm_sq[i] = s;
    max_sq = std::max(max_sq, s);
  }
  if (!std::isfinite(static_cast<float>(max_sq))) {
    return absl::InvalidArgumentError(
        "FGD weights too large: a row's squared norm overflows float");
  }
  index->max_norm_sq_ = static_cast<float>(max_sq);
  index->data_.resize(size_t{vocab} * width);
  for (uint32_t i = 0; i < vocab; ++i) {
    float* x = index->data_.data() + size_t{i} * width;
    std::memcpy(x, W + size_t{i} * dim, size_t{dim} * sizeof(float));
    x[dim] = b[i];
    x[dim + 1] = static_cast<float>(std::sqrt(std::max(0.0, max_sq - norm_sq[i])));
  }

  index->graph_ = std::make_unique<HnswGraph>(options.hnsw);
  index->graph_->Grow(vocab);
  const internal::MatrixOracle oracle(Metric::kL2, index->data_.data(), width);
  std::vector<HnswScratch> scratch(options.build_threads);
  std::atomic<uint64_t> inserted{0};
  internal::ParallelFor(vocab, options.build_threads, [&](size_t i, int t) {
    if (options.cancel != nullptr && options.cancel->load(std::memory_order_relaxed)) return;
    index->graph_->Insert(static_cast<InternalId>(i), oracle, scratch[t]);
    const uint64_t done = inserted.fetch_add(1, std::memory_order_relaxed) + 1;
    if (options.progress != nullptr && done % 1024 == 0) {
      options.progress->store(double(done) / vocab, std::memory_order_relaxed);
    }
  });
  if (options.cancel != nullptr && options.cancel->load()) {
    return absl::CancelledError("the FGD graph build was cancelled");
  }
  ZOOM_RETURN_IF_ERROR(index->BuildTailSummaries(options.build_threads));
  index->options_.cancel = nullptr;
  index->options_.progress = nullptr;
  return index;
}

uint64_t FgdIndex::GraphBytes() const { return graph_ ? graph_->ResidentBytes() : 0; }

uint64_t FgdIndex::ResidentBytes() const {
  return GraphBytes() + data_.capacity() * sizeof(float) +
         (tail_rows_.capacity() + tail_stats_.capacity()) * sizeof(float) +
         tail_size_.capacity() * sizeof(uint32_t);
}

absl::Status FgdIndex::AssignTailClusters(size_t C, int threads,
                                          std::vector<uint8_t>* word_cluster) const {
  const size_t V = vocab_, d = dim_, width = d + 2, dd = d + 1;
  // k-means over the rows [w_i ; b_i] (a seeded sample of them).
  std::vector<uint32_t> pick(V);
  std::iota(pick.begin(), pick.end(), 0u);
  if (V > C * kTailTrainRowsPerCluster) {
    std::mt19937_64 rng(options_.hnsw.seed ^ 0x7a11u);
    std::shuffle(pick.begin(), pick.end(), rng);
    pick.resize(C * kTailTrainRowsPerCluster);
  }
  std::vector<float> sample(pick.size() * dd);
  for (size_t i = 0; i < pick.size(); ++i) {
    std::memcpy(sample.data() + i * dd, data_.data() + size_t{pick[i]} * width, dd * sizeof(float));
  }
  ZOOM_ASSIGN_OR_RETURN(std::vector<float> centroids,
                        internal::KMeans(sample.data(), pick.size(), dd, C, 20,
                                         options_.hnsw.seed + 1, /*spherical=*/false));
  // Every word to its nearest centroid.
  word_cluster->resize(V);
  internal::ParallelFor(V, std::max(threads, 1), [&](size_t i, int) {
    thread_local std::vector<float> dist;
    dist.resize(C);
    L2SqrBatch(data_.data() + i * width, centroids.data(), C, dd, dist.data());
    (*word_cluster)[i] =
        static_cast<uint8_t>(std::min_element(dist.begin(), dist.end()) - dist.begin());
  });
  return absl::OkStatus();
}

absl::Status FgdIndex::BuildTailSummaries(int threads) {
  const size_t V = vocab_, d = dim_, width = d + 2, dd = d + 1;
  // Rows so large that a distance between two of them could overflow float
  // (beyond zoomd's magnitude rule; a file's rows are only known finite)
  // make one cluster: k-means would compare infinities.
  double max_sq = 0;
  for (size_t i = 0; i < V; ++i) {
    const float* x = data_.data() + i * width;
    double sq = 0;
    for (size_t j = 0; j < dd; ++j) sq += double{x[j]} * x[j];
    max_sq = std::max(max_sq, sq);
  }
  const size_t C =
      max_sq > 1e37 ? 1 : std::clamp<size_t>(V / kTailMinClusterRows, 1, kTailMaxClusters);
  std::vector<uint8_t> word_cluster(V, 0);
  if (C > 1) ZOOM_RETURN_IF_ERROR(AssignTailClusters(C, threads, &word_cluster));
  // Means, then variances (two passes, in double).
  std::vector<double> mean(C * dd, 0.0), var(C * dd, 0.0);
  std::vector<uint32_t> size(C, 0);
  for (size_t i = 0; i < V; ++i) {
    const size_t c = word_cluster[i];
    ++size[c];
    const float* x = data_.data() + i * width;
    for (size_t j = 0; j < dd; ++j) mean[c * dd + j] += x[j];
  }
  for (size_t c = 0; c < C; ++c) {
    for (size_t j = 0; j < dd && size[c] > 0; ++j) mean[c * dd + j] /= size[c];
  }
  for (size_t i = 0; i < V; ++i) {
    const size_t c = word_cluster[i];
    const float* x = data_.data() + i * width;
    for (size_t j = 0; j < dd; ++j) {
      const double e = x[j] - mean[c * dd + j];
      var[c * dd + j] += e * e;
    }
  }
  tail_clusters_ = static_cast<uint32_t>(C);
  tail_rows_.assign(C * d, 0.0f);
  tail_stats_.assign(C * 3, 0.0f);
  for (size_t c = 0; c < C; ++c) {
    if (size[c] == 0) continue;
    double w_var = 0;
    for (size_t j = 0; j < d; ++j) {
      tail_rows_[c * d + j] = static_cast<float>(mean[c * dd + j]);
      w_var += var[c * dd + j];
    }
    tail_stats_[c * 3] = static_cast<float>(mean[c * dd + d]);
    tail_stats_[c * 3 + 1] = static_cast<float>(var[c * dd + d] / size[c]);
    tail_stats_[c * 3 + 2] = static_cast<float>(w_var / size[c] / d);
  }
  tail_size_ = std::move(size);
  return absl::OkStatus();
}

double FgdIndex::ClusterTail(const float* h, float m, float tau) const {
  const size_t d = dim_, C = tail_clusters_;
  const float cut = tau - m;
  float hh = 0;
  for (size_t j = 0; j < d; ++j) hh += h[j] * h[j];
  double t = 0;
  for (size_t c = 0; c < C; ++c) {
    const uint32_t n = tail_size_[c];
    if (n == 0) continue;
    const float* st = tail_stats_.data() + c * 3;
    // The cluster's logits relative to m: mean mz, variance s2.
    const float mz = InnerProduct(h, tail_rows_.data() + c * d, d) + st[0] - m;
    const float s2 = st[1] + st[2] * hh;
    // log E[exp(z)] without the truncation bounds the term: below
    // exp(-30) of the best word's (whose term is 1) it changes nothing a
    // float tail_mass can show.
    const float base = mz + s2 / 2;
    if (base < -30.0f) continue;
    float log_term;
    if (s2 > 0) {
      // E[exp(z) · 1(z < cut)] for z ~ N(mz, s2); Φ(x) rounds to 1 above
      // x = 5.5 (1 − 2e-8).
      const float x = (cut - mz - s2) / std::sqrt(s2);
      log_term = x > 5.5f ? base : base + LogNormalCdf(x);
    } else {
      if (!(mz < cut)) continue;
      log_term = mz;
    }
    t += n * CappedExp(log_term);
  }
  return t;
}

float FgdIndex::Logit(uint32_t i, const float* h) const {
  const float* row = data_.data() + size_t{i} * (size_t{dim_} + 2);
  return InnerProduct(h, row, dim_) + row[dim_];
}

absl::Status FgdIndex::Search(const float* contexts, size_t n, const FgdSearchParams& params,
                              std::vector<FgdResult>* out, QueryStats* stats) const {
  if (out == nullptr) return absl::InvalidArgumentError("FGD output missing");
  if (params.k == 0 || params.k > vocab_) {
    return absl::InvalidArgumentError(
        absl::StrCat("FGD k ", params.k, " out of range 1..", vocab_, " (the vocabulary)"));
  }
  if (n > 0 && contexts == nullptr) {
    return absl::InvalidArgumentError("FGD contexts missing");
  }
  for (size_t i = 0; i < n * dim_; ++i) {
    if (!std::isfinite(contexts[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("FGD context ", i / dim_, " has a non-finite value"));
    }
  }
  out->resize(n);
  if (n == 0) return absl::OkStatus();
  const auto start = std::chrono::steady_clock::now();
  if (params.exact) {
    ZOOM_RETURN_IF_ERROR(SearchExact(contexts, n, params, out));
    if (stats) stats->distance_evals += uint64_t{vocab_} * n;
  } else {
    for (size_t i = 0; i < n; ++i) {
      ZOOM_RETURN_IF_ERROR(SearchGraph(contexts + i * dim_, params, &(*out)[i], stats));
    }
  }
  if (stats) stats->preview_us += MicrosSince(start);
  return absl::OkStatus();
}

// A context more than this many times the rows' norm is scaled down for
// the walk (SearchGraph).
constexpr double kRescaleFactor = 1e3;

absl::Status FgdIndex::SearchGraph(const float* h, const FgdSearchParams& params, FgdResult* out,
                                   QueryStats* stats) const {
  Scratch& s = ThreadScratch();
  const size_t width = size_t{dim_} + 2;
  // The query [h / s, 1 / s, 0]: its distance to a row is
  // ||h/s||² + 1/s² + U² − 2 (w·h + b) / s, whose order is the logits' for
  // any s > 0. s = 1 for contexts of the rows' scale; a context far larger
  // (norm 1e8..1e18: the distances' float precision then drowns the logits'
  // differences, and the walk returned words unrelated to the exact top-k)
  // is scaled to the rows' norm U, where the graph was built.
  double h_sq = 0;
  for (uint32_t j = 0; j < dim_; ++j) h_sq += double{h[j]} * h[j];
  const double u = std::sqrt(std::max(1.0, double{max_norm_sq_}));
  const double h_norm = std::sqrt(h_sq);
  const double scale = h_norm > kRescaleFactor * u ? h_norm / u : 1.0;
  s.q.resize(width);
  for (uint32_t j = 0; j < dim_; ++j) s.q[j] = static_cast<float>(h[j] / scale);
  s.q[dim_] = static_cast<float>(1.0 / scale);
  s.q[dim_ + 1] = 0.0f;
  RowComputer dc(s.q.data(), data_.data(), width);
  const size_t k = params.k;
  const size_t ef = std::max<size_t>(params.ef, k);
  QueryStats graph_stats;
  graph_->Search(dc, ef, nullptr, s.graph, &s.found, &graph_stats);
  out->ids.clear();
  out->distance_evals = dc.evals();
  const Neighbor* head = nullptr;
  size_t n_head = 0;
  if (s.found.size() >= k) {
    for (size_t i = 0; i < k; ++i) out->ids.push_back(s.found[i].id);
    // The candidates beyond the k: logits from their distances,
    // z = s (||h/s||² + 1/s² + U² − ||q − x||²) / 2.
    head = s.found.data() + k;
    n_head = s.found.size() - k;
    double hh = 1.0 / (scale * scale) + max_norm_sq_;
    for (uint32_t j = 0; j < dim_; ++j) hh += double{s.q[j]} * s.q[j];
    s.head_logit.resize(n_head);
    for (size_t i = 0; i < n_head; ++i) {
      s.head_logit[i] = static_cast<float>(scale * (hh - head[i].distance) / 2);
    }
  } else {
    // The graph reached fewer than k words (a tiny or badly connected
    // graph): the fallback scores every word.
    s.scored.resize(vocab_);
    for (uint32_t i = 0; i < vocab_; ++i) s.scored[i] = {Logit(i, h), i};
    std::partial_sort(
        s.scored.begin(), s.scored.begin() + k, s.scored.end(),
        [](const auto& a, const auto& b) { return Better(a.first, a.second, b.first, b.second); });
    for (size_t i = 0; i < k; ++i) out->ids.push_back(s.scored[i].second);
    out->distance_evals += vocab_;
  }
  Finish(h, params, out, head, s.head_logit.data(), n_head);
  if (stats) {
    stats->distance_evals += out->distance_evals;
    stats->hops += graph_stats.hops;
  }
  return absl::OkStatus();
}

void FgdIndex::Finish(const float* h, const FgdSearchParams& params, FgdResult* r,
                      const Neighbor* head, const float* head_logit, size_t n_head) const {
  Scratch& s = ThreadScratch();
  const size_t k = r->ids.size();
  // Exact logits, best first.
  s.scored.resize(k);
  for (size_t i = 0; i < k; ++i) s.scored[i] = {Logit(r->ids[i], h), r->ids[i]};
  std::sort(s.scored.begin(), s.scored.end(), [](const auto& a, const auto& b) {
    return Better(a.first, a.second, b.first, b.second);
  });
  r->logits.resize(k);
  r->probs.resize(k);
  const float m = s.scored[0].first;
  double top_sum = 0;
  for (size_t i = 0; i < k; ++i) {
    r->ids[i] = s.scored[i].second;
    r->logits[i] = s.scored[i].first;
    top_sum += std::exp(double{r->logits[i]} - m);
  }
  for (size_t i = 0; i < k; ++i) {
    r->probs[i] = static_cast<float>(std::exp(double{r->logits[i]} - m) / top_sum);
  }

  // The tail: the words the graph search scored beyond the k (their logits
  // follow from the distances already computed) count exactly; the rest is
  // estimated from the cluster summaries, or from S words drawn uniformly
  // (with replacement) among them.
  r->tail_mass = 0;
  if (params.tail == FgdTail::kNone ||
      (params.tail == FgdTail::kSample && params.tail_samples == 0)) {
    return;
  }
  double head_sum = 0;
  for (size_t i = 0; i < n_head; ++i) head_sum += CappedExp(double{head_logit[i]} - m);
  if (params.tail == FgdTail::kClusters) {
    // The words not counted are (nearly all) those below the lowest logit
    // counted: each cluster's Gaussian is truncated there.
    float tau = r->logits[k - 1];
    for (size_t i = 0; i < n_head; ++i) tau = std::min(tau, head_logit[i]);
    // Every word counted (k + the head cover |V|): nothing is left.
    const double rest = k + n_head >= vocab_ ? 0.0 : ClusterTail(h, m, tau);
    const double tail_sum = head_sum + rest;
    r->tail_mass = static_cast<float>(tail_sum / (top_sum + tail_sum));
    return;
  }
  s.sorted.assign(r->ids.begin(), r->ids.end());
  for (size_t i = 0; i < n_head; ++i) s.sorted.push_back(head[i].id);
  std::sort(s.sorted.begin(), s.sorted.end());
  s.sorted.erase(std::unique(s.sorted.begin(), s.sorted.end()), s.sorted.end());
  const size_t rest = vocab_ - s.sorted.size();
  const size_t samples = std::min<size_t>(params.tail_samples, rest);
  double rest_sum = 0;
  if (samples == rest) {
    // Every remaining word: the tail is exact.
    size_t next = 0;
    for (uint32_t i = 0; i < vocab_; ++i) {
      if (next < s.sorted.size() && s.sorted[next] == i) {
        ++next;
        continue;
      }
      rest_sum += CappedExp(double{Logit(i, h)} - m);
    }
  } else {
    uint64_t state = params.seed != 0 ? params.seed : HashContext(h, dim_);
    for (size_t drawn = 0; drawn < samples;) {
      // SplitMix64.
      uint64_t x = (state += 0x9e3779b97f4a7c15ull);
      x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
      x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
      x ^= x >> 31;
      const uint32_t id = static_cast<uint32_t>(x % vocab_);
      if (std::binary_search(s.sorted.begin(), s.sorted.end(), id)) continue;
      rest_sum += CappedExp(double{Logit(id, h)} - m);
      ++drawn;
    }
    rest_sum *= static_cast<double>(rest) / static_cast<double>(samples);
  }
  r->distance_evals += samples;
  const double tail_sum = head_sum + rest_sum;
  r->tail_mass = static_cast<float>(tail_sum / (top_sum + tail_sum));
}

absl::Status FgdIndex::SearchExact(const float* contexts, size_t n, const FgdSearchParams& params,
                                   std::vector<FgdResult>* out) const {
  Scratch& s = ThreadScratch();
  const size_t V = vocab_, d = dim_, ld = d + 2, k = params.k;
  const size_t chunk = std::clamp<size_t>(kMaxLogitBuffer / V, 1, INT_MAX);
  s.order.resize(V);
  BlasSingleThreadScope single_thread;
  for (size_t first = 0; first < n; first += chunk) {
    const size_t rows = std::min(chunk, n - first);
    const float* H = contexts + first * d;
    s.z.resize(rows * V);
    float* Z = s.z.data();
    if (rows == 1) {
      // z = W·h: W is data_'s first d columns (lda = d + 2).
      cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(V), static_cast<int>(d), 1.0f,
                  data_.data(), static_cast<int>(ld), H, 1, 0.0f, Z, 1);
    } else {
      // Z (rows × V) = H (rows × d) · Wᵀ.
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows),
                  static_cast<int>(V), static_cast<int>(d), 1.0f, H, static_cast<int>(d),
                  data_.data(), static_cast<int>(ld), 0.0f, Z, static_cast<int>(V));
    }
    for (size_t row = 0; row < rows; ++row) {
      float* z = Z + row * V;
      for (size_t i = 0; i < V; ++i) z[i] += data_[i * ld + d];
      std::iota(s.order.begin(), s.order.end(), 0u);
      std::partial_sort(s.order.begin(), s.order.begin() + k, s.order.end(),
                        [z](uint32_t a, uint32_t b) { return Better(z[a], a, z[b], b); });
      FgdResult& r = (*out)[first + row];
      r.ids.assign(s.order.begin(), s.order.begin() + k);
      r.logits.resize(k);
      r.probs.resize(k);
      const float m = z[s.order[0]];
      double top_sum = 0, tail_sum = 0;
      for (size_t i = 0; i < k; ++i) {
        r.logits[i] = z[r.ids[i]];
        top_sum += std::exp(double{r.logits[i]} - m);
      }
      for (size_t i = k; i < V; ++i) tail_sum += std::exp(z[s.order[i]] - m);
      const double total = top_sum + tail_sum;
      for (size_t i = 0; i < k; ++i) {
        r.probs[i] = static_cast<float>(std::exp(double{r.logits[i]} - m) / total);
      }
      r.tail_mass = static_cast<float>(tail_sum / total);
      r.distance_evals = V;
    }
  }
  return absl::OkStatus();
}

// File body after the binary_io header, version 1.1:
//   u32 V | u32 d | f32 U² | u32 M | u32 ef_construction | u64 seed |
//   u64 V·(d+2), f32 rows[V·(d+2)] | HNSW graph (HnswGraph::Save) |
//   1.1: u32 C | u64 C·d, f32 tail rows μ_c(w) |
//        u64 3C, f32 [μ_c(b), σ²_c(b), σ̄²_c(w)] |
//        u64 C, u32 cluster sizes (adding up to V)
absl::Status FgdIndex::Save(const std::string& path, FileSystem* fs) const {
  BinaryWriter w(kFgdMagic, kFgdMajorVersion, kFgdMinorVersion, path, fs);
  w.Put<uint32_t>(vocab_);
  w.Put<uint32_t>(dim_);
  w.Put<float>(max_norm_sq_);
  w.Put<uint32_t>(options_.hnsw.M);
  w.Put<uint32_t>(options_.hnsw.ef_construction);
  w.Put<uint64_t>(options_.hnsw.seed);
  w.PutVector(data_);
  graph_->Save(w);
  w.Put<uint32_t>(tail_clusters_);
  w.PutVector(tail_rows_);
  w.PutVector(tail_stats_);
  w.PutVector(tail_size_);
  return w.Commit(path, fs);
}

absl::StatusOr<std::unique_ptr<FgdIndex>> FgdIndex::Load(const std::string& path) {
  ZOOM_ASSIGN_OR_RETURN(BinaryReader r,
                        BinaryReader::Open(path, kFgdMagic, kFgdMajorVersion, "FGD index"));
  std::unique_ptr<FgdIndex> index(new FgdIndex());
  ZOOM_RETURN_IF_ERROR(r.Get(&index->vocab_));
  ZOOM_RETURN_IF_ERROR(r.Get(&index->dim_));
  ZOOM_RETURN_IF_ERROR(r.Get(&index->max_norm_sq_));
  FgdOptions& o = index->options_;
  ZOOM_RETURN_IF_ERROR(r.Get(&o.hnsw.M));
  ZOOM_RETURN_IF_ERROR(r.Get(&o.hnsw.ef_construction));
  ZOOM_RETURN_IF_ERROR(r.Get(&o.hnsw.seed));
  if (index->vocab_ < 1 || index->vocab_ > kMaxVocab || index->dim_ < 1 || index->dim_ > kMaxDim) {
    return r.Corrupt("vocabulary size or dimension out of range");
  }
  if (!std::isfinite(index->max_norm_sq_) || index->max_norm_sq_ < 0) {
    return r.Corrupt("maximum norm");
  }
  if (!o.hnsw.Validate().ok()) return r.Corrupt("HNSW options");
  const uint64_t floats = uint64_t{index->vocab_} * (uint64_t{index->dim_} + 2);
  ZOOM_RETURN_IF_ERROR(r.GetVector(&index->data_, floats));
  if (index->data_.size() != floats) return r.Corrupt("row count");
  for (float v : index->data_) {
    if (!std::isfinite(v)) return r.Corrupt("non-finite row value");
  }
  index->graph_ = std::make_unique<HnswGraph>(o.hnsw);
  ZOOM_RETURN_IF_ERROR(index->graph_->Load(r));
  const HnswOptions& g = index->graph_->options();
  if (g.M != o.hnsw.M || g.ef_construction != o.hnsw.ef_construction || g.seed != o.hnsw.seed) {
    return r.Corrupt("graph options differ from the index's");
  }
  if (index->graph_->size() != index->vocab_) {
    return r.Corrupt("graph size differs from the vocabulary");
  }
  if (r.minor() == 0) {
    // 1.0 has no tail summaries: make them (deterministic for the file).
    if (r.remaining() != 0) return r.Corrupt("trailing bytes");
    ZOOM_RETURN_IF_ERROR(index->BuildTailSummaries(o.build_threads));
    return index;
  }
  const uint32_t V = index->vocab_;
  const size_t d = index->dim_;
  ZOOM_RETURN_IF_ERROR(r.Get(&index->tail_clusters_));
  const uint32_t C = index->tail_clusters_;
  if (C < 1 || C > kTailMaxClusters || C > V) return r.Corrupt("tail cluster count");
  ZOOM_RETURN_IF_ERROR(r.GetVector(&index->tail_rows_, size_t{C} * d));
  ZOOM_RETURN_IF_ERROR(r.GetVector(&index->tail_stats_, size_t{C} * 3));
  ZOOM_RETURN_IF_ERROR(r.GetVector(&index->tail_size_, C));
  if (index->tail_rows_.size() != size_t{C} * d || index->tail_stats_.size() != size_t{C} * 3 ||
      index->tail_size_.size() != C) {
    return r.Corrupt("tail summary sizes");
  }
  for (float v : index->tail_rows_) {
    if (!std::isfinite(v)) return r.Corrupt("tail summary mean");
  }
  for (size_t j = 0; j < index->tail_stats_.size(); ++j) {
    const float v = index->tail_stats_[j];
    // [μ_c(b), σ²_c(b), σ̄²_c(w)]: variances are never negative.
    if (!std::isfinite(v) || (j % 3 != 0 && v < 0)) return r.Corrupt("tail summary statistics");
  }
  uint64_t words = 0;
  for (uint32_t n : index->tail_size_) words += n;
  if (words != V) return r.Corrupt("tail cluster sizes do not add up to the vocabulary");
  // A later minor version may append fields; 1.1 has no more.
  if (r.minor() == 1 && r.remaining() != 0) return r.Corrupt("trailing bytes");
  return index;
}

}  // namespace zoom::index
