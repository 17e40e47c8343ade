// File: index/ivf_hnsw_pq_index.h
//
// Internal to index/ (not part of the public API: the rest of zoomd sees a
// VectorIndex made by BuildIndex, BuildIndexStreaming or LoadIndex).
//
// IvfHnswPqIndex: ivf_hnsw_pq, the Zoom paper's preview: k-means clusters
// routed by an HNSW graph over the centroids, PQ codes of the residuals in
// per-cluster lists.
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
//
// The lists (InvertedList): one a cluster, appended to only, in id order (a
// list's ids ascend). A point's row holds its code (8-bit: m bytes; 4-bit:
// a slot of a block of kPq4BlockSize codes), its id, its term (the bracket
// above; rabitq: |r|^2 + 2<c, r^>) and, for the rabitq code, its factor.
// list_of_ holds each point's place (its list and its position in it):
// SearchIds' way from an id to its code; it is rebuilt from the lists at
// load (not in the file).
//
// Thread safety: Search(), SearchIds() and the other const methods are safe
// from many threads, also while the single writer calls Add(): a list's
// rows never move (ChunkedArray), so a list grows under readers; the writer
// fills a row (or a block's slot) before the release of the list's `size`
// that publishes it, and then of the index's size. CodeError() is safe from
// any thread (Add updates it under a mutex). ReserveExactly, AddEncoded /
// AddPrepared with `bulk`, BuildGraph and LoadBody: the build or the load
// only, before the index is shared.
//
// The methods are defined by concern: ivf_hnsw_pq_index.cc (construction,
// assignment and encoding, Add, the places, the code error, ResidentBytes,
// Save and the load), ivf_hnsw_pq_search.cc (Search, SearchIds: routing
// and the list scans), ivf_hnsw_pq_build.cc (k-means, training, the builds).
#ifndef ZOOM_INDEX_IVF_HNSW_PQ_INDEX_H_
#define ZOOM_INDEX_IVF_HNSW_PQ_INDEX_H_

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/binary_io.h"
#include "common/file_system.h"
#include "common/query_stats.h"
#include "index/chunked_array.h"
#include "index/distance_kernels.h"
#include "index/hnsw_graph.h"
#include "index/planned_search.h"
#include "index/product_quantizer.h"
#include "index/search_types.h"
#include "index/vector_index.h"

namespace zoom::index::internal {

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
        factors(1, pq4 ? BlockRows(rows) * kPq4BlockSize : rows),
        radii(1, pq4 ? BlockRows(rows) * kPq4BlockSize : rows) {}
  static uint64_t BlockRows(uint64_t rows) {
    return std::max<uint64_t>(1, (rows + kPq4BlockSize - 1) / kPq4BlockSize);
  }
  std::atomic<uint32_t> size{0};
  ChunkedArray<uint8_t> codes;
  ChunkedArray<uint32_t> ids;
  ChunkedArray<float> terms;  // |r^|^2 + 2<c, r^> (L2 only; rabitq: |r|^2 + 2<c, r^>)
  ChunkedArray<float> factors;  // rabitq: each code's factor (product_quantizer.h)
  // Each code's error radius ||x - x^|| in units of the index's radius
  // unit, rounded up; kUnknownRadius when it did not fit (DistanceIntervals).
  ChunkedArray<uint8_t> radii;
};

inline constexpr uint8_t kUnknownRadius = 255;

class IvfHnswPqIndex final : public PlannedIndex {
 public:
  IvfHnswPqIndex(const IndexSpec& spec, std::vector<float> centroids, ProductQuantizer pq);

  // VectorIndex.
  const IndexSpec& spec() const override { return spec_; }
  uint64_t size() const override { return size_.load(std::memory_order_acquire); }
  absl::Status Add(const float* vectors, size_t n) override;
  absl::Status Search(const float* query, size_t k, const IndexSearchParams& params,
                      std::vector<Neighbor>* out, QueryStats* stats) const override;
  absl::Status SearchIds(const float* query, size_t k, const IdBitsView& ids,
                         const IndexSearchParams& params, std::vector<Neighbor>* out,
                         QueryStats* stats) const override;
  bool DistanceIntervals(const float* query, absl::Span<const Neighbor> candidates,
                         double confidence, float* lo, float* hi) const override;
  CodeErrorStats CodeError() const override;
  uint64_t ResidentBytes() const override;
  absl::Status Save(const std::string& path, FileSystem* fs = nullptr) const override;

  // The builds' and the load's (ivf_hnsw_pq_build.cc, LoadIvfHnswPq).

  void BuildGraph();

  // Assigns, encodes and appends n prepared vectors as ids size()...
  // `bulk` (the build, before the index is shared): empty lists are sized
  // exactly for what they receive.
  // Each row's list, code and |r^|^2 + 2<c, r^> term, for rows x[0, n)
  // (prepared), into assign[0, n), codes[0, n * code_size), terms[0, n);
  // for the rabitq code the term is |r|^2 + 2<c, r^> (the exact norm: the
  // estimate then errs by the inner product's error only) and factors[0, n)
  // gets each code's factor (may be null otherwise).
  // `errors` gets each row's ||x - (c + r^)||^2 (for the rabitq code, r^
  // is the code times its factor).
  void Encode(const float* x, size_t n, uint32_t* assign, uint8_t* codes, float* terms,
              float* factors, float* errors) const;

  // The radius unit (ivf_hnsw_pq_radii.cc): 1.5 times the 99.9th
  // percentile of the error radii of `x` (n prepared rows, the training
  // sample), over 254; a point's radius byte is ceil(r / unit), or
  // kUnknownRadius above 254. And error_dims_, measured on the sample:
  // up to 256 of its rows as queries, each against its 32 nearest others
  // among the sample's first 8,192.
  // Before any point is added.
  void SetRadiusUnit(const float* x, size_t n);
  // The byte of a squared error (Encode's `errors`).
  uint8_t RadiusByte(float error) const;

  // An empty index with this one's spec (but `build_threads`), centroids
  // and quantiser; its centroid graph built anew.
  std::unique_ptr<IvfHnswPqIndex> WithSameQuantizer(int build_threads) const;

  // Each row's nearest centroid (L2), rows x[0, n) (prepared), into
  // assign[0, n): ||c||^2 - 2 <x, c> for a block of rows at a time by one
  // sgemm (BLAS single-threaded, the blocks spread over build_threads; a
  // block's products are at most 8 MiB whatever nlist). A row equally near
  // two centroids may get either.
  void Assign(const float* x, size_t n, uint32_t* assign) const;

  size_t code_size() const { return pq_.code_size(); }

  absl::Status AddPrepared(const float* x, size_t n, bool bulk = false);

  // Before n rows with the lists `assign` are appended (in one AddEncoded
  // or several): sizes every empty list that receives rows exactly, and
  // list_of_ too when the index is empty. The build only, before the index
  // is shared.
  void ReserveExactly(const uint32_t* assign, size_t n);

  // Appends n encoded rows (Encode's output) as ids size() ...; `bulk`
  // (into an empty index) sizes every list exactly first (ReserveExactly).
  absl::Status AddEncoded(const uint32_t* assign, const uint8_t* codes, const float* terms,
                          const float* factors, const float* errors, size_t n, bool bulk);

  absl::Status LoadBody(BinaryReader& r);

 protected:
  // The planned search's hooks (planned_search.h; ivf_hnsw_pq_filtered.cc):
  // it widens nprobe, and widens a filtered search by rings of farther lists.
  double FilteredPreviewCodes(double k, const FilterShape& f, const IndexSearchParams& params,
                              const FilterTuning& tuning) const override;
  double MatchScanExtra(double count) const override;
  void FilteredKnobs(size_t k, const FilterShape& f, const IndexSearchParams& base,
                     const SearchContext& ctx, IndexSearchParams* p) const override;
  bool WidenFiltered(size_t found, size_t need, const IndexSearchParams& base,
                     const SearchContext& ctx, IndexSearchParams* p) const override;
  bool WidenPlain(const IndexSearchParams& base, const SearchContext& ctx,
                  IndexSearchParams* p) const override;
  absl::Status AfterFiltered(const float* query, size_t pool, const IndexSearchParams& base,
                             const IndexSearchParams& scanned, const AllowedIds& allowed,
                             const FilterShape& f, double local_share, SearchContext* ctx,
                             std::vector<Neighbor>* out) const override;

 private:
  // The lists: spec_.nlist, at least 1.
  uint32_t Lists() const;

  // Per-thread search state (ivf_hnsw_pq_search.cc).
  struct Scratch;

  // list_of_ holds each point's place: its list in the high bits (as many
  // as nlist needs) and its position in that list in the low PosBits()
  // ones, UnknownPos() when the position does not fit (then SearchIds
  // searches the list's ids for it). Positions never change: lists are
  // appended to only.
  uint32_t PosBits() const;
  uint32_t UnknownPos() const;
  uint32_t Place(uint32_t list, uint64_t pos) const;

  // The position of `id` in `list` (its first `size` points), searched
  // from `from` on: ids ascend in a list (appended in id order). `size` when
  // it is not there.
  static uint32_t FindPosition(const InvertedList& list, uint32_t size, uint32_t from,
                               InternalId id);

  // The query (unit length for cosine) into s.q, rotated into s.qt, and its
  // inner-product table, one for all lists, into s.table.
  void QueryTable(const float* query, Scratch& s) const;

  std::unique_ptr<InvertedList> NewList(uint64_t rows) const;

  // Stores code (code_size() bytes) as point `pos` of `list` (writer only).
  void PutCode(InvertedList& list, uint32_t pos, const uint8_t* code);
  void GetCode(const InvertedList& list, uint32_t pos, uint8_t* code) const;

  // The 4-bit scan of s.probes: leaves the best k (by float-table ADC) in
  // s.heap. The byte scan keeps kOver * k candidates (a max-heap on the
  // approximate distance); those are re-scored with s.table.
  void FastScan(size_t k, const IndexSearchParams& params, Scratch& s,
                QueryStats* stats) const;
  static Scratch& ThreadScratch();

  // The writer's running window of code errors (CodeErrorStats).
  void CountCodeError(float e);

  IndexSpec spec_;  // spec_.nlist is the actual number of clusters
  bool pq4_ = false;  // 4-bit codes in blocks (spec_.pq.nbits == 4)
  bool rabitq_ = false;  // the rabitq code: a factor per point (factors)
  // The error radii's unit (InvertedList::radii); 0: no radii (an index
  // file from before them), DistanceIntervals returns false.
  float radius_unit_ = 0;
  // The dimension the code's errors behave as if random in
  // (SetRadiusUnit's calibration; the data's own, often far below dim on
  // anisotropic data such as SIFT's): an error e and the query side w of
  // the estimate give <w, e> / (|w| |e|) of about 1 / sqrt(error_dims_).
  float error_dims_ = 0;
  std::vector<float> centroids_;    // nlist * dim (original space)
  std::vector<float> centroid_norms_;  // nlist: |c|^2 (Assign)
  ProductQuantizer pq_;
  HnswGraph graph_;
  std::vector<std::unique_ptr<InvertedList>> lists_;
  // Each point's place, Place(list, position): SearchIds' way to its code.
  // Rebuilt from the lists at load (not in the file).
  ChunkedArray<uint32_t> list_of_;
  // PosBits()'s cap: 32 but in tests (SetPlacePositionBitsForTesting; read
  // by the constructor).
  const uint32_t place_bits_cap_;
  std::atomic<uint64_t> size_{0};
  double window_sum_ = 0;  // the writer's
  uint64_t window_count_ = 0;
  mutable absl::Mutex error_mu_;
  CodeErrorStats error_stats_ ABSL_GUARDED_BY(error_mu_);
};

}  // namespace zoom::index::internal

#endif  // ZOOM_INDEX_IVF_HNSW_PQ_INDEX_H_
