// File: server/engine/collection.h
//
// Collection: one named set of points (uint64 external id, vector, optional
// payload) made durable and searchable. A facade: its own methods are the
// writes, the reads, Info, snapshots and the drop; the rest is its parts'
// (each its own class, reached as collection.maintenance().StartBuild(),
// collection.field_indexes().Create(...), collection.core().dir()):
//
//   CollectionCore         what the parts share (collection_core.h): identity
//                          (dir, id, config, options), the manifest and its
//                          one writer, the serving and retired segments, the
//                          dropped flag, the log position, the job keys, and
//                          the collection's three locks; its const face is
//                          core()
//   CollectionMaintenance  background work on the JobRunner and the policy
//                          that starts it (collection_maintenance.h): index
//                          builds, the automatic builds and retrains, the
//                          retry backoff, calibration runs, compaction, the
//                          retired segments' release, StopBackgroundWork;
//                          owns the index state and its counters
//   CollectionKnobs        the recall curve and the knobs of a search's
//                          target (collection_knobs.h, private: the reads
//                          use it, the maintenance and Open install curves)
//   FieldIndexes           the payload index declarations and their builds
//                          (collection_field_indexes.h)
//   CollectionConfig       what it is (collection_config.h)
//   CollectionManifest     which files and record spaces make it up now
//                          (collection_manifest.h)
//   Segment                the serving vector file + SearchEngine + IdTracker
//                          + payload indexes, and every operation on them:
//                          writes, Search with its join, Match, Get, Scroll
//                          (segment.h); replaced as a whole by compaction,
//                          retired without I/O on a reader's thread
//   Compactor              the copy and catch-up of a compaction (compactor.h)
//
// The parts own their state; the locks are the core's (and so the
// collection's, three in all; no part has one of its own): compact_mu_ >
// write_mu_ > segment_mu_ (see collection_core.h).
//
// Why this cut: the shared state and its locks sit in one class (the core)
// so that the lock order is declared once and every part's annotations name
// the same mutexes (core_.write_mu_: the analysis checks each part against
// them). The recall curve is a part of its own, not the maintenance's,
// because every search reads it and nothing else of the maintenance. The
// one call across parts under the write lock, a write's automatic-policy
// check (CollectionMaintenance::AfterWrite), asserts the lock at run time:
// the analysis cannot see that the writer's core_ and the maintenance's are
// one object. UnindexedField stays a read here (const, like Count).
//
// Files by concern: collection.cc (open, create, close, Info, the drop),
// collection_write.cc (writes, the log position), collection_read.cc (reads;
// CollectionKnobs), collection_snapshot.cc (WriteSnapshot, Restore),
// collection_core.cc, collection_maintenance.cc (builds, policy,
// calibration), collection_compaction.cc, collection_field_indexes.cc.
//
// Ids: a point's vector lives at a dense InternalId in the vector file.
// Overwriting a point appends its new vector and kills the old record, so
// the file only grows until maintenance().Compact() rewrites it without the
// dead records.
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

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "server/engine/collection_config.h"
#include "server/engine/collection_core.h"
#include "server/engine/collection_field_indexes.h"
#include "server/engine/collection_knobs.h"
#include "server/engine/collection_maintenance.h"
#include "server/engine/collection_types.h"
#include "server/engine/filter.h"
#include "server/engine/payload_fields.h"
#include "server/engine/query.h"
#include "server/engine/segment.h"
#include "storage/metadata_store.h"
#include "storage/snapshot_archive.h"

namespace zoom::server {

// What Collection::Upsert refuses (InvalidArgument naming the point):
// none, a vector with NaN/Inf or a magnitude the metric cannot take, fields
// ValidateFields refuses, a uint8 collection's component outside 0..255 or
// not an integer. Each vector holds config.dim floats. A cluster router
// checks a write with it before the write enters the log: every replica
// would refuse it alike.
absl::Status ValidatePoints(const CollectionConfig& config, absl::Span<const PointRef> points);

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
  // Stops its background work (a running payload index build, build or
  // calibration at its next step) and waits for it; saves an index
  // snapshot if points were indexed since the last one.
  ~Collection();

  // What it is (its name: config().name). Its directory, catalog id and
  // cache: core().
  const CollectionConfig& config() const { return core_.config(); }

  // ---- Writes (collection_write.cc)

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

  // Replication: the position in a replicated log (a cluster replica's
  // stream sequence) of the last write applied to this collection; 0 when
  // none. The replica, the collection's one writer then, calls
  // SetLogPosition after each write it applies. Kept in the MetadataStore
  // (MetadataStore::PutLogPosition: durable with the next synced write) and
  // carried by snapshots (Restore sets it). A crash between a write and its
  // SetLogPosition applies that one write again at restart: each write kind
  // (Upsert, Delete, SetPayload, DeletePayload, DeleteByFilter, a field
  // index) is idempotent alone.
  // The replica's log version at the position (opaque here: its write
  // versions' clock, server/cluster/shard_replica.h) is kept and carried
  // with it, as are the write versions it keeps per point
  // (MetadataStore::PutWriteVersions, in this collection's id).
  uint64_t log_position() const {
    return core_.log_position_.load(std::memory_order_acquire);
  }
  uint64_t log_version() const { return core_.log_version_.load(std::memory_order_acquire); }
  absl::Status SetLogPosition(uint64_t position, uint64_t version = 0);
  // Where the collection's records live (its store and id in it): a
  // cluster replica keeps its retained log entries beside them
  // (server/cluster/retained_log.h), dropped with the collection.
  storage::MetadataStore* metadata_store() const { return core_.metadata_; }
  uint32_t metadata_id() const { return core_.id(); }

  // ---- Reads (collection_read.cc): the serving segment answers them

  // The points of `ids` that exist, in request order (an id given twice is
  // answered twice, read once). Each point's vector, payload and fields are
  // those of one write, under concurrent writes too (a point deleted during
  // the call may be left out). ResourceExhausted when the answer's vectors
  // and payloads would pass `max_answer_bytes` (found before it is built).
  absl::Status Get(absl::Span<const uint64_t> ids, bool with_vectors, bool with_payload,
                   std::vector<PointData>* out, uint64_t max_answer_bytes = UINT64_MAX) const;
  // One page of the live points passing `filter` (null: all), ascending
  // by id: at most `limit` with id >= `offset`, into *out (as Get's, within
  // max_answer_bytes); *next is the first id of the next page, if any.
  absl::Status Scroll(const Filter* filter, uint64_t offset, uint32_t limit, bool with_vectors,
                      bool with_payload, std::vector<PointData>* out,
                      std::optional<uint64_t>* next, bool* scan,
                      uint64_t max_answer_bytes = UINT64_MAX) const;
  // How many live points pass `filter` (null or empty: all), and whether
  // it was evaluated from the stored payloads (a scan).
  using FilterCount = server::FilterCount;
  absl::StatusOr<FilterCount> Count(const Filter* filter) const;
  // A field `filter` names that has no ready payload index now (the first
  // found), "" if every one has: what a scan's warning names. (A read of
  // the serving segment, so here and const, not FieldIndexes'.)
  std::string UnindexedField(const Filter& filter) const;

  // Up to k live points, best first, with external ids (and payloads and
  // vectors when asked), and the query's stats. The query is validated by
  // the engine (SearchEngine::Search): its messages come back unchanged.
  // Without an index (or with exact) the search is brute force
  // (result->stats.exact). The knobs a request leaves 0 come from its
  // target (CollectionKnobs::EngineParams).
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

  // The collection's state now: its core's, its maintenance's and its
  // recall curve's.
  CollectionInfo Info() const;

  // Writes a consistent snapshot archive to `path` while the collection
  // takes writes: the write lock is held only to fix the point (the
  // committed record count, the live records and a RocksDB snapshot for
  // their payloads, a hard link to the index snapshot); the copy runs
  // without it. Restored, it answers as this collection did at that point.
  // Entries: manifest, config, vectors (the records' raw bytes), records
  // (internal id, external id, payload of each live one), fields (typed
  // payloads, when any), versions (a cluster replica's write versions,
  // when any), index (when there is one).
  struct SnapshotStats {
    uint64_t records = 0, points = 0, bytes = 0;
    std::string sha256;
  };
  absl::StatusOr<SnapshotStats> WriteSnapshot(const std::string& path) const;

  // Before the catalog drops it: asks a running compaction to stop and
  // waits for it (or a write) to end; afterwards writes, builds and
  // compactions answer NotFound and no state or snapshot is written.
  // MarkDropped(false) undoes it (the drop failed).
  void MarkDropped(bool dropped = true);

  // ---- The parts

  // Identity, the serving engine, the record spaces (read-only).
  const CollectionCore& core() const { return core_; }
  // Builds, calibration, compaction, the retired segments, closing.
  CollectionMaintenance& maintenance() { return maintenance_; }
  // Payload index declarations and builds.
  FieldIndexes& field_indexes() { return field_indexes_; }

 private:
  Collection(const std::string& dir, storage::MetadataStore* metadata, uint32_t id,
             const CollectionConfig& config, const CollectionOptions& options);

  // Declared first: the parts refer to it (and to the knobs) until they go.
  CollectionCore core_;
  CollectionKnobs knobs_;
  CollectionMaintenance maintenance_;
  FieldIndexes field_indexes_;
};

}  // namespace zoom::server

#endif  // ZOOM_SERVER_ENGINE_COLLECTION_H_
