// SearchEngine's filtered path (search_engine.h): the planner's one choice
// (exact over the matches, or the index's own strategy:
// index::VectorIndex::Search with the matches allowed) and the exact search
// over the matches. The rest of the query path is in search_engine.cc.
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

// A filtered search's re-rank beyond its first K' reads (where the filter
// fights the vectors) stops where a candidate's preview distance less the
// mean + 2 sd of the errors seen is past the k-th exact distance: ~lossless
// against reading the whole pool (SearchParams::rerank_stop_sd's
// measurements).
constexpr double kFilteredStopSd = 2.0;

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
  Scorer(metric_).PrepareQuery(s.query.data(), d);
  Stopwatch sw;
  std::vector<Scored>& heap = s.scored;  // worst on top
  heap.clear();
  // The matching ids' full vectors, read in batches of kChunk (one batch
  // of reads each: the exact strategy runs for few matches).
  constexpr size_t kChunk = 4096;
  std::vector<InternalId> ids;
  ids.reserve(std::min<uint64_t>(kChunk, ctx.match->size()));
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
  ctx.match->ForEach([&](InternalId id) {
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

absl::Status SearchEngine::StartFiltered(const index::VectorIndex* idx, const float* query,
                                         const SearchParams& params, const QueryContext& ctx,
                                         QueryResult* result, Run* run) const {
  QueryStats* stats = &result->stats;
  const uint64_t count = ctx.match->Count();
  stats->filter_matches = count;
  run->want = std::min<uint64_t>(params.k, count);
  FilterStrategy strategy = params.force_strategy;
  if (idx == nullptr) strategy = FilterStrategy::kExact;
  index::AllowedIds allowed;
  allowed.ids.words = ctx.match->words().data();
  allowed.ids.size = ctx.match->size();
  allowed.count = count;
  const index::IndexSearchParams ip = IndexParams(params, ctx);
  index::SearchContext ic = IndexContext(params, ctx, stats);
  if (strategy == FilterStrategy::kNone) {
    // The one choice left here: exact reads `count` vectors; the index's
    // strategy K' plus its code distances, in reads. (preview_only: RAM
    // only, so not the exact strategy, which reads the matching vectors,
    // while an index exists.)
    const size_t kp = std::max(params.k, params.rerank_candidates);
    const index::CostEstimate est = idx->EstimateCost(kp, ip, allowed, ic);
    const double index_cost =
        static_cast<double>(kp) + est.codes / std::max(options_.filter_codes_per_read, 1.0);
    strategy = est.strategy;
    if ((count <= params.k ||
         (static_cast<double>(count) <= index_cost && count <= options_.filter_exact_max)) &&
        !params.preview_only) {
      strategy = FilterStrategy::kExact;
    }
  }
  if (count == 0) {
    stats->filter_strategy = strategy;
    run->answered = true;
    return absl::OkStatus();
  }
  if (strategy == FilterStrategy::kExact) {
    run->exact = Run::Exact::kMatches;
    return absl::OkStatus();
  }
  const size_t kprime =
      params.preview_only ? params.k : std::max(params.k, params.rerank_candidates);
  // The pool: the index may list up to twice K'; where the filter fights
  // the vectors (the index says), the fullview reads the K' best at once
  // and the rest only where the code's errors seen in this query say one
  // could still be among the best k (the re-rank that stops early,
  // rerank_stop_sd; kFilteredStopSd unless asked). Such a query's
  // neighbours lie farther out than an unfiltered one's, where the preview
  // ranks less well: K' calibrated for unfiltered queries missed them
  // (MNIST, the query's own class excluded, K' 10: recall 0.94; with the
  // pool 0.99 at 13 reads).
  const size_t pool = params.preview_only
                          ? kprime
                          : std::max(kprime, std::min<size_t>(2 * kprime,
                                                              std::max(kprime, size_t{ctx.limits.max_rerank})));
  ic.force = strategy;
  ic.pool = pool;
  Stopwatch sw;
  ZOOM_RETURN_IF_ERROR(idx->Search(query, kprime, ip, allowed, &ic, &run->candidates));
  stats->preview_us += sw.ElapsedMicros();
  run->stopped = ic.stopped;
  SearchParams& p = run->params;
  if (ic.fights) {
    // The pool: K' read at once, the rest in rounds where in doubt.
    p.rerank_candidates = static_cast<uint32_t>(pool);
    if (p.rerank_stop_sd <= 0) p.rerank_stop_sd = kFilteredStopSd;
    run->first_batch = kprime;
  } else {
    // Where the filter does not fight the vectors the pool's second round
    // of reads only cost (a second I/O wait: 0.5-0.6x the QPS on GloVe's
    // uncorrelated tags): K' as calibrated.
    p.rerank_candidates = static_cast<uint32_t>(kprime);
    if (run->candidates.size() > kprime) run->candidates.resize(kprime);
  }
  PlanRunBand(idx, query, run);  // not where it reads in rounds
  return absl::OkStatus();
}

}  // namespace zoom::server
