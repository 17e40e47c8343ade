// File: storage/metadata_store.h
//
// MetadataStore: everything of the server that is not a vector or an index,
// in one embedded RocksDB under the data directory (the only user of
// RocksDB). It holds
//
//   * the catalog: collection name -> (collection id, config bytes, state
//     bytes). Config and state are opaque here (the engine encodes them).
//   * per collection, the record map: InternalId -> external id, and the
//     payloads. A record without an entry is dead (deleted, overwritten, or
//     a vector-file tail that was never acknowledged).
//
// Keys (big-endian numbers, so a collection's records scan in id order):
//   'c' name             -> u32 collection id | config bytes
//   's' u32 cid          -> state bytes
//   'n'                  -> u32 next collection id
//   'r' u32 cid u32 id   -> u64 external id
//   'p' u32 cid u32 id   -> payload bytes (only when non-empty)
//   'f' u32 cid u64 ext  -> typed payload fields (encoded by the engine;
//                           only when non-empty), keyed by the collection
//                           and the point's external id: a compaction,
//                           which moves records to a new space, leaves
//                           them where they are
//   'l' u32 cid          -> u64 (little-endian) log position: the replicated
//                           log's sequence of the collection's last applied
//                           write (cluster replicas; absent: 0), then
//                           optionally u64 the log version at it (16 bytes;
//                           8: version 0)
//   'w' u32 cid u64 ext  -> u64 (little-endian) write version: the version
//                           of the last write a cluster replica applied to
//                           the point (an upsert, payload edit or delete:
//                           kept after the delete as its tombstone)
//   't' u32 cid u64 seq  -> a replica's retained log entry at stream
//                           sequence seq (opaque: server/cluster/retained_log.h)
//   'v'                  -> u32 schema version (3; an older store is upgraded at open)
//
// The write path of the server is: append the vectors to the VectorStore
// (durable), then Commit() the records in one WriteBatch (durable when
// `sync`). The vector file is thus the log of vector operations and the
// record map its commit record: on restart the records without an entry are
// the unacknowledged tail and are never served.
//
// Thread safety: all methods are safe from many threads (RocksDB's own
// guarantees); callers serialise writes per collection.
#ifndef ZOOM_STORAGE_METADATA_STORE_H_
#define ZOOM_STORAGE_METADATA_STORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/ids.h"

namespace rocksdb {
class DB;
class Snapshot;
}

namespace zoom::storage {

struct MetadataOptions {
  // Sync the write-ahead log on every Commit (the ack means durable against
  // power loss). When false the WAL is written to the OS on every Commit
  // (survives a process crash) and synced by SyncWal().
  bool sync = true;
};

struct CollectionRecord {
  std::string name;
  uint32_t id = 0;
  std::string config;  // opaque
  std::string state;   // opaque, may be empty
};

struct RecordWrite {
  InternalId id;
  uint64_t external_id;
  std::string_view payload;  // empty: none
};

// A point's typed payload fields, by external id; empty bytes erase them.
struct FieldsWrite {
  uint64_t external_id;
  std::string_view fields;
};

// A consistent view of the store at one moment: reads through it see
// nothing written after it was taken. Release by destruction (before the
// store).
class MetadataSnapshot {
 public:
  ~MetadataSnapshot();
  MetadataSnapshot(const MetadataSnapshot&) = delete;
  MetadataSnapshot& operator=(const MetadataSnapshot&) = delete;

 private:
  friend class MetadataStore;
  MetadataSnapshot(rocksdb::DB* db, const rocksdb::Snapshot* snap) : db_(db), snap_(snap) {}
  rocksdb::DB* db_;
  const rocksdb::Snapshot* snap_;
};

class MetadataStore {
 public:
  // 2: typed fields ('f'); 3: write versions ('w'); 4: a write version may
  // carry its point's field edits after it.
  static constexpr uint32_t kSchemaVersion = 4;

  // Opens (creating if missing) the database in `dir`. FailedPrecondition
  // for a database of a newer schema; the RocksDB error otherwise.
  static absl::StatusOr<std::unique_ptr<MetadataStore>> Open(const std::string& dir,
                                                             const MetadataOptions& options);
  ~MetadataStore();

  // Catalog.
  absl::StatusOr<std::vector<CollectionRecord>> ListCollections() const;
  // Allocates a collection id and stores the entry. AlreadyExists if taken.
  absl::StatusOr<uint32_t> CreateCollection(std::string_view name, std::string_view config);
  // Removes the entry, its state and all its records, payloads and fields
  // at once.
  absl::Status DropCollection(std::string_view name, uint32_t id);
  absl::Status PutState(uint32_t id, std::string_view state);
  // A fresh id for a record space (compaction writes its new record map
  // under one, then switches the collection's state to it).
  absl::StatusOr<uint32_t> AllocateId();
  // Erases every record and payload of record space `space`.
  absl::Status DropRecords(uint32_t space);

  // Record spaces: a collection's records live under a space id, at first
  // its collection id. Writes `writes` and erases `erased` (record and
  // payload) in one atomic batch, with `fields` of collection `cid` (put,
  // or erased when empty) in the same batch.
  absl::Status Commit(uint32_t id, absl::Span<const RecordWrite> writes,
                      absl::Span<const InternalId> erased, uint32_t cid = 0,
                      absl::Span<const FieldsWrite> fields = {});
  // Only typed payload fields of collection `cid`, in one atomic batch.
  absl::Status CommitFields(uint32_t cid, absl::Span<const FieldsWrite> fields);
  // The fields of `external_ids` of collection `cid` ("" when none), in
  // order; as of `at` when given.
  absl::Status GetFields(uint32_t cid, absl::Span<const uint64_t> external_ids,
                         std::vector<std::string>* out,
                         const MetadataSnapshot* at = nullptr) const;
  // Calls fn(external id, fields) for every point of collection `cid` with
  // fields, in ascending external id; as of `at` when given.
  absl::Status ScanFields(uint32_t cid,
                          const std::function<absl::Status(uint64_t, std::string_view)>& fn,
                          const MetadataSnapshot* at = nullptr) const;
  // The same from external id `from` on, for at most `max_entries`
  // points: *more tells whether points are left, the first of them *next.
  absl::Status ScanFields(uint32_t cid, uint64_t from, uint64_t max_entries,
                          const std::function<absl::Status(uint64_t, std::string_view)>& fn,
                          uint64_t* next, bool* more, const MetadataSnapshot* at = nullptr) const;
  // Calls fn(internal id, external id) for every record of collection `id`
  // in ascending internal id; stops at fn's first error.
  absl::Status ScanRecords(
      uint32_t id, const std::function<absl::Status(InternalId, uint64_t)>& fn) const;
  // The payloads of `ids` (empty string when none), in order; as of `at`
  // when given.
  absl::Status GetPayloads(uint32_t id, absl::Span<const InternalId> ids,
                           std::vector<std::string>* out,
                           const MetadataSnapshot* at = nullptr) const;
  std::unique_ptr<MetadataSnapshot> TakeSnapshot() const;
  // In one atomic batch: the catalog entry `from` (id `from_id`) takes the
  // name `to`; the collection `to` held before (id `old_id`, 0 = none) is
  // dropped with its state, records and fields (a restore replacing a
  // collection).
  absl::Status ReplaceCollection(std::string_view from, std::string_view to, uint32_t from_id,
                                 uint32_t old_id);
  // The log position of collection `cid` (0 when never written). Written
  // without syncing the WAL: a later synced write (or SyncWal) makes it
  // durable with everything before it, so a power loss can take back only
  // positions whose writes it takes back too, and the last one.
  // `version` is the replica's log version at the position (opaque here:
  // server/cluster/shard_replica.h), read back by GetLogVersion.
  absl::Status PutLogPosition(uint32_t cid, uint64_t position, uint64_t version = 0);
  absl::StatusOr<uint64_t> GetLogPosition(uint32_t cid) const;
  absl::StatusOr<uint64_t> GetLogVersion(uint32_t cid) const;
  // Write versions of collection `cid` (a cluster replica's, per point:
  // server/cluster/versioned_apply.h): put in one batch, written like the
  // log position (durable with the next synced write); dropped with the
  // collection; carried by its snapshots.
  absl::Status PutWriteVersions(uint32_t cid,
                                absl::Span<const std::pair<uint64_t, uint64_t>> versions);
  // (A point's field edits, if it had any, are dropped.)
  // The versions of `external_ids`, in order (0: none kept).
  absl::Status GetWriteVersions(uint32_t cid, absl::Span<const uint64_t> external_ids,
                                std::vector<uint64_t>* out) const;
  // Calls fn(external id, version) in ascending external id; as of `at`
  // when given; stops at fn's first error.
  absl::Status ScanWriteVersions(uint32_t cid,
                                 const std::function<absl::Status(uint64_t, uint64_t)>& fn,
                                 const MetadataSnapshot* at = nullptr) const;
  // The same records with the point's field edits beside the version: an
  // opaque record (server/cluster/field_edits.h), "" for none.
  struct PointWrite {
    uint64_t id = 0;
    uint64_t version = 0;
    std::string edits;
  };
  absl::Status PutWriteRecords(uint32_t cid, absl::Span<const PointWrite> records);
  // In the order of `external_ids` (version 0, no edits: none kept).
  absl::Status GetWriteRecords(uint32_t cid, absl::Span<const uint64_t> external_ids,
                               std::vector<PointWrite>* out) const;
  // Every record (edits "" when none), in ascending external id.
  absl::Status ScanWriteRecords(uint32_t cid,
                                const std::function<absl::Status(const PointWrite&)>& fn,
                                const MetadataSnapshot* at = nullptr) const;
  // Only the records that carry field edits, in ascending external id.
  absl::Status ScanFieldEdits(uint32_t cid, const std::function<absl::Status(const PointWrite&)>& fn,
                              const MetadataSnapshot* at = nullptr) const;
  // A cluster replica's retained log entries (RetainedLog): an opaque
  // record per stream sequence of collection `cid`. Written like the log
  // position (durable with the next synced write); dropped with the
  // collection.
  absl::Status PutLogRecord(uint32_t cid, uint64_t sequence, std::string_view record);
  // Calls fn(sequence, record) in ascending sequence from `from` on; stops
  // at fn's first error.
  absl::Status ScanLogRecords(
      uint32_t cid, uint64_t from,
      const std::function<absl::Status(uint64_t, std::string_view)>& fn) const;
  // Removes the records with sequences in [from, to).
  absl::Status DeleteLogRecords(uint32_t cid, uint64_t from, uint64_t to);
  // Makes every Commit so far durable (for sync = false).
  absl::Status SyncWal();
  // Reads every table file and checks every block's checksum (RocksDB's
  // VerifyChecksum: a full read of the store). DataLoss for a damaged one.
  absl::Status VerifyChecksums() const;

  // Bytes of the database files (SST + WAL), approximately.
  uint64_t ApproximateBytes() const;

 private:
  MetadataStore() = default;
  // The values of `keys` ("" for a missing one), as of `at` when given.
  absl::Status MultiGetValues(const std::vector<std::string>& keys,
                              std::vector<std::string>* out, const MetadataSnapshot* at,
                              std::string_view what) const;
  std::unique_ptr<rocksdb::DB> db_;
  MetadataOptions options_;
  std::string dir_;
};

}  // namespace zoom::storage

#endif  // ZOOM_STORAGE_METADATA_STORE_H_
