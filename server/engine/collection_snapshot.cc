// Collection snapshots: WriteSnapshot (a consistent archive of a
// collection taking writes) and Restore (a new collection from one). See
// collection.h for the archive's entries.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/cleanup/cleanup.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/endian.h"
#include "common/status_macros.h"
#include "common/vector_limits.h"
#include "server/engine/collection.h"
#include "server/engine/field_edits.h"
#include "server/engine/key_value_text.h"
#include "server/engine/payload_fields.h"

namespace zoom::server {
namespace {

namespace fs = std::filesystem;

}  // namespace

// ---- Snapshots ---------------------------------------------------------------

namespace {

// 1: manifest, config, vectors, records, index. 2 (written when a point
// has typed payload fields): also "fields", {u64 external id, u32 length,
// encoded fields (payload_fields.h)} per point with fields, in ascending
// external id, and fields_points= in the manifest.
constexpr uint32_t kSnapshotManifestVersion = 2;

constexpr auto PutLe = PutLittleEndian;
constexpr auto GetLe = GetLittleEndian;

// An archive entry's bytes, appended in pieces of about 1 MiB.
class ChunkedAppend {
 public:
  explicit ChunkedAppend(storage::ArchiveWriter* writer) : writer_(writer) {}
  // The buffer to add to; Added() after each addition.
  std::string* buf() { return &buf_; }
  absl::Status Added() {
    if (buf_.size() < (1 << 20)) return absl::OkStatus();
    return Flush();
  }
  absl::Status Flush() {
    if (buf_.empty()) return absl::OkStatus();
    absl::Status st = writer_->Append(buf_.data(), buf_.size());
    buf_.clear();
    return st;
  }

 private:
  storage::ArchiveWriter* writer_;
  std::string buf_;
};

}  // namespace

absl::StatusOr<Collection::SnapshotStats> Collection::WriteSnapshot(const std::string& path) const {
  // 1. The point of the snapshot, under the write lock (briefly).
  std::shared_ptr<Segment> gen;
  uint64_t records = 0, snapshot_count = 0, trained_points = 0;
  std::string calibration;  // the index's recall curve, when measured on it
  std::vector<std::pair<InternalId, uint64_t>> live;
  std::unique_ptr<storage::MetadataSnapshot> meta;
  std::string index_link;
  std::vector<CollectionManifest::FieldIndex> field_indexes;
  uint64_t log_position = 0, log_version = 0;
  const std::string& dir = core_.dir_;
  storage::MetadataStore* const metadata = core_.metadata_;
  {
    absl::MutexLock w(&core_.write_mu_);
    if (core_.dropped_) return core_.DroppedError();
    log_position = core_.log_position_.load(std::memory_order_relaxed);
    log_version = core_.log_version_.load(std::memory_order_relaxed);
    gen = core_.Current();
    field_indexes = core_.manifest_.field_indexes;
    records = gen->visible();
    live = gen->LiveRecords();
    meta = metadata->TakeSnapshot();
    const std::string& snapshot_file = core_.manifest_.snapshot;
    if (!snapshot_file.empty()) {
      // A hard link keeps the index file as it is now, whatever replaces it.
      static std::atomic<uint64_t> links{0};
      index_link = (fs::path(dir) / absl::StrCat(".snapshot-link-", links++, "-", snapshot_file))
                       .string();
      std::error_code ec;
      fs::remove(index_link, ec);
      fs::create_hard_link(fs::path(dir) / snapshot_file, index_link, ec);
      if (ec) {
        return absl::InternalError(absl::StrCat("cannot link the index snapshot: ", ec.message()));
      }
      snapshot_count = std::min<uint64_t>(core_.manifest_.snapshot_count, records);
      trained_points = core_.manifest_.trained_points;
      if (core_.manifest_.calibration_epoch == core_.manifest_.index_epoch) {
        calibration = core_.manifest_.calibration;
      }
    }
  }
  auto unlink = [&] {
    if (!index_link.empty()) {
      std::error_code ec;
      fs::remove(index_link, ec);
    }
  };
  absl::Cleanup unlink_on_return = unlink;
  absl::Status st;
  SnapshotStats stats;
  {
    // 2. The copy, without the lock.
    ZOOM_ASSIGN_OR_RETURN(auto writer,
                          storage::ArchiveWriter::Create(path, core_.options_.store.file_system));
    writer->SignWith(core_.options_.snapshot_key.get());
    const storage::VectorStore& store = gen->store();
    // The typed fields as of the snapshot's moment (only live points have
    // any: a delete erases them in the same batch).
    uint64_t field_points = 0, field_bytes = 0;
    ZOOM_RETURN_IF_ERROR(metadata->ScanFields(
        core_.id_,
        [&](uint64_t, std::string_view f) {
          ++field_points;
          field_bytes += 12 + f.size();
          return absl::OkStatus();
        },
        meta.get()));
    // A cluster replica's write versions (the same moment's).
    uint64_t version_points = 0;
    ZOOM_RETURN_IF_ERROR(metadata->ScanWriteVersions(
        core_.id_,
        [&](uint64_t, uint64_t) {
          ++version_points;
          return absl::OkStatus();
        },
        meta.get()));
    // Their field edits (field_edits.h): u64 id, u64 version, u32 length,
    // the record; ascending by id.
    uint64_t edit_points = 0, edit_bytes = 0;
    ZOOM_RETURN_IF_ERROR(metadata->ScanFieldEdits(
        core_.id_,
        [&](const storage::MetadataStore::PointWrite& w) {
          ++edit_points;
          edit_bytes += 20 + w.edits.size();
          return absl::OkStatus();
        },
        meta.get()));
    st = writer->Add("manifest",
                     absl::StrCat("format=", field_points > 0 ? 2 : 1,
                                  "\ncollection=", config().name, "\nrecords=", records,
                                  "\npoints=", live.size(),
                                  "\nrecord_bytes=", store.record_bytes(),
                                  "\nsnapshot_count=", index_link.empty() ? 0 : snapshot_count,
                                  "\nindex=", index_link.empty() ? 0 : 1,
                                  trained_points > 0
                                      ? absl::StrCat("\ntrained_points=", trained_points)
                                      : std::string(),
                                  field_points > 0 ? absl::StrCat("\nfields_points=", field_points)
                                                   : std::string(),
                                  calibration.empty()
                                      ? std::string()
                                      : absl::StrCat("\ncalibration=", calibration),
                                  field_indexes.empty()
                                      ? std::string()
                                      : absl::StrCat("\nfield_indexes=",
                                                     EncodeFieldIndexes(field_indexes)),
                                  log_position > 0
                                      ? absl::StrCat("\nlog_position=", log_position)
                                      : std::string(),
                                  log_version > 0
                                      ? absl::StrCat("\nlog_version=", log_version)
                                      : std::string(),
                                  version_points > 0
                                      ? absl::StrCat("\nversion_points=", version_points)
                                      : std::string(),
                                  edit_points > 0
                                      ? absl::StrCat("\nedit_points=", edit_points,
                                                     "\nedit_bytes=", edit_bytes)
                                      : std::string(),
                                  "\ncreated_unix_ms=", absl::ToUnixMillis(absl::Now()), "\n"));
    if (st.ok()) st = writer->Add("config", config().Encode());
    // The vector records [0, records): dead ones too, so the index's ids
    // stay the records' positions.
    const size_t rb = store.record_bytes();
    if (st.ok()) st = writer->Begin("vectors", records * rb);
    std::vector<uint8_t> raw;
    std::vector<InternalId> ids;
    for (uint64_t first = 0; first < records && st.ok(); first += 4096) {
      const uint64_t m = std::min<uint64_t>(4096, records - first);
      ids.resize(m);
      for (uint64_t i = 0; i < m; ++i) ids[i] = static_cast<InternalId>(first + i);
      raw.resize(m * rb);
      st = store.ReadRaw(ids, raw.data());
      if (st.ok()) st = writer->Append(raw.data(), raw.size());
    }
    if (st.ok()) st = writer->End();
    // The records with their payloads, as of the snapshot's moment.
    std::string rec;
    std::vector<std::string> payloads;
    std::vector<InternalId> chunk_ids;
    uint64_t rec_bytes = 0;
    // Sizes first (the entry is announced with its size): payload sizes
    // as of the snapshot.
    std::vector<uint32_t> payload_sizes(live.size());
    for (size_t first = 0; first < live.size() && st.ok(); first += 256) {
      const size_t m = std::min<size_t>(256, live.size() - first);
      chunk_ids.resize(m);
      for (size_t i = 0; i < m; ++i) chunk_ids[i] = live[first + i].first;
      st = metadata->GetPayloads(gen->space(), chunk_ids, &payloads, meta.get());
      for (size_t i = 0; i < m && st.ok(); ++i) {
        payload_sizes[first + i] = static_cast<uint32_t>(payloads[i].size());
        rec_bytes += 16 + payloads[i].size();
      }
    }
    if (st.ok()) st = writer->Begin("records", rec_bytes);
    for (size_t first = 0; first < live.size() && st.ok(); first += 256) {
      const size_t m = std::min<size_t>(256, live.size() - first);
      chunk_ids.resize(m);
      for (size_t i = 0; i < m; ++i) chunk_ids[i] = live[first + i].first;
      st = metadata->GetPayloads(gen->space(), chunk_ids, &payloads, meta.get());
      rec.clear();
      for (size_t i = 0; i < m && st.ok(); ++i) {
        PutLe(&rec, live[first + i].first, 4);
        PutLe(&rec, live[first + i].second, 8);
        PutLe(&rec, payloads[i].size(), 4);
        rec += payloads[i];
      }
      if (st.ok()) st = writer->Append(rec.data(), rec.size());
    }
    if (st.ok()) st = writer->End();
    if (st.ok() && field_points > 0) {
      st = writer->Begin("fields", field_bytes);
      uint64_t written = 0;
      ChunkedAppend out(writer.get());
      if (st.ok()) {
        st = metadata->ScanFields(
            core_.id_,
            [&](uint64_t ext, std::string_view f) {
              PutLe(out.buf(), ext, 8);
              PutLe(out.buf(), f.size(), 4);
              out.buf()->append(f);
              written += 12 + f.size();
              return out.Added();
            },
            meta.get());
      }
      if (st.ok()) st = out.Flush();
      if (st.ok() && written != field_bytes) {
        st = absl::InternalError("the payload fields changed under the snapshot");
      }
      if (st.ok()) st = writer->End();
    }
    if (st.ok() && version_points > 0) {
      st = writer->Begin("versions", version_points * 16);
      uint64_t written = 0;
      ChunkedAppend out(writer.get());
      if (st.ok()) {
        st = metadata->ScanWriteVersions(
            core_.id_,
            [&](uint64_t ext, uint64_t version) {
              PutLe(out.buf(), ext, 8);
              PutLe(out.buf(), version, 8);
              ++written;
              return out.Added();
            },
            meta.get());
      }
      if (st.ok()) st = out.Flush();
      if (st.ok() && written != version_points) {
        st = absl::InternalError("the write versions changed under the snapshot");
      }
      if (st.ok()) st = writer->End();
    }
    if (st.ok() && edit_points > 0) {
      st = writer->Begin("field_edits", edit_bytes);
      uint64_t written = 0;
      ChunkedAppend out(writer.get());
      if (st.ok()) {
        st = metadata->ScanFieldEdits(
            core_.id_,
            [&](const storage::MetadataStore::PointWrite& w) {
              PutLe(out.buf(), w.id, 8);
              PutLe(out.buf(), w.version, 8);
              PutLe(out.buf(), w.edits.size(), 4);
              out.buf()->append(w.edits);
              written += 20 + w.edits.size();
              return out.Added();
            },
            meta.get());
      }
      if (st.ok()) st = out.Flush();
      if (st.ok() && written != edit_bytes) {
        st = absl::InternalError("the field edits changed under the snapshot");
      }
      if (st.ok()) st = writer->End();
    }
    if (st.ok() && !index_link.empty()) {
      std::error_code ec;
      const uint64_t size = fs::file_size(index_link, ec);
      std::ifstream in(index_link, std::ios::binary);
      if (ec || !in) {
        st = absl::InternalError("cannot read the index snapshot");
      } else {
        st = writer->Begin("index", size);
        std::vector<char> buf(1 << 20);
        for (uint64_t left = size; left > 0 && st.ok();) {
          const size_t n = static_cast<size_t>(std::min<uint64_t>(left, buf.size()));
          if (!in.read(buf.data(), static_cast<std::streamsize>(n))) {
            st = absl::InternalError("cannot read the index snapshot");
            break;
          }
          st = writer->Append(buf.data(), n);
          left -= n;
        }
        if (st.ok()) st = writer->End();
      }
    }
    if (st.ok()) st = writer->Finish();
    if (st.ok()) {
      stats.records = records;
      stats.points = live.size();
      stats.bytes = writer->bytes();
      stats.sha256 = writer->file_sha256();
    }
  }
  if (!st.ok()) return st;
  return stats;
}

absl::StatusOr<std::unique_ptr<Collection>> Collection::Restore(
    const std::string& dir, storage::MetadataStore* metadata, uint32_t id,
    const CollectionConfig& config, const storage::ArchiveReader& archive,
    const CollectionOptions& options) {
  auto bad = [](const std::string& why) {
    return absl::DataLossError(absl::StrCat("the snapshot does not fit together: ", why));
  };
  ZOOM_ASSIGN_OR_RETURN(std::string manifest_text, archive.Read("manifest", 1 << 16));
  ZOOM_ASSIGN_OR_RETURN(KeyValueText manifest,
                        KeyValueText::Parse(manifest_text, "snapshot manifest"));
  uint32_t format = 0;
  uint64_t records = 0, points = 0, record_bytes = 0, snapshot_count = 0, has_index = 0;
  ZOOM_RETURN_IF_ERROR(manifest.Number("format", &format));
  if (format > kSnapshotManifestVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("snapshot manifest version ", format, " is newer than this zoomd reads"));
  }
  ZOOM_RETURN_IF_ERROR(manifest.Number("records", &records));
  ZOOM_RETURN_IF_ERROR(manifest.Number("points", &points));
  ZOOM_RETURN_IF_ERROR(manifest.Number("record_bytes", &record_bytes));
  ZOOM_RETURN_IF_ERROR(manifest.Number("snapshot_count", &snapshot_count));
  ZOOM_RETURN_IF_ERROR(manifest.Number("index", &has_index));
  uint64_t field_points = 0;
  if (format >= 2 && manifest.Has("fields_points")) {
    ZOOM_RETURN_IF_ERROR(manifest.Number("fields_points", &field_points));
  }
  const storage::ArchiveReader::Entry* fields_entry = archive.Find("fields");
  if ((field_points > 0) != (fields_entry != nullptr)) {
    return bad("the fields entry does not match the manifest");
  }
  const storage::ArchiveReader::Entry* vectors = archive.Find("vectors");
  const storage::ArchiveReader::Entry* recs = archive.Find("records");
  const storage::ArchiveReader::Entry* index = archive.Find("index");
  const uint64_t want_rb = uint64_t{config.dim} * storage::DTypeSize(config.dtype);
  if (vectors == nullptr || recs == nullptr) return bad("entries are missing");
  if (record_bytes != want_rb || vectors->size != records * record_bytes) {
    return bad("the vector records do not match the config");
  }
  if ((has_index != 0) != (index != nullptr) || snapshot_count > records) {
    return bad("the index entry does not match the manifest");
  }
  if (records > (uint64_t{1} << 32) - 1) return bad("too many records");
  std::error_code ec;
  if (!fs::create_directories(dir, ec) || ec) {
    return absl::InternalError(absl::StrCat("cannot create the collection directory: ",
                                            ec ? ec.message() : "it exists"));
  }
  const std::string vectors_file = "vectors-1.zvec";
  const std::string index_file = index != nullptr ? "index-2.zidx" : "";
  {
    storage::VectorStoreOptions wopts = options.store;
    wopts.sync_on_append = false;
    ZOOM_ASSIGN_OR_RETURN(auto store, storage::VectorStore::Create(
                                          (fs::path(dir) / vectors_file).string(), config.dim,
                                          config.dtype, wopts));
    const size_t chunk_records = std::max<size_t>(1, (4 << 20) / record_bytes);
    // Every record under the rule an Upsert applies (finite, the magnitude
    // rule; a cosine collection's stored unit vectors): an archive
    // rewritten with its checksums recomputed is untrusted input.
    uint64_t checked = 0;
    std::vector<float> v;
    const auto check = [&](const char* p, size_t n) -> absl::Status {
      if (config.dtype != storage::DType::kFloat32) return absl::OkStatus();
      v.resize(n / sizeof(float));
      std::memcpy(v.data(), p, n);
      for (size_t r = 0; r < n / record_bytes; ++r, ++checked) {
        const float* x = v.data() + r * config.dim;
        if (absl::Status st = CheckVectorMagnitude(config.metric, x, config.dim); !st.ok()) {
          return absl::DataLossError(absl::StrCat("the snapshot's vector record ", checked,
                                                  " breaks the vector rule: ", st.message()));
        }
        if (config.metric == Metric::kCosine) {
          double sq = 0;
          for (uint32_t j = 0; j < config.dim; ++j) sq += double{x[j]} * x[j];
          if (std::abs(sq - 1) > 1e-3) {
            return absl::DataLossError(absl::StrCat(
                "the snapshot's vector record ", checked, " has norm ", std::sqrt(sq),
                "; a cosine collection stores unit vectors (the config does not match the "
                "vectors)"));
          }
        }
      }
      return absl::OkStatus();
    };
    ZOOM_RETURN_IF_ERROR(archive.ReadChunks(
        *vectors, chunk_records * record_bytes, [&](const char* p, size_t n) -> absl::Status {
          ZOOM_RETURN_IF_ERROR(check(p, n));
          return store->Append(p, n / record_bytes);
        }));
    ZOOM_RETURN_IF_ERROR(store->Sync());
  }
  // The records: parsed as they stream, committed in batches.
  absl::flat_hash_set<uint64_t> restored_ids;  // to check the fields' ids
  {
    std::string pending;
    std::vector<storage::RecordWrite> writes;
    std::vector<std::string> payload_store;
    uint64_t seen = 0;
    InternalId last = 0;
    auto flush = [&]() -> absl::Status {
      if (writes.empty()) return absl::OkStatus();
      absl::Status st = metadata->Commit(id, writes, {});
      writes.clear();
      payload_store.clear();
      return st;
    };
    ZOOM_RETURN_IF_ERROR(archive.ReadChunks(*recs, 1 << 20, [&](const char* p, size_t n) {
      pending.append(p, n);
      size_t pos = 0;
      payload_store.reserve(payload_store.size() + 4096);
      while (pending.size() - pos >= 16) {
        const uint32_t len = static_cast<uint32_t>(GetLe(pending.data() + pos + 12, 4));
        if (pending.size() - pos < 16 + size_t{len}) break;
        const InternalId rid = static_cast<InternalId>(GetLe(pending.data() + pos, 4));
        const uint64_t ext = GetLe(pending.data() + pos + 4, 8);
        if (rid >= records || (seen > 0 && rid <= last)) {
          return bad("a record is out of order or past the vectors");
        }
        last = rid;
        ++seen;
        payload_store.emplace_back(pending.data() + pos + 16, len);
        pos += 16 + len;
        writes.push_back({rid, ext, {}});
        if (fields_entry != nullptr) restored_ids.insert(ext);
        if (writes.size() >= 4096) {
          for (size_t i = 0; i < writes.size(); ++i) writes[i].payload = payload_store[i];
          ZOOM_RETURN_IF_ERROR(flush());
        }
      }
      for (size_t i = 0; i < writes.size(); ++i) writes[i].payload = payload_store[i];
      pending.erase(0, pos);
      return absl::OkStatus();
    }));
    if (!pending.empty()) return bad("the records entry ends inside a record");
    for (size_t i = 0; i < writes.size(); ++i) writes[i].payload = payload_store[i];
    ZOOM_RETURN_IF_ERROR(flush());
    if (seen != points) return bad("the record count differs from the manifest's");
  }
  // The typed fields: each of a restored point, decodable, in id order.
  if (fields_entry != nullptr) {
    std::string pending;
    std::vector<std::string> values;
    std::vector<uint64_t> exts;
    uint64_t seen = 0, last = 0;
    auto flush = [&]() -> absl::Status {
      std::vector<storage::FieldsWrite> writes(exts.size());
      for (size_t i = 0; i < exts.size(); ++i) writes[i] = {exts[i], values[i]};
      absl::Status st = metadata->CommitFields(id, writes);
      exts.clear();
      values.clear();
      return st;
    };
    ZOOM_RETURN_IF_ERROR(archive.ReadChunks(*fields_entry, 1 << 20, [&](const char* p, size_t n) {
      pending.append(p, n);
      size_t pos = 0;
      while (pending.size() - pos >= 12) {
        const uint64_t ext = GetLe(pending.data() + pos, 8);
        const uint32_t len = static_cast<uint32_t>(GetLe(pending.data() + pos + 8, 4));
        if (pending.size() - pos < 12 + size_t{len}) break;
        if ((seen > 0 && ext <= last) || !restored_ids.contains(ext)) {
          return bad("a point's fields are out of order or of no restored point");
        }
        std::string value(pending.data() + pos + 12, len);
        absl::StatusOr<PayloadFields> decoded = DecodeFields(value);
        if (!decoded.ok() || value.empty()) {
          return bad(absl::StrCat("the fields of point ", ext, " do not decode"));
        }
        // Under the rules an Upsert applies (names, sizes, lists, numbers,
        // geo points, UTF-8).
        if (absl::Status v = ValidateFields(*decoded); !v.ok()) {
          return absl::DataLossError(
              absl::StrCat("the snapshot's fields of point ", ext, ": ", v.message()));
        }
        last = ext;
        ++seen;
        exts.push_back(ext);
        values.push_back(std::move(value));
        pos += 12 + len;
        if (exts.size() >= 4096) ZOOM_RETURN_IF_ERROR(flush());
      }
      pending.erase(0, pos);
      return absl::OkStatus();
    }));
    if (!pending.empty()) return bad("the fields entry ends inside a point");
    ZOOM_RETURN_IF_ERROR(flush());
    if (seen != field_points) return bad("the fields count differs from the manifest's");
  }
  if (index != nullptr) {
    const std::string path = (fs::path(dir) / index_file).string();
    FileSystem& files = options.store.file_system != nullptr ? *options.store.file_system
                                                             : *FileSystem::Posix();
    ZOOM_ASSIGN_OR_RETURN(auto out, files.Open(path, FileSystem::Mode::kTruncate));
    uint64_t at = 0;
    ZOOM_RETURN_IF_ERROR(archive.ReadChunks(*index, 1 << 20, [&](const char* p, size_t n) {
      ZOOM_RETURN_IF_ERROR(out->PWrite(at, p, n));
      at += n;
      return absl::OkStatus();
    }));
    ZOOM_RETURN_IF_ERROR(out->Sync());
    ZOOM_RETURN_IF_ERROR(out->Close());
  }
  CollectionManifest restored;
  restored.space = id;
  restored.vectors = vectors_file;
  restored.snapshot = index_file;
  restored.snapshot_count = index != nullptr ? snapshot_count : 0;
  // What the index was trained on (a key older zoomds neither write nor
  // read: then the automatic retrain assumes snapshot_count).
  if (index != nullptr && manifest.Has("trained_points")) {
    ZOOM_RETURN_IF_ERROR(manifest.Number("trained_points", &restored.trained_points));
  }
  // The index's recall curve (calibration.h; a key older zoomds neither
  // write nor read: then it is measured after the restore). One that does
  // not decode is dropped the same way.
  if (index != nullptr && manifest.Has("calibration")) {
    const std::string text = manifest.String("calibration");
    if (Calibration::Decode(text).ok()) {
      restored.index_epoch = restored.calibration_epoch = 1;
      restored.calibration = text;
    }
  }
  restored.seq = 3;
  // Declared payload indexes (a key older zoomds ignore); filled at Open.
  ZOOM_RETURN_IF_ERROR(DecodeFieldIndexes(manifest.String("field_indexes"),
                                          &restored.field_indexes));
  // A cluster replica's applied log position (a key older zoomds neither
  // write nor read): the restored collection resumes the log after it.
  if (manifest.Has("log_position")) {
    uint64_t log_position = 0, log_version = 0;
    ZOOM_RETURN_IF_ERROR(manifest.Number("log_position", &log_position));
    if (manifest.Has("log_version")) {
      ZOOM_RETURN_IF_ERROR(manifest.Number("log_version", &log_version));
    }
    ZOOM_RETURN_IF_ERROR(metadata->PutLogPosition(id, log_position, log_version));
  }
  // Its write versions (keys older zoomds neither write nor read): pairs
  // of u64 point id, u64 version, ascending by id.
  uint64_t version_points = 0;
  if (manifest.Has("version_points")) {
    ZOOM_RETURN_IF_ERROR(manifest.Number("version_points", &version_points));
  }
  const storage::ArchiveReader::Entry* versions = archive.Find("versions");
  if ((version_points > 0) != (versions != nullptr) ||
      (versions != nullptr && versions->size != version_points * 16)) {
    return bad("the versions entry does not match the manifest");
  }
  if (versions != nullptr) {
    std::string pending;
    std::vector<std::pair<uint64_t, uint64_t>> batch;
    uint64_t seen = 0, last = 0;
    ZOOM_RETURN_IF_ERROR(archive.ReadChunks(*versions, 1 << 20, [&](const char* p, size_t n) {
      pending.append(p, n);
      size_t pos = 0;
      for (; pending.size() - pos >= 16; pos += 16) {
        const uint64_t ext = GetLe(pending.data() + pos, 8);
        if (seen > 0 && ext <= last) return bad("the write versions are out of order");
        batch.push_back({ext, GetLe(pending.data() + pos + 8, 8)});
        last = ext;
        ++seen;
      }
      pending.erase(0, pos);
      if (batch.size() >= 4096) {
        ZOOM_RETURN_IF_ERROR(metadata->PutWriteVersions(id, batch));
        batch.clear();
      }
      return absl::OkStatus();
    }));
    ZOOM_RETURN_IF_ERROR(metadata->PutWriteVersions(id, batch));
  }
  // Their field edits (a key older zoomds neither write nor read), each
  // decoded before it is kept: the archive is untrusted input.
  uint64_t edit_points = 0, edit_bytes = 0;
  if (manifest.Has("edit_points")) {
    ZOOM_RETURN_IF_ERROR(manifest.Number("edit_points", &edit_points));
    ZOOM_RETURN_IF_ERROR(manifest.Number("edit_bytes", &edit_bytes));
  }
  const storage::ArchiveReader::Entry* edits = archive.Find("field_edits");
  if ((edit_points > 0) != (edits != nullptr) ||
      (edits != nullptr && edits->size != edit_bytes)) {
    return bad("the field_edits entry does not match the manifest");
  }
  if (edits != nullptr) {
    std::string pending;
    std::vector<storage::MetadataStore::PointWrite> batch;
    uint64_t seen = 0, last = 0;
    ZOOM_RETURN_IF_ERROR(archive.ReadChunks(*edits, 1 << 20, [&](const char* p, size_t n) {
      pending.append(p, n);
      size_t pos = 0;
      while (pending.size() - pos >= 20) {
        const uint64_t len = GetLe(pending.data() + pos + 16, 4);
        if (len > (uint64_t{1} << 24)) return bad("a field edits record is too long");
        if (pending.size() - pos < 20 + len) break;
        storage::MetadataStore::PointWrite w;
        w.id = GetLe(pending.data() + pos, 8);
        w.version = GetLe(pending.data() + pos + 8, 8);
        w.edits.assign(pending.data() + pos + 20, len);
        if (seen > 0 && w.id <= last) return bad("the field edits are out of order");
        absl::StatusOr<FieldEdits> decoded = DecodeFieldEdits(w.edits);
        if (!decoded.ok() || decoded->empty()) {
          return bad(absl::StrCat("the field edits of point ", w.id, " do not decode"));
        }
        last = w.id;
        ++seen;
        pos += 20 + len;
        batch.push_back(std::move(w));
      }
      pending.erase(0, pos);
      if (batch.size() >= 4096) {
        ZOOM_RETURN_IF_ERROR(metadata->PutWriteRecords(id, batch));
        batch.clear();
      }
      return absl::OkStatus();
    }));
    if (seen != edit_points || !pending.empty()) {
      return bad("the field_edits entry does not match the manifest");
    }
    ZOOM_RETURN_IF_ERROR(metadata->PutWriteRecords(id, batch));
  }
  const std::string state = restored.Encode();
  ZOOM_RETURN_IF_ERROR(metadata->PutState(id, state));
  storage::CollectionRecord record;
  record.name = config.name;
  record.id = id;
  record.config = config.Encode();
  record.state = state;
  ZOOM_ASSIGN_OR_RETURN(std::unique_ptr<Collection> c, Open(dir, metadata, record, options));
  // The archive's index must load over these vectors (Open would serve
  // exact searches and drop it, saying so only in the index state).
  if (index != nullptr && c->Info().index_state != IndexState::kReady) {
    return absl::DataLossError(absl::StrCat("the snapshot's index does not load: ",
                                            c->Info().index_error,
                                            " (restore from an archive zoomd wrote, or one "
                                            "without an index: the collection then builds one)"));
  }
  return c;
}

}  // namespace zoom::server
