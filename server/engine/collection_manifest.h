// File: server/engine/collection_manifest.h
//
// CollectionManifest: which files and record spaces make up a collection
// now (the catalog's state entry, one per collection). The collection is
// its only writer; every change of its files is one new manifest, put in
// RocksDB in one write (LevelDB's VersionEdit, reduced to what a collection
// has): a crash leaves the old manifest or the new one, never a mix.
//
//   space           the record space of the vector file's records
//   vectors         the vector file (the log of stored vectors)
//   snapshot        the index snapshot ("" when none), covering records
//   snapshot_count  [0, snapshot_count) of the vector file
//   trained_points  the live points the current index was trained on (its
//                   k-means and PQ); written only when known (not 0). A
//                   manifest without it (older zoomd) means "at most
//                   snapshot_count" (what the automatic retrain assumes)
//   code_error      the drift retrain's baseline: the mean code error of
//                   the first window of points added after the current
//                   index was built (index::CodeErrorStats); written only
//                   when known (not 0)
//   index_epoch     counts the indexes this collection has made (a build
//                   or a compaction's rebuild installs epoch + 1); written
//                   only when not 0
//   calibration     the recall curve (calibration.h, Calibration::Encode)
//                   measured on index epoch calibration_epoch; an older
//                   epoch's curve is kept (knobs from it beat none) until
//                   the current index is measured. A curve that does not
//                   decode is dropped (measured again), not an error
//   seq             the next file number (names are never reused)
//   pending_space   a compaction's space being written (its records are
//                   garbage if the compaction did not switch)
//   retired_spaces  spaces of replaced segments whose records are dropped
//                   once no reader holds the segment (or at the next open)
//   field_indexes   the declared payload field indexes: "type:hexname"
//                   items, comma-separated (names are any bytes but NUL)
//
// Text: "key=value" lines (key_value_text.h) with version=1. A key unknown
// to a reader is ignored by it: version 1 readers that predate
// retired_spaces leave those records in RocksDB (harmless garbage). The
// version goes up only for a change an older reader would misread.
#ifndef ZOOM_SERVER_ENGINE_COLLECTION_MANIFEST_H_
#define ZOOM_SERVER_ENGINE_COLLECTION_MANIFEST_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace zoom::server {

struct CollectionManifest {
  static constexpr uint32_t kVersion = 1;

  uint32_t space = 0;
  std::string vectors = "vectors-1.zvec";
  std::string snapshot;
  uint64_t snapshot_count = 0;
  uint64_t trained_points = 0;
  double code_error = 0;
  uint64_t index_epoch = 0;
  std::string calibration;  // "" when none
  uint64_t calibration_epoch = 0;
  uint32_t seq = 2;
  uint32_t pending_space = 0;
  std::vector<uint32_t> retired_spaces;
  struct FieldIndex {
    std::string field;
    std::string type;  // "keyword", "integer", ... (payload_index.h)
    bool operator==(const FieldIndex&) const = default;
  };
  std::vector<FieldIndex> field_indexes;

  std::string Encode() const;
  // `default_space`: the space of a manifest without one (the collection's
  // catalog id). FailedPrecondition for a newer version, DataLoss for a
  // malformed text.
  static absl::StatusOr<CollectionManifest> Decode(std::string_view text,
                                                   uint32_t default_space);
  // A file name with the next sequence number ("vectors-7.zvec").
  std::string NextFile(std::string_view prefix, std::string_view extension);
  // The live points the index was trained on: trained_points, else (a
  // manifest of a zoomd before trained_points) snapshot_count when there
  // is a snapshot (the index covers that many records, so it trained on at
  // most that many); 0 without an index.
  uint64_t TrainedPoints() const {
    if (trained_points != 0) return trained_points;
    return snapshot.empty() ? 0 : snapshot_count;
  }

  bool operator==(const CollectionManifest&) const = default;
};

// The field_indexes value: "type:hexname" items, comma-separated (also in
// a snapshot's manifest). DataLoss for a malformed one.
std::string EncodeFieldIndexes(const std::vector<CollectionManifest::FieldIndex>& list);
absl::Status DecodeFieldIndexes(std::string_view text,
                                std::vector<CollectionManifest::FieldIndex>* out);

}  // namespace zoom::server

#endif  // ZOOM_SERVER_ENGINE_COLLECTION_MANIFEST_H_
