// File: index/search_types.h
//
// Small types shared by the preview indexes: a scored id, the deleted-ids
// filter, and the per-query distance computer the graph code calls without
// knowing whether it scores PQ codes or full vectors.
#ifndef ZOOM_INDEX_SEARCH_TYPES_H_
#define ZOOM_INDEX_SEARCH_TYPES_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/ids.h"
#include "common/query_stats.h"

namespace zoom::index {

// An id with its distance (lower is better: squared L2, or the negated
// inner product for IP and cosine).
struct Neighbor {
  float distance;
  InternalId id;
  friend bool operator<(const Neighbor& a, const Neighbor& b) {
    return a.distance < b.distance || (a.distance == b.distance && a.id < b.id);
  }
};

// Ids that must not be returned (deleted points). Searches still traverse
// them, so the graph stays connected, and still return k results when k
// live points exist. Thread-safe reads.
class IdFilter {
 public:
  virtual ~IdFilter() = default;
  virtual bool IsExcluded(InternalId id) const = 0;
};

// A read-only view of a dense bitset of ids (bit id & 63 of words[id / 64];
// ids >= size are not in the set): the ids a filtered search may return.
// `share` is the fraction of the index's ids in the set, a hint the index
// uses to choose how to search (a test before each distance, or after).
struct IdBitsView {
  const uint64_t* words = nullptr;
  uint64_t size = 0;
  double share = 1.0;
  bool empty() const { return words == nullptr; }
  bool Contains(InternalId id) const {
    return id < size && (words[id >> 6] >> (id & 63) & 1) != 0;
  }
};

// The ids a query may return: a filter's matching ids (VectorIndex::Search
// with a filter). Empty `ids`: every live id.
struct AllowedIds {
  IdBitsView ids;      // its share: of the index's ids
  uint64_t count = 0;  // ids in the set
  bool empty() const { return ids.empty(); }
};

// The filtered search's cost model and switches, made once (the engine's
// options) and measured here (zoombench --benchmarks=filter; an SSD read
// ~18 us in a batch, a code distance ~30 ns on GloVe-100 200K).
struct FilterTuning {
  // A membership test costs this share of a code distance (ivf_hnsw_pq's
  // list scan tests every id and scores only the matching codes).
  double test_cost = 0.15;
  // The match scan (VectorIndex::SearchIds) scores each matching code,
  // gathered from wherever it lies: this many code distances of a list's
  // contiguous scan each (~130 ns a matching code at 13,500 matches
  // against ~30 ns a code in a contiguous scan; GloVe, ivf_hnsw_pq, 1
  // thread, 2026-12-03).
  double match_scan_cost = 3.0;
  // At least this share of the live points match: the plain preview,
  // oversampled, then filtered (post_filter). It was no faster than the
  // filtered preview at the same knobs even at 50-60% shares, and less
  // accurate: only near-unfiltered queries take it.
  double broad_share = 0.8;
  // hnsw_pq's filtered preview walks two hops (IndexSearchParams::allow)
  // below this share of the index's points, else the plain walk admitting
  // matches only.
  double two_hop_share = 0.3;
};

// Ok, or why a search must stop now: Cancelled once *cancelled (may be
// null) is true, DeadlineExceeded at the deadline. The one check of the
// index's and the engine's loops.
inline absl::Status CheckSearchStop(absl::Time deadline, const std::atomic<bool>* cancelled) {
  if (cancelled != nullptr && cancelled->load(std::memory_order_relaxed)) {
    return absl::CancelledError("the search was cancelled");
  }
  if (deadline != absl::InfiniteFuture() && absl::Now() >= deadline) {
    return absl::DeadlineExceededError("the deadline passed before the search finished");
  }
  return absl::OkStatus();
}

// One query's run through VectorIndex::Search: when it must stop, how far
// it may widen, what it reports. One per query, on the caller's stack.
struct SearchContext {
  // Work stops with DeadlineExceeded at the deadline, Cancelled when
  // *cancelled turns true (may be null); with allow_partial a widening
  // stops at the deadline instead and what was found is returned
  // (`stopped` set).
  absl::Time deadline = absl::InfiniteFuture();
  const std::atomic<bool>* cancelled = nullptr;
  bool allow_partial = false;
  // The widest a search may go (the server's limits on ef and K').
  uint32_t max_ef = 10000;
  uint32_t max_candidates = 10000;
  // The search widens (each kind its own way: nprobe or ef, at most three
  // times x8) while it has fewer than this many candidates and more ids are
  // allowed (0: no widening). The caller's k for an unfiltered search.
  uint64_t need = 0;
  // The live points (the filter's share is its count over them; and no
  // widening past them); 0: unknown (the index's size).
  uint64_t live = 0;
  // The hits the caller answers (its k) when it asks the index for more
  // candidates (K'): ivf_hnsw_pq's rings count a ring that beats the
  // answer_k-th best. 0: k.
  uint64_t answer_k = 0;
  // A filtered search may return up to this many candidates where the
  // filter fights the vectors (then `fights` is set), else at most k.
  // 0: k.
  uint64_t pool = 0;
  FilterTuning tuning;
  // Forces one filtered strategy (benchmarks, tests; kNone: the index's
  // choice; kExact is the caller's).
  FilterStrategy force = FilterStrategy::kNone;
  // Work is added here when not null (distance_evals, hops, the filter's
  // strategy, expansions, tests and matches).
  QueryStats* stats = nullptr;

  // Out: the filter fights the vectors (its matches lie farther from the
  // query than its share says: the nearest lists held few, or a ring of
  // farther lists found better ones): the caller should re-rank the pool,
  // not only k. And whether a widening stopped at the deadline.
  bool fights = false;
  bool stopped = false;

  // Ok, or why the search must stop now.
  absl::Status CheckStop() const { return CheckSearchStop(deadline, cancelled); }
};

// What a filtered search will cost (VectorIndex::EstimateCost): the code
// distances of the strategy the index would run, and that strategy.
struct CostEstimate {
  // Code distances of the cheaper of the index's filtered preview and its
  // match scan (what an exact search over the matches is weighed against).
  double codes = 0;
  FilterStrategy strategy = FilterStrategy::kNone;
};

// Distances from one query, bound at construction. One per thread.
class DistanceComputer {
 public:
  virtual ~DistanceComputer() = default;
  // out[i] = distance from the query to ids[i], i < n.
  virtual void Distances(const InternalId* ids, size_t n, float* out) = 0;
  float Distance(InternalId id) {
    float d;
    Distances(&id, 1, &d);
    return d;
  }
};

}  // namespace zoom::index

#endif  // ZOOM_INDEX_SEARCH_TYPES_H_
