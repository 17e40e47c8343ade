#include "server/engine/index_builder.h"

#include <algorithm>
#include <exception>
#include <new>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/vector_limits.h"

namespace zoom::server {
namespace {

// The index's "bad input" (too few vectors, a vector it cannot train on)
// is, for a collection, a state that forbids the build, not a bad request.
absl::Status AsBuildStatus(const absl::Status& st) {
  if (absl::IsInvalidArgument(st)) return absl::FailedPreconditionError(st.message());
  return st;
}

// FailedPrecondition naming the first live point among rows [0, n) that
// breaks the magnitude rule.
absl::Status CheckTrainable(const CollectionConfig& config, const Segment& segment,
                            const float* vectors, uint64_t n, const InternalId* ids = nullptr) {
  const size_t d = config.dim;
  for (uint64_t i = 0; i < n; ++i) {
    const InternalId id = ids != nullptr ? ids[i] : static_cast<InternalId>(i);
    if (segment.IsExcluded(id)) continue;
    const float* v = vectors + i * d;
    if (VectorMagnitudeOk(config.metric, v, d)) continue;
    absl::Status why = CheckVectorMagnitude(config.metric, v, d);
    return absl::FailedPreconditionError(absl::StrCat(
        "point ", segment.External(id), " cannot be indexed: ", why.message(),
        " (stored by an older zoomd, before this rule); delete or overwrite it, then build "
        "again"));
  }
  return absl::OkStatus();
}

// Runs a build: its "bad input" becomes FailedPrecondition (AsBuildStatus),
// allocation failure and exceptions a Status.
absl::StatusOr<std::unique_ptr<index::VectorIndex>> GuardedBuild(
    uint64_t n, const std::function<absl::StatusOr<std::unique_ptr<index::VectorIndex>>()>& build) {
  try {
    auto idx = build();
    if (!idx.ok()) return AsBuildStatus(idx.status());
    return std::move(*idx);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        absl::StrCat("out of memory building the index over ", n, " points"));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("index build failed: ", e.what()));
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<index::VectorIndex>> BuildIndexOver(
    const CollectionConfig& config, int threads, const Segment& segment, const float* vectors,
    uint64_t n, const std::atomic<bool>* cancel) {
  return GuardedBuild(n, [&]() -> absl::StatusOr<std::unique_ptr<index::VectorIndex>> {
    ZOOM_RETURN_IF_ERROR(CheckTrainable(config, segment, vectors, n));
    index::IndexSpec spec = config.BuildSpec(threads);
    spec.cancel = cancel;
    return index::BuildIndex(spec, vectors, n, &segment);
  });
}

absl::StatusOr<std::unique_ptr<index::VectorIndex>> BuildSegmentIndex(
    const CollectionConfig& config, int threads, const Segment& segment, uint64_t n,
    std::atomic<double>* progress, index::StreamingBuildTimes* times,
    const index::VectorIndex* trained_from, const std::atomic<bool>* cancel) {
  const size_t d = config.dim;
  if (index::TraitsOf(config.index).streaming_build) {
    // Streaming: the vectors are read a chunk at a time, never all in RAM.
    index::StreamingBuildOptions options;
    options.progress = [progress](double p) { *progress = p; };
    options.times = times;
    options.trained_from = trained_from;
    index::RowReader read = [&](absl::Span<const InternalId> ids, float* out) {
      ZOOM_RETURN_IF_ERROR(segment.store().ReadVectors(ids, out));
      return CheckTrainable(config, segment, out, ids.size(), ids.data());
    };
    return GuardedBuild(n, [&] {
      index::IndexSpec spec = config.BuildSpec(threads);
      spec.cancel = cancel;
      return index::BuildIndexStreaming(spec, n, &segment, read, options);
    });
  }
  std::vector<float> vectors;
  try {
    vectors.resize(n * d);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        absl::StrCat("out of memory reading ", n, " points to build the index"));
  }
  std::vector<InternalId> ids;
  for (uint64_t first = 0; first < n; first += 4096) {
    if (cancel != nullptr && cancel->load()) {
      return absl::CancelledError("the index build was cancelled (the server or collection is closing)");
    }
    const uint64_t m = std::min<uint64_t>(4096, n - first);
    ids.resize(m);
    for (uint64_t i = 0; i < m; ++i) ids[i] = static_cast<InternalId>(first + i);
    ZOOM_RETURN_IF_ERROR(segment.store().ReadVectors(ids, vectors.data() + first * d));
    *progress = 0.1 * static_cast<double>(first + m) / static_cast<double>(n);
  }
  *progress = 0.1;
  return BuildIndexOver(config, threads, segment, vectors.data(), n, cancel);
}

}  // namespace zoom::server
