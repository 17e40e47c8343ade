#include "server/cluster/versioned_apply.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>

#include "common/crc32c.h"
#include "common/status_macros.h"
#include "server/engine/field_edits.h"
#include "storage/metadata_store.h"

namespace zoom::cluster {

using PointWrite = storage::MetadataStore::PointWrite;
using server::DecodeFieldEdits;
using server::EncodeFieldEdits;
using server::FieldEdit;
using server::FieldEdits;

absl::StatusOr<std::vector<uint64_t>> WriteVersionsOf(const server::Collection& collection,
                                                      const std::vector<uint64_t>& ids) {
  std::vector<uint64_t> out;
  ZOOM_RETURN_IF_ERROR(
      collection.metadata_store()->GetWriteVersions(collection.metadata_id(), ids, &out));
  return out;
}

namespace {

uint64_t Mix(uint64_t x) {  // splitmix64's finalizer
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ULL;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBULL;
  x ^= x >> 31;
  return x;
}

// digest ^= each written point's old record hash and its new one (the
// first old and the last new of an id written twice).
void UpdateDigest(const std::vector<uint64_t>& ids, const std::vector<PointWrite>& before,
                  const std::vector<PointWrite>& written, uint64_t* digest) {
  if (digest == nullptr || written.empty()) return;
  std::map<uint64_t, std::pair<uint64_t, uint64_t>> change;  // id -> (old, new)
  for (size_t i = 0; i < ids.size(); ++i) {
    change.try_emplace(ids[i], RecordHash(ids[i], before[i].version, before[i].edits), 0);
  }
  std::set<uint64_t> touched;
  for (const PointWrite& w : written) {
    change[w.id].second = RecordHash(w.id, w.version, w.edits);
    touched.insert(w.id);
  }
  for (uint64_t id : touched) *digest ^= change[id].first ^ change[id].second;
}

absl::StatusOr<std::vector<PointWrite>> RecordsOf(const server::Collection& c,
                                                  const std::vector<uint64_t>& ids) {
  std::vector<PointWrite> out;
  ZOOM_RETURN_IF_ERROR(c.metadata_store()->GetWriteRecords(c.metadata_id(), ids, &out));
  return out;
}

// An upsert or a delete at `version`: the points whose last full write is
// not newer, their field edits pruned to the newer ones (laid over an
// upsert's fields).
absl::StatusOr<uint64_t> ApplyFullWrite(const LogEntry& entry, uint64_t version,
                                        const std::vector<uint64_t>& ids,
                                        const std::vector<PointWrite>& records,
                                        server::Collection* c, uint64_t* digest) {
  LogEntry part;
  part.op = entry.op;
  part.dim = entry.dim;
  std::vector<PointWrite> written;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (records[i].version > version) continue;
    ZOOM_ASSIGN_OR_RETURN(FieldEdits edits, DecodeFieldEdits(records[i].edits));
    edits.Prune(version);
    if (entry.op == LogOp::kUpsert) {
      part.points.push_back(entry.points[i]);
      if (!edits.empty()) part.points.back().fields = edits.Over(entry.points[i].fields);
    } else {
      part.ids.push_back(ids[i]);
    }
    written.push_back({ids[i], version, EncodeFieldEdits(edits)});
  }
  if (written.empty()) return 0;
  ZOOM_ASSIGN_OR_RETURN(uint64_t changed, ApplyLogEntry(part, c));
  ZOOM_RETURN_IF_ERROR(c->metadata_store()->PutWriteRecords(c->metadata_id(), written));
  UpdateDigest(ids, records, written, digest);
  return changed;
}

// A payload edit at `version`: recorded per field for every point whose
// last full write is not newer (present or not), and applied to those
// present, each with the fields no newer edit wrote.
absl::StatusOr<uint64_t> ApplyEdit(const LogEntry& entry, uint64_t version,
                                   const std::vector<uint64_t>& ids,
                                   const std::vector<PointWrite>& records,
                                   server::Collection* c, uint64_t* digest) {
  const bool resets = (entry.op == LogOp::kSetPayload && entry.overwrite) ||
                      (entry.op == LogOp::kDeletePayload && entry.keys.empty());
  std::vector<uint64_t> open;  // not superseded by a full write
  for (size_t i = 0; i < ids.size(); ++i) {
    if (records[i].version <= version) open.push_back(ids[i]);
  }
  if (open.empty()) return 0;
  std::vector<server::PointData> found;
  ZOOM_RETURN_IF_ERROR(c->Get(open, /*with_vectors=*/false, /*with_payload=*/false, &found));
  std::set<uint64_t> present;
  for (const server::PointData& p : found) present.insert(p.id);
  // The edits to make, grouped: (a reset?, the fields set, the fields
  // removed) -> the points.
  using Edit = std::tuple<bool, std::string, std::vector<std::string>>;
  std::map<Edit, std::vector<uint64_t>> groups;
  std::vector<PointWrite> written;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (records[i].version > version) continue;
    ZOOM_ASSIGN_OR_RETURN(FieldEdits edits, DecodeFieldEdits(records[i].edits));
    server::PayloadFields set;
    std::vector<std::string> removed;
    bool reset = false;
    if (resets) {
      if (edits.reset > version) continue;  // a newer reset replaced it all
      edits.reset = version;
      for (auto it = edits.keys.begin(); it != edits.keys.end();) {
        it = it->second.version < version ? edits.keys.erase(it) : std::next(it);
      }
      if (entry.op == LogOp::kSetPayload) {
        for (const auto& [name, value] : entry.fields) {
          auto it = edits.keys.find(name);
          if (it == edits.keys.end() || it->second.version <= version) {
            edits.keys[name] = FieldEdit{version, value};
          }
        }
      }
      set = edits.Over({});
      reset = true;
    } else if (entry.op == LogOp::kSetPayload) {
      for (const auto& [name, value] : entry.fields) {
        if (edits.FloorOf(name) > version) continue;
        edits.keys[name] = FieldEdit{version, value};
        set.emplace(name, value);
      }
    } else {
      for (const std::string& name : entry.keys) {
        if (edits.FloorOf(name) > version) continue;
        edits.keys[name] = FieldEdit{version, std::nullopt};
        removed.push_back(name);
      }
    }
    written.push_back({ids[i], records[i].version, EncodeFieldEdits(edits)});
    if (present.contains(ids[i]) && (reset || !set.empty() || !removed.empty())) {
      groups[Edit{reset, server::EncodeFields(set), std::move(removed)}].push_back(ids[i]);
    }
  }
  uint64_t changed = 0;
  for (auto& [edit, points] : groups) {
    const auto& [reset, fields, removed] = edit;
    LogEntry part;
    part.ids = points;
    if (!removed.empty()) {
      part.op = LogOp::kDeletePayload;
      part.keys = removed;
    } else {
      part.op = LogOp::kSetPayload;
      part.overwrite = reset;
      if (!fields.empty()) {
        ZOOM_ASSIGN_OR_RETURN(part.fields, server::DecodeFields(fields));
      }
    }
    ZOOM_ASSIGN_OR_RETURN(uint64_t n, ApplyLogEntry(part, c));
    changed += n;
  }
  ZOOM_RETURN_IF_ERROR(c->metadata_store()->PutWriteRecords(c->metadata_id(), written));
  UpdateDigest(ids, records, written, digest);
  return changed;
}

}  // namespace

uint64_t RecordHash(uint64_t id, uint64_t version, std::string_view edits) {
  if (version == 0 && edits.empty()) return 0;  // no record
  uint64_t h = Mix(id + 0x9E3779B97F4A7C15ULL) ^ Mix(version ^ 0x632BE59BD9B4E019ULL);
  if (!edits.empty()) {
    h ^= Mix((uint64_t{Crc32c(edits.data(), edits.size())} << 32) ^ edits.size() ^
             0xD6E8FEB86659FD93ULL);
  }
  return Mix(h);
}

absl::StatusOr<uint64_t> StateDigest(const server::Collection& collection) {
  uint64_t digest = 0;
  ZOOM_RETURN_IF_ERROR(collection.metadata_store()->ScanWriteRecords(
      collection.metadata_id(), [&](const PointWrite& r) {
        digest ^= RecordHash(r.id, r.version, r.edits);
        return absl::OkStatus();
      }));
  return digest;
}

absl::StatusOr<uint64_t> ApplyVersioned(const LogEntry& entry, uint64_t version,
                                        server::Collection* c, uint64_t* digest) {
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
  ZOOM_ASSIGN_OR_RETURN(std::vector<PointWrite> records, RecordsOf(*c, ids));
  if (entry.op == LogOp::kUpsert || entry.op == LogOp::kDelete) {
    return ApplyFullWrite(entry, version, ids, records, c, digest);
  }
  return ApplyEdit(entry, version, ids, records, c, digest);
}

absl::StatusOr<std::vector<std::string>> StateEntries(const server::Collection& collection,
                                                      const std::vector<uint64_t>& points) {
  std::vector<server::PointData> found;
  ZOOM_RETURN_IF_ERROR(collection.Get(points, /*with_vectors=*/true, /*with_payload=*/true,
                                        &found));
  // Each point at the version of its last full write (a tombstone's for
  // one deleted; none without one: nothing says when it was written), and
  // its field edits at theirs.
  ZOOM_ASSIGN_OR_RETURN(std::vector<PointWrite> records, RecordsOf(collection, points));
  std::map<uint64_t, const PointWrite*> record_of;
  for (const PointWrite& r : records) record_of[r.id] = &r;
  // Entries of at most about 512 KiB (under NATS's default max_payload).
  constexpr size_t kCap = size_t{512} << 10;
  constexpr size_t kIdsPerEntry = 32768;
  const uint32_t dim = static_cast<uint32_t>(collection.config().dim);
  std::vector<std::string> out;
  std::map<uint64_t, std::vector<server::PointData*>> upserts;  // by version
  // Edits by (version, kind: 0 a reset, 1 set, 2 removed; the fields or
  // the name) -> points.
  std::map<std::tuple<uint64_t, int, std::string>, std::vector<uint64_t>> edits;
  std::set<uint64_t> present, seen;
  std::map<uint64_t, FieldEdits> edits_of;
  for (const PointWrite& r : records) {
    if (!seen.insert(r.id).second) continue;
    ZOOM_ASSIGN_OR_RETURN(FieldEdits e, DecodeFieldEdits(r.edits));
    if (e.reset > 0) {
      server::PayloadFields at_reset;
      for (const auto& [name, edit] : e.keys) {
        if (edit.version == e.reset && edit.value.has_value()) at_reset.emplace(name, *edit.value);
      }
      edits[{e.reset, 0, at_reset.empty() ? "" : server::EncodeFields(at_reset)}].push_back(r.id);
    }
    for (const auto& [name, edit] : e.keys) {
      if (edit.version == e.reset) continue;
      if (edit.value.has_value()) {
        edits[{edit.version, 1, server::EncodeFields({{name, *edit.value}})}].push_back(r.id);
      } else {
        edits[{edit.version, 2, name}].push_back(r.id);
      }
    }
    edits_of.emplace(r.id, std::move(e));
  }
  for (server::PointData& p : found) {
    if (!present.insert(p.id).second) continue;
    const uint64_t version = record_of[p.id]->version;
    if (version == 0) continue;
    // The full write's fields: those no edit after it wrote.
    const FieldEdits& e = edits_of[p.id];
    if (e.reset > 0) {
      p.fields.clear();
    } else {
      for (const auto& [name, edit] : e.keys) p.fields.erase(name);
    }
    upserts[version].push_back(&p);
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
  for (const auto& [id, r] : record_of) {
    if (present.contains(id) || r->version == 0) continue;
    deletes[r->version].push_back(id);
  }
  for (auto& [version, ids] : deletes) {
    for (size_t first = 0; first < ids.size(); first += kIdsPerEntry) {
      LogEntry del;
      del.op = LogOp::kDelete;
      del.version = version;
      del.ids.assign(ids.begin() + first,
                     ids.begin() + std::min(ids.size(), first + kIdsPerEntry));
      out.push_back(EncodeLogEntry(del));
    }
  }
  // The edits after the full writes (in version order, as they were made).
  for (auto& [edit, ids] : edits) {
    const auto& [version, kind, what] = edit;
    for (size_t first = 0; first < ids.size(); first += kIdsPerEntry) {
      LogEntry e;
      e.version = version;
      e.ids.assign(ids.begin() + first, ids.begin() + std::min(ids.size(), first + kIdsPerEntry));
      if (kind == 2 || (kind == 0 && what.empty())) {
        e.op = LogOp::kDeletePayload;  // no keys: every field (a reset to none)
        if (kind == 2) e.keys.push_back(what);
      } else {
        e.op = LogOp::kSetPayload;
        e.overwrite = kind == 0;
        ZOOM_ASSIGN_OR_RETURN(e.fields, server::DecodeFields(what));
      }
      out.push_back(EncodeLogEntry(e));
    }
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> WholeStateEntries(const server::Collection& collection) {
  std::vector<uint64_t> ids;
  // Every point with a write version or field edits (only edits: their
  // point absent here, or written before versions).
  std::set<uint64_t> edited;
  ZOOM_RETURN_IF_ERROR(collection.metadata_store()->ScanFieldEdits(
      collection.metadata_id(), [&](const PointWrite& r) {
        edited.insert(r.id);
        return absl::OkStatus();
      }));
  ZOOM_RETURN_IF_ERROR(collection.metadata_store()->ScanWriteVersions(
      collection.metadata_id(), [&](uint64_t id, uint64_t version) {
        if (version > 0 || edited.contains(id)) ids.push_back(id);
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
