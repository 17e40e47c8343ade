#include "server/api/snapshot_files.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <optional>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/endian.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "server/engine/key_value_text.h"
#include "storage/snapshot_archive.h"

namespace zoom::server::api {

namespace fs = std::filesystem;

// ---- FileSnapshotReader, StagedRestore
// ----------------------------------------------

absl::Status FileSnapshotReader::Read(size_t max, std::string* out) {
  out->resize(max);
  in_.read(out->data(), static_cast<std::streamsize>(max));
  out->resize(static_cast<size_t>(in_.gcount()));
  if (out->empty() && !in_.eof())
    return absl::DataLossError("reading the snapshot failed");
  return absl::OkStatus();
}

StagedRestore::~StagedRestore() {
  if (file_ != nullptr) (void)file_->Close();
  if (!staged_.empty()) (void)files()->Remove(staged_);
}

FileSystem* StagedRestore::files() const {
  FileSystem* f = db_->options().collection.store.file_system;
  return f != nullptr ? f : FileSystem::Posix();
}

absl::Status StagedRestore::StageUpload() {
  staged_ = db_->UploadPath();
  auto file = files()->Open(staged_, FileSystem::Mode::kCreateNew);
  if (!file.ok()) {
    staged_.clear();
    return absl::InternalError(
        absl::StrCat("cannot stage the upload: ", file.status().message()));
  }
  file_ = std::move(*file);
  return absl::OkStatus();
}

absl::Status StagedRestore::Append(absl::string_view data) {
  if (file_ == nullptr) {
    return absl::InvalidArgumentError(
        "a restore from a source on the server takes one message; send the "
        "archive's data "
        "in a stream without a source, or the source alone");
  }
  if (data.empty()) return absl::OkStatus();
  if (absl::Status st = file_->PWrite(uploaded_, data.data(), data.size());
      !st.ok()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the upload could not be written after ", uploaded_,
                     " bytes (disk full?): ", st.message()));
  }
  uploaded_ += data.size();
  return absl::OkStatus();
}

absl::StatusOr<CollectionDescription> StagedRestore::Finish(const Call& call) {
  std::string path = source_;
  if (file_ != nullptr) {
    absl::Status st = file_->Sync();
    if (st.ok()) st = file_->Close();
    file_.reset();
    if (!st.ok()) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the upload could not be written: ", st.message()));
    }
    path = staged_;
  }
  return restore_(call, path);
}

// ---- ClusterSnapshotManifest
// --------------------------------------------------------

uint64_t ClusterSnapshotManifest::points() const {
  uint64_t n = 0;
  for (const auto& p : parts) n += p.points;
  return n;
}

uint64_t ClusterSnapshotManifest::records() const {
  uint64_t n = 0;
  for (const auto& p : parts) n += p.records;
  return n;
}

std::string ClusterSnapshotManifest::EntryName(uint32_t shard) {
  return absl::StrCat("shard-", shard);
}

std::string ClusterSnapshotManifest::Encode() const {
  std::string out = absl::StrCat(
      "format=zoom-cluster-snapshot\nversion=", kClusterManifestVersion,
      "\ncollection=", collection, "\nshards=", shards, "\nreplicas=", replicas,
      "\ncreated_unix_ms=", created_unix_ms, "\npoints=", points(),
      "\nrecords=", records(), "\n");
  for (uint32_t k = 0; k < parts.size(); ++k) {
    const ClusterSnapshotShard& p = parts[k];
    absl::StrAppend(&out, "shard.", k, ".sequence=", p.sequence, "\nshard.", k,
                    ".node=", p.node, "\nshard.", k, ".points=", p.points,
                    "\nshard.", k, ".records=", p.records, "\nshard.", k,
                    ".bytes=", p.bytes, "\nshard.", k, ".sha256=", p.sha256,
                    "\n");
  }
  return out;
}

absl::StatusOr<ClusterSnapshotManifest> ClusterSnapshotManifest::Decode(
    std::string_view text) {
  ZOOM_ASSIGN_OR_RETURN(
      KeyValueText kv,
      KeyValueText::Parse(text, "the cluster snapshot manifest"));
  if (kv.String("format") != "zoom-cluster-snapshot") {
    return absl::DataLossError(
        "the cluster snapshot manifest has no format=zoom-cluster-snapshot");
  }
  uint32_t version = 0;
  ZOOM_RETURN_IF_ERROR(kv.Number("version", &version));
  if (version == 0)
    return absl::DataLossError("the cluster snapshot manifest has no version");
  if (version > kClusterManifestVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("the cluster snapshot is of version ", version,
                     "; this zoomd reads up to ", kClusterManifestVersion,
                     ": restore it with a newer zoomd"));
  }
  ClusterSnapshotManifest m;
  m.collection = kv.String("collection");
  ZOOM_RETURN_IF_ERROR(kv.Number("shards", &m.shards));
  ZOOM_RETURN_IF_ERROR(kv.Number("replicas", &m.replicas));
  uint64_t created = 0;
  ZOOM_RETURN_IF_ERROR(kv.Number("created_unix_ms", &created));
  m.created_unix_ms =
      static_cast<int64_t>(std::min<uint64_t>(created, INT64_MAX));
  if (m.shards == 0 || m.shards > kMaxSnapshotShards) {
    return absl::DataLossError(
        absl::StrCat("the cluster snapshot manifest names ", m.shards,
                     " shards (1..", kMaxSnapshotShards, ")"));
  }
  m.parts.resize(m.shards);
  for (uint32_t k = 0; k < m.shards; ++k) {
    ClusterSnapshotShard& p = m.parts[k];
    const std::string pre = absl::StrCat("shard.", k, ".");
    if (!kv.Has(pre + "sequence") || !kv.Has(pre + "sha256")) {
      return absl::DataLossError(absl::StrCat(
          "the cluster snapshot manifest says nothing of shard ", k));
    }
    ZOOM_RETURN_IF_ERROR(kv.Number(pre + "sequence", &p.sequence));
    ZOOM_RETURN_IF_ERROR(kv.Number(pre + "points", &p.points));
    ZOOM_RETURN_IF_ERROR(kv.Number(pre + "records", &p.records));
    ZOOM_RETURN_IF_ERROR(kv.Number(pre + "bytes", &p.bytes));
    p.node = kv.String(pre + "node");
    p.sha256 = kv.String(pre + "sha256");
  }
  return m;
}

bool IsClusterArchive(const std::string& path) {
  // header (16 bytes), then the first entry's u32 name length and name.
  std::ifstream in(path, std::ios::binary);
  char head[16 + 4 + sizeof(kClusterManifestEntry)] = {};
  in.read(head, sizeof(head));
  if (in.gcount() != static_cast<std::streamsize>(sizeof(head))) return false;
  if (std::memcmp(head, storage::kSnapshotMagic, 8) != 0) return false;
  const uint64_t name_bytes = GetLittleEndian(head + 16, 4);
  return name_bytes == std::strlen(kClusterManifestEntry) &&
         std::memcmp(head + 20, kClusterManifestEntry, name_bytes) == 0;
}

// ---- RestoreByReplay
// ----------------------------------------------------------------

namespace {

absl::Status StopIfDone(const Call& call) {
  if (call.cancelled != nullptr &&
      call.cancelled->load(std::memory_order_relaxed)) {
    return absl::CancelledError("the restore was cancelled by the client");
  }
  if (absl::Now() >= call.deadline) {
    return absl::DeadlineExceededError(
        "the restore did not finish before the deadline");
  }
  return absl::OkStatus();
}

// Writes entry `e` of `archive` to the new file `dest`, synced.
absl::Status StageEntry(const storage::ArchiveReader& archive,
                        const storage::ArchiveReader::Entry& e,
                        FileSystem& files, const std::string& dest) {
  ZOOM_ASSIGN_OR_RETURN(std::unique_ptr<File> f,
                        files.Open(dest, FileSystem::Mode::kCreateNew));
  uint64_t off = 0;
  ZOOM_RETURN_IF_ERROR(
      archive.ReadChunks(e, size_t{1} << 20, [&](const char* p, size_t n) {
        ZOOM_RETURN_IF_ERROR(f->PWrite(off, p, n));
        off += n;
        return absl::OkStatus();
      }));
  ZOOM_RETURN_IF_ERROR(f->Sync());
  return f->Close();
}

// Every live point of `c` upserted into `target` of `backend`, in pages.
absl::Status ReplayPoints(const Collection& c, CollectionBackend& backend,
                          const Call& call, const std::string& target,
                          const ReplayOptions& options, uint64_t* replayed) {
  std::optional<uint64_t> next = 0;
  while (next.has_value()) {
    ZOOM_RETURN_IF_ERROR(StopIfDone(call));
    std::vector<PointData> page;
    bool scan = false;
    const uint64_t offset = *next;
    next.reset();
    ZOOM_RETURN_IF_ERROR(c.Scroll(
        nullptr, offset, std::max<uint32_t>(1, options.batch),
        /*with_vectors=*/true, /*with_payload=*/true, &page, &next, &scan));
    size_t i = 0;
    while (i < page.size()) {
      UpsertRequest up;
      up.collection = target;
      uint64_t bytes = 0;
      for (; i < page.size() &&
             (up.points.empty() || bytes < options.batch_bytes);
           ++i) {
        PointData& p = page[i];
        NewPoint np;
        np.id = p.id;
        bytes += p.vector.size() * sizeof(float) + p.payload.size();
        np.vector = std::move(p.vector);
        np.payload = std::move(p.payload);
        np.has_fields = !p.fields.empty();
        np.fields = std::move(p.fields);
        up.points.push_back(std::move(np));
      }
      ZOOM_ASSIGN_OR_RETURN(WriteAnswer a, backend.Upsert(call, up));
      (void)a;
      *replayed += up.points.size();
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CollectionDescription> RestoreByReplay(
    CollectionBackend& backend, const DatabaseOptions& scratch_options,
    const Call& call, const std::string& path, const std::string& target,
    bool overwrite, const ReplayOptions& options) {
  ZOOM_RETURN_IF_ERROR(ValidateCollectionName(target));
  // 1. The archive whole, and each collection archive in it.
  ZOOM_ASSIGN_OR_RETURN(std::unique_ptr<storage::ArchiveReader> archive,
                        storage::ArchiveReader::Open(path));
  // With a key, the archive given must carry its signature (a cluster's
  // covers its shards' archives: those are restored unchecked below).
  ZOOM_RETURN_IF_ERROR(
      archive->CheckSignature(scratch_options.collection.snapshot_key.get()));
  if (!overwrite) {
    if (backend.GetCollection(call, target).ok()) {
      return absl::AlreadyExistsError(absl::StrCat(
          "collection '", target,
          "' exists; restore into another name, or ask to overwrite"));
    }
  }
  FileSystem& files = scratch_options.collection.store.file_system != nullptr
                          ? *scratch_options.collection.store.file_system
                          : *FileSystem::Posix();
  static std::atomic<uint64_t> seq{0};
  const std::string dir =
      absl::StrCat(scratch_options.data_dir, "/replay-",
                   absl::ToUnixMicros(absl::Now()), "-", seq++);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    return absl::InternalError(absl::StrCat(
        "cannot make the restore's scratch directory: ", ec.message()));
  }
  std::unique_ptr<Database> scratch;
  absl::Cleanup remove_dir = [&] {
    scratch.reset();
    std::error_code rm;
    fs::remove_all(dir, rm);
  };
  ClusterSnapshotManifest manifest;
  std::vector<std::string> parts;  // collection archives
  if (archive->Find(kClusterManifestEntry) != nullptr) {
    ZOOM_ASSIGN_OR_RETURN(std::string text,
                          archive->Read(kClusterManifestEntry, 1 << 20));
    ZOOM_ASSIGN_OR_RETURN(manifest, ClusterSnapshotManifest::Decode(text));
    for (uint32_t k = 0; k < manifest.shards; ++k) {
      const storage::ArchiveReader::Entry* e =
          archive->Find(ClusterSnapshotManifest::EntryName(k));
      if (e == nullptr) {
        return absl::DataLossError(
            absl::StrCat("the cluster snapshot has no archive of shard ", k));
      }
      const std::string dest = absl::StrCat(dir, "/shard-", k, ".zsnap");
      ZOOM_RETURN_IF_ERROR(StageEntry(*archive, *e, files, dest));
      parts.push_back(dest);
    }
  } else {
    parts.push_back(path);
  }
  archive.reset();
  DatabaseOptions so = scratch_options;
  so.collection.snapshot_key = nullptr;  // checked above, as a whole
  so.data_dir = dir + "/db";
  so.snapshots_dir = dir + "/snapshots";
  so.maintenance_interval = absl::ZeroDuration();
  so.collection.auto_build_min_points =
      UINT64_MAX;  // nothing is built in the scratch
  so.max_collections =
      std::max<uint32_t>(so.max_collections, manifest.shards + 1);
  ZOOM_ASSIGN_OR_RETURN(scratch, Database::Open(so));
  std::vector<std::shared_ptr<Collection>> sources;
  for (size_t k = 0; k < parts.size(); ++k) {
    absl::StatusOr<std::shared_ptr<Collection>> c =
        scratch->RestoreSnapshot(parts[k], absl::StrCat("part-", k), true);
    if (!c.ok()) {
      if (manifest.shards == 0) return c.status();
      return absl::Status(
          c.status().code(),
          absl::StrCat("shard ", k,
                       " of the cluster snapshot: ", c.status().message()));
    }
    sources.push_back(std::move(*c));
  }
  CollectionConfig config = sources.front()->config();
  for (size_t k = 1; k < sources.size(); ++k) {
    const CollectionConfig& other = sources[k]->config();
    if (other.dim != config.dim || other.metric != config.metric) {
      return absl::DataLossError(
          absl::StrCat("the cluster snapshot's shards 0 and ", k,
                       " are of different collections (dim or metric)"));
    }
  }
  const CollectionInfo source_info = sources.front()->Info();
  // 2. The target.
  if (overwrite) {
    absl::Status st = backend.DropCollection(call, target);
    if (!st.ok() && st.code() != absl::StatusCode::kNotFound) return st;
  }
  // 3. Made again through the backend's writes.
  CreateCollectionRequest create;
  config.name = target;
  create.config = config;
  if (options.keep_layout) {
    create.shards = manifest.shards;
    create.replicas = manifest.replicas;
  }
  ZOOM_ASSIGN_OR_RETURN(CollectionDescription made,
                        backend.CreateCollection(call, create));
  (void)made;
  uint64_t replayed = 0;
  absl::Status st = [&]() -> absl::Status {
    for (const FieldIndexInfo& f : source_info.field_indexes) {
      CreateFieldIndexRequest fi;
      fi.collection = target;
      fi.field = f.field;
      fi.type = f.type;
      ZOOM_RETURN_IF_ERROR(backend.CreateFieldIndex(call, fi).status());
    }
    for (const auto& c : sources) {
      ZOOM_RETURN_IF_ERROR(
          ReplayPoints(*c, backend, call, target, options, &replayed));
    }
    return absl::OkStatus();
  }();
  if (!st.ok()) {
    const absl::Status dropped = backend.DropCollection(call, target);
    return absl::Status(
        st.code(),
        absl::StrCat(
            "the restore stopped after ", replayed, " points: ", st.message(),
            dropped.ok()
                ? absl::StrCat("; collection '", target,
                               "' was removed: restore again")
                : absl::StrCat("; collection '", target,
                               "' is partial and could not be removed (",
                               dropped.message(),
                               "): restore again with "
                               "overwrite")));
  }
  if (source_info.index_state == IndexState::kReady) {
    BuildIndexRequest b;
    b.collection = target;
    backend.BuildIndex(
        call, b, [target](absl::StatusOr<CollectionDescription> r) {
          if (!r.ok()) {
            ZOOM_LOG(WARNING, "restore of ", target,
                     ": the index build did not start: ", r.status().message());
          }
        });
  }
  ZOOM_LOG(INFO, "restored ", replayed, " points into ", target,
           " by replay from ", parts.size(),
           parts.size() == 1 ? " archive" : " shard archives");
  // A router's count comes from one replica a shard, which may still be
  // applying what a majority acknowledged: the answer waits (bounded) until
  // it covers the points replayed, so that it says what was restored.
  const absl::Time until =
      std::min(call.deadline, absl::Now() + absl::Seconds(30));
  for (;;) {
    absl::StatusOr<CollectionDescription> d =
        backend.GetCollection(call, target);
    if (!d.ok() || d->info.points >= replayed || absl::Now() >= until) return d;
    absl::SleepFor(absl::Milliseconds(20));
  }
}

}  // namespace zoom::server::api
