// Segment: open, writes and payload index builds (reads: segment_read.cc).
#include "server/engine/segment.h"

#include <algorithm>
#include <filesystem>

#include "absl/cleanup/cleanup.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/timer.h"

namespace zoom::server {

UpsertBatch::UpsertBatch(absl::Span<const PointRef> points, size_t dim) {
  absl::flat_hash_map<uint64_t, size_t> last;
  last.reserve(points.size());
  for (size_t i = 0; i < points.size(); ++i) last[points[i].id] = i;
  const size_t n = last.size();
  vectors.resize(n * dim);
  externals.reserve(n);
  payloads.reserve(n);
  fields.reserve(n);
  encoded.reserve(n);
  for (size_t i = 0; i < points.size(); ++i) {
    if (last[points[i].id] != i) continue;
    const PointRef& p = points[i];
    std::copy_n(p.vector, dim, vectors.data() + externals.size() * dim);
    externals.push_back(p.id);
    payloads.push_back(p.payload);
    fields.push_back(p.fields);
    encoded.push_back(p.fields != nullptr ? EncodeFields(*p.fields) : std::string());
  }
}

absl::StatusOr<std::shared_ptr<Segment>> Segment::Open(
    const std::string& dir, const std::string& vectors_file, uint32_t space, bool create,
    const CollectionConfig& config, const storage::VectorStoreOptions& store_options,
    const EngineOptions& engine_options, storage::MetadataStore* metadata,
    uint32_t collection_id) {
  std::shared_ptr<Segment> seg(new Segment());
  seg->space_ = space;
  seg->collection_id_ = collection_id;
  seg->vectors_file_ = vectors_file;
  seg->name_ = config.name;
  seg->dim_ = config.dim;
  seg->metadata_ = metadata;
  const std::string path = (std::filesystem::path(dir) / vectors_file).string();
  std::unique_ptr<storage::VectorStore> store;
  if (create) {
    ZOOM_ASSIGN_OR_RETURN(store, storage::VectorStore::Create(path, config.dim, config.dtype,
                                                              store_options));
  } else {
    ZOOM_ASSIGN_OR_RETURN(store, storage::VectorStore::Open(path, store_options));
    if (store->dim() != config.dim || store->dtype() != config.dtype) {
      return absl::DataLossError(absl::StrCat("vector file ", path,
                                              " does not match the collection's dim/dtype"));
    }
  }
  const uint64_t count = store->count();
  if (create) {
    seg->ids_.Reserve(count);
    seg->ids_.Publish(count);
  } else {
    uint64_t beyond = 0;
    ZOOM_RETURN_IF_ERROR(seg->ids_.Load(
        count, [&](const auto& fn) { return metadata->ScanRecords(space, fn); }, &beyond));
    if (beyond > 0) {
      ZOOM_LOG(WARNING, "collection ", config.name, ": ", beyond,
               " records past the vector file's end ignored");
    }
  }
  seg->engine_ = std::make_unique<SearchEngine>(config.metric, std::move(store), nullptr,
                                                engine_options);
  return seg;
}

uint64_t Segment::ResidentBytes() const {
  return engine_->IndexBytes() + engine_->CacheBytes() + ids_.Bytes() + payload_.Bytes();
}

absl::Status Segment::SetIndex(std::unique_ptr<index::VectorIndex> index) {
  return engine_->SetIndex(std::move(index));
}

absl::Status Segment::CatchUpIndex(index::VectorIndex* index) const {
  return engine_->CatchUp(index);
}

absl::StatusOr<Calibration> Segment::Calibrate(const CalibrationOptions& options) const {
  return server::Calibrate(*engine_, *this, options);
}

// ---- Writes ------------------------------------------------------------------

absl::Status Segment::CommitRecords(uint64_t base, absl::Span<const storage::RecordWrite> writes,
                                    absl::Span<const InternalId> erased,
                                    absl::Span<const storage::FieldsWrite> fields,
                                    absl::Span<const PayloadFields* const> typed) {
  absl::MutexLock commit(&commit_mu_);
  commits_.fetch_add(1, std::memory_order_acq_rel);  // odd: readers read again
  absl::Cleanup done = [this] { commits_.fetch_add(1, std::memory_order_release); };
  if (absl::Status st = metadata_->Commit(space_, writes, erased, collection_id_, fields);
      !st.ok()) {
    ids_.Publish(base + writes.size());  // the new records stay dead
    return st;
  }
  // See id_tracker.h: the map names the new records, the old ones die,
  // then the new ones become visible.
  for (const auto& wr : writes) ids_.Set(wr.id, wr.external_id);
  for (size_t i = 0; i < typed.size(); ++i) {
    const PayloadFields* f = typed[i];
    if (f != nullptr && !f->empty()) payload_.Update(writes[i].id, nullptr, f);
  }
  for (InternalId old : erased) ids_.Kill(old);
  ids_.Publish(base + writes.size());
  return absl::OkStatus();
}

absl::Status Segment::Upsert(const UpsertBatch& batch) {
  const size_t n = batch.size();
  const uint64_t base = engine_->size();
  if (base + n > (uint64_t{1} << 32) - 1) {
    return absl::ResourceExhaustedError("the collection's vector file is full (2^32 records); "
                                        "compact or split the collection");
  }
  ids_.Reserve(base + n);
  if (absl::Status st = engine_->Add(batch.vectors.data(), n); !st.ok()) {
    ids_.Publish(engine_->size());  // whatever reached the file stays dead
    return st;
  }
  std::vector<storage::RecordWrite> writes(n);
  std::vector<storage::FieldsWrite> fields(n);
  std::vector<std::optional<InternalId>> had;
  ids_.FindAll(batch.externals, &had);
  std::vector<InternalId> erased;
  for (size_t i = 0; i < n; ++i) {
    writes[i] = {static_cast<InternalId>(base + i), batch.externals[i], batch.payloads[i]};
    fields[i] = {batch.externals[i], batch.encoded[i]};
    if (had[i].has_value()) erased.push_back(*had[i]);
  }
  return CommitRecords(base, writes, erased, fields, batch.fields);
}

absl::StatusOr<uint64_t> Segment::Delete(absl::Span<const uint64_t> ids) {
  std::vector<uint64_t> distinct;
  {
    absl::flat_hash_set<uint64_t> seen;
    for (uint64_t id : ids) {
      if (seen.insert(id).second) distinct.push_back(id);
    }
  }
  std::vector<std::optional<InternalId>> found;
  ids_.FindAll(distinct, &found);
  std::vector<InternalId> erased;
  std::vector<storage::FieldsWrite> no_fields;
  for (size_t i = 0; i < found.size(); ++i) {
    if (!found[i].has_value()) continue;
    erased.push_back(*found[i]);
    no_fields.push_back({distinct[i], {}});
  }
  if (erased.empty()) return 0;
  absl::MutexLock commit(&commit_mu_);
  commits_.fetch_add(1, std::memory_order_acq_rel);  // odd: readers read again
  absl::Cleanup done = [this] { commits_.fetch_add(1, std::memory_order_release); };
  ZOOM_RETURN_IF_ERROR(metadata_->Commit(space_, {}, erased, collection_id_, no_fields));
  for (InternalId old : erased) ids_.Kill(old);
  ids_.Publish(ids_.visible());  // the live count drops at once
  return erased.size();
}

absl::StatusOr<uint64_t> Segment::DeleteIfUnchanged(
    absl::Span<const std::pair<uint64_t, InternalId>> points) {
  std::vector<uint64_t> ext;
  ext.reserve(points.size());
  for (const auto& p : points) ext.push_back(p.first);
  std::vector<std::optional<InternalId>> now;
  ids_.FindAll(ext, &now);
  size_t kept = 0;
  for (size_t i = 0; i < points.size(); ++i) {
    if (now[i].has_value() && *now[i] == points[i].second) ext[kept++] = ext[i];
  }
  ext.resize(kept);
  if (ext.empty()) return 0;
  return Delete(ext);
}

absl::StatusOr<uint64_t> Segment::EditFields(
    absl::Span<const uint64_t> ids, const std::function<bool(PayloadFields*)>& change) {
  std::vector<uint64_t> present;
  {
    absl::flat_hash_set<uint64_t> seen;
    std::vector<std::optional<InternalId>> found;
    ids_.FindAll(ids, &found);
    for (size_t i = 0; i < ids.size(); ++i) {
      if (found[i].has_value() && seen.insert(ids[i]).second) present.push_back(ids[i]);
    }
  }
  // The writer's lock keeps every writer of fields out meanwhile: read,
  // change, commit. In chunks (each one batch), so that memory stays
  // bounded however large the stored fields are; an error after a chunk
  // was committed says how many points had changed.
  constexpr size_t kChunk = 256;
  uint64_t changed = 0;
  std::vector<std::string> stored, encoded;
  std::vector<storage::FieldsWrite> writes;
  for (size_t first = 0; first < present.size(); first += kChunk) {
    const absl::Span<const uint64_t> chunk =
        absl::MakeConstSpan(present).subspan(first, std::min(kChunk, present.size() - first));
    const auto failed = [&](uint64_t id, const absl::Status& st) {
      return absl::Status(st.code(), absl::StrCat("point ", id, ": ", st.message(),
                                                  changed > 0 ? absl::StrCat(" (", changed,
                                                                             " points before it "
                                                                             "were changed)")
                                                              : std::string()));
    };
    ZOOM_RETURN_IF_ERROR(metadata_->GetFields(collection_id_, chunk, &stored));
    encoded.clear();
    writes.clear();
    std::vector<std::pair<PayloadFields, PayloadFields>> edits;  // before, after
    std::vector<uint64_t> edited;
    for (size_t i = 0; i < chunk.size(); ++i) {
      absl::StatusOr<PayloadFields> f = DecodeFields(stored[i]);
      if (!f.ok()) return failed(chunk[i], f.status());
      PayloadFields before = *f;
      if (!change(&*f)) continue;
      // e.g. too many fields once merged
      if (absl::Status st = ValidateFields(*f); !st.ok()) return failed(chunk[i], st);
      encoded.push_back(EncodeFields(*f));
      writes.push_back({chunk[i], {}});
      edited.push_back(chunk[i]);
      edits.emplace_back(std::move(before), std::move(*f));
    }
    for (size_t i = 0; i < writes.size(); ++i) writes[i].fields = encoded[i];
    if (writes.empty()) continue;
    ZOOM_RETURN_IF_ERROR(metadata_->CommitFields(collection_id_, writes));
    edits_.fetch_add(1, std::memory_order_release);
    std::vector<std::optional<InternalId>> at;
    ids_.FindAll(edited, &at);
    for (size_t i = 0; i < edited.size(); ++i) {
      if (at[i].has_value()) payload_.Update(*at[i], &edits[i].first, &edits[i].second);
    }
    changed += writes.size();
  }
  return changed;
}

absl::Status Segment::AppendRecords(absl::Span<const float> vectors,
                                    absl::Span<const uint64_t> externals,
                                    absl::Span<const std::string> payloads,
                                    absl::Span<const InternalId> killed) {
  const uint64_t base = engine_->size();
  const size_t n = externals.size();
  ids_.Reserve(base + n);
  if (absl::Status st = engine_->Add(vectors.data(), n); !st.ok()) {
    ids_.Publish(engine_->size());
    return st;
  }
  std::vector<storage::RecordWrite> adds(n);
  for (size_t i = 0; i < n; ++i) {
    adds[i] = {static_cast<InternalId>(base + i), externals[i], payloads[i]};
  }
  return CommitRecords(base, adds, killed, {}, {});
}

// ---- Payload indexes -----------------------------------------------------------

absl::Status Segment::FillFieldIndexes(
    const std::vector<CollectionManifest::FieldIndex>& declared) {
  if (declared.empty()) return absl::OkStatus();
  Stopwatch sw;
  for (const CollectionManifest::FieldIndex& f : declared) {
    ZOOM_ASSIGN_OR_RETURN(FieldIndexType type, ParseFieldIndexType(f.type));
    payload_.AddField(f.field, type, /*ready=*/true);
  }
  uint64_t points = 0;
  ZOOM_RETURN_IF_ERROR(ScanStoredFields(
      [&](uint64_t, InternalId id, const PayloadFields& f) { payload_.Update(id, nullptr, &f); },
      [&](uint64_t n) {
        points += n;
        return absl::OkStatus();
      }));
  ZOOM_LOG(INFO, "collection ", name_, ": ", declared.size(), " payload indexes over ", points,
           " points filled in ", static_cast<int64_t>(sw.ElapsedMicros() / 1000), " ms");
  return absl::OkStatus();
}

absl::Status Segment::FillFieldStep(const std::string& field, uint64_t generation,
                                    uint64_t* from, uint64_t* points, bool* done) {
  *done = false;
  // Deleted (or declared again: that declaration's build fills it).
  if (!payload_.IsCurrent(field, generation)) {
    *done = true;
    return absl::OkStatus();
  }
  std::vector<uint64_t> exts;
  std::vector<FieldValue> values;
  uint64_t next = 0;
  bool more = false;
  ZOOM_RETURN_IF_ERROR(metadata_->ScanFields(
      collection_id_, *from, 4096,
      [&](uint64_t ext, std::string_view bytes) {
        absl::StatusOr<PayloadFields> f = DecodeFields(bytes);
        if (!f.ok()) return f.status();
        if (auto it = f->find(field); it != f->end()) {
          exts.push_back(ext);
          values.push_back(it->second);
        }
        return absl::OkStatus();
      },
      &next, &more));
  std::vector<std::optional<InternalId>> found;
  ids_.FindAll(exts, &found);
  for (size_t i = 0; i < exts.size(); ++i) {
    if (found[i].has_value()) payload_.Fill(field, *found[i], values[i]);
  }
  *points += exts.size();
  *from = next;
  if (!more) {
    payload_.MarkReady(field, generation);
    *done = true;
  }
  return absl::OkStatus();
}

absl::Status Segment::ScanStoredFields(
    const std::function<void(uint64_t, InternalId, const PayloadFields&)>& each,
    const std::function<absl::Status(uint64_t)>& after_batch) const {
  std::vector<uint64_t> exts;
  std::vector<PayloadFields> decoded;
  std::vector<std::optional<InternalId>> found;
  const auto flush = [&] {
    ids_.FindAll(exts, &found);
    for (size_t i = 0; i < exts.size(); ++i) {
      if (found[i].has_value()) each(exts[i], *found[i], decoded[i]);
    }
    const uint64_t n = exts.size();
    exts.clear();
    decoded.clear();
    return after_batch(n);
  };
  ZOOM_RETURN_IF_ERROR(
      metadata_->ScanFields(collection_id_, [&](uint64_t ext, std::string_view bytes) {
        absl::StatusOr<PayloadFields> f = DecodeFields(bytes);
        if (!f.ok()) return f.status();
        exts.push_back(ext);
        decoded.push_back(std::move(*f));
        return exts.size() == 1024 ? flush() : absl::OkStatus();
      }));
  return flush();
}

}  // namespace zoom::server
