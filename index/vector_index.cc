#include "index/vector_index.h"

#include <omp.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/binary_io.h"
#include "common/status_macros.h"
#include "common/vector_limits.h"
#include "index/index_internal.h"

extern "C" {
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);
}

namespace zoom::index {

absl::StatusOr<IndexKind> ParseIndexKind(std::string_view name) {
  const std::string lower =
      absl::AsciiStrToLower(absl::string_view(name.data(), name.size()));
  if (lower == "hnsw_pq") return IndexKind::kHnswPq;
  if (lower == "ivf_hnsw_pq") return IndexKind::kIvfHnswPq;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown index kind '", lower, "': use hnsw_pq or ivf_hnsw_pq"));
}

const char* IndexKindName(IndexKind kind) {
  return kind == IndexKind::kHnswPq ? "hnsw_pq" : "ivf_hnsw_pq";
}

KindTraits TraitsOf(const IndexSpec& spec) {
  KindTraits t;
  switch (spec.kind) {
    case IndexKind::kHnswPq:
      t.breadth = KindTraits::Breadth::kEf;
      t.ef_at_least_k = true;
      break;
    case IndexKind::kIvfHnswPq:
      t.breadth = KindTraits::Breadth::kNprobe;
      t.lists_nest = spec.pq.nbits != 4;
      t.streaming_build = true;
      t.min_train_points = spec.nlist;
      break;
  }
  return t;
}

absl::Status IndexSpec::Validate() const {
  if (dim == 0 || dim > 65536) {
    return absl::InvalidArgumentError(
        absl::StrCat("dimension ", dim, " out of range 1..65536"));
  }
  if (kind != IndexKind::kHnswPq && kind != IndexKind::kIvfHnswPq) {
    return absl::InvalidArgumentError("unknown index kind");
  }
  ZOOM_RETURN_IF_ERROR(pq.Validate(dim));
  if (kind == IndexKind::kHnswPq && pq.code != CodeKind::kPq) {
    return absl::InvalidArgumentError(
        "the rabitq code needs index kind ivf_hnsw_pq (its 4-bit fast scan); hnsw_pq uses pq");
  }
  if (kind == IndexKind::kHnswPq && pq.nbits != 8) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pq_nbits ", pq.nbits, " needs index kind ivf_hnsw_pq (its 4-bit fast scan); "
        "hnsw_pq uses 8"));
  }
  ZOOM_RETURN_IF_ERROR(hnsw.Validate());
  if (hnsw.compact_links && kind != IndexKind::kHnswPq) {
    return absl::InvalidArgumentError(
        "compact_links needs index kind hnsw_pq (ivf_hnsw_pq's graph is over "
        "the centroids "
        "only and is small)");
  }
  if (nlist > (1u << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("nlist ", nlist, " out of range 0..", 1u << 20));
  }
  if (build_threads < 1 || build_threads > 256) {
    return absl::InvalidArgumentError("build_threads out of range 1..256");
  }
  return absl::OkStatus();
}

namespace internal {

namespace {
absl::Mutex blas_mu;
int blas_active ABSL_GUARDED_BY(blas_mu) = 0;
int blas_saved ABSL_GUARDED_BY(blas_mu) = 1;
}  // namespace

BlasSingleThreadScope::BlasSingleThreadScope() {
  absl::MutexLock lock(&blas_mu);
  if (blas_active++ == 0) {
    blas_saved = openblas_get_num_threads();
    if (blas_saved != 1) openblas_set_num_threads(1);
  }
}

BlasSingleThreadScope::~BlasSingleThreadScope() {
  absl::MutexLock lock(&blas_mu);
  if (--blas_active == 0 && blas_saved != 1) openblas_set_num_threads(blas_saved);
}

LibraryThreadsGuard::LibraryThreadsGuard(int omp_threads) : old_omp_(omp_get_max_threads()) {
  omp_set_num_threads(omp_threads);
}

LibraryThreadsGuard::~LibraryThreadsGuard() { omp_set_num_threads(old_omp_); }

void SaveSpec(BinaryWriter& w, const IndexSpec& spec) {
  w.Put<uint32_t>(static_cast<uint32_t>(spec.kind));
  w.Put<uint32_t>(static_cast<uint32_t>(spec.metric));
  w.Put<uint32_t>(spec.dim);
  w.Put<uint32_t>(spec.pq.m);
  w.Put<uint32_t>(spec.pq.nbits);
  w.Put<uint8_t>(spec.pq.opq ? 1 : 0);
  w.Put<uint32_t>(spec.hnsw.M);
  w.Put<uint32_t>(spec.hnsw.ef_construction);
  w.Put<uint32_t>(spec.nlist);
  if (IndexFileMajor(spec) >= 2) w.Put<uint32_t>(static_cast<uint32_t>(spec.pq.code));
}

uint16_t IndexFileMajor(const IndexSpec& spec) {
  return spec.pq.code == CodeKind::kPq ? 1 : 2;
}

BinaryWriter IndexFileWriter(const IndexSpec& spec, const std::string& path, FileSystem* fs) {
  const uint16_t major = IndexFileMajor(spec);
  return BinaryWriter(kIndexMagic, major, major == 1 ? kIndexMinorVersion : kIndexMinorVersion2,
                      path, fs);
}

bool HasErrorRadii(const BinaryReader& r) {
  return (r.major() == 1 && r.minor() >= 2) || (r.major() == 2 && r.minor() >= 1);
}

void SaveSpecTail(BinaryWriter& w, const IndexSpec& spec) {
  w.Put<uint8_t>(spec.hnsw.compact_links ? 1 : 0);
}

absl::Status LoadSpecTail(BinaryReader& r, IndexSpec* spec) {
  if (r.major() == 1 && r.minor() == 0) return absl::OkStatus();
  uint8_t flags = 0;
  ZOOM_RETURN_IF_ERROR(r.Get(&flags));
  if ((flags & ~1u) != 0) return r.Corrupt("unknown index flags");
  spec->hnsw.compact_links = (flags & 1) != 0;
  if (!spec->Validate().ok()) return r.Corrupt("invalid index spec");
  return absl::OkStatus();
}

absl::Status LoadSpec(BinaryReader& r, IndexSpec* spec) {
  uint32_t kind = 0, metric = 0;
  uint8_t opq = 0;
  ZOOM_RETURN_IF_ERROR(r.Get(&kind));
  ZOOM_RETURN_IF_ERROR(r.Get(&metric));
  ZOOM_RETURN_IF_ERROR(r.Get(&spec->dim));
  ZOOM_RETURN_IF_ERROR(r.Get(&spec->pq.m));
  ZOOM_RETURN_IF_ERROR(r.Get(&spec->pq.nbits));
  ZOOM_RETURN_IF_ERROR(r.Get(&opq));
  ZOOM_RETURN_IF_ERROR(r.Get(&spec->hnsw.M));
  ZOOM_RETURN_IF_ERROR(r.Get(&spec->hnsw.ef_construction));
  ZOOM_RETURN_IF_ERROR(r.Get(&spec->nlist));
  uint32_t code = 0;
  if (r.major() >= 2) ZOOM_RETURN_IF_ERROR(r.Get(&code));
  if (kind > 1 || metric > 2 || code > 1) return r.Corrupt("unknown index kind, metric or code");
  spec->pq.code = static_cast<CodeKind>(code);
  spec->kind = static_cast<IndexKind>(kind);
  spec->metric = static_cast<Metric>(metric);
  spec->pq.opq = opq != 0;
  if (!spec->Validate().ok()) return r.Corrupt("invalid index spec");
  return absl::OkStatus();
}

}  // namespace internal

absl::StatusOr<std::unique_ptr<VectorIndex>> BuildIndex(const IndexSpec& spec,
                                                        const float* vectors,
                                                        size_t n) {
  return BuildIndex(spec, vectors, n, nullptr);
}

absl::StatusOr<std::unique_ptr<VectorIndex>> BuildIndex(const IndexSpec& spec,
                                                        const float* vectors, size_t n,
                                                        const IdFilter* exclude) {
  ZOOM_RETURN_IF_ERROR(spec.Validate());
  if (n > (uint64_t{1} << 32) - 1) {
    return absl::InvalidArgumentError(absl::StrCat("cannot index ", n, " vectors (max 2^32-1)"));
  }
  // The training input is checked again here: FAISS asserts (which abort)
  // on distances that overflow, so nothing that breaks the magnitude rule
  // may reach it, whatever the caller validated.
  const size_t d = spec.dim;
  bool any_excluded = false;
  for (size_t i = 0; i < n; ++i) {
    if (exclude != nullptr && exclude->IsExcluded(static_cast<InternalId>(i))) {
      any_excluded = true;
      continue;
    }
    if (!VectorMagnitudeOk(spec.metric, vectors + i * d, d)) {
      absl::Status why = CheckVectorMagnitude(spec.metric, vectors + i * d, d);
      return absl::InvalidArgumentError(
          absl::StrCat("training vector ", i, ": ", why.message()));
    }
  }
  std::vector<uint32_t> train_rows;  // empty: every row trains
  if (any_excluded) {
    for (size_t i = 0; i < n; ++i) {
      if (!exclude->IsExcluded(static_cast<InternalId>(i))) {
        train_rows.push_back(static_cast<uint32_t>(i));
      }
    }
    if (train_rows.empty()) {
      return absl::FailedPreconditionError("no live vectors to train the index on");
    }
  }
  // FAISS training runs on one OpenMP thread: OpenMP's spinning barriers
  // collapse when the cores are also serving queries (measured: 80% of a
  // loaded build in libgomp spin). Our own loops use build_threads.
  internal::LibraryThreadsGuard threads(1);
  const absl::Span<const uint32_t> rows(train_rows);
  internal::EnsureFaissInterruptHook();
  internal::BuildCancelScope cancel(spec.cancel);
  IndexSpec kept = spec;  // the index keeps no pointer to the flag
  kept.cancel = nullptr;
  absl::StatusOr<std::unique_ptr<VectorIndex>> built =
      spec.kind == IndexKind::kHnswPq ? internal::BuildHnswPq(kept, vectors, n, rows)
                                      : internal::BuildIvfHnswPq(kept, vectors, n, rows);
  if (internal::BuildCancelled()) return internal::BuildCancelledError();
  return built;
}

absl::StatusOr<std::unique_ptr<VectorIndex>> BuildIndexStreaming(
    const IndexSpec& spec, uint64_t n, const IdFilter* exclude, const RowReader& read,
    const StreamingBuildOptions& options) {
  ZOOM_RETURN_IF_ERROR(spec.Validate());
  if (n > (uint64_t{1} << 32) - 1) {
    return absl::InvalidArgumentError(absl::StrCat("cannot index ", n, " vectors (max 2^32-1)"));
  }
  if (spec.kind != IndexKind::kIvfHnswPq) {
    return absl::UnimplementedError("a streaming build is for ivf_hnsw_pq only");
  }
  internal::LibraryThreadsGuard threads(1);  // as BuildIndex
  internal::EnsureFaissInterruptHook();
  internal::BuildCancelScope cancel(spec.cancel);
  IndexSpec kept = spec;
  kept.cancel = nullptr;
  absl::StatusOr<std::unique_ptr<VectorIndex>> built =
      internal::BuildIvfHnswPqStreaming(kept, n, exclude, read, options);
  if (internal::BuildCancelled()) return internal::BuildCancelledError();
  return built;
}

namespace internal {

absl::Status BuildCancelledError() {
  return absl::CancelledError("the index build was cancelled (the server or collection is closing)");
}

void ZeroUntrainedBadRows(Metric metric, std::vector<float>& prepared, size_t n, size_t d,
                          absl::Span<const uint32_t> train_rows) {
  if (train_rows.empty()) return;
  size_t next = 0;  // train_rows is ascending
  for (size_t i = 0; i < n; ++i) {
    if (next < train_rows.size() && train_rows[next] == i) {
      ++next;
      continue;
    }
    float* row = prepared.data() + i * d;
    if (!VectorMagnitudeOk(metric, row, d)) {
      std::fill(row, row + d, 0.0f);
    }
  }
}

}  // namespace internal

absl::StatusOr<std::unique_ptr<VectorIndex>> LoadIndex(const std::string& path) {
  return LoadIndex(path, LoadIndexOptions());
}

absl::StatusOr<std::unique_ptr<VectorIndex>> LoadIndex(
    const std::string& path, const LoadIndexOptions& options) {
  ZOOM_ASSIGN_OR_RETURN(BinaryReader r,
                        BinaryReader::Open(path, kIndexMagic, kIndexMajorVersion,
                                           "index"));
  IndexSpec spec;
  ZOOM_RETURN_IF_ERROR(internal::LoadSpec(r, &spec));
  if (spec.kind == IndexKind::kHnswPq)
    return internal::LoadHnswPq(spec, r, options);
  return internal::LoadIvfHnswPq(spec, r);
}

}  // namespace zoom::index
