// Collection: open, create, close, the drop, Info. (Writes:
// collection_write.cc; reads: collection_read.cc; snapshots:
// collection_snapshot.cc; the parts: collection_core.cc,
// collection_maintenance.cc, collection_compaction.cc,
// collection_field_indexes.cc.)
#include "server/engine/collection.h"

#include <algorithm>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace zoom::server {
namespace {
namespace fs = std::filesystem;
}  // namespace

// ---- Open / create -----------------------------------------------------------

Collection::Collection(const std::string& dir, storage::MetadataStore* metadata, uint32_t id,
                       const CollectionConfig& config, const CollectionOptions& options)
    : core_(dir, metadata, id, config, options),
      knobs_(core_.config(), core_.options_),
      maintenance_(core_, knobs_),
      field_indexes_(core_) {}

absl::StatusOr<std::unique_ptr<Collection>> Collection::Create(
    const std::string& dir, storage::MetadataStore* metadata, uint32_t id,
    const CollectionConfig& config, const CollectionOptions& options) {
  std::error_code ec;
  if (!fs::create_directories(dir, ec) || ec) {
    return absl::InternalError(absl::StrCat("cannot create the collection directory ", dir, ": ",
                                            ec ? ec.message() : "it exists"));
  }
  std::unique_ptr<Collection> c(new Collection(dir, metadata, id, config, options));
  CollectionCore& core = c->core_;
  ZOOM_ASSIGN_OR_RETURN(auto seg, core.OpenSegment(id, "vectors-1.zvec", /*create=*/true));
  {
    absl::MutexLock w(&core.write_mu_);
    core.manifest_ = CollectionManifest();
    core.manifest_.space = id;
    core.manifest_.vectors = seg->vectors_file();
    core.manifest_.seq = 2;
    core.ServeLocked(std::move(seg));
    ZOOM_RETURN_IF_ERROR(core.SaveManifestLocked());
  }
  return c;
}

absl::StatusOr<std::unique_ptr<Collection>> Collection::Open(
    const std::string& dir, storage::MetadataStore* metadata,
    const storage::CollectionRecord& record, const CollectionOptions& options) {
  ZOOM_ASSIGN_OR_RETURN(CollectionConfig config, CollectionConfig::Decode(record.config));
  if (record.state.empty()) {
    // Create saves the state before the collection is handed out: without
    // one, a crash interrupted the create and nothing was ever stored in it.
    // Start it over, empty (instead of failing the whole database's open).
    std::error_code ec;
    fs::remove_all(dir, ec);
    return Create(dir, metadata, record.id, config, options);
  }
  ZOOM_ASSIGN_OR_RETURN(CollectionManifest manifest,
                        CollectionManifest::Decode(record.state, record.id));
  std::unique_ptr<Collection> c(new Collection(dir, metadata, record.id, config, options));
  CollectionCore& core = c->core_;

  absl::MutexLock w(&core.write_mu_);
  ZOOM_ASSIGN_OR_RETURN(uint64_t log_position, metadata->GetLogPosition(record.id));
  core.log_position_.store(log_position, std::memory_order_release);
  ZOOM_ASSIGN_OR_RETURN(uint64_t log_version, metadata->GetLogVersion(record.id));
  core.log_version_.store(log_version, std::memory_order_release);
  // An interrupted compaction's records, and those of segments retired
  // before the last close, are garbage now.
  if (manifest.pending_space != 0) ZOOM_RETURN_IF_ERROR(metadata->DropRecords(manifest.pending_space));
  for (uint32_t space : manifest.retired_spaces) ZOOM_RETURN_IF_ERROR(metadata->DropRecords(space));
  manifest.pending_space = 0;
  manifest.retired_spaces.clear();
  // Files the manifest does not name are left-overs of an interrupted
  // compaction or snapshot: remove them.
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name != manifest.vectors && name != manifest.snapshot) fs::remove(entry.path(), ec);
  }
  ZOOM_ASSIGN_OR_RETURN(auto seg,
                        core.OpenSegment(manifest.space, manifest.vectors, /*create=*/false));
  // The index snapshot (the maintenance's: its state, or the build's error).
  c->maintenance_.LoadIndex(seg.get(), &manifest);
  if (!manifest.calibration.empty()) {
    absl::StatusOr<Calibration> cal = Calibration::Decode(manifest.calibration);
    if (cal.ok()) {
      c->knobs_.SetCalibration(std::make_shared<const Calibration>(*std::move(cal)),
                               manifest.calibration_epoch == manifest.index_epoch);
    } else {
      ZOOM_LOG(WARNING, "collection ", config.name, ": stored calibration dropped (",
               cal.status().message(), "); it is measured again");
      manifest.calibration.clear();
    }
  }
  ZOOM_RETURN_IF_ERROR(seg->FillFieldIndexes(manifest.field_indexes));
  core.manifest_ = std::move(manifest);
  core.trained_points_ = core.manifest_.TrainedPoints();
  core.code_error_base_ = core.manifest_.code_error;
  core.ServeLocked(std::move(seg));
  return c;
}

Collection::~Collection() {
  // Its waiting jobs are dropped; the running ones stop at their next
  // cancellation point (a build, a calibration, a payload index build).
  field_indexes_.StopBuilds();
  maintenance_.MarkClosing();
  core_.jobs_->CancelGroup(core_.jobs_group_, /*wait=*/true);
  absl::MutexLock w(&core_.write_mu_);
  std::shared_ptr<Segment> seg = core_.Current();
  const std::shared_ptr<const index::VectorIndex> idx = seg ? seg->index() : nullptr;
  if (!core_.dropped_ && idx != nullptr && idx->size() > core_.manifest_.snapshot_count) {
    absl::Status st = core_.SaveSnapshotLocked();
    if (!st.ok()) {
      ZOOM_LOG(WARNING, "collection ", core_.config_.name, ": snapshot at close failed: ",
               st.message());
    }
  }
  if (!core_.dropped_) core_.ReleaseRetiredLocked();
}

void Collection::MarkDropped(bool dropped) {
  core_.dropping_ = dropped;  // a compaction in progress stops at its next chunk
  absl::MutexLock c(&core_.compact_mu_);
  absl::MutexLock w(&core_.write_mu_);
  core_.dropped_ = dropped;
}

// ---- Info --------------------------------------------------------------------

CollectionInfo Collection::Info() const {
  CollectionInfo info;
  std::shared_ptr<Segment> seg = core_.Current();
  info.config = core_.config_;
  info.points = seg->live();
  info.stored_records = seg->records();
  info.deleted_records = info.stored_records - std::min(info.stored_records, info.points);
  // The index state, its build's progress and error, the retrains, the
  // compaction's error, the backoff.
  maintenance_.FillInfo(&info);
  const std::shared_ptr<const index::VectorIndex> idx = seg->index();
  info.indexed_points = idx ? idx->size() : 0;
  if (idx != nullptr) {
    info.trained_points = core_.trained_points_.load();
    const index::CodeErrorStats e = idx->CodeError();
    const double base = core_.code_error_base_.load();
    info.code_error_baseline = base;
    if (e.windows > 0 && base > 0) info.code_error_ratio = e.latest_window_mean / base;
  }
  // Every index still alive counts (a replaced one a search holds too).
  info.field_indexes = seg->FieldIndexes();
  info.resident_bytes = seg->ResidentBytes();
  info.disk_bytes = seg->store().file_bytes();
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(core_.dir_, ec)) {
    // (not a snapshot's hard link: ".snapshot-link-*")
    if (entry.path().extension() == ".zidx" &&
        entry.path().filename().string().rfind('.', 0) != 0) {
      info.disk_bytes += entry.file_size(ec);
    }
  }
  const std::shared_ptr<const CollectionKnobs::CalibrationState> cal = knobs_.state();
  info.calibration = cal->curve;
  info.calibration_current = cal->current;
  info.calibration_error = cal->error;
  info.default_target_recall = knobs_.DefaultTarget();
  return info;
}

}  // namespace zoom::server
