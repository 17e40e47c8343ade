// CollectionMaintenance: index builds (and the automatic ones), the retry
// backoff, calibration, loading the stored index, closing. Compaction:
// collection_compaction.cc.
#include "server/engine/collection_maintenance.h"


#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/process.h"
#include "common/timer.h"
#include "index/vector_index.h"
#include "server/engine/index_builder.h"

namespace zoom::server {
namespace {

namespace fs = std::filesystem;

// A build's catch-up outside the writers' lock: rounds while each added at
// least kCatchUpSmall points (an import keeps storing), at most
// kCatchUpRounds (then the rest is added under the lock).
constexpr int kCatchUpRounds = 8;
constexpr uint64_t kCatchUpSmall = 4096;

}  // namespace

const char* IndexStateName(IndexState state) {
  switch (state) {
    case IndexState::kNone: return "NONE";
    case IndexState::kBuilding: return "BUILDING";
    case IndexState::kReady: return "READY";
    case IndexState::kFailed: return "FAILED";
  }
  return "UNKNOWN";
}

// ---- Index builds ------------------------------------------------------------

absl::Status CollectionMaintenance::StartBuild() { return StartBuildImpl(/*join_running=*/false); }

absl::Status CollectionMaintenance::StartOrJoinBuild() {
  return StartBuildImpl(/*join_running=*/true);
}

absl::Status CollectionMaintenance::StartBuildImpl(bool join_running) {
  const CollectionConfig& config = core_.config_;
  JobRunner& jobs = *core_.jobs_;
  const std::string key = core_.JobKey("build");
  if (join_running && jobs.Active(key)) return absl::OkStatus();
  if (core_.dropped_) return core_.DroppedError();
  if (closing_) return ClosingError("index build");
  if (compacting_.load()) {
    // The compaction rebuilds the index of the segment it makes.
    return absl::FailedPreconditionError(
        absl::StrCat("a compaction of '", config.name, "' is running; build after it"));
  }
  const uint64_t live = core_.Current()->live();
  const uint64_t min_points = config.MinIndexPoints();
  if (live < min_points) {
    return absl::FailedPreconditionError(absl::StrCat(
        "collection '", config.name, "' has ", live, " points; an index needs at least ",
        min_points, min_points > kMinIndexPoints ? " (its nlist)" : "",
        " to train (searches are exact until then)"));
  }
  JobRunner::Job job;
  job.key = key;
  job.group = core_.jobs_group_;
  job.priority = JobRunner::Priority::kUser;
  job.run = [this] { return RunBuild(); };
  auto before = std::make_shared<IndexState>(IndexState::kNone);
  job.on_queued = [this, before] {
    build_progress_ = 0;
    *before = index_state_.exchange(IndexState::kBuilding);
  };
  job.on_dropped = [this, before] { index_state_ = *before; };  // it never ran
  job.dropped = ClosingError("index build");
  if (!jobs.TrySubmit(std::move(job))) {
    if (join_running && jobs.Active(key)) return absl::OkStatus();
    if (!jobs.Active(key)) return ClosingError("index build");  // the runner stops
    return absl::FailedPreconditionError(
        absl::StrCat("an index build of '", config.name, "' is already running"));
  }
  return absl::OkStatus();
}

absl::Status CollectionMaintenance::RunBuild() {
  const CollectionConfig& config = core_.config_;
  Stopwatch sw;
  std::shared_ptr<Segment> seg = core_.Current();
  const uint64_t n = seg->records();
  // The live points among [0, n) the build trains on (the live count now:
  // writes after this moment are added to the new index, not trained on).
  const uint64_t trained = seg->live();
  const bool replaces = seg->index() != nullptr;
  index::StreamingBuildTimes phases;
  auto built = BuildSegmentIndex(config, core_.options_.build_threads, *seg, n, &build_progress_,
                                 &phases, /*trained_from=*/nullptr, &closing_);
  const double build_s = sw.ElapsedMicros() / 1e6;
  absl::Status st = built.status();
  const bool cancelled = absl::IsCancelled(st) && closing_;
  if (cancelled) st = ClosingError("index build");
  build_progress_ = 0.9;
  // The install. Writes never wait on it for long (issue 48: a 3.2M-point
  // retrain's install held an import for three minutes): the points stored
  // during the build are added to the new index, and its file written,
  // outside the writers' lock; under it only the last few points are added
  // and the manifest switched. The file covers the points it was saved
  // with; a load adds the rest from the vector file, as after any restart.
  std::string staged;
  uint64_t staged_count = 0;
  if (st.ok()) {
    for (int round = 0; round < kCatchUpRounds && st.ok(); ++round) {
      const uint64_t had = (*built)->size();
      st = seg->CatchUpIndex(built->get());
      if ((*built)->size() - had < kCatchUpSmall) break;
    }
  }
  if (st.ok()) {
    staged_count = (*built)->size();
    absl::StatusOr<std::string> name = core_.StageIndexFile(**built);
    st = name.status();
    if (name.ok()) staged = *std::move(name);
  }
  double locked_s = 0;
  if (st.ok()) {
    absl::MutexLock w(&core_.write_mu_);
    Stopwatch held;
    if (core_.Current() != seg || core_.manifest_.pending_space != 0) {
      st = absl::AbortedError("the collection was compacted during the build; build again");
    } else {
      st = seg->SetIndex(std::move(*built));
      if (st.ok()) {
        core_.manifest_.trained_points = trained;
        core_.manifest_.code_error = 0;  // the new index's first window sets it
        ++core_.manifest_.index_epoch;  // the earlier curve serves until it is measured
        st = core_.CommitSnapshotLocked(staged, staged_count);
        staged.clear();  // the manifest's now (or removed by the failed commit)
        if (st.ok()) {
          knobs_.SetCalibration(knobs_.CurrentCalibration(), /*current=*/false);
        } else {
          --core_.manifest_.index_epoch;  // the stored manifest still names the old index
        }
      }
    }
    locked_s = held.ElapsedMicros() / 1e6;
  }
  if (!staged.empty()) core_.RemoveFile(staged);  // a build dropped after its file
  const double installed_s = sw.ElapsedMicros() / 1e6;
  if (st.ok() && core_.options_.calibration_queries > 0) {
    build_progress_ = 0.95;
    (void)RunCalibration();  // logged; a failure leaves the default knobs
  }
  built = absl::StatusOr<std::unique_ptr<index::VectorIndex>>();
  ReleaseFreedMemory();  // the build's staging and the old index (when no search holds it)
  build_progress_ = 1.0;
  // A build overtaken by a compaction is not a failure: the compaction made
  // the index of the segment now serving (or none).
  // Nor is one cancelled by the close (the server stops; it starts again).
  const bool overtaken = absl::IsAborted(st) || cancelled;
  index_state_ = st.ok() ? IndexState::kReady
                 : core_.Current()->index() != nullptr ? IndexState::kReady
                 : overtaken                              ? IndexState::kNone
                                                          : IndexState::kFailed;
  if (st.ok()) {
    // The phases (zoomload --workload scale reads this line): the
    // streaming build's own (zero for hnsw_pq, which builds in RAM), the
    // install (the catch-up and the index snapshot written), the part of it
    // that held the writers (writers_held), the recall curve's calibration.
    ZOOM_LOG(INFO, "collection ", config.name, ": index build over ", n, " points (",
             trained, " live) done in ", absl::SixDigits(sw.ElapsedMicros() / 1e6),
             " s (phases: sample ", absl::SixDigits(phases.sample_s), " s, train ",
             absl::SixDigits(phases.train_s), " s, encode ", absl::SixDigits(phases.encode_s),
             " s, layout ", absl::SixDigits(phases.layout_s), " s, build ",
             absl::SixDigits(build_s), " s, install ", absl::SixDigits(installed_s - build_s),
             " s, writers_held ", absl::SixDigits(locked_s), " s, calibration ", absl::SixDigits(sw.ElapsedMicros() / 1e6 - installed_s), " s)",
             replaces ? "; the previous index is freed by the last search holding it" : "");
  } else if (cancelled) {
    ZOOM_LOG(INFO, "collection ", config.name, ": index build over ", n,
             " points stopped after ", absl::SixDigits(build_s), " s: the collection is closing");
  } else {
    ZOOM_LOG(WARNING, "collection ", config.name, ": index build over ", n, " points failed: ",
             st.message());
  }
  if (!overtaken) NoteMaintenance(/*compaction=*/false, st);
  return st;
}

void CollectionMaintenance::WhenBuildDone(std::function<void(absl::Status)> done) {
  core_.jobs_->WhenDone(core_.JobKey("build"), std::move(done));
}

absl::Status CollectionMaintenance::WaitForBuild() {
  return core_.jobs_->Wait(core_.JobKey("build"));
}

void CollectionMaintenance::LoadIndex(Segment* seg, CollectionManifest* manifest) {
  const CollectionConfig& config = core_.config_;
  const std::string snapshot = manifest->snapshot;
  const uint64_t snapshot_count = manifest->snapshot_count;
  const uint64_t trained_points = manifest->trained_points;
  const double code_error = manifest->code_error;
  manifest->snapshot.clear();
  manifest->snapshot_count = 0;
  manifest->trained_points = 0;
  manifest->code_error = 0;
  if (snapshot.empty()) return;
  Stopwatch sw;
  // The config decides the link layout (of a graph over the points: the
  // kinds without one ignore it).
  index::LoadIndexOptions load_options;
  load_options.compact_links = config.index.hnsw.compact_links;
  auto idx = index::LoadIndex((fs::path(core_.dir_) / snapshot).string(), load_options);
  if (idx.ok() && (*idx)->spec().pq.code != config.index.pq.code) {
    // Written by a zoomd that did not know the config's code (a
    // downgrade and back): not what the collection says it is.
    idx = absl::FailedPreconditionError(absl::StrCat(
        "its code is ", index::CodeKindName((*idx)->spec().pq.code), ", the collection's ",
        index::CodeKindName(config.index.pq.code)));
  }
  absl::Status st = idx.ok() ? seg->SetIndex(std::move(*idx)) : idx.status();
  const uint64_t visible = seg->visible();
  if (st.ok()) {
    manifest->snapshot = snapshot;
    manifest->snapshot_count = snapshot_count;
    manifest->trained_points = trained_points;
    manifest->code_error = code_error;
    index_state_ = IndexState::kReady;
    ZOOM_LOG(INFO, "collection ", config.name, ": index snapshot ", snapshot, " loaded, ",
             visible - std::min(visible, manifest->snapshot_count), " points replayed, ",
             static_cast<int64_t>(sw.ElapsedMicros() / 1000), " ms");
  } else {
    ZOOM_LOG(WARNING, "collection ", config.name, ": index snapshot ", snapshot,
             " unusable (", st.message(), "); searching exactly until BuildIndex");
    index_state_ = IndexState::kFailed;
    core_.jobs_->SetLastStatus(core_.JobKey("build"), absl::Status(
        st.code(), absl::StrCat("index snapshot ", snapshot, " unusable: ", st.message())));
  }
}

// ---- The retry backoff -----------------------------------------------------------

void CollectionMaintenance::NoteMaintenance(bool compaction, const absl::Status& st) {
  if (compaction) core_.jobs_->SetLastStatus(core_.JobKey("compact"), st);
  const JobRunner::Backoff b = core_.jobs_->NoteResult(core_.JobKey("maintenance"), st);
  if (st.ok()) return;
  ZOOM_LOG(WARNING, "collection ", core_.config_.name, ": ",
           compaction ? "compaction" : "index build", " failed (", b.failures,
           " in a row); automatic maintenance retries in ",
           absl::FormatDuration(absl::Trunc(b.retry_at - absl::Now(), absl::Seconds(1))));
}

bool CollectionMaintenance::MaintenanceDue() const {
  return core_.jobs_->Due(core_.JobKey("maintenance"));
}

// ---- Calibration ---------------------------------------------------------------

absl::Status CollectionMaintenance::RunCalibration() {
  const CollectionConfig& config = core_.config_;
  std::shared_ptr<Segment> seg;
  uint64_t epoch = 0;
  {
    absl::MutexLock w(&core_.write_mu_);
    if (core_.dropped_) return core_.DroppedError();
    seg = core_.Current();
    epoch = core_.manifest_.index_epoch;
    calibration_tried_epoch_ = epoch;
  }
  Stopwatch sw;
  CalibrationOptions options;
  options.queries = core_.options_.calibration_queries;
  options.cancelled = &closing_;
  absl::StatusOr<Calibration> cal =
      seg->Calibrate(options);
  absl::Status st = cal.status();
  if (st.ok()) {
    absl::MutexLock w(&core_.write_mu_);
    if (core_.dropped_ || core_.Current() != seg || core_.manifest_.index_epoch != epoch) {
      st = absl::AbortedError("the index was replaced during its calibration");
    } else {
      const CollectionManifest before = core_.manifest_;
      core_.manifest_.calibration = cal->Encode();
      core_.manifest_.calibration_epoch = epoch;
      st = core_.SaveManifestLocked();
      if (st.ok()) {
        knobs_.SetCalibration(std::make_shared<const Calibration>(*cal), /*current=*/true);
      } else {
        core_.manifest_ = before;
      }
    }
  }
  if (!st.ok()) {
    // Overtaken (a new index is measured next) or stopped by the close:
    // not a failure of the curve.
    if (absl::IsAborted(st) || absl::IsCancelled(st)) {
      ZOOM_LOG(INFO, "collection ", config.name, ": calibration not kept: ", st.message());
      return st;
    }
    ZOOM_LOG(WARNING, "collection ", config.name, ": calibration failed: ", st.message());
    knobs_.SetCalibrationError(std::string(st.message()));
    return st;
  }
  const double target = core_.options_.default_target_recall > 0
                            ? core_.options_.default_target_recall
                            : 0.95;
  const Calibration::Choice c = cal->Choose(target);
  ZOOM_LOG(INFO, "collection ", config.name, ": calibrated over ", cal->queries, " queries, ",
           cal->points.size(), " knob settings, in ", absl::SixDigits(sw.ElapsedMicros() / 1e6),
           " s; recall@", cal->k, " ", target, (c.reached ? "" : " not reached; best"), ": ef ",
           c.point.ef, " nprobe ", c.point.nprobe, " K' ", c.point.rerank_candidates,
           c.point.band_confidence > 0
               ? absl::StrCat(" band ", c.point.band_confidence, " (", absl::SixDigits(c.point.ssd_reads),
                              " reads)")
               : std::string(),
           " (recall ", absl::SixDigits(c.point.recall), ", ",
           absl::SixDigits(c.point.mean_us), " us)");
  return absl::OkStatus();
}

absl::Status CollectionMaintenance::CalibrateNow() {
  if (core_.Current()->index() == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("collection '", core_.config_.name, "' has no index to calibrate"));
  }
  return RunCalibration();
}

absl::Status CollectionMaintenance::WaitForCalibration() {
  return core_.jobs_->Wait(core_.JobKey("calibrate"));
}

bool CollectionMaintenance::MaybeStartCalibration() {
  JobRunner& jobs = *core_.jobs_;
  if (core_.options_.calibration_queries == 0 || core_.dropped_ || closing_ ||
      compacting_.load() || jobs.Active(core_.JobKey("build")) ||
      jobs.Active(core_.JobKey("calibrate"))) {
    return false;
  }
  {
    absl::MutexLock w(&core_.write_mu_);
    if (core_.Current()->index() == nullptr) return false;
    if (calibration_tried_epoch_ == core_.manifest_.index_epoch) return false;
    if (knobs_.state()->current) return false;
  }
  JobRunner::Job job;
  job.key = core_.JobKey("calibrate");
  job.group = core_.jobs_group_;
  job.priority = JobRunner::Priority::kIdle;
  job.run = [this] { return RunCalibration(); };
  job.dropped = ClosingError("calibration");
  return jobs.TrySubmit(std::move(job));
}

// ---- Closing -------------------------------------------------------------------

void CollectionMaintenance::StopBackgroundWork() {
  closing_ = true;
  core_.jobs_->CancelGroup(core_.jobs_group_, /*wait=*/false);  // what waits is dropped
  core_.jobs_->Wait(core_.JobKey("calibrate")).IgnoreError();
}

absl::Status CollectionMaintenance::ClosingError(absl::string_view what) const {
  return absl::UnavailableError(absl::StrCat(
      "collection '", core_.config_.name,
      "' is closing (the server is shutting down or it is dropped): the ", what,
      " stopped or did not start; once the server is back, automatic builds start again, or ",
      "call it again"));
}

// ---- The automatic policy --------------------------------------------------------

void CollectionMaintenance::AfterWrite() {
  core_.write_mu_.AssertHeld();
  MaybeAutoMaintainLocked();
}

void CollectionMaintenance::MaybeAutoMaintainLocked() {
  if (closing_) return;  // the server stops: nothing new starts
  const CollectionOptions& options = core_.options_;
  const std::string& name = core_.config_.name;
  JobRunner& jobs = *core_.jobs_;
  std::shared_ptr<Segment> seg = core_.Current();
  const uint64_t live = seg->live();
  // After a failed build, the automatic one waits for the backoff (else
  // every write would start it again).
  if (options.auto_build_min_points > 0 && live >= options.auto_build_min_points &&
      seg->index() == nullptr && !jobs.Active(core_.JobKey("build")) && MaintenanceDue()) {
    absl::Status st = StartBuild();
    ZOOM_LOG(INFO, "collection ", name, ": ", live, " points, automatic index build: ",
             st.ok() ? absl::string_view("started") : st.message());
    return;
  }
  // Retraining, in the background while the old index keeps serving
  // (SetIndex swaps at the end), for one of two reasons:
  // - growth: an index trained on far fewer points than the collection now
  //   holds has too few lists and a PQ fitted to old data;
  // - drift: the codes fit the latest points much worse than the first ones
  //   added after the build (the baseline, kept in the manifest so that a
  //   restart does not take a drifted window for it).
  const std::shared_ptr<const index::VectorIndex> idx = seg->index();
  if (idx == nullptr || compacting_.load() || jobs.Active(core_.JobKey("build"))) return;
  std::string why;
  bool drift = false;
  const uint64_t trained = core_.manifest_.TrainedPoints();
  if (options.auto_retrain_growth > 0 && trained > 0 &&
      static_cast<double>(live) >= options.auto_retrain_growth * static_cast<double>(trained)) {
    why = absl::StrCat(live, " points, ",
                       absl::SixDigits(static_cast<double>(live) / static_cast<double>(trained)),
                       "x the ", trained, " its index was trained on");
  } else if (options.auto_retrain_drift > 0) {
    const index::CodeErrorStats e = idx->CodeError();
    if (e.windows > 0 && core_.manifest_.code_error == 0 && e.first_window_mean > 0) {
      core_.manifest_.code_error = e.first_window_mean;
      if (absl::Status st = core_.SaveManifestLocked(); !st.ok()) {
        ZOOM_LOG(WARNING, "collection ", name, ": saving the code error baseline: ",
                 st.message());
      }
    }
    const double base = core_.manifest_.code_error;
    if (e.windows > 0 && base > 0 && e.latest_window_mean >= options.auto_retrain_drift * base) {
      drift = true;
      why = absl::StrCat("the codes fit the latest ", index::CodeErrorStats::kCodeErrorWindow,
                         " points ", absl::SixDigits(e.latest_window_mean / base),
                         "x worse than the first after the build (", live, " points)");
    }
  }
  if (why.empty() || !MaintenanceDue()) return;
  absl::Status st = StartBuild();
  if (st.ok()) {
    ++auto_retrains_;
    if (drift) ++drift_retrains_;
  }
  ZOOM_LOG(INFO, "collection ", name, ": ", why, ", automatic retrain: ",
           st.ok() ? absl::string_view("started") : st.message());
}

bool CollectionMaintenance::RetrainDueLocked(uint64_t live) const {
  const CollectionOptions& options = core_.options_;
  const uint64_t trained = core_.manifest_.TrainedPoints();
  if (trained == 0) return true;
  if (options.auto_retrain_growth > 0 &&
      static_cast<double>(live) >= options.auto_retrain_growth * static_cast<double>(trained)) {
    return true;
  }
  const std::shared_ptr<const index::VectorIndex> idx = core_.Current()->index();
  if (options.auto_retrain_drift > 0 && idx != nullptr && core_.manifest_.code_error > 0) {
    const index::CodeErrorStats e = idx->CodeError();
    return e.windows > 0 &&
           e.latest_window_mean >= options.auto_retrain_drift * core_.manifest_.code_error;
  }
  return false;
}

// ---- Info --------------------------------------------------------------------------

void CollectionMaintenance::FillInfo(CollectionInfo* info) const {
  JobRunner& jobs = *core_.jobs_;
  info->index_state = index_state_.load();
  info->auto_retrains = auto_retrains_.load();
  info->drift_retrains = drift_retrains_.load();
  info->build_progress = jobs.Active(core_.JobKey("build")) ? build_progress_.load() : 0;
  info->index_error = std::string(jobs.LastStatus(core_.JobKey("build")).message());
  info->compaction_error = std::string(jobs.LastStatus(core_.JobKey("compact")).message());
  const JobRunner::Backoff backoff = jobs.BackoffOf(core_.JobKey("maintenance"));
  info->maintenance_failures = backoff.failures;
  info->maintenance_retry_at = backoff.retry_at;
}

}  // namespace zoom::server
