// Collection: background work: index builds (and the automatic ones),
// compaction, calibration, the retry backoff.
#include <malloc.h>

#include <algorithm>
#include <filesystem>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/timer.h"
#include "server/engine/collection.h"
#include "server/engine/compactor.h"

namespace zoom::server {
namespace {

namespace fs = std::filesystem;

// Returns the heap's free memory to the system: after a build or a
// compaction, glibc keeps the staging buffers' pages (at 1M points the
// server's RSS stayed ~130 MB above what it serves from).
void ReleaseFreedMemory() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

}  // namespace

// ---- Index builds ------------------------------------------------------------

absl::Status Collection::StartBuild() { return StartBuildImpl(/*join_running=*/false); }

absl::Status Collection::StartOrJoinBuild() { return StartBuildImpl(/*join_running=*/true); }

absl::Status Collection::StartBuildImpl(bool join_running) {
  const std::string key = JobKey("build");
  if (join_running && jobs_->Active(key)) return absl::OkStatus();
  if (dropped_) return DroppedError();
  if (closing_) return ClosingError("index build");
  if (compacting_.load()) {
    // The compaction rebuilds the index of the segment it makes.
    return absl::FailedPreconditionError(
        absl::StrCat("a compaction of '", config_.name, "' is running; build after it"));
  }
  const uint64_t live = Current()->live();
  const uint64_t min_points = config_.MinIndexPoints();
  if (live < min_points) {
    return absl::FailedPreconditionError(absl::StrCat(
        "collection '", config_.name, "' has ", live, " points; an index needs at least ",
        min_points, min_points > kMinIndexPoints ? " (its nlist)" : "",
        " to train (searches are exact until then)"));
  }
  JobRunner::Job job;
  job.key = key;
  job.group = jobs_group_;
  job.priority = JobRunner::Priority::kUser;
  job.run = [this] { return RunBuild(); };
  auto before = std::make_shared<IndexState>(IndexState::kNone);
  job.on_queued = [this, before] {
    build_progress_ = 0;
    *before = index_state_.exchange(IndexState::kBuilding);
  };
  job.on_dropped = [this, before] { index_state_ = *before; };  // it never ran
  job.dropped = ClosingError("index build");
  if (!jobs_->TrySubmit(std::move(job))) {
    if (join_running && jobs_->Active(key)) return absl::OkStatus();
    if (!jobs_->Active(key)) return ClosingError("index build");  // the runner stops
    return absl::FailedPreconditionError(
        absl::StrCat("an index build of '", config_.name, "' is already running"));
  }
  return absl::OkStatus();
}

absl::Status Collection::RunBuild() {
  Stopwatch sw;
  std::shared_ptr<Segment> seg = Current();
  const uint64_t n = seg->records();
  // The live points among [0, n) the build trains on (the live count now:
  // writes after this moment are added to the new index, not trained on).
  const uint64_t trained = seg->live();
  const bool replaces = seg->index() != nullptr;
  index::StreamingBuildTimes phases;
  auto built =
      BuildSegmentIndex(config_, options_.build_threads, *seg, n, &build_progress_, &phases,
                        /*trained_from=*/nullptr, &closing_);
  const double build_s = sw.ElapsedMicros() / 1e6;
  absl::Status st = built.status();
  const bool cancelled = absl::IsCancelled(st) && closing_;
  if (cancelled) st = ClosingError("index build");
  build_progress_ = 0.9;
  if (st.ok()) {
    absl::MutexLock w(&write_mu_);
    if (Current() != seg || manifest_.pending_space != 0) {
      st = absl::AbortedError("the collection was compacted during the build; build again");
    } else {
      st = seg->SetIndex(std::move(*built));
      if (st.ok()) {
        manifest_.trained_points = trained;
        manifest_.code_error = 0;  // the new index's first window sets it
        ++manifest_.index_epoch;  // the earlier curve serves until it is measured
        st = SaveSnapshotLocked();
        if (st.ok()) {
          SetCalibration(CurrentCalibration(), /*current=*/false);
        } else {
          --manifest_.index_epoch;  // the stored manifest still names the old index
        }
      }
    }
  }
  const double installed_s = sw.ElapsedMicros() / 1e6;
  if (st.ok() && options_.calibration_queries > 0) {
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
                 : Current()->index() != nullptr ? IndexState::kReady
                 : overtaken                              ? IndexState::kNone
                                                          : IndexState::kFailed;
  if (st.ok()) {
    // The phases (zoomload --workload scale reads this line): the
    // streaming build's own (zero for hnsw_pq, which builds in RAM), the
    // install (the index snapshot written), the recall curve's calibration.
    ZOOM_LOG(INFO, "collection ", config_.name, ": index build over ", n, " points (",
             trained, " live) done in ", absl::SixDigits(sw.ElapsedMicros() / 1e6),
             " s (phases: sample ", absl::SixDigits(phases.sample_s), " s, train ",
             absl::SixDigits(phases.train_s), " s, encode ", absl::SixDigits(phases.encode_s),
             " s, layout ", absl::SixDigits(phases.layout_s), " s, build ",
             absl::SixDigits(build_s), " s, install ", absl::SixDigits(installed_s - build_s),
             " s, calibration ", absl::SixDigits(sw.ElapsedMicros() / 1e6 - installed_s), " s)",
             replaces ? "; the previous index is freed by the last search holding it" : "");
  } else if (cancelled) {
    ZOOM_LOG(INFO, "collection ", config_.name, ": index build over ", n,
             " points stopped after ", absl::SixDigits(build_s), " s: the collection is closing");
  } else {
    ZOOM_LOG(WARNING, "collection ", config_.name, ": index build over ", n, " points failed: ",
             st.message());
  }
  if (!overtaken) NoteMaintenance(/*compaction=*/false, st);
  return st;
}

void Collection::WhenBuildDone(std::function<void(absl::Status)> done) {
  jobs_->WhenDone(JobKey("build"), std::move(done));
}

absl::Status Collection::WaitForBuild() { return jobs_->Wait(JobKey("build")); }

void Collection::NoteMaintenance(bool compaction, const absl::Status& st) {
  if (compaction) jobs_->SetLastStatus(JobKey("compact"), st);
  const JobRunner::Backoff b = jobs_->NoteResult(JobKey("maintenance"), st);
  if (st.ok()) return;
  ZOOM_LOG(WARNING, "collection ", config_.name, ": ", compaction ? "compaction" : "index build",
           " failed (", b.failures, " in a row); automatic maintenance retries in ",
           absl::FormatDuration(absl::Trunc(b.retry_at - absl::Now(), absl::Seconds(1))));
}

bool Collection::MaintenanceDue() const { return jobs_->Due(JobKey("maintenance")); }

// ---- Compaction --------------------------------------------------------------

absl::Status Collection::Compact() {
  if (closing_ && !dropped_) return ClosingError("compaction");  // dropped: CompactOnce says so
  if (jobs_->Active(JobKey("build"))) {
    return absl::FailedPreconditionError(
        absl::StrCat("an index build of '", config_.name, "' is running; compact after it"));
  }
  absl::Status st;
  try {
    st = CompactOnce();
  } catch (const std::bad_alloc&) {
    st = absl::ResourceExhaustedError("out of memory during compaction");
  } catch (const std::exception& e) {
    st = absl::InternalError(absl::StrCat("compaction failed: ", e.what()));
  }
  if (!dropped_) NoteMaintenance(/*compaction=*/true, st);
  ReleaseRetired();
  return st;
}

void Collection::MarkDropped(bool dropped) {
  dropping_ = dropped;  // a compaction in progress stops at its next chunk
  absl::MutexLock c(&compact_mu_);
  absl::MutexLock w(&write_mu_);
  dropped_ = dropped;
}

absl::Status Collection::CompactOnce() {
  absl::MutexLock one(&compact_mu_);
  compacting_ = true;  // no build starts until it ends (StartBuildImpl)
  absl::Cleanup not_compacting = [this] { compacting_ = false; };
  // 1. The plan, under the write lock (briefly); the new space announced in
  //    the manifest (a crash from here on leaves no garbage).
  CompactionPlan plan;
  {
    absl::MutexLock w(&write_mu_);
    if (dropped_) return DroppedError();
    plan.old = Current();
    plan.visible = plan.old->visible();
    for (const auto& [id, ext] : plan.old->LiveRecords()) plan.live_ids.push_back(id);
    if (plan.live_ids.size() == plan.old->records()) return absl::OkStatus();  // none dead
    if (jobs_->Active(JobKey("build"))) {
      return absl::FailedPreconditionError(
          absl::StrCat("an index build of '", config_.name, "' is running; compact after it"));
    }
    ZOOM_ASSIGN_OR_RETURN(plan.space, metadata_->AllocateId());
    plan.vectors_file = manifest_.NextFile("vectors", ".zvec");
    plan.snapshot_file = manifest_.NextFile("index", ".zidx");
    plan.rebuild_index = plan.old->index() != nullptr &&
                         plan.live_ids.size() >= config_.MinIndexPoints();
    plan.keep_quantizer = plan.rebuild_index &&
                          plan.old->index()->spec().kind == index::IndexKind::kIvfHnswPq &&
                          !RetrainDueLocked(plan.live_ids.size());
    manifest_.pending_space = plan.space;
    if (absl::Status st = SaveManifestLocked(); !st.ok()) {
      manifest_.pending_space = 0;
      return st;
    }
  }
  Stopwatch sw;
  // Removes what the compaction made; under the write lock.
  auto undo = [&](const absl::Status& why) {
    metadata_->DropRecords(plan.space).IgnoreError();
    std::error_code ec;
    fs::remove(fs::path(dir_) / plan.vectors_file, ec);
    fs::remove(fs::path(dir_) / plan.snapshot_file, ec);
    manifest_.pending_space = 0;
    if (!dropped_) SaveManifestLocked().IgnoreError();
    return why;
  };
  // 2. The copy, without the lock (writes go on).
  CompactorOptions copts{options_.store, EngineOptionsFor(), options_.build_threads, &closing_};
  auto fresh_or =
      CopyLiveRecords(dir_, plan, config_, copts, metadata_, dropping_, DroppedError());
  absl::MutexLock w(&write_mu_);
  if (!fresh_or.ok()) return undo(fresh_or.status());
  if (dropped_) return undo(DroppedError());
  std::shared_ptr<Segment> fresh = std::move(*fresh_or);
  // 3. The writes made during the copy.
  uint64_t added = 0, removed = 0;
  if (absl::Status st = CatchUp(plan, fresh.get(), metadata_, &added, &removed); !st.ok()) {
    fresh.reset();
    return undo(st);
  }
  // The payload indexes of the new segment's ids, from the fields as they
  // are now (under the lock: no write can slip between).
  if (absl::Status st = fresh->FillFieldIndexes(manifest_.field_indexes); !st.ok()) {
    fresh.reset();
    return undo(st);
  }
  // 4. The switch: one manifest names the new space, file and snapshot,
  //    and lists the old space as retired.
  const CollectionManifest before = manifest_;
  {
    absl::MutexLock m(&segment_mu_);
    std::swap(segment_, fresh);  // `fresh` is now the old segment
  }
  manifest_.pending_space = 0;
  manifest_.snapshot = plan.rebuild_index ? plan.snapshot_file : "";
  manifest_.snapshot_count = plan.rebuild_index ? plan.live_ids.size() : 0;
  if (!plan.keep_quantizer) {
    // Trained anew (or no index): the new index's first window sets the
    // code error's baseline. A kept quantiser keeps both.
    manifest_.trained_points = plan.rebuild_index ? plan.live_ids.size() : 0;
    manifest_.code_error = 0;
  }
  if (plan.rebuild_index) ++manifest_.index_epoch;
  manifest_.retired_spaces.push_back(plan.old->space());
  if (absl::Status st = SaveManifestLocked(); !st.ok()) {
    // The stored manifest still names the old files: go back to them.
    {
      absl::MutexLock m(&segment_mu_);
      std::swap(segment_, fresh);
    }
    manifest_ = before;
    return undo(st);
  }
  if (plan.rebuild_index) SetCalibration(CurrentCalibration(), /*current=*/false);
  retired_.push_back(std::move(fresh));  // released once no reader holds it
  std::error_code ec;
  fs::remove(fs::path(dir_) / plan.old->vectors_file(), ec);  // open readers keep reading it
  if (!before.snapshot.empty()) fs::remove(fs::path(dir_) / before.snapshot, ec);
  index_state_ = Current()->index() != nullptr ? IndexState::kReady : IndexState::kNone;
  ZOOM_LOG(INFO, "collection ", config_.name, ": compacted ", plan.old->visible(), " -> ",
           Current()->visible(), " records in ", absl::SixDigits(sw.ElapsedMicros() / 1e6),
           " s (", added, " added and ", removed, " removed during it, applied at the switch)");
  ReleaseFreedMemory();
  return absl::OkStatus();
}

bool Collection::NeedsCompaction() const {
  if (options_.auto_compact_dead_ratio <= 0 || dropped_ || jobs_->Active(JobKey("build"))) return false;
  if (!MaintenanceDue()) return false;  // a failed one waits for its backoff
  std::shared_ptr<Segment> seg = Current();
  const uint64_t stored = seg->records();
  const uint64_t live = seg->live();
  const uint64_t dead = stored - std::min(stored, live);
  return dead >= options_.auto_compact_min_dead &&
         static_cast<double>(dead) >= options_.auto_compact_dead_ratio * static_cast<double>(stored);
}

// ---- Calibration ---------------------------------------------------------------

absl::Status Collection::RunCalibration() {
  std::shared_ptr<Segment> seg;
  uint64_t epoch = 0;
  {
    absl::MutexLock w(&write_mu_);
    if (dropped_) return DroppedError();
    seg = Current();
    epoch = manifest_.index_epoch;
    calibration_tried_epoch_ = epoch;
  }
  Stopwatch sw;
  CalibrationOptions options;
  options.queries = options_.calibration_queries;
  options.cancelled = &closing_;
  absl::StatusOr<Calibration> cal =
      seg->Calibrate(config_.index.kind, options);
  absl::Status st = cal.status();
  if (st.ok()) {
    absl::MutexLock w(&write_mu_);
    if (dropped_ || Current() != seg || manifest_.index_epoch != epoch) {
      st = absl::AbortedError("the index was replaced during its calibration");
    } else {
      const CollectionManifest before = manifest_;
      manifest_.calibration = cal->Encode();
      manifest_.calibration_epoch = epoch;
      st = SaveManifestLocked();
      if (st.ok()) {
        SetCalibration(std::make_shared<const Calibration>(*cal), /*current=*/true);
      } else {
        manifest_ = before;
      }
    }
  }
  if (!st.ok()) {
    // Overtaken (a new index is measured next) or stopped by the close:
    // not a failure of the curve.
    if (absl::IsAborted(st) || absl::IsCancelled(st)) {
      ZOOM_LOG(INFO, "collection ", config_.name, ": calibration not kept: ", st.message());
      return st;
    }
    ZOOM_LOG(WARNING, "collection ", config_.name, ": calibration failed: ", st.message());
    SetCalibrationError(std::string(st.message()));
    return st;
  }
  const double target = options_.default_target_recall > 0 ? options_.default_target_recall : 0.95;
  const Calibration::Choice c = cal->Choose(target);
  ZOOM_LOG(INFO, "collection ", config_.name, ": calibrated over ", cal->queries, " queries, ",
           cal->points.size(), " knob settings, in ", absl::SixDigits(sw.ElapsedMicros() / 1e6),
           " s; recall@", cal->k, " ", target, (c.reached ? "" : " not reached; best"), ": ef ",
           c.point.ef, " nprobe ", c.point.nprobe, " K' ", c.point.rerank_candidates, " (recall ",
           absl::SixDigits(c.point.recall), ", ", absl::SixDigits(c.point.mean_us), " us)");
  return absl::OkStatus();
}

absl::Status Collection::CalibrateNow() {
  if (Current()->index() == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("collection '", config_.name, "' has no index to calibrate"));
  }
  return RunCalibration();
}

void Collection::StopBackgroundWork() {
  closing_ = true;
  jobs_->CancelGroup(jobs_group_, /*wait=*/false);  // what waits is dropped
  jobs_->Wait(JobKey("calibrate")).IgnoreError();
}

absl::Status Collection::ClosingError(absl::string_view what) const {
  return absl::UnavailableError(absl::StrCat(
      "collection '", config_.name, "' is closing (the server is shutting down or it is dropped): the ",
      what, " stopped or did not start; once the server is back, automatic builds start again, or ",
      "call it again"));
}

bool Collection::MaybeStartCalibration() {
  if (options_.calibration_queries == 0 || dropped_ || closing_ || compacting_.load() ||
      jobs_->Active(JobKey("build")) || jobs_->Active(JobKey("calibrate"))) {
    return false;
  }
  {
    absl::MutexLock w(&write_mu_);
    if (Current()->index() == nullptr) return false;
    if (calibration_tried_epoch_ == manifest_.index_epoch) return false;
    if (calibration_.load()->current) return false;
  }
  JobRunner::Job job;
  job.key = JobKey("calibrate");
  job.group = jobs_group_;
  job.priority = JobRunner::Priority::kIdle;
  job.run = [this] { return RunCalibration(); };
  job.dropped = ClosingError("calibration");
  return jobs_->TrySubmit(std::move(job));
}


void Collection::MaybeAutoMaintainLocked() {
  if (closing_) return;  // the server stops: nothing new starts
  std::shared_ptr<Segment> seg = Current();
  const uint64_t live = seg->live();
  // After a failed build, the automatic one waits for the backoff (else
  // every write would start it again).
  if (options_.auto_build_min_points > 0 && live >= options_.auto_build_min_points &&
      seg->index() == nullptr && !jobs_->Active(JobKey("build")) && MaintenanceDue()) {
    absl::Status st = StartBuild();
    ZOOM_LOG(INFO, "collection ", config_.name, ": ", live, " points, automatic index build: ",
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
  if (idx == nullptr || compacting_.load() || jobs_->Active(JobKey("build"))) return;
  std::string why;
  bool drift = false;
  const uint64_t trained = TrainedPointsLocked();
  if (options_.auto_retrain_growth > 0 && trained > 0 &&
      static_cast<double>(live) >= options_.auto_retrain_growth * static_cast<double>(trained)) {
    why = absl::StrCat(live, " points, ",
                       absl::SixDigits(static_cast<double>(live) / static_cast<double>(trained)),
                       "x the ", trained, " its index was trained on");
  } else if (options_.auto_retrain_drift > 0) {
    const index::CodeErrorStats e = idx->CodeError();
    if (e.windows > 0 && manifest_.code_error == 0 && e.first_window_mean > 0) {
      manifest_.code_error = e.first_window_mean;
      if (absl::Status st = SaveManifestLocked(); !st.ok()) {
        ZOOM_LOG(WARNING, "collection ", config_.name, ": saving the code error baseline: ",
                 st.message());
      }
    }
    const double base = manifest_.code_error;
    if (e.windows > 0 && base > 0 && e.latest_window_mean >= options_.auto_retrain_drift * base) {
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
  ZOOM_LOG(INFO, "collection ", config_.name, ": ", why, ", automatic retrain: ",
           st.ok() ? absl::string_view("started") : st.message());
}

uint64_t Collection::TrainedPointsLocked() const {
  if (manifest_.trained_points != 0) return manifest_.trained_points;
  // A manifest of a zoomd before trained_points: the index covers
  // snapshot_count records, so it trained on at most that many.
  return manifest_.snapshot.empty() ? 0 : manifest_.snapshot_count;
}

bool Collection::RetrainDueLocked(uint64_t live) const {
  const uint64_t trained = TrainedPointsLocked();
  if (trained == 0) return true;
  if (options_.auto_retrain_growth > 0 &&
      static_cast<double>(live) >= options_.auto_retrain_growth * static_cast<double>(trained)) {
    return true;
  }
  const std::shared_ptr<const index::VectorIndex> idx = Current()->index();
  if (options_.auto_retrain_drift > 0 && idx != nullptr && manifest_.code_error > 0) {
    const index::CodeErrorStats e = idx->CodeError();
    return e.windows > 0 &&
           e.latest_window_mean >= options_.auto_retrain_drift * manifest_.code_error;
  }
  return false;
}



}  // namespace zoom::server
