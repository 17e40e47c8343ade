// File: server/cluster/log_entry.h
//
// LogEntry: one write of a clustered collection's shard, as published on
// the shard's JetStream subject and applied, in stream order, by every
// replica of the shard (ApplyLogEntry). One entry is atomic on a replica;
// a client's write larger than a message becomes several entries.
//
// Encoding, version 1 (little-endian; golden file
// tests/data/golden/log_entry_v1_*.zlog, written by a Python script from
// this description):
//
//   "ZLOG"  u16 version (1)  u8 op  u8 0
//   version 2 only: u64 write version (LogEntry::version, not 0)
//   op 1 upsert:          u32 dim, u32 n, n x {u64 id, dim x f32,
//                         u32 len, payload bytes, u32 len, fields bytes
//                         (payload_fields.h's EncodeFields; 0: none)}
//   op 2 delete:          u32 n, n x u64 id
//   op 3 set_payload:     u8 overwrite, u32 n, n x u64 id, u32 len, fields
//   op 4 delete_payload:  u32 n, n x u64 id, u32 k, k x {u32 len, key}
//   op 5 create_field_index: u8 type (FieldIndexType), u32 len, field
//   op 6 delete_field_index: u32 len, field
//   u32 CRC-32C of everything before it
//
// An entry with no write version is written as version 1 (what every
// zoomd reads); one with a version (a copy published by a log repair) as
// version 2 (golden: tests/data/golden/log_entry_v2_delete.zlog).
//
// Decode refuses what it cannot trust: DataLoss for a wrong magic, CRC or
// length (never reads past the bytes, never allocates more than they
// could hold), FailedPrecondition for a newer version or an unknown op
// (written by a newer zoomd: the replica stops rather than skip it).
#ifndef ZOOM_SERVER_CLUSTER_LOG_ENTRY_H_
#define ZOOM_SERVER_CLUSTER_LOG_ENTRY_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/engine/collection.h"
#include "server/engine/payload_fields.h"
#include "server/engine/payload_index.h"

namespace zoom::cluster {

enum class LogOp : uint8_t {
  kUpsert = 1,
  kDelete = 2,
  kSetPayload = 3,
  kDeletePayload = 4,
  kCreateFieldIndex = 5,
  kDeleteFieldIndex = 6,
};
const char* LogOpName(LogOp op);

struct LogPoint {
  uint64_t id = 0;
  std::vector<float> vector;
  std::string payload;
  server::PayloadFields fields;
  bool operator==(const LogPoint&) const = default;
};

struct LogEntry {
  static constexpr uint16_t kVersion = 2;

  LogOp op = LogOp::kUpsert;
  // The write version its replicas give the points it writes
  // (versioned_apply.h): 0 for a client's write (the replica derives it
  // from the log); a copy published again by a log repair carries the
  // version its original was applied at.
  uint64_t version = 0;
  uint32_t dim = 0;                 // upsert
  std::vector<LogPoint> points;     // upsert
  std::vector<uint64_t> ids;        // delete, set_payload, delete_payload
  server::PayloadFields fields;     // set_payload
  bool overwrite = false;           // set_payload
  std::vector<std::string> keys;    // delete_payload (empty: every field)
  std::string field;                // create/delete_field_index
  server::FieldIndexType index_type = server::FieldIndexType::kKeyword;

  bool operator==(const LogEntry&) const = default;
};

std::string EncodeLogEntry(const LogEntry& entry);
absl::StatusOr<LogEntry> DecodeLogEntry(std::string_view bytes);

// The encoded size of an upsert of `points` points of `dim` floats with
// `extra_bytes` of payloads and fields together: what a writer splits a
// batch by (a NATS message has a maximum size).
size_t UpsertEntryBytes(uint32_t dim, size_t points, size_t extra_bytes);

// Applies the entry to the collection (its shard's replica) through the
// collection's own writes: their statuses unchanged. Returns the points
// it changed (upsert: taken; delete: deleted; set/delete payload: changed;
// field indexes: 0).
absl::StatusOr<uint64_t> ApplyLogEntry(const LogEntry& entry, server::Collection* collection);

}  // namespace zoom::cluster

#endif  // ZOOM_SERVER_CLUSTER_LOG_ENTRY_H_
