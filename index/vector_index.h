// File: index/vector_index.h
//
// VectorIndex: the preview of Zoom. It holds compressed vectors (PQ codes)
// and a navigation structure in RAM and returns, for a query, the K'
// candidates that the fullview re-ranks exactly. Two kinds:
//
//   * hnsw_pq: an HNSW graph over all vectors, built with full-precision
//     distances, searched with PQ (ADC) distances.
//   * ivf_hnsw_pq (the Zoom paper's layout): k-means into nlist clusters, an
//     HNSW graph over the centroids for routing, PQ codes of the residuals in
//     per-cluster lists; nprobe lists are scanned per query.
//
// Distances inside the index are "lower is better": squared L2 for kL2 and
// for kCosine (vectors and queries are normalised to unit length here, so
// cosine = 1 - d / 2), the negated inner product for kInnerProduct.
//
// Thread safety: Search() is const and safe from many threads, also while
// the single writer calls Add().
#ifndef ZOOM_INDEX_VECTOR_INDEX_H_
#define ZOOM_INDEX_VECTOR_INDEX_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/file_system.h"
#include "common/metric.h"
#include "common/query_stats.h"
#include "index/hnsw_graph.h"
#include "index/product_quantizer.h"
#include "index/search_types.h"

namespace zoom::index {

enum class IndexKind : uint32_t { kHnswPq = 0, kIvfHnswPq = 1 };
absl::StatusOr<IndexKind> ParseIndexKind(std::string_view name);
const char* IndexKindName(IndexKind kind);

struct IndexSpec {
  IndexKind kind = IndexKind::kIvfHnswPq;
  Metric metric = Metric::kL2;
  uint32_t dim = 0;
  // The code: m bytes per vector (pq.m), OPQ optional.
  PqOptions pq;
  // hnsw_pq: the graph over all vectors; ivf_hnsw_pq: over the centroids.
  HnswOptions hnsw;
  // ivf_hnsw_pq: clusters; 0 = automatic (about 4 * sqrt(n), a power of 2).
  uint32_t nlist = 0;
  // k-means training sample (ivf_hnsw_pq): at most this many points, and
  // at least nlist. 0 = automatic: 64 a centroid, at least 65,536 (FAISS
  // warns below 39 a centroid; at 10M points and 8,192 lists a fixed 65,536
  // was 8, and the recall at 30 reads measured lower at 3M with 16 than
  // with 64: 0.935 against 0.943, nprobe 64).
  uint32_t max_kmeans_points = 0;
  // Threads for the build (graph insertion, encoding). Default 2.
  int build_threads = 2;
  // The build's cancellation flag (build time only, like build_threads: not
  // saved, not kept by the built index; null: none). Once it reads true the
  // build stops at its next cancellation point (between graph insertions,
  // encoded rows, streamed chunks and k-means iterations) and BuildIndex /
  // BuildIndexStreaming return CancelledError; the flag must outlive the
  // call.
  const std::atomic<bool>* cancel = nullptr;

  absl::Status Validate() const;
};

// How a kind's knobs and builds behave, for the layers that tune, build
// and search it without naming the kind (the calibration, the collection's
// defaults, the builder, the compactor).
struct KindTraits {
  // The knob that sets how much of the index a search looks at: ef (hnsw_pq:
  // the walk's list) or nprobe (ivf_hnsw_pq: the lists scanned; its ef only
  // routes them).
  enum class Breadth { kEf, kNprobe };
  Breadth breadth = Breadth::kNprobe;
  // A search of k candidates walks a list of at least k (its ef is raised
  // to k).
  bool ef_at_least_k = false;
  // The best k' of one search's K' > k' candidates are those a search for
  // k' finds, so one search per breadth serves every K' (not ivf_hnsw_pq
  // with 4-bit codes: its scan re-scores the best 2 K' by rough distances,
  // so a longer list holds better candidates).
  bool lists_nest = true;
  // BuildIndexStreaming builds it without the vectors in RAM, and can keep
  // a built index's quantiser (StreamingBuildOptions::trained_from).
  bool streaming_build = false;
  // The fewest live points it trains on (besides BuildIndex's 256).
  uint64_t min_train_points = 0;
};
KindTraits TraitsOf(const IndexSpec& spec);

struct IndexSearchParams {
  // hnsw_pq: the candidate list size (raised to k when smaller).
  // ivf_hnsw_pq: the candidate list of the centroid search (raised to nprobe).
  uint32_t ef = 64;
  // ivf_hnsw_pq: clusters scanned per query.
  uint32_t nprobe = 16;
  // ivf_hnsw_pq: the nearest first_probe of those nprobe clusters are not
  // scanned (a widening scans only the clusters it adds: [first_probe,
  // nprobe) by centroid distance). 0: all.
  uint32_t first_probe = 0;
  // ivf_hnsw_pq: how the nprobe clusters are found. kAuto scans every
  // centroid when nlist <= 16 * max(ef, nprobe) (faster there, and exact),
  // else searches the HNSW graph over the centroids.
  enum class Routing { kAuto, kGraph, kExact };
  Routing routing = Routing::kAuto;
  // Ids never returned (deleted); may be null.
  const IdFilter* filter = nullptr;
  // When not empty, only ids in this set are returned (a filter's matches),
  // and `filter` still applies. The membership test runs before the
  // distance: ivf_hnsw_pq scores only the matching codes of a list (it
  // still scans the lists' ids); hnsw_pq walks the graph through matching
  // nodes and, when allow.share < two_hop_share, through the matching
  // neighbours of non-matching neighbours too (two hops, as ACORN-1 does:
  // the matching subgraph stays connected at low shares), scoring matching
  // nodes only. Either may then find fewer than k: callers widen ef /
  // nprobe or fall back to an exact search.
  IdBitsView allow;
  double two_hop_share = 0.3;
  // hnsw_pq: a node searched as if it were not in the graph (never scored,
  // walked through or returned; the upper levels' descent skips it too), so
  // that a stored point stands in for a query the index has not seen (the
  // calibration, server/engine/calibration.h). Only the plain walk (no
  // `allow`) honours it; other kinds ignore it (`filter` keeps it out of
  // their results).
  InternalId hidden = kInvalidInternalId;
};

// How well the codes fit the vectors added since the index was built or
// loaded: the mean reconstruction error ||x - decode(code(x))||^2 of the
// first and of the latest complete window of kCodeErrorWindow additions
// (the distance is the index's own, over prepared vectors: cosine ones
// normalised). A distribution drifting away from what the index was trained
// on shows as latest >> first. All zero for a kind that does not track it
// (hnsw_pq) and before a window completes.
struct CodeErrorStats {
  static constexpr uint64_t kCodeErrorWindow = 1024;
  double first_window_mean = 0;
  double latest_window_mean = 0;
  uint64_t windows = 0;  // complete windows since the build or the load
};

class VectorIndex {
 public:
  virtual ~VectorIndex() = default;

  virtual const IndexSpec& spec() const = 0;
  // Vectors indexed (ids 0 .. size()-1).
  virtual uint64_t size() const = 0;

  // Appends n vectors (n * dim floats), which get the ids size() ..
  // size() + n - 1: encoded with the trained codebook and linked into the
  // graph / appended to their cluster's list. Single writer.
  virtual absl::Status Add(const float* vectors, size_t n) = 0;

  // A query's candidates: the up to k best for `query` (dim floats) among
  // `allowed` (empty: every id params.filter does not exclude), ascending
  // by the index's distance, into `out`. Each kind owns how: with a filter
  // it picks its strategy (the plain preview oversampled then filtered, a
  // scan of every matching code, or a preview admitting matches only,
  // widened until it holds k; ivf_hnsw_pq widens by rings of farther lists
  // where the filter fights the vectors), sets stats->filter_strategy and
  // may return up to ctx->pool candidates (ctx->fights). Without one it
  // widens (each kind its own way) while it holds fewer than ctx->need.
  // Stops as ctx says (deadline, cancellation). ctx->stats gets the work.
  // params.allow is ignored (the kind sets it for its passes).
  virtual absl::Status Search(const float* query, size_t k, const IndexSearchParams& params,
                              const AllowedIds& allowed, SearchContext* ctx,
                              std::vector<Neighbor>* out) const = 0;
  // What Search with `allowed` (not empty) would cost, in code distances,
  // and which strategy it would run (ctx->force aside): what the caller
  // weighs an exact search over the matches against.
  virtual CostEstimate EstimateCost(size_t k, const IndexSearchParams& params,
                                    const AllowedIds& allowed,
                                    const SearchContext& ctx) const = 0;

  // One pass, the kinds' building block (what Search runs, and tests): the
  // up to k best candidates for `query` with these knobs exactly (no
  // strategy, no widening), ascending by the index's distance, into `out`;
  // only ids of params.allow when it is set. Adds its work to `stats` when
  // not null.
  virtual absl::Status Search(const float* query, size_t k,
                              const IndexSearchParams& params,
                              std::vector<Neighbor>* out,
                              QueryStats* stats) const = 0;

  // The up to k best of the ids set in `ids` (those < size()) by the
  // index's distance, ascending, into `out`: every such id's code is
  // scored, nothing is navigated. The filter planner's match scan: a
  // filter's few thousand matches cost that many code distances wherever
  // they lie (ivf_hnsw_pq: plus one centroid distance per list they are
  // in), with the ranking of a search that reached them all.
  // `params.filter` still applies. Adds its work to `stats` when not null.
  virtual absl::Status SearchIds(const float* query, size_t k, const IdBitsView& ids,
                                 const IndexSearchParams& params, std::vector<Neighbor>* out,
                                 QueryStats* stats) const = 0;

  // Each candidate's interval for its true distance (the index's distance
  // to its full vector, as an exact search computes it): lo[i] <= d <= hi[i]
  // with the confidence `confidence` > 0, for candidates[i] as Search gave
  // them (distance: the code's estimate) and the same `query` (dim floats,
  // as given to Search). From the code's own error for that point, a radius
  // r = ||x - decode(code(x))|| kept per point (one byte, rounded up), and
  // the query: the estimate errs by <w, e> (times 2 under L2 and cosine),
  // e the point's error and w the query side (the query less the point's
  // reconstruction for PQ, less its list's centroid for rabitq, the query
  // itself for inner product). Cauchy-Schwarz bounds it by |w| r: that is
  // the hard interval. With e's direction about random in D dimensions it
  // is about |w| r / sqrt(D), D measured on the build's sample (often far
  // below dim: the data's own shape); the interval is its centre (PQ under
  // L2: estimate + r^2, else the estimate) +- min(confidence / sqrt(D), 1)
  // times the hard half-width. So `confidence` is a number of such
  // deviations, and a large one (>= sqrt(dim)) gives the hard interval,
  // which every candidate's true distance lies in (up to float rounding,
  // allowed for). A point whose radius did not fit its byte, or that an
  // index file from before the radii holds, gets (-inf, +inf). Returns
  // false, leaving lo/hi alone, when the kind keeps no radii (hnsw_pq; an
  // ivf_hnsw_pq file from before format 1.2 / 2.1). Thread-safe.
  virtual bool DistanceIntervals(const float* /*query*/,
                                 absl::Span<const Neighbor> /*candidates*/,
                                 double /*confidence*/, float* /*lo*/, float* /*hi*/) const {
    return false;
  }

  // See CodeErrorStats. Thread-safe (Add updates it).
  virtual CodeErrorStats CodeError() const { return {}; }

  // Exact bytes the preview keeps in RAM: codes, graph, centroids, ids,
  // codebooks (ivf_hnsw_pq: and each point's list, 4 bytes).
  virtual uint64_t ResidentBytes() const = 0;

  // Writes the index to `path` atomically (versioned, checksummed), through
  // `fs` (null: POSIX).
  virtual absl::Status Save(const std::string& path, FileSystem* fs = nullptr) const = 0;
};

// Trains and builds an index of `spec` over n vectors (n * spec.dim floats).
// InvalidArgument for a bad spec or too few vectors to train (< 256, or
// fewer than nlist for ivf_hnsw_pq).
// Every vector must satisfy the magnitude rule (common/vector_limits.h):
// InvalidArgument naming the first that does not (FAISS would abort on it).
absl::StatusOr<std::unique_ptr<VectorIndex>> BuildIndex(const IndexSpec& spec,
                                                        const float* vectors,
                                                        size_t n);
// As above, where the ids `exclude` marks (dead records) do not train and
// are not checked: they are indexed as placeholders (zeros when they break
// the rule) and must be excluded at search, as deleted ids are.
// FailedPrecondition when too few live vectors are left to train.
absl::StatusOr<std::unique_ptr<VectorIndex>> BuildIndex(const IndexSpec& spec,
                                                        const float* vectors, size_t n,
                                                        const IdFilter* exclude);
// A streaming build's reads: the rows `ids` (ascending) into out
// (ids.size() * dim floats, as stored: the build prepares them).
using RowReader = std::function<absl::Status(absl::Span<const InternalId> ids, float* out)>;
// Where a streaming build's wall time went (seconds), for the build's log
// line and the scale benchmark: reading the training sample, training
// (k-means and the quantiser), reading and encoding every row, laying the
// codes out in their lists.
struct StreamingBuildTimes {
  double sample_s = 0, train_s = 0, encode_s = 0, layout_s = 0;
};
struct StreamingBuildOptions {
  size_t chunk_rows = 65536;                // rows read and encoded at a time
  std::function<void(double)> progress;     // 0.1 after training .. 0.95; may be empty
  StreamingBuildTimes* times = nullptr;     // filled when set (each phase as it ends)
  // When set: an ivf_hnsw_pq index whose quantiser (centroids, rotation,
  // codebooks) the build keeps instead of training one: no sample is read,
  // its spec replaces the build's (build_threads aside), and the rows are
  // only assigned and encoded (a compaction: the same data minus the
  // deleted points). InvalidArgument for another kind or a different
  // dim / metric / code. Must outlive the call.
  const VectorIndex* trained_from = nullptr;
};
// BuildIndex(spec, vectors, n, exclude) without the vectors in RAM, for
// ivf_hnsw_pq (Unimplemented for other kinds): trains on a uniform sample
// of the live rows (the k-means sample or pq.max_train_points, the larger,
// read by id), then reads and encodes rows [0, n) chunk_rows at a
// time, staging their codes, and lays them out in exactly sized lists,
// freeing each chunk's staging as it is laid out. RAM at the peak: about
// the final index plus 4 bytes a row (the rows' lists) and a few pages a
// list, or the sample, or one chunk, whichever phase is the largest. The
// sample differs from BuildIndex's, so the two builds are equally good, not
// equal. The same errors as BuildIndex; a live row
// that breaks the magnitude rule is InvalidArgument when it is read.
absl::StatusOr<std::unique_ptr<VectorIndex>> BuildIndexStreaming(
    const IndexSpec& spec, uint64_t n, const IdFilter* exclude, const RowReader& read,
    const StreamingBuildOptions& options = {});
// Reads an index written by Save(). DataLoss for a corrupt file,
// FailedPrecondition for a newer major version.
absl::StatusOr<std::unique_ptr<VectorIndex>> LoadIndex(const std::string& path);

struct LoadIndexOptions {
  // hnsw_pq: pack (true) or keep unpacked (false) the graph's level-0 links,
  // whatever the file says (the file holds the same rows either way); unset
  // = as saved. Ignored for ivf_hnsw_pq.
  std::optional<bool> compact_links;
};
absl::StatusOr<std::unique_ptr<VectorIndex>> LoadIndex(
    const std::string& path, const LoadIndexOptions& options);

// The index file format: magic, version (see vector_index.cc). 1.1 added a
// tail after the body (graph flags); 1.0 files read as before, and a 1.0
// reader ignores the tail. 2.0 is written for the rabitq code only (the
// spec's code kind, a factor per point; index_internal.h IndexFileMajor):
// pq indexes are still written as major 1, so an older zoomd reads them.
// 1.2 and 2.1 append, after the flags, ivf_hnsw_pq's error radii
// (DistanceIntervals): f32 unit, f32 error dimensions, then each list's
// radius bytes in list order; an older reader ignores them, and an index loaded from 1.1 / 2.0
// keeps none. kIndexMajorVersion is the newest major this build reads.
inline constexpr char kIndexMagic[] = "ZOOMIDX";
inline constexpr uint16_t kIndexMajorVersion = 2;
inline constexpr uint16_t kIndexMinorVersion = 2;   // of major 1
inline constexpr uint16_t kIndexMinorVersion2 = 1;  // of major 2

// Tests: ivf_hnsw_pq indexes built or loaded after this call keep at most
// `bits` bits of each point's position in its list (0: as many as fit), so
// that SearchIds' search for positions that do not fit runs on small data.
// Set it before an index is made and reset it after the index is gone.
void SetPlacePositionBitsForTesting(int bits);

}  // namespace zoom::index

#endif  // ZOOM_INDEX_VECTOR_INDEX_H_
