#include "server/engine/search_engine.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/timer.h"
#include "common/vector_limits.h"
#include "index/distance_kernels.h"
#include "server/engine/search_scratch.h"

namespace zoom::server {

using search_internal::LookupCached;
using search_internal::Offer;
using search_internal::Scored;
using search_internal::Scratch;
using search_internal::StoreMisses;
using search_internal::TakeBest;
using search_internal::ThreadScratch;

namespace {

// With the band: whether the certain-in candidates are read too (their
// exact scores asked for, or their vectors).
bool ReadsCertainIn(const SearchParams& params) {
  return params.exact_scores || params.with_vectors;
}

}  // namespace

absl::Status SearchEngine::CheckStop(const QueryContext& ctx) {
  return index::CheckSearchStop(ctx.deadline, ctx.cancelled);
}

void SearchEngine::PreviewHits(const std::vector<index::Neighbor>& candidates, size_t k,
                               std::vector<Hit>* hits) const {
  // The index's distance as the metric's score (see vector_index.h).
  hits->clear();
  const Scorer scorer(metric_);
  for (size_t i = 0; i < candidates.size() && i < k; ++i) {
    const index::Neighbor& nb = candidates[i];
    Hit& h = hits->emplace_back();
    h.id = nb.id;
    h.score = scorer.Score(nb.distance);
  }
}

SearchEngine::SearchEngine(Metric metric, std::unique_ptr<storage::VectorStore> store,
                           std::unique_ptr<index::VectorIndex> index,
                           const EngineOptions& options)
    : metric_(metric), options_(options), store_(std::move(store)) {
  if (options.cache_bytes > 0) {
    cache_ = std::make_unique<VectorCache>(options.cache_bytes, store_->dim());
  }
  index_ = std::move(index);
}

SearchEngine::~SearchEngine() = default;

float SearchEngine::Score(const float* q, const float* x) const {
  const size_t d = store_->dim();
  const float s = metric_ == Metric::kL2 ? index::L2Sqr(q, x, d) : index::InnerProduct(q, x, d);
  // Vectors within the magnitude rule never overflow; a record stored by
  // an older zoomd may (+Inf - Inf): a NaN would break the ranking's order,
  // so it ranks last.
  return std::isnan(s) ? Scorer(metric_).Worst() : s;
}

absl::Status SearchEngine::Add(const float* vectors, size_t n) {
  if (n == 0) return absl::OkStatus();
  const size_t d = store_->dim();
  std::vector<float> prepared(vectors, vectors + n * d);
  if (metric_ == Metric::kCosine) {
    for (size_t i = 0; i < n; ++i) NormalizeL2(prepared.data() + i * d, d);
  }
  if (store_->dtype() == storage::DType::kFloat32) {
    ZOOM_RETURN_IF_ERROR(store_->Append(prepared.data(), n));
  } else {
    std::vector<uint8_t> bytes(n * d);
    for (size_t i = 0; i < n * d; ++i) {
      const float v = prepared[i];
      if (!(v >= 0 && v <= 255) || v != static_cast<float>(static_cast<int>(v))) {
        return absl::InvalidArgumentError(absl::StrCat(
            "uint8 collection: component ", i % d, " of vector ", i / d, " is ", v,
            "; expected an integer 0..255"));
      }
      bytes[i] = static_cast<uint8_t>(v);
    }
    ZOOM_RETURN_IF_ERROR(store_->Append(bytes.data(), n));
  }
  std::shared_ptr<index::VectorIndex> idx;
  {
    absl::MutexLock m(&index_mu_);
    idx = index_;
  }
  if (idx != nullptr) ZOOM_RETURN_IF_ERROR(idx->Add(prepared.data(), n));
  return absl::OkStatus();
}

absl::Status SearchEngine::SetIndex(std::unique_ptr<index::VectorIndex> index) {
  if (index == nullptr) return absl::InvalidArgumentError("null index");
  if (index->spec().dim != store_->dim()) {
    return absl::InvalidArgumentError("index dimension differs from the store's");
  }
  // Catch up with points stored after the index's snapshot.
  ZOOM_RETURN_IF_ERROR(CatchUp(index.get()));
  std::shared_ptr<index::VectorIndex> replaced;
  {
    absl::MutexLock m(&index_mu_);
    replaced = std::move(index_);
    index_ = std::move(index);
    if (replaced != nullptr) retired_.push_back(replaced);
  }
  // Freed here, or by the last search that still holds it.
  replaced.reset();
  return absl::OkStatus();
}

absl::Status SearchEngine::CatchUp(index::VectorIndex* index) const {
  const uint64_t have = index->size();
  const uint64_t total = store_->count();
  if (have > total) {
    return absl::FailedPreconditionError(absl::StrCat(
        "index covers ", have, " points but the store holds only ", total));
  }
  const size_t d = store_->dim();
  std::vector<InternalId> ids;
  std::vector<float> buf;
  for (uint64_t first = have; first < total; first += 1024) {
    const uint64_t m = std::min<uint64_t>(1024, total - first);
    ids.resize(m);
    for (uint64_t i = 0; i < m; ++i) ids[i] = static_cast<InternalId>(first + i);
    buf.resize(m * d);
    ZOOM_RETURN_IF_ERROR(store_->ReadVectors(ids, buf.data()));
    // A record stored before the magnitude rule (common/vector_limits.h)
    // is indexed as zeros: the preview cannot score it without overflow;
    // the fullview still reads the record itself.
    for (uint64_t i = 0; i < m; ++i) {
      float* v = buf.data() + i * d;
      if (!VectorMagnitudeOk(metric_ == Metric::kCosine ? Metric::kL2 : metric_, v, d)) {
        std::fill(v, v + d, 0.0f);
      }
    }
    ZOOM_RETURN_IF_ERROR(index->Add(buf.data(), m));
  }
  return absl::OkStatus();
}

std::shared_ptr<const index::VectorIndex> SearchEngine::index() const {
  absl::MutexLock m(&index_mu_);
  return index_;
}

uint64_t SearchEngine::IndexBytes() const {
  std::vector<std::shared_ptr<const index::VectorIndex>> held;
  {
    absl::MutexLock m(&index_mu_);
    if (index_ != nullptr) held.push_back(index_);
    auto alive = std::remove_if(retired_.begin(), retired_.end(),
                                [](const auto& w) { return w.expired(); });
    retired_.erase(alive, retired_.end());
    for (const auto& w : retired_) {
      if (auto p = w.lock()) held.push_back(std::move(p));
    }
  }
  uint64_t bytes = 0;
  for (const auto& p : held) bytes += p->ResidentBytes();
  return bytes;
}

absl::Status SearchEngine::ExactSearch(absl::Span<const float> query,
                                       const SearchParams& params, QueryResult* result,
                                       const QueryContext& ctx) const {
  result->hits.clear();
  result->stats = QueryStats();
  ZOOM_RETURN_IF_ERROR(ValidateQuery(metric_, dim(), query, params, ctx.limits));
  return ExactValid(query.data(), params, result, ctx);
}

absl::Status SearchEngine::ExactValid(const float* query, const SearchParams& params,
                                      QueryResult* result, const QueryContext& ctx) const {
  result->hits.clear();
  QueryStats* stats = &result->stats;
  stats->exact = true;
  const size_t d = store_->dim();
  Scratch& s = ThreadScratch();
  s.query.assign(query, query + d);
  Scorer(metric_).PrepareQuery(s.query.data(), d);
  const uint64_t n = store_->count();
  Stopwatch sw;
  std::vector<Scored>& heap = s.scored;  // worst on top
  heap.clear();
  constexpr uint64_t kChunk = 4096;
  for (uint64_t first = 0; first < n; first += kChunk) {
    if (absl::Status stop = CheckStop(ctx); !stop.ok()) {
      if (!ctx.allow_partial || stop.code() != absl::StatusCode::kDeadlineExceeded) {
        return stop;
      }
      stats->degraded = true;  // best of the vectors seen
      break;
    }
    const uint64_t m = std::min(kChunk, n - first);
    s.ids.resize(m);
    for (uint64_t i = 0; i < m; ++i) s.ids[i] = static_cast<InternalId>(first + i);
    s.vectors.resize(m * d);
    ZOOM_RETURN_IF_ERROR(store_->ReadVectors(s.ids, s.vectors.data(), stats));
    for (uint64_t i = 0; i < m; ++i) {
      if (ctx.deleted != nullptr && ctx.deleted->IsExcluded(s.ids[i])) continue;
      Offer(metric_, {s.ids[i], Score(s.query.data(), s.vectors.data() + i * d)}, params.k,
            &heap);
    }
  }
  TakeBest(metric_, &heap, heap.size(), &result->hits);
  stats->fullview_us += sw.ElapsedMicros();
  stats->candidates += n;
  return ReadHitVectors(params, result);
}

absl::Status SearchEngine::ReadHitVectors(const SearchParams& params, QueryResult* result) const {
  if (!params.with_vectors || result->hits.empty()) return absl::OkStatus();
  const size_t d = store_->dim();
  Scratch& s = ThreadScratch();
  const size_t n = result->hits.size();
  s.ids.resize(n);
  for (size_t i = 0; i < n; ++i) s.ids[i] = static_cast<InternalId>(result->hits[i].id);
  s.vectors.resize(n * d);
  ZOOM_RETURN_IF_ERROR(store_->ReadVectors(s.ids, s.vectors.data(), &result->stats));
  for (size_t i = 0; i < n; ++i) {
    result->hits[i].vector.assign(s.vectors.begin() + i * d, s.vectors.begin() + (i + 1) * d);
  }
  return absl::OkStatus();
}

absl::Status SearchEngine::Search(absl::Span<const float> query, const SearchParams& params,
                                  QueryResult* result, const QueryContext& ctx) const {
  result->hits.clear();
  result->stats = QueryStats();
  ZOOM_RETURN_IF_ERROR(ValidateQuery(metric_, dim(), query, params, ctx.limits));
  // A batch of one (its messages unprefixed).
  std::vector<QueryResult> one(1);
  one[0] = std::move(*result);
  absl::Status st = RunQueries(query.data(), 1, params, 1, &one, ctx);
  *result = std::move(one[0]);
  return st;
}

index::IndexSearchParams SearchEngine::IndexParams(const SearchParams& params,
                                                   const QueryContext& ctx) const {
  index::IndexSearchParams ip;
  ip.ef = params.ef;
  ip.nprobe = params.nprobe;
  ip.filter = ctx.deleted;
  ip.hidden = ctx.hidden;
  return ip;
}

index::SearchContext SearchEngine::IndexContext(const SearchParams& params,
                                                const QueryContext& ctx,
                                                QueryStats* stats) const {
  index::SearchContext ic;
  ic.deadline = ctx.deadline;
  ic.cancelled = ctx.cancelled;
  ic.allow_partial = ctx.allow_partial;
  ic.max_ef = std::max(params.ef, ctx.limits.max_ef);
  ic.max_candidates = ctx.limits.max_rerank;
  ic.live = ctx.live_points;
  ic.answer_k = params.k;
  ic.tuning = options_.filter;
  ic.force = params.force_strategy;
  ic.stats = stats;
  return ic;
}

absl::Status SearchEngine::Start(const index::VectorIndex* idx, const float* query,
                                 const SearchParams& params, const QueryContext& ctx,
                                 QueryResult* result, Run* run) const {
  result->hits.clear();
  run->params = params;
  run->first_batch = 0;
  run->exact = Run::Exact::kNone;
  run->answered = false;
  run->stopped = false;
  run->candidates.clear();
  if (ctx.match != nullptr) return StartFiltered(idx, query, params, ctx, result, run);
  if (idx == nullptr) {
    run->exact = Run::Exact::kAll;
    return absl::OkStatus();
  }
  // The preview: K' candidates from the index, widened by it while it
  // holds fewer than the query is owed (a layout its knobs do not reach:
  // duplicates that leave lists empty, a graph region cut off, two
  // antipodal clusters).
  run->want = std::min<uint64_t>(params.k, ctx.live_points);
  const size_t kprime =
      params.preview_only ? params.k : std::max(params.k, params.rerank_candidates);
  index::SearchContext ic = IndexContext(params, ctx, &result->stats);
  ic.need = run->want;
  Stopwatch sw;
  ZOOM_RETURN_IF_ERROR(
      idx->Search(query, kprime, IndexParams(params, ctx), {}, &ic, &run->candidates));
  result->stats.preview_us += sw.ElapsedMicros();
  run->stopped = ic.stopped;
  if (ctx.candidates_out != nullptr) *ctx.candidates_out = run->candidates;
  PlanRunBand(idx, query, run);
  return absl::OkStatus();
}

void SearchEngine::PlanRunBand(const index::VectorIndex* idx, const float* query,
                               Run* run) const {
  const SearchParams& p = run->params;
  run->band.on = false;
  if (idx == nullptr || p.band_confidence <= 0 || p.rerank_stop_sd > 0 || p.preview_only) return;
  search_internal::PlanBand(*idx, query, run->candidates, std::max<size_t>(1, p.k),
                            p.band_confidence, &run->band);
}

absl::Status SearchEngine::Submit(const QueryContext& ctx, QueryResult* result, Run* run,
                                  bool degrade) const {
  if (run->answered || run->exact != Run::Exact::kNone) return absl::OkStatus();
  return FullviewStart(run->params, ctx, run->candidates, result, &run->fv, run->first_batch,
                       degrade, &run->band);
}

absl::Status SearchEngine::Finish(const float* query, const QueryContext& ctx,
                                  QueryResult* result, Run* run, double overlapped_us) const {
  if (run->answered) return absl::OkStatus();
  const SearchParams& params = run->params;
  if (run->exact == Run::Exact::kAll) return ExactValid(query, params, result, ctx);
  if (run->exact == Run::Exact::kMatches) return ExactOverMatches(query, params, result, ctx);
  ZOOM_RETURN_IF_ERROR(FullviewEnd(query, params, ctx, run->candidates, result, &run->fv,
                                   overlapped_us, &run->band));
  QueryStats* stats = &result->stats;
  if (result->hits.size() >= run->want || stats->degraded) return absl::OkStatus();
  if (run->stopped) {
    stats->degraded = true;  // what was found, fewer than k
    return absl::OkStatus();
  }
  // The index could not find what the query is owed (a filter the graph
  // does not connect, a layout the widened knobs do not reach): brute
  // force, never fewer than k.
  ++stats->filter_expansions;
  if (ctx.match != nullptr) return ExactOverMatches(query, params, result, ctx);
  return ExactValid(query, params, result, ctx);  // adds to the stats
}

absl::Status SearchEngine::FullviewStart(const SearchParams& params, const QueryContext& ctx,
                                         const std::vector<index::Neighbor>& candidates,
                                         QueryResult* result, Fullview* fv,
                                         size_t first_batch, bool degrade,
                                         const search_internal::BandPlan* band) const {
  result->hits.clear();
  QueryStats* stats = &result->stats;
  fv->answered = false;
  fv->pending.reset();
  const size_t d = store_->dim();
  Scratch& s = ThreadScratch();
  if (params.preview_only) {
    PreviewHits(candidates, params.k, &result->hits);
    fv->answered = true;
    return ReadHitVectors(params, result);
  }
  if (degrade && ctx.allow_partial) {
    PreviewHits(candidates, params.k, &result->hits);
    stats->degraded = true;
    fv->answered = true;
    return ReadHitVectors(params, result);
  }
  if (ctx.deadline != absl::InfiniteFuture() || ctx.cancelled != nullptr) {
    absl::Status stop = CheckStop(ctx);
    if (stop.ok() && ctx.allow_partial && ctx.deadline != absl::InfiniteFuture()) {
      // Would the fullview finish in time? Judge by its recent average.
      const float avg = fullview_avg_us_.load(std::memory_order_relaxed);
      if (absl::Now() + absl::Microseconds(avg) > ctx.deadline) {
        stop = absl::DeadlineExceededError("no time left for the fullview");
      }
    }
    if (!stop.ok()) {
      if (!ctx.allow_partial || stop.code() != absl::StatusCode::kDeadlineExceeded) {
        return stop;
      }
      PreviewHits(candidates, params.k, &result->hits);
      stats->degraded = true;
      fv->answered = true;
      return ReadHitVectors(params, result);
    }
  }
  // 2. fullview: one batch of reads, submitted here, completed by
  //    FullviewEnd (what runs between is not counted in fullview_us).
  fv->timer.Reset();
  const size_t n = candidates.size();
  s.ids.resize(n);
  size_t first = n;
  if (band != nullptr && band->on) {
    // The band only (and the certain-in when their exact scores are
    // wanted), in the preview's order; s.ids holds just those.
    const bool read_in = ReadsCertainIn(params);
    size_t j = 0;
    for (size_t i = 0; i < n; ++i) {
      const search_internal::BandClass c = band->cls[i];
      if (c == search_internal::BandClass::kRead ||
          (read_in && c == search_internal::BandClass::kIn)) {
        s.ids[j++] = candidates[i].id;
      }
    }
    s.ids.resize(j);
    first = j;
    stats->certain_in += band->in;
    stats->certain_out += band->out;
  } else {
    for (size_t i = 0; i < n; ++i) s.ids[i] = candidates[i].id;
    // The re-rank that stops early reads the k best by the preview first.
    if (params.rerank_stop_sd > 0) {
      first = std::min<size_t>(n, first_batch > 0 ? first_batch : params.k);
    }
  }
  s.vectors.resize(s.ids.size() * d);
  fv->submitted = first;
  if (first > 0 || band == nullptr || !band->on) ++stats->fullview_rounds;
  VectorCache* cache = ctx.maintenance ? nullptr : cache_.get();
  if (cache == nullptr) {
    fv->pending = store_->SubmitReadVectors(absl::MakeConstSpan(s.ids.data(), first),
                                            s.vectors.data(), stats);
  } else {
    s.round_pos.resize(first);
    std::iota(s.round_pos.begin(), s.round_pos.end(), 0u);
    LookupCached(cache, d, s.round_pos, s, stats);
    fv->pending = store_->SubmitReadVectors(s.misses, s.miss_vectors.data(), stats);
  }
  return absl::OkStatus();
}

absl::Status SearchEngine::FullviewEnd(const float* query, const SearchParams& params,
                                       const QueryContext& ctx,
                                       const std::vector<index::Neighbor>& candidates,
                                       QueryResult* result, Fullview* fv,
                                       double overlapped_us,
                                       const search_internal::BandPlan* band) const {
  if (fv->answered) return absl::OkStatus();
  QueryStats* stats = &result->stats;
  const size_t d = store_->dim();
  Scratch& s = ThreadScratch();
  ZOOM_RETURN_IF_ERROR(fv->pending->Wait());
  fv->pending.reset();
  if (cache_ != nullptr && !ctx.maintenance) StoreMisses(cache_.get(), d, s);
  const double fullview_us = std::max(0.0, fv->timer.ElapsedMicros() - overlapped_us);
  stats->fullview_us += fullview_us;
  if (overlapped_us == 0 && !ctx.maintenance) {
    // Exponential moving average of plain fullviews (an overlapped one's
    // reads partly finish during the other work, so it would understate
    // what a lone query waits); races between threads only blur it.
    const float old = fullview_avg_us_.load(std::memory_order_relaxed);
    fullview_avg_us_.store(old == 0 ? static_cast<float>(fullview_us)
                                    : 0.9f * old + 0.1f * static_cast<float>(fullview_us),
                           std::memory_order_relaxed);
  }
  // 3. exact re-rank.
  Stopwatch sw;
  const size_t n = candidates.size();
  const size_t first = fv->submitted;
  s.query.assign(query, query + d);
  Scorer(metric_).PrepareQuery(s.query.data(), d);
  s.scored.resize(first);
  for (size_t i = 0; i < first; ++i) {
    s.scored[i] = {s.ids[i], Score(s.query.data(), s.vectors.data() + i * d)};
  }
  const bool banded = band != nullptr && band->on;
  if (!banded && first < n) {
    stats->rerank_us += sw.ElapsedMicros();
    ZOOM_RETURN_IF_ERROR(FullviewRounds(params, ctx, candidates, stats, first));
    sw.Reset();
  }
  if (banded && !ReadsCertainIn(params) && band->in > 0) {
    // The certain-in, unread, with their estimates; the rest of the k from
    // the band by exact score; best first.
    const Scorer scorer(metric_);
    const size_t in = std::min<size_t>(band->in, params.k);
    TakeBest(metric_, &s.scored, params.k - in, &result->hits);
    for (size_t i = 0, added = 0; i < n && added < in; ++i) {
      if (band->cls[i] != search_internal::BandClass::kIn) continue;
      Hit& h = result->hits.emplace_back();
      h.id = candidates[i].id;
      h.score = scorer.Score(band->estimate[i]);
      h.estimated = true;
      ++added;
    }
    std::sort(result->hits.begin(), result->hits.end(), [&scorer](const Hit& a, const Hit& b) {
      return scorer.Before(a.score, a.id, b.score, b.id);
    });
  } else {
    TakeBest(metric_, &s.scored, params.k, &result->hits);
  }
  if (params.with_vectors) {
    // The hits' vectors from the fullview (ids are distinct: find each's
    // position among the candidates read; with_vectors reads every hit).
    const size_t read = s.ids.size();
    for (Hit& h : result->hits) {
      size_t pos = 0;
      while (pos < read && s.ids[pos] != h.id) ++pos;
      h.vector.assign(s.vectors.begin() + pos * d, s.vectors.begin() + (pos + 1) * d);
    }
  }
  stats->rerank_us += sw.ElapsedMicros();
  return absl::OkStatus();
}

absl::Status SearchEngine::FullviewRounds(const SearchParams& params, const QueryContext& ctx,
                                          const std::vector<index::Neighbor>& candidates,
                                          QueryStats* stats, size_t first) const {
  // s.scored holds the exact scores of candidates [0, first), in order.
  Scratch& s = ThreadScratch();
  const size_t n = candidates.size();
  const size_t d = store_->dim();
  const size_t k = std::max<size_t>(1, params.k);
  // The index's distance of an exact score.
  const Scorer scorer(metric_);
  const auto distance = [&scorer](float score) { return scorer.Distance(score); };
  VectorCache* cache = ctx.maintenance ? nullptr : cache_.get();
  s.read.assign(n, 0);
  double sum = 0, sum_sq = 0;
  size_t seen = 0;
  const auto observe = [&](size_t pos, float score) {
    s.read[pos] = 1;
    const double e = static_cast<double>(candidates[pos].distance) - distance(score);
    sum += e;
    sum_sq += e * e;
    ++seen;
  };
  for (size_t i = 0; i < first; ++i) observe(i, s.scored[i].score);
  for (;;) {
    // The k-th best exact distance so far (infinite while fewer than k
    // are read: then every candidate is still in play).
    double tau = std::numeric_limits<double>::infinity();
    if (s.scored.size() >= k) {
      s.kth.resize(s.scored.size());
      for (size_t i = 0; i < s.scored.size(); ++i) {
        s.kth[i] = static_cast<float>(distance(s.scored[i].score));
      }
      std::nth_element(s.kth.begin(), s.kth.begin() + (k - 1), s.kth.end());
      tau = s.kth[k - 1];
    }
    const double mean = sum / static_cast<double>(seen);
    const double var = std::max(0.0, sum_sq / static_cast<double>(seen) - mean * mean);
    const double margin = mean + params.rerank_stop_sd * std::sqrt(var);
    s.round_pos.clear();
    for (size_t i = 0; i < n; ++i) {
      if (!s.read[i] && static_cast<double>(candidates[i].distance) - margin < tau) {
        s.round_pos.push_back(static_cast<uint32_t>(i));
      }
    }
    if (s.round_pos.empty()) return absl::OkStatus();
    // One more batch: into the candidates' own slots of s.vectors.
    Stopwatch io;
    ++stats->fullview_rounds;
    LookupCached(cache, d, s.round_pos, s, stats);
    ZOOM_RETURN_IF_ERROR(store_->SubmitReadVectors(s.misses, s.miss_vectors.data(), stats)->Wait());
    StoreMisses(cache, d, s);
    stats->fullview_us += io.ElapsedMicros();
    Stopwatch sw;
    for (uint32_t pos : s.round_pos) {
      const float score = Score(s.query.data(), s.vectors.data() + size_t{pos} * d);
      s.scored.push_back({s.ids[pos], score});
      observe(pos, score);
    }
    stats->rerank_us += sw.ElapsedMicros();
  }
}

absl::Status SearchEngine::SearchBatch(absl::Span<const float> queries, size_t nq,
                                       const SearchParams& params, int threads,
                                       std::vector<QueryResult>* results,
                                       const QueryContext& ctx) const {
  results->assign(nq, {});
  if (nq == 0) return absl::OkStatus();
  if (queries.size() % nq != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the batch's ", queries.size(), " floats do not split into ", nq, " queries"));
  }
  const size_t qd = queries.size() / nq;
  for (size_t q = 0; q < nq; ++q) {
    if (absl::Status st =
            ValidateQuery(metric_, dim(), queries.subspan(q * qd, qd), params, ctx.limits);
        !st.ok()) {
      return absl::Status(st.code(), absl::StrCat("query #", q, ": ", st.message()));
    }
  }
  return RunQueries(queries.data(), nq, params, threads, results, ctx);
}

absl::Status SearchEngine::RunQueries(const float* data, size_t nq, const SearchParams& params,
                                      int threads, std::vector<QueryResult>* results,
                                      const QueryContext& ctx) const {
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  absl::Mutex mu;
  absl::Status first_error;
  const auto fail = [&](const absl::Status& st) {
    absl::MutexLock lock(&mu);
    if (first_error.ok()) first_error = st;
    failed = true;
  };
  const size_t d = dim();
  const std::shared_ptr<const index::VectorIndex> idx = params.exact ? nullptr : index();
  // allow_partial with a deadline: the batch must answer before it, as a
  // lone search does. When the queries left, at the batch's pace so far,
  // would outlast it, the rest are answered by their previews (degraded).
  const bool budgeted = nq > 1 && ctx.allow_partial && ctx.deadline != absl::InfiniteFuture();
  const absl::Time started = absl::Now();
  std::atomic<size_t> done{0};
  std::atomic<bool> degrade_rest{false};
  const auto out_of_time = [&](size_t q) {
    if (!budgeted) return false;
    if (degrade_rest.load(std::memory_order_relaxed)) return true;
    const size_t finished = done.load(std::memory_order_relaxed);
    if (finished == 0) return false;  // no pace yet: the query's own check decides
    const absl::Duration pace = (absl::Now() - started) / static_cast<double>(finished);
    if (absl::Now() + pace * static_cast<double>(nq - std::min(nq, q)) < ctx.deadline) {
      return false;
    }
    degrade_rest = true;
    return true;
  };
  // Pipelined: query q's reads are in flight while query q2 starts (its
  // candidates found in RAM; an exact answer waits for Finish).
  auto work = [&] {
    Run runs[2];
    Run* cur = &runs[0];
    Run* nxt = &runs[1];
    size_t q = next.fetch_add(1);
    if (q >= nq) return;
    absl::Status st = Start(idx.get(), data + q * d, params, ctx, &(*results)[q], cur);
    while (st.ok() && !failed.load()) {
      const size_t q2 = next.fetch_add(1);
      const bool more = q2 < nq;
      // Submit query q's reads, start query q2 while they fly, then
      // complete q (two-phase I/O: no callback into the engine).
      st = Submit(ctx, &(*results)[q], cur, out_of_time(q));
      if (!st.ok()) break;
      absl::Status st2;
      double overlapped_us = 0;
      if (more) {
        Stopwatch t;
        st2 = Start(idx.get(), data + q2 * d, params, ctx, &(*results)[q2], nxt);
        if (!cur->fv.answered) overlapped_us = t.ElapsedMicros();
      }
      st = Finish(data + q * d, ctx, &(*results)[q], cur, overlapped_us);
      done.fetch_add(1, std::memory_order_relaxed);
      if (!st.ok()) break;
      if (!more) return;
      st = st2;
      std::swap(cur, nxt);
      q = q2;
    }
    if (!st.ok()) fail(st);
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& th : pool) th.join();
  return first_error;
}

}  // namespace zoom::server
