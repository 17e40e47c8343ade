// CollectionMaintenance: compaction (the plan, the copy, the catch-up and
// the switch; compactor.h) and the release of retired segments.

#include <algorithm>
#include <filesystem>
#include <memory>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/process.h"
#include "common/timer.h"
#include "server/engine/collection_maintenance.h"
#include "server/engine/compactor.h"

namespace zoom::server {
namespace {

namespace fs = std::filesystem;

}  // namespace

absl::Status CollectionMaintenance::Compact() {
  // dropped: CompactOnce says so
  if (closing_ && !core_.dropped_) return ClosingError("compaction");
  if (core_.jobs_->Active(core_.JobKey("build"))) {
    return absl::FailedPreconditionError(absl::StrCat(
        "an index build of '", core_.config_.name, "' is running; compact after it"));
  }
  absl::Status st;
  try {
    st = CompactOnce();
  } catch (const std::bad_alloc&) {
    st = absl::ResourceExhaustedError("out of memory during compaction");
  } catch (const std::exception& e) {
    st = absl::InternalError(absl::StrCat("compaction failed: ", e.what()));
  }
  if (!core_.dropped_) NoteMaintenance(/*compaction=*/true, st);
  ReleaseRetired();
  return st;
}

absl::Status CollectionMaintenance::CompactOnce() {
  const CollectionConfig& config = core_.config_;
  const std::string& dir = core_.dir_;
  storage::MetadataStore* const metadata = core_.metadata_;
  absl::MutexLock one(&core_.compact_mu_);
  compacting_ = true;  // no build starts until it ends (StartBuildImpl)
  absl::Cleanup not_compacting = [this] { compacting_ = false; };
  // 1. The plan, under the write lock (briefly); the new space announced in
  //    the manifest (a crash from here on leaves no garbage).
  CompactionPlan plan;
  {
    absl::MutexLock w(&core_.write_mu_);
    if (core_.dropped_) return core_.DroppedError();
    plan.old = core_.Current();
    plan.visible = plan.old->visible();
    for (const auto& [id, ext] : plan.old->LiveRecords()) plan.live_ids.push_back(id);
    if (plan.live_ids.size() == plan.old->records()) return absl::OkStatus();  // none dead
    if (core_.jobs_->Active(core_.JobKey("build"))) {
      return absl::FailedPreconditionError(
          absl::StrCat("an index build of '", config.name, "' is running; compact after it"));
    }
    ZOOM_ASSIGN_OR_RETURN(plan.space, metadata->AllocateId());
    plan.vectors_file = core_.manifest_.NextFile("vectors", ".zvec");
    plan.snapshot_file = core_.manifest_.NextFile("index", ".zidx");
    plan.rebuild_index = plan.old->index() != nullptr &&
                         plan.live_ids.size() >= config.MinIndexPoints();
    plan.keep_quantizer = plan.rebuild_index &&
                          index::TraitsOf(plan.old->index()->spec()).streaming_build &&
                          !RetrainDueLocked(plan.live_ids.size());
    core_.manifest_.pending_space = plan.space;
    if (absl::Status st = core_.SaveManifestLocked(); !st.ok()) {
      core_.manifest_.pending_space = 0;
      return st;
    }
  }
  Stopwatch sw;
  // Removes what the compaction made; under the write lock.
  auto undo = [&](const absl::Status& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(core_.write_mu_) {
    metadata->DropRecords(plan.space).IgnoreError();
    std::error_code ec;
    fs::remove(fs::path(dir) / plan.vectors_file, ec);
    fs::remove(fs::path(dir) / plan.snapshot_file, ec);
    core_.manifest_.pending_space = 0;
    if (!core_.dropped_) core_.SaveManifestLocked().IgnoreError();
    return why;
  };
  // 2. The copy, without the lock (writes go on).
  CompactorOptions copts{core_.options_.store, core_.EngineOptionsFor(),
                         core_.options_.build_threads, &closing_};
  auto fresh_or = CopyLiveRecords(dir, plan, config, copts, metadata, core_.dropping_,
                                  core_.DroppedError());
  absl::MutexLock w(&core_.write_mu_);
  if (!fresh_or.ok()) return undo(fresh_or.status());
  if (core_.dropped_) return undo(core_.DroppedError());
  std::shared_ptr<Segment> fresh = std::move(*fresh_or);
  // 3. The writes made during the copy.
  uint64_t added = 0, removed = 0;
  if (absl::Status st = CatchUp(plan, fresh.get(), metadata, &added, &removed); !st.ok()) {
    fresh.reset();
    return undo(st);
  }
  // The payload indexes of the new segment's ids, from the fields as they
  // are now (under the lock: no write can slip between).
  if (absl::Status st = fresh->FillFieldIndexes(core_.manifest_.field_indexes); !st.ok()) {
    fresh.reset();
    return undo(st);
  }
  // 4. The switch: one manifest names the new space, file and snapshot,
  //    and lists the old space as retired.
  const CollectionManifest before = core_.manifest_;
  fresh = core_.ServeLocked(std::move(fresh));  // `fresh` is now the old segment
  core_.manifest_.pending_space = 0;
  core_.manifest_.snapshot = plan.rebuild_index ? plan.snapshot_file : "";
  core_.manifest_.snapshot_count = plan.rebuild_index ? plan.live_ids.size() : 0;
  if (!plan.keep_quantizer) {
    // Trained anew (or no index): the new index's first window sets the
    // code error's baseline. A kept quantiser keeps both.
    core_.manifest_.trained_points = plan.rebuild_index ? plan.live_ids.size() : 0;
    core_.manifest_.code_error = 0;
  }
  if (plan.rebuild_index) ++core_.manifest_.index_epoch;
  core_.manifest_.retired_spaces.push_back(plan.old->space());
  if (absl::Status st = core_.SaveManifestLocked(); !st.ok()) {
    // The stored manifest still names the old files: go back to them.
    fresh = core_.ServeLocked(std::move(fresh));
    core_.manifest_ = before;
    return undo(st);
  }
  if (plan.rebuild_index) knobs_.SetCalibration(knobs_.CurrentCalibration(), /*current=*/false);
  core_.retired_.push_back(std::move(fresh));  // released once no reader holds it
  std::error_code ec;
  fs::remove(fs::path(dir) / plan.old->vectors_file(), ec);  // open readers keep reading it
  if (!before.snapshot.empty()) fs::remove(fs::path(dir) / before.snapshot, ec);
  index_state_ = core_.Current()->index() != nullptr ? IndexState::kReady : IndexState::kNone;
  ZOOM_LOG(INFO, "collection ", config.name, ": compacted ", plan.old->visible(), " -> ",
           core_.Current()->visible(), " records in ", absl::SixDigits(sw.ElapsedMicros() / 1e6),
           " s (", added, " added and ", removed, " removed during it, applied at the switch)");
  ReleaseFreedMemory();
  return absl::OkStatus();
}

bool CollectionMaintenance::NeedsCompaction() const {
  const CollectionOptions& options = core_.options_;
  if (options.auto_compact_dead_ratio <= 0 || core_.dropped_ ||
      core_.jobs_->Active(core_.JobKey("build"))) {
    return false;
  }
  if (!MaintenanceDue()) return false;  // a failed one waits for its backoff
  std::shared_ptr<Segment> seg = core_.Current();
  const uint64_t stored = seg->records();
  const uint64_t live = seg->live();
  const uint64_t dead = stored - std::min(stored, live);
  return dead >= options.auto_compact_min_dead &&
         static_cast<double>(dead) >= options.auto_compact_dead_ratio * static_cast<double>(stored);
}

void CollectionMaintenance::ReleaseRetired() {
  absl::MutexLock w(&core_.write_mu_);
  if (!core_.dropped_) core_.ReleaseRetiredLocked();
}

}  // namespace zoom::server
