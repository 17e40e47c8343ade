// File: server/api/snapshot_files.h
//
// What both backends share of snapshots, beside the engine's archive of one
// collection (Collection::WriteSnapshot):
//
//   FileSnapshotReader   an archive read out of a snapshots directory
//                        (DownloadSnapshot)
//   StagedRestore        a RestoreSnapshot: an upload staged beside the
//                        snapshots (or a snapshot already there), then a
//                        restore function run on the file
//   ClusterSnapshotManifest
//                        a clustered collection's snapshot: one ZOOMSNAP
//                        archive (storage/snapshot_archive.h, the same magic,
//                        digests and trailer) whose first entry, "cluster",
//                        is this manifest, followed by one entry "shard-K" a
//                        shard, each the archive of one replica of shard K
//                        (a collection's archive, whole, with its own
//                        digests) at the log position the manifest records
//   RestoreByReplay      a restore whose points go through a backend's writes:
//                        a router restores any archive so (a collection's or a
//                        cluster's, into any number of nodes and shards, every
//                        point through the log under the write concern), and
//                        a standalone restores a cluster's archive so
//
// The manifest ("key=value" lines, KeyValueText), version 1:
//   format=zoom-cluster-snapshot  version=1  collection=C  shards=S
//   replicas=R  created_unix_ms=T  points=P  records=N
//   shard.K.sequence  the shard's log position the archive is at (every
//                     entry at or below it is in it; the position was at or
//                     past the log's head when the snapshot started)
//   shard.K.node      the node whose replica it is
//   shard.K.points, shard.K.records, shard.K.bytes, shard.K.sha256
//                     the shard archive's (its whole file's SHA-256)
// Golden: tests/data/golden/cluster_snapshot_manifest_v1.txt.
#ifndef ZOOM_SERVER_API_SNAPSHOT_FILES_H_
#define ZOOM_SERVER_API_SNAPSHOT_FILES_H_

#include <cstdint>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/api/backend.h"
#include "server/api/types.h"
#include "server/engine/database.h"

namespace zoom::server::api {

// An archive read out of a snapshots directory.
class FileSnapshotReader final : public SnapshotReader {
 public:
  FileSnapshotReader(const std::string& path, SnapshotInfo info)
      : in_(path, std::ios::binary), info_(std::move(info)) {}
  bool ok() const { return static_cast<bool>(in_); }
  const SnapshotInfo& info() const override { return info_; }
  absl::Status Read(size_t max, std::string* out) override;

 private:
  std::ifstream in_;
  SnapshotInfo info_;
};

// A restore: an upload staged through `db`'s file layer beside its
// snapshots, or a snapshot already there; Finish runs `restore` on the
// file (and removes a staged upload afterwards, whatever happened).
class StagedRestore final : public SnapshotRestore {
 public:
  using RestoreFn = std::function<absl::StatusOr<CollectionDescription>(
      const Call&, const std::string& path)>;
  StagedRestore(Database* db, RestoreFn restore)
      : db_(db), restore_(std::move(restore)) {}
  ~StagedRestore() override;
  // The upload's bytes will come (Append).
  absl::Status StageUpload();
  // A snapshot on the server (no Append).
  void SetSource(std::string path) { source_ = std::move(path); }

  absl::Status Append(absl::string_view data) override;
  absl::StatusOr<CollectionDescription> Finish(const Call& call) override;

 private:
  FileSystem* files() const;
  Database* db_;
  RestoreFn restore_;
  std::string source_;
  std::string staged_;
  std::unique_ptr<File> file_;
  uint64_t uploaded_ = 0;
};

// ---- a clustered collection's snapshot
// ---------------------------------------------

inline constexpr char kClusterManifestEntry[] = "cluster";
inline constexpr uint32_t kClusterManifestVersion = 1;
// The most shards a manifest may name (a router's collections have fewer).
inline constexpr uint32_t kMaxSnapshotShards = 4096;

struct ClusterSnapshotShard {
  uint64_t sequence = 0;
  std::string node;
  uint64_t points = 0, records = 0, bytes = 0;
  std::string sha256;
};

struct ClusterSnapshotManifest {
  std::string collection;
  uint32_t shards = 0, replicas = 0;
  int64_t created_unix_ms = 0;
  std::vector<ClusterSnapshotShard> parts;  // one a shard, in shard order

  uint64_t points() const;
  uint64_t records() const;
  std::string Encode() const;
  // DataLoss naming what is wrong (a newer version: FailedPrecondition).
  static absl::StatusOr<ClusterSnapshotManifest> Decode(std::string_view text);
  // The archive entry of shard k: "shard-K".
  static std::string EntryName(uint32_t shard);
};

// Whether the archive at `path` is a cluster's (its first entry is the
// manifest): read from its first bytes only, nothing verified (a restore
// verifies the whole archive). False for anything else, unreadable included.
bool IsClusterArchive(const std::string& path);

// ---- restore by replay
// --------------------------------------------------------------

struct ReplayOptions {
  // Points a write at most (the backend's limits cap it further) and their
  // vectors' and payloads' bytes at most.
  uint32_t batch = 1000;
  uint64_t batch_bytes = uint64_t{4} << 20;
  // Create the collection with the cluster manifest's shards and replicas
  // (a router); else with the backend's defaults (a standalone).
  bool keep_layout = true;
};

// Restores the archive at `path` (a collection's or a cluster's) into
// collection `target` of `backend`, through its writes:
//   1. the archive is verified whole, a cluster's shard archives each
//      staged and verified, and every one restored into a scratch database
//      (`scratch_options`' data_dir, created empty and removed afterwards):
//      nothing of `target` changes before all of them are whole
//      (DataLoss for a corrupt or truncated one, or shards whose configs
//      differ);
//   2. `target` existing is AlreadyExists unless `overwrite`, then dropped;
//   3. `target` created under the archive's config (renamed), its field
//      indexes declared, every live point upserted (its id, vector,
//      payload and fields) under the default write concern, then an index
//      build started when the archive had one.
// The answer is `target`'s description once its count covers the points
// replayed (a router's count lags its acknowledged writes; waited for at
// most 30 s or the call's deadline). A failure in step 3 drops what was
// made of `target` and says so (restore again). Writes that other clients send
// to `target` meanwhile are not fenced off.
absl::StatusOr<CollectionDescription> RestoreByReplay(
    CollectionBackend& backend, const DatabaseOptions& scratch_options,
    const Call& call, const std::string& path, const std::string& target,
    bool overwrite, const ReplayOptions& options = {});

}  // namespace zoom::server::api

#endif  // ZOOM_SERVER_API_SNAPSHOT_FILES_H_
