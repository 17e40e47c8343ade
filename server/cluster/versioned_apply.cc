#include "server/cluster/versioned_apply.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
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
  // The entry, or when some points hold newer writes, its part for the others.
  LogEntry part;
  const LogEntry* apply = &entry;
  if (newer.size() != ids.size()) {
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
    apply = &part;
  }
  if (entry.op == LogOp::kSetPayload || entry.op == LogOp::kDeletePayload) {
    // Only the points that exist take the version (an edit of an absent
    // one changes nothing).
    std::vector<server::PointData> found;
    ZOOM_RETURN_IF_ERROR(c->Get(newer, /*with_vectors=*/false, /*with_payload=*/false, &found));
    ZOOM_ASSIGN_OR_RETURN(uint64_t changed, ApplyLogEntry(*apply, c));
    std::vector<uint64_t> present;
    for (const server::PointData& p : found) present.push_back(p.id);
    ZOOM_RETURN_IF_ERROR(Record(c, present, version));
    return changed;
  }
  ZOOM_ASSIGN_OR_RETURN(uint64_t changed, ApplyLogEntry(*apply, c));
  ZOOM_RETURN_IF_ERROR(Record(c, newer, version));
  return changed;
}

absl::StatusOr<std::vector<std::string>> StateEntries(const server::Collection& collection,
                                                      const std::vector<uint64_t>& points) {
  std::vector<server::PointData> found;
  ZOOM_RETURN_IF_ERROR(collection.Get(points, /*with_vectors=*/true, /*with_payload=*/true,
                                        &found));
  // Each point at the write version it holds (a tombstone's for one
  // deleted; one with none, absent, is left out: nothing here says it
  // was ever written).
  ZOOM_ASSIGN_OR_RETURN(std::vector<uint64_t> versions, WriteVersionsOf(collection, points));
  std::map<uint64_t, uint64_t> version_of;
  for (size_t i = 0; i < points.size(); ++i) version_of[points[i]] = versions[i];
  // Entries of at most about 512 KiB (under NATS's default max_payload).
  constexpr size_t kCap = size_t{512} << 10;
  const uint32_t dim = static_cast<uint32_t>(collection.config().dim);
  std::vector<std::string> out;
  std::map<uint64_t, std::vector<server::PointData*>> upserts;  // by version
  std::set<uint64_t> present;
  for (server::PointData& p : found) {
    if (!present.insert(p.id).second) continue;
    upserts[version_of[p.id]].push_back(&p);
  }
  for (auto& [version, group] : upserts) {
    LogEntry up;
    up.op = LogOp::kUpsert;
    up.dim = dim;
    up.version = version;
    size_t bytes = UpsertEntryBytes(dim, 0, 0) + 8;
    for (server::PointData* p : group) {
      const size_t extra = p->payload.size() + server::EncodeFields(p->fields).size();
      const size_t one = UpsertEntryBytes(dim, 1, extra) - UpsertEntryBytes(dim, 0, 0);
      if (!up.points.empty() && bytes + one > kCap) {
        out.push_back(EncodeLogEntry(up));
        up.points.clear();
        bytes = UpsertEntryBytes(dim, 0, 0) + 8;
      }
      bytes += one;
      up.points.push_back({p->id, std::move(p->vector), std::move(p->payload),
                           std::move(p->fields)});
    }
    if (!up.points.empty()) out.push_back(EncodeLogEntry(up));
  }
  std::map<uint64_t, std::vector<uint64_t>> deletes;  // by version
  for (uint64_t id : points) {
    if (present.contains(id) || version_of[id] == 0) continue;
    std::vector<uint64_t>& ids = deletes[version_of[id]];
    if (ids.empty() || ids.back() != id) ids.push_back(id);
  }
  constexpr size_t kIdsPerDelete = 32768;
  for (auto& [version, ids] : deletes) {
    for (size_t first = 0; first < ids.size(); first += kIdsPerDelete) {
      LogEntry del;
      del.op = LogOp::kDelete;
      del.version = version;
      del.ids.assign(ids.begin() + first,
                     ids.begin() + std::min(ids.size(), first + kIdsPerDelete));
      out.push_back(EncodeLogEntry(del));
    }
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> WholeStateEntries(const server::Collection& collection) {
  std::vector<uint64_t> ids;
  ZOOM_RETURN_IF_ERROR(collection.metadata_store()->ScanWriteVersions(
      collection.metadata_id(), [&](uint64_t id, uint64_t version) {
        if (version > 0) ids.push_back(id);
        return absl::OkStatus();
      }));
  std::vector<std::string> out;
  constexpr size_t kChunk = 4096;
  for (size_t first = 0; first < ids.size(); first += kChunk) {
    const std::vector<uint64_t> chunk(ids.begin() + first,
                                      ids.begin() + std::min(ids.size(), first + kChunk));
    ZOOM_ASSIGN_OR_RETURN(std::vector<std::string> part, StateEntries(collection, chunk));
    for (std::string& e : part) out.push_back(std::move(e));
  }
  return out;
}

}  // namespace zoom::cluster
