// File: server/engine/field_edits.h
//
// A point's field edits (versioned_apply.h): the payload edits
// (SetPayload, DeletePayload) newer than the point's last full write
// (upsert or delete: its write version), kept per field name with the
// version that set or removed it, and the version of the newest edit that
// replaced every field (SetPayload with overwrite, DeletePayload of every
// field) as `reset`. With them a replica evaluates its point as if every
// write had come in version order, whatever order they came in: the full
// write, then (from the reset on, if any) each field's newest edit. An
// edit of a point that is absent here is kept too: an older upsert of it
// may still come (a copy a log repair published), and then takes it.
//
// Encoding, version 1 (little-endian; kept after the point's write
// version in the MetadataStore, and in snapshots; golden test in
// tests/cluster/versioned_apply_test.cc):
//
//   "ZE" u8 version=1  u64 reset  u32 nkeys
//   nkeys x { u16 name_len, name, u64 version, u8 set (0 removed, 1 set) }
//   u32 fields_len, fields_len bytes: EncodeFields of the set ones' values
//
// names in strictly increasing byte order. No edits encode to "".
#ifndef ZOOM_SERVER_ENGINE_FIELD_EDITS_H_
#define ZOOM_SERVER_ENGINE_FIELD_EDITS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "server/engine/payload_fields.h"

namespace zoom::server {

struct FieldEdit {
  uint64_t version = 0;
  std::optional<FieldValue> value;  // nullopt: removed
  bool operator==(const FieldEdit&) const = default;
};

struct FieldEdits {
  uint64_t reset = 0;  // the newest edit that replaced every field (0: none)
  std::map<std::string, FieldEdit, std::less<>> keys;

  bool empty() const { return reset == 0 && keys.empty(); }
  // The version below which field `name` takes no edit.
  uint64_t FloorOf(std::string_view name) const;
  // Forgets what a full write at `version` supersedes (edits at or below it).
  void Prune(uint64_t version);
  // `base` (the full write's fields) with the edits over it: from nothing
  // after a reset.
  PayloadFields Over(const PayloadFields& base) const;
  bool operator==(const FieldEdits&) const = default;
};

std::string EncodeFieldEdits(const FieldEdits& edits);
// DataLoss for bytes that are not an encoding (the store's checksums make
// that damage, not a format question).
absl::StatusOr<FieldEdits> DecodeFieldEdits(std::string_view bytes);

}  // namespace zoom::server

#endif  // ZOOM_SERVER_ENGINE_FIELD_EDITS_H_
