// File: server/engine/query.h
//
// The shapes of one query on its way from the gRPC adapter through the
// Collection to the SearchEngine and back:
//
//   SearchParams  the knobs: what to compute (k, ef, nprobe, K', ...)
//   QueryContext  the call: when to stop (deadline, cancellation,
//                 allow_partial), what this server allows (SearchLimits)
//                 and what the query runs over (deleted ids, a filter's
//                 matches, a hidden point)
//   QueryResult   the answer: Hits, best first, and the query's QueryStats
//
// A query is validated once, by ValidateQuery, at the engine boundary
// (SearchEngine::Search / SearchBatch); the layers above pass its messages
// through unchanged (a batch prefixes "query #i: "). The one result type
// runs from the engine up to the adapter: the engine fills a Hit's id
// (internal), score and vector; the Collection turns the id into the
// external one and adds the payload.
#ifndef ZOOM_SERVER_ENGINE_QUERY_H_
#define ZOOM_SERVER_ENGINE_QUERY_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/metric.h"
#include "common/query_stats.h"
#include "index/search_types.h"
#include "server/engine/match_set.h"
#include "server/engine/payload_fields.h"

namespace zoom::server {

// The knobs of one query. In the Collection's params a knob left 0 takes
// the collection's default (k excepted: it must be given).
struct SearchParams {
  uint32_t k = 10;
  // Preview knobs (see index::IndexSearchParams).
  uint32_t ef = 64;
  uint32_t nprobe = 16;
  // K': candidates re-ranked with full vectors; raised to k when smaller.
  uint32_t rerank_candidates = 100;
  // The re-rank that stops early (0: off, every one of the K' candidates
  // read in one batch). When > 0 the fullview reads the k best candidates
  // by the preview's distance first, then in rounds every unread candidate
  // whose preview distance minus (mean + rerank_stop_sd x sd) of the
  // errors seen so far in this query (preview distance - exact distance,
  // over the candidates read) is below the current k-th exact distance,
  // until none is. Reads become adaptive per query (QueryStats::reads,
  // fullview_rounds); a candidate is skipped only on the estimate, so
  // recall may drop a little below reading all K'. Measured by zoombench
  // --benchmarks=bound (loadtest/results/2026-12-03-glove-rerank-bound.txt):
  // on GloVe with 100-byte codes, 2.0 read 11.1 of 20 candidates at recall
  // 0.968 (all 20: 0.969); with 50-byte codes the errors are ~5x larger
  // and it saves little.
  double rerank_stop_sd = 0;
  // The band (server/engine/search_band.h): > 0 reads only the candidates
  // whose rank in the top k the index's distance intervals leave in doubt,
  // at this confidence (index::VectorIndex::DistanceIntervals: deviations
  // of the code's estimate each side; 2 measured 1 candidate of 160,000 on
  // GloVe outside its interval). The candidates certainly in the top k are
  // returned unread, with their estimated scores (Hit::estimated), unless
  // exact_scores or with_vectors; those certainly out are never read.
  // Where the index keeps no intervals (hnsw_pq, an index file from before
  // them) every candidate is read, as with 0 (off). Not with
  // rerank_stop_sd (InvalidArgument); a filtered search whose filter
  // fights the vectors reads in rounds instead (search_engine_filtered.cc).
  double band_confidence = 0;
  // With the band: read the certain-in candidates too, so that every hit's
  // score is exact.
  bool exact_scores = false;
  // Return the preview's ranking without reading full vectors.
  bool preview_only = false;
  // Brute force over every stored vector (also what runs without an index).
  bool exact = false;
  // Hits carry their full vectors (taken from the fullview's reads; read
  // once more only when no fullview ran: preview only, degraded, exact).
  bool with_vectors = false;
  // Forces one filtered strategy (benchmarks, tests); kNone: the
  // planner's choice (SearchEngine::Search: exact over the matches when
  // that reads less than the index's strategy would cost, else the index's
  // own, index::VectorIndex::Search).
  FilterStrategy force_strategy = FilterStrategy::kNone;
};

// What this server allows one query (zoomd's --max_k etc.).
struct SearchLimits {
  uint32_t max_k = 1000;
  uint32_t max_ef = 10000;
  uint32_t max_nprobe = 65536;
  uint32_t max_rerank = 10000;
};

// The call around a query (apart from its knobs): work stops at the
// deadline with DeadlineExceeded, or when *cancelled turns true (Cancelled;
// may be null)...
struct QueryContext {
  absl::Time deadline = absl::InfiniteFuture();
  const std::atomic<bool>* cancelled = nullptr;
  // ...unless allow_partial: then, when the fullview would not finish
  // before the deadline (judged by the recent fullview times), the preview
  // ranking is returned with stats.degraded set.
  bool allow_partial = false;
  SearchLimits limits;

  // What the query runs over: set by the Segment (and the calibration),
  // never by a client.
  // Ids never returned (deleted); may be null.
  const index::IdFilter* deleted = nullptr;
  // A filter's matching ids (live ones only; see PayloadIndex::Evaluate),
  // or null. When set it replaces `deleted`, and the search plans how to
  // run it (SearchEngine::Search); never fewer than k hits when k points
  // match.
  const MatchSet* match = nullptr;
  // The live points the search runs over (`deleted` excluded): the
  // filter's share's denominator, and how many hits a search owes (never
  // fewer than min(k, live_points): an unfiltered search that finds fewer
  // widens, then falls back to brute force). 0: unknown, no such check.
  uint64_t live_points = 0;
  // A stored point searched as if the index had never seen it
  // (index::IndexSearchParams::hidden; the calibration's queries).
  InternalId hidden = kInvalidInternalId;
  // A maintenance search (the calibration's): the fullview neither looks
  // in nor fills the DRAM cache (its reads are the cost it measures, and
  // its sample must not evict the clients' hot vectors), and its time does
  // not move the fullview's moving average (allow_partial's estimate).
  bool maintenance = false;
  // When not null (the calibration's band replay): the preview's
  // candidates, as the index listed them, before any fullview.
  std::vector<index::Neighbor>* candidates_out = nullptr;
};

// One hit. `id`: internal in the engine's answer, external in the
// Collection's. `payload` and `fields` (the typed payload): filled by the
// Collection when asked for.
// `vector`: dim floats when asked for (as stored: normalised for cosine).
struct Hit {
  uint64_t id = 0;
  float score = 0;  // the metric's own: squared L2 (ascending), IP/cosine (descending)
  // The score is the index's estimate (the band's certain-in, unread), not
  // computed from the full vector.
  bool estimated = false;
  std::string payload;
  PayloadFields fields;
  std::vector<float> vector;
};

struct QueryResult {
  std::vector<Hit> hits;  // best first; at most k
  QueryStats stats;       // stats.exact: brute force ran
};

// InvalidArgument, with a message that says what to fix, for a query that
// must not run: a vector of the wrong dimension (`dim` expected), empty, or
// outside the magnitude rule (common/vector_limits.h); k or ef or nprobe 0;
// a knob above `limits`.
absl::Status ValidateQuery(Metric metric, uint32_t dim, absl::Span<const float> query,
                           const SearchParams& params, const SearchLimits& limits);

}  // namespace zoom::server

#endif  // ZOOM_SERVER_ENGINE_QUERY_H_
