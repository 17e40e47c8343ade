#include "server/engine/collection_manifest.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "server/engine/key_value_text.h"

namespace zoom::server {

std::string EncodeFieldIndexes(const std::vector<CollectionManifest::FieldIndex>& list) {
  std::vector<std::string> items;
  for (const CollectionManifest::FieldIndex& f : list) {
    items.push_back(absl::StrCat(f.type, ":", absl::BytesToHexString(f.field)));
  }
  return absl::StrJoin(items, ",");
}

absl::Status DecodeFieldIndexes(std::string_view text,
                                std::vector<CollectionManifest::FieldIndex>* out) {
  out->clear();
  if (text.empty()) return absl::OkStatus();
  for (absl::string_view item : absl::StrSplit(absl::string_view(text.data(), text.size()), ',')) {
    const size_t colon = item.find(':');
    const absl::string_view hex = colon == item.npos ? "" : item.substr(colon + 1);
    if (colon == item.npos || colon == 0 || hex.empty() || hex.size() % 2 != 0 ||
        hex.find_first_not_of("0123456789abcdefABCDEF") != hex.npos) {
      return absl::DataLossError("malformed field_indexes entry");
    }
    out->push_back({absl::HexStringToBytes(hex), std::string(item.substr(0, colon))});
  }
  return absl::OkStatus();
}

std::string CollectionManifest::Encode() const {
  std::string out =
      absl::StrCat("version=", kVersion, "\nspace=", space, "\nvectors=", vectors,
                   "\nsnapshot=", snapshot, "\nsnapshot_count=", snapshot_count, "\nseq=", seq,
                   "\n");
  if (trained_points != 0) absl::StrAppend(&out, "trained_points=", trained_points, "\n");
  if (code_error > 0) absl::StrAppend(&out, "code_error=", code_error, "\n");
  if (index_epoch != 0) absl::StrAppend(&out, "index_epoch=", index_epoch, "\n");
  if (!calibration.empty()) {
    absl::StrAppend(&out, "calibration=", calibration, "\ncalibration_epoch=", calibration_epoch,
                    "\n");
  }
  if (pending_space != 0) absl::StrAppend(&out, "pending_space=", pending_space, "\n");
  if (!retired_spaces.empty()) {
    absl::StrAppend(&out, "retired_spaces=", absl::StrJoin(retired_spaces, ","), "\n");
  }
  if (!field_indexes.empty()) {
    absl::StrAppend(&out, "field_indexes=", EncodeFieldIndexes(field_indexes), "\n");
  }
  return out;
}

absl::StatusOr<CollectionManifest> CollectionManifest::Decode(std::string_view text,
                                                              uint32_t default_space) {
  ZOOM_ASSIGN_OR_RETURN(KeyValueText kv, KeyValueText::Parse(text, "collection state"));
  uint32_t version = 0;
  ZOOM_RETURN_IF_ERROR(kv.Number("version", &version));
  if (version > kVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("collection state version ", version, " is not readable by this zoomd"));
  }
  CollectionManifest m;
  m.space = default_space;
  ZOOM_RETURN_IF_ERROR(kv.Number("space", &m.space));
  ZOOM_RETURN_IF_ERROR(kv.Number("seq", &m.seq));
  ZOOM_RETURN_IF_ERROR(kv.Number("pending_space", &m.pending_space));
  ZOOM_RETURN_IF_ERROR(kv.Number("snapshot_count", &m.snapshot_count));
  ZOOM_RETURN_IF_ERROR(kv.Number("trained_points", &m.trained_points));
  ZOOM_RETURN_IF_ERROR(kv.Number("code_error", &m.code_error));
  if (!std::isfinite(m.code_error) || m.code_error < 0) {
    return absl::DataLossError(absl::StrCat("collection state: code_error ", m.code_error,
                                            " is not a finite non-negative number"));
  }
  ZOOM_RETURN_IF_ERROR(kv.Number("index_epoch", &m.index_epoch));
  m.calibration = kv.String("calibration");
  if (!m.calibration.empty() && (!kv.Has("calibration_epoch") ||
                                 !kv.Number("calibration_epoch", &m.calibration_epoch).ok())) {
    m.calibration.clear();  // without its epoch: measured again
  }
  ZOOM_RETURN_IF_ERROR(kv.NumberList("retired_spaces", &m.retired_spaces));
  ZOOM_RETURN_IF_ERROR(DecodeFieldIndexes(kv.String("field_indexes"), &m.field_indexes));
  m.vectors = kv.String("vectors", m.vectors);
  m.snapshot = kv.String("snapshot");
  if (m.vectors.empty() || m.vectors.find('/') != std::string::npos ||
      m.snapshot.find('/') != std::string::npos) {
    return absl::DataLossError("collection state names a file outside its directory");
  }
  return m;
}

std::string CollectionManifest::NextFile(std::string_view prefix, std::string_view extension) {
  return absl::StrCat(absl::string_view(prefix.data(), prefix.size()), "-", seq++,
                      absl::string_view(extension.data(), extension.size()));
}

}  // namespace zoom::server
