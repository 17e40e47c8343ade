// File: server/engine/collection.h
//
// Collection: one named set of points (uint64 external id, vector, optional
// payload) made durable and searchable. A facade that sequences its parts:
//
//   CollectionConfig    what it is (collection_config.h)
//   CollectionManifest  which files and record spaces make it up now; the
//                       collection is its one writer (collection_manifest.h)
//   Segment             the serving vector file + SearchEngine + IdTracker
//                       + payload indexes, and every operation on them:
//                       writes, Search with its join, Match, Get, Scroll
//                       (segment.h); replaced as a whole by compaction,
//                       retired without I/O on a reader's thread
//   JobRunner           the database's: builds, calibrations, payload index
//                       builds run as this collection's jobs (job_runner.h)
//   Compactor           the copy and catch-up of a compaction (compactor.h)
//   snapshots           WriteSnapshot / Restore (collection_snapshot.cc)
//
// Files by concern: collection.cc (open, close, manifest, Info),
// collection_write.cc (writes, payload index declarations and builds),
// collection_read.cc (reads: the knobs of a target), collection_maintenance.cc
// (builds, compaction, calibration, backoff), collection_snapshot.cc.
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
// Compact) are serialised inside; a build runs as a job on the JobRunner.
#ifndef ZOOM_SERVER_ENGINE_COLLECTION_H_
#define ZOOM_SERVER_ENGINE_COLLECTION_H_

#include <atomic>
#include <functional>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
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
#include "server/engine/calibration.h"
#include "server/engine/collection_config.h"
#include "server/engine/collection_manifest.h"
#include "server/engine/index_builder.h"
#include "server/engine/job_runner.h"
#include "server/engine/filter.h"
#include "server/engine/payload_fields.h"
#include "server/engine/payload_index.h"
#include "server/engine/search_engine.h"
#include "server/engine/segment.h"
#include "storage/metadata_store.h"
#include "storage/snapshot_archive.h"
#include "storage/vector_store.h"

namespace zoom::server {

enum class IndexState { kNone = 0, kBuilding = 1, kReady = 2, kFailed = 3 };
const char* IndexStateName(IndexState state);

struct CollectionOptions {
  // engine.cache_bytes is the default DRAM cache of a collection whose
  // config leaves cache_bytes 0.
  EngineOptions engine;
  // The largest CollectionConfig::cache_bytes (creation and restore reject
  // more; a stored config above it, after the limit was lowered, gets the
  // limit). Also caps the default (engine.cache_bytes) of a collection
  // opened past the server's total budget (DatabaseOptions).
  uint64_t max_cache_bytes = uint64_t{1} << 30;
  // store.file_system is what every file of the collection is written
  // through (vector files, index snapshots, snapshot archives).
  storage::VectorStoreOptions store;
  // An unindexed collection starts a build by itself once it holds this
  // many live points (0: never).
  uint64_t auto_build_min_points = 20000;
  // An indexed collection rebuilds (retrains) its index in the background
  // once it holds this many times the live points the index was trained
  // on (0: never). Searches use the old index until the new one replaces
  // it; the old one is freed by the last search holding it. At 4, the
  // builds of a growing collection sum to at most 4/3 of the last one.
  double auto_retrain_growth = 4.0;
  // ... and once the codes fit the latest points this many times worse
  // than the first added after the build (the mean code error of windows
  // of 1,024 additions, index::CodeErrorStats; ivf_hnsw_pq only): the
  // distribution drifted away from what the index was trained on. 0: never.
  double auto_retrain_drift = 2.0;
  // Compact() by itself once dead records are at least this share of the
  // vector file and at least `auto_compact_min_dead` (ratio 0: never).
  double auto_compact_dead_ratio = 0.5;
  uint64_t auto_compact_min_dead = 10000;
  // Threads of a background index build.
  int build_threads = 2;
  // Where the background work runs (job_runner.h): the database's runner
  // (null: the collection makes one of its own).
  std::shared_ptr<JobRunner> jobs;
  // After a failed build or compaction, the automatic ones wait
  // retry_base * 2^(failures - 1), at most retry_max, before trying again
  // (a failure never takes the process down; the collection keeps serving).
  // The runner's (JobRunner::Options) when the database makes it.
  absl::Duration maintenance_retry_base = absl::Seconds(10);
  absl::Duration maintenance_retry_max = absl::Minutes(15);
  // Recall as a knob (calibration.h): every new index is calibrated with
  // this many stored points as queries, at the end of its build (a
  // compaction's or a loaded one without a current curve: by the next
  // MaybeStartCalibration). 0: never (searches use the default knobs).
  uint32_t calibration_queries = 500;
  // The recall@10 a search aims at when neither it nor its collection
  // names a target or knobs (CollectionConfig::default_target_recall).
  // 0: none (the collection's default knobs).
  double default_target_recall = 0.95;
};

struct CollectionInfo {
  CollectionConfig config;
  uint64_t points = 0;          // live
  uint64_t deleted_records = 0;  // dead records in the vector file
  uint64_t stored_records = 0;
  IndexState index_state = IndexState::kNone;
  uint64_t indexed_points = 0;
  // The live points the current index was trained on (0: no index), and
  // the automatic retrains this process started (auto_retrain_growth and
  // auto_retrain_drift; those for drift also in drift_retrains).
  uint64_t trained_points = 0;
  uint64_t auto_retrains = 0;
  uint64_t drift_retrains = 0;
  // The drift retrain's baseline (the mean code error of the first window
  // after the build, kept across restarts) and the latest window's over it
  // (0: not known yet, or the index kind does not track it).
  double code_error_baseline = 0;
  double code_error_ratio = 0;
  uint64_t resident_bytes = 0;  // preview + id maps + cache
  uint64_t disk_bytes = 0;      // vector file + index snapshot
  double build_progress = 0;
  std::string index_error;       // why the last build failed ("" if it did not)
  std::string compaction_error;  // why the last compaction failed ("" if it did not)
  // Failed builds/compactions in a row, and when the automatic ones retry
  // (InfinitePast when nothing failed).
  uint32_t maintenance_failures = 0;
  absl::Time maintenance_retry_at = absl::InfinitePast();
  // The payload indexes (their bytes are in resident_bytes).
  std::vector<FieldIndexInfo> field_indexes;
  // The recall curve the knobs of a target are chosen from (null: none
  // yet); current: measured on the serving index (else on an earlier one,
  // until the serving one is measured); error: why the last measurement
  // failed ("" when it did not).
  std::shared_ptr<const Calibration> calibration;
  bool calibration_current = false;
  std::string calibration_error;
  // The target a search gets from this collection when it names none
  // (its own default_target_recall, else the server's; 0: none).
  double default_target_recall = 0;
};

// What Collection::Upsert refuses (InvalidArgument naming the point):
// none, a vector with NaN/Inf or a magnitude the metric cannot take, fields
// ValidateFields refuses, a uint8 collection's component outside 0..255 or
// not an integer. Each vector holds config.dim floats. A cluster router
// checks a write with it before the write enters the log: every replica
// would refuse it alike.
absl::Status ValidatePoints(const CollectionConfig& config, absl::Span<const PointRef> points);

// InvalidArgument unless `field` can name a payload index (1..256 bytes,
// no NUL byte): what CreateFieldIndex refuses first.
absl::Status ValidateFieldIndexName(std::string_view field);

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
  // The DRAM cache this collection's serving segment allocates: its
  // config's cache_bytes (capped by options.max_cache_bytes), else the
  // server's default (options.engine.cache_bytes).
  uint64_t cache_bytes() const { return EngineOptionsFor().cache_bytes; }
  const std::string& name() const { return config_.name; }
  uint32_t id() const { return id_; }
  const std::string& dir() const { return dir_; }

  // Inserts or replaces points (later duplicates in one batch win), with
  // their payload bytes and typed fields (an upsert replaces both).
  // InvalidArgument for a wrong dimension, NaN/Inf, a uint8 collection's
  // value outside 0..255, or fields ValidateFields refuses;
  // ResourceExhausted for a full disk. All or nothing.
  absl::Status Upsert(absl::Span<const PointRef> points);
  // Deletes the points that exist; returns how many did.
  absl::StatusOr<uint64_t> Delete(absl::Span<const uint64_t> ids);
  // Deletes every live point that passes `filter`, in batches of 65,536
  // points (each atomic: an error says how many were deleted before it).
  // The filter is evaluated without the write lock (writers go on
  // meanwhile); a batch deletes a point only if it is unchanged since it
  // matched (not rewritten, its payload not edited, no compaction between),
  // else the filter is evaluated again (the last time under the lock). So
  // every deleted point passed the filter when it was deleted, and every
  // point that passes throughout the call is deleted; one written during
  // the call may or may not be. Returns how many were deleted.
  // Unless `all`: InvalidArgument for a filter that matches every point
  // whatever the payloads (empty once normalised: NormalizeFilter), and
  // FailedPrecondition, deleting nothing, when it matches every live point
  // (at least one) when evaluated. With `all` an empty filter deletes
  // every point.
  absl::StatusOr<uint64_t> DeleteByFilter(const Filter& filter, bool all = false);
  // One page of the live points passing `filter` (null: all), ascending
  // by id: at most `limit` with id >= `offset`, into *out (as Get's, within
  // max_answer_bytes); *next is the first id of the next page, if any.
  absl::Status Scroll(const Filter* filter, uint64_t offset, uint32_t limit, bool with_vectors,
                      bool with_payload, std::vector<PointData>* out,
                      std::optional<uint64_t>* next, bool* scan,
                      uint64_t max_answer_bytes = UINT64_MAX) const;
  // The typed payload of the points of `ids` that exist, without touching
  // their vectors: `fields` set (the others kept), or with `overwrite`
  // replacing all of them. Returns how many points changed. InvalidArgument
  // for fields ValidateFields refuses. Durable like an Upsert; applied in
  // batches of 256 points (each atomic), so an error says how many points
  // before it were changed.
  absl::StatusOr<uint64_t> SetPayload(absl::Span<const uint64_t> ids, const PayloadFields& fields,
                                      bool overwrite);
  // Removes the fields named in `keys` (every field when empty) from the
  // points of `ids` that exist; returns how many points changed.
  absl::StatusOr<uint64_t> DeletePayload(absl::Span<const uint64_t> ids,
                                         absl::Span<const std::string> keys);
  // The points of `ids` that exist, in request order (an id given twice is
  // answered twice, read once). ResourceExhausted when the answer's vectors
  // and payloads would pass `max_answer_bytes` (found before it is built).
  absl::Status Get(absl::Span<const uint64_t> ids, bool with_vectors, bool with_payload,
                   std::vector<PointData>* out, uint64_t max_answer_bytes = UINT64_MAX) const;

  // Up to k live points, best first, with external ids (and payloads and
  // vectors when asked), and the query's stats. The query is validated by
  // the engine (SearchEngine::Search): its messages come back unchanged.
  // Without an index (or with exact) the search is brute force
  // (result->stats.exact).
  absl::Status Search(absl::Span<const float> query, const CollectionSearchParams& params,
                      QueryResult* result) const;

  // nq queries (queries.size() / nq floats each) with the same params, one
  // after another on this thread and pipelined through the engine (query
  // i+1's preview runs while query i's fullview reads are in flight; see
  // SearchEngine::SearchBatch). Each answer equals Search()'s; the answer
  // budget (max_answer_bytes) is the batch's. A query's error is "query #i:
  // ...".
  absl::Status SearchBatch(absl::Span<const float> queries, size_t nq,
                           const CollectionSearchParams& params,
                           std::vector<QueryResult>* results) const;

  // How many live points pass `filter` (null or empty: all), and whether
  // it was evaluated from the stored payloads (a scan).
  using FilterCount = server::FilterCount;
  absl::StatusOr<FilterCount> Count(const Filter* filter) const;
  // A field `filter` names that has no ready payload index now (the first
  // found), "" if every one has: what a scan's warning names.
  std::string UnindexedField(const Filter& filter) const;

  // Declares an in-RAM index of payload field `field` (it need not exist
  // yet: it fills as points arrive), built over the existing points in the
  // background; every write keeps it current from the call on, and until
  // it is built a filter on the field is evaluated from the stored
  // payloads (flagged). Durable (the manifest); rebuilt from RocksDB at
  // open. OK when the same index exists; FailedPrecondition for another
  // type on the field; InvalidArgument for a bad name.
  // background false: built on the caller's thread before it returns.
  absl::Status CreateFieldIndex(const std::string& field, FieldIndexType type,
                                bool background = true);
  // NotFound when the field has no index.
  absl::Status DeleteFieldIndex(const std::string& field);

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

  // Recall as a knob. Measures the serving index's recall curve
  // (calibration.h) in the background when it has no current one and no
  // measurement of this index failed already; false when it does not start
  // (nothing to do, off, or one runs). Database::RunMaintenance calls it;
  // a build calibrates by itself.
  bool MaybeStartCalibration();
  // Measures it on the caller's thread; FailedPrecondition without an
  // index, Aborted when the index was replaced meanwhile.
  absl::Status CalibrateNow();
  // Blocks until no background calibration runs; its status.
  absl::Status WaitForCalibration() { return jobs_->Wait(JobKey("calibrate")); }
  // The collection closes: stops its background work and waits for the
  // background calibration. A running calibration stops (a build's: the
  // build then ends without a new curve); a running index build stops at
  // its next cancellation point (index::IndexSpec::cancel: graph
  // insertions, encoded rows, k-means iterations) and a compaction at its
  // next chunk, both ending Unavailable (not a failure: the index state
  // goes back to what it was); none starts after (Unavailable). Does not
  // wait for the build: WaitForBuild. Before a drop or the server's stop.
  void StopBackgroundWork();

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

  // Replication: the position in a replicated log (a cluster replica's
  // stream sequence) of the last write applied to this collection; 0 when
  // none. The replica, the collection's one writer then, calls
  // SetLogPosition after each write it applies. Kept in the MetadataStore
  // (MetadataStore::PutLogPosition: durable with the next synced write) and
  // carried by snapshots (Restore sets it). A crash between a write and its
  // SetLogPosition applies that one write again at restart: each write kind
  // (Upsert, Delete, SetPayload, DeletePayload, DeleteByFilter, a field
  // index) is idempotent alone.
  uint64_t log_position() const { return log_position_.load(std::memory_order_acquire); }
  absl::Status SetLogPosition(uint64_t position);

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

 // Drops the records of replaced segments no reader holds any more (and
  // frees them), on the caller's thread: Database::RunMaintenance, the end
  // of Compact, and the destructor call it.
  void ReleaseRetired();
  // The record spaces holding this collection's records: the serving
  // segment's and those of retired segments not yet released.
  std::vector<uint32_t> record_spaces() const;

 private:
  // The options, and the job runner (the options' or its own).
  explicit Collection(const CollectionOptions& options);
  std::shared_ptr<Segment> Current() const;
  // options_.engine with this collection's own cache budget.
  EngineOptions EngineOptionsFor() const;
  absl::StatusOr<std::shared_ptr<Segment>> OpenSegment(uint32_t space,
                                                       const std::string& vectors_file,
                                                       bool create) const;
  // Puts manifest_ (with the serving segment's space and file).
  absl::Status SaveManifestLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Saves the serving index as a new snapshot file named in the manifest.
  absl::Status SaveSnapshotLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  void ReleaseRetiredLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  absl::Status StartBuildImpl(bool join_running);
  // The build job: builds over the serving segment, installs under the
  // write lock.
  absl::Status RunBuild();
  absl::Status CompactOnce() ABSL_LOCKS_EXCLUDED(write_mu_);
  // SetPayload / DeletePayload: Segment::EditFields under the write lock.
  absl::StatusOr<uint64_t> EditFields(absl::Span<const uint64_t> ids,
                                      const std::function<bool(PayloadFields*)>& change);
  // The engine's knobs of a search: for knobs left 0 the calibrated ones
  // of the target, else the collection's defaults (see
  // CollectionSearchParams::target_recall); the choice into *stats. InvalidArgument for a bad target.
  absl::Status EngineParams(const Segment& seg, const CollectionSearchParams& params,
                            SearchParams* out, QueryStats* stats) const;
  // The target of a search that names none (CollectionInfo's
  // default_target_recall).
  double DefaultTarget() const;
  std::shared_ptr<const Calibration> CurrentCalibration() const;
  // Installs a curve (current: measured on the serving index).
  void SetCalibration(std::shared_ptr<const Calibration> calibration, bool current);
  void SetCalibrationError(std::string error);
  // The key of this collection's job `what` on the runner.
  std::string JobKey(std::string_view what) const;
  absl::Status RunCalibration();
  // The build of one declared field (CreateFieldIndex) of the index's
  // `generation` (it stops when the field is deleted or declared again).
  absl::Status BuildFieldIndex(const std::string& field, uint64_t generation);
  bool FieldBuildRunning(const std::string& field) const;
  // Books a failed (or successful) build/compaction for the retry backoff.
  void NoteMaintenance(bool compaction, const absl::Status& st);
  // Unavailable: `what` stopped or did not start because the collection
  // closes (StopBackgroundWork).
  absl::Status ClosingError(absl::string_view what) const;
  bool MaintenanceDue() const;
  void MaybeAutoMaintainLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  uint64_t TrainedPointsLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Whether the current index would be retrained at `live` points (the
  // automatic retrain's growth and drift rules), or its training is not
  // known: a compaction then trains anew instead of keeping the quantiser.
  bool RetrainDueLocked(uint64_t live) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  absl::Status DroppedError() const;

  std::string dir_;
  storage::MetadataStore* metadata_ = nullptr;
  uint32_t id_ = 0;
  CollectionConfig config_;
  CollectionOptions options_;

  // One compaction at a time (it holds write_mu_ only to plan and to
  // switch); a drop waits for it, after asking it to stop.
  mutable absl::Mutex compact_mu_ ABSL_ACQUIRED_BEFORE(write_mu_);
  std::atomic<bool> dropping_{false};
  std::atomic<bool> compacting_{false};
  // Serialises writers (Upsert, Delete, a compaction's plan and switch,
  // index install) and guards the durable state.
  mutable absl::Mutex write_mu_;
  CollectionManifest manifest_ ABSL_GUARDED_BY(write_mu_);
  // Replaced segments, held until no reader does (ReleaseRetired).
  std::vector<std::shared_ptr<Segment>> retired_ ABSL_GUARDED_BY(write_mu_);
  std::atomic<bool> dropped_{false};
  std::atomic<uint64_t> log_position_{0};  // written under write_mu_

  // The serving segment.
  mutable absl::Mutex segment_mu_;
  std::shared_ptr<Segment> segment_ ABSL_GUARDED_BY(segment_mu_);

  // Background work runs on the database's JobRunner under this
  // collection's keys (JobKey): "build", "calibrate", "compact" (the last
  // compaction's status), "field/<name>"; the group is the collection's
  // (its jobs are dropped and awaited at close); "maintenance" books the
  // builds' and compactions' failures for the retry backoff.
  std::shared_ptr<JobRunner> jobs_;
  std::string jobs_group_;
  // closing_ stops a running build or calibration (StopBackgroundWork, the
  // destructor); stopping_ the payload index builds (the destructor).
  std::atomic<bool> closing_{false};
  std::atomic<bool> stopping_{false};

  // The recall curve the knobs of a target come from (read by every
  // search, without a lock), whether it was measured on the serving index,
  // and why the last measurement failed.
  struct CalibrationState {
    std::shared_ptr<const Calibration> curve;
    bool current = false;
    std::string error;
  };
  std::atomic<std::shared_ptr<const CalibrationState>> calibration_;
  // The index epoch a measurement last started on (UINT64_MAX: none).
  uint64_t calibration_tried_epoch_ ABSL_GUARDED_BY(write_mu_) = UINT64_MAX;
  std::atomic<IndexState> index_state_{IndexState::kNone};
  std::atomic<double> build_progress_{0};
  std::atomic<uint64_t> auto_retrains_{0};
  std::atomic<uint64_t> drift_retrains_{0};
  // manifest_.code_error as of the last manifest saved (for Info).
  std::atomic<double> code_error_base_{0};
  // TrainedPointsLocked() as of the last manifest saved (read by Info
  // without the write lock).
  std::atomic<uint64_t> trained_points_{0};
};

}  // namespace zoom::server

#endif  // ZOOM_SERVER_ENGINE_COLLECTION_H_
