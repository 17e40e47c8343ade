// ivf_hnsw_pq's training and builds (ivf_hnsw_pq_index.h): k-means (FAISS,
// with its interrupt hook for build cancellation), the training samples,
// TrainIvfHnswPq, the in-RAM build (BuildIvfHnswPq) and the streaming one
// (BuildIvfHnswPqStreaming, with its mapped staging).
#include <faiss/Clustering.h>
#include <faiss/IndexFlat.h>
#include <faiss/impl/AuxIndexStructures.h>
#include <faiss/impl/FaissException.h>
#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <numeric>
#include <random>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "common/vector_limits.h"
#include "index/index_internal.h"
#include "index/ivf_hnsw_pq_index.h"

namespace zoom::index::internal {

namespace {

// FAISS asks it between training iterations (InterruptCallback::check()).
class BuildInterrupt final : public faiss::InterruptCallback {
 public:
  bool want_interrupt() override { return BuildCancelled(); }
};

}  // namespace

void EnsureFaissInterruptHook() {
  static std::once_flag once;
  std::call_once(once, [] { faiss::InterruptCallback::instance.reset(new BuildInterrupt()); });
}

absl::StatusOr<std::vector<float>> KMeans(const float* x, size_t n, size_t d, size_t k,
                                          int iterations, uint64_t seed, bool spherical) {
  if (k == 0 || n < k || d == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("k-means of ", n, " points into ", k, " centroids of dimension ", d));
  }
  std::vector<float> centroids;
  try {
    faiss::ClusteringParameters cp;
    cp.niter = iterations;
    cp.seed = static_cast<int>(seed);
    cp.spherical = spherical;
    cp.max_points_per_centroid = 1 << 30;  // the caller sampled already
    cp.min_points_per_centroid = 1;
    faiss::Clustering clus(static_cast<int>(d), static_cast<int>(k), cp);
    faiss::IndexFlatL2 assigner(static_cast<faiss::Index::idx_t>(d));
    clus.train(static_cast<faiss::Index::idx_t>(n), x, assigner);
    centroids = clus.centroids;
  } catch (const faiss::FaissException& e) {
    if (BuildCancelled()) return BuildCancelledError();  // the interrupt hook
    return absl::InternalError(absl::StrCat("FAISS k-means failed: ", e.what()));
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("out of memory during k-means");
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("k-means failed: ", e.what()));
  }
  if (centroids.size() != k * d) {
    return absl::InternalError("k-means returned an unexpected number of centroids");
  }
  return centroids;
}

namespace {

// n Ts of anonymous mapped memory, zeroed, unmapped on destruction: a
// build's staging, whose pages must go back to the kernel the moment it is
// freed (malloc may keep a freed block of this size in its heap).
template <typename T>
class MappedArray {
  static_assert(std::is_trivial_v<T>);

 public:
  MappedArray() = default;
  static absl::StatusOr<MappedArray> Make(size_t n) {
    MappedArray a;
    if (n == 0) return a;
    void* p = ::mmap(nullptr, n * sizeof(T), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      return absl::ResourceExhaustedError(
          absl::StrCat("out of memory staging ", n * sizeof(T), " bytes of the build"));
    }
    a.data_ = static_cast<T*>(p);
    a.n_ = n;
    return a;
  }
  MappedArray(MappedArray&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  MappedArray& operator=(MappedArray&& o) noexcept {
    if (this != &o) {
      Unmap();
      data_ = std::exchange(o.data_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }
  ~MappedArray() { Unmap(); }

  T* data() { return data_; }  // null when empty

 private:
  void Unmap() {
    if (data_ != nullptr) ::munmap(data_, n_ * sizeof(T));
    data_ = nullptr;
    n_ = 0;
  }
  T* data_ = nullptr;
  size_t n_ = 0;
};

// Up to `max` rows of x (n * d), picked at random; only rows of `rows`
// when it is not empty.
std::vector<float> Sample(const float* x, size_t n, size_t d, size_t max, uint64_t seed,
                          absl::Span<const uint32_t> rows) {
  std::vector<size_t> pick(rows.empty() ? n : rows.size());
  if (rows.empty()) {
    std::iota(pick.begin(), pick.end(), 0);
  } else {
    std::copy(rows.begin(), rows.end(), pick.begin());
    n = rows.size();
  }
  if (max < n) {
    std::mt19937_64 rng(seed);
    std::shuffle(pick.begin(), pick.end(), rng);
    pick.resize(max);
  }
  std::vector<float> out(pick.size() * d);
  for (size_t i = 0; i < pick.size(); ++i) {
    std::memcpy(out.data() + i * d, x + pick[i] * d, d * sizeof(float));
  }
  return out;
}

// The k-means sample's size for spec (nlist set): IndexSpec::max_kmeans_points.
size_t KMeansSampleSize(const IndexSpec& spec) {
  constexpr size_t kPerCentroid = 64, kAtLeast = 65536;
  if (spec.max_kmeans_points > 0) {
    return std::max<size_t>(spec.max_kmeans_points, spec.nlist);
  }
  return std::max<size_t>(kAtLeast, kPerCentroid * spec.nlist);
}

// Trains an empty index: k-means on up to KMeansSampleSize(spec) of the rows
// of x (n * d, prepared; only `rows` when not empty), the PQ on the
// residuals of up to pq.max_train_points. spec.nlist must be set.
absl::StatusOr<std::unique_ptr<IvfHnswPqIndex>> TrainIvfHnswPq(
    const IndexSpec& spec, const float* x, size_t n, absl::Span<const uint32_t> rows) {
  const size_t d = spec.dim;
  // x itself when it is the sample (the streaming build's: no second copy).
  std::vector<float> kmeans_sample;
  const bool all = rows.empty() && n <= KMeansSampleSize(spec);
  if (!all) kmeans_sample = Sample(x, n, d, KMeansSampleSize(spec), spec.pq.seed, rows);
  ZOOM_ASSIGN_OR_RETURN(std::vector<float> centroids,
                        internal::KMeans(all ? x : kmeans_sample.data(),
                                         all ? n : kmeans_sample.size() / d, d, spec.nlist, 20,
                                         spec.pq.seed, spec.metric == Metric::kCosine));
  std::vector<float>().swap(kmeans_sample);
  // Residuals of a sample train the PQ.
  const std::vector<float> sample =
      Sample(x, n, d, spec.pq.max_train_points, spec.pq.seed + 1, rows);
  const size_t ns = sample.size() / d;
  std::vector<float> residuals(sample.size());
  ParallelFor(ns, spec.build_threads, [&](size_t i, int) {
    thread_local std::vector<float> dist;
    dist.resize(spec.nlist);
    const float* xi = sample.data() + i * d;
    L2SqrBatch(xi, centroids.data(), spec.nlist, d, dist.data());
    const size_t c = std::min_element(dist.begin(), dist.end()) - dist.begin();
    for (size_t j = 0; j < d; ++j) residuals[i * d + j] = xi[j] - centroids[c * d + j];
  });
  if (BuildCancelled()) return BuildCancelledError();
  ZOOM_ASSIGN_OR_RETURN(ProductQuantizer pq,
                        ProductQuantizer::Train(residuals.data(), ns, spec.dim, spec.pq));
  auto index = std::make_unique<IvfHnswPqIndex>(spec, std::move(centroids), std::move(pq));
  index->BuildGraph();
  if (BuildCancelled()) return BuildCancelledError();
  index->SetRadiusUnit(sample.data(), ns);
  return index;
}

absl::Status CheckTrainSize(const IndexSpec& spec, size_t n_train) {
  if (n_train < std::max<size_t>(spec.nlist, kPqCentroids)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ivf_hnsw_pq with nlist ", spec.nlist, " needs at least max(nlist, 256) = ",
        std::max<size_t>(spec.nlist, kPqCentroids), " points to train, got ", n_train));
  }
  return absl::OkStatus();
}

uint32_t AutoNlist(size_t n) {
  // About 4 sqrt(n), a power of two, with >= 39 points per cluster.
  uint32_t nlist = 16;
  while (nlist * 2 <= 4 * std::sqrt(double(n)) && nlist * 2 * 39 <= n) nlist *= 2;
  return nlist;
}

}  // namespace

absl::StatusOr<std::unique_ptr<VectorIndex>> BuildIvfHnswPq(
    const IndexSpec& in_spec, const float* x, size_t n, absl::Span<const uint32_t> train_rows) {
  IndexSpec spec = in_spec;
  const size_t n_train = train_rows.empty() ? n : train_rows.size();
  if (spec.nlist == 0) spec.nlist = AutoNlist(n_train);
  ZOOM_RETURN_IF_ERROR(CheckTrainSize(spec, n_train));
  const size_t d = spec.dim;
  std::vector<float> prepared = PrepareVectors(spec.metric, x, n, d);
  ZeroUntrainedBadRows(spec.metric, prepared, n, d, train_rows);
  ZOOM_ASSIGN_OR_RETURN(std::unique_ptr<IvfHnswPqIndex> index,
                        TrainIvfHnswPq(spec, prepared.data(), n, train_rows));
  ZOOM_RETURN_IF_ERROR(index->AddPrepared(prepared.data(), n, /*bulk=*/true));
  return std::unique_ptr<VectorIndex>(std::move(index));
}

absl::StatusOr<std::unique_ptr<VectorIndex>> BuildIvfHnswPqStreaming(
    const IndexSpec& in_spec, uint64_t n, const IdFilter* exclude, const RowReader& read,
    const StreamingBuildOptions& options) {
  IndexSpec spec = in_spec;
  const size_t d = spec.dim;
  auto excluded = [&](uint64_t i) {
    return exclude != nullptr && exclude->IsExcluded(static_cast<InternalId>(i));
  };
  uint64_t live = 0;
  for (uint64_t i = 0; i < n; ++i) live += !excluded(i);
  const auto* trained = dynamic_cast<const IvfHnswPqIndex*>(options.trained_from);
  if (options.trained_from != nullptr) {
    const IndexSpec& t = options.trained_from->spec();
    if (trained == nullptr || t.dim != spec.dim || t.metric != spec.metric ||
        t.pq.code != spec.pq.code || t.pq.m != spec.pq.m || t.pq.nbits != spec.pq.nbits) {
      return absl::InvalidArgumentError(
          "the index to keep the quantiser of is not an ivf_hnsw_pq index of this dim, metric "
          "and code");
    }
    const int threads = spec.build_threads;
    spec = t;
    spec.build_threads = threads;
  }
  if (spec.nlist == 0) spec.nlist = AutoNlist(live);
  if (trained == nullptr) ZOOM_RETURN_IF_ERROR(CheckTrainSize(spec, live));
  // A uniform sample of the live rows, in id order (selection sampling).
  const uint64_t want =
      trained != nullptr ? 0
                         : std::min<uint64_t>(live, std::max<uint64_t>(KMeansSampleSize(spec),
                                                                       spec.pq.max_train_points));
  std::vector<InternalId> picked;
  picked.reserve(want);
  {
    std::mt19937_64 rng(spec.pq.seed + 2);
    uint64_t seen = 0;
    for (uint64_t i = 0; i < n && picked.size() < want; ++i) {
      if (excluded(i)) continue;
      const uint64_t left = live - seen++;
      if (rng() % left < want - picked.size()) picked.push_back(static_cast<InternalId>(i));
    }
  }
  const size_t chunk = std::max<size_t>(1, options.chunk_rows);
  auto read_rows = [&](absl::Span<const InternalId> ids, float* out) -> absl::Status {
    ZOOM_RETURN_IF_ERROR(read(ids, out));
    for (size_t i = 0; i < ids.size(); ++i) {
      float* row = out + i * d;
      if (!VectorMagnitudeOk(spec.metric, row, d)) {
        if (excluded(ids[i])) {
          std::fill(row, row + d, 0.0f);  // a dead placeholder
          continue;
        }
        absl::Status why = CheckVectorMagnitude(spec.metric, row, d);
        return absl::InvalidArgumentError(
            absl::StrCat("training vector ", ids[i], ": ", why.message()));
      }
      if (spec.metric == Metric::kCosine) NormalizeL2(row, d);
    }
    return absl::OkStatus();
  };
  StreamingBuildTimes unused_times;
  StreamingBuildTimes& times = options.times != nullptr ? *options.times : unused_times;
  auto lap = [clock = absl::Now()]() mutable {
    const absl::Time now = absl::Now();
    const double s = absl::ToDoubleSeconds(now - clock);
    clock = now;
    return s;
  };
  std::unique_ptr<IvfHnswPqIndex> index;
  {
    std::vector<float> sample(picked.size() * d);
    for (size_t first = 0; first < picked.size(); first += chunk) {
      const size_t m = std::min(chunk, picked.size() - first);
      ZOOM_RETURN_IF_ERROR(read_rows(absl::MakeConstSpan(picked.data() + first, m),
                                     sample.data() + first * d));
    }
    std::vector<InternalId>().swap(picked);
    times.sample_s = lap();
    if (trained != nullptr) {
      index = trained->WithSameQuantizer(spec.build_threads);
    } else {
      ZOOM_ASSIGN_OR_RETURN(index, TrainIvfHnswPq(spec, sample.data(), sample.size() / d, {}));
    }
    times.train_s = lap();
  }
  if (options.progress) options.progress(0.1);
  // Encode every row a chunk at a time: its list into `assign`, its code,
  // term (and factor) into that chunk's staging, which is mapped memory so
  // that unmapping it gives the pages back at once. Then size every list
  // exactly and lay the chunks out in order, unmapping each as it is laid
  // out: the lists' pages are touched only as they fill (ChunkedArray), so
  // the peak is about the final index plus the assignments and a few pages
  // a list, not the staging beside the whole index.
  const size_t m = index->code_size();
  const bool with_factors = spec.pq.code == CodeKind::kRabitq;
  struct Staged {
    MappedArray<uint8_t> codes;
    MappedArray<float> terms, factors, errors;
  };
  std::vector<uint32_t> assign(n);
  std::vector<Staged> staged;
  std::vector<float> rows(std::min<uint64_t>(chunk, n) * d);
  std::vector<InternalId> ids;
  for (uint64_t first = 0; first < n; first += chunk) {
    if (BuildCancelled()) return BuildCancelledError();  // a chunk at a time
    const size_t count = static_cast<size_t>(std::min<uint64_t>(chunk, n - first));
    ids.resize(count);
    for (size_t i = 0; i < count; ++i) ids[i] = static_cast<InternalId>(first + i);
    ZOOM_RETURN_IF_ERROR(read_rows(ids, rows.data()));
    Staged& st = staged.emplace_back();
    ZOOM_ASSIGN_OR_RETURN(st.codes, MappedArray<uint8_t>::Make(count * m));
    ZOOM_ASSIGN_OR_RETURN(st.terms, MappedArray<float>::Make(count));
    ZOOM_ASSIGN_OR_RETURN(st.factors, MappedArray<float>::Make(with_factors ? count : 0));
    ZOOM_ASSIGN_OR_RETURN(st.errors, MappedArray<float>::Make(count));
    index->Encode(rows.data(), count, assign.data() + first, st.codes.data(), st.terms.data(),
                  st.factors.data(), st.errors.data());
    if (BuildCancelled()) return BuildCancelledError();
    if (options.progress) options.progress(0.1 + 0.85 * double(first + count) / double(n));
  }
  std::vector<float>().swap(rows);
  times.encode_s = lap();
  index->ReserveExactly(assign.data(), n);
  for (size_t c = 0; c < staged.size(); ++c) {
    const uint64_t first = uint64_t{c} * chunk;
    const size_t count = static_cast<size_t>(std::min<uint64_t>(chunk, n - first));
    ZOOM_RETURN_IF_ERROR(index->AddEncoded(assign.data() + first, staged[c].codes.data(),
                                           staged[c].terms.data(), staged[c].factors.data(),
                                           staged[c].errors.data(), count, /*bulk=*/false));
    staged[c] = Staged{};
  }
  times.layout_s = lap();
  return std::unique_ptr<VectorIndex>(std::move(index));
}

}  // namespace zoom::index::internal
