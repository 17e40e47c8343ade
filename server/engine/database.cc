#include "server/engine/database.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/binary_io.h"
#include "common/confined_dir.h"
#include "common/echo.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "index/blas_core.h"
#include "index/distance_kernels.h"
#include "storage/block_reader.h"

namespace zoom::server {

namespace fs = std::filesystem;

namespace {

// Catalog names of restores in progress: "<target>~restoring~<n>".
constexpr char kRestoringMark[] = "~restoring~";
// The job group of the database's own jobs (the maintenance tick).
constexpr char kDatabaseJobs[] = "database";

absl::Status ValidateSnapshotName(const std::string& name) {
  if (name.empty() || name.size() > 128) {
    return absl::InvalidArgumentError("snapshot names are 1..128 characters of [A-Za-z0-9._-]");
  }
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) {
      return absl::InvalidArgumentError(
          absl::StrCat("snapshot name '", EchoForMessage(name), "': use only [A-Za-z0-9._-]"));
    }
  }
  if (name == "." || name == "..") return absl::InvalidArgumentError("bad snapshot name");
  return absl::OkStatus();
}

std::string InfoText(const SnapshotInfo& i) {
  return absl::StrCat("collection=", i.collection, "\nname=", i.name, "\nbytes=", i.bytes,
                      "\npoints=", i.points, "\nrecords=", i.records,
                      "\ncreated_unix_ms=", i.created_unix_ms, "\nsha256=", i.sha256, "\n");
}

absl::StatusOr<SnapshotInfo> ReadInfo(const std::string& path) {
  ZOOM_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  SnapshotInfo info;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    const size_t eq = line.find('=');
    if (eq == absl::string_view::npos) continue;
    const absl::string_view k = line.substr(0, eq), v = line.substr(eq + 1);
    if (k == "collection") info.collection = std::string(v);
    if (k == "name") info.name = std::string(v);
    if (k == "sha256") info.sha256 = std::string(v);
    if (k == "bytes") (void)absl::SimpleAtoi(v, &info.bytes);
    if (k == "points") (void)absl::SimpleAtoi(v, &info.points);
    if (k == "records") (void)absl::SimpleAtoi(v, &info.records);
    if (k == "created_unix_ms") (void)absl::SimpleAtoi(v, &info.created_unix_ms);
  }
  return info;
}

}  // namespace

namespace {

// The metadata store (catalog, records, payloads) and the collections'
// files of a node whose store cannot be read, moved to
// DATA_DIR/.damaged-<unix ms>/ (kept for the operator): the node starts
// empty, as on a new volume, and bootstraps its replicas from peers. What
// else DATA_DIR holds (the node's identity, its copies of the shard maps,
// the snapshots) stays.
absl::Status SetStoreAside(const std::string& data_dir, const absl::Status& why) {
  const fs::path root(data_dir);
  const fs::path aside = root / absl::StrCat(".damaged-", absl::ToUnixMillis(absl::Now()));
  std::error_code ec;
  fs::create_directories(aside, ec);
  for (const char* part : {"meta", "collections"}) {
    if (!ec && fs::exists(root / part)) fs::rename(root / part, aside / part, ec);
  }
  if (!ec) fs::create_directories(root / "collections", ec);
  if (ec) {
    return absl::DataLossError(absl::StrCat("the metadata store is damaged (", why.message(),
                                            ") and cannot be moved aside to ", aside.string(),
                                            ": ", ec.message()));
  }
  ZOOM_LOG(ERROR, "the metadata store of ", data_dir, " is damaged (", why.message(),
           "): it and the collections' files are moved to ", aside.string(),
           "; this node starts empty and makes its replicas again from peers");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Database>> Database::Open(const DatabaseOptions& options) {
  std::unique_ptr<Database> db(new Database());
  db->options_ = options;
  // One runner for every collection's background work (a runner given in
  // the options, e.g. shared by tests, is used as is).
  if (db->options_.collection.jobs == nullptr) {
    JobRunner::Options jo;
    jo.threads = options.job_threads;
    jo.retry_base = options.collection.maintenance_retry_base;
    jo.retry_max = options.collection.maintenance_retry_max;
    db->options_.collection.jobs = std::make_shared<JobRunner>(jo);
  }
  db->jobs_ = db->options_.collection.jobs;
  std::error_code ec;
  fs::create_directories(fs::path(options.data_dir) / "collections", ec);
  if (ec) {
    return absl::PermissionDeniedError(absl::StrCat("cannot create the data directory ",
                                                    options.data_dir, ": ", ec.message()));
  }
  storage::MetadataOptions mo;
  mo.sync = options.sync_always;
  const std::string meta_dir = (fs::path(options.data_dir) / "meta").string();
  auto meta = storage::MetadataStore::Open(meta_dir, mo);
  if (!meta.ok() && absl::IsDataLoss(meta.status()) && options.quarantine_damaged) {
    ZOOM_RETURN_IF_ERROR(SetStoreAside(options.data_dir, meta.status()));
    meta = storage::MetadataStore::Open(meta_dir, mo);
  }
  if (!meta.ok()) {
    if (meta.status().message().find("lock") != std::string_view::npos) {
      return absl::FailedPreconditionError(absl::StrCat(
          "data directory ", options.data_dir,
          " is in use by another zoomd (", meta.status().message(), ")"));
    }
    return meta.status();
  }
  db->metadata_ = std::move(*meta);
  db->snapshots_dir_ = options.snapshots_dir.empty()
                           ? (fs::path(options.data_dir) / "snapshots").string()
                           : options.snapshots_dir;
  db->RemoveStagingLeftovers();
  absl::StatusOr<std::vector<storage::CollectionRecord>> listed = db->metadata_->ListCollections();
  if (listed.ok() && options.collection.store.verify_on_open) {
    // Every table's blocks, as every vector file's records (a node).
    if (absl::Status st = db->metadata_->VerifyChecksums(); !st.ok()) listed = st;
  }
  if (!listed.ok() && absl::IsDataLoss(listed.status()) && options.quarantine_damaged) {
    db->metadata_.reset();  // closes the store (its lock) before the move
    ZOOM_RETURN_IF_ERROR(SetStoreAside(options.data_dir, listed.status()));
    ZOOM_ASSIGN_OR_RETURN(db->metadata_, storage::MetadataStore::Open(meta_dir, mo));
    listed = db->metadata_->ListCollections();
  }
  ZOOM_ASSIGN_OR_RETURN(std::vector<storage::CollectionRecord> records, std::move(listed));
  absl::MutexLock lock(&db->mu_);
  for (const storage::CollectionRecord& rec : records) {
    if (rec.name.find(kRestoringMark) != std::string::npos) {
      // A restore interrupted before its switch: nothing refers to it.
      ZOOM_LOG(WARNING, "removing the unfinished restore ", rec.name);
      db->metadata_->DropCollection(rec.name, rec.id).IgnoreError();
      std::error_code rm;
      fs::remove_all(db->CollectionDir(rec.id), rm);
      continue;
    }
    // Past the cache budget (lowered since), a collection gets what is left.
    CollectionOptions copts = db->options_.collection;
    const uint64_t in_use = db->CacheBytesInUseLocked(nullptr);
    const uint64_t left = options.max_total_cache_bytes - std::min(in_use, options.max_total_cache_bytes);
    copts.max_cache_bytes = std::min(copts.max_cache_bytes, left);
    auto c = Collection::Open(db->CollectionDir(rec.id), db->metadata_.get(), rec, copts);
    // Damaged: a file that does not read back (DATA_LOSS), or one its
    // manifest names gone (NOT_FOUND: a store rolled back past a
    // compaction that removed the file, as a cut WAL does).
    if (!c.ok() && (absl::IsDataLoss(c.status()) || absl::IsNotFound(c.status())) &&
        options.quarantine_damaged) {
      const std::string aside = absl::StrCat(db->CollectionDir(rec.id), ".damaged-",
                                             absl::ToUnixMillis(absl::Now()));
      std::error_code mv;
      fs::rename(db->CollectionDir(rec.id), aside, mv);
      absl::Status dropped = db->metadata_->DropCollection(rec.name, rec.id);
      ZOOM_LOG(ERROR, "collection ", rec.name, " is damaged (", c.status().message(),
               "): its files moved to ", mv ? std::string("(could not: ") + mv.message() + ")"
                                            : aside,
               " and it is dropped here", dropped.ok() ? "" : " (the catalog kept it: ",
               dropped.ok() ? "" : dropped.message(), dropped.ok() ? "" : ")",
               "; a cluster node makes the replica again from a peer");
      if (!dropped.ok()) return dropped;
      continue;
    }
    if (!c.ok()) {
      return absl::Status(c.status().code(), absl::StrCat("collection '", rec.name, "': ",
                                                          c.status().message()));
    }
    const uint64_t gets = (*c)->core().cache_bytes();
    if (const uint64_t want = db->CacheBytesFor((*c)->config()); gets < want) {
      ZOOM_LOG(WARNING, "collection ", rec.name, ": its DRAM cache gets ", gets, " of its ", want,
               " bytes: the collections' caches reach the server's budget (",
               options.max_total_cache_bytes, " bytes, --max_total_cache_bytes)");
    }
    const CollectionInfo info = (*c)->Info();
    ZOOM_LOG(INFO, "collection ", rec.name, ": ", info.points, " points, index ",
             IndexStateName(info.index_state));
    db->collections_[rec.name] = std::shared_ptr<Collection>(std::move(*c));
  }
  db->ScheduleTick();
  return db;
}

Database::~Database() {
  // The tick first (it lists the collections under mu_), then any tick it
  // queued before it saw closing_.
  closing_ = true;
  jobs_->CancelGroup(kDatabaseJobs, /*wait=*/true);
  jobs_->CancelGroup(kDatabaseJobs, /*wait=*/false);
  absl::MutexLock lock(&mu_);
  // Every build ends before the metadata store goes, whoever still holds a
  // collection (a waiting call's callback).
  for (const auto& [name, c] : collections_) {
    c->maintenance().StopBackgroundWork();  // builds and curves stop (started again at open)
    c->maintenance().WaitForBuild().IgnoreError();
  }
  collections_.clear();  // joins builds, saves snapshots
  metadata_.reset();
}

void Database::ScheduleTick() {
  if (closing_ || options_.maintenance_interval <= absl::ZeroDuration()) return;
  JobRunner::Job tick;
  tick.key = "database/maintenance";
  tick.group = kDatabaseJobs;
  tick.priority = JobRunner::Priority::kAuto;
  tick.not_before = absl::Now() + options_.maintenance_interval;
  tick.run = [this] {
    RunMaintenance();
    ScheduleTick();
    return absl::OkStatus();
  };
  jobs_->Submit(std::move(tick));
}

void Database::StopBackgroundWork() {
  closing_ = true;
  jobs_->CancelGroup(kDatabaseJobs, /*wait=*/false);
  absl::MutexLock lock(&mu_);
  for (const auto& [name, c] : collections_) c->maintenance().StopBackgroundWork();
}

std::string Database::CollectionDir(uint32_t id) const {
  return (fs::path(options_.data_dir) / "collections" / std::to_string(id)).string();
}

uint64_t Database::CacheBytesFor(const CollectionConfig& config) const {
  const CollectionOptions& o = options_.collection;
  return std::min(config.cache_bytes > 0 ? config.cache_bytes : o.engine.cache_bytes,
                  o.max_cache_bytes);
}

uint64_t Database::CacheBytesInUseLocked(const Collection* except) const {
  uint64_t sum = 0;
  for (const auto& [name, c] : collections_) {
    if (c.get() != except) sum += c->core().cache_bytes();
  }
  return sum;
}

uint64_t Database::CacheBytesInUse() const {
  absl::MutexLock lock(&mu_);
  return CacheBytesInUseLocked(nullptr);
}

uint64_t Database::CacheBytesLeft() const {
  const uint64_t in_use = CacheBytesInUse();
  return options_.max_total_cache_bytes - std::min(in_use, options_.max_total_cache_bytes);
}

absl::Status Database::CheckCacheBudgetLocked(uint64_t need, const Collection* except) const {
  if (need == 0) return absl::OkStatus();
  const uint64_t in_use = CacheBytesInUseLocked(except);
  const uint64_t budget = options_.max_total_cache_bytes;
  if (in_use <= budget && need <= budget - in_use) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "this collection's DRAM cache needs ", need, " bytes (its cache_bytes, or the server's "
      "--cache_bytes) and the server's cache budget has ",
      budget - std::min(in_use, budget), " of ", budget,
      " bytes left (--max_total_cache_bytes): ask for a smaller cache_bytes, drop a "
      "collection, or raise the budget"));
}

absl::StatusOr<std::shared_ptr<Collection>> Database::CreateCollection(CollectionConfig config) {
  config.ApplyDefaults();
  ZOOM_RETURN_IF_ERROR(config.Validate(options_.max_dim, options_.collection.max_cache_bytes));
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
  ZOOM_RETURN_IF_ERROR(CheckCacheBudgetLocked(CacheBytesFor(config), nullptr));
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
    if (absl::Status st = metadata_->DropCollection(name, c->core().id()); !st.ok()) {
      c->MarkDropped(false);
      return st;
    }
    collections_.erase(it);
  }
  for (uint32_t space : c->core().record_spaces()) {
    if (space != c->core().id()) metadata_->DropRecords(space).IgnoreError();
  }
  c->maintenance().StopBackgroundWork();
  c->maintenance().WaitForBuild().IgnoreError();
  std::error_code ec;
  fs::remove_all(c->core().dir(), ec);
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
    CollectionMaintenance& maintenance = c->maintenance();
    maintenance.ReleaseRetired();
    // An index without a current recall curve (loaded from an older zoomd,
    // or made by a compaction) is measured in the background.
    maintenance.MaybeStartCalibration();
    if (!maintenance.NeedsCompaction()) continue;
    const CollectionInfo before = c->Info();
    absl::Status st = maintenance.Compact();
    ZOOM_LOG(INFO, "collection ", c->config().name, ": automatic compaction of ",
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

IoBackendInfo Database::IoBackendInUse() const {
  const storage::IoBackend requested = options_.collection.store.reader.backend;
  if (requested == storage::IoBackend::kPread) return {"pread", "pread requested"};
  const storage::IoUringProbe& probe = storage::ProbeIoUring();
  if (!probe.available) return {"pread", absl::StrCat("io_uring unavailable: ", probe.reason)};
  for (const auto& c : ListCollections()) {
    if (c->core().engine()->store().reader().backend() == storage::IoBackend::kPread) {
      return {"pread", absl::StrCat("collection ", c->config().name,
                                    " fell back from io_uring: see the log")};
    }
  }
  return {"io_uring", ""};
}

// ---- Snapshots ---------------------------------------------------------------

void Database::RemoveStagingLeftovers() const {
  // A kill during CreateSnapshot leaves COLL/NAME.zsnap.tmp, one during an
  // upload .incoming/upload-*.zsnap, one during a restore by replay
  // .incoming/replay-*/: nothing refers to either once the
  // process is gone (this one has not started any). Only those shapes are
  // removed, and symlinks are removed as links, never followed.
  std::error_code ec;
  uint64_t removed = 0, bytes = 0;
  const auto drop = [&](const fs::directory_entry& e) {
    std::error_code ec2;
    if (!e.is_symlink(ec2)) bytes += e.is_regular_file(ec2) ? e.file_size(ec2) : 0;
    if (fs::remove(e.path(), ec2)) ++removed;
  };
  for (const auto& coll : fs::directory_iterator(snapshots_dir_, ec)) {
    std::error_code ec2;
    if (coll.is_symlink(ec2) || !coll.is_directory(ec2)) continue;
    const bool incoming = coll.path().filename() == ".incoming";
    for (const auto& e : fs::directory_iterator(coll.path(), ec2)) {
      const std::string name = e.path().filename().string();
      if (incoming ? absl::StartsWith(name, "upload-") : absl::EndsWith(name, ".zsnap.tmp")) {
        drop(e);
      } else if (incoming && absl::StartsWith(name, "replay-") && !e.is_symlink(ec2) &&
                 e.is_directory(ec2)) {
        // A restore by replay's scratch (api::RestoreByReplay).
        if (fs::remove_all(e.path(), ec2) != static_cast<std::uintmax_t>(-1)) ++removed;
      }
    }
  }
  if (removed > 0) {
    ZOOM_LOG(INFO, "removed ", removed, " snapshot staging files (", bytes,
             " bytes) left by an interrupted snapshot or upload");
  }
}

absl::StatusOr<SnapshotInfo> Database::CreateSnapshot(const std::string& collection) {
  ZOOM_ASSIGN_OR_RETURN(auto c, GetCollection(collection));
  return CreateSnapshotWith(collection, [&c](const std::string& path) {
    return c->WriteSnapshot(path);
  });
}

absl::StatusOr<SnapshotInfo> Database::CreateSnapshotWith(const std::string& collection,
                                                          const SnapshotWriter& write) {
  ZOOM_RETURN_IF_ERROR(ValidateCollectionName(collection));
  const fs::path dir = fs::path(snapshots_dir_) / collection;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    return absl::InternalError(absl::StrCat("cannot create the snapshots directory: ",
                                            ec.message()));
  }
  const absl::Time now = absl::Now();
  static std::atomic<uint32_t> seq{0};
  SnapshotInfo info;
  info.collection = collection;
  info.name = absl::StrCat(
      "snap-", absl::FormatTime("%Y%m%d-%H%M%S", now, absl::UTCTimeZone()), "-",
      absl::StrFormat("%04x", (absl::ToUnixMicros(now) ^ (seq++ * 7919)) & 0xffff));
  info.created_unix_ms = absl::ToUnixMillis(now);
  const std::string path = (dir / (info.name + ".zsnap")).string();
  ZOOM_ASSIGN_OR_RETURN(Collection::SnapshotStats stats, write(path));
  info.bytes = stats.bytes;
  info.points = stats.points;
  info.records = stats.records;
  info.sha256 = stats.sha256;
  {
    FileSystem* files = options_.collection.store.file_system;
    absl::Status st = WriteFileAtomically(files != nullptr ? *files : *FileSystem::Posix(),
                                          (dir / (info.name + ".info")).string(), InfoText(info));
    if (!st.ok()) {  // an archive without its .info is never listed: remove it
      fs::remove(path, ec);
      return st;
    }
  }
  ZOOM_LOG(INFO, "collection ", collection, ": snapshot ", info.name, " (", info.points,
           " points, ", info.bytes, " bytes)");
  return info;
}

absl::StatusOr<std::vector<SnapshotInfo>> Database::ListSnapshots(
    const std::string& collection) const {
  ZOOM_RETURN_IF_ERROR(ValidateCollectionName(collection));
  std::vector<SnapshotInfo> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(snapshots_dir_) / collection, ec)) {
    if (e.path().extension() != ".info") continue;
    auto info = ReadInfo(e.path().string());
    if (info.ok() && fs::exists(fs::path(e.path()).replace_extension(".zsnap"))) {
      out.push_back(std::move(*info));
    }
  }
  std::sort(out.begin(), out.end(), [](const SnapshotInfo& a, const SnapshotInfo& b) {
    return a.created_unix_ms != b.created_unix_ms ? a.created_unix_ms > b.created_unix_ms
                                                  : a.name > b.name;
  });
  return out;
}

absl::StatusOr<std::pair<std::string, SnapshotInfo>> Database::SnapshotFile(
    const std::string& collection, const std::string& name) const {
  ZOOM_RETURN_IF_ERROR(ValidateCollectionName(collection));
  ZOOM_RETURN_IF_ERROR(ValidateSnapshotName(name));
  const fs::path base = fs::path(snapshots_dir_) / collection / name;
  const std::string path = fs::path(base).concat(".zsnap").string();
  std::error_code ec;
  if (!fs::is_directory(snapshots_dir_, ec)) {
    return absl::NotFoundError(
        absl::StrCat("collection '", collection, "' has no snapshot '", name, "'"));
  }
  // Confined like a restore's source: a regular file beneath the snapshots
  // directory (a symlink planted there that leads out is refused, and
  // nothing about its target is revealed).
  ZOOM_ASSIGN_OR_RETURN(ConfinedDir root, ConfinedDir::Open(snapshots_dir_));
  absl::StatusOr<ConfinedFile> confined = root.OpenFile(absl::StrCat(collection, "/", name, ".zsnap"));
  if (!confined.ok()) {
    if (confined.status().code() == absl::StatusCode::kPermissionDenied) {
      return absl::PermissionDeniedError(absl::StrCat(
          "snapshot '", name, "' of collection '", collection,
          "' resolves outside the snapshots directory; only files beneath it are served"));
    }
    return absl::NotFoundError(
        absl::StrCat("collection '", collection, "' has no snapshot '", name, "'"));
  }
  SnapshotInfo info;
  auto read = ReadInfo(fs::path(base).concat(".info").string());
  if (read.ok()) info = std::move(*read);
  info.collection = collection;
  info.name = name;
  info.bytes = fs::file_size(path, ec);
  return std::make_pair(path, info);
}

absl::Status Database::DeleteSnapshot(const std::string& collection, const std::string& name) {
  ZOOM_ASSIGN_OR_RETURN(auto file, SnapshotFile(collection, name));
  std::error_code ec;
  fs::remove(file.first, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot remove the snapshot: ", ec.message()));
  fs::remove(fs::path(file.first).replace_extension(".info"), ec);
  return absl::OkStatus();
}

absl::StatusOr<std::string> Database::SnapshotSource(const std::string& relative) const {
  ZOOM_RETURN_IF_ERROR(ConfinedDir::ValidateName(relative, "snapshot source"));
  std::error_code ec;
  fs::create_directories(snapshots_dir_, ec);
  ZOOM_ASSIGN_OR_RETURN(ConfinedDir root, ConfinedDir::Open(snapshots_dir_));
  // Resolved beneath the root (a symlink leading out is refused) and a
  // regular file.
  ZOOM_ASSIGN_OR_RETURN(ConfinedFile f, root.OpenFile(relative));
  (void)f;
  return (fs::path(snapshots_dir_) / relative).string();
}

std::string Database::UploadPath() const {
  static std::atomic<uint64_t> seq{0};
  const fs::path dir = fs::path(snapshots_dir_) / ".incoming";
  std::error_code ec;
  fs::create_directories(dir, ec);
  return (dir / absl::StrCat("upload-", absl::ToUnixMicros(absl::Now()), "-", seq++, ".zsnap"))
      .string();
}

absl::StatusOr<std::shared_ptr<Collection>> Database::RestoreSnapshot(const std::string& path,
                                                                      const std::string& target,
                                                                      bool overwrite) {
  ZOOM_RETURN_IF_ERROR(ValidateCollectionName(target));
  // The whole archive is checked (and its signature, with a key) before
  // anything is created.
  ZOOM_ASSIGN_OR_RETURN(auto archive, storage::ArchiveReader::Open(path));
  ZOOM_RETURN_IF_ERROR(archive->CheckSignature(options_.collection.snapshot_key.get()));
  absl::StatusOr<std::string> config_text = archive->Read("config", 1 << 16);
  if (absl::IsNotFound(config_text.status())) {
    // A whole archive of another kind (a cluster's manifest inside one, an
    // entry set crafted by hand): not the source the client named missing.
    return absl::DataLossError(
        "the archive has no config entry: it is not a collection's snapshot (a cluster's "
        "snapshot is restored through a router, or as a whole by RestoreSnapshot)");
  }
  if (!config_text.ok()) return config_text.status();
  auto decoded = CollectionConfig::Decode(*config_text);
  if (!decoded.ok()) {
    return absl::DataLossError(absl::StrCat("the snapshot's config: ", decoded.status().message()));
  }
  CollectionConfig config = std::move(*decoded);
  config.name = target;
  ZOOM_RETURN_IF_ERROR(config.Validate(options_.max_dim, options_.collection.max_cache_bytes));
  std::shared_ptr<Collection> existing;
  {
    absl::MutexLock lock(&mu_);
    auto it = collections_.find(target);
    if (it != collections_.end()) {
      if (!overwrite) {
        return absl::AlreadyExistsError(absl::StrCat(
            "collection '", target, "' exists; restore into another name, or ask to overwrite"));
      }
      existing = it->second;
    } else if (collections_.size() >= options_.max_collections) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "this server holds its maximum of ", options_.max_collections, " collections"));
    }
    // Checked again at the switch (a creation meanwhile may take the rest).
    ZOOM_RETURN_IF_ERROR(CheckCacheBudgetLocked(CacheBytesFor(config), existing.get()));
  }
  // Restored under a name of its own; it takes `target` in one catalog
  // write once complete (an interrupted restore is removed at the next open).
  static std::atomic<uint32_t> seq{0};
  const std::string temp = absl::StrCat(target, kRestoringMark, absl::ToUnixMicros(absl::Now()),
                                        "-", seq++);
  ZOOM_ASSIGN_OR_RETURN(const uint32_t id, metadata_->CreateCollection(temp, config.Encode()));
  std::error_code ec;
  fs::remove_all(CollectionDir(id), ec);
  auto restored = Collection::Restore(CollectionDir(id), metadata_.get(), id, config, *archive,
                                      options_.collection);
  auto abandon = [&] {
    metadata_->DropCollection(temp, id).IgnoreError();
    std::error_code rm;
    fs::remove_all(CollectionDir(id), rm);
  };
  if (!restored.ok()) {
    abandon();
    return restored.status();
  }
  std::shared_ptr<Collection> c(std::move(*restored));
  if (existing != nullptr) existing->MarkDropped();  // waits for its compaction
  absl::Status st;
  {
    absl::MutexLock lock(&mu_);
    auto it = collections_.find(target);
    if (existing == nullptr && it != collections_.end()) {
      st = absl::AlreadyExistsError(absl::StrCat("collection '", target,
                                                 "' was created during the restore"));
    } else if (existing != nullptr && (it == collections_.end() || it->second != existing)) {
      st = absl::AbortedError(absl::StrCat("collection '", target,
                                           "' changed during the restore; restore again"));
    } else if (st = CheckCacheBudgetLocked(c->core().cache_bytes(), existing.get()); st.ok()) {
      st = metadata_->ReplaceCollection(temp, target, id, existing ? existing->core().id() : 0);
      if (st.ok()) collections_[target] = c;
    }
  }
  if (!st.ok()) {
    if (existing != nullptr) {
      // Undo only if it is still the collection of that name (a drop that
      // came meanwhile stays a drop).
      absl::MutexLock lock(&mu_);
      auto it = collections_.find(target);
      if (it != collections_.end() && it->second == existing) existing->MarkDropped(false);
    }
    c->MarkDropped();
    c.reset();
    abandon();
    return st;
  }
  if (existing != nullptr) {
    for (uint32_t space : existing->core().record_spaces()) {
      if (space != existing->core().id()) metadata_->DropRecords(space).IgnoreError();
    }
    existing->maintenance().WaitForBuild().IgnoreError();
    fs::remove_all(existing->core().dir(), ec);
  }
  ZOOM_LOG(INFO, "collection ", target, " restored from a snapshot (", c->Info().points,
           " points)", existing ? ", replacing the previous one" : "");
  return c;
}

const char* Database::SimdLevel() { return index::SimdLevelName(index::ActiveSimdLevel()); }

const char* Database::KernelChoices() { return index::KernelChoices(); }

void Database::EnsureBlasCore(char** argv) { index::EnsureBlasCore(argv); }

const char* Database::BlasCore() { return index::BlasCoreName(); }

}  // namespace zoom::server
