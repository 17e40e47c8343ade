// File: server/engine/calibration.h
//
// Recall as a knob: what each setting of the knobs buys on a collection's
// own data, measured once per index, so that a request can say
// `target_recall: 0.95` and get the cheapest knobs that reached it.
//
// Calibrate() runs `queries` stored points (sampled among the live ones) as
// queries against the engine's current index:
//   - their exact k nearest neighbours (the point itself excluded) by one
//     pass over the vector file (all queries per chunk);
//   - for each value of the primary knob (ivf_hnsw_pq: nprobe, with
//     ef = max(64, 2 nprobe); hnsw_pq: ef), one preview-only search asking
//     for the largest K' of the grid. The preview's ranking of the top K'
//     does not depend on K' (ivf: the lists scanned are fixed by nprobe;
//     hnsw: by ef, with K' <= ef), and an exact re-rank of K' candidates
//     returns every true neighbour among them, so recall@k at every smaller
//     K' is counted from the one list, without reads. (Not for 4-bit
//     ivf_hnsw_pq: its fast scan re-scores the best 2 K' of its rough
//     distances, so a longer list is better than a smaller K''s; there one
//     preview-only search per (nprobe, K') runs);
//   - the fullview's cost at each K' from real searches (the smallest
//     primary knob): mean fullview + re-rank time and SSD reads;
//   - where the index keeps intervals for its distances (VectorIndex::
//     DistanceIntervals: ivf_hnsw_pq built by zoomd 0.x with radii), the
//     band (search_band.h, "read only what is in doubt") at every
//     band_confidence of the grid, replayed on the same lists: the
//     candidates certainly in the top k taken unread, the certainly out
//     dropped, the rest ranked by their exact distances (the query's own,
//     read once and kept), exactly as the engine answers. Its reads are
//     the band's; its time the preview's plus the fullview's at that K'
//     scaled by the share of candidates read. Only band points that no
//     other point beats on both counted work and recall's lower bound are
//     kept (the rest could never be chosen).
// A point's cost is counted work, not time: the preview's distance
// evaluations (codes scanned, graph and centroid distances) plus
// CalibrationOptions::read_cost a fullview read. The same index gives the
// same counts on any machine and under any load, so the same data and
// flags choose the same knobs (ranking by measured time did not: three
// builds of one data set chose K' 30, 25 and 15 on a shared machine). The
// measured times are kept beside (mean_us), for the operator.
// The query point itself is excluded from every search and every exact
// answer, and hnsw_pq's walk does not pass through it
// (QueryContext::hidden): it is in the index, a real query is not. (Walking
// through it made the curve optimistic by 0.005-0.02 on MNIST, since its
// links lead straight to its neighbours; ivf_hnsw_pq's lists have no such
// shortcut.)
//
// Choose(target) takes the cheapest point (by work; by mean_us for a
// curve of version 1, which counted no work) whose recall's one-sided 95%
// lower bound (mean - 1.645 sd / sqrt(queries)) reaches the target; when
// none does, the point of the highest recall (reached = false). Ties go to
// the higher lower bound, then the smaller knobs (band confidence last): a
// choice never depends on the points' order.
//
// The curve is kept with the index it was measured on (the collection's
// manifest: Encode/Decode) and measured again for every new index.
#ifndef ZOOM_SERVER_ENGINE_CALIBRATION_H_
#define ZOOM_SERVER_ENGINE_CALIBRATION_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/ids.h"
#include "index/search_types.h"
#include "index/vector_index.h"
#include "server/engine/search_engine.h"

namespace zoom::server {

struct CalibrationPoint {
  uint32_t ef = 0;
  uint32_t nprobe = 0;  // 0 for hnsw_pq
  uint32_t rerank_candidates = 0;
  double recall = 0;        // mean recall@k over the calibration queries
  double recall_lower = 0;  // its one-sided 95% lower bound
  double mean_us = 0;       // preview + fullview + re-rank, one thread
  double ssd_reads = 0;     // mean reads of the fullview (cache hits excepted)
  // Mean counted work a query: preview distance evaluations + read_cost x
  // reads (0 in a curve of version 1).
  double work = 0;
  // The band's confidence (SearchParams::band_confidence; 0: every
  // candidate read, and always 0 before version 3), and the mean number of
  // candidates certainly in the top k (returned unread, estimated).
  double band_confidence = 0;
  double certain_in = 0;
  bool operator==(const CalibrationPoint&) const = default;
};

struct Calibration {
  // 1: no work; 2: a point's work after its reads; 3: then its band
  // confidence and certain-in.
  static constexpr uint32_t kVersion = 3;
  uint32_t k = 10;
  uint32_t queries = 0;
  uint64_t indexed_points = 0;  // the index's size when measured
  int64_t created_unix_ms = 0;
  std::vector<CalibrationPoint> points;  // primary knob, then K', ascending

  struct Choice {
    CalibrationPoint point;
    bool reached = false;
  };
  // See the file comment. `points` must not be empty.
  Choice Choose(double target_recall) const;

  // One line of text: "3 k queries indexed_points created_unix_ms" then
  // ";ef nprobe K' recall recall_lower mean_us ssd_reads work
  // band_confidence certain_in" per point (version 1: up to ssd_reads;
  // version 2: up to work).
  std::string Encode() const;
  // DataLoss for a malformed text; FailedPrecondition for a newer version.
  static absl::StatusOr<Calibration> Decode(std::string_view text);
  bool operator==(const Calibration&) const = default;
};

struct CalibrationOptions {
  // At most this many queries, and at most max(200, live points / 100):
  // a small collection's curve costs little, a large one's lower bounds
  // sit within ~0.005 of the mean (the sampling error of 500 queries).
  uint32_t queries = 500;
  uint32_t k = 10;
  uint64_t seed = 0x5eed;
  // The grids (ascending). Values of the primary knob whose preview could
  // not list the largest K' (hnsw_pq: ef < K') pair with K' <= ef only.
  // Fine steps: a target is met by the first point past it, so the grid's
  // spacing is what a pick overpays at most. Each primary value costs one
  // preview-only pass, each K' one pass with reads.
  std::vector<uint32_t> nprobe = {4,  6,  8,  12, 16,  20,  24,  32,  40,  48,
                                  56, 64, 80, 96, 112, 128, 160, 192, 224, 256};
  std::vector<uint32_t> ef = {16,  20,  24,  32,  40,  48,  64,  80,  96,
                              128, 160, 192, 256, 320, 384, 512};
  std::vector<uint32_t> rerank = {10, 12, 15, 18, 20, 25, 30, 40, 50, 60, 80, 100, 120, 160};
  // The band's confidences tried beside reading every candidate (where the
  // index keeps intervals); empty: none.
  std::vector<double> band_confidence = {0.5, 1, 1.5, 2, 3};
  // A fullview read's cost in preview distance evaluations: a 4 KiB read
  // in a batch ~18 us against ~30 ns a PQ code distance here (the
  // planner's EngineOptions::filter_codes_per_read, measured by zoombench
  // --benchmarks=filter).
  double read_cost = 600;
  // Stops the run early (Cancelled) when it turns true; may be null.
  const std::atomic<bool>* cancelled = nullptr;
  // When not null: the ids the queries were (tests).
  std::vector<InternalId>* sample_out = nullptr;
};

// Measures the curve of `engine`'s current index (FailedPrecondition
// without one, or with fewer than k + 1 live points) over its breadth knob
// (index::TraitsOf: the grid's nprobe or ef). `live`: the ids a search may
// return (the collection's liveness). Searches run on the caller's thread,
// through SearchEngine::Search, alongside any others.
absl::StatusOr<Calibration> Calibrate(const SearchEngine& engine,
                                      const index::IdFilter& live,
                                      const CalibrationOptions& options = {});

}  // namespace zoom::server

#endif  // ZOOM_SERVER_ENGINE_CALIBRATION_H_
