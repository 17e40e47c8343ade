// Collection: open, create, close, the manifest, retired segments, Info.
// (Writes: collection_write.cc; reads: collection_read.cc; builds,
// compaction and calibration: collection_maintenance.cc; snapshots:
// collection_snapshot.cc.)
#include "server/engine/collection.h"

#include <algorithm>
#include <filesystem>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/timer.h"

namespace zoom::server {
namespace {
namespace fs = std::filesystem;
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

// ---- Open / create -----------------------------------------------------------

Collection::Collection(const CollectionOptions& options) : options_(options) {
  jobs_ = options_.jobs;
  if (jobs_ == nullptr) {
    JobRunner::Options jo;
    jo.threads = 2;
    jo.retry_base = options_.maintenance_retry_base;
    jo.retry_max = options_.maintenance_retry_max;
    jobs_ = std::make_shared<JobRunner>(jo);
  }
  // A group of its own, never reused (a collection dropped and created
  // again under the same id gets a new one).
  static std::atomic<uint64_t> next{0};
  jobs_group_ = absl::StrCat("collection-", next.fetch_add(1), "/");
  calibration_.store(std::make_shared<const CalibrationState>());
}

std::string Collection::JobKey(std::string_view what) const {
  return absl::StrCat(jobs_group_, absl::string_view(what.data(), what.size()));
}

absl::StatusOr<std::shared_ptr<Segment>> Collection::OpenSegment(uint32_t space,
                                                                 const std::string& vectors_file,
                                                                 bool create) const {
  return Segment::Open(dir_, vectors_file, space, create, config_, options_.store,
                       EngineOptionsFor(), metadata_, id_);
}

EngineOptions Collection::EngineOptionsFor() const {
  EngineOptions e = options_.engine;
  e.cache_bytes = std::min(config_.cache_bytes > 0 ? config_.cache_bytes : e.cache_bytes,
                           options_.max_cache_bytes);
  return e;
}

absl::StatusOr<std::unique_ptr<Collection>> Collection::Create(
    const std::string& dir, storage::MetadataStore* metadata, uint32_t id,
    const CollectionConfig& config, const CollectionOptions& options) {
  std::error_code ec;
  if (!fs::create_directories(dir, ec) || ec) {
    return absl::InternalError(absl::StrCat("cannot create the collection directory ", dir, ": ",
                                            ec ? ec.message() : "it exists"));
  }
  std::unique_ptr<Collection> c(new Collection(options));
  c->dir_ = dir;
  c->metadata_ = metadata;
  c->id_ = id;
  c->config_ = config;
  ZOOM_ASSIGN_OR_RETURN(auto seg, c->OpenSegment(id, "vectors-1.zvec", /*create=*/true));
  {
    absl::MutexLock w(&c->write_mu_);
    c->manifest_ = CollectionManifest();
    c->manifest_.space = id;
    c->manifest_.vectors = seg->vectors_file();
    c->manifest_.seq = 2;
    {
      absl::MutexLock m(&c->segment_mu_);
      c->segment_ = std::move(seg);
    }
    ZOOM_RETURN_IF_ERROR(c->SaveManifestLocked());
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
  std::unique_ptr<Collection> c(new Collection(options));
  c->dir_ = dir;
  c->metadata_ = metadata;
  c->id_ = record.id;
  c->config_ = config;

  absl::MutexLock w(&c->write_mu_);
  ZOOM_ASSIGN_OR_RETURN(uint64_t log_position, metadata->GetLogPosition(record.id));
  c->log_position_.store(log_position, std::memory_order_release);
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
                        c->OpenSegment(manifest.space, manifest.vectors, /*create=*/false));
  const std::string snapshot = manifest.snapshot;
  const uint64_t snapshot_count = manifest.snapshot_count;
  const uint64_t trained_points = manifest.trained_points;
  const double code_error = manifest.code_error;
  manifest.snapshot.clear();
  manifest.snapshot_count = 0;
  manifest.trained_points = 0;
  manifest.code_error = 0;
  if (!snapshot.empty()) {
    Stopwatch sw;
    index::LoadIndexOptions load_options;  // the config decides the link layout
    if (config.index.kind == index::IndexKind::kHnswPq) {
      load_options.compact_links = config.index.hnsw.compact_links;
    }
    auto idx = index::LoadIndex((fs::path(dir) / snapshot).string(), load_options);
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
      manifest.snapshot = snapshot;
      manifest.snapshot_count = snapshot_count;
      manifest.trained_points = trained_points;
      manifest.code_error = code_error;
      c->index_state_ = IndexState::kReady;
      ZOOM_LOG(INFO, "collection ", config.name, ": index snapshot ", snapshot, " loaded, ",
               visible - std::min(visible, manifest.snapshot_count), " points replayed, ",
               static_cast<int64_t>(sw.ElapsedMicros() / 1000), " ms");
    } else {
      ZOOM_LOG(WARNING, "collection ", config.name, ": index snapshot ", snapshot,
               " unusable (", st.message(), "); searching exactly until BuildIndex");
      c->index_state_ = IndexState::kFailed;
      c->jobs_->SetLastStatus(c->JobKey("build"), absl::Status(
          st.code(), absl::StrCat("index snapshot ", snapshot, " unusable: ", st.message())));
    }
  }
  if (!manifest.calibration.empty()) {
    absl::StatusOr<Calibration> cal = Calibration::Decode(manifest.calibration);
    if (cal.ok()) {
      c->SetCalibration(std::make_shared<const Calibration>(*std::move(cal)),
                        manifest.calibration_epoch == manifest.index_epoch);
    } else {
      ZOOM_LOG(WARNING, "collection ", config.name, ": stored calibration dropped (",
               cal.status().message(), "); it is measured again");
      manifest.calibration.clear();
    }
  }
  ZOOM_RETURN_IF_ERROR(seg->FillFieldIndexes(manifest.field_indexes));
  c->manifest_ = std::move(manifest);
  c->trained_points_ = c->TrainedPointsLocked();
  c->code_error_base_ = c->manifest_.code_error;
  {
    absl::MutexLock m(&c->segment_mu_);
    c->segment_ = std::move(seg);
  }
  return c;
}


Collection::~Collection() {
  // Its waiting jobs are dropped; the running ones stop at their next
  // cancellation point (a build, a calibration, a payload index build).
  stopping_ = true;
  closing_ = true;
  jobs_->CancelGroup(jobs_group_, /*wait=*/true);
  absl::MutexLock w(&write_mu_);
  std::shared_ptr<Segment> seg = Current();
  const std::shared_ptr<const index::VectorIndex> idx = seg ? seg->index() : nullptr;
  if (!dropped_ && idx != nullptr && idx->size() > manifest_.snapshot_count) {
    absl::Status st = SaveSnapshotLocked();
    if (!st.ok()) {
      ZOOM_LOG(WARNING, "collection ", config_.name, ": snapshot at close failed: ",
               st.message());
    }
  }
  if (!dropped_) ReleaseRetiredLocked();
}

std::shared_ptr<Segment> Collection::Current() const {
  absl::MutexLock m(&segment_mu_);
  return segment_;
}

std::shared_ptr<const SearchEngine> Collection::engine() const {
  std::shared_ptr<Segment> seg = Current();
  return std::shared_ptr<const SearchEngine>(seg, &seg->engine());
}

uint32_t Collection::record_space() const { return Current()->space(); }

std::vector<uint32_t> Collection::record_spaces() const {
  absl::MutexLock w(&write_mu_);
  std::vector<uint32_t> spaces{Current()->space()};
  for (const auto& seg : retired_) spaces.push_back(seg->space());
  return spaces;
}

absl::Status Collection::DroppedError() const {
  return absl::NotFoundError(absl::StrCat("collection '", config_.name, "' was dropped"));
}

absl::Status Collection::SaveManifestLocked() {
  if (dropped_) return absl::NotFoundError("the collection was dropped");
  std::shared_ptr<Segment> seg = Current();
  manifest_.space = seg->space();
  manifest_.vectors = seg->vectors_file();
  ZOOM_RETURN_IF_ERROR(metadata_->PutState(id_, manifest_.Encode()));
  trained_points_ = TrainedPointsLocked();
  code_error_base_ = manifest_.code_error;
  return absl::OkStatus();
}

absl::Status Collection::SaveSnapshotLocked() {
  std::shared_ptr<Segment> seg = Current();
  const std::shared_ptr<const index::VectorIndex> idx = seg->index();
  if (idx == nullptr) return absl::OkStatus();
  const CollectionManifest before = manifest_;
  const std::string name = manifest_.NextFile("index", ".zidx");
  const std::string path = (fs::path(dir_) / name).string();
  ZOOM_RETURN_IF_ERROR(idx->Save(path, options_.store.file_system));
  manifest_.snapshot = name;
  manifest_.snapshot_count = idx->size();
  if (absl::Status st = SaveManifestLocked(); !st.ok()) {
    std::error_code ec;
    fs::remove(path, ec);
    manifest_.snapshot = before.snapshot;
    manifest_.snapshot_count = before.snapshot_count;
    return st;
  }
  if (!before.snapshot.empty()) {
    std::error_code ec;
    fs::remove(fs::path(dir_) / before.snapshot, ec);
  }
  return absl::OkStatus();
}

void Collection::ReleaseRetired() {
  absl::MutexLock w(&write_mu_);
  if (!dropped_) ReleaseRetiredLocked();
}

void Collection::ReleaseRetiredLocked() {
  bool released = false;
  for (auto it = retired_.begin(); it != retired_.end();) {
    // Only this list holds it: no reader has it, and none can get it (it
    // is not the serving segment).
    if (it->use_count() != 1) {
      ++it;
      continue;
    }
    const uint32_t space = (*it)->space();
    if (absl::Status st = metadata_->DropRecords(space); !st.ok()) {
      ZOOM_LOG(WARNING, "collection ", config_.name, ": cannot drop the records of retired space ",
               space, " yet: ", st.message());
      ++it;
      continue;
    }
    it = retired_.erase(it);  // frees the segment (its index, its file's descriptor)
    auto& spaces = manifest_.retired_spaces;
    spaces.erase(std::remove(spaces.begin(), spaces.end(), space), spaces.end());
    released = true;
  }
  // (A failure to record it leaves the space listed: dropped again at the
  // next open, which is harmless.)
  if (released) SaveManifestLocked().IgnoreError();
}

// ---- Info --------------------------------------------------------------------

CollectionInfo Collection::Info() const {
  CollectionInfo info;
  std::shared_ptr<Segment> seg = Current();
  info.config = config_;
  info.points = seg->live();
  info.stored_records = seg->records();
  info.deleted_records = info.stored_records - std::min(info.stored_records, info.points);
  info.index_state = index_state_.load();
  const std::shared_ptr<const index::VectorIndex> idx = seg->index();
  info.indexed_points = idx ? idx->size() : 0;
  info.auto_retrains = auto_retrains_.load();
  info.drift_retrains = drift_retrains_.load();
  if (idx != nullptr) {
    info.trained_points = trained_points_.load();
    const index::CodeErrorStats e = idx->CodeError();
    const double base = code_error_base_.load();
    info.code_error_baseline = base;
    if (e.windows > 0 && base > 0) info.code_error_ratio = e.latest_window_mean / base;
  }
  // Every index still alive counts (a replaced one a search holds too).
  info.field_indexes = seg->FieldIndexes();
  info.resident_bytes = seg->ResidentBytes();
  info.disk_bytes = seg->store().file_bytes();
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    // (not a snapshot's hard link: ".snapshot-link-*")
    if (entry.path().extension() == ".zidx" &&
        entry.path().filename().string().rfind('.', 0) != 0) {
      info.disk_bytes += entry.file_size(ec);
    }
  }
  info.build_progress = jobs_->Active(JobKey("build")) ? build_progress_.load() : 0;
  info.index_error = std::string(jobs_->LastStatus(JobKey("build")).message());
  const std::shared_ptr<const CalibrationState> cal = calibration_.load();
  info.calibration = cal->curve;
  info.calibration_current = cal->current;
  info.calibration_error = cal->error;
  info.default_target_recall = DefaultTarget();
  info.compaction_error = std::string(jobs_->LastStatus(JobKey("compact")).message());
  const JobRunner::Backoff backoff = jobs_->BackoffOf(JobKey("maintenance"));
  info.maintenance_failures = backoff.failures;
  info.maintenance_retry_at = backoff.retry_at;
  return info;
}

}  // namespace zoom::server
