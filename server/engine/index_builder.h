// File: server/engine/index_builder.h
//
// Index builds for a collection's segments, and the one background task
// that runs them.
//
// BuildIndexOver: trains and builds the preview over rows [0, n) of
// `vectors` (the segment's records in id order), on the live ones only,
// after checking each against the magnitude rule (a point stored by an
// older zoomd may break it: FailedPrecondition naming it, never a FAISS
// abort). Allocation failure and exceptions become a Status: a build runs
// on a background thread and must never take the process down.
//
// MaintenanceTask: one background job at a time (a build), with
// condition-variable waits and completion callbacks; no polling.
#ifndef ZOOM_SERVER_ENGINE_INDEX_BUILDER_H_
#define ZOOM_SERVER_ENGINE_INDEX_BUILDER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
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

class MaintenanceTask {
 public:
  MaintenanceTask() = default;
  // Join()s.
  ~MaintenanceTask();
  // Waits for a running job's thread to end, callbacks included (on the
  // job's own thread, which cannot join itself: detaches it).
  void Join();
  MaintenanceTask(const MaintenanceTask&) = delete;
  MaintenanceTask& operator=(const MaintenanceTask&) = delete;

  // Runs `work` on a new thread, unless a job runs (false). Its status is
  // handed to the waiters when it ends.
  bool TryStart(std::function<absl::Status()> work);
  bool running() const { return running_.load(); }
  // Calls done(status of the job) once none runs: at once (on this thread)
  // when none does, else on the job's thread as it ends. Never blocks.
  void WhenDone(std::function<void(absl::Status)> done);
  // Blocks until no job runs; the last job's status.
  absl::Status Wait();
  // The last job's status (OK before any).
  absl::Status last_status() const;
  // Sets the status a new task starts with (a failure found at open).
  void set_last_status(absl::Status st);

 private:
  std::atomic<bool> running_{false};
  absl::Mutex thread_mu_;  // start, join, destroy
  std::thread thread_ ABSL_GUARDED_BY(thread_mu_);
  mutable absl::Mutex mu_;
  absl::CondVar done_;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  std::vector<std::function<void(absl::Status)>> waiters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace zoom::server

#endif  // ZOOM_SERVER_ENGINE_INDEX_BUILDER_H_
