// File: server/engine/collection_core.h
//
// CollectionCore: what a collection's parts (collection.h) share, and
// nothing else. It owns
//
//   identity      the directory, catalog id, config, options and the
//                 MetadataStore: fixed for the collection's life
//   the manifest  which files and record spaces make the collection up now
//                 (collection_manifest.h); SaveManifestLocked is its one
//                 writer (one RocksDB put of the catalog's state entry)
//   segments      the serving segment (replaced as a whole by a compaction)
//                 and the retired ones a reader may still hold
//   dropped       the catalog dropped it: writes, builds, compactions and
//                 snapshots answer NotFound (Collection::MarkDropped)
//   log position  a cluster replica's applied position (Collection::SetLogPosition)
//   job keys      the collection's group and keys on the JobRunner (the
//                 database's, or one of its own)
//   the locks     the collection's only ones (its parts have none), in this
//                 order: compact_mu_ > write_mu_ > segment_mu_
//     compact_mu_  one compaction at a time (it holds write_mu_ only to
//                  plan and to switch); a drop waits for it
//     write_mu_    the one writer: writes, a compaction's plan and switch,
//                  an index install, a payload index declaration and each
//                  step of its build, a calibration's install; guards the
//                  manifest, the retired list and the parts' state that
//                  changes with the manifest
//     segment_mu_  the serving segment's pointer (a reader copies it)
//
// Who touches what: the collection (Collection) and its parts
// (CollectionMaintenance, FieldIndexes) are friends. Each reads and changes
// the private state below under the locks its annotations name, and saves
// the manifest through SaveManifestLocked only. Everyone else sees the
// const face (Collection::core()): identity, the serving engine, the record
// spaces.
//
// It does no work of its own: no job, no write or read path (those are the
// collection's and its parts').
//
// Thread safety: the public methods are safe from many threads.
#ifndef ZOOM_SERVER_ENGINE_COLLECTION_CORE_H_
#define ZOOM_SERVER_ENGINE_COLLECTION_CORE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/engine/collection_config.h"
#include "server/engine/collection_manifest.h"
#include "server/engine/collection_types.h"
#include "server/engine/job_runner.h"
#include "server/engine/search_engine.h"
#include "server/engine/segment.h"
#include "storage/metadata_store.h"

namespace zoom::server {

class CollectionCore {
 public:
  // Takes the job runner (options.jobs, else one of its own) and a job
  // group never used before; touches no file (Collection::Create and Open
  // install the manifest and the serving segment).
  CollectionCore(std::string dir, storage::MetadataStore* metadata, uint32_t id,
                 CollectionConfig config, const CollectionOptions& options);
  CollectionCore(const CollectionCore&) = delete;
  CollectionCore& operator=(const CollectionCore&) = delete;

  const CollectionConfig& config() const { return config_; }
  const std::string& dir() const { return dir_; }
  // The catalog entry's id (also the first record space).
  uint32_t id() const { return id_; }
  // The DRAM cache this collection's serving segment allocates: its
  // config's cache_bytes (capped by options.max_cache_bytes), else the
  // server's default (options.engine.cache_bytes).
  uint64_t cache_bytes() const { return EngineOptionsFor().cache_bytes; }
  // The serving engine (tests, benchmarks, the I/O backend in use); kept
  // alive by the pointer.
  std::shared_ptr<const SearchEngine> engine() const;
  // The record space of the serving segment (see MetadataStore).
  uint32_t record_space() const;
  // The record spaces holding this collection's records: the serving
  // segment's and those of retired segments not yet released.
  std::vector<uint32_t> record_spaces() const;

 private:
  friend class Collection;
  friend class CollectionMaintenance;
  friend class FieldIndexes;

  // The serving segment; a reader holds it for the length of a call.
  std::shared_ptr<Segment> Current() const ABSL_LOCKS_EXCLUDED(segment_mu_);
  // Makes `seg` the serving segment; returns the one it replaces (null at
  // the first install).
  std::shared_ptr<Segment> ServeLocked(std::shared_ptr<Segment> seg)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // options_.engine with this collection's own cache budget.
  EngineOptions EngineOptionsFor() const;
  absl::StatusOr<std::shared_ptr<Segment>> OpenSegment(uint32_t space,
                                                       const std::string& vectors_file,
                                                       bool create) const;
  // Puts manifest_ (with the serving segment's space and file); NotFound
  // once dropped.
  absl::Status SaveManifestLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Saves the serving index as a new snapshot file named in the manifest.
  absl::Status SaveSnapshotLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // A build's index file, written without write_mu_ (taken only for its
  // name, from the manifest's sequence): its name. The manifest names it
  // at CommitSnapshotLocked, with the points it covers (a load adds the
  // rest from the vector file); until then, or when the build is dropped,
  // it is the caller's to remove (RemoveFile).
  absl::StatusOr<std::string> StageIndexFile(const index::VectorIndex& idx)
      ABSL_LOCKS_EXCLUDED(write_mu_);
  absl::Status CommitSnapshotLocked(const std::string& name, uint64_t count)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  void RemoveFile(const std::string& name) const;
  // Drops the records of retired segments no reader holds any more (and
  // frees them).
  void ReleaseRetiredLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  absl::Status DroppedError() const;
  // The key of this collection's job `what` on the runner.
  std::string JobKey(std::string_view what) const;

  const std::string dir_;
  storage::MetadataStore* const metadata_;
  const uint32_t id_;
  const CollectionConfig config_;
  const CollectionOptions options_;

  // One compaction at a time; dropping_ asks a running one to stop (at its
  // next chunk) before a drop waits for it.
  mutable absl::Mutex compact_mu_ ABSL_ACQUIRED_BEFORE(write_mu_);
  std::atomic<bool> dropping_{false};
  // The one writer, and the durable state.
  mutable absl::Mutex write_mu_;
  CollectionManifest manifest_ ABSL_GUARDED_BY(write_mu_);
  // Replaced segments, held until no reader does (ReleaseRetiredLocked).
  std::vector<std::shared_ptr<Segment>> retired_ ABSL_GUARDED_BY(write_mu_);
  std::atomic<bool> dropped_{false};       // written under write_mu_
  std::atomic<uint64_t> log_position_{0};  // written under write_mu_
  std::atomic<uint64_t> log_version_{0};   // written under write_mu_, with it
  // manifest_.TrainedPoints() and manifest_.code_error as of the last
  // manifest saved or loaded (read by Info without the write lock).
  std::atomic<uint64_t> trained_points_{0};
  std::atomic<double> code_error_base_{0};

  // The serving segment.
  mutable absl::Mutex segment_mu_;
  std::shared_ptr<Segment> segment_ ABSL_GUARDED_BY(segment_mu_);

  // Background work runs on this runner under the collection's keys
  // (JobKey): "build", "calibrate", "compact" (the last compaction's
  // status), "maintenance" (the backoff of builds and compactions):
  // CollectionMaintenance's; "field/<name>": FieldIndexes'. The group is
  // the collection's (its jobs are dropped and awaited at close).
  std::shared_ptr<JobRunner> jobs_;
  std::string jobs_group_;
};

}  // namespace zoom::server

#endif  // ZOOM_SERVER_ENGINE_COLLECTION_CORE_H_
