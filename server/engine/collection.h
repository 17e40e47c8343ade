// File: server/engine/collection.h
//
// Collection: one named set of points (uint64 external id, vector, optional
// payload) made durable and searchable: a SearchEngine (vector file + Zoom
// index) plus the record map and payloads in the MetadataStore, deletes as
// tombstones, background index builds with snapshots, and compaction.
//
// Ids: a point's vector lives at a dense InternalId in the vector file.
// Overwriting a point appends its new vector and kills the old record, so
// the file only grows until Compact() rewrites it without the dead records.
//
// Durability: Upsert/Delete return once the vectors are fdatasync'd and the
// records are committed in RocksDB (WAL synced when the MetadataStore syncs).
// A crash between the two leaves vector records without a record entry:
// they are dead on restart, never served.
//
// Restart (Open): the vector file, the record map, then the latest index
// snapshot; vectors stored after the snapshot are added to the index again
// (the vector file is the log replayed past the snapshot).
//
// Thread safety: Search, Get and Info are const and safe from many threads,
// also during writes, builds and compaction. Writers (Upsert, Delete,
// Compact) are serialised inside; BuildIndex runs in a background thread.
#ifndef ZOOM_SERVER_ENGINE_COLLECTION_H_
#define ZOOM_SERVER_ENGINE_COLLECTION_H_

#include <atomic>
#include <functional>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/metric.h"
#include "common/query_stats.h"
#include "index/vector_index.h"
#include "server/engine/search_engine.h"
#include "storage/metadata_store.h"
#include "storage/snapshot_archive.h"
#include "storage/vector_store.h"

namespace zoom::server {

// What a collection is; fixed at creation. Encoded in the catalog.
struct CollectionConfig {
  std::string name;
  uint32_t dim = 0;
  Metric metric = Metric::kL2;
  storage::DType dtype = storage::DType::kFloat32;
  // The preview built by BuildIndex (metric and dim are copied in).
  // pq.m 0 = automatic (ApplyDefaults).
  index::IndexSpec index = [] {
    index::IndexSpec spec;
    spec.pq.m = 0;
    return spec;
  }();
  // Search knobs used when a request leaves them 0.
  uint32_t default_ef = 64;
  uint32_t default_nprobe = 16;
  uint32_t default_rerank = 100;

  // Fills zero index fields with defaults (pq.m about dim / 2, ...).
  void ApplyDefaults();
  // InvalidArgument naming the field to fix.
  absl::Status Validate(uint32_t max_dim) const;
  // A versioned "key=value" text; Decode reads any earlier version.
  std::string Encode() const;
  static absl::StatusOr<CollectionConfig> Decode(std::string_view text);
};

// A name: 1..64 of [A-Za-z0-9_-]. InvalidArgument otherwise.
absl::Status ValidateCollectionName(std::string_view name);

enum class IndexState { kNone = 0, kBuilding = 1, kReady = 2, kFailed = 3 };
const char* IndexStateName(IndexState state);

struct CollectionOptions {
  EngineOptions engine;
  storage::VectorStoreOptions store;
  // An unindexed collection starts a build by itself once it holds this
  // many live points (0: never).
  uint64_t auto_build_min_points = 20000;
  // Compact() by itself once dead records are at least this share of the
  // vector file and at least `auto_compact_min_dead` (ratio 0: never).
  double auto_compact_dead_ratio = 0.5;
  uint64_t auto_compact_min_dead = 10000;
  // Threads of a background index build.
  int build_threads = 2;
  // After a failed build or compaction, the automatic ones wait
  // retry_base * 2^(failures - 1), at most retry_max, before trying again
  // (a failure never takes the process down; the collection keeps serving).
  absl::Duration maintenance_retry_base = absl::Seconds(10);
  absl::Duration maintenance_retry_max = absl::Minutes(15);
};

struct CollectionInfo {
  CollectionConfig config;
  uint64_t points = 0;          // live
  uint64_t deleted_records = 0;  // dead records in the vector file
  uint64_t stored_records = 0;
  IndexState index_state = IndexState::kNone;
  uint64_t indexed_points = 0;
  uint64_t resident_bytes = 0;  // preview + id maps + cache
  uint64_t disk_bytes = 0;      // vector file + index snapshot
  double build_progress = 0;
  std::string index_error;       // why the last build failed ("" if it did not)
  std::string compaction_error;  // why the last compaction failed ("" if it did not)
  // Failed builds/compactions in a row, and when the automatic ones retry
  // (InfinitePast when nothing failed).
  uint32_t maintenance_failures = 0;
  absl::Time maintenance_retry_at = absl::InfinitePast();
};

// One point of an Upsert: `vector` holds dim floats.
struct PointRef {
  uint64_t id;
  const float* vector;
  std::string_view payload;
};

struct PointData {
  uint64_t id = 0;
  std::vector<float> vector;  // empty unless asked for
  std::string payload;        // empty unless asked for
};

struct CollectionSearchParams {
  SearchParams engine;  // k, knobs (0 = the collection's defaults), deadline
  bool exact = false;
  bool with_payload = false;
  bool with_vectors = false;
  // The answer's payload and vector bytes at most (ResourceExhausted beyond,
  // found before it is all in memory).
  uint64_t max_answer_bytes = UINT64_MAX;
};

struct CollectionHit {
  uint64_t id;
  float score;
  std::string payload;
  std::vector<float> vector;
};

class Collection {
 public:
  // Creates the files of a new collection in `dir` (which must not exist)
  // for catalog entry `id`. `metadata` must outlive the collection.
  static absl::StatusOr<std::unique_ptr<Collection>> Create(
      const std::string& dir, storage::MetadataStore* metadata, uint32_t id,
      const CollectionConfig& config, const CollectionOptions& options);
  // Recovers a collection from its directory and catalog entry.
  static absl::StatusOr<std::unique_ptr<Collection>> Open(
      const std::string& dir, storage::MetadataStore* metadata,
      const storage::CollectionRecord& record, const CollectionOptions& options);
  // Creates the collection's files in `dir` (which must not exist) for
  // catalog entry `id` from a verified snapshot archive (see
  // WriteSnapshot), under `config` (the archive's, renamed), and opens it.
  // DataLoss when the archive's entries do not fit together.
  static absl::StatusOr<std::unique_ptr<Collection>> Restore(
      const std::string& dir, storage::MetadataStore* metadata, uint32_t id,
      const CollectionConfig& config, const storage::ArchiveReader& archive,
      const CollectionOptions& options);
  // Waits for a running build; saves an index snapshot if points were
  // indexed since the last one.
  ~Collection();

  const CollectionConfig& config() const { return config_; }
  const std::string& name() const { return config_.name; }
  uint32_t id() const { return id_; }
  const std::string& dir() const { return dir_; }

  // Inserts or replaces points (later duplicates in one batch win).
  // InvalidArgument for a wrong dimension, NaN/Inf, or a uint8 collection's
  // value outside 0..255; ResourceExhausted for a full disk. All or nothing.
  absl::Status Upsert(absl::Span<const PointRef> points);
  // Deletes the points that exist; returns how many did.
  absl::StatusOr<uint64_t> Delete(absl::Span<const uint64_t> ids);
  // The points of `ids` that exist, in request order (an id given twice is
  // answered twice, read once). ResourceExhausted when the answer's vectors
  // and payloads would pass `max_answer_bytes` (found before it is built).
  absl::Status Get(absl::Span<const uint64_t> ids, bool with_vectors, bool with_payload,
                   std::vector<PointData>* out, uint64_t max_answer_bytes = UINT64_MAX) const;

  // Up to k live points, best first. InvalidArgument for a wrong dimension
  // or NaN/Inf. Without an index (or with exact) the search is brute force
  // and `*exact_used` (when not null) is set.
  absl::Status Search(const float* query, size_t dim, const CollectionSearchParams& params,
                      std::vector<CollectionHit>* hits, QueryStats* stats,
                      bool* exact_used = nullptr) const;

  // Starts building the index over the points present, in the background;
  // it trains on the live points only. FailedPrecondition when too few
  // points (fewer than max(256, nlist) live) or a build already runs.
  absl::Status StartBuild();
  // As StartBuild, but a build already running (the automatic one, or
  // another caller's) counts as started: OK.
  absl::Status StartOrJoinBuild();
  // Calls done(status of the build) once no build runs: at once (on this
  // thread) when none does, else on the build's thread as it ends. Never
  // blocks (a waiting RPC holds no worker).
  void WhenBuildDone(std::function<void(absl::Status)> done);
  // Blocks until no build runs; the last build's status (its own code:
  // FailedPrecondition for data that cannot be indexed, e.g. a point that
  // breaks the magnitude rule, stored by an older zoomd).
  absl::Status WaitForBuild();
  // Rewrites the vector file and the index without the dead records.
  // Searches and writes keep working meanwhile: the live records are copied
  // and the index rebuilt without the write lock; the writes made meanwhile
  // are applied to the new generation before the switch (under it). A
  // failure leaves the collection as it was (serving) and is reported in
  // Info().
  absl::Status Compact();

  // Writes a consistent snapshot archive to `path` while the collection
  // takes writes: the write lock is held only to fix the point (the
  // committed record count, the live records and a RocksDB snapshot for
  // their payloads, a hard link to the index snapshot); the copy runs
  // without it. Restored, it answers as this collection did at that point.
  // Entries: manifest, config, vectors (the records' raw bytes), records
  // (internal id, external id, payload of each live one), index (when
  // there is one).
  struct SnapshotStats {
    uint64_t records = 0, points = 0, bytes = 0;
    std::string sha256;
  };
  absl::StatusOr<SnapshotStats> WriteSnapshot(const std::string& path) const;

  CollectionInfo Info() const;
  // Whether dead records passed the automatic compaction thresholds
  // (CollectionOptions::auto_compact_*); Database::RunMaintenance acts on it.
  bool NeedsCompaction() const;
  // Before the catalog drops it: waits for a running compaction (or write)
  // to end; afterwards writes and compactions answer NotFound and no state
  // or snapshot is written. MarkDropped(false) undoes it (the drop failed).
  void MarkDropped(bool dropped = true);
  // The current engine (tests, benchmarks); kept alive by the pointer.
  std::shared_ptr<const SearchEngine> engine() const;
  // The record space of the current generation (see MetadataStore).
  uint32_t record_space() const;

 private:
  // The vector file, the engine over it and the record map of its ids:
  // replaced as a whole by Compact. Readers hold a shared_ptr.
  struct Generation;
  Collection() = default;
  std::shared_ptr<Generation> Current() const;
  absl::Status SaveStateLocked();
  absl::Status SaveSnapshotLocked();
  absl::Status StartBuildImpl(bool join_running);
  void BuildMain();
  absl::Status BuildOnce(std::unique_ptr<index::VectorIndex>* built,
                         std::shared_ptr<Generation>* gen, uint64_t* n);
  absl::Status CompactOnce();
  // FailedPrecondition naming the first live point of `gen` among rows
  // [0, n) of `vectors` that breaks the magnitude rule.
  absl::Status CheckTrainable(const Generation& gen, const float* vectors, uint64_t n) const;
  // The fewest live points an index build needs (256, or nlist if larger).
  uint64_t MinIndexPoints() const;
  // The payloads of `ids` into `out`, taking their bytes from *budget;
  // ResourceExhausted once it would go below zero.
  absl::Status ReadPayloadsWithin(const Generation& gen, absl::Span<const InternalId> ids,
                                  uint64_t* budget, std::vector<std::string>* out) const;
  // Books a failed (or successful) build/compaction for the retry backoff.
  void NoteMaintenance(bool compaction, const absl::Status& st);
  bool MaintenanceDue() const;
  void MaybeAutoMaintainLocked();
  absl::StatusOr<std::shared_ptr<Generation>> OpenGeneration(uint32_t space,
                                                             const std::string& vectors_file,
                                                             bool create);

  std::string dir_;
  storage::MetadataStore* metadata_ = nullptr;
  uint32_t id_ = 0;
  CollectionConfig config_;
  CollectionOptions options_;

  // Serialises writers (Upsert, Delete, Compact, index install).
  mutable absl::Mutex write_mu_;
  // The durable state (what the catalog's state entry says); writers only.
  std::string snapshot_file_ ABSL_GUARDED_BY(write_mu_);
  uint64_t snapshot_count_ ABSL_GUARDED_BY(write_mu_) = 0;
  uint32_t next_file_seq_ ABSL_GUARDED_BY(write_mu_) = 1;
  // The record space a compaction in progress writes (0: none); the state
  // names it, so a crash mid-way leaves no garbage.
  uint32_t pending_space_ ABSL_GUARDED_BY(write_mu_) = 0;
  // One compaction at a time (it holds write_mu_ only to start and to
  // switch); a drop waits for it, after asking it to stop.
  mutable absl::Mutex compact_mu_ ABSL_ACQUIRED_BEFORE(write_mu_);
  std::atomic<bool> dropping_{false};

  // Guards the generation pointer and the external id map together.
  mutable absl::Mutex map_mu_;
  std::shared_ptr<Generation> gen_ ABSL_GUARDED_BY(map_mu_);
  absl::flat_hash_map<uint64_t, InternalId> by_external_ ABSL_GUARDED_BY(map_mu_);

  // Background build.
  absl::Mutex build_thread_mu_;  // guards build_thread_ (start, join, destroy)
  std::thread build_thread_ ABSL_GUARDED_BY(build_thread_mu_);
  std::atomic<bool> compacting_{false};
  std::atomic<IndexState> index_state_{IndexState::kNone};
  std::atomic<double> build_progress_{0};
  std::atomic<bool> building_{false};
  std::atomic<bool> dropped_{false};
  mutable absl::Mutex build_mu_;
  absl::CondVar build_done_;  // signalled when building_ turns false
  absl::Status build_status_ ABSL_GUARDED_BY(build_mu_);
  std::vector<std::function<void(absl::Status)>> build_waiters_ ABSL_GUARDED_BY(build_mu_);
  absl::Status compaction_status_ ABSL_GUARDED_BY(build_mu_);
  uint32_t maintenance_failures_ ABSL_GUARDED_BY(build_mu_) = 0;
  absl::Time maintenance_retry_at_ ABSL_GUARDED_BY(build_mu_) = absl::InfinitePast();
};

}  // namespace zoom::server

#endif  // ZOOM_SERVER_ENGINE_COLLECTION_H_
