// ivf_hnsw_pq, the Zoom paper's preview: k-means clusters routed by an HNSW
// graph over the centroids, PQ codes of the residuals in per-cluster lists.
//
// Distance of query q to a coded point x = c + r (c its centroid, r^ the
// decoded residual), all in the quantiser's (orthonormally rotated) space:
//   L2: |q - c|^2 + (|r^|^2 + 2<c, r^>) - 2<q, r^>
//   IP: -(<q, c> + <q, r^>)
// |q - c|^2 and <q, c> come from the centroid search; the bracket is one
// float per point computed at encoding; <q, r^> is an ADC lookup in one
// inner-product table per query, shared by all lists.
#include <faiss/Clustering.h>
#include <faiss/IndexFlat.h>
#include <faiss/impl/FaissException.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "index/chunked_array.h"
#include "index/index_internal.h"

namespace zoom::index::internal {
namespace {

class CentroidComputer final : public DistanceComputer {
 public:
  CentroidComputer(Metric metric, const float* q, const float* c, size_t d)
      : metric_(metric), q_(q), c_(c), d_(d) {}
  void Distances(const InternalId* ids, size_t n, float* out) override {
    for (size_t i = 0; i < n; ++i) {
      out[i] = MetricDistance(metric_, q_, c_ + size_t{ids[i]} * d_, d_);
    }
  }

 private:
  Metric metric_;
  const float* q_;
  const float* c_;
  size_t d_;
};

// First-chunk rows of a list that grows by Add (not sized by a bulk load).
constexpr uint64_t kListBaseRows = 16;

uint32_t AutoNlist(size_t n) {
  // About 4 sqrt(n), a power of two, with >= 39 points per cluster.
  uint32_t nlist = 16;
  while (nlist * 2 <= 4 * std::sqrt(double(n)) && nlist * 2 * 39 <= n) nlist *= 2;
  return nlist;
}

// One cluster's list. Rows never move, so a list grows under readers.
struct InvertedList {
  // `rows` sizes the first chunk (exact for a bulk build or a load).
  InvertedList(size_t m, uint64_t rows)
      : codes(m, rows), ids(1, rows), terms(1, rows) {}
  std::atomic<uint32_t> size{0};
  ChunkedArray<uint8_t> codes;
  ChunkedArray<uint32_t> ids;
  ChunkedArray<float> terms;  // |r^|^2 + 2<c, r^> (L2 only)
};

class IvfHnswPqIndex final : public VectorIndex {
 public:
  IvfHnswPqIndex(const IndexSpec& spec, std::vector<float> centroids, ProductQuantizer pq)
      : spec_(spec), centroids_(std::move(centroids)), pq_(std::move(pq)), graph_(spec.hnsw) {
    const uint32_t nlist = spec_.nlist;
    lists_.reserve(nlist);
    for (uint32_t i = 0; i < nlist; ++i) {
      lists_.push_back(std::make_unique<InvertedList>(pq_.code_size(), kListBaseRows));
    }
  }

  const IndexSpec& spec() const override { return spec_; }
  uint64_t size() const override { return size_.load(std::memory_order_acquire); }

  void BuildGraph() {
    graph_.Grow(spec_.nlist);
    MatrixOracle oracle(spec_.metric, centroids_.data(), spec_.dim);
    std::vector<HnswScratch> scratch(spec_.build_threads);
    ParallelFor(spec_.nlist, spec_.build_threads, [&](size_t i, int t) {
      graph_.Insert(static_cast<InternalId>(i), oracle, scratch[t]);
    });
  }

  // Assigns, encodes and appends n prepared vectors as ids size()...
  // `bulk` (the build, before the index is shared): empty lists are sized
  // exactly for what they receive.
  absl::Status AddPrepared(const float* x, size_t n, bool bulk = false) {
    const uint64_t first = size();
    if (first + n > kMaxInternalIds) {
      return absl::ResourceExhaustedError("too many vectors for one index");
    }
    const size_t d = spec_.dim, pd = pq_.padded_dim(), m = pq_.code_size();
    std::vector<uint32_t> assign(n);
    std::vector<uint8_t> codes(n * m);
    std::vector<float> terms(n);
    ParallelFor(n, spec_.build_threads, [&](size_t i, int) {
      thread_local std::vector<float> dist, r, rt, rhat, ct;
      const float* xi = x + i * d;
      dist.resize(spec_.nlist);
      L2SqrBatch(xi, centroids_.data(), spec_.nlist, d, dist.data());
      const uint32_t c = static_cast<uint32_t>(
          std::min_element(dist.begin(), dist.end()) - dist.begin());
      assign[i] = c;
      r.resize(d);
      const float* ci = centroids_.data() + size_t{c} * d;
      for (size_t j = 0; j < d; ++j) r[j] = xi[j] - ci[j];
      rt.resize(pd);
      rhat.resize(pd);
      pq_.Transform(r.data(), rt.data());
      uint8_t* code = codes.data() + i * m;
      pq_.EncodeTransformed(rt.data(), code);
      pq_.DecodeTransformed(code, rhat.data());
      ct.resize(pd);
      pq_.Transform(ci, ct.data());  // the centroid in the quantiser's space
      terms[i] = InnerProduct(rhat.data(), rhat.data(), pd) +
                 2 * InnerProduct(ct.data(), rhat.data(), pd);
    });
    if (bulk) {
      std::vector<uint64_t> count(spec_.nlist, 0);
      for (uint32_t a : assign) ++count[a];
      for (uint32_t l = 0; l < spec_.nlist; ++l) {
        if (lists_[l]->size.load() == 0 && count[l] > 0) {
          lists_[l] = std::make_unique<InvertedList>(m, count[l]);
        }
      }
    }
    for (size_t i = 0; i < n; ++i) {
      InvertedList& list = *lists_[assign[i]];
      const uint32_t pos = list.size.load(std::memory_order_relaxed);
      list.codes.Grow(pos + 1);
      list.ids.Grow(pos + 1);
      list.terms.Grow(pos + 1);
      std::memcpy(list.codes.Row(pos), codes.data() + i * m, m);
      *list.ids.Row(pos) = static_cast<uint32_t>(first + i);
      *list.terms.Row(pos) = terms[i];
      list.size.store(pos + 1, std::memory_order_release);
    }
    size_.store(first + n, std::memory_order_release);
    return absl::OkStatus();
  }

  absl::Status Add(const float* vectors, size_t n) override {
    if (n == 0) return absl::OkStatus();
    const std::vector<float> x = PrepareVectors(spec_.metric, vectors, n, spec_.dim);
    return AddPrepared(x.data(), n);
  }

  absl::Status Search(const float* query, size_t k, const IndexSearchParams& params,
                      std::vector<Neighbor>* out, QueryStats* stats) const override {
    out->clear();
    if (k == 0) return absl::OkStatus();
    Scratch& s = ThreadScratch();
    s.q.assign(query, query + spec_.dim);
    if (spec_.metric == Metric::kCosine) NormalizeL2(s.q.data(), spec_.dim);
    // Route: the nprobe nearest centroids.
    const size_t nprobe = std::clamp<size_t>(params.nprobe, 1, spec_.nlist);
    CentroidComputer cdc(spec_.metric, s.q.data(), centroids_.data(), spec_.dim);
    graph_.Search(cdc, std::max<size_t>(params.ef, nprobe), nullptr, s.graph, &s.probes,
                  stats);
    if (s.probes.size() > nprobe) s.probes.resize(nprobe);
    // One inner-product table for all lists.
    s.qt.resize(pq_.padded_dim());
    pq_.Transform(s.q.data(), s.qt.data());
    s.table.resize(size_t{pq_.m()} * kPqCentroids);
    pq_.IpTable(s.qt.data(), s.table.data());
    const bool l2 = UsesL2(spec_.metric);
    std::vector<Neighbor>& heap = s.heap;  // max-heap of the best k
    heap.clear();
    uint64_t scanned = 0;
    for (const Neighbor& probe : s.probes) {
      const InvertedList& list = *lists_[probe.id];
      const uint32_t n = list.size.load(std::memory_order_acquire);
      scanned += n;
      list.codes.ForEachRun(n, [&](uint64_t first, const uint8_t* codes, uint64_t count) {
        s.adc.resize(count);
        PqAdcScan(s.table.data(), codes, count, pq_.code_size(), s.adc.data());
        const uint32_t* ids = list.ids.Row(first);
        const float* terms = list.terms.Row(first);
        for (uint64_t i = 0; i < count; ++i) {
          const float dist = l2 ? probe.distance + terms[i] - 2 * s.adc[i]
                                : probe.distance - s.adc[i];
          if (heap.size() >= k && !(dist < heap.front().distance)) continue;
          if (params.filter != nullptr && params.filter->IsExcluded(ids[i])) continue;
          heap.push_back({dist, ids[i]});
          std::push_heap(heap.begin(), heap.end());
          if (heap.size() > k) {
            std::pop_heap(heap.begin(), heap.end());
            heap.pop_back();
          }
        }
      });
    }
    if (stats != nullptr) stats->distance_evals += scanned;
    out->assign(heap.begin(), heap.end());
    std::sort(out->begin(), out->end());
    return absl::OkStatus();
  }

  uint64_t ResidentBytes() const override {
    uint64_t bytes = centroids_.size() * sizeof(float) + pq_.ResidentBytes() +
                     graph_.ResidentBytes();
    const bool l2 = UsesL2(spec_.metric);
    for (const auto& list : lists_) {
      bytes += sizeof(InvertedList) + list->codes.ResidentBytes() + list->ids.ResidentBytes() +
               (l2 ? list->terms.ResidentBytes() : 0);
    }
    return bytes;
  }

  absl::Status Save(const std::string& path) const override {
    BinaryWriter w(kIndexMagic, kIndexMajorVersion, kIndexMinorVersion);
    SaveSpec(w, spec_);
    pq_.Save(w);
    w.PutVector(centroids_);
    graph_.Save(w);
    w.Put<uint64_t>(size());
    for (const auto& list : lists_) {
      const uint32_t n = list->size.load(std::memory_order_acquire);
      w.Put<uint32_t>(n);
      for (uint32_t i = 0; i < n; ++i) {
        w.PutBytes(list->codes.Row(i), pq_.code_size());
        w.Put<uint32_t>(*list->ids.Row(i));
        w.Put<float>(*list->terms.Row(i));
      }
    }
    return w.Commit(path);
  }

  absl::Status LoadBody(BinaryReader& r) {
    ZOOM_RETURN_IF_ERROR(graph_.Load(r));
    if (graph_.size() != spec_.nlist) return r.Corrupt("centroid graph size");
    uint64_t total = 0;
    ZOOM_RETURN_IF_ERROR(r.Get(&total));
    uint64_t seen = 0;
    for (auto& list : lists_) {
      uint32_t n = 0;
      ZOOM_RETURN_IF_ERROR(r.Get(&n));
      if (n > r.remaining() / (pq_.code_size() + 8)) return r.Corrupt("list size");
      if (n > 0) list = std::make_unique<InvertedList>(pq_.code_size(), n);
      list->codes.Grow(n);
      list->ids.Grow(n);
      list->terms.Grow(n);
      for (uint32_t i = 0; i < n; ++i) {
        ZOOM_RETURN_IF_ERROR(r.GetBytes(list->codes.Row(i), pq_.code_size()));
        ZOOM_RETURN_IF_ERROR(r.Get(list->ids.Row(i)));
        ZOOM_RETURN_IF_ERROR(r.Get(list->terms.Row(i)));
        if (*list->ids.Row(i) >= total) return r.Corrupt("list id out of range");
      }
      list->size.store(n, std::memory_order_release);
      seen += n;
    }
    if (seen != total) return r.Corrupt("lists do not hold every id");
    size_.store(total, std::memory_order_release);
    return absl::OkStatus();
  }

 private:
  struct Scratch {
    std::vector<float> q, qt, table, adc;
    std::vector<Neighbor> probes, heap;
    HnswScratch graph;
  };
  static Scratch& ThreadScratch() {
    thread_local Scratch s;
    return s;
  }

  IndexSpec spec_;  // spec_.nlist is the actual number of clusters
  std::vector<float> centroids_;    // nlist * dim (original space)
  ProductQuantizer pq_;
  HnswGraph graph_;
  std::vector<std::unique_ptr<InvertedList>> lists_;
  std::atomic<uint64_t> size_{0};
};

std::vector<float> Sample(const float* x, size_t n, size_t d, size_t max, uint64_t seed) {
  std::vector<size_t> pick(n);
  std::iota(pick.begin(), pick.end(), 0);
  if (max < n) {
    std::mt19937_64 rng(seed);
    std::shuffle(pick.begin(), pick.end(), rng);
    pick.resize(max);
  }
  std::vector<float> out(pick.size() * d);
  for (size_t i = 0; i < pick.size(); ++i) {
    std::memcpy(out.data() + i * d, x + pick[i] * d, d * sizeof(float));
  }
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<VectorIndex>> BuildIvfHnswPq(const IndexSpec& in_spec,
                                                            const float* x, size_t n) {
  IndexSpec spec = in_spec;
  if (spec.nlist == 0) spec.nlist = AutoNlist(n);
  if (n < std::max<size_t>(spec.nlist, kPqCentroids)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ivf_hnsw_pq needs at least max(nlist, 256) = ",
        std::max<size_t>(spec.nlist, kPqCentroids), " vectors to train, got ", n));
  }
  const size_t d = spec.dim;
  const std::vector<float> prepared = PrepareVectors(spec.metric, x, n, d);
  std::vector<float> centroids;
  try {
    const std::vector<float> sample =
        Sample(prepared.data(), n, d, std::max<size_t>(spec.max_kmeans_points, spec.nlist),
               spec.pq.seed);
    faiss::ClusteringParameters cp;
    cp.niter = 20;
    cp.seed = static_cast<int>(spec.pq.seed);
    cp.spherical = spec.metric == Metric::kCosine;
    cp.max_points_per_centroid = 1 << 30;  // we sampled already
    cp.min_points_per_centroid = 1;
    faiss::Clustering clus(static_cast<int>(d), static_cast<int>(spec.nlist), cp);
    faiss::IndexFlatL2 assigner(static_cast<faiss::Index::idx_t>(d));
    clus.train(static_cast<faiss::Index::idx_t>(sample.size() / d), sample.data(), assigner);
    centroids = clus.centroids;
  } catch (const faiss::FaissException& e) {
    return absl::InternalError(absl::StrCat("FAISS k-means failed: ", e.what()));
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("out of memory during k-means");
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("k-means failed: ", e.what()));
  }
  if (centroids.size() != spec.nlist * d) {
    return absl::InternalError("k-means returned an unexpected number of centroids");
  }
  // Residuals of a sample train the PQ.
  const std::vector<float> sample = Sample(prepared.data(), n, d, spec.pq.max_train_points,
                                           spec.pq.seed + 1);
  const size_t ns = sample.size() / d;
  std::vector<float> residuals(sample.size());
  ParallelFor(ns, spec.build_threads, [&](size_t i, int) {
    thread_local std::vector<float> dist;
    dist.resize(spec.nlist);
    const float* xi = sample.data() + i * d;
    L2SqrBatch(xi, centroids.data(), spec.nlist, d, dist.data());
    const size_t c = std::min_element(dist.begin(), dist.end()) - dist.begin();
    for (size_t j = 0; j < d; ++j) residuals[i * d + j] = xi[j] - centroids[c * d + j];
  });
  ZOOM_ASSIGN_OR_RETURN(ProductQuantizer pq,
                        ProductQuantizer::Train(residuals.data(), ns, spec.dim, spec.pq));
  auto index = std::make_unique<IvfHnswPqIndex>(spec, std::move(centroids), std::move(pq));
  index->BuildGraph();
  ZOOM_RETURN_IF_ERROR(index->AddPrepared(prepared.data(), n, /*bulk=*/true));
  return std::unique_ptr<VectorIndex>(std::move(index));
}

absl::StatusOr<std::unique_ptr<VectorIndex>> LoadIvfHnswPq(const IndexSpec& spec,
                                                           BinaryReader& r) {
  ProductQuantizer pq;
  ZOOM_RETURN_IF_ERROR(pq.Load(r));
  std::vector<float> centroids;
  ZOOM_RETURN_IF_ERROR(r.GetVector(&centroids));
  if (pq.dim() != spec.dim || pq.m() != spec.pq.m || spec.nlist == 0 ||
      centroids.size() != size_t{spec.nlist} * spec.dim) {
    return r.Corrupt("quantizer or centroids do not match the spec");
  }
  auto index = std::make_unique<IvfHnswPqIndex>(spec, std::move(centroids), std::move(pq));
  ZOOM_RETURN_IF_ERROR(index->LoadBody(r));
  return std::unique_ptr<VectorIndex>(std::move(index));
}

}  // namespace zoom::index::internal
