#include "server/engine/database.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace zoom::server {

namespace fs = std::filesystem;

absl::StatusOr<std::unique_ptr<Database>> Database::Open(const DatabaseOptions& options) {
  std::unique_ptr<Database> db(new Database());
  db->options_ = options;
  std::error_code ec;
  fs::create_directories(fs::path(options.data_dir) / "collections", ec);
  if (ec) {
    return absl::PermissionDeniedError(absl::StrCat("cannot create the data directory ",
                                                    options.data_dir, ": ", ec.message()));
  }
  storage::MetadataOptions mo;
  mo.sync = options.sync_always;
  auto meta = storage::MetadataStore::Open((fs::path(options.data_dir) / "meta").string(), mo);
  if (!meta.ok()) {
    if (meta.status().message().find("lock") != std::string_view::npos) {
      return absl::FailedPreconditionError(absl::StrCat(
          "data directory ", options.data_dir,
          " is in use by another zoomd (", meta.status().message(), ")"));
    }
    return meta.status();
  }
  db->metadata_ = std::move(*meta);
  ZOOM_ASSIGN_OR_RETURN(std::vector<storage::CollectionRecord> records,
                        db->metadata_->ListCollections());
  absl::MutexLock lock(&db->mu_);
  for (const storage::CollectionRecord& rec : records) {
    auto c = Collection::Open(db->CollectionDir(rec.id), db->metadata_.get(), rec,
                              options.collection);
    if (!c.ok()) {
      return absl::Status(c.status().code(), absl::StrCat("collection '", rec.name, "': ",
                                                          c.status().message()));
    }
    const CollectionInfo info = (*c)->Info();
    ZOOM_LOG(INFO, "collection ", rec.name, ": ", info.points, " points, index ",
             IndexStateName(info.index_state));
    db->collections_[rec.name] = std::shared_ptr<Collection>(std::move(*c));
  }
  return db;
}

Database::~Database() {
  absl::MutexLock lock(&mu_);
  collections_.clear();  // joins builds, saves snapshots
  metadata_.reset();
}

std::string Database::CollectionDir(uint32_t id) const {
  return (fs::path(options_.data_dir) / "collections" / std::to_string(id)).string();
}

absl::StatusOr<std::shared_ptr<Collection>> Database::CreateCollection(CollectionConfig config) {
  config.ApplyDefaults();
  ZOOM_RETURN_IF_ERROR(config.Validate(options_.max_dim));
  absl::MutexLock lock(&mu_);
  if (collections_.contains(config.name)) {
    return absl::AlreadyExistsError(absl::StrCat("collection '", config.name,
                                                 "' already exists; drop it first or pick "
                                                 "another name"));
  }
  if (collections_.size() >= options_.max_collections) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "this server holds its maximum of ", options_.max_collections, " collections"));
  }
  ZOOM_ASSIGN_OR_RETURN(const uint32_t id,
                        metadata_->CreateCollection(config.name, config.Encode()));
  std::error_code ec;
  fs::remove_all(CollectionDir(id), ec);  // a left-over of a crash mid-create
  auto c = Collection::Create(CollectionDir(id), metadata_.get(), id, config,
                              options_.collection);
  if (!c.ok()) {
    metadata_->DropCollection(config.name, id).IgnoreError();
    fs::remove_all(CollectionDir(id), ec);
    return c.status();
  }
  std::shared_ptr<Collection> shared(std::move(*c));
  collections_[config.name] = shared;
  ZOOM_LOG(INFO, "collection ", config.name, " created: dim ", config.dim, ", ",
           MetricName(config.metric), ", ", storage::DTypeName(config.dtype), ", index ",
           index::IndexKindName(config.index.kind));
  return shared;
}

absl::Status Database::DropCollection(const std::string& name) {
  ZOOM_RETURN_IF_ERROR(ValidateCollectionName(name));
  std::shared_ptr<Collection> c;
  {
    absl::MutexLock lock(&mu_);
    auto it = collections_.find(name);
    if (it == collections_.end()) {
      return absl::NotFoundError(absl::StrCat("collection '", name, "' does not exist"));
    }
    c = it->second;
  }
  // Outside the database's lock: this waits for a compaction of the
  // collection to finish (which then leaves consistent files behind), and
  // makes later writes and compactions answer NotFound.
  c->MarkDropped();
  {
    absl::MutexLock lock(&mu_);
    auto it = collections_.find(name);
    if (it == collections_.end() || it->second != c) {
      return absl::NotFoundError(absl::StrCat("collection '", name, "' does not exist"));
    }
    if (absl::Status st = metadata_->DropCollection(name, c->id()); !st.ok()) {
      c->MarkDropped(false);
      return st;
    }
    collections_.erase(it);
  }
  const uint32_t space = c->record_space();
  if (space != c->id()) metadata_->DropRecords(space).IgnoreError();
  c->WaitForBuild().IgnoreError();
  std::error_code ec;
  fs::remove_all(c->dir(), ec);
  ZOOM_LOG(INFO, "collection ", name, " dropped");
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Collection>> Database::GetCollection(const std::string& name) const {
  // A name that cannot exist is a bad argument (an empty one used to be
  // NOT_FOUND), and is never echoed whole.
  ZOOM_RETURN_IF_ERROR(ValidateCollectionName(name));
  absl::MutexLock lock(&mu_);
  auto it = collections_.find(name);
  if (it == collections_.end()) {
    return absl::NotFoundError(absl::StrCat("collection '", name, "' does not exist"));
  }
  return it->second;
}

int Database::RunMaintenance() {
  int compacted = 0;
  for (const auto& c : ListCollections()) {
    if (!c->NeedsCompaction()) continue;
    const CollectionInfo before = c->Info();
    absl::Status st = c->Compact();
    ZOOM_LOG(INFO, "collection ", c->name(), ": automatic compaction of ",
             before.deleted_records, " dead records: ", st.ok() ? "done" : st.ToString());
    compacted += st.ok();
  }
  return compacted;
}

std::vector<std::shared_ptr<Collection>> Database::ListCollections() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<Collection>> out;
  for (const auto& [name, c] : collections_) out.push_back(c);
  return out;
}

}  // namespace zoom::server
