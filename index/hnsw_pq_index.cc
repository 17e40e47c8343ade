// hnsw_pq: an HNSW graph over all vectors, built with full-precision
// distances, searched with PQ (ADC) distances.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "index/chunked_array.h"
#include "index/index_internal.h"
#include "index/planned_search.h"

namespace zoom::index::internal {
namespace {

// Excludes what `filter` excludes and what `allow` does not hold.
class AllowFilter final : public IdFilter {
 public:
  AllowFilter(const IdBitsView& allow, const IdFilter* filter) : allow_(allow), filter_(filter) {}
  bool IsExcluded(InternalId id) const override {
    return !allow_.Contains(id) || (filter_ != nullptr && filter_->IsExcluded(id));
  }

 private:
  const IdBitsView& allow_;
  const IdFilter* filter_;
};

class HnswPqIndex final : public PlannedIndex {
 public:
  HnswPqIndex(const IndexSpec& spec, ProductQuantizer pq)
      : spec_(spec), pq_(std::move(pq)), codes_(pq_.code_size()), graph_(spec.hnsw) {}

  const IndexSpec& spec() const override { return spec_; }
  uint64_t size() const override { return size_.load(std::memory_order_acquire); }

  // Encodes and links x (n prepared vectors) as ids size()..; `oracle_x` is
  // non-null for the initial build (exact distances), else PQ distances.
  absl::Status AddPrepared(const float* x, size_t n, bool exact) {
    const uint64_t first = size();
    if (first + n > kMaxInternalIds) {
      return absl::ResourceExhaustedError("too many vectors for one index");
    }
    if (first == 0) codes_.SetFirstChunk(n);  // a bulk build: exact
    codes_.Grow(first + n);
    ParallelFor(n, spec_.build_threads, [&](size_t i, int) {
      pq_.Encode(x + i * spec_.dim, 1, codes_.Row(first + i));
    });
    if (BuildCancelled()) return BuildCancelledError();  // a build's rows left unencoded
    graph_.Grow(first + n);
    if (exact && first == 0) {
      MatrixOracle oracle(spec_.metric, x, spec_.dim);  // full vectors at hand
      std::vector<HnswScratch> scratch(spec_.build_threads);
      ParallelFor(n, spec_.build_threads, [&](size_t i, int t) {
        graph_.Insert(static_cast<InternalId>(i), oracle, scratch[t]);
      });
      if (BuildCancelled()) return BuildCancelledError();  // nodes left unlinked
    } else {
      // Incremental: the full vectors of older points are on SSD, not here,
      // so the new points are linked with PQ-reconstructed distances.
      PqOracle oracle(*this, x, first, n);
      HnswScratch scratch;
      for (size_t i = 0; i < n; ++i) {
        graph_.Insert(static_cast<InternalId>(first + i), oracle, scratch);
      }
    }
    size_.store(first + n, std::memory_order_release);
    return absl::OkStatus();
  }

  // Packs the graph's level 0 (before the index is published).
  void Compact() { graph_.Compact(); }

  absl::Status Add(const float* vectors, size_t n) override {
    if (n == 0) return absl::OkStatus();
    const std::vector<float> x = PrepareVectors(spec_.metric, vectors, n, spec_.dim);
    return AddPrepared(x.data(), n, /*exact=*/false);
  }

  absl::Status Search(const float* query, size_t k, const IndexSearchParams& params,
                      std::vector<Neighbor>* out, QueryStats* stats) const override {
    out->clear();
    if (k == 0) return absl::OkStatus();
    Scratch& s = ThreadScratch();
    const bool l2 = QueryTable(query, s);
    AdcComputer dc(s.table.data(), codes_, pq_.m(), l2);
    const size_t ef = std::max<size_t>(params.ef, k);
    if (params.allow.empty()) {
      graph_.Search(dc, ef, params.filter, s.graph, out, stats, params.hidden);
    } else if (params.allow.share < params.two_hop_share) {
      graph_.SearchTwoHop(dc, ef, params.allow, params.filter, s.graph, out, stats);
    } else {
      // Most neighbours match: the plain walk, admitting matches only.
      const AllowFilter only(params.allow, params.filter);
      graph_.Search(dc, ef, &only, s.graph, out, stats);
    }
    if (out->size() > k) out->resize(k);
    return absl::OkStatus();
  }

  absl::Status SearchIds(const float* query, size_t k, const IdBitsView& ids,
                         const IndexSearchParams& params, std::vector<Neighbor>* out,
                         QueryStats* stats) const override {
    out->clear();
    if (k == 0 || ids.empty()) return absl::OkStatus();
    Scratch& s = ThreadScratch();
    const float sign = QueryTable(query, s) ? 1.0f : -1.0f;
    BestK best(k, &s.heap);
    // In batches whose codes are prefetched before they are scored.
    constexpr size_t kBatch = 16;
    InternalId batch[kBatch];
    size_t nb = 0;
    uint64_t scored = 0;
    auto flush = [&] {
      for (size_t i = 0; i < nb; ++i) {
        best.Offer(sign * PqAdc(s.table.data(), codes_.Row(batch[i]), pq_.m()), batch[i]);
      }
      scored += nb;
      nb = 0;
    };
    ForEachAllowedId(ids, size(), params.filter, [&](InternalId id) {
      __builtin_prefetch(codes_.Row(id));
      batch[nb++] = id;
      if (nb == kBatch) flush();
    });
    flush();
    if (stats != nullptr) stats->distance_evals += scored;
    best.Take(out);
    return absl::OkStatus();
  }

  uint64_t ResidentBytes() const override {
    return codes_.ResidentBytes() + graph_.ResidentBytes() + pq_.ResidentBytes();
  }

  absl::Status Save(const std::string& path, FileSystem* fs = nullptr) const override {
    BinaryWriter w = IndexFileWriter(spec_, path, fs);
    SaveSpec(w, spec_);
    pq_.Save(w);
    const uint64_t n = size();
    w.Put<uint64_t>(n);
    for (uint64_t i = 0; i < n; ++i) w.PutBytes(codes_.Row(i), pq_.code_size());
    graph_.Save(w);
    SaveSpecTail(w, spec_);
    return w.Commit(path, fs);
  }

  absl::Status LoadBody(BinaryReader& r, const LoadIndexOptions& options) {
    uint64_t n = 0;
    ZOOM_RETURN_IF_ERROR(r.Get(&n));
    if (n > r.remaining() / std::max<size_t>(1, pq_.code_size())) {
      return r.Corrupt("code count");
    }
    codes_.SetFirstChunk(n);
    codes_.Grow(n);
    for (uint64_t i = 0; i < n; ++i) {
      ZOOM_RETURN_IF_ERROR(r.GetBytes(codes_.Row(i), pq_.code_size()));
    }
    ZOOM_RETURN_IF_ERROR(graph_.Load(r));
    if (graph_.size() != n) return r.Corrupt("graph size differs from codes");
    ZOOM_RETURN_IF_ERROR(LoadSpecTail(r, &spec_));
    if (options.compact_links.has_value())
      spec_.hnsw.compact_links = *options.compact_links;
    if (spec_.hnsw.compact_links) graph_.Compact();
    size_.store(n, std::memory_order_release);
    return absl::OkStatus();
  }


 protected:
  // The planned search's hooks (planned_search.h): hnsw_pq widens ef.
  double FilteredPreviewCodes(double k, const FilterShape& f, const IndexSearchParams& params,
                              const FilterTuning& tuning) const override {
    // A walk with list size ef scores about 2 ef M nodes, and 1 / share
    // times as many to admit ef matches (the two-hop walk's ef is 2 K');
    // measured on MNIST 10K: ~30,000 code distances at 6.9%, ~150,000 at
    // 0.95%, more than the points (it revisits them).
    const double two_hop = f.share < tuning.two_hop_share ? 2.0 : 1.0;
    const double ef = std::max<double>(params.ef, two_hop * k);
    return std::min(4 * f.n, 2 * ef * spec_.hnsw.M / std::max(f.share, 1e-6));
  }
  void PostFilterKnobs(size_t list, const SearchContext& ctx,
                       IndexSearchParams* p) const override {
    const uint32_t capped = static_cast<uint32_t>(std::min<size_t>(list, UINT32_MAX));
    p->ef = std::max<uint32_t>(p->ef, std::min<uint32_t>(capped, std::max(p->ef, ctx.max_ef)));
  }
  void FilteredKnobs(size_t k, const FilterShape& f, const IndexSearchParams& base,
                     const SearchContext& ctx, IndexSearchParams* p) const override {
    // The two-hop walk (index share below two_hop_share) scores matching
    // nodes only, a small part of what the plain walk scores to fill the
    // same ef (about ef / share nodes), and ranks them less well at equal
    // ef: it gets twice the candidate list.
    const double twice = f.index_share < ctx.tuning.two_hop_share ? 2.0 : 1.0;
    p->ef = std::max<uint32_t>(p->ef, static_cast<uint32_t>(twice * static_cast<double>(k)));
    p->ef = std::min(p->ef, std::max(base.ef, ctx.max_ef));
  }
  bool WidenFiltered(size_t /*found*/, size_t /*need*/, const IndexSearchParams& base,
                     const SearchContext& ctx, IndexSearchParams* p) const override {
    const uint32_t max_ef = std::max(base.ef, ctx.max_ef);
    if (p->ef >= max_ef) return false;
    p->ef = static_cast<uint32_t>(std::min<uint64_t>(uint64_t{p->ef} * 2, max_ef));
    return true;
  }
  bool WidenPlain(const IndexSearchParams& base, const SearchContext& ctx,
                  IndexSearchParams* p) const override {
    const uint32_t max_ef = std::max(base.ef, ctx.max_ef);
    if (p->ef >= max_ef) return false;
    p->ef = static_cast<uint32_t>(std::min<uint64_t>(max_ef, uint64_t{p->ef} * 8));
    return true;
  }

 private:
  struct Scratch {
    std::vector<float> q, qt, table;
    std::vector<Neighbor> heap;
    HnswScratch graph;
  };
  // The query's ADC table into s.table (the query normalised for cosine,
  // then rotated); true when it is an L2 table, false for inner products.
  bool QueryTable(const float* query, Scratch& s) const {
    s.q.assign(query, query + spec_.dim);
    if (spec_.metric == Metric::kCosine) NormalizeL2(s.q.data(), spec_.dim);
    s.qt.resize(pq_.padded_dim());
    pq_.Transform(s.q.data(), s.qt.data());
    s.table.resize(size_t{pq_.m()} * kPqCentroids);
    const bool l2 = UsesL2(spec_.metric);
    if (l2) {
      pq_.L2Table(s.qt.data(), s.table.data());
    } else {
      pq_.IpTable(s.qt.data(), s.table.data());
    }
    return l2;
  }
  static Scratch& ThreadScratch() {
    thread_local Scratch s;
    return s;
  }

  // PQ distances from one query to stored codes.
  class AdcComputer final : public DistanceComputer {
   public:
    AdcComputer(const float* table, const ChunkedArray<uint8_t>& codes, uint32_t m,
                bool l2)
        : table_(table), codes_(codes), m_(m), sign_(l2 ? 1.0f : -1.0f) {}
    void Distances(const InternalId* ids, size_t n, float* out) override {
      for (size_t i = 0; i + 1 < n; ++i) __builtin_prefetch(codes_.Row(ids[i + 1]));
      for (size_t i = 0; i < n; ++i) {
        out[i] = sign_ * PqAdc(table_, codes_.Row(ids[i]), m_);
      }
    }

   private:
    const float* table_;
    const ChunkedArray<uint8_t>& codes_;
    const uint32_t m_;
    const float sign_;
  };

  // Distances for incremental inserts: the new points' prepared vectors
  // (exact) against PQ reconstructions of the older ones.
  class PqOracle final : public BuildOracle {
   public:
    PqOracle(const HnswPqIndex& index, const float* x, uint64_t first, size_t n)
        : index_(index), first_(first), n_(n),
          xt_(size_t(n) * index.pq_.padded_dim()) {
      for (size_t i = 0; i < n; ++i) {
        index.pq_.Transform(x + i * index.spec_.dim, xt_.data() + i * index.pq_.padded_dim());
      }
    }
    float Between(InternalId a, InternalId b) const override {
      const size_t pd = index_.pq_.padded_dim();
      thread_local std::vector<float> va, vb;
      va.resize(pd);
      vb.resize(pd);
      const float* pa = Vector(a, va.data());
      const float* pb = Vector(b, vb.data());
      return UsesL2(index_.spec_.metric) ? L2Sqr(pa, pb, pd) : -InnerProduct(pa, pb, pd);
    }

   private:
    const float* Vector(InternalId id, float* buf) const {
      if (id >= first_ && id < first_ + n_) {
        return xt_.data() + (id - first_) * index_.pq_.padded_dim();
      }
      index_.pq_.DecodeTransformed(index_.codes_.Row(id), buf);
      return buf;
    }
    const HnswPqIndex& index_;
    const uint64_t first_;
    const size_t n_;
    std::vector<float> xt_;
  };

  IndexSpec spec_;
  ProductQuantizer pq_;
  ChunkedArray<uint8_t> codes_;
  HnswGraph graph_;
  std::atomic<uint64_t> size_{0};
};

}  // namespace

absl::StatusOr<std::unique_ptr<VectorIndex>> BuildHnswPq(const IndexSpec& spec,
                                                         const float* x, size_t n,
                                                         absl::Span<const uint32_t> train_rows) {
  std::vector<float> prepared = PrepareVectors(spec.metric, x, n, spec.dim);
  ZeroUntrainedBadRows(spec.metric, prepared, n, spec.dim, train_rows);
  ZOOM_ASSIGN_OR_RETURN(ProductQuantizer pq, ProductQuantizer::Train(prepared.data(), n, spec.dim,
                                                                     spec.pq, train_rows));
  auto index = std::make_unique<HnswPqIndex>(spec, std::move(pq));
  ZOOM_RETURN_IF_ERROR(index->AddPrepared(prepared.data(), n, /*exact=*/true));
  if (spec.hnsw.compact_links) index->Compact();
  return std::unique_ptr<VectorIndex>(std::move(index));
}

absl::StatusOr<std::unique_ptr<VectorIndex>> LoadHnswPq(
    const IndexSpec& spec, BinaryReader& r, const LoadIndexOptions& options) {
  ProductQuantizer pq;
  ZOOM_RETURN_IF_ERROR(pq.Load(r));
  if (pq.dim() != spec.dim || pq.m() != spec.pq.m || pq.nbits() != 8) {
    return r.Corrupt("quantizer does not match the spec");
  }
  auto index = std::make_unique<HnswPqIndex>(spec, std::move(pq));
  ZOOM_RETURN_IF_ERROR(index->LoadBody(r, options));
  return std::unique_ptr<VectorIndex>(std::move(index));
}

}  // namespace zoom::index::internal
