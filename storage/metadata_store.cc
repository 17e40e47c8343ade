#include "storage/metadata_store.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "rocksdb/write_batch.h"

namespace zoom::storage {
namespace {

void PutBe32(std::string* s, uint32_t v) {
  for (int i = 3; i >= 0; --i) s->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint32_t GetBe32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}
void PutLe64(std::string* s, uint64_t v) {
  for (int i = 0; i < 8; ++i) s->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint64_t GetLe64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

absl::string_view AV(std::string_view s) { return absl::string_view(s.data(), s.size()); }

std::string CatalogKey(std::string_view name) { return absl::StrCat("c", AV(name)); }
std::string StateKey(uint32_t cid) {
  std::string k = "s";
  PutBe32(&k, cid);
  return k;
}
std::string LogPositionKey(uint32_t cid) {
  std::string k = "l";
  PutBe32(&k, cid);
  return k;
}
std::string RecordPrefix(char family, uint32_t cid) {
  std::string k(1, family);
  PutBe32(&k, cid);
  return k;
}
std::string RecordKey(char family, uint32_t cid, InternalId id) {
  std::string k = RecordPrefix(family, cid);
  PutBe32(&k, id);
  return k;
}
std::string FieldsKey(uint32_t cid, uint64_t external_id) {
  std::string k = RecordPrefix('f', cid);
  PutBe32(&k, static_cast<uint32_t>(external_id >> 32));
  PutBe32(&k, static_cast<uint32_t>(external_id));
  return k;
}
std::string WriteVersionKey(uint32_t cid, uint64_t external_id) {
  std::string k = RecordPrefix('w', cid);
  PutBe32(&k, static_cast<uint32_t>(external_id >> 32));
  PutBe32(&k, static_cast<uint32_t>(external_id));
  return k;
}
std::string LogRecordKey(uint32_t cid, uint64_t sequence) {
  std::string k = RecordPrefix('t', cid);
  PutBe32(&k, static_cast<uint32_t>(sequence >> 32));
  PutBe32(&k, static_cast<uint32_t>(sequence));
  return k;
}
void AddFields(rocksdb::WriteBatch* batch, uint32_t cid,
               absl::Span<const FieldsWrite> fields) {
  for (const FieldsWrite& f : fields) {
    if (f.fields.empty()) {
      batch->Delete(FieldsKey(cid, f.external_id));
    } else {
      batch->Put(FieldsKey(cid, f.external_id), rocksdb::Slice(f.fields.data(), f.fields.size()));
    }
  }
}
// The first key after every key that starts with `prefix`.
std::string PrefixEnd(std::string prefix) {
  while (!prefix.empty() && static_cast<uint8_t>(prefix.back()) == 0xff) prefix.pop_back();
  if (!prefix.empty()) prefix.back() = static_cast<char>(static_cast<uint8_t>(prefix.back()) + 1);
  return prefix;
}

absl::Status FromRocks(const rocksdb::Status& s, std::string_view what) {
  if (s.ok()) return absl::OkStatus();
  const std::string msg = absl::StrCat("metadata store: ", AV(what), ": ", s.ToString());
  if (s.IsNoSpace()) return absl::ResourceExhaustedError(msg);
  if (s.IsCorruption()) return absl::DataLossError(msg);
  if (s.IsNotFound()) return absl::NotFoundError(msg);
  if (s.IsInvalidArgument()) return absl::InvalidArgumentError(msg);
  if (s.IsBusy() || s.IsTryAgain()) return absl::UnavailableError(msg);
  return absl::InternalError(msg);
}

absl::Mutex catalog_mu;  // serialises catalog read-modify-writes

}  // namespace

MetadataStore::~MetadataStore() {
  if (db_ != nullptr) {
    db_->SyncWAL().PermitUncheckedError();
    db_->Close().PermitUncheckedError();
  }
}

absl::StatusOr<std::unique_ptr<MetadataStore>> MetadataStore::Open(
    const std::string& dir, const MetadataOptions& options) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create the metadata directory ", dir, ": ", ec.message()));
  }
  rocksdb::Options ro;
  ro.create_if_missing = true;
  ro.max_background_jobs = 2;
  ro.keep_log_file_num = 4;
  ro.max_total_wal_size = 64 << 20;
  rocksdb::DB* raw = nullptr;
  ZOOM_RETURN_IF_ERROR(FromRocks(rocksdb::DB::Open(ro, dir, &raw), absl::StrCat("open ", dir)));
  std::unique_ptr<MetadataStore> store(new MetadataStore());
  store->db_.reset(raw);
  store->options_ = options;
  store->dir_ = dir;

  std::string version;
  rocksdb::Status s = raw->Get(rocksdb::ReadOptions(), "v", &version);
  if (s.IsNotFound()) {
    std::string v;
    PutBe32(&v, kSchemaVersion);
    rocksdb::WriteOptions wo;
    wo.sync = true;
    ZOOM_RETURN_IF_ERROR(FromRocks(raw->Put(wo, "v", v), "write the schema version"));
  } else {
    ZOOM_RETURN_IF_ERROR(FromRocks(s, "read the schema version"));
    if (version.size() != 4) return absl::DataLossError("metadata store: bad schema version entry");
    const uint32_t have = GetBe32(version.data());
    if (have > kSchemaVersion) {
      return absl::FailedPreconditionError(absl::StrCat(
          "metadata store in ", dir, " has schema version ", have, "; this zoomd reads up to ",
          kSchemaVersion, " (upgrade zoomd)"));
    }
    if (have < kSchemaVersion) {
      // Version 1 had no 'f' (typed fields) keys, version 2 no 'w' (write
      // versions) keys and only 8-byte log positions, version 3 only
      // 8-byte write versions: each reads as it is, and is marked 4 so that
      // an older zoomd, which would not keep them in step with its writes
      // (or read a 16-byte position, or a version with edits), refuses it.
      std::string v;
      PutBe32(&v, kSchemaVersion);
      rocksdb::WriteOptions wo;
      wo.sync = true;
      ZOOM_RETURN_IF_ERROR(FromRocks(raw->Put(wo, "v", v), "upgrade the schema version"));
    }
  }
  return store;
}

absl::StatusOr<std::vector<CollectionRecord>> MetadataStore::ListCollections() const {
  std::vector<CollectionRecord> out;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek("c"); it->Valid() && it->key().starts_with("c"); it->Next()) {
    const rocksdb::Slice v = it->value();
    if (v.size() < 4) return absl::DataLossError("metadata store: truncated catalog entry");
    CollectionRecord rec;
    rec.name = it->key().ToString().substr(1);
    rec.id = GetBe32(v.data());
    rec.config.assign(v.data() + 4, v.size() - 4);
    std::string state;
    rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), StateKey(rec.id), &state);
    if (!s.IsNotFound()) {
      ZOOM_RETURN_IF_ERROR(FromRocks(s, "read collection state"));
      rec.state = std::move(state);
    }
    out.push_back(std::move(rec));
  }
  ZOOM_RETURN_IF_ERROR(FromRocks(it->status(), "scan the catalog"));
  return out;
}

absl::StatusOr<uint32_t> MetadataStore::CreateCollection(std::string_view name,
                                                         std::string_view config) {
  absl::MutexLock lock(&catalog_mu);
  std::string existing;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), CatalogKey(name), &existing);
  if (s.ok()) return absl::AlreadyExistsError(absl::StrCat("collection '", AV(name), "' already exists"));
  if (!s.IsNotFound()) return FromRocks(s, "read the catalog");
  std::string next;
  uint32_t id = 1;
  s = db_->Get(rocksdb::ReadOptions(), "n", &next);
  if (s.ok() && next.size() == 4) {
    id = GetBe32(next.data());
  } else if (!s.IsNotFound()) {
    ZOOM_RETURN_IF_ERROR(FromRocks(s, "read the next collection id"));
  }
  rocksdb::WriteBatch batch;
  std::string value;
  PutBe32(&value, id);
  value.append(config);
  batch.Put(CatalogKey(name), value);
  std::string n;
  PutBe32(&n, id + 1);
  batch.Put("n", n);
  rocksdb::WriteOptions wo;
  wo.sync = true;
  ZOOM_RETURN_IF_ERROR(FromRocks(db_->Write(wo, &batch), "create collection"));
  return id;
}

absl::Status MetadataStore::DropCollection(std::string_view name, uint32_t id) {
  absl::MutexLock lock(&catalog_mu);
  rocksdb::WriteBatch batch;
  batch.Delete(CatalogKey(name));
  batch.Delete(StateKey(id));
  batch.Delete(LogPositionKey(id));
  for (char family : {'r', 'p', 'f', 't', 'w'}) {
    const std::string prefix = RecordPrefix(family, id);
    batch.DeleteRange(prefix, PrefixEnd(prefix));
  }
  rocksdb::WriteOptions wo;
  wo.sync = true;
  return FromRocks(db_->Write(wo, &batch), "drop collection");
}

absl::StatusOr<uint32_t> MetadataStore::AllocateId() {
  absl::MutexLock lock(&catalog_mu);
  std::string next;
  uint32_t id = 1;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), "n", &next);
  if (s.ok() && next.size() == 4) {
    id = GetBe32(next.data());
  } else if (!s.IsNotFound()) {
    ZOOM_RETURN_IF_ERROR(FromRocks(s, "read the next id"));
  }
  std::string n;
  PutBe32(&n, id + 1);
  rocksdb::WriteOptions wo;
  wo.sync = true;
  ZOOM_RETURN_IF_ERROR(FromRocks(db_->Put(wo, "n", n), "allocate an id"));
  return id;
}

absl::Status MetadataStore::DropRecords(uint32_t space) {
  rocksdb::WriteBatch batch;
  for (char family : {'r', 'p'}) {
    const std::string prefix = RecordPrefix(family, space);
    batch.DeleteRange(prefix, PrefixEnd(prefix));
  }
  rocksdb::WriteOptions wo;
  wo.sync = true;
  return FromRocks(db_->Write(wo, &batch), "drop records");
}

absl::Status MetadataStore::PutState(uint32_t id, std::string_view state) {
  rocksdb::WriteOptions wo;
  wo.sync = true;
  return FromRocks(db_->Put(wo, StateKey(id), rocksdb::Slice(state.data(), state.size())),
                   "write collection state");
}

absl::Status MetadataStore::PutLogPosition(uint32_t cid, uint64_t position, uint64_t version) {
  std::string v;
  for (int i = 0; i < 8; ++i) v.push_back(static_cast<char>(position >> (8 * i)));
  if (version != 0) {
    for (int i = 0; i < 8; ++i) v.push_back(static_cast<char>(version >> (8 * i)));
  }
  rocksdb::WriteOptions wo;
  wo.sync = false;
  return FromRocks(db_->Put(wo, LogPositionKey(cid), v), "write the log position");
}

// A 'w' value: the version (8 bytes, little-endian), then the point's field
// edits if any (opaque here).
absl::Status MetadataStore::PutWriteRecords(uint32_t cid, absl::Span<const PointWrite> records) {
  if (records.empty()) return absl::OkStatus();
  rocksdb::WriteBatch batch;
  for (const PointWrite& r : records) {
    std::string v;
    v.reserve(8 + r.edits.size());
    for (int i = 0; i < 8; ++i) v.push_back(static_cast<char>(r.version >> (8 * i)));
    v += r.edits;
    batch.Put(WriteVersionKey(cid, r.id), v);
  }
  rocksdb::WriteOptions wo;
  wo.sync = false;
  return FromRocks(db_->Write(wo, &batch), "write point versions");
}

absl::Status MetadataStore::PutWriteVersions(
    uint32_t cid, absl::Span<const std::pair<uint64_t, uint64_t>> versions) {
  std::vector<PointWrite> records;
  records.reserve(versions.size());
  for (const auto& [ext, version] : versions) records.push_back({ext, version, ""});
  return PutWriteRecords(cid, records);
}

absl::Status MetadataStore::GetWriteRecords(uint32_t cid, absl::Span<const uint64_t> external_ids,
                                            std::vector<PointWrite>* out) const {
  std::vector<std::string> keys(external_ids.size());
  for (size_t i = 0; i < external_ids.size(); ++i) keys[i] = WriteVersionKey(cid, external_ids[i]);
  std::vector<std::string> values;
  ZOOM_RETURN_IF_ERROR(MultiGetValues(keys, &values, nullptr, "read point versions"));
  out->assign(external_ids.size(), PointWrite{});
  for (size_t i = 0; i < values.size(); ++i) {
    (*out)[i].id = external_ids[i];
    if (values[i].empty()) continue;
    if (values[i].size() < 8) {
      return absl::DataLossError(absl::StrCat("metadata store: the write version of point ",
                                              external_ids[i], " of collection ", cid, " is ",
                                              values[i].size(), " bytes, fewer than 8"));
    }
    (*out)[i].version = GetLe64(values[i].data());
    (*out)[i].edits = values[i].substr(8);
  }
  return absl::OkStatus();
}

absl::Status MetadataStore::GetWriteVersions(uint32_t cid, absl::Span<const uint64_t> external_ids,
                                             std::vector<uint64_t>* out) const {
  std::vector<PointWrite> records;
  ZOOM_RETURN_IF_ERROR(GetWriteRecords(cid, external_ids, &records));
  out->resize(records.size());
  for (size_t i = 0; i < records.size(); ++i) (*out)[i] = records[i].version;
  return absl::OkStatus();
}

namespace {

// Each 'w' record of collection `cid` as of `at`, in ascending id.
absl::Status ScanWriteValues(rocksdb::DB* db, uint32_t cid, const MetadataSnapshot* at,
                             const rocksdb::Snapshot* snap,
                             const std::function<absl::Status(uint64_t, rocksdb::Slice)>& fn) {
  const std::string prefix = RecordPrefix('w', cid);
  const std::string end = PrefixEnd(prefix);
  rocksdb::ReadOptions ro;
  rocksdb::Slice upper(end);
  ro.iterate_upper_bound = &upper;
  if (at != nullptr) ro.snapshot = snap;
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(ro));
  for (it->Seek(prefix); it->Valid(); it->Next()) {
    const rocksdb::Slice k = it->key();
    const rocksdb::Slice v = it->value();
    if (k.size() != prefix.size() + 8 || v.size() < 8) {
      return absl::DataLossError(absl::StrCat("metadata store: a malformed write version of "
                                              "collection ", cid));
    }
    const uint64_t ext = (uint64_t{GetBe32(k.data() + prefix.size())} << 32) |
                         GetBe32(k.data() + prefix.size() + 4);
    ZOOM_RETURN_IF_ERROR(fn(ext, v));
  }
  return FromRocks(it->status(), "scan point versions");
}

}  // namespace

absl::Status MetadataStore::ScanWriteVersions(
    uint32_t cid, const std::function<absl::Status(uint64_t, uint64_t)>& fn,
    const MetadataSnapshot* at) const {
  return ScanWriteValues(db_.get(), cid, at, at != nullptr ? at->snap_ : nullptr,
                         [&](uint64_t ext, rocksdb::Slice v) { return fn(ext, GetLe64(v.data())); });
}

absl::Status MetadataStore::ScanWriteRecords(
    uint32_t cid, const std::function<absl::Status(const PointWrite&)>& fn,
    const MetadataSnapshot* at) const {
  return ScanWriteValues(db_.get(), cid, at, at != nullptr ? at->snap_ : nullptr,
                         [&](uint64_t ext, rocksdb::Slice v) -> absl::Status {
                           return fn(PointWrite{ext, GetLe64(v.data()),
                                                std::string(v.data() + 8, v.size() - 8)});
                         });
}

absl::Status MetadataStore::ScanFieldEdits(
    uint32_t cid, const std::function<absl::Status(const PointWrite&)>& fn,
    const MetadataSnapshot* at) const {
  return ScanWriteValues(db_.get(), cid, at, at != nullptr ? at->snap_ : nullptr,
                         [&](uint64_t ext, rocksdb::Slice v) -> absl::Status {
                           if (v.size() == 8) return absl::OkStatus();
                           return fn(PointWrite{ext, GetLe64(v.data()),
                                                std::string(v.data() + 8, v.size() - 8)});
                         });
}

absl::Status MetadataStore::PutLogRecord(uint32_t cid, uint64_t sequence,
                                         std::string_view record) {
  rocksdb::WriteOptions wo;
  wo.sync = false;
  return FromRocks(db_->Put(wo, LogRecordKey(cid, sequence),
                            rocksdb::Slice(record.data(), record.size())),
                   "write a retained log entry");
}

absl::Status MetadataStore::ScanLogRecords(
    uint32_t cid, uint64_t from,
    const std::function<absl::Status(uint64_t, std::string_view)>& fn) const {
  const std::string prefix = RecordPrefix('t', cid);
  const std::string end = PrefixEnd(prefix);
  rocksdb::ReadOptions ro;
  rocksdb::Slice upper(end);
  ro.iterate_upper_bound = &upper;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
  for (it->Seek(LogRecordKey(cid, from)); it->Valid(); it->Next()) {
    const rocksdb::Slice k = it->key();
    if (k.size() != prefix.size() + 8) {
      return absl::DataLossError(absl::StrCat("metadata store: a retained log entry key of "
                                              "collection ", cid, " is ", k.size(), " bytes"));
    }
    const uint64_t seq = (uint64_t{GetBe32(k.data() + prefix.size())} << 32) |
                         GetBe32(k.data() + prefix.size() + 4);
    const rocksdb::Slice v = it->value();
    ZOOM_RETURN_IF_ERROR(fn(seq, std::string_view(v.data(), v.size())));
  }
  return FromRocks(it->status(), "scan retained log entries");
}

absl::Status MetadataStore::DeleteLogRecords(uint32_t cid, uint64_t from, uint64_t to) {
  if (from >= to) return absl::OkStatus();
  rocksdb::WriteOptions wo;
  wo.sync = false;
  return FromRocks(db_->DeleteRange(wo, db_->DefaultColumnFamily(), LogRecordKey(cid, from),
                                    LogRecordKey(cid, to)),
                   "delete retained log entries");
}

namespace {

// The log position record of `cid`: (position, version), both 0 when none.
absl::StatusOr<std::pair<uint64_t, uint64_t>> ReadLogPosition(rocksdb::DB* db, uint32_t cid) {
  std::string v;
  rocksdb::Status s = db->Get(rocksdb::ReadOptions(), LogPositionKey(cid), &v);
  if (s.IsNotFound()) return std::pair<uint64_t, uint64_t>{0, 0};
  if (!s.ok()) return FromRocks(s, "read the log position");
  if (v.size() != 8 && v.size() != 16) {
    return absl::DataLossError(absl::StrCat("metadata store: log position of collection ", cid,
                                            " is ", v.size(), " bytes, not 8 or 16"));
  }
  return std::pair<uint64_t, uint64_t>{GetLe64(v.data()),
                                       v.size() == 16 ? GetLe64(v.data() + 8) : 0};
}

}  // namespace

absl::StatusOr<uint64_t> MetadataStore::GetLogPosition(uint32_t cid) const {
  ZOOM_ASSIGN_OR_RETURN(auto p, ReadLogPosition(db_.get(), cid));
  return p.first;
}

absl::StatusOr<uint64_t> MetadataStore::GetLogVersion(uint32_t cid) const {
  ZOOM_ASSIGN_OR_RETURN(auto p, ReadLogPosition(db_.get(), cid));
  return p.second;
}

absl::Status MetadataStore::Commit(uint32_t cid, absl::Span<const RecordWrite> writes,
                                   absl::Span<const InternalId> erased, uint32_t fields_cid,
                                   absl::Span<const FieldsWrite> fields) {
  rocksdb::WriteBatch batch;
  AddFields(&batch, fields_cid, fields);
  for (InternalId id : erased) {
    batch.Delete(RecordKey('r', cid, id));
    batch.Delete(RecordKey('p', cid, id));
  }
  std::string ext;
  for (const RecordWrite& w : writes) {
    ext.clear();
    PutLe64(&ext, w.external_id);
    batch.Put(RecordKey('r', cid, w.id), ext);
    if (!w.payload.empty()) {
      batch.Put(RecordKey('p', cid, w.id), rocksdb::Slice(w.payload.data(), w.payload.size()));
    }
  }
  rocksdb::WriteOptions wo;
  wo.sync = options_.sync;
  return FromRocks(db_->Write(wo, &batch), "commit records");
}

absl::Status MetadataStore::ScanRecords(
    uint32_t cid, const std::function<absl::Status(InternalId, uint64_t)>& fn) const {
  const std::string prefix = RecordPrefix('r', cid);
  const std::string end = PrefixEnd(prefix);
  rocksdb::ReadOptions ro;
  rocksdb::Slice upper(end);
  ro.iterate_upper_bound = &upper;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
  for (it->Seek(prefix); it->Valid(); it->Next()) {
    const rocksdb::Slice k = it->key();
    const rocksdb::Slice v = it->value();
    if (k.size() != 9 || v.size() != 8) {
      return absl::DataLossError("metadata store: malformed record entry");
    }
    ZOOM_RETURN_IF_ERROR(fn(GetBe32(k.data() + 5), GetLe64(v.data())));
  }
  return FromRocks(it->status(), "scan records");
}

MetadataSnapshot::~MetadataSnapshot() { db_->ReleaseSnapshot(snap_); }

std::unique_ptr<MetadataSnapshot> MetadataStore::TakeSnapshot() const {
  return std::unique_ptr<MetadataSnapshot>(new MetadataSnapshot(db_.get(), db_->GetSnapshot()));
}

absl::Status MetadataStore::ReplaceCollection(std::string_view from, std::string_view to,
                                              uint32_t from_id, uint32_t old_id) {
  absl::MutexLock lock(&catalog_mu);
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), CatalogKey(from), &value);
  if (!s.ok()) return FromRocks(s, "read the catalog");
  if (value.size() < 4 || GetBe32(value.data()) != from_id) {
    return absl::InternalError("metadata store: the catalog entry changed during a restore");
  }
  rocksdb::WriteBatch batch;
  if (old_id != 0) {
    batch.Delete(StateKey(old_id));
    batch.Delete(LogPositionKey(old_id));
    for (char family : {'r', 'p', 'f', 't', 'w'}) {
      const std::string prefix = RecordPrefix(family, old_id);
      batch.DeleteRange(prefix, PrefixEnd(prefix));
    }
  }
  batch.Delete(CatalogKey(from));
  batch.Put(CatalogKey(to), value);
  rocksdb::WriteOptions wo;
  wo.sync = true;
  return FromRocks(db_->Write(wo, &batch), "replace collection");
}

absl::Status MetadataStore::MultiGetValues(const std::vector<std::string>& keys,
                                           std::vector<std::string>* out,
                                           const MetadataSnapshot* at,
                                           std::string_view what) const {
  out->assign(keys.size(), std::string());
  if (keys.empty()) return absl::OkStatus();
  std::vector<rocksdb::Slice> slices(keys.begin(), keys.end());
  std::vector<std::string> values;
  rocksdb::ReadOptions ro;
  if (at != nullptr) ro.snapshot = at->snap_;
  std::vector<rocksdb::Status> st = db_->MultiGet(ro, slices, &values);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (st[i].ok()) {
      (*out)[i] = std::move(values[i]);
    } else if (!st[i].IsNotFound()) {
      return FromRocks(st[i], what);
    }
  }
  return absl::OkStatus();
}

absl::Status MetadataStore::GetPayloads(uint32_t cid, absl::Span<const InternalId> ids,
                                        std::vector<std::string>* out,
                                        const MetadataSnapshot* at) const {
  std::vector<std::string> keys(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) keys[i] = RecordKey('p', cid, ids[i]);
  return MultiGetValues(keys, out, at, "read payloads");
}

absl::Status MetadataStore::CommitFields(uint32_t cid, absl::Span<const FieldsWrite> fields) {
  rocksdb::WriteBatch batch;
  AddFields(&batch, cid, fields);
  rocksdb::WriteOptions wo;
  wo.sync = options_.sync;
  return FromRocks(db_->Write(wo, &batch), "commit payload fields");
}

absl::Status MetadataStore::GetFields(uint32_t cid, absl::Span<const uint64_t> external_ids,
                                      std::vector<std::string>* out,
                                      const MetadataSnapshot* at) const {
  std::vector<std::string> keys(external_ids.size());
  for (size_t i = 0; i < external_ids.size(); ++i) keys[i] = FieldsKey(cid, external_ids[i]);
  return MultiGetValues(keys, out, at, "read payload fields");
}

absl::Status MetadataStore::ScanFields(
    uint32_t cid, const std::function<absl::Status(uint64_t, std::string_view)>& fn,
    const MetadataSnapshot* at) const {
  bool more = false;
  uint64_t next = 0;
  return ScanFields(cid, 0, UINT64_MAX, fn, &next, &more, at);
}

absl::Status MetadataStore::ScanFields(
    uint32_t cid, uint64_t from, uint64_t max_entries,
    const std::function<absl::Status(uint64_t, std::string_view)>& fn, uint64_t* next,
    bool* more, const MetadataSnapshot* at) const {
  *more = false;
  const std::string prefix = RecordPrefix('f', cid);
  const std::string start = FieldsKey(cid, from);
  const std::string end = PrefixEnd(prefix);
  rocksdb::ReadOptions ro;
  rocksdb::Slice upper(end);
  ro.iterate_upper_bound = &upper;
  if (at != nullptr) ro.snapshot = at->snap_;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
  uint64_t seen = 0;
  for (it->Seek(start); it->Valid(); it->Next()) {
    const rocksdb::Slice k = it->key();
    if (k.size() != 13) return absl::DataLossError("metadata store: malformed fields entry");
    const uint64_t ext = (uint64_t{GetBe32(k.data() + 5)} << 32) | GetBe32(k.data() + 9);
    if (seen == max_entries) {
      *next = ext;
      *more = true;
      break;
    }
    ++seen;
    const rocksdb::Slice v = it->value();
    ZOOM_RETURN_IF_ERROR(fn(ext, std::string_view(v.data(), v.size())));
  }
  return FromRocks(it->status(), "scan payload fields");
}

absl::Status MetadataStore::SyncWal() { return FromRocks(db_->SyncWAL(), "sync the WAL"); }

absl::Status MetadataStore::VerifyChecksums() const {
  return FromRocks(db_->VerifyChecksum(), absl::StrCat("verify the tables of ", dir_));
}

uint64_t MetadataStore::ApproximateBytes() const {
  uint64_t total = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir_, ec)) {
    if (entry.is_regular_file(ec)) total += entry.file_size(ec);
  }
  return total;
}

}  // namespace zoom::storage
