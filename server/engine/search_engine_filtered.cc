// SearchEngine's filtered path (search_engine.h): the planner, exact over
// the matches, and the rings of ivf_hnsw_pq's filtered widening. The rest of
// the query path is in search_engine.cc.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/timer.h"
#include "server/engine/search_engine.h"
#include "server/engine/search_scratch.h"

namespace zoom::server {

using search_internal::Offer;
using search_internal::Scored;
using search_internal::Scratch;
using search_internal::TakeBest;
using search_internal::ThreadScratch;

namespace {

// A filtered search's re-rank beyond its first K' reads (see FilteredSearch)
// stops where a candidate's preview distance less the mean + 2 sd of the
// errors seen is past the k-th exact distance: ~lossless against reading
// the whole pool (SearchParams::rerank_stop_sd's measurements).
constexpr double kFilteredStopSd = 2.0;

// ivf_hnsw_pq widens by rings when the filter's share among the codes it
// scanned near the query is below this fraction of its global share.
constexpr double kRingLocalShare = 0.5;

}  // namespace

absl::Status SearchEngine::ExactOverMatches(const float* query, const SearchParams& params,
                                            QueryResult* result, const QueryContext& ctx) const {
  result->hits.clear();
  QueryStats* stats = &result->stats;
  stats->exact = true;
  stats->filter_strategy = FilterStrategy::kExact;
  const size_t d = store_->dim();
  Scratch& s = ThreadScratch();
  s.query.assign(query, query + d);
  if (metric_ == Metric::kCosine) NormalizeL2(s.query.data(), d);
  Stopwatch sw;
  std::vector<Scored>& heap = s.scored;  // worst on top
  heap.clear();
  // The matching ids' full vectors, read in batches of kChunk (one batch
  // of reads each: the exact strategy runs for few matches).
  constexpr size_t kChunk = 4096;
  std::vector<InternalId> ids;
  ids.reserve(std::min<uint64_t>(kChunk, params.match->size()));
  const uint64_t stored = store_->count();
  auto flush = [&]() -> absl::Status {
    if (ids.empty()) return absl::OkStatus();
    s.vectors.resize(ids.size() * d);
    ZOOM_RETURN_IF_ERROR(store_->ReadVectors(ids, s.vectors.data(), stats));
    stats->candidates += ids.size();
    for (size_t i = 0; i < ids.size(); ++i) {
      Offer(metric_, {ids[i], Score(s.query.data(), s.vectors.data() + i * d)}, params.k, &heap);
    }
    ids.clear();
    return absl::OkStatus();
  };
  absl::Status st;
  bool stopped = false;  // allow_partial at the deadline: the best of those read
  params.match->ForEach([&](InternalId id) {
    if (stopped || !st.ok() || id >= stored) return;
    ids.push_back(id);
    if (ids.size() == kChunk) {
      st = CheckStop(ctx);
      if (!st.ok() && ctx.allow_partial && st.code() == absl::StatusCode::kDeadlineExceeded) {
        st = absl::OkStatus();
        stopped = true;
        stats->degraded = true;
        ids.clear();
        return;
      }
      if (st.ok()) st = flush();
    }
  });
  ZOOM_RETURN_IF_ERROR(st);
  if (!stopped) ZOOM_RETURN_IF_ERROR(flush());
  TakeBest(metric_, &heap, heap.size(), &result->hits);
  stats->fullview_us += sw.ElapsedMicros();
  return ReadHitVectors(params, result);
}

absl::Status SearchEngine::FilteredSearch(const index::VectorIndex* idx, const float* query,
                                          const SearchParams& params, QueryResult* result,
                                          const QueryContext& ctx) const {
  QueryStats* stats = &result->stats;
  const uint64_t count = params.match->Count();
  stats->filter_matches = count;
  const uint64_t want = std::min<uint64_t>(params.k, count);
  FilterStrategy strategy = params.force_strategy;
  if (idx == nullptr) strategy = FilterStrategy::kExact;
  const double share =
      params.live_points == 0 ? 1.0 : static_cast<double>(count) / static_cast<double>(params.live_points);
  if (strategy == FilterStrategy::kNone) {
    // The cost model (query.h): exact reads `count` vectors; the filtered
    // preview K' plus its scan, in reads. (preview_only: RAM only, so not
    // the exact strategy, which reads the matching vectors, while an index
    // exists.)
    const double kp = std::max(params.k, params.rerank_candidates);
    const double n = static_cast<double>(std::max<uint64_t>(params.live_points, count));
    double scan = 2 * kp * n / static_cast<double>(count);
    if (idx != nullptr && idx->spec().kind == index::IndexKind::kIvfHnswPq) {
      // The lists of the first guess below, and a round of widening.
      const double nlist = std::max<uint32_t>(1, idx->spec().nlist);
      const double lists = std::max(params.nprobe / std::sqrt(std::max(share, 1e-6)),
                                    1.5 * kp * nlist / static_cast<double>(count));
      scan = std::min(n, 1.5 * lists * n / nlist);
    } else if (idx != nullptr) {
      // hnsw_pq: a walk with list size ef scores about 2 ef M nodes, and
      // 1 / share times as many to admit ef matches (the two-hop walk's ef
      // is 2 K'); measured on MNIST 10K: ~30,000 code distances at 6.9%,
      // ~150,000 at 0.95%, more than the points (it revisits them).
      const double two_hop = share < params.filter_two_hop_share ? 2.0 : 1.0;
      const double ef = std::max<double>(params.ef, two_hop * kp);
      scan = std::min(4 * n, 2 * ef * idx->spec().hnsw.M / std::max(share, 1e-6));
    }
    if (idx != nullptr && idx->spec().kind == index::IndexKind::kIvfHnswPq) {
      // The list scan tests every id and scores only the matching codes.
      scan *= params.filter_test_cost + share;
    }
    const double per_read = std::max(params.filter_codes_per_read, 1.0);
    const double preview_cost = kp + scan / per_read;
    // The match scan: each matching code gathered (ivf_hnsw_pq: and a
    // centroid distance per list they are in).
    double gathered = static_cast<double>(count) * params.filter_match_scan_cost;
    if (idx != nullptr && idx->spec().kind == index::IndexKind::kIvfHnswPq) {
      gathered += std::min<double>(static_cast<double>(count), idx->spec().nlist);
    }
    const double match_scan_cost = kp + gathered / per_read;
    if ((count <= params.k ||
         (static_cast<double>(count) <= std::min(preview_cost, match_scan_cost) &&
          count <= params.filter_exact_max)) &&
        !params.preview_only) {
      strategy = FilterStrategy::kExact;
    } else if (share >= params.filter_broad_share) {
      strategy = FilterStrategy::kPostFilter;
    } else if (match_scan_cost <= preview_cost) {
      strategy = FilterStrategy::kMatchScan;
    } else {
      strategy = FilterStrategy::kFilteredPreview;
    }
  }
  if (count == 0) {
    result->hits.clear();
    stats->filter_strategy = strategy;
    return absl::OkStatus();
  }
  if (strategy == FilterStrategy::kExact) return ExactOverMatches(query, params, result, ctx);

  Scratch& s = ThreadScratch();
  const size_t kprime = params.preview_only ? params.k : std::max(params.k, params.rerank_candidates);
  const size_t need = std::min<uint64_t>(kprime, count);
  // The pool: the preview lists up to twice K'; where the filter fights
  // the vectors (below), the fullview reads the K' best at once and the
  // rest only where the code's errors seen in this query say one could
  // still be among the best k (the re-rank that stops early,
  // rerank_stop_sd; kFilteredStopSd unless asked). Such a query's
  // neighbours lie farther out than an unfiltered one's, where the preview
  // ranks less well: K' calibrated for unfiltered queries missed them
  // (MNIST, the query's own class excluded, K' 10: recall 0.94; with the
  // pool 0.99 at 13 reads).
  const size_t pool =
      params.preview_only
          ? kprime
          : std::max(kprime, std::min<size_t>(2 * kprime, std::max(kprime, size_t{ctx.limits.max_rerank})));
  SearchParams p = params;
  p.rerank_candidates = static_cast<uint32_t>(pool);
  // The filter's share among the plain preview's candidates (post_filter).
  double plain_local_share = 1.0;
  if (strategy == FilterStrategy::kMatchScan) {
    // Every matching code scored: the K' best of all the matches by the
    // preview's distance (as many as match when fewer).
    stats->filter_strategy = FilterStrategy::kMatchScan;
    p.filter = nullptr;  // the matches are live ones
    const double index_share =
        static_cast<double>(count) / static_cast<double>(std::max<uint64_t>(1, idx->size()));
    stats->candidates = 0;
    ZOOM_RETURN_IF_ERROR(Preview(*idx, query, p, &s.candidates, stats, params.match, index_share,
                                 /*match_scan=*/true));
  }
  if (strategy == FilterStrategy::kPostFilter) {
    // The plain preview (liveness only), K' oversampled by 1 / share; the
    // matching candidates go on to the fullview.
    stats->filter_strategy = FilterStrategy::kPostFilter;
    // Within the server's limits (the fallbacks below cover what it misses).
    const double over = std::min(64.0, 1.0 / std::max(share, 1e-9));
    p.rerank_candidates = static_cast<uint32_t>(std::min<double>(
        std::ceil(static_cast<double>(kprime) * over * 1.2),
        std::max<double>(kprime, ctx.limits.max_rerank)));
    if (idx->spec().kind == index::IndexKind::kHnswPq) {
      p.ef = std::max<uint32_t>(
          p.ef, std::min<uint32_t>(p.rerank_candidates, std::max(p.ef, ctx.limits.max_ef)));
    }
    const bool preview_only = p.preview_only;
    p.preview_only = false;
    ZOOM_RETURN_IF_ERROR(Preview(*idx, query, p, &s.candidates, stats));
    p.preview_only = preview_only;
    size_t kept = 0, matching = 0;
    for (const index::Neighbor& nb : s.candidates) {
      const bool in = params.match->Contains(nb.id);
      matching += in ? 1 : 0;
      if (in && kept < pool) s.candidates[kept++] = nb;
    }
    if (!s.candidates.empty()) {
      plain_local_share =
          static_cast<double>(matching) / static_cast<double>(s.candidates.size());
    }
    s.candidates.resize(kept);
    stats->candidates = kept;
    if (kept < need) {
      ++stats->filter_expansions;
      strategy = FilterStrategy::kFilteredPreview;  // too few: the filtered preview
    }
  }
  if (strategy == FilterStrategy::kFilteredPreview) {
    // The preview admits matching ids only (hnsw_pq: the graph walk goes
    // through the others; ivf_hnsw_pq: the list scan skips them), widened
    // until it finds K' of them.
    stats->filter_strategy = FilterStrategy::kFilteredPreview;
    p = params;
    p.filter = nullptr;  // the matches are live ones
    p.rerank_candidates = static_cast<uint32_t>(pool);
    const double index_share =
        static_cast<double>(count) / static_cast<double>(std::max<uint64_t>(1, idx->size()));
    const bool ivf = idx->spec().kind == index::IndexKind::kIvfHnswPq;
    const uint32_t nlist = std::max<uint32_t>(1, idx->spec().nlist);
    if (!ivf) {
      // The two-hop walk (index_share < filter_two_hop_share) scores matching nodes
      // only, a small part of what the plain walk scores to fill the same
      // ef (about ef / share nodes), and ranks them less well at equal ef:
      // it gets twice the candidate list.
      const double twice = index_share < params.filter_two_hop_share ? 2.0 : 1.0;
      p.ef = std::max<uint32_t>(p.ef, static_cast<uint32_t>(twice * static_cast<double>(kprime)));
      p.ef = std::min(p.ef, std::max(params.ef, ctx.limits.max_ef));
    }
    if (ivf && share < 1.0) {
      // A first guess: nprobe / sqrt(share) lists (the filtered top-k lie
      // farther out, in more lists: measured on GloVe, a guess of only the
      // lists holding 1.5 K' matching points, were they spread evenly,
      // lost recall at 1% shares), and at least those.
      const double guess = std::ceil(std::max(
          p.nprobe / std::max(std::sqrt(share), 1e-3),
          1.5 * static_cast<double>(kprime) * nlist / static_cast<double>(count)));
      p.nprobe = static_cast<uint32_t>(std::min<double>(nlist, std::max<double>(p.nprobe, guess)));
    }
    stats->candidates = 0;
    ZOOM_RETURN_IF_ERROR(Preview(*idx, query, p, &s.candidates, stats, params.match, index_share));
    const uint32_t max_ef = std::max(params.ef, ctx.limits.max_ef);
    for (int round = 0; s.candidates.size() < need && round < 6; ++round) {
      if (ivf && p.nprobe >= nlist) break;
      if (!ivf && p.ef >= max_ef) break;
      if (absl::Status stop = CheckStop(ctx); !stop.ok()) {
        if (ctx.allow_partial && stop.code() == absl::StatusCode::kDeadlineExceeded) break;
        return stop;
      }
      ++stats->filter_expansions;
      if (ivf) {
        const double found = std::max<double>(1, s.candidates.size());
        const double grow = std::max(2.0, 1.5 * static_cast<double>(need) / found);
        p.nprobe = static_cast<uint32_t>(std::min<double>(nlist, std::ceil(p.nprobe * grow)));
        p.ef = std::max(p.ef, p.nprobe);
      } else {
        p.ef = static_cast<uint32_t>(std::min<uint64_t>(uint64_t{p.ef} * 2, max_ef));
      }
      stats->candidates = 0;
      ZOOM_RETURN_IF_ERROR(
          Preview(*idx, query, p, &s.candidates, stats, params.match, index_share));
    }
  }
  // The filter fights the vectors where a ring found better candidates than
  // the lists before it, or where its share among the codes scanned near
  // the query (or the plain preview's candidates) is well below its global
  // share: then the pool is read. The planner's first guess of lists
  // assumes matches spread evenly; for an uncorrelated filter the first
  // ring finds nothing better and a second round of reads would only cost
  // (measured on GloVe: 0.5-0.6x the QPS at a 60% tag with the pool read
  // for every filtered query).
  const double local_share =
      stats->filter_tested > 0
          ? static_cast<double>(stats->filter_matched) / static_cast<double>(stats->filter_tested)
          : plain_local_share;
  bool fights = false;
  if (idx->spec().kind == index::IndexKind::kIvfHnswPq &&
      (strategy == FilterStrategy::kFilteredPreview || strategy == FilterStrategy::kPostFilter)) {
    // The lists scanned so far: the filtered preview's widened nprobe, or
    // the plain preview's.
    const double index_share =
        static_cast<double>(count) / static_cast<double>(std::max<uint64_t>(1, idx->size()));
    SearchParams r = params;
    r.filter = nullptr;  // the matches are live ones
    r.rerank_candidates = static_cast<uint32_t>(pool);
    bool widened = false;
    ZOOM_RETURN_IF_ERROR(FilteredRings(*idx, query, r, p.nprobe, index_share, &s.candidates,
                                       stats, ctx, &widened));
    fights = widened || local_share < kRingLocalShare * share;
  }
  p.filter = params.match;
  size_t first_batch = 0;
  if (fights) {
    // The pool: K' read at once, the rest in rounds where in doubt.
    p.rerank_candidates = static_cast<uint32_t>(pool);
    if (p.rerank_stop_sd <= 0) p.rerank_stop_sd = kFilteredStopSd;
    first_batch = kprime;
  } else {
    // Where the filter does not fight the vectors the pool's second round
    // of reads only cost (a second I/O wait: 0.5-0.6x the QPS on GloVe's
    // uncorrelated tags): K' as calibrated.
    p.rerank_candidates = static_cast<uint32_t>(kprime);
    if (s.candidates.size() > kprime) s.candidates.resize(kprime);
  }
  Fullview fv;
  ZOOM_RETURN_IF_ERROR(FullviewStart(p, ctx, s.candidates, result, &fv, first_batch));
  ZOOM_RETURN_IF_ERROR(FullviewEnd(query, p, s.candidates, result, &fv, /*overlapped_us=*/0));
  if (result->hits.size() < want && !stats->degraded) {
    // The preview could not find k matching points (a filter the graph
    // does not connect): exact over the matches, never fewer than k.
    ++stats->filter_expansions;
    return ExactOverMatches(query, params, result, ctx);  // adds to the stats
  }
  return absl::OkStatus();
}

absl::Status SearchEngine::FilteredRings(const index::VectorIndex& idx, const float* query,
                                         const SearchParams& params, uint32_t probed,
                                         double index_share,
                                         std::vector<index::Neighbor>* candidates,
                                         QueryStats* stats, const QueryContext& ctx,
                                         bool* widened) const {
  *widened = false;
  const uint32_t nlist = std::max<uint32_t>(1, idx.spec().nlist);
  const size_t kprime = std::max(params.k, params.rerank_candidates);
  const size_t k = std::max<size_t>(1, params.k);
  std::vector<index::Neighbor> ring;
  SearchParams p = params;
  while (probed < nlist) {
    if (absl::Status stop = CheckStop(ctx); !stop.ok()) {
      if (ctx.allow_partial && stop.code() == absl::StatusCode::kDeadlineExceeded) break;
      return stop;
    }
    // The k-th best preview distance so far: a ring counts when it beats it.
    std::sort(candidates->begin(), candidates->end());
    const float kth = candidates->size() >= k ? (*candidates)[k - 1].distance
                                              : std::numeric_limits<float>::infinity();
    p.nprobe = static_cast<uint32_t>(std::min<uint64_t>(nlist, uint64_t{std::max(probed, 1u)} * 2));
    p.ef = std::max(p.ef, p.nprobe);
    ++stats->filter_expansions;
    const uint64_t before = stats->candidates;
    ZOOM_RETURN_IF_ERROR(Preview(idx, query, p, &ring, stats, params.match, index_share,
                                 /*match_scan=*/false, /*first_probe=*/probed));
    stats->candidates = before;
    probed = p.nprobe;
    size_t better = 0;
    for (const index::Neighbor& nb : ring) better += nb.distance < kth ? 1 : 0;
    candidates->insert(candidates->end(), ring.begin(), ring.end());
    std::sort(candidates->begin(), candidates->end());
    if (candidates->size() > kprime) candidates->resize(kprime);
    if (better == 0) break;
    *widened = true;
  }
  stats->candidates = candidates->size();
  return absl::OkStatus();
}

}  // namespace zoom::server
