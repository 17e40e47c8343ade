// ivf_hnsw_pq's searches (ivf_hnsw_pq_index.h): Search (routing to the
// nprobe nearest centroids, then the scan of their lists: the 8-bit ADC
// scan, or the 4-bit fast scan and its re-scoring; `allow`, first_probe)
// and SearchIds (every allowed id's code scored through its place), with
// the per-thread scratch they share.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

#include "absl/status/status.h"
#include "index/index_internal.h"
#include "index/ivf_hnsw_pq_index.h"

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

}  // namespace

struct IvfHnswPqIndex::Scratch {
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

absl::Status IvfHnswPqIndex::Search(const float* query, size_t k,
                                    const IndexSearchParams& params,
                                    std::vector<Neighbor>* out, QueryStats* stats) const {
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

absl::Status IvfHnswPqIndex::SearchIds(const float* query, size_t k, const IdBitsView& ids,
                                       const IndexSearchParams& params,
                                       std::vector<Neighbor>* out, QueryStats* stats) const {
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

uint32_t IvfHnswPqIndex::FindPosition(const InvertedList& list, uint32_t size, uint32_t from,
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

void IvfHnswPqIndex::QueryTable(const float* query, Scratch& s) const {
  s.q.assign(query, query + spec_.dim);
  if (spec_.metric == Metric::kCosine) NormalizeL2(s.q.data(), spec_.dim);
  s.qt.resize(pq_.padded_dim());
  pq_.Transform(s.q.data(), s.qt.data());
  s.table.resize(size_t{pq_.m()} * pq_.ksub());
  pq_.IpTable(s.qt.data(), s.table.data());
}

void IvfHnswPqIndex::GetCode(const InvertedList& list, uint32_t pos, uint8_t* code) const {
  if (!pq4_) {
    std::memcpy(code, list.codes.Row(pos), pq_.code_size());
    return;
  }
  Pq4GetCode(list.codes.Row(pos / kPq4BlockSize), pq_.code_size(), pos % kPq4BlockSize,
             code);
}

void IvfHnswPqIndex::FastScan(size_t k, const IndexSearchParams& params, Scratch& s,
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

IvfHnswPqIndex::Scratch& IvfHnswPqIndex::ThreadScratch() {
  thread_local Scratch s;
  return s;
}

}  // namespace zoom::index::internal
