// File: server/engine/collection_maintenance.h
//
// CollectionMaintenance: a collection's background work on the JobRunner
// and the policy that starts it by itself.
//
//   builds        StartBuild / StartOrJoinBuild: job "build" (kUser), over
//                 the serving segment, installed under the write lock
//                 (SetIndex swaps; the old index serves until then); Open
//                 loads the stored index (LoadIndex)
//   policy        after each write (AfterWrite): the automatic first build
//                 (auto_build_min_points) and retrains (growth, drift); the
//                 retry backoff of failed builds and compactions (the
//                 runner's "maintenance" key)
//   calibration   the recall curve of each new index: at the end of its
//                 build, or job "calibrate" (kIdle) for one without a
//                 current curve; the curve is kept by CollectionKnobs
//   compaction    Compact (compactor.h): the copy without the write lock,
//                 the catch-up and the switch under it; the retired
//                 segments' release (ReleaseRetired)
//   closing       StopBackgroundWork (the server stops, a drop)
//
// Owns what is only its own: the index state and build progress, the
// automatic retrains' counts, the closing and compacting flags, the epoch a
// calibration last started on. Reaches the collection through its core
// (collection_core.h): the serving segment, the locks (the write lock to
// install an index, a curve or a compaction's segment, and to save the
// manifest), the manifest, the job keys; and the curve through
// CollectionKnobs. Its files: collection_maintenance.cc (builds, policy,
// calibration), collection_compaction.cc (compaction).
//
// Thread safety: every method is safe from many threads; a build, a
// calibration and a compaction of one collection never run at once (the
// one starting second refuses, or waits for its turn as a job).
#ifndef ZOOM_SERVER_ENGINE_COLLECTION_MAINTENANCE_H_
#define ZOOM_SERVER_ENGINE_COLLECTION_MAINTENANCE_H_

#include <atomic>
#include <cstdint>
#include <functional>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "server/engine/collection_core.h"
#include "server/engine/collection_knobs.h"
#include "server/engine/collection_manifest.h"
#include "server/engine/collection_types.h"
#include "server/engine/segment.h"

namespace zoom::server {

class CollectionMaintenance {
 public:
  // `core` and `knobs` outlive it.
  CollectionMaintenance(CollectionCore& core, CollectionKnobs& knobs)
      : core_(core), knobs_(knobs) {}
  CollectionMaintenance(const CollectionMaintenance&) = delete;
  CollectionMaintenance& operator=(const CollectionMaintenance&) = delete;

  // ---- Index builds

  // Starts building the index over the points present, in the background;
  // it trains on the live points only. FailedPrecondition when too few
  // points (fewer than max(256, nlist) live) or a build already runs.
  absl::Status StartBuild();
  // As StartBuild, but a build already running (the automatic one, or
  // another caller's) counts as started: OK.
  absl::Status StartOrJoinBuild();
  // Calls done(status of the build) once no build runs: at once (on this
  // thread) when none does, else on the build's thread as it ends. Never
  // blocks (a waiting RPC holds no worker).
  void WhenBuildDone(std::function<void(absl::Status)> done);
  // Blocks until no build runs; the last build's status (its own code:
  // FailedPrecondition for data that cannot be indexed, e.g. a point that
  // breaks the magnitude rule, stored by an older zoomd).
  absl::Status WaitForBuild();

  // ---- Compaction

  // Rewrites the vector file and the index without the dead records.
  // Searches and writes keep working meanwhile: the live records are copied
  // and the index rebuilt without the write lock; the writes made meanwhile
  // are applied to the new generation before the switch (under it). A
  // failure leaves the collection as it was (serving) and is reported in
  // Info().
  absl::Status Compact();
  // Whether dead records passed the automatic compaction thresholds
  // (CollectionOptions::auto_compact_*); Database::RunMaintenance acts on it.
  bool NeedsCompaction() const;
  // Drops the records of replaced segments no reader holds any more (and
  // frees them), on the caller's thread: Database::RunMaintenance, the end
  // of Compact, and the collection's destructor call it.
  void ReleaseRetired();

  // ---- Calibration (recall as a knob)

  // Measures the serving index's recall curve (calibration.h) in the
  // background when it has no current one and no measurement of this index
  // failed already; false when it does not start (nothing to do, off, or
  // one runs). Database::RunMaintenance calls it; a build calibrates by
  // itself.
  bool MaybeStartCalibration();
  // Measures it on the caller's thread; FailedPrecondition without an
  // index, Aborted when the index was replaced meanwhile.
  absl::Status CalibrateNow();
  // Blocks until no background calibration runs; its status.
  absl::Status WaitForCalibration();

  // ---- Closing

  // The collection closes: stops its background work and waits for the
  // background calibration. A running calibration stops (a build's: the
  // build then ends without a new curve); a running index build stops at
  // its next cancellation point (index::IndexSpec::cancel: graph
  // insertions, encoded rows, k-means iterations) and a compaction at its
  // next chunk, both ending Unavailable (not a failure: the index state
  // goes back to what it was); none starts after (Unavailable). Waiting
  // payload index builds are dropped too (the group is the collection's).
  // Does not wait for the build: WaitForBuild. Before a drop or the
  // server's stop.
  void StopBackgroundWork();

  // ---- For the collection (Collection), not its callers

  // At open, before the segment serves: loads the index snapshot
  // `manifest` names into `seg` (state READY), or searches stay exact and
  // the build's status says why (state FAILED; the manifest then names no
  // snapshot).
  void LoadIndex(Segment* seg, CollectionManifest* manifest);
  // After a write that changed points, on the writer's thread, which holds
  // the collection's write lock (asserted at run time: the analysis cannot
  // see that the writer's lock is the one this part's core names): the
  // automatic policy.
  void AfterWrite();
  // The collection's destructor: nothing starts any more and a running
  // build or calibration stops (the collection then awaits its jobs).
  void MarkClosing() { closing_ = true; }
  // The index state, build progress and error, retrains, compaction error
  // and backoff into *info.
  void FillInfo(CollectionInfo* info) const;

 private:
  absl::Status StartBuildImpl(bool join_running);
  // The build job: builds over the serving segment, installs under the
  // write lock.
  absl::Status RunBuild() ABSL_LOCKS_EXCLUDED(core_.write_mu_);
  absl::Status CompactOnce() ABSL_LOCKS_EXCLUDED(core_.write_mu_);
  absl::Status RunCalibration() ABSL_LOCKS_EXCLUDED(core_.write_mu_);
  // Books a failed (or successful) build/compaction for the retry backoff.
  void NoteMaintenance(bool compaction, const absl::Status& st);
  // Whether automatic work may run now (the backoff).
  bool MaintenanceDue() const;
  // Unavailable: `what` stopped or did not start because the collection
  // closes (StopBackgroundWork).
  absl::Status ClosingError(absl::string_view what) const;
  // The automatic policy (AfterWrite): the first build, a retrain for
  // growth or drift (the drift's baseline saved in the manifest).
  void MaybeAutoMaintainLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(core_.write_mu_);
  // Whether the current index would be retrained at `live` points (the
  // automatic retrain's growth and drift rules), or its training is not
  // known: a compaction then trains anew instead of keeping the quantiser.
  bool RetrainDueLocked(uint64_t live) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(core_.write_mu_);

  CollectionCore& core_;
  CollectionKnobs& knobs_;
  // closing_ stops a running build, calibration or compaction
  // (StopBackgroundWork, the destructor); compacting_: a compaction runs
  // (no build starts meanwhile).
  std::atomic<bool> closing_{false};
  std::atomic<bool> compacting_{false};
  // The index epoch a measurement last started on (UINT64_MAX: none).
  uint64_t calibration_tried_epoch_ ABSL_GUARDED_BY(core_.write_mu_) = UINT64_MAX;
  std::atomic<IndexState> index_state_{IndexState::kNone};
  std::atomic<double> build_progress_{0};
  std::atomic<uint64_t> auto_retrains_{0};
  std::atomic<uint64_t> drift_retrains_{0};
};

}  // namespace zoom::server

#endif  // ZOOM_SERVER_ENGINE_COLLECTION_MAINTENANCE_H_
