// File: server/engine/collection_types.h
//
// The types of a collection's interface (collection.h) that its parts
// share: CollectionOptions (what the server gives every collection),
// IndexState and CollectionInfo (what Collection::Info answers). Apart from
// collection.h so that the parts' headers (collection_core.h,
// collection_maintenance.h, ...) need not include the facade.
#ifndef ZOOM_SERVER_ENGINE_COLLECTION_TYPES_H_
#define ZOOM_SERVER_ENGINE_COLLECTION_TYPES_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "server/engine/calibration.h"
#include "server/engine/collection_config.h"
#include "server/engine/job_runner.h"
#include "server/engine/payload_index.h"
#include "server/engine/search_engine.h"
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
  // Snapshots are signed with it and a restore (RestoreSnapshot, a peer's
  // snapshot bootstrapping a replica) refuses an archive not signed with
  // it: PermissionDenied (storage/snapshot_archive.h). Null: unsigned, and
  // any whole archive is restored.
  std::shared_ptr<const storage::SnapshotKey> snapshot_key;
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

}  // namespace zoom::server

#endif  // ZOOM_SERVER_ENGINE_COLLECTION_TYPES_H_
