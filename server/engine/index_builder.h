// File: server/engine/index_builder.h
//
// Index builds for a collection's segments (they run as jobs on the
// database's JobRunner: job_runner.h).
//
// BuildIndexOver: trains and builds the preview over rows [0, n) of
// `vectors` (the segment's records in id order), on the live ones only,
// after checking each against the magnitude rule (a point stored by an
// older zoomd may break it: FailedPrecondition naming it, never a FAISS
// abort). Allocation failure and exceptions become a Status: a build runs
// on a background thread and must never take the process down.
#ifndef ZOOM_SERVER_ENGINE_INDEX_BUILDER_H_
#define ZOOM_SERVER_ENGINE_INDEX_BUILDER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "index/vector_index.h"
#include "server/engine/collection_config.h"
#include "server/engine/segment.h"

namespace zoom::server {

// See the file comment. `threads`: the build's threads. `cancel` (may be
// null; must outlive the call): once true, the build stops at its next
// cancellation point with CancelledError (index::IndexSpec::cancel).
absl::StatusOr<std::unique_ptr<index::VectorIndex>> BuildIndexOver(
    const CollectionConfig& config, int threads, const Segment& segment, const float* vectors,
    uint64_t n, const std::atomic<bool>* cancel = nullptr);

// Builds over records [0, n) of `segment`. ivf_hnsw_pq streams them
// (index::BuildIndexStreaming: a training sample, then chunks of 65,536;
// RAM about the final index plus the sample or a chunk; progress 0.1 after
// training, then with the chunks); hnsw_pq reads them all (progress 0 ->
// 0.1) and builds over them (BuildIndexOver). The same checks and errors
// either way. `times`, when set, gets the streaming build's phases (left
// zero for hnsw_pq). `trained_from` (ivf_hnsw_pq only; ignored for
// hnsw_pq): keep that index's quantiser instead of training one
// (index::StreamingBuildOptions::trained_from). `cancel`: as BuildIndexOver
// (also checked between the reads of hnsw_pq's rows).
absl::StatusOr<std::unique_ptr<index::VectorIndex>> BuildSegmentIndex(
    const CollectionConfig& config, int threads, const Segment& segment, uint64_t n,
    std::atomic<double>* progress, index::StreamingBuildTimes* times = nullptr,
    const index::VectorIndex* trained_from = nullptr, const std::atomic<bool>* cancel = nullptr);

}  // namespace zoom::server

#endif  // ZOOM_SERVER_ENGINE_INDEX_BUILDER_H_
