// File: index/index_internal.h
//
// Helpers shared by the index kinds (not part of the public API): metric
// handling, a parallel loop, and the save/load of the common spec.
#ifndef ZOOM_INDEX_INDEX_INTERNAL_H_
#define ZOOM_INDEX_INDEX_INTERNAL_H_

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "common/binary_io.h"
#include "common/metric.h"
#include "index/distance_kernels.h"
#include "index/hnsw_graph.h"
#include "index/vector_index.h"

namespace zoom::index::internal {

// True when the index ranks by squared L2: kL2, and kCosine (on unit
// vectors L2 orders like cosine, and L2 ADC tables are more accurate than IP
// tables because they account for the reconstruction's norm).
inline bool UsesL2(Metric metric) { return metric != Metric::kInnerProduct; }

// The index's distance of two full vectors (lower is better).
inline float MetricDistance(Metric metric, const float* a, const float* b,
                            size_t d) {
  return UsesL2(metric) ? L2Sqr(a, b, d) : -InnerProduct(a, b, d);
}

// Build distances between rows of a row-major matrix held in RAM (the full
// vectors during a build, or the centroids).
class MatrixOracle final : public BuildOracle {
 public:
  MatrixOracle(Metric metric, const float* x, size_t d) : metric_(metric), x_(x), d_(d) {}
  float Between(InternalId a, InternalId b) const override {
    return MetricDistance(metric_, x_ + size_t{a} * d_, x_ + size_t{b} * d_, d_);
  }
  bool ZeroMeansIdentical() const override { return UsesL2(metric_); }

 private:
  Metric metric_;
  const float* x_;
  size_t d_;
};

// Copies n vectors, normalising them for cosine. Zero vectors stay zero.
inline std::vector<float> PrepareVectors(Metric metric, const float* x,
                                         size_t n, size_t d) {
  std::vector<float> out(x, x + n * d);
  if (metric == Metric::kCosine) {
    for (size_t i = 0; i < n; ++i) NormalizeL2(out.data() + i * d, d);
  }
  return out;
}

// k centroids (k × d, row-major) of the n rows of x by k-means (FAISS's
// Lloyd iterations from seeded random starts; `spherical` normalises the
// centroids). Every row of x is used: the caller samples. InvalidArgument
// for k = 0, d = 0 or n < k; FAISS's failures as Internal (its exceptions
// are caught in ivf_hnsw_pq_build.cc, the file that calls FAISS).
absl::StatusOr<std::vector<float>> KMeans(const float* x, size_t n, size_t d, size_t k,
                                          int iterations, uint64_t seed, bool spherical);

// Build cancellation (IndexSpec::cancel). A build's entry point opens a
// BuildCancelScope on its thread; ParallelFor carries the scope to its
// workers, which stop taking items once the flag is set; the builds' own
// loops and FAISS's training iterations (an InterruptCallback, see
// EnsureFaissInterruptHook) check BuildCancelled(). The entry point then
// discards the partial index and returns BuildCancelledError().
inline thread_local const std::atomic<bool>* tls_build_cancel = nullptr;
class BuildCancelScope {
 public:
  explicit BuildCancelScope(const std::atomic<bool>* flag) : saved_(tls_build_cancel) {
    tls_build_cancel = flag;
  }
  ~BuildCancelScope() { tls_build_cancel = saved_; }
  BuildCancelScope(const BuildCancelScope&) = delete;
  BuildCancelScope& operator=(const BuildCancelScope&) = delete;

 private:
  const std::atomic<bool>* saved_;
};
inline bool BuildCancelled() {
  const std::atomic<bool>* c = tls_build_cancel;
  return c != nullptr && c->load(std::memory_order_relaxed);
}
absl::Status BuildCancelledError();
// Installs (once per process) FAISS's InterruptCallback answering
// BuildCancelled() for the calling thread, so that k-means and PQ training
// stop between iterations (FAISS then throws; the caller maps it to
// BuildCancelledError()). Defined in ivf_hnsw_pq_build.cc (the file that
// calls FAISS's clustering).
void EnsureFaissInterruptHook();

// Runs fn(i) for i in [0, n) on `threads` threads (dynamic scheduling).
// Under a BuildCancelScope whose flag is set, stops taking items (the
// caller checks BuildCancelled() after).
inline void ParallelFor(size_t n, int threads,
                        const std::function<void(size_t, int)>& fn) {
  const std::atomic<bool>* cancel = tls_build_cancel;
  auto stop = [cancel] { return cancel != nullptr && cancel->load(std::memory_order_relaxed); };
  if (threads <= 1 || n < 2) {
    for (size_t i = 0; i < n && !stop(); ++i) fn(i, 0);
    return;
  }
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      BuildCancelScope scope(cancel);
      for (size_t i; !stop() && (i = next.fetch_add(1)) < n;) fn(i, t);
    });
  }
  for (auto& th : pool) th.join();
}

// OpenBLAS's thread count is process-wide: the one place it is changed.
// Reference counted, so that concurrent users (index builds, FGD's exact
// softmax) cannot race: BLAS is single-threaded while any scope lives, and
// the count from before the first is restored when the last one ends.
class BlasSingleThreadScope {
 public:
  BlasSingleThreadScope();
  ~BlasSingleThreadScope();
  BlasSingleThreadScope(const BlasSingleThreadScope&) = delete;
  BlasSingleThreadScope& operator=(const BlasSingleThreadScope&) = delete;
};

// Sets the OpenMP threads of the calling thread's parallel regions (FAISS
// training) and makes OpenBLAS single-threaded for the guard's lifetime, so
// the two pools do not oversubscribe the cores; restores both after.
class LibraryThreadsGuard {
 public:
  explicit LibraryThreadsGuard(int omp_threads);
  ~LibraryThreadsGuard();
  LibraryThreadsGuard(const LibraryThreadsGuard&) = delete;
  LibraryThreadsGuard& operator=(const LibraryThreadsGuard&) = delete;

 private:
  int old_omp_;
  BlasSingleThreadScope blas_;
};

// Calls fn(id) for the ids set in `ids` below `n`, ascending, except those
// `filter` (may be null) excludes: SearchIds' enumeration.
template <typename Fn>
void ForEachAllowedId(const IdBitsView& ids, uint64_t n, const IdFilter* filter, Fn&& fn) {
  n = std::min(n, ids.size);
  for (uint64_t w = 0; w * 64 < n; ++w) {
    for (uint64_t bits = ids.words[w]; bits != 0; bits &= bits - 1) {
      const uint64_t id = w * 64 + static_cast<uint64_t>(__builtin_ctzll(bits));
      if (id >= n) return;
      if (filter != nullptr && filter->IsExcluded(static_cast<InternalId>(id))) continue;
      fn(static_cast<InternalId>(id));
    }
  }
}

// Keeps the k best (lowest distance) offered neighbours in a max-heap.
class BestK {
 public:
  BestK(size_t k, std::vector<Neighbor>* heap) : k_(k), heap_(*heap) { heap_.clear(); }
  void Offer(float distance, InternalId id) {
    if (heap_.size() >= k_ && !(distance < heap_.front().distance)) return;
    heap_.push_back({distance, id});
    std::push_heap(heap_.begin(), heap_.end());
    if (heap_.size() > k_) {
      std::pop_heap(heap_.begin(), heap_.end());
      heap_.pop_back();
    }
  }
  // The kept ones, ascending, into *out.
  void Take(std::vector<Neighbor>* out) const {
    out->assign(heap_.begin(), heap_.end());
    std::sort(out->begin(), out->end());
  }

 private:
  size_t k_;
  std::vector<Neighbor>& heap_;
};

// The index file's major version for `spec`: 1 (format 1.1) for pq codes,
// which a zoomd from before format 2 still reads; 2 (format 2.0: the spec
// gains a u32 code kind after nlist, and each list entry of ivf_hnsw_pq a
// float factor after its term) for the rabitq code, which such a zoomd
// then refuses as a newer major version instead of misreading it.
uint16_t IndexFileMajor(const IndexSpec& spec);
// A writer of the version above, streaming to `path` through `fs` (null:
// POSIX): Commit(path, fs) writes the file.
BinaryWriter IndexFileWriter(const IndexSpec& spec, const std::string& path, FileSystem* fs);
void SaveSpec(BinaryWriter& w, const IndexSpec& spec);
absl::Status LoadSpec(BinaryReader& r, IndexSpec* spec);
// Format 1.1 (and 2.0) appends, after the body: u8 flags (bit 0: compact
// HNSW links). A 1.0 file has no tail (flags 0).
void SaveSpecTail(BinaryWriter& w, const IndexSpec& spec);
// Whether the file (1.2 and later, 2.1 and later) carries ivf_hnsw_pq's
// error radii after the tail (vector_index.h's format note).
bool HasErrorRadii(const BinaryReader& r);
absl::Status LoadSpecTail(BinaryReader& r, IndexSpec* spec);

// Rows of `prepared` (n * d) outside `train_rows` that break the magnitude
// rule (dead records written before the rule existed) become zeros: they
// are indexed as placeholders (never returned: excluded at search) and
// cannot overflow a distance. No-op when train_rows is empty (all rows).
void ZeroUntrainedBadRows(Metric metric, std::vector<float>& prepared, size_t n, size_t d,
                          absl::Span<const uint32_t> train_rows);

// The kinds' constructors for LoadIndex / BuildIndex. `train_rows` (when not
// empty) are the rows that train (the live points); every row is indexed.
absl::StatusOr<std::unique_ptr<VectorIndex>> BuildHnswPq(const IndexSpec& spec,
                                                         const float* x, size_t n,
                                                         absl::Span<const uint32_t> train_rows);
absl::StatusOr<std::unique_ptr<VectorIndex>> LoadHnswPq(
    const IndexSpec& spec, BinaryReader& r, const LoadIndexOptions& options);
absl::StatusOr<std::unique_ptr<VectorIndex>> BuildIvfHnswPq(
    const IndexSpec& spec, const float* x, size_t n, absl::Span<const uint32_t> train_rows);
absl::StatusOr<std::unique_ptr<VectorIndex>> BuildIvfHnswPqStreaming(
    const IndexSpec& spec, uint64_t n, const IdFilter* exclude, const RowReader& read,
    const StreamingBuildOptions& options);
absl::StatusOr<std::unique_ptr<VectorIndex>> LoadIvfHnswPq(const IndexSpec& spec,
                                                           BinaryReader& r);

}  // namespace zoom::index::internal

#endif  // ZOOM_INDEX_INDEX_INTERNAL_H_
