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
constexpr uint16_t kFgdMinorVersion = 0;
constexpr uint32_t kMaxDim = 65536;
// BLAS takes int sizes: the vocabulary must fit one.
constexpr uint64_t kMaxVocab = INT_MAX;
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
  index->options_.cancel = nullptr;
  index->options_.progress = nullptr;
  return index;
}

uint64_t FgdIndex::GraphBytes() const { return graph_ ? graph_->ResidentBytes() : 0; }

uint64_t FgdIndex::ResidentBytes() const { return GraphBytes() + data_.capacity() * sizeof(float); }

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

absl::Status FgdIndex::SearchGraph(const float* h, const FgdSearchParams& params, FgdResult* out,
                                   QueryStats* stats) const {
  Scratch& s = ThreadScratch();
  const size_t width = size_t{dim_} + 2;
  s.q.resize(width);
  std::memcpy(s.q.data(), h, size_t{dim_} * sizeof(float));
  s.q[dim_] = 1.0f;
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
    // z = (||h||² + 1 + U² − ||q − x||²) / 2.
    head = s.found.data() + k;
    n_head = s.found.size() - k;
    double hh = 1.0 + max_norm_sq_;
    for (uint32_t j = 0; j < dim_; ++j) hh += double{h[j]} * h[j];
    s.head_logit.resize(n_head);
    for (size_t i = 0; i < n_head; ++i) {
      s.head_logit[i] = static_cast<float>((hh - head[i].distance) / 2);
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
  // estimated from S words drawn uniformly (with replacement) among them.
  r->tail_mass = 0;
  if (params.tail_samples == 0) return;
  s.sorted.assign(r->ids.begin(), r->ids.end());
  double head_sum = 0;
  // exp(logit - m) of a word outside the top k is normally <= 1; a
  // distance-derived logit of a context near the magnitude rule's bound
  // loses all precision (|q|^2 dwarfs the logit), so the exponent is capped
  // to keep the estimate finite.
  constexpr double kMaxExponent = 80;
  for (size_t i = 0; i < n_head; ++i) {
    s.sorted.push_back(head[i].id);
    head_sum += std::exp(std::min(double{head_logit[i]} - m, kMaxExponent));
  }
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
      rest_sum += std::exp(std::min(double{Logit(i, h)} - m, kMaxExponent));
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
      rest_sum += std::exp(std::min(double{Logit(id, h)} - m, kMaxExponent));
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

// File body after the binary_io header, version 1.0:
//   u32 V | u32 d | f32 U² | u32 M | u32 ef_construction | u64 seed |
//   u64 V·(d+2), f32 rows[V·(d+2)] | HNSW graph (HnswGraph::Save)
absl::Status FgdIndex::Save(const std::string& path, FileSystem* fs) const {
  BinaryWriter w(kFgdMagic, kFgdMajorVersion, kFgdMinorVersion);
  w.Put<uint32_t>(vocab_);
  w.Put<uint32_t>(dim_);
  w.Put<float>(max_norm_sq_);
  w.Put<uint32_t>(options_.hnsw.M);
  w.Put<uint32_t>(options_.hnsw.ef_construction);
  w.Put<uint64_t>(options_.hnsw.seed);
  w.PutVector(data_);
  graph_->Save(w);
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
  // A later minor version may append fields; 1.0 has none.
  if (r.minor() == 0 && r.remaining() != 0) return r.Corrupt("trailing bytes");
  return index;
}

}  // namespace zoom::index
