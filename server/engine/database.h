// File: server/engine/database.h
//
// Database: the collections of one data directory and their catalog.
//
//   DATA_DIR/meta/              RocksDB (MetadataStore): catalog, records,
//                               payloads
//   DATA_DIR/collections/<id>/  vectors-<n>.zvec, index-<n>.zidx
//
// Open() recovers every collection (see Collection::Open). Collections are
// handed out as shared_ptr: a request keeps its collection alive even if it
// is dropped meanwhile.
//
// Thread safety: all methods are safe from many threads.
#ifndef ZOOM_SERVER_ENGINE_DATABASE_H_
#define ZOOM_SERVER_ENGINE_DATABASE_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/engine/collection.h"
#include "server/engine/job_runner.h"
#include "storage/metadata_store.h"

namespace zoom::server {

struct DatabaseOptions {
  std::string data_dir = "./var/zoomd";
  // Sync the metadata WAL on every write (--sync=always); else every
  // SyncWal() (--sync=batch; the server calls it periodically).
  bool sync_always = true;
  CollectionOptions collection;
  uint32_t max_dim = 4096;
  uint32_t max_collections = 1024;
  // The DRAM caches of all collections together (each one's
  // CollectionCore::cache_bytes): a creation or a restore that would pass it is
  // ResourceExhausted, so that no client can make the server allocate
  // max_collections x max_cache_bytes. A collection opened past it (the
  // budget was lowered) gets what is left, maybe nothing, and a warning,
  // until the next open. The steady state: a restore allocates its cache
  // before its final check (two at once may pass the budget until one is
  // refused), and a compaction's new segment holds a second cache while it
  // runs.
  uint64_t max_total_cache_bytes = uint64_t{4} << 30;
  // Snapshots live in SNAPSHOTS_DIR/<collection>/<name>.zsnap ("" =
  // DATA_DIR/snapshots).
  std::string snapshots_dir;
  // The maintenance tick (RunMaintenance) runs as a job every this long
  // (0: never; zoomd runs it every --maintenance interval of its own).
  absl::Duration maintenance_interval = absl::ZeroDuration();
  // Threads of the database's JobRunner: index builds and their
  // calibrations, payload index builds, the maintenance tick.
  int job_threads = 4;
  // A collection whose files are damaged (Collection::Open's DataLoss: a
  // file cut short, a header or record that does not check) is moved aside
  // (COLLECTION_DIR.damaged-<unix ms>, kept for the operator) and dropped
  // from the catalog instead of stopping the open: for a cluster node, whose
  // replicas are copies a peer can give again (the node bootstraps the
  // replica afresh). False (a standalone: its only copy): Open fails.
  // The same for the metadata store itself (RocksDB's Corruption at its
  // open, at the catalog's read, or, with collection.store.verify_on_open,
  // in any table's block): with it every collection's files go aside to
  // DATA_DIR/.damaged-<unix ms>/ and the database opens empty.
  bool quarantine_damaged = false;
};

// The fullview reads' backend: "io_uring" or "pread", and why not io_uring
// ("" when it is used).
struct IoBackendInfo {
  std::string name;
  std::string note;
};

struct SnapshotInfo {
  std::string collection, name;
  uint64_t bytes = 0, points = 0, records = 0;
  int64_t created_unix_ms = 0;
  std::string sha256;
};

class Database {
 public:
  static absl::StatusOr<std::unique_ptr<Database>> Open(const DatabaseOptions& options);
  ~Database();

  // The SIMD level the distance kernels run at in this process ("avx512",
  // "avx2" or "scalar"): what GetServerInfo reports.
  static const char* SimdLevel();
  // What the kernels run, per family (index::KernelChoices): for the log.
  static const char* KernelChoices();
  // OpenBLAS's kernels: index/blas_core.h. EnsureBlasCore first thing in a
  // binary's main (it may re-execute the program); BlasCore for the log.
  static void EnsureBlasCore(char** argv);
  static const char* BlasCore();

  // AlreadyExists for a taken name; InvalidArgument for a bad config;
  // ResourceExhausted past max_collections or max_total_cache_bytes.
  absl::StatusOr<std::shared_ptr<Collection>> CreateCollection(CollectionConfig config);
  // Removes the collection, its records and its files. NotFound if absent.
  absl::Status DropCollection(const std::string& name);
  // NotFound (with the name) if absent.
  absl::StatusOr<std::shared_ptr<Collection>> GetCollection(const std::string& name) const;
  // Sorted by name.
  std::vector<std::shared_ptr<Collection>> ListCollections() const;
  // The collections' DRAM caches together, and what the budget leaves.
  uint64_t CacheBytesInUse() const;
  uint64_t CacheBytesLeft() const;

  // Snapshots (see Collection::WriteSnapshot). Names are
  // [A-Za-z0-9._-], 1..128; NotFound for an unknown collection or snapshot.
  absl::StatusOr<SnapshotInfo> CreateSnapshot(const std::string& collection);
  // A snapshot of `collection` (named and listed as CreateSnapshot's) whose
  // archive `write` makes at the path it is given (the file complete and
  // synced when it returns OK): a router's cluster snapshot. The collection
  // need not be one of this database's.
  using SnapshotWriter =
      std::function<absl::StatusOr<Collection::SnapshotStats>(const std::string& path)>;
  absl::StatusOr<SnapshotInfo> CreateSnapshotWith(const std::string& collection,
                                                  const SnapshotWriter& write);
  absl::StatusOr<std::vector<SnapshotInfo>> ListSnapshots(const std::string& collection) const;
  absl::Status DeleteSnapshot(const std::string& collection, const std::string& name);
  // The archive file of a snapshot, and its info.
  absl::StatusOr<std::pair<std::string, SnapshotInfo>> SnapshotFile(
      const std::string& collection, const std::string& name) const;
  // Restores the archive at `path` into collection `target`: the archive is
  // verified whole first (DataLoss for a corrupt or truncated one); an
  // existing `target` is AlreadyExists unless `overwrite`, then replaced in
  // one catalog write once the restored one is complete.
  absl::StatusOr<std::shared_ptr<Collection>> RestoreSnapshot(const std::string& path,
                                                              const std::string& target,
                                                              bool overwrite);
  // A snapshot named relative to the snapshots directory
  // ("<collection>/<name>.zsnap"), resolved without leaving it.
  absl::StatusOr<std::string> SnapshotSource(const std::string& relative) const;
  // Where uploads are staged (inside the snapshots directory).
  std::string UploadPath() const;
  const std::string& snapshots_dir() const { return snapshots_dir_; }

  // What the collections' readers use (the first that fell back to pread
  // decides), or, without collections, what a new one would get.
  IoBackendInfo IoBackendInUse() const;

  absl::Status SyncWal() { return metadata_->SyncWal(); }
  // Releases retired segments no reader holds
  // (CollectionMaintenance::ReleaseRetired), starts the calibration of
  // indexes without a current recall curve
  // (CollectionMaintenance::MaybeStartCalibration, in the background) and
  // compacts the collections whose dead records passed the thresholds
  // (CollectionMaintenance::NeedsCompaction), one after another. Returns
  // how many it compacted.
  // zoomd runs it every DatabaseOptions::maintenance_interval, as a job.
  int RunMaintenance();
  // The server stops: every collection's builds, compactions and
  // calibrations stop at their next cancellation point and none starts
  // after (CollectionMaintenance::StopBackgroundWork); the close then joins them
  // within moments instead of waiting for a build to finish.
  void StopBackgroundWork();
  const DatabaseOptions& options() const { return options_; }

 private:
  Database() = default;
  std::string CollectionDir(uint32_t id) const;
  // The cache a collection of `config` would allocate (CollectionCore::cache_bytes).
  uint64_t CacheBytesFor(const CollectionConfig& config) const;
  // The caches of the collections but `except` (may be null).
  uint64_t CacheBytesInUseLocked(const Collection* except) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ResourceExhausted when `need` more would pass max_total_cache_bytes.
  absl::Status CheckCacheBudgetLocked(uint64_t need, const Collection* except) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  DatabaseOptions options_;
  std::string snapshots_dir_;
  // Removes what a killed snapshot or upload staged (at Open).
  void RemoveStagingLeftovers() const;
  // Queues the next maintenance tick (unless the database closes).
  void ScheduleTick();

  std::unique_ptr<storage::MetadataStore> metadata_;
  // The background work of every collection (options_.collection.jobs);
  // outlives them (they hold it too).
  std::shared_ptr<JobRunner> jobs_;
  std::atomic<bool> closing_{false};
  mutable absl::Mutex mu_;  // guards collections_; serialises create/drop
  std::map<std::string, std::shared_ptr<Collection>> collections_ ABSL_GUARDED_BY(mu_);
};

}  // namespace zoom::server

#endif  // ZOOM_SERVER_ENGINE_DATABASE_H_
