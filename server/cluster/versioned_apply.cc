#include "server/cluster/versioned_apply.h"

#include <utility>

#include "common/status_macros.h"

namespace zoom::cluster {
namespace {

absl::Status Record(server::Collection* c, const std::vector<uint64_t>& ids, uint64_t version) {
  std::vector<std::pair<uint64_t, uint64_t>> put;
  put.reserve(ids.size());
  for (uint64_t id : ids) put.push_back({id, version});
  return c->metadata_store()->PutWriteVersions(c->metadata_id(), put);
}

}  // namespace

absl::StatusOr<std::vector<uint64_t>> WriteVersionsOf(const server::Collection& collection,
                                                      const std::vector<uint64_t>& ids) {
  std::vector<uint64_t> out;
  ZOOM_RETURN_IF_ERROR(
      collection.metadata_store()->GetWriteVersions(collection.metadata_id(), ids, &out));
  return out;
}

absl::StatusOr<uint64_t> ApplyVersioned(const LogEntry& entry, uint64_t version,
                                        server::Collection* c) {
  if (version == 0 || entry.op == LogOp::kCreateFieldIndex ||
      entry.op == LogOp::kDeleteFieldIndex) {
    return ApplyLogEntry(entry, c);
  }
  std::vector<uint64_t> ids;
  if (entry.op == LogOp::kUpsert) {
    ids.reserve(entry.points.size());
    for (const LogPoint& p : entry.points) ids.push_back(p.id);
  } else {
    ids = entry.ids;
  }
  ZOOM_ASSIGN_OR_RETURN(std::vector<uint64_t> kept, WriteVersionsOf(*c, ids));
  std::vector<uint64_t> newer;  // the ids this entry may write
  newer.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    if (kept[i] <= version) newer.push_back(ids[i]);
  }
  if (newer.empty()) return 0;
  if (newer.size() == ids.size()) {
    // The common case: nothing newer was applied to any of them.
    if (entry.op == LogOp::kSetPayload || entry.op == LogOp::kDeletePayload) {
      std::vector<server::PointData> found;
      ZOOM_RETURN_IF_ERROR(c->Get(ids, /*with_vectors=*/false, /*with_payload=*/false, &found));
      ZOOM_ASSIGN_OR_RETURN(uint64_t changed, ApplyLogEntry(entry, c));
      std::vector<uint64_t> present;
      for (const server::PointData& p : found) present.push_back(p.id);
      ZOOM_RETURN_IF_ERROR(Record(c, present, version));
      return changed;
    }
    ZOOM_ASSIGN_OR_RETURN(uint64_t changed, ApplyLogEntry(entry, c));
    ZOOM_RETURN_IF_ERROR(Record(c, ids, version));
    return changed;
  }
  LogEntry part;
  part.op = entry.op;
  part.dim = entry.dim;
  part.fields = entry.fields;
  part.overwrite = entry.overwrite;
  part.keys = entry.keys;
  if (entry.op == LogOp::kUpsert) {
    for (size_t i = 0; i < ids.size(); ++i) {
      if (kept[i] <= version) part.points.push_back(entry.points[i]);
    }
  } else {
    part.ids = newer;
  }
  return ApplyVersioned(part, version, c);
}

}  // namespace zoom::cluster
