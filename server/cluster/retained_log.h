// File: server/cluster/retained_log.h
//
// RetainedLog: what a shard replica applied, entry by entry, kept beside
// its collection's records (MetadataStore 't' keys) so that entries the
// shared log loses after acknowledging them can be published again
// (log_repair.h). JetStream on nats-server 2.9 syncs its files lazily: a
// coordinated power failure takes back an acknowledged tail, and the
// stream then hands the same sequences to new entries. The replicas, which
// sync before they acknowledge (write concern majority), are where those
// writes survive.
//
// Per stream sequence, durably: the entry's message id (the fingerprint a
// replica checks the log against: the entry at its position must still
// carry the id it applied) and the ids of the points it wrote; the entry
// itself only for writes that name no points (field indexes). In memory,
// the newest entries' bytes (up to memory_bytes): published again as they
// were. An entry whose bytes are gone (older, or the node restarted) is
// published again as the current state of its points, read from the
// collection (log_repair.h).
//
// Record encoding, version 2 (golden: tests/data/golden/retained_log_v2_*.hex;
// version 1, without the two versions, is still read: both 0):
//   u8 version (2)  u8 id length  id bytes
//   u64 the entry's write version  u64 the replica's log version after it
//   (shard_replica.h; little-endian)  u8 kind
//   kind 1 (points): u32 n, n x u64 point id (little-endian)
//   kind 2 (entry):  the encoded LogEntry (a ZLOG entry: its own magic, CRC)
//
// Retention: the newest records whose bytes sum to at most `max_bytes`
// (the newest one always); an Append past it trims the oldest down to 7/8
// of it. covered_from() is the
// sequence after which every entry the replica applied is retained (0 from
// the start; the position it opened at when it holds no record, as after
// a snapshot restore; the last trimmed sequence after a trim), kept as the
// record at sequence 0 (u64 little-endian, no version: sequence 0 is never
// a stream's). A fork at or before it cannot be repaired from here (the
// replica restores a peer's snapshot).
//
// Durability: written before the entry is applied, without syncing (the
// apply's synced write makes it durable); records past the collection's
// log position after a crash are dropped at Open.
//
// Thread safety: one writer (the replica's thread); no concurrent reads.
#ifndef ZOOM_SERVER_CLUSTER_RETAINED_LOG_H_
#define ZOOM_SERVER_CLUSTER_RETAINED_LOG_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/cluster/log_entry.h"
#include "storage/metadata_store.h"

namespace zoom::cluster {

struct RetainedEntry {
  uint64_t sequence = 0;
  std::string id;                   // the message id ("" when the publisher gave none)
  std::optional<std::string> data;  // the encoded LogEntry, when kept
  std::vector<uint64_t> points;     // the points it wrote (when its bytes are not kept)
  uint64_t version = 0;             // its write version (0: not known)
  uint64_t log_version = 0;         // the replica's log version after it (0: not known)
};

// The durable record of `entry` (its bytes `data`): the points it wrote, or
// for an entry that names none (a field index), its bytes.
std::string EncodeRetainedRecord(std::string_view id, const LogEntry& entry, std::string_view data,
                                 uint64_t version = 0, uint64_t log_version = 0);
// DataLoss for a record that is not one (short, wrong version or kind).
absl::StatusOr<RetainedEntry> DecodeRetainedRecord(uint64_t sequence, std::string_view record);

class RetainedLog {
 public:
  static constexpr uint64_t kDefaultMaxBytes = uint64_t{64} << 20;
  static constexpr uint64_t kDefaultMemoryBytes = uint64_t{64} << 20;

  // Reads the records of collection `cid` in `store` (sequences and ids;
  // the rest is read back when asked), dropping those past `position`.
  static absl::StatusOr<std::unique_ptr<RetainedLog>> Open(
      storage::MetadataStore* store, uint32_t cid, uint64_t position,
      uint64_t max_bytes = kDefaultMaxBytes, uint64_t memory_bytes = kDefaultMemoryBytes);

  // Keeps `entry` (decoded from `data`) at `sequence`, applied at write
  // version `version` with the replica's log version `log_version` after it.
  absl::Status Append(uint64_t sequence, std::string_view id, const LogEntry& entry,
                      std::string_view data, uint64_t version = 0, uint64_t log_version = 0);
  // The id of the record at `sequence`; nullopt when none is retained.
  std::optional<std::string> IdAt(uint64_t sequence) const;
  // The replica's log version after the record at `sequence`; nullopt when
  // none is retained or its record does not say (version 1).
  std::optional<uint64_t> LogVersionAt(uint64_t sequence) const;
  // The retained sequences, ascending.
  std::vector<uint64_t> Sequences() const;
  // The records after `sequence`, ascending, with their bytes where kept.
  absl::StatusOr<std::vector<RetainedEntry>> After(uint64_t sequence) const;
  // Drops the records after `sequence` (a replica rewound to it).
  absl::Status DropAfter(uint64_t sequence);
  uint64_t covered_from() const { return covered_from_; }
  uint64_t bytes() const { return bytes_; }
  size_t size() const { return index_.size(); }

 private:
  RetainedLog(storage::MetadataStore* store, uint32_t cid, uint64_t max_bytes,
              uint64_t memory_bytes)
      : store_(store), cid_(cid), max_bytes_(max_bytes), memory_bytes_(memory_bytes) {}
  struct Slot {
    std::string id;
    uint64_t bytes = 0;
    uint64_t log_version = 0;
  };
  storage::MetadataStore* store_;
  uint32_t cid_;
  uint64_t max_bytes_;
  uint64_t memory_bytes_;
  absl::Status PutCoveredFrom(uint64_t sequence);

  std::map<uint64_t, Slot> index_;
  std::map<uint64_t, std::string> recent_;  // the newest entries' bytes
  uint64_t recent_bytes_ = 0;
  uint64_t bytes_ = 0;
  uint64_t covered_from_ = 0;
};

}  // namespace zoom::cluster

#endif  // ZOOM_SERVER_CLUSTER_RETAINED_LOG_H_
