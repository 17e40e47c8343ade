// File: server/engine/search_engine.h
//
// SearchEngine: one collection's query path end to end, the only place where
// index/ and storage/ meet (no gRPC here, so benchmarks and tests link it):
//
//   1. preview   VectorIndex::Search -> K' = rerank_candidates ids (RAM);
//                with a filter (QueryContext::match) the index runs its own
//                strategy over the matches (index/planned_search.h), unless
//                the engine's one choice says reading every match is
//                cheaper (VectorIndex::EstimateCost against
//                EngineOptions::filter_codes_per_read)
//   2. fullview  VectorStore::SubmitReadVectors(ids) -> one batch of O_DIRECT
//                reads (two-phase: submitted, then waited for)
//   3. rerank    exact distances over the K' full vectors -> top k; fewer
//                hits than the query is owed (min(k, live points or
//                matches)): brute force
//
// Search is a SearchBatch of one: one per-query run (Start, Submit,
// Finish), which a batch pipelines.
//
// Without an index (too few points to train one yet) search is exact over
// the stored vectors. Scores are the metric's own: squared L2 distance
// (ascending), inner product or cosine similarity (descending).
//
// Thread safety: Search / SearchBatch are const and safe from many threads,
// also while the single writer calls Add or SetIndex.
#ifndef ZOOM_SERVER_ENGINE_SEARCH_ENGINE_H_
#define ZOOM_SERVER_ENGINE_SEARCH_ENGINE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/ids.h"
#include "common/metric.h"
#include "common/query_stats.h"
#include "common/timer.h"
#include "index/vector_index.h"
#include "server/engine/query.h"
#include "server/engine/search_band.h"
#include "server/engine/vector_cache.h"
#include "storage/vector_store.h"

namespace zoom::server {

struct EngineOptions {
  // DRAM cache of hot full vectors in front of the SSD, in bytes.
  // Default 0: off (every fullview candidate is read from the SSD).
  uint64_t cache_bytes = 0;
  // The filtered search's one choice left to the engine: exact over the m
  // matches costs m reads; the index's strategy K' reads plus its code
  // distances (index::VectorIndex::EstimateCost), a read costing as much as
  // filter_codes_per_read of them. Measured by zoombench --benchmarks=filter
  // here (an SSD read ~18 us in a batch, a code ~30 ns): on GloVe-100 200K
  // (ivf_hnsw_pq) exact wins at ~20 matches (0.43 ms vs 0.87 ms), loses at
  // ~195 (3.4 ms vs 0.9 ms). filter_exact_max caps the exact strategy.
  double filter_codes_per_read = 600;
  uint32_t filter_exact_max = 100000;
  // The index's filtered strategies' costs and switches.
  index::FilterTuning filter;
};

class SearchEngine {
 public:
  // `store` holds the full vectors (already normalised for cosine: use
  // Add). `index` may be null (exact search) and must cover ids
  // [0, index->size()) of the store.
  SearchEngine(Metric metric, std::unique_ptr<storage::VectorStore> store,
               std::unique_ptr<index::VectorIndex> index,
               const EngineOptions& options = {});
  ~SearchEngine();

  Metric metric() const { return metric_; }
  uint32_t dim() const { return store_->dim(); }
  uint64_t size() const { return store_->count(); }
  const storage::VectorStore& store() const { return *store_; }
  // The current index, or null; kept alive by the pointer. A replaced
  // index is freed as soon as no search (or caller) holds it.
  std::shared_ptr<const index::VectorIndex> index() const;
  // RAM of the indexes still alive: the current one and replaced ones a
  // search still holds.
  uint64_t IndexBytes() const;
  // Bytes of the DRAM vector cache (0 when off).
  uint64_t CacheBytes() const { return cache_ ? cache_->ResidentBytes() : 0; }

  // Appends n vectors (n * dim floats; normalised here for cosine): durable
  // in the store, then indexed. Single writer.
  absl::Status Add(const float* vectors, size_t n);
  // Installs a newly built index covering ids [0, index->size()); points
  // added since are indexed first (CatchUp). Single writer.
  absl::Status SetIndex(std::unique_ptr<index::VectorIndex> index);
  // Indexes into `index` (one that is not serving: a build's, before its
  // SetIndex) the stored points it does not cover yet, [index->size(),
  // the store's count when it looked). Safe beside the single writer's
  // Add: a build catches up outside the writers' lock, so that the
  // install under it has only the last few points to add.
  absl::Status CatchUp(index::VectorIndex* index) const;

  // Up to k hits for `query` (dim floats), best first, with the query's
  // stats, into *result (replacing what it held). The one validation of a
  // query (ValidateQuery, under ctx.limits) happens here; its
  // InvalidArgument message is meant for the client as it is. Brute force (result->stats.exact) when
  // params.exact or there is no index. With params.with_vectors the hits
  // carry the vectors the fullview read (no second read).
  absl::Status Search(absl::Span<const float> query, const SearchParams& params,
                      QueryResult* result, const QueryContext& ctx = QueryContext()) const;
  // nq queries (queries.size() / nq floats each) on `threads` threads;
  // results resized to nq. Returns the first error (a query's invalid
  // vector as "query #i: ..."). Each thread pipelines its queries: the next
  // query's preview runs while the current one's fullview reads are in
  // flight (io_uring), so the device sees the reads of back-to-back
  // queries without the preview's gap. Results equal Search()'s; a query's
  // fullview_us excludes the overlapped preview. (A query cut short by its
  // deadline simply ends the overlap early.) With ctx.allow_partial and a
  // deadline the batch answers before it, as a lone search does: once the
  // queries left would outlast it at the batch's pace so far, they are
  // answered by their previews (stats.degraded). The index is looked up once
  // per batch: a SetIndex() during it is seen by the next batch.
  absl::Status SearchBatch(absl::Span<const float> queries, size_t nq,
                           const SearchParams& params, int threads,
                           std::vector<QueryResult>* results,
                           const QueryContext& ctx = QueryContext()) const;
  // Exact search over every stored vector (the oracle; what Search runs
  // without an index or with params.exact).
  absl::Status ExactSearch(absl::Span<const float> query, const SearchParams& params,
                           QueryResult* result, const QueryContext& ctx = QueryContext()) const;

  // The re-rank's exact score of stored vector `x` (dim floats) for query
  // `q` as prepared (Scorer::PrepareQuery); a NaN ranks last (Worst).
  float Score(const float* q, const float* x) const;

 private:
  // Ok, or why the query must stop now (deadline, cancellation).
  static absl::Status CheckStop(const QueryContext& ctx);
  void PreviewHits(const std::vector<index::Neighbor>& candidates, size_t k,
                   std::vector<Hit>* hits) const;
  // ExactSearch after validation.
  absl::Status ExactValid(const float* query, const SearchParams& params, QueryResult* result,
                          const QueryContext& ctx) const;
  // Brute force over the ids of ctx.match.
  absl::Status ExactOverMatches(const float* query, const SearchParams& params,
                                QueryResult* result, const QueryContext& ctx) const;
  // The hits' full vectors when asked for and no fullview supplied them.
  absl::Status ReadHitVectors(const SearchParams& params, QueryResult* result) const;
  // The index's view of a query: its knobs and its run.
  index::IndexSearchParams IndexParams(const SearchParams& params, const QueryContext& ctx) const;
  index::SearchContext IndexContext(const SearchParams& params, const QueryContext& ctx,
                                    QueryStats* stats) const;

  struct Fullview;
  // One query's run. Search is a batch of one; SearchBatch pipelines the
  // runs of a thread's queries (query i+1 started while query i's reads
  // fly). Start finds the candidates in RAM: the index's Search (with a
  // filter, after the planner's one choice: exact over the matches when
  // that reads less than the index's strategy would cost), or nothing when
  // the answer is exact (Finish computes it: it reads the store, which must
  // not happen while another query's reads fly). Submit sends the
  // fullview's reads, or answers from the preview (preview only, degraded).
  // Finish waits for them, re-ranks, and falls back to brute force when the
  // index found fewer hits than the query is owed (min(k, live points),
  // min(k, matches)): no search answers OK with fewer hits than it could.
  struct Run;
  absl::Status Start(const index::VectorIndex* idx, const float* query,
                     const SearchParams& params, const QueryContext& ctx, QueryResult* result,
                     Run* run) const;
  absl::Status StartFiltered(const index::VectorIndex* idx, const float* query,
                             const SearchParams& params, const QueryContext& ctx,
                             QueryResult* result, Run* run) const;
  absl::Status Submit(const QueryContext& ctx, QueryResult* result, Run* run,
                      bool degrade) const;
  absl::Status Finish(const float* query, const QueryContext& ctx, QueryResult* result,
                      Run* run, double overlapped_us) const;
  // nq validated queries on `threads` threads (SearchBatch's contract).
  absl::Status RunQueries(const float* queries, size_t nq, const SearchParams& params,
                          int threads, std::vector<QueryResult>* results,
                          const QueryContext& ctx) const;
  // The rest in two phases. FullviewStart: the deadline check, then the
  // fullview's reads submitted (storage::VectorStore::SubmitReadVectors;
  // cached vectors need none); or the answer at once (preview only,
  // degraded): fv->answered. FullviewEnd: waits for the reads and re-ranks
  // `candidates` exactly; `overlapped_us` of other work done in between is
  // not counted in fullview_us. Between the two the thread must not read
  // from this engine's store (the next query's preview may run).
  struct Fullview {
    bool answered = false;
    size_t submitted = 0;  // candidates [0, submitted) in the first batch
    std::unique_ptr<storage::VectorStore::PendingVectors> pending;
    Stopwatch timer;
  };
  struct Run {
    std::vector<index::Neighbor> candidates;
    SearchParams params;     // the fullview's (a filtered search's pool)
    size_t first_batch = 0;  // FullviewStart's
    search_internal::BandPlan band;  // band.on: the fullview reads the band only
    uint64_t want = 0;       // the hits the query is owed
    enum class Exact { kNone, kAll, kMatches } exact = Exact::kNone;  // Finish computes it
    bool answered = false;   // nothing left to do (no match)
    bool stopped = false;    // the index's widening stopped at the deadline
    Fullview fv;
  };
  // first_batch: with params.rerank_stop_sd, the candidates read at once
  // (0: params.k). degrade (with ctx.allow_partial): the preview's ranking
  // at once, degraded (a batch out of time).
  // band (when not null and on): read only its band (and its certain-in
  // with exact_scores or with_vectors); FullviewEnd adds the unread
  // certain-in with their estimates.
  absl::Status FullviewStart(const SearchParams& params, const QueryContext& ctx,
                             const std::vector<index::Neighbor>& candidates,
                             QueryResult* result, Fullview* fv, size_t first_batch = 0,
                             bool degrade = false,
                             const search_internal::BandPlan* band = nullptr) const;
  absl::Status FullviewEnd(const float* query, const SearchParams& params,
                           const QueryContext& ctx,
                           const std::vector<index::Neighbor>& candidates, QueryResult* result,
                           Fullview* fv, double overlapped_us,
                           const search_internal::BandPlan* band = nullptr) const;
  // Plans run->band after the preview (params.band_confidence > 0).
  void PlanRunBand(const index::VectorIndex* idx, const float* query, Run* run) const;
  // The rounds of the re-rank that stops early (SearchParams::
  // rerank_stop_sd), after the first batch of fv->submitted candidates is
  // scored into the thread's scratch.
  absl::Status FullviewRounds(const SearchParams& params, const QueryContext& ctx,
                              const std::vector<index::Neighbor>& candidates,
                              QueryStats* stats, size_t first) const;

  const Metric metric_;
  const EngineOptions options_;
  std::unique_ptr<storage::VectorStore> store_;
  mutable absl::Mutex index_mu_;
  std::shared_ptr<index::VectorIndex> index_ ABSL_GUARDED_BY(index_mu_);
  // Replaced indexes, for IndexBytes (expired ones are pruned there).
  mutable std::vector<std::weak_ptr<const index::VectorIndex>> retired_ ABSL_GUARDED_BY(index_mu_);
  std::unique_ptr<VectorCache> cache_;  // null when off
  // Moving average of the fullview's wall time (µs), for allow_partial.
  mutable std::atomic<float> fullview_avg_us_{0};
};

}  // namespace zoom::server

#endif  // ZOOM_SERVER_ENGINE_SEARCH_ENGINE_H_
