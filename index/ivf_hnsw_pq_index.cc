// ivf_hnsw_pq, the Zoom paper's preview: k-means clusters routed by an HNSW
// graph over the centroids, PQ codes of the residuals in per-cluster lists.
//
// With 4-bit PQ (pq.nbits = 4) the lists hold codes in blocks of 32 and the
// scan is the shuffle-based fast scan of distance_kernels.h over a byte
// quantisation of the inner-product table; the candidates it keeps are
// re-scored with the float table, so only the choice of the K' candidates,
// not their preview distances, sees the byte rounding.
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
#include <faiss/impl/AuxIndexStructures.h>
#include <faiss/impl/FaissException.h>
#include <cblas.h>
#include <sys/mman.h>

#include <algorithm>
#include <bit>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "common/vector_limits.h"
#include "index/chunked_array.h"
#include "index/index_internal.h"

namespace zoom::index {
namespace {
// SetPlacePositionBitsForTesting's cap (32: none).
std::atomic<int> g_place_position_bits{32};
}  // namespace

void SetPlacePositionBitsForTesting(int bits) {
  g_place_position_bits.store(bits <= 0 || bits > 32 ? 32 : bits, std::memory_order_relaxed);
}
}  // namespace zoom::index

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

// Routing scans every centroid instead of searching the graph when nlist <=
// this * ef: a graph search with list size ef evaluates several times ef
// centroids, scattered; a contiguous pass over all of them is faster up to
// about this ratio and finds the true nearest nprobe (GloVe 200K, nlist
// 1024, nprobe 64, ef 128, 4-bit PQ, 2 threads: preview p50 385 -> 300 us,
// recall@10 with K' 20 0.956 -> 0.963).
constexpr size_t kExactRoutingFactor = 16;

// First-chunk rows of a list that grows by Add (not sized by a bulk load).
constexpr uint64_t kListBaseRows = 16;

uint32_t AutoNlist(size_t n) {
  // About 4 sqrt(n), a power of two, with >= 39 points per cluster.
  uint32_t nlist = 16;
  while (nlist * 2 <= 4 * std::sqrt(double(n)) && nlist * 2 * 39 <= n) nlist *= 2;
  return nlist;
}

// One cluster's list. Rows never move, so a list grows under readers.
// 8-bit codes: one row of m bytes per point. 4-bit codes: one row per block
// of kPq4BlockSize points (Pq4BlockBytes(m) bytes), and ids / terms get 32x
// the block array's base rows so that a run of blocks is a run of points
// (ChunkedArray splits both at the same places). The writer fills a
// block's slots while readers scan the published ones; the slots past
// `size` are read and ignored (single bytes, written before the release
// of `size` that publishes them).
struct InvertedList {
  // `rows` (points) sizes the first chunk (exact for a bulk build or a load).
  InvertedList(size_t m, bool pq4, uint64_t rows)
      : codes(pq4 ? Pq4BlockBytes(m) : m, pq4 ? BlockRows(rows) : rows),
        ids(1, pq4 ? BlockRows(rows) * kPq4BlockSize : rows),
        terms(1, pq4 ? BlockRows(rows) * kPq4BlockSize : rows),
        factors(1, pq4 ? BlockRows(rows) * kPq4BlockSize : rows) {}
  static uint64_t BlockRows(uint64_t rows) {
    return std::max<uint64_t>(1, (rows + kPq4BlockSize - 1) / kPq4BlockSize);
  }
  std::atomic<uint32_t> size{0};
  ChunkedArray<uint8_t> codes;
  ChunkedArray<uint32_t> ids;
  ChunkedArray<float> terms;  // |r^|^2 + 2<c, r^> (L2 only; rabitq: |r|^2 + 2<c, r^>)
  ChunkedArray<float> factors;  // rabitq: each code's factor (product_quantizer.h)
};

class IvfHnswPqIndex final : public VectorIndex {
 public:
  IvfHnswPqIndex(const IndexSpec& spec, std::vector<float> centroids, ProductQuantizer pq)
      : spec_(spec),
        pq4_(pq.nbits() == 4),
        rabitq_(pq.code() == CodeKind::kRabitq),
        centroids_(std::move(centroids)),
        pq_(std::move(pq)),
        graph_(spec.hnsw) {
    const uint32_t nlist = spec_.nlist;
    centroid_norms_.resize(nlist);
    for (uint32_t c = 0; c < nlist; ++c) {
      const float* cc = centroids_.data() + size_t{c} * spec_.dim;
      centroid_norms_[c] = InnerProduct(cc, cc, spec_.dim);
    }
    lists_.reserve(nlist);
    for (uint32_t i = 0; i < nlist; ++i) {
      lists_.push_back(NewList(kListBaseRows));
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
  // Each row's list, code and |r^|^2 + 2<c, r^> term, for rows x[0, n)
  // (prepared), into assign[0, n), codes[0, n * code_size), terms[0, n);
  // for the rabitq code the term is |r|^2 + 2<c, r^> (the exact norm: the
  // estimate then errs by the inner product's error only) and factors[0, n)
  // gets each code's factor (may be null otherwise).
  // `errors`, when not null, gets each row's ||x - (c + r^)||^2.
  void Encode(const float* x, size_t n, uint32_t* assign, uint8_t* codes, float* terms,
              float* factors, float* errors = nullptr) const {
    const size_t d = spec_.dim, pd = pq_.padded_dim(), m = pq_.code_size();
    Assign(x, n, assign);
    ParallelFor(n, spec_.build_threads, [&](size_t i, int) {
      thread_local std::vector<float> r, rt, rhat, ct;
      const float* xi = x + i * d;
      const uint32_t c = assign[i];
      r.resize(d);
      const float* ci = centroids_.data() + size_t{c} * d;
      for (size_t j = 0; j < d; ++j) r[j] = xi[j] - ci[j];
      rt.resize(pd);
      rhat.resize(pd);
      pq_.Transform(r.data(), rt.data());
      uint8_t* code = codes + i * m;
      const float factor = pq_.EncodeTransformed(rt.data(), code);
      pq_.DecodeTransformed(code, rhat.data());
      if (rabitq_) {
        for (size_t j = 0; j < pd; ++j) rhat[j] *= factor;
        factors[i] = factor;
      }
      if (errors != nullptr) {
        // The transform is a rotation (and zero padding): the error in its
        // space is the error in the original one.
        float e = 0;
        for (size_t j = 0; j < pd; ++j) e += (rt[j] - rhat[j]) * (rt[j] - rhat[j]);
        errors[i] = e;
      }
      ct.resize(pd);
      pq_.Transform(ci, ct.data());  // the centroid in the quantiser's space
      terms[i] = (rabitq_ ? InnerProduct(rt.data(), rt.data(), pd)
                          : InnerProduct(rhat.data(), rhat.data(), pd)) +
                 2 * InnerProduct(ct.data(), rhat.data(), pd);
    });
  }

  // An empty index with this one's spec (but `build_threads`), centroids
  // and quantiser; its centroid graph built anew.
  std::unique_ptr<IvfHnswPqIndex> WithSameQuantizer(int build_threads) const {
    IndexSpec spec = spec_;
    spec.build_threads = build_threads;
    auto index = std::make_unique<IvfHnswPqIndex>(spec, centroids_, pq_);
    index->BuildGraph();
    return index;
  }

  // Each row's nearest centroid (L2), rows x[0, n) (prepared), into
  // assign[0, n): ||c||^2 - 2 <x, c> for a block of rows at a time by one
  // sgemm (BLAS single-threaded, the blocks spread over build_threads; a
  // block's products are at most 8 MiB whatever nlist). A row equally near
  // two centroids may get either.
  void Assign(const float* x, size_t n, uint32_t* assign) const {
    const size_t d = spec_.dim, nlist = spec_.nlist;
    const size_t block_rows = std::clamp<size_t>((size_t{2} << 20) / nlist, 1, 128);
    BlasSingleThreadScope single_thread;
    ParallelFor((n + block_rows - 1) / block_rows, spec_.build_threads, [&](size_t b, int) {
      thread_local std::vector<float> ip;
      const size_t first = b * block_rows, rows = std::min(block_rows, n - first);
      ip.resize(rows * nlist);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows),
                  static_cast<int>(nlist), static_cast<int>(d), 1.0f, x + first * d,
                  static_cast<int>(d), centroids_.data(), static_cast<int>(d), 0.0f, ip.data(),
                  static_cast<int>(nlist));
      for (size_t i = 0; i < rows; ++i) {
        const float* row = ip.data() + i * nlist;
        uint32_t best = 0;
        float best_d = centroid_norms_[0] - 2 * row[0];
        for (uint32_t c = 1; c < nlist; ++c) {
          const float dc = centroid_norms_[c] - 2 * row[c];
          if (dc < best_d) {
            best_d = dc;
            best = c;
          }
        }
        assign[first + i] = best;
      }
    });
  }

  size_t code_size() const { return pq_.code_size(); }

  absl::Status AddPrepared(const float* x, size_t n, bool bulk = false) {
    if (size() + n > kMaxInternalIds) {
      return absl::ResourceExhaustedError("too many vectors for one index");
    }
    const size_t m = pq_.code_size();
    std::vector<uint32_t> assign(n);
    std::vector<uint8_t> codes(n * m);
    std::vector<float> terms(n);
    std::vector<float> factors(rabitq_ ? n : 0);
    std::vector<float> errors(bulk ? 0 : n);
    Encode(x, n, assign.data(), codes.data(), terms.data(), factors.data(),
           bulk ? nullptr : errors.data());
    if (BuildCancelled()) return BuildCancelledError();  // rows left unencoded
    ZOOM_RETURN_IF_ERROR(
        AddEncoded(assign.data(), codes.data(), terms.data(), factors.data(), n, bulk));
    for (float e : errors) CountCodeError(e);
    return absl::OkStatus();
  }

  CodeErrorStats CodeError() const override {
    absl::MutexLock l(&error_mu_);
    return error_stats_;
  }

  // Before n rows with the lists `assign` are appended (in one AddEncoded
  // or several): sizes every empty list that receives rows exactly, and
  // list_of_ too when the index is empty. The build only, before the index
  // is shared.
  void ReserveExactly(const uint32_t* assign, size_t n) {
    if (size() == 0) list_of_.SetFirstChunk(std::max<size_t>(1, n));
    std::vector<uint64_t> count(spec_.nlist, 0);
    for (size_t i = 0; i < n; ++i) ++count[assign[i]];
    for (uint32_t l = 0; l < spec_.nlist; ++l) {
      if (lists_[l]->size.load() == 0 && count[l] > 0) lists_[l] = NewList(count[l]);
    }
  }

  // Appends n encoded rows (Encode's output) as ids size() ...; `bulk`
  // (into an empty index) sizes every list exactly first (ReserveExactly).
  absl::Status AddEncoded(const uint32_t* assign, const uint8_t* codes, const float* terms,
                          const float* factors, size_t n, bool bulk) {
    const uint64_t first = size();
    if (first + n > kMaxInternalIds) {
      return absl::ResourceExhaustedError("too many vectors for one index");
    }
    const size_t m = pq_.code_size();
    if (bulk) ReserveExactly(assign, n);
    list_of_.Grow(first + n);
    for (size_t i = 0; i < n; ++i) {
      InvertedList& list = *lists_[assign[i]];
      const uint32_t pos = list.size.load(std::memory_order_relaxed);
      PutCode(list, pos, codes + i * m);
      list.ids.Grow(pos + 1);
      list.terms.Grow(pos + 1);
      *list.ids.Row(pos) = static_cast<uint32_t>(first + i);
      *list.terms.Row(pos) = terms[i];
      if (rabitq_) {
        list.factors.Grow(pos + 1);
        *list.factors.Row(pos) = factors[i];
      }
      *list_of_.Row(first + i) = Place(assign[i], pos);
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
    QueryTable(query, s);
    // Route: the nprobe nearest centroids.
    const size_t nprobe = std::clamp<size_t>(params.nprobe, 1, spec_.nlist);
    CentroidComputer cdc(spec_.metric, s.q.data(), centroids_.data(), spec_.dim);
    const size_t ef = std::max<size_t>(params.ef, nprobe);
    using Routing = IndexSearchParams::Routing;
    const bool exact = params.routing == Routing::kExact ||
                       (params.routing == Routing::kAuto &&
                        spec_.nlist <= kExactRoutingFactor * ef);
    if (exact) {
      // The graph would evaluate a good part of the centroids anyway: all of
      // them, in one contiguous pass, is both faster and exact.
      if (s.all.size() != spec_.nlist) {
        s.all.resize(spec_.nlist);
        std::iota(s.all.begin(), s.all.end(), InternalId{0});
      }
      s.dist.resize(spec_.nlist);
      cdc.Distances(s.all.data(), spec_.nlist, s.dist.data());
      s.probes.resize(spec_.nlist);
      for (uint32_t c = 0; c < spec_.nlist; ++c) s.probes[c] = {s.dist[c], c};
      std::partial_sort(s.probes.begin(), s.probes.begin() + nprobe,
                        s.probes.end());
      if (stats != nullptr) stats->distance_evals += spec_.nlist;
    } else {
      graph_.Search(cdc, ef, nullptr, s.graph, &s.probes, stats);
    }
    if (s.probes.size() > nprobe) s.probes.resize(nprobe);
    if (params.first_probe > 0) {
      s.probes.erase(s.probes.begin(),
                     s.probes.begin() + std::min<size_t>(params.first_probe, s.probes.size()));
    }
    if (pq4_) {
      FastScan(k, params, s, stats);
      out->assign(s.heap.begin(), s.heap.end());
      std::sort(out->begin(), out->end());
      return absl::OkStatus();
    }
    const bool l2 = UsesL2(spec_.metric);
    std::vector<Neighbor>& heap = s.heap;  // max-heap of the best k
    heap.clear();
    uint64_t scored = 0, tested = 0;
    for (const Neighbor& probe : s.probes) {
      const InvertedList& list = *lists_[probe.id];
      const uint32_t n = list.size.load(std::memory_order_acquire);
      list.codes.ForEachRun(n, [&](uint64_t first, const uint8_t* codes, uint64_t count) {
        const uint32_t* ids = list.ids.Row(first);
        const float* terms = list.terms.Row(first);
        auto offer = [&](uint64_t i, float adc) {
          const float dist = l2 ? probe.distance + terms[i] - 2 * adc : probe.distance - adc;
          if (heap.size() >= k && !(dist < heap.front().distance)) return;
          if (params.filter != nullptr && params.filter->IsExcluded(ids[i])) return;
          heap.push_back({dist, ids[i]});
          std::push_heap(heap.begin(), heap.end());
          if (heap.size() > k) {
            std::pop_heap(heap.begin(), heap.end());
            heap.pop_back();
          }
        };
        if (!params.allow.empty()) {
          // The membership test first: only the matching codes are scored
          // (gathered when they are few, else the run's contiguous scan).
          // (Branch-free: a broad filter's random bits would mispredict.)
          s.sel.resize(count);
          size_t matched = 0;
          for (uint64_t i = 0; i < count; ++i) {
            s.sel[matched] = static_cast<uint32_t>(i);
            matched += params.allow.Contains(ids[i]) ? 1 : 0;
          }
          s.sel.resize(matched);
          tested += count;
          if (s.sel.empty()) return;
          s.adc.resize(count);
          if (s.sel.size() * 4 < count) {
            PqAdcGather(s.table.data(), codes, s.sel.data(), s.sel.size(), pq_.code_size(),
                        s.adc.data());
            for (size_t j = 0; j < s.sel.size(); ++j) offer(s.sel[j], s.adc[j]);
          } else {
            PqAdcScan(s.table.data(), codes, count, pq_.code_size(), s.adc.data());
            for (uint32_t i : s.sel) offer(i, s.adc[i]);
          }
          scored += s.sel.size();
          return;
        }
        s.adc.resize(count);
        PqAdcScan(s.table.data(), codes, count, pq_.code_size(), s.adc.data());
        scored += count;
        for (uint64_t i = 0; i < count; ++i) offer(i, s.adc[i]);
      });
    }
    if (stats != nullptr) {
      stats->distance_evals += scored;
      if (!params.allow.empty()) {
        stats->filter_tested += tested;
        stats->filter_matched += scored;
      }
    }
    out->assign(heap.begin(), heap.end());
    std::sort(out->begin(), out->end());
    return absl::OkStatus();
  }

  absl::Status SearchIds(const float* query, size_t k, const IdBitsView& ids,
                         const IndexSearchParams& params, std::vector<Neighbor>* out,
                         QueryStats* stats) const override {
    out->clear();
    if (k == 0 || ids.empty()) return absl::OkStatus();
    Scratch& s = ThreadScratch();
    QueryTable(query, s);
    // The allowed ids and their lists, grouped by list (each list's header
    // and centroid term once, its codes in address order).
    std::vector<Scratch::Item>& items = s.items;
    items.clear();
    ForEachAllowedId(ids, size(), params.filter,
                     [&](InternalId id) { items.push_back({id, 0, 0}); });
    const size_t n = items.size();
    // Each one's place (list and position): list_of_ is read in id order,
    // a line apart or more when matches are sparse, so it is prefetched.
    const uint32_t pos_bits = PosBits();
    const uint32_t unknown = UnknownPos();
    constexpr size_t kPlaceAhead = 16;
    for (size_t i = 0; i < std::min(n, kPlaceAhead); ++i) {
      __builtin_prefetch(list_of_.Row(items[i].id));
    }
    for (size_t i = 0; i < n; ++i) {
      if (i + kPlaceAhead < n) __builtin_prefetch(list_of_.Row(items[i + kPlaceAhead].id));
      const uint32_t place = *list_of_.Row(items[i].id);
      items[i].list = static_cast<uint32_t>(uint64_t{place} >> pos_bits);
      items[i].pos = place & unknown;
    }
    const uint32_t nlist = spec_.nlist;
    if (n * 8 < nlist) {
      std::sort(items.begin(), items.end(), [](const Scratch::Item& a, const Scratch::Item& b) {
        return a.list != b.list ? a.list < b.list : a.id < b.id;
      });
    } else {
      // A counting sort by list (ids ascending within one: positions too).
      s.list_start.assign(nlist + 1, 0);
      for (const Scratch::Item& it : items) ++s.list_start[it.list + 1];
      for (uint32_t l = 0; l < nlist; ++l) s.list_start[l + 1] += s.list_start[l];
      s.sorted.resize(n);
      for (const Scratch::Item& it : items) s.sorted[s.list_start[it.list]++] = it;
      items.swap(s.sorted);
    }
    // A position too large for the place's bits (a list longer than
    // 2^pos_bits) is searched for in the list's ascending ids, from the
    // previous match's position on.
    for (size_t i = 0; i < n; ++i) {
      if (items[i].pos != unknown) continue;
      const InvertedList& list = *lists_[items[i].list];
      const uint32_t size = list.size.load(std::memory_order_acquire);
      const bool after = i > 0 && items[i - 1].list == items[i].list && items[i - 1].pos < size;
      const uint32_t from = after ? items[i - 1].pos + 1 : 0;
      const uint32_t pos = FindPosition(list, size, from, items[i].id);
      items[i].pos = pos == size ? ~uint32_t{0} : pos;  // not there: skipped below
    }
    const bool l2 = UsesL2(spec_.metric);
    const size_t m = pq_.code_size(), ksub = pq_.ksub();
    s.code.resize(m);
    BestK best(k, &s.heap);
    uint64_t centroids = 0;
    uint32_t current = ~uint32_t{0};
    float term = 0;
    // Codes and terms prefetched kAhead items before they are scored.
    constexpr size_t kAhead = 8;
    auto prefetch = [&](const Scratch::Item& it) {
      const InvertedList& list = *lists_[it.list];
      if (it.pos >= list.size.load(std::memory_order_relaxed)) return;
      __builtin_prefetch(pq4_ ? list.codes.Row(it.pos / kPq4BlockSize) : list.codes.Row(it.pos));
      __builtin_prefetch(list.ids.Row(it.pos));
      if (l2) __builtin_prefetch(list.terms.Row(it.pos));
      if (rabitq_) __builtin_prefetch(list.factors.Row(it.pos));
    };
    for (size_t i = 0; i < std::min(n, kAhead); ++i) prefetch(items[i]);
    for (size_t i = 0; i < n; ++i) {
      if (i + kAhead < n) prefetch(items[i + kAhead]);
      const Scratch::Item& it = items[i];
      const InvertedList& list = *lists_[it.list];
      if (it.pos >= list.size.load(std::memory_order_relaxed) || *list.ids.Row(it.pos) != it.id) {
        continue;  // not in its list (cannot happen: the lists hold every id)
      }
      if (it.list != current) {
        current = it.list;
        term = MetricDistance(spec_.metric, s.q.data(),
                              centroids_.data() + size_t{it.list} * spec_.dim, spec_.dim);
        ++centroids;
      }
      float adc;
      if (!pq4_) {
        adc = PqAdc(s.table.data(), list.codes.Row(it.pos), m);
      } else {
        GetCode(list, it.pos, s.code.data());
        adc = 0;
        for (size_t j = 0; j < m; ++j) adc += s.table[j * ksub + s.code[j]];
        if (rabitq_) adc *= *list.factors.Row(it.pos);
      }
      best.Offer(l2 ? term + *list.terms.Row(it.pos) - 2 * adc : term - adc, it.id);
    }
    if (stats != nullptr) stats->distance_evals += n + centroids;
    best.Take(out);
    return absl::OkStatus();
  }

  uint64_t ResidentBytes() const override {
    uint64_t bytes = (centroids_.size() + centroid_norms_.size()) * sizeof(float) +
                     pq_.ResidentBytes() +
                     graph_.ResidentBytes() + list_of_.ResidentBytes();
    const bool l2 = UsesL2(spec_.metric);
    for (const auto& list : lists_) {
      bytes += sizeof(InvertedList) + list->codes.ResidentBytes() + list->ids.ResidentBytes() +
               (l2 ? list->terms.ResidentBytes() : 0) +
               (rabitq_ ? list->factors.ResidentBytes() : 0);
    }
    return bytes;
  }

  absl::Status Save(const std::string& path, FileSystem* fs = nullptr) const override {
    BinaryWriter w = IndexFileWriter(spec_, path, fs);
    SaveSpec(w, spec_);
    pq_.Save(w);
    w.PutVector(centroids_);
    graph_.Save(w);
    w.Put<uint64_t>(size());
    for (const auto& list : lists_) {
      const uint32_t n = list->size.load(std::memory_order_acquire);
      w.Put<uint32_t>(n);
      std::vector<uint8_t> code(pq_.code_size());
      for (uint32_t i = 0; i < n; ++i) {
        GetCode(*list, i, code.data());
        w.PutBytes(code.data(), code.size());
        w.Put<uint32_t>(*list->ids.Row(i));
        w.Put<float>(*list->terms.Row(i));
        if (rabitq_) w.Put<float>(*list->factors.Row(i));
      }
    }
    SaveSpecTail(w, spec_);
    return w.Commit(path, fs);
  }

  absl::Status LoadBody(BinaryReader& r) {
    ZOOM_RETURN_IF_ERROR(graph_.Load(r));
    if (graph_.size() != spec_.nlist) return r.Corrupt("centroid graph size");
    uint64_t total = 0;
    ZOOM_RETURN_IF_ERROR(r.Get(&total));
    uint64_t seen = 0;
    list_of_.SetFirstChunk(std::max<uint64_t>(1, total));
    list_of_.Grow(total);
    std::vector<bool> placed(total, false);
    for (uint32_t l = 0; l < lists_.size(); ++l) {
      auto& list = lists_[l];
      uint32_t n = 0;
      ZOOM_RETURN_IF_ERROR(r.Get(&n));
      if (n > r.remaining() / (pq_.code_size() + 8)) return r.Corrupt("list size");
      if (n > 0) list = NewList(n);
      list->ids.Grow(n);
      list->terms.Grow(n);
      if (rabitq_) list->factors.Grow(n);
      std::vector<uint8_t> code(pq_.code_size());
      for (uint32_t i = 0; i < n; ++i) {
        ZOOM_RETURN_IF_ERROR(r.GetBytes(code.data(), code.size()));
        for (uint8_t c : code) {
          if (c >= pq_.ksub()) return r.Corrupt("PQ code out of range");
        }
        PutCode(*list, i, code.data());
        ZOOM_RETURN_IF_ERROR(r.Get(list->ids.Row(i)));
        ZOOM_RETURN_IF_ERROR(r.Get(list->terms.Row(i)));
        if (rabitq_) {
          ZOOM_RETURN_IF_ERROR(r.Get(list->factors.Row(i)));
          // f is about |x'| / 4 at most, and |x'| is within the magnitude
          // rule (<= 2e18 for a residual): a larger one could overflow a
          // distance.
          const float f = *list->factors.Row(i);
          if (!(f >= 0 && f <= 1e18f)) return r.Corrupt("rabitq factor not in [0, 1e18]");
        }
        const uint32_t id = *list->ids.Row(i);
        if (id >= total) return r.Corrupt("list id out of range");
        if (placed[id]) return r.Corrupt("an id in two places of the lists");
        if (i > 0 && id <= *list->ids.Row(i - 1)) return r.Corrupt("list ids not ascending");
        placed[id] = true;
        *list_of_.Row(id) = Place(l, i);
      }
      list->size.store(n, std::memory_order_release);
      seen += n;
    }
    if (seen != total) return r.Corrupt("lists do not hold every id");
    ZOOM_RETURN_IF_ERROR(LoadSpecTail(r, &spec_));
    size_.store(total, std::memory_order_release);
    return absl::OkStatus();
  }

 private:
  struct Scratch {
    std::vector<float> q, qt, table, adc, dist;
    std::vector<InternalId> all;  // 0 .. size()-1 (exact routing; kept)
    std::vector<Neighbor> probes, heap;
    HnswScratch graph;
    std::vector<uint8_t> lut, code;   // 4-bit: byte table, one decoded code
    std::vector<uint16_t> sums;       // 4-bit: scan results
    struct Where {
      uint32_t list, pos;
    };
    std::vector<Where> where;         // 4-bit: heap entries' places
    std::vector<uint32_t> sel;        // allow: a run's matching positions
    std::vector<uint32_t> block_mask; // allow, 4-bit: a run's blocks' matches
    struct Item {
      InternalId id;
      uint32_t list, pos;
    };
    std::vector<Item> items, sorted;  // SearchIds: the allowed ids, their places
    std::vector<uint64_t> list_start; // SearchIds: the counting sort's
  };

  // list_of_ holds each point's place: its list in the high bits (as many
  // as nlist needs) and its position in that list in the low PosBits()
  // ones, UnknownPos() when the position does not fit (then SearchIds
  // searches the list's ids for it). Positions never change: lists are
  // appended to only.
  uint32_t PosBits() const {
    const uint32_t fits =
        32 - static_cast<uint32_t>(std::bit_width(std::max<uint32_t>(spec_.nlist, 1) - 1));
    return std::min(fits, place_bits_cap_);
  }
  uint32_t UnknownPos() const {
    return static_cast<uint32_t>((uint64_t{1} << PosBits()) - 1);
  }
  uint32_t Place(uint32_t list, uint64_t pos) const {
    return static_cast<uint32_t>((uint64_t{list} << PosBits()) |
                                 std::min<uint64_t>(pos, UnknownPos()));
  }

  // The position of `id` in `list` (its first `size` points), searched
  // from `from` on: ids ascend in a list (appended in id order). `size` when
  // it is not there.
  static uint32_t FindPosition(const InvertedList& list, uint32_t size, uint32_t from,
                               InternalId id) {
    // The next few positions one by one (dense matches: the id is near),
    // then a gallop: probes at +1, +3, +7, ... until one holds >= id.
    constexpr uint32_t kLinear = 16;
    for (const uint32_t end = std::min(size, from + kLinear); from < end; ++from) {
      const InternalId at = *list.ids.Row(from);
      if (at >= id) return at == id ? from : size;
    }
    uint64_t lo = from, probe = from, step = 1;
    while (probe < size && *list.ids.Row(probe) < id) {
      lo = probe + 1;
      probe += step;
      step *= 2;
    }
    uint64_t hi = std::min<uint64_t>(probe, size);  // ids below lo are < id
    while (lo < hi) {
      const uint64_t mid = lo + (hi - lo) / 2;
      if (*list.ids.Row(mid) < id) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    return lo < size && *list.ids.Row(lo) == id ? static_cast<uint32_t>(lo) : size;
  }

  // The query (unit length for cosine) into s.q, rotated into s.qt, and its
  // inner-product table, one for all lists, into s.table.
  void QueryTable(const float* query, Scratch& s) const {
    s.q.assign(query, query + spec_.dim);
    if (spec_.metric == Metric::kCosine) NormalizeL2(s.q.data(), spec_.dim);
    s.qt.resize(pq_.padded_dim());
    pq_.Transform(s.q.data(), s.qt.data());
    s.table.resize(size_t{pq_.m()} * pq_.ksub());
    pq_.IpTable(s.qt.data(), s.table.data());
  }

  std::unique_ptr<InvertedList> NewList(uint64_t rows) const {
    return std::make_unique<InvertedList>(pq_.code_size(), pq4_, rows);
  }

  // Stores code (code_size() bytes) as point `pos` of `list` (writer only).
  void PutCode(InvertedList& list, uint32_t pos, const uint8_t* code) {
    if (!pq4_) {
      list.codes.Grow(pos + 1);
      std::memcpy(list.codes.Row(pos), code, pq_.code_size());
      return;
    }
    list.codes.Grow(pos / kPq4BlockSize + 1);
    Pq4SetCode(list.codes.Row(pos / kPq4BlockSize), pq_.code_size(), pos % kPq4BlockSize,
               code);
  }

  void GetCode(const InvertedList& list, uint32_t pos, uint8_t* code) const {
    if (!pq4_) {
      std::memcpy(code, list.codes.Row(pos), pq_.code_size());
      return;
    }
    Pq4GetCode(list.codes.Row(pos / kPq4BlockSize), pq_.code_size(), pos % kPq4BlockSize,
               code);
  }

  // The 4-bit scan of s.probes: leaves the best k (by float-table ADC) in
  // s.heap. The byte scan keeps kOver * k candidates (a max-heap on the
  // approximate distance); those are re-scored with s.table.
  void FastScan(size_t k, const IndexSearchParams& params, Scratch& s,
                QueryStats* stats) const {
    constexpr size_t kOver = 2;
    const size_t m = pq_.code_size();
    const bool l2 = UsesL2(spec_.metric);
    s.lut.resize(Pq4PaddedM(m) * kPq4Centroids);
    float bias = 0, scale = 1;
    Pq4QuantizeTable(s.table.data(), m, s.lut.data(), &bias, &scale);
    const size_t keep = k * kOver;
    std::vector<Neighbor>& heap = s.heap;  // distance, index into s.where
    heap.clear();
    float top = std::numeric_limits<float>::infinity();
    s.where.clear();
    uint64_t scanned = 0, tested = 0, matched = 0;
    for (uint32_t p = 0; p < s.probes.size(); ++p) {
      const Neighbor& probe = s.probes[p];
      const InvertedList& list = *lists_[probe.id];
      const uint32_t n = list.size.load(std::memory_order_acquire);
      const uint64_t nblocks = (n + kPq4BlockSize - 1) / kPq4BlockSize;
      list.codes.ForEachRun(nblocks, [&](uint64_t first, const uint8_t* blocks, uint64_t count) {
        s.sums.resize(count * kPq4BlockSize);
        uint16_t* sums = s.sums.data();
        const uint64_t p0 = first * kPq4BlockSize;
        const uint64_t np = std::min<uint64_t>(count * kPq4BlockSize, n - p0);
        const uint32_t* ids = list.ids.Row(p0);
        const float* terms = list.terms.Row(p0);
        const float* factors = rabitq_ ? list.factors.Row(p0) : nullptr;
        const bool masked = !params.allow.empty();
        if (masked) {
          // The membership test first: blocks without a matching code are
          // not scanned, and only matching codes are offered.
          s.block_mask.assign(count, 0);
          uint64_t hits = 0;
          for (uint64_t i = 0; i < np; ++i) {
            const bool in = params.allow.Contains(ids[i]);
            hits += in ? 1 : 0;
            s.block_mask[i >> 5] |= uint32_t{in} << (i & 31);
          }
          tested += np;
          matched += hits;
          const size_t bb = Pq4BlockBytes(m);
          for (uint64_t b = 0; b < count;) {
            if (s.block_mask[b] == 0) {
              ++b;
              continue;
            }
            uint64_t e = b + 1;
            while (e < count && s.block_mask[e] != 0) ++e;
            Pq4ScanBlocks(s.lut.data(), blocks + b * bb, e - b, m, sums + b * kPq4BlockSize);
            scanned += (e - b) * kPq4BlockSize;
            b = e;
          }
        } else {
          Pq4ScanBlocks(s.lut.data(), blocks, count, m, sums);
          scanned += np;
        }
        auto skip = [&](uint64_t i) {
          return masked && (s.block_mask[i >> 5] >> (i & 31) & 1) == 0;
        };
        // Offers point i at `dist`; updates `top` (the worst kept once
        // `keep` are kept, else +inf).
        auto offer = [&](uint64_t i, float dist) {
          if (params.filter != nullptr && params.filter->IsExcluded(ids[i]))
            return;
          uint32_t slot;
          if (heap.size() >= keep) {
            std::pop_heap(heap.begin(), heap.end());
            slot = heap.back().id;
            heap.pop_back();
          } else {
            slot = static_cast<uint32_t>(s.where.size());
            s.where.emplace_back();
          }
          s.where[slot] = {p, static_cast<uint32_t>(p0 + i)};
          heap.push_back({dist, slot});
          std::push_heap(heap.begin(), heap.end());
          if (heap.size() >= keep) top = heap.front().distance;
        };
        if (rabitq_) {
          // A factor per code: dist = c + term - 2 f (bias + scale sum) (L2),
          // -<q, c> - f (bias + scale sum) (inner product).
          const float two = l2 ? 2.0f : 1.0f;
          for (uint64_t i = 0; i < np; ++i) {
            if (skip(i)) continue;
            const float adc = bias + scale * static_cast<float>(sums[i]);
            const float dist =
                probe.distance + (l2 ? terms[i] : 0.0f) - two * factors[i] * adc;
            if (dist < top) offer(i, dist);
          }
          return;
        }
        if (l2) {
          const float c0 = probe.distance - 2 * bias, c1 = 2 * scale;
          for (uint64_t i = 0; i < np; ++i) {
            if (skip(i)) continue;
            const float dist = c0 + terms[i] - c1 * static_cast<float>(sums[i]);
            if (dist < top) offer(i, dist);
          }
          return;
        }
        // Inner product: dist = c0 - scale * sum < top  <=>  sum > (c0 - top)
        // / scale, an integer test on the scan's output for most points.
        const float c0 = probe.distance - bias;
        auto threshold = [&] {
          if (!(top < std::numeric_limits<float>::infinity())) return -1;
          const float t = (c0 - top) / scale;
          return t < 0 ? -1 : t >= 65535.0f ? 65535 : static_cast<int>(t);
        };
        int thr = threshold();
        for (uint64_t i = 0; i < np; ++i) {
          if (static_cast<int>(sums[i]) <= thr || skip(i)) continue;
          const float dist = c0 - scale * static_cast<float>(sums[i]);
          if (!(dist < top)) continue;
          offer(i, dist);
          thr = threshold();
        }
      });
    }
    if (stats != nullptr) {
      stats->distance_evals += scanned;
      stats->filter_tested += tested;
      stats->filter_matched += matched;
    }
    // Re-score the kept candidates with the float table; keep the best k.
    s.code.resize(m);
    for (Neighbor& h : heap) {
      const Scratch::Where w = s.where[h.id];
      const Neighbor& probe = s.probes[w.list];
      const InvertedList& list = *lists_[probe.id];
      GetCode(list, w.pos, s.code.data());
      float adc = 0;
      for (size_t j = 0; j < m; ++j) adc += s.table[j * kPq4Centroids + s.code[j]];
      if (rabitq_) adc *= *list.factors.Row(w.pos);
      h.distance = l2 ? probe.distance + *list.terms.Row(w.pos) - 2 * adc
                      : probe.distance - adc;
      h.id = *list.ids.Row(w.pos);
    }
    std::sort(heap.begin(), heap.end());
    if (heap.size() > k) heap.resize(k);
  }
  static Scratch& ThreadScratch() {
    thread_local Scratch s;
    return s;
  }

  // The writer's running window of code errors (CodeErrorStats).
  void CountCodeError(float e) {
    window_sum_ += e;
    if (++window_count_ < CodeErrorStats::kCodeErrorWindow) return;
    const double mean = window_sum_ / static_cast<double>(window_count_);
    window_sum_ = 0;
    window_count_ = 0;
    absl::MutexLock l(&error_mu_);
    if (error_stats_.windows == 0) error_stats_.first_window_mean = mean;
    error_stats_.latest_window_mean = mean;
    ++error_stats_.windows;
  }

  IndexSpec spec_;  // spec_.nlist is the actual number of clusters
  bool pq4_ = false;  // 4-bit codes in blocks (spec_.pq.nbits == 4)
  bool rabitq_ = false;  // the rabitq code: a factor per point (factors)
  std::vector<float> centroids_;    // nlist * dim (original space)
  std::vector<float> centroid_norms_;  // nlist: |c|^2 (Assign)
  ProductQuantizer pq_;
  HnswGraph graph_;
  std::vector<std::unique_ptr<InvertedList>> lists_;
  // Each point's place, Place(list, position): SearchIds' way to its code.
  // Rebuilt from the lists at load (not in the file).
  ChunkedArray<uint32_t> list_of_;
  // PosBits()'s cap: 32 but in tests (SetPlacePositionBitsForTesting).
  const uint32_t place_bits_cap_ =
      static_cast<uint32_t>(g_place_position_bits.load(std::memory_order_relaxed));
  std::atomic<uint64_t> size_{0};
  double window_sum_ = 0;  // the writer's
  uint64_t window_count_ = 0;
  mutable absl::Mutex error_mu_;
  CodeErrorStats error_stats_ ABSL_GUARDED_BY(error_mu_);
};

}  // namespace

namespace {

// FAISS asks it between training iterations (InterruptCallback::check()).
class BuildInterrupt final : public faiss::InterruptCallback {
 public:
  bool want_interrupt() override { return BuildCancelled(); }
};

}  // namespace

void EnsureFaissInterruptHook() {
  static std::once_flag once;
  std::call_once(once, [] { faiss::InterruptCallback::instance.reset(new BuildInterrupt()); });
}

absl::StatusOr<std::vector<float>> KMeans(const float* x, size_t n, size_t d, size_t k,
                                          int iterations, uint64_t seed, bool spherical) {
  if (k == 0 || n < k || d == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("k-means of ", n, " points into ", k, " centroids of dimension ", d));
  }
  std::vector<float> centroids;
  try {
    faiss::ClusteringParameters cp;
    cp.niter = iterations;
    cp.seed = static_cast<int>(seed);
    cp.spherical = spherical;
    cp.max_points_per_centroid = 1 << 30;  // the caller sampled already
    cp.min_points_per_centroid = 1;
    faiss::Clustering clus(static_cast<int>(d), static_cast<int>(k), cp);
    faiss::IndexFlatL2 assigner(static_cast<faiss::Index::idx_t>(d));
    clus.train(static_cast<faiss::Index::idx_t>(n), x, assigner);
    centroids = clus.centroids;
  } catch (const faiss::FaissException& e) {
    if (BuildCancelled()) return BuildCancelledError();  // the interrupt hook
    return absl::InternalError(absl::StrCat("FAISS k-means failed: ", e.what()));
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("out of memory during k-means");
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("k-means failed: ", e.what()));
  }
  if (centroids.size() != k * d) {
    return absl::InternalError("k-means returned an unexpected number of centroids");
  }
  return centroids;
}

namespace {

// n Ts of anonymous mapped memory, zeroed, unmapped on destruction: a
// build's staging, whose pages must go back to the kernel the moment it is
// freed (malloc may keep a freed block of this size in its heap).
template <typename T>
class MappedArray {
  static_assert(std::is_trivial_v<T>);

 public:
  MappedArray() = default;
  static absl::StatusOr<MappedArray> Make(size_t n) {
    MappedArray a;
    if (n == 0) return a;
    void* p = ::mmap(nullptr, n * sizeof(T), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      return absl::ResourceExhaustedError(
          absl::StrCat("out of memory staging ", n * sizeof(T), " bytes of the build"));
    }
    a.data_ = static_cast<T*>(p);
    a.n_ = n;
    return a;
  }
  MappedArray(MappedArray&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  MappedArray& operator=(MappedArray&& o) noexcept {
    if (this != &o) {
      Unmap();
      data_ = std::exchange(o.data_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }
  ~MappedArray() { Unmap(); }

  T* data() { return data_; }  // null when empty

 private:
  void Unmap() {
    if (data_ != nullptr) ::munmap(data_, n_ * sizeof(T));
    data_ = nullptr;
    n_ = 0;
  }
  T* data_ = nullptr;
  size_t n_ = 0;
};

// Up to `max` rows of x (n * d), picked at random; only rows of `rows`
// when it is not empty.
std::vector<float> Sample(const float* x, size_t n, size_t d, size_t max, uint64_t seed,
                          absl::Span<const uint32_t> rows) {
  std::vector<size_t> pick(rows.empty() ? n : rows.size());
  if (rows.empty()) {
    std::iota(pick.begin(), pick.end(), 0);
  } else {
    std::copy(rows.begin(), rows.end(), pick.begin());
    n = rows.size();
  }
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

// The k-means sample's size for spec (nlist set): IndexSpec::max_kmeans_points.
size_t KMeansSampleSize(const IndexSpec& spec) {
  constexpr size_t kPerCentroid = 64, kAtLeast = 65536;
  if (spec.max_kmeans_points > 0) {
    return std::max<size_t>(spec.max_kmeans_points, spec.nlist);
  }
  return std::max<size_t>(kAtLeast, kPerCentroid * spec.nlist);
}

// Trains an empty index: k-means on up to KMeansSampleSize(spec) of the rows
// of x (n * d, prepared; only `rows` when not empty), the PQ on the
// residuals of up to pq.max_train_points. spec.nlist must be set.
absl::StatusOr<std::unique_ptr<IvfHnswPqIndex>> TrainIvfHnswPq(
    const IndexSpec& spec, const float* x, size_t n, absl::Span<const uint32_t> rows) {
  const size_t d = spec.dim;
  // x itself when it is the sample (the streaming build's: no second copy).
  std::vector<float> kmeans_sample;
  const bool all = rows.empty() && n <= KMeansSampleSize(spec);
  if (!all) kmeans_sample = Sample(x, n, d, KMeansSampleSize(spec), spec.pq.seed, rows);
  ZOOM_ASSIGN_OR_RETURN(std::vector<float> centroids,
                        internal::KMeans(all ? x : kmeans_sample.data(),
                                         all ? n : kmeans_sample.size() / d, d, spec.nlist, 20,
                                         spec.pq.seed, spec.metric == Metric::kCosine));
  std::vector<float>().swap(kmeans_sample);
  // Residuals of a sample train the PQ.
  const std::vector<float> sample =
      Sample(x, n, d, spec.pq.max_train_points, spec.pq.seed + 1, rows);
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
  if (BuildCancelled()) return BuildCancelledError();
  ZOOM_ASSIGN_OR_RETURN(ProductQuantizer pq,
                        ProductQuantizer::Train(residuals.data(), ns, spec.dim, spec.pq));
  auto index = std::make_unique<IvfHnswPqIndex>(spec, std::move(centroids), std::move(pq));
  index->BuildGraph();
  if (BuildCancelled()) return BuildCancelledError();
  return index;
}

absl::Status CheckTrainSize(const IndexSpec& spec, size_t n_train) {
  if (n_train < std::max<size_t>(spec.nlist, kPqCentroids)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ivf_hnsw_pq with nlist ", spec.nlist, " needs at least max(nlist, 256) = ",
        std::max<size_t>(spec.nlist, kPqCentroids), " points to train, got ", n_train));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<VectorIndex>> BuildIvfHnswPq(
    const IndexSpec& in_spec, const float* x, size_t n, absl::Span<const uint32_t> train_rows) {
  IndexSpec spec = in_spec;
  const size_t n_train = train_rows.empty() ? n : train_rows.size();
  if (spec.nlist == 0) spec.nlist = AutoNlist(n_train);
  ZOOM_RETURN_IF_ERROR(CheckTrainSize(spec, n_train));
  const size_t d = spec.dim;
  std::vector<float> prepared = PrepareVectors(spec.metric, x, n, d);
  ZeroUntrainedBadRows(spec.metric, prepared, n, d, train_rows);
  ZOOM_ASSIGN_OR_RETURN(std::unique_ptr<IvfHnswPqIndex> index,
                        TrainIvfHnswPq(spec, prepared.data(), n, train_rows));
  ZOOM_RETURN_IF_ERROR(index->AddPrepared(prepared.data(), n, /*bulk=*/true));
  return std::unique_ptr<VectorIndex>(std::move(index));
}

absl::StatusOr<std::unique_ptr<VectorIndex>> BuildIvfHnswPqStreaming(
    const IndexSpec& in_spec, uint64_t n, const IdFilter* exclude, const RowReader& read,
    const StreamingBuildOptions& options) {
  IndexSpec spec = in_spec;
  const size_t d = spec.dim;
  auto excluded = [&](uint64_t i) {
    return exclude != nullptr && exclude->IsExcluded(static_cast<InternalId>(i));
  };
  uint64_t live = 0;
  for (uint64_t i = 0; i < n; ++i) live += !excluded(i);
  const auto* trained = dynamic_cast<const IvfHnswPqIndex*>(options.trained_from);
  if (options.trained_from != nullptr) {
    const IndexSpec& t = options.trained_from->spec();
    if (trained == nullptr || t.dim != spec.dim || t.metric != spec.metric ||
        t.pq.code != spec.pq.code || t.pq.m != spec.pq.m || t.pq.nbits != spec.pq.nbits) {
      return absl::InvalidArgumentError(
          "the index to keep the quantiser of is not an ivf_hnsw_pq index of this dim, metric "
          "and code");
    }
    const int threads = spec.build_threads;
    spec = t;
    spec.build_threads = threads;
  }
  if (spec.nlist == 0) spec.nlist = AutoNlist(live);
  if (trained == nullptr) ZOOM_RETURN_IF_ERROR(CheckTrainSize(spec, live));
  // A uniform sample of the live rows, in id order (selection sampling).
  const uint64_t want =
      trained != nullptr ? 0
                         : std::min<uint64_t>(live, std::max<uint64_t>(KMeansSampleSize(spec),
                                                                       spec.pq.max_train_points));
  std::vector<InternalId> picked;
  picked.reserve(want);
  {
    std::mt19937_64 rng(spec.pq.seed + 2);
    uint64_t seen = 0;
    for (uint64_t i = 0; i < n && picked.size() < want; ++i) {
      if (excluded(i)) continue;
      const uint64_t left = live - seen++;
      if (rng() % left < want - picked.size()) picked.push_back(static_cast<InternalId>(i));
    }
  }
  const size_t chunk = std::max<size_t>(1, options.chunk_rows);
  auto read_rows = [&](absl::Span<const InternalId> ids, float* out) -> absl::Status {
    ZOOM_RETURN_IF_ERROR(read(ids, out));
    for (size_t i = 0; i < ids.size(); ++i) {
      float* row = out + i * d;
      if (!VectorMagnitudeOk(spec.metric, row, d)) {
        if (excluded(ids[i])) {
          std::fill(row, row + d, 0.0f);  // a dead placeholder
          continue;
        }
        absl::Status why = CheckVectorMagnitude(spec.metric, row, d);
        return absl::InvalidArgumentError(
            absl::StrCat("training vector ", ids[i], ": ", why.message()));
      }
      if (spec.metric == Metric::kCosine) NormalizeL2(row, d);
    }
    return absl::OkStatus();
  };
  StreamingBuildTimes unused_times;
  StreamingBuildTimes& times = options.times != nullptr ? *options.times : unused_times;
  auto lap = [clock = absl::Now()]() mutable {
    const absl::Time now = absl::Now();
    const double s = absl::ToDoubleSeconds(now - clock);
    clock = now;
    return s;
  };
  std::unique_ptr<IvfHnswPqIndex> index;
  {
    std::vector<float> sample(picked.size() * d);
    for (size_t first = 0; first < picked.size(); first += chunk) {
      const size_t m = std::min(chunk, picked.size() - first);
      ZOOM_RETURN_IF_ERROR(read_rows(absl::MakeConstSpan(picked.data() + first, m),
                                     sample.data() + first * d));
    }
    std::vector<InternalId>().swap(picked);
    times.sample_s = lap();
    if (trained != nullptr) {
      index = trained->WithSameQuantizer(spec.build_threads);
    } else {
      ZOOM_ASSIGN_OR_RETURN(index, TrainIvfHnswPq(spec, sample.data(), sample.size() / d, {}));
    }
    times.train_s = lap();
  }
  if (options.progress) options.progress(0.1);
  // Encode every row a chunk at a time: its list into `assign`, its code,
  // term (and factor) into that chunk's staging, which is mapped memory so
  // that unmapping it gives the pages back at once. Then size every list
  // exactly and lay the chunks out in order, unmapping each as it is laid
  // out: the lists' pages are touched only as they fill (ChunkedArray), so
  // the peak is about the final index plus the assignments and a few pages
  // a list, not the staging beside the whole index.
  const size_t m = index->code_size();
  const bool with_factors = spec.pq.code == CodeKind::kRabitq;
  struct Staged {
    MappedArray<uint8_t> codes;
    MappedArray<float> terms, factors;
  };
  std::vector<uint32_t> assign(n);
  std::vector<Staged> staged;
  std::vector<float> rows(std::min<uint64_t>(chunk, n) * d);
  std::vector<InternalId> ids;
  for (uint64_t first = 0; first < n; first += chunk) {
    if (BuildCancelled()) return BuildCancelledError();  // a chunk at a time
    const size_t count = static_cast<size_t>(std::min<uint64_t>(chunk, n - first));
    ids.resize(count);
    for (size_t i = 0; i < count; ++i) ids[i] = static_cast<InternalId>(first + i);
    ZOOM_RETURN_IF_ERROR(read_rows(ids, rows.data()));
    Staged& st = staged.emplace_back();
    ZOOM_ASSIGN_OR_RETURN(st.codes, MappedArray<uint8_t>::Make(count * m));
    ZOOM_ASSIGN_OR_RETURN(st.terms, MappedArray<float>::Make(count));
    ZOOM_ASSIGN_OR_RETURN(st.factors, MappedArray<float>::Make(with_factors ? count : 0));
    index->Encode(rows.data(), count, assign.data() + first, st.codes.data(), st.terms.data(),
                  st.factors.data());
    if (BuildCancelled()) return BuildCancelledError();
    if (options.progress) options.progress(0.1 + 0.85 * double(first + count) / double(n));
  }
  std::vector<float>().swap(rows);
  times.encode_s = lap();
  index->ReserveExactly(assign.data(), n);
  for (size_t c = 0; c < staged.size(); ++c) {
    const uint64_t first = uint64_t{c} * chunk;
    const size_t count = static_cast<size_t>(std::min<uint64_t>(chunk, n - first));
    ZOOM_RETURN_IF_ERROR(index->AddEncoded(assign.data() + first, staged[c].codes.data(),
                                           staged[c].terms.data(), staged[c].factors.data(),
                                           count, /*bulk=*/false));
    staged[c] = Staged{};
  }
  times.layout_s = lap();
  return std::unique_ptr<VectorIndex>(std::move(index));
}

absl::StatusOr<std::unique_ptr<VectorIndex>> LoadIvfHnswPq(const IndexSpec& spec,
                                                           BinaryReader& r) {
  ProductQuantizer pq;
  ZOOM_RETURN_IF_ERROR(pq.Load(r, spec.pq.code));
  std::vector<float> centroids;
  ZOOM_RETURN_IF_ERROR(r.GetVector(&centroids));
  if (pq.dim() != spec.dim || pq.m() != spec.pq.m || pq.nbits() != spec.pq.nbits ||
      spec.nlist == 0 ||
      centroids.size() != size_t{spec.nlist} * spec.dim) {
    return r.Corrupt("quantizer or centroids do not match the spec");
  }
  auto index = std::make_unique<IvfHnswPqIndex>(spec, std::move(centroids), std::move(pq));
  ZOOM_RETURN_IF_ERROR(index->LoadBody(r));
  return std::unique_ptr<VectorIndex>(std::move(index));
}

}  // namespace zoom::index::internal
