// CollectionCore: identity, the manifest's one writer, the serving and
// retired segments, the job keys (see collection_core.h).
#include "server/engine/collection_core.h"

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

CollectionCore::CollectionCore(std::string dir, storage::MetadataStore* metadata, uint32_t id,
                               CollectionConfig config, const CollectionOptions& options)
    : dir_(std::move(dir)),
      metadata_(metadata),
      id_(id),
      config_(std::move(config)),
      options_(options) {
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
}

std::string CollectionCore::JobKey(std::string_view what) const {
  return absl::StrCat(jobs_group_, absl::string_view(what.data(), what.size()));
}

absl::StatusOr<std::shared_ptr<Segment>> CollectionCore::OpenSegment(
    uint32_t space, const std::string& vectors_file, bool create) const {
  return Segment::Open(dir_, vectors_file, space, create, config_, options_.store,
                       EngineOptionsFor(), metadata_, id_);
}

EngineOptions CollectionCore::EngineOptionsFor() const {
  EngineOptions e = options_.engine;
  e.cache_bytes = std::min(config_.cache_bytes > 0 ? config_.cache_bytes : e.cache_bytes,
                           options_.max_cache_bytes);
  return e;
}

std::shared_ptr<Segment> CollectionCore::Current() const {
  absl::MutexLock m(&segment_mu_);
  return segment_;
}

std::shared_ptr<Segment> CollectionCore::ServeLocked(std::shared_ptr<Segment> seg) {
  absl::MutexLock m(&segment_mu_);
  std::swap(segment_, seg);
  return seg;
}

std::shared_ptr<const SearchEngine> CollectionCore::engine() const {
  std::shared_ptr<Segment> seg = Current();
  return std::shared_ptr<const SearchEngine>(seg, &seg->engine());
}

uint32_t CollectionCore::record_space() const { return Current()->space(); }

std::vector<uint32_t> CollectionCore::record_spaces() const {
  absl::MutexLock w(&write_mu_);
  std::vector<uint32_t> spaces{Current()->space()};
  for (const auto& seg : retired_) spaces.push_back(seg->space());
  return spaces;
}

absl::Status CollectionCore::DroppedError() const {
  return absl::NotFoundError(absl::StrCat("collection '", config_.name, "' was dropped"));
}

absl::Status CollectionCore::SaveManifestLocked() {
  if (dropped_) return absl::NotFoundError("the collection was dropped");
  std::shared_ptr<Segment> seg = Current();
  manifest_.space = seg->space();
  manifest_.vectors = seg->vectors_file();
  ZOOM_RETURN_IF_ERROR(metadata_->PutState(id_, manifest_.Encode()));
  trained_points_ = manifest_.TrainedPoints();
  code_error_base_ = manifest_.code_error;
  return absl::OkStatus();
}

absl::Status CollectionCore::SaveSnapshotLocked() {
  std::shared_ptr<Segment> seg = Current();
  const std::shared_ptr<const index::VectorIndex> idx = seg->index();
  if (idx == nullptr) return absl::OkStatus();
  const std::string name = manifest_.NextFile("index", ".zidx");
  const std::string path = (fs::path(dir_) / name).string();
  ZOOM_RETURN_IF_ERROR(idx->Save(path, options_.store.file_system));
  return CommitSnapshotLocked(name, idx->size());
}

absl::StatusOr<std::string> CollectionCore::StageIndexFile(const index::VectorIndex& idx) {
  std::string name;
  {
    absl::MutexLock w(&write_mu_);
    name = manifest_.NextFile("index", ".zidx");
  }
  if (absl::Status st = idx.Save((fs::path(dir_) / name).string(), options_.store.file_system);
      !st.ok()) {
    RemoveFile(name);
    return st;
  }
  return name;
}

absl::Status CollectionCore::CommitSnapshotLocked(const std::string& name, uint64_t count) {
  const CollectionManifest before = manifest_;
  manifest_.snapshot = name;
  manifest_.snapshot_count = count;
  if (absl::Status st = SaveManifestLocked(); !st.ok()) {
    RemoveFile(name);
    manifest_.snapshot = before.snapshot;
    manifest_.snapshot_count = before.snapshot_count;
    return st;
  }
  if (!before.snapshot.empty()) RemoveFile(before.snapshot);
  return absl::OkStatus();
}

void CollectionCore::RemoveFile(const std::string& name) const {
  std::error_code ec;
  fs::remove(fs::path(dir_) / name, ec);
}

void CollectionCore::ReleaseRetiredLocked() {
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

}  // namespace zoom::server
