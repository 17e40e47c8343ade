#include "server/engine/collection.h"

#include <malloc.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/timer.h"
#include "common/vector_limits.h"
#include "server/engine/compactor.h"

namespace zoom::server {
namespace {

namespace fs = std::filesystem;

// Returns the heap's free memory to the system: after a build or a
// compaction, glibc keeps the staging buffers' pages (at 1M points the
// server's RSS stayed ~130 MB above what it serves from).
void ReleaseFreedMemory() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

}  // namespace

const char* IndexStateName(IndexState state) {
  switch (state) {
    case IndexState::kNone: return "NONE";
    case IndexState::kBuilding: return "BUILDING";
    case IndexState::kReady: return "READY";
    case IndexState::kFailed: return "FAILED";
  }
  return "UNKNOWN";
}

// ---- Open / create -----------------------------------------------------------

absl::StatusOr<std::shared_ptr<Segment>> Collection::OpenSegment(uint32_t space,
                                                                 const std::string& vectors_file,
                                                                 bool create) const {
  return Segment::Open(dir_, vectors_file, space, create, config_, options_.store,
                       EngineOptionsFor(), *metadata_);
}

EngineOptions Collection::EngineOptionsFor() const {
  EngineOptions e = options_.engine;
  e.cache_bytes = std::min(config_.cache_bytes > 0 ? config_.cache_bytes : e.cache_bytes,
                           options_.max_cache_bytes);
  return e;
}

absl::StatusOr<std::unique_ptr<Collection>> Collection::Create(
    const std::string& dir, storage::MetadataStore* metadata, uint32_t id,
    const CollectionConfig& config, const CollectionOptions& options) {
  std::error_code ec;
  if (!fs::create_directories(dir, ec) || ec) {
    return absl::InternalError(absl::StrCat("cannot create the collection directory ", dir, ": ",
                                            ec ? ec.message() : "it exists"));
  }
  std::unique_ptr<Collection> c(new Collection());
  c->dir_ = dir;
  c->metadata_ = metadata;
  c->id_ = id;
  c->config_ = config;
  c->options_ = options;
  ZOOM_ASSIGN_OR_RETURN(auto seg, c->OpenSegment(id, "vectors-1.zvec", /*create=*/true));
  {
    absl::MutexLock w(&c->write_mu_);
    c->manifest_ = CollectionManifest();
    c->manifest_.space = id;
    c->manifest_.vectors = seg->vectors_file;
    c->manifest_.seq = 2;
    {
      absl::MutexLock m(&c->segment_mu_);
      c->segment_ = std::move(seg);
    }
    ZOOM_RETURN_IF_ERROR(c->SaveManifestLocked());
  }
  return c;
}

absl::StatusOr<std::unique_ptr<Collection>> Collection::Open(
    const std::string& dir, storage::MetadataStore* metadata,
    const storage::CollectionRecord& record, const CollectionOptions& options) {
  ZOOM_ASSIGN_OR_RETURN(CollectionConfig config, CollectionConfig::Decode(record.config));
  if (record.state.empty()) {
    // Create saves the state before the collection is handed out: without
    // one, a crash interrupted the create and nothing was ever stored in it.
    // Start it over, empty (instead of failing the whole database's open).
    std::error_code ec;
    fs::remove_all(dir, ec);
    return Create(dir, metadata, record.id, config, options);
  }
  ZOOM_ASSIGN_OR_RETURN(CollectionManifest manifest,
                        CollectionManifest::Decode(record.state, record.id));
  std::unique_ptr<Collection> c(new Collection());
  c->dir_ = dir;
  c->metadata_ = metadata;
  c->id_ = record.id;
  c->config_ = config;
  c->options_ = options;

  absl::MutexLock w(&c->write_mu_);
  ZOOM_ASSIGN_OR_RETURN(uint64_t log_position, metadata->GetLogPosition(record.id));
  c->log_position_.store(log_position, std::memory_order_release);
  // An interrupted compaction's records, and those of segments retired
  // before the last close, are garbage now.
  if (manifest.pending_space != 0) ZOOM_RETURN_IF_ERROR(metadata->DropRecords(manifest.pending_space));
  for (uint32_t space : manifest.retired_spaces) ZOOM_RETURN_IF_ERROR(metadata->DropRecords(space));
  manifest.pending_space = 0;
  manifest.retired_spaces.clear();
  // Files the manifest does not name are left-overs of an interrupted
  // compaction or snapshot: remove them.
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name != manifest.vectors && name != manifest.snapshot) fs::remove(entry.path(), ec);
  }
  ZOOM_ASSIGN_OR_RETURN(auto seg,
                        c->OpenSegment(manifest.space, manifest.vectors, /*create=*/false));
  const std::string snapshot = manifest.snapshot;
  const uint64_t snapshot_count = manifest.snapshot_count;
  const uint64_t trained_points = manifest.trained_points;
  const double code_error = manifest.code_error;
  manifest.snapshot.clear();
  manifest.snapshot_count = 0;
  manifest.trained_points = 0;
  manifest.code_error = 0;
  if (!snapshot.empty()) {
    Stopwatch sw;
    index::LoadIndexOptions load_options;  // the config decides the link layout
    if (config.index.kind == index::IndexKind::kHnswPq) {
      load_options.compact_links = config.index.hnsw.compact_links;
    }
    auto idx = index::LoadIndex((fs::path(dir) / snapshot).string(), load_options);
    if (idx.ok() && (*idx)->spec().pq.code != config.index.pq.code) {
      // Written by a zoomd that did not know the config's code (a
      // downgrade and back): not what the collection says it is.
      idx = absl::FailedPreconditionError(absl::StrCat(
          "its code is ", index::CodeKindName((*idx)->spec().pq.code), ", the collection's ",
          index::CodeKindName(config.index.pq.code)));
    }
    absl::Status st = idx.ok() ? seg->engine->SetIndex(std::move(*idx)) : idx.status();
    const uint64_t visible = seg->ids.visible();
    if (st.ok()) {
      manifest.snapshot = snapshot;
      manifest.snapshot_count = snapshot_count;
      manifest.trained_points = trained_points;
      manifest.code_error = code_error;
      c->index_state_ = IndexState::kReady;
      ZOOM_LOG(INFO, "collection ", config.name, ": index snapshot ", snapshot, " loaded, ",
               visible - std::min(visible, manifest.snapshot_count), " points replayed, ",
               static_cast<int64_t>(sw.ElapsedMicros() / 1000), " ms");
    } else {
      ZOOM_LOG(WARNING, "collection ", config.name, ": index snapshot ", snapshot,
               " unusable (", st.message(), "); searching exactly until BuildIndex");
      c->index_state_ = IndexState::kFailed;
      c->build_.set_last_status(absl::Status(
          st.code(), absl::StrCat("index snapshot ", snapshot, " unusable: ", st.message())));
    }
  }
  if (!manifest.calibration.empty()) {
    absl::StatusOr<Calibration> cal = Calibration::Decode(manifest.calibration);
    if (cal.ok()) {
      c->SetCalibration(std::make_shared<const Calibration>(*std::move(cal)),
                        manifest.calibration_epoch == manifest.index_epoch);
    } else {
      ZOOM_LOG(WARNING, "collection ", config.name, ": stored calibration dropped (",
               cal.status().message(), "); it is measured again");
      manifest.calibration.clear();
    }
  }
  ZOOM_RETURN_IF_ERROR(c->FillPayloadIndex(seg.get(), manifest.field_indexes));
  c->manifest_ = std::move(manifest);
  c->trained_points_ = c->TrainedPointsLocked();
  c->code_error_base_ = c->manifest_.code_error;
  {
    absl::MutexLock m(&c->segment_mu_);
    c->segment_ = std::move(seg);
  }
  return c;
}

absl::Status Collection::ScanStoredFields(
    const IdTracker& ids,
    const std::function<void(uint64_t, InternalId, const PayloadFields&)>& each,
    const std::function<absl::Status(uint64_t)>& after_batch) const {
  std::vector<uint64_t> exts;
  std::vector<PayloadFields> decoded;
  std::vector<std::optional<InternalId>> found;
  const auto flush = [&] {
    ids.FindAll(exts, &found);
    for (size_t i = 0; i < exts.size(); ++i) {
      if (found[i].has_value()) each(exts[i], *found[i], decoded[i]);
    }
    const uint64_t n = exts.size();
    exts.clear();
    decoded.clear();
    return after_batch(n);
  };
  ZOOM_RETURN_IF_ERROR(metadata_->ScanFields(id_, [&](uint64_t ext, std::string_view bytes) {
    absl::StatusOr<PayloadFields> f = DecodeFields(bytes);
    if (!f.ok()) return f.status();
    exts.push_back(ext);
    decoded.push_back(std::move(*f));
    return exts.size() == 1024 ? flush() : absl::OkStatus();
  }));
  return flush();
}

absl::Status Collection::FillPayloadIndex(
    Segment* seg, const std::vector<CollectionManifest::FieldIndex>& declared) const {
  if (declared.empty()) return absl::OkStatus();
  Stopwatch sw;
  for (const CollectionManifest::FieldIndex& f : declared) {
    ZOOM_ASSIGN_OR_RETURN(FieldIndexType type, ParseFieldIndexType(f.type));
    seg->payload.AddField(f.field, type, /*ready=*/true);
  }
  uint64_t points = 0;
  ZOOM_RETURN_IF_ERROR(ScanStoredFields(
      seg->ids,
      [&](uint64_t, InternalId id, const PayloadFields& f) {
        seg->payload.Update(id, nullptr, &f);
      },
      [&](uint64_t n) {
        points += n;
        return absl::OkStatus();
      }));
  ZOOM_LOG(INFO, "collection ", config_.name, ": ", declared.size(), " payload indexes over ",
           points, " points filled in ", static_cast<int64_t>(sw.ElapsedMicros() / 1000), " ms");
  return absl::OkStatus();
}

bool Collection::FieldBuildRunning(const std::string& field) {
  absl::MutexLock b(&field_build_mu_);
  for (const FieldBuild& f : field_builds_) {
    if (f.field == field && !f.done->load()) return true;
  }
  return false;
}

absl::Status Collection::CreateFieldIndex(const std::string& field, FieldIndexType type,
                                          bool background) {
  uint64_t generation = 0;
  ZOOM_RETURN_IF_ERROR(ValidateFieldIndexName(field));
  {
    absl::MutexLock w(&write_mu_);
    if (dropped_) return DroppedError();
    bool declared = false;
    for (const CollectionManifest::FieldIndex& f : manifest_.field_indexes) {
      if (f.field != field) continue;
      if (f.type != FieldIndexTypeName(type)) {
        return absl::FailedPreconditionError(absl::StrCat(
            "field '", field.substr(0, 64), "' has a ", f.type, " index; delete it first"));
      }
      // Declared already: OK when built (or building); a build that failed
      // is started again below.
      if (Current()->payload.IsReady(field) || FieldBuildRunning(field)) return absl::OkStatus();
      declared = true;
    }
    if (!declared) {
      if (manifest_.field_indexes.size() >= 64) {
        return absl::ResourceExhaustedError("a collection has at most 64 payload indexes");
      }
      manifest_.field_indexes.push_back({field, FieldIndexTypeName(type)});
      if (absl::Status st = SaveManifestLocked(); !st.ok()) {
        manifest_.field_indexes.pop_back();
        return st;
      }
    }
    // Writes keep it current from here on; the build fills in the rest.
    generation = Current()->payload.AddField(field, type, /*ready=*/false);
  }
  if (!background) return BuildFieldIndex(field, generation);
  absl::MutexLock b(&field_build_mu_);
  // Builds that ended are joined here (and the rest at destruction).
  for (auto it = field_builds_.begin(); it != field_builds_.end();) {
    if (it->done->load()) {
      it->thread.join();
      it = field_builds_.erase(it);
    } else {
      ++it;
    }
  }
  auto done = std::make_shared<std::atomic<bool>>(false);
  FieldBuild build;
  build.field = field;
  build.done = done;
  build.thread = std::thread([this, field, generation, done] {
    BuildFieldIndex(field, generation).IgnoreError();  // logged; filters scan meanwhile
    done->store(true);
  });
  field_builds_.push_back(std::move(build));
  return absl::OkStatus();
}

absl::Status Collection::BuildFieldIndex(const std::string& field, uint64_t generation) {
  // In chunks under the write lock: each chunk reads the fields as they
  // are now, and writers update the index between chunks (idempotent).
  Stopwatch sw;
  std::shared_ptr<Segment> seg;
  uint64_t from = 0, points = 0;
  for (bool more = true; more;) {
    absl::MutexLock w(&write_mu_);
    if (dropped_) return DroppedError();
    if (stopping_) return absl::CancelledError("the collection is closing");
    std::shared_ptr<Segment> now = Current();
    // Compacted: the new segment's index is complete.
    if (seg != nullptr && now != seg) return absl::OkStatus();
    seg = now;
    // Deleted (or declared again: that declaration's build fills it).
    if (!seg->payload.IsCurrent(field, generation)) return absl::OkStatus();
    std::vector<uint64_t> exts;
    std::vector<FieldValue> values;
    uint64_t next = 0;
    absl::Status st = metadata_->ScanFields(
        id_, from, 4096,
        [&](uint64_t ext, std::string_view bytes) {
          absl::StatusOr<PayloadFields> f = DecodeFields(bytes);
          if (!f.ok()) return f.status();
          if (auto it = f->find(field); it != f->end()) {
            exts.push_back(ext);
            values.push_back(it->second);
          }
          return absl::OkStatus();
        },
        &next, &more);
    if (!st.ok()) {
      ZOOM_LOG(WARNING, "collection ", config_.name, ": payload index of '", field,
               "' failed: ", st.message(), " (filters on it scan; CreateFieldIndex retries)");
      return st;  // stays not ready
    }
    std::vector<std::optional<InternalId>> found;
    seg->ids.FindAll(exts, &found);
    for (size_t i = 0; i < exts.size(); ++i) {
      if (found[i].has_value()) seg->payload.Fill(field, *found[i], values[i]);
    }
    points += exts.size();
    from = next;
  }
  seg->payload.MarkReady(field, generation);
  ZOOM_LOG(INFO, "collection ", config_.name, ": payload index of '", field, "' built over ",
           points, " points in ", static_cast<int64_t>(sw.ElapsedMicros() / 1000), " ms");
  return absl::OkStatus();
}

absl::Status Collection::DeleteFieldIndex(const std::string& field) {
  absl::MutexLock w(&write_mu_);
  if (dropped_) return DroppedError();
  auto& list = manifest_.field_indexes;
  auto it = std::find_if(list.begin(), list.end(),
                         [&](const CollectionManifest::FieldIndex& f) { return f.field == field; });
  if (it == list.end()) {
    return absl::NotFoundError(
        absl::StrCat("field '", field.substr(0, 64), "' has no payload index"));
  }
  const CollectionManifest::FieldIndex removed = *it;
  list.erase(it);
  if (absl::Status st = SaveManifestLocked(); !st.ok()) {
    list.push_back(removed);
    return st;
  }
  Current()->payload.RemoveField(field);
  return absl::OkStatus();
}

void Collection::JoinFieldBuilds() {
  stopping_ = true;
  std::vector<FieldBuild> builds;
  {
    absl::MutexLock b(&field_build_mu_);
    builds.swap(field_builds_);
  }
  for (FieldBuild& b : builds) b.thread.join();
  stopping_ = false;
}

Collection::~Collection() {
  JoinFieldBuilds();
  closing_ = true;  // a calibration (its own or a build's) stops
  calibrate_.Join();
  build_.Join();
  absl::MutexLock w(&write_mu_);
  std::shared_ptr<Segment> seg = Current();
  const std::shared_ptr<const index::VectorIndex> idx = seg ? seg->engine->index() : nullptr;
  if (!dropped_ && idx != nullptr && idx->size() > manifest_.snapshot_count) {
    absl::Status st = SaveSnapshotLocked();
    if (!st.ok()) {
      ZOOM_LOG(WARNING, "collection ", config_.name, ": snapshot at close failed: ",
               st.message());
    }
  }
  if (!dropped_) ReleaseRetiredLocked();
}

std::shared_ptr<Segment> Collection::Current() const {
  absl::MutexLock m(&segment_mu_);
  return segment_;
}

std::shared_ptr<const SearchEngine> Collection::engine() const {
  std::shared_ptr<Segment> seg = Current();
  return std::shared_ptr<const SearchEngine>(seg, seg->engine.get());
}

uint32_t Collection::record_space() const { return Current()->space; }

std::vector<uint32_t> Collection::record_spaces() const {
  absl::MutexLock w(&write_mu_);
  std::vector<uint32_t> spaces{Current()->space};
  for (const auto& seg : retired_) spaces.push_back(seg->space);
  return spaces;
}

absl::Status Collection::DroppedError() const {
  return absl::NotFoundError(absl::StrCat("collection '", config_.name, "' was dropped"));
}

absl::Status Collection::SaveManifestLocked() {
  if (dropped_) return absl::NotFoundError("the collection was dropped");
  std::shared_ptr<Segment> seg = Current();
  manifest_.space = seg->space;
  manifest_.vectors = seg->vectors_file;
  ZOOM_RETURN_IF_ERROR(metadata_->PutState(id_, manifest_.Encode()));
  trained_points_ = TrainedPointsLocked();
  code_error_base_ = manifest_.code_error;
  return absl::OkStatus();
}

absl::Status Collection::SaveSnapshotLocked() {
  std::shared_ptr<Segment> seg = Current();
  const std::shared_ptr<const index::VectorIndex> idx = seg->engine->index();
  if (idx == nullptr) return absl::OkStatus();
  const CollectionManifest before = manifest_;
  const std::string name = manifest_.NextFile("index", ".zidx");
  const std::string path = (fs::path(dir_) / name).string();
  ZOOM_RETURN_IF_ERROR(idx->Save(path, options_.store.file_system));
  manifest_.snapshot = name;
  manifest_.snapshot_count = idx->size();
  if (absl::Status st = SaveManifestLocked(); !st.ok()) {
    std::error_code ec;
    fs::remove(path, ec);
    manifest_.snapshot = before.snapshot;
    manifest_.snapshot_count = before.snapshot_count;
    return st;
  }
  if (!before.snapshot.empty()) {
    std::error_code ec;
    fs::remove(fs::path(dir_) / before.snapshot, ec);
  }
  return absl::OkStatus();
}

void Collection::ReleaseRetired() {
  absl::MutexLock w(&write_mu_);
  if (!dropped_) ReleaseRetiredLocked();
}

void Collection::ReleaseRetiredLocked() {
  bool released = false;
  for (auto it = retired_.begin(); it != retired_.end();) {
    // Only this list holds it: no reader has it, and none can get it (it
    // is not the serving segment).
    if (it->use_count() != 1) {
      ++it;
      continue;
    }
    const uint32_t space = (*it)->space;
    if (absl::Status st = metadata_->DropRecords(space); !st.ok()) {
      ZOOM_LOG(WARNING, "collection ", config_.name, ": cannot drop the records of retired space ",
               space, " yet: ", st.message());
      ++it;
      continue;
    }
    it = retired_.erase(it);  // frees the segment (its index, its file's descriptor)
    auto& spaces = manifest_.retired_spaces;
    spaces.erase(std::remove(spaces.begin(), spaces.end(), space), spaces.end());
    released = true;
  }
  // (A failure to record it leaves the space listed: dropped again at the
  // next open, which is harmless.)
  if (released) SaveManifestLocked().IgnoreError();
}

// ---- Writes ------------------------------------------------------------------

absl::Status Collection::SetLogPosition(uint64_t position) {
  absl::MutexLock w(&write_mu_);
  if (dropped_) return DroppedError();
  ZOOM_RETURN_IF_ERROR(metadata_->PutLogPosition(id_, position));
  log_position_.store(position, std::memory_order_release);
  return absl::OkStatus();
}

absl::Status ValidateFieldIndexName(std::string_view field) {
  if (field.empty() || field.size() > FieldLimits().max_name_bytes ||
      field.find('\0') != std::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a field name has 1..", FieldLimits().max_name_bytes, " bytes and no NUL byte"));
  }
  return absl::OkStatus();
}

absl::Status ValidatePoints(const CollectionConfig& config, absl::Span<const PointRef> points) {
  if (points.empty()) return absl::InvalidArgumentError("no points to upsert");
  const size_t d = config.dim;
  for (size_t i = 0; i < points.size(); ++i) {
    const float* v = points[i].vector;
    if (absl::Status st = CheckVectorMagnitude(config.metric, v, d); !st.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("point ", points[i].id, " (#", i, "): ", st.message()));
    }
    if (points[i].fields != nullptr) {
      if (absl::Status st = ValidateFields(*points[i].fields); !st.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("point ", points[i].id, " (#", i, "): ", st.message()));
      }
    }
    if (config.dtype == storage::DType::kUint8) {
      for (size_t j = 0; j < d; ++j) {
        if (v[j] < 0 || v[j] > 255 || v[j] != std::floor(v[j])) {
          return absl::InvalidArgumentError(absl::StrCat(
              "point ", points[i].id, " (#", i, "): component ", j, " is ", v[j],
              "; a uint8 collection takes integers 0..255"));
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Collection::Upsert(absl::Span<const PointRef> points) {
  ZOOM_RETURN_IF_ERROR(ValidatePoints(config_, points));
  const size_t d = config_.dim;
  // Later duplicates win.
  absl::flat_hash_map<uint64_t, size_t> last;
  last.reserve(points.size());
  for (size_t i = 0; i < points.size(); ++i) last[points[i].id] = i;
  std::vector<size_t> order;
  order.reserve(last.size());
  for (size_t i = 0; i < points.size(); ++i) {
    if (last[points[i].id] == i) order.push_back(i);
  }
  const size_t n = order.size();
  std::vector<float> vectors(n * d);
  std::vector<uint64_t> externals(n);
  std::vector<std::string> encoded(n);  // typed fields ("" = none: erased)
  std::vector<storage::FieldsWrite> fields(n);
  for (size_t i = 0; i < n; ++i) {
    const PointRef& p = points[order[i]];
    std::copy_n(p.vector, d, vectors.data() + i * d);
    externals[i] = p.id;
    if (p.fields != nullptr) encoded[i] = EncodeFields(*p.fields);
    fields[i] = {p.id, encoded[i]};
  }

  absl::MutexLock w(&write_mu_);
  if (dropped_) return DroppedError();
  std::shared_ptr<Segment> seg = Current();
  SearchEngine& engine = *seg->engine;
  IdTracker& ids = seg->ids;
  const uint64_t base = engine.size();
  if (base + n > (uint64_t{1} << 32) - 1) {
    return absl::ResourceExhaustedError("the collection's vector file is full (2^32 records); "
                                        "compact or split the collection");
  }
  ids.Reserve(base + n);
  absl::Status st = engine.Add(vectors.data(), n);
  if (!st.ok()) {
    ids.Publish(engine.size());  // whatever reached the file stays dead
    return st;
  }
  std::vector<storage::RecordWrite> writes(n);
  std::vector<std::optional<InternalId>> had;
  ids.FindAll(externals, &had);
  std::vector<InternalId> erased;
  for (size_t i = 0; i < n; ++i) {
    writes[i] = {static_cast<InternalId>(base + i), externals[i], points[order[i]].payload};
    if (had[i].has_value()) erased.push_back(*had[i]);
  }
  st = metadata_->Commit(seg->space, writes, erased, id_, fields);
  if (!st.ok()) {
    ids.Publish(base + n);  // the new records stay dead
    return st;
  }
  // See id_tracker.h: the map names the new records, the old ones die,
  // then the new ones become visible.
  for (const auto& wr : writes) ids.Set(wr.id, wr.external_id);
  for (size_t i = 0; i < n; ++i) {
    const PayloadFields* f = points[order[i]].fields;
    if (f != nullptr && !f->empty()) seg->payload.Update(writes[i].id, nullptr, f);
  }
  for (InternalId old : erased) ids.Kill(old);
  ids.Publish(base + n);
  MaybeAutoMaintainLocked();
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> Collection::Delete(absl::Span<const uint64_t> ids) {
  if (ids.empty()) return absl::InvalidArgumentError("no ids to delete");
  absl::MutexLock w(&write_mu_);
  if (dropped_) return DroppedError();
  return DeleteLocked(ids);
}

absl::StatusOr<uint64_t> Collection::DeleteByFilter(const Filter& given, bool all) {
  ZOOM_RETURN_IF_ERROR(ValidateFilter(given));
  Filter filter = given;
  NormalizeFilter(&filter);
  ZOOM_RETURN_IF_ERROR(CheckDeleteFilter(filter, all));
  // The filter is evaluated without the write lock (a scan of the stored
  // payloads can take seconds: writers must not wait for it), then each
  // batch is deleted under the lock after a check that the evaluation still
  // holds: the same segment, no payload edited in place since (edits_), and
  // each point still at the internal id that matched (an upsert moves it,
  // a delete removes it). When writes keep invalidating it, the third
  // attempt evaluates under the lock, so the call always ends.
  constexpr size_t kBatch = 65536;
  constexpr int kOptimisticAttempts = 2;
  uint64_t deleted = 0;
  const auto failed = [&](const absl::Status& st) {
    return absl::Status(st.code(),
                        absl::StrCat(st.message(), " (", deleted,
                                     " points passing the filter were deleted before it)"));
  };
  std::vector<uint64_t> ext;
  std::vector<std::optional<InternalId>> now;
  // Deletes those of found[first, first + n) still at the internal id that
  // matched. Holds write_mu_.
  const auto delete_batch = [&](const Segment& seg,
                                const std::vector<std::pair<uint64_t, InternalId>>& found,
                                size_t first, size_t n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_)
      -> absl::Status {
    ext.clear();
    for (size_t i = 0; i < n; ++i) ext.push_back(found[first + i].first);
    seg.ids.FindAll(ext, &now);
    size_t kept = 0;
    for (size_t i = 0; i < n; ++i) {
      if (now[i].has_value() && *now[i] == found[first + i].second) ext[kept++] = ext[i];
    }
    ext.resize(kept);
    if (ext.empty()) return absl::OkStatus();
    absl::StatusOr<uint64_t> d = DeleteLocked(ext);
    if (!d.ok()) return failed(d.status());
    deleted += *d;
    return absl::OkStatus();
  };
  const auto evaluate = [&](const Segment& seg,
                            std::vector<std::pair<uint64_t, InternalId>>* found) -> absl::Status {
    MatchSet match;
    bool scan = false;
    if (absl::Status st = MatchFilter(seg, filter, &match, &scan); !st.ok()) return failed(st);
    found->clear();
    match.ForEach([&](InternalId id) { found->push_back({seg.ids.External(id), id}); });
    // Every live point matching: refused unless asked for by name (a
    // filter meant to be narrow must not wipe the collection).
    if (absl::Status st = CheckDeleteMatches(found->size(), seg.ids.live(), all, name());
        !st.ok()) {
      return failed(st);
    }
    return absl::OkStatus();
  };
  std::vector<std::pair<uint64_t, InternalId>> found;  // external, internal
  for (int attempt = 0; attempt < kOptimisticAttempts; ++attempt) {
    std::shared_ptr<Segment> seg = Current();
    const uint64_t edits = edits_.load(std::memory_order_acquire);
    ZOOM_RETURN_IF_ERROR(evaluate(*seg, &found));
    bool stale = false;
    for (size_t first = 0; first < found.size(); first += kBatch) {
      absl::MutexLock w(&write_mu_);
      if (dropped_) return DroppedError();
      if (Current() != seg || edits_.load(std::memory_order_relaxed) != edits) {
        stale = true;
        break;
      }
      ZOOM_RETURN_IF_ERROR(delete_batch(*seg, found, first, std::min(kBatch, found.size() - first)));
    }
    if (!stale) return deleted;
  }
  absl::MutexLock w(&write_mu_);
  if (dropped_) return DroppedError();
  std::shared_ptr<Segment> seg = Current();
  ZOOM_RETURN_IF_ERROR(evaluate(*seg, &found));
  for (size_t first = 0; first < found.size(); first += kBatch) {
    ZOOM_RETURN_IF_ERROR(delete_batch(*seg, found, first, std::min(kBatch, found.size() - first)));
  }
  return deleted;
}

absl::Status Collection::Scroll(const Filter* filter, uint64_t offset, uint32_t limit,
                                bool with_vectors, bool with_payload, std::vector<PointData>* out,
                                std::optional<uint64_t>* next, bool* scan,
                                uint64_t max_answer_bytes) const {
  out->clear();
  next->reset();
  *scan = false;
  if (limit == 0) return absl::InvalidArgumentError("limit must be at least 1");
  std::shared_ptr<Segment> seg = Current();
  // The ids >= offset that pass, the limit + 1 smallest of them.
  std::vector<uint64_t> ext;
  const auto take = [&](InternalId id) {
    const uint64_t e = seg->ids.External(id);
    if (e >= offset) ext.push_back(e);
  };
  if (filter != nullptr && !filter->empty()) {
    ZOOM_RETURN_IF_ERROR(ValidateFilter(*filter));
    MatchSet match;
    ZOOM_RETURN_IF_ERROR(MatchFilter(*seg, *filter, &match, scan));
    match.ForEach(take);
  } else {
    for (const auto& [id, e] : seg->ids.LiveRecords()) {
      if (e >= offset) ext.push_back(e);
    }
  }
  if (ext.size() > limit) {
    std::nth_element(ext.begin(), ext.begin() + limit, ext.end());
    *next = ext[limit];
    ext.resize(limit);
  }
  std::sort(ext.begin(), ext.end());
  return Get(ext, with_vectors, with_payload, out, max_answer_bytes);
}

absl::StatusOr<uint64_t> Collection::DeleteLocked(absl::Span<const uint64_t> ids) {
  std::shared_ptr<Segment> seg = Current();
  std::vector<uint64_t> distinct;
  {
    absl::flat_hash_set<uint64_t> seen;
    for (uint64_t id : ids) {
      if (seen.insert(id).second) distinct.push_back(id);
    }
  }
  std::vector<std::optional<InternalId>> found;
  seg->ids.FindAll(distinct, &found);
  std::vector<InternalId> erased;
  std::vector<storage::FieldsWrite> no_fields;
  for (size_t i = 0; i < found.size(); ++i) {
    if (!found[i].has_value()) continue;
    erased.push_back(*found[i]);
    no_fields.push_back({distinct[i], {}});
  }
  if (erased.empty()) return 0;
  ZOOM_RETURN_IF_ERROR(metadata_->Commit(seg->space, {}, erased, id_, no_fields));
  for (InternalId old : erased) seg->ids.Kill(old);
  seg->ids.Publish(seg->ids.visible());  // the live count drops at once
  MaybeAutoMaintainLocked();
  return erased.size();
}

absl::StatusOr<uint64_t> Collection::EditFields(
    absl::Span<const uint64_t> ids, const std::function<bool(PayloadFields*)>& change) {
  if (ids.empty()) return absl::InvalidArgumentError("no ids to change the payload of");
  absl::MutexLock w(&write_mu_);
  if (dropped_) return DroppedError();
  std::shared_ptr<Segment> seg = Current();
  std::vector<uint64_t> present;
  {
    absl::flat_hash_set<uint64_t> seen;
    std::vector<std::optional<InternalId>> found;
    seg->ids.FindAll(ids, &found);
    for (size_t i = 0; i < ids.size(); ++i) {
      if (found[i].has_value() && seen.insert(ids[i]).second) present.push_back(ids[i]);
    }
  }
  // The write lock keeps every writer of fields out meanwhile: read,
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
    ZOOM_RETURN_IF_ERROR(metadata_->GetFields(id_, chunk, &stored));
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
    ZOOM_RETURN_IF_ERROR(metadata_->CommitFields(id_, writes));
    edits_.fetch_add(1, std::memory_order_release);
    std::vector<std::optional<InternalId>> at;
    seg->ids.FindAll(edited, &at);
    for (size_t i = 0; i < edited.size(); ++i) {
      if (at[i].has_value()) seg->payload.Update(*at[i], &edits[i].first, &edits[i].second);
    }
    changed += writes.size();
  }
  return changed;
}

absl::StatusOr<uint64_t> Collection::SetPayload(absl::Span<const uint64_t> ids,
                                                const PayloadFields& fields, bool overwrite) {
  ZOOM_RETURN_IF_ERROR(ValidateFields(fields));
  return EditFields(ids, [&](PayloadFields* f) {
    if (overwrite) {
      if (*f == fields) return false;
      *f = fields;
      return true;
    }
    bool changed = false;
    for (const auto& [name, value] : fields) {
      auto [it, inserted] = f->try_emplace(name, value);
      if (!inserted && !(it->second == value)) {
        it->second = value;
        changed = true;
      }
      changed = changed || inserted;
    }
    return changed;
  });
}

absl::StatusOr<uint64_t> Collection::DeletePayload(absl::Span<const uint64_t> ids,
                                                   absl::Span<const std::string> keys) {
  return EditFields(ids, [&](PayloadFields* f) {
    if (f->empty()) return false;
    if (keys.empty()) {
      f->clear();
      return true;
    }
    bool changed = false;
    for (const std::string& k : keys) changed = f->erase(k) > 0 || changed;
    return changed;
  });
}

void Collection::MaybeAutoMaintainLocked() {
  if (closing_) return;  // the server stops: nothing new starts
  std::shared_ptr<Segment> seg = Current();
  const uint64_t live = seg->ids.live();
  // After a failed build, the automatic one waits for the backoff (else
  // every write would start it again).
  if (options_.auto_build_min_points > 0 && live >= options_.auto_build_min_points &&
      seg->engine->index() == nullptr && !build_.running() && MaintenanceDue()) {
    absl::Status st = StartBuild();
    ZOOM_LOG(INFO, "collection ", config_.name, ": ", live, " points, automatic index build: ",
             st.ok() ? absl::string_view("started") : st.message());
    return;
  }
  // Retraining, in the background while the old index keeps serving
  // (SetIndex swaps at the end), for one of two reasons:
  // - growth: an index trained on far fewer points than the collection now
  //   holds has too few lists and a PQ fitted to old data;
  // - drift: the codes fit the latest points much worse than the first ones
  //   added after the build (the baseline, kept in the manifest so that a
  //   restart does not take a drifted window for it).
  const std::shared_ptr<const index::VectorIndex> idx = seg->engine->index();
  if (idx == nullptr || compacting_.load() || build_.running()) return;
  std::string why;
  bool drift = false;
  const uint64_t trained = TrainedPointsLocked();
  if (options_.auto_retrain_growth > 0 && trained > 0 &&
      static_cast<double>(live) >= options_.auto_retrain_growth * static_cast<double>(trained)) {
    why = absl::StrCat(live, " points, ",
                       absl::SixDigits(static_cast<double>(live) / static_cast<double>(trained)),
                       "x the ", trained, " its index was trained on");
  } else if (options_.auto_retrain_drift > 0) {
    const index::CodeErrorStats e = idx->CodeError();
    if (e.windows > 0 && manifest_.code_error == 0 && e.first_window_mean > 0) {
      manifest_.code_error = e.first_window_mean;
      if (absl::Status st = SaveManifestLocked(); !st.ok()) {
        ZOOM_LOG(WARNING, "collection ", config_.name, ": saving the code error baseline: ",
                 st.message());
      }
    }
    const double base = manifest_.code_error;
    if (e.windows > 0 && base > 0 && e.latest_window_mean >= options_.auto_retrain_drift * base) {
      drift = true;
      why = absl::StrCat("the codes fit the latest ", index::CodeErrorStats::kCodeErrorWindow,
                         " points ", absl::SixDigits(e.latest_window_mean / base),
                         "x worse than the first after the build (", live, " points)");
    }
  }
  if (why.empty() || !MaintenanceDue()) return;
  absl::Status st = StartBuild();
  if (st.ok()) {
    ++auto_retrains_;
    if (drift) ++drift_retrains_;
  }
  ZOOM_LOG(INFO, "collection ", config_.name, ": ", why, ", automatic retrain: ",
           st.ok() ? absl::string_view("started") : st.message());
}

uint64_t Collection::TrainedPointsLocked() const {
  if (manifest_.trained_points != 0) return manifest_.trained_points;
  // A manifest of a zoomd before trained_points: the index covers
  // snapshot_count records, so it trained on at most that many.
  return manifest_.snapshot.empty() ? 0 : manifest_.snapshot_count;
}

bool Collection::RetrainDueLocked(uint64_t live) const {
  const uint64_t trained = TrainedPointsLocked();
  if (trained == 0) return true;
  if (options_.auto_retrain_growth > 0 &&
      static_cast<double>(live) >= options_.auto_retrain_growth * static_cast<double>(trained)) {
    return true;
  }
  const std::shared_ptr<const index::VectorIndex> idx = Current()->engine->index();
  if (options_.auto_retrain_drift > 0 && idx != nullptr && manifest_.code_error > 0) {
    const index::CodeErrorStats e = idx->CodeError();
    return e.windows > 0 &&
           e.latest_window_mean >= options_.auto_retrain_drift * manifest_.code_error;
  }
  return false;
}

// ---- Reads -------------------------------------------------------------------

absl::Status Collection::ReadPayloadsWithin(const Segment& seg, absl::Span<const InternalId> ids,
                                            absl::Span<const uint64_t> external, uint64_t* budget,
                                            std::vector<std::string>* payloads,
                                            std::vector<PayloadFields>* fields) const {
  // In chunks: payloads are up to the server's limit each (1 MiB), so a
  // chunk overshoots the budget by little before the answer is refused.
  constexpr size_t kChunk = 16;
  payloads->clear();
  payloads->reserve(ids.size());
  fields->clear();
  fields->reserve(ids.size());
  std::vector<std::string> part, part_fields;
  for (size_t first = 0; first < ids.size(); first += kChunk) {
    const size_t m = std::min(kChunk, ids.size() - first);
    ZOOM_RETURN_IF_ERROR(metadata_->GetPayloads(seg.space, ids.subspan(first, m), &part));
    ZOOM_RETURN_IF_ERROR(metadata_->GetFields(id_, external.subspan(first, m), &part_fields));
    for (size_t i = 0; i < m; ++i) {
      const uint64_t bytes = part[i].size() + part_fields[i].size();
      if (bytes > *budget) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "the answer would be larger than this server sends in one message (after ",
            first + i, " of ", ids.size(),
            " payloads); ask for fewer points or without payloads"));
      }
      *budget -= bytes;
      absl::StatusOr<PayloadFields> f = DecodeFields(part_fields[i]);
      if (!f.ok()) {
        return absl::Status(f.status().code(), absl::StrCat("point ", external[first + i], ": ",
                                                            f.status().message()));
      }
      payloads->push_back(std::move(part[i]));
      fields->push_back(std::move(*f));
    }
  }
  return absl::OkStatus();
}

absl::Status Collection::Get(absl::Span<const uint64_t> ids, bool with_vectors,
                             bool with_payload, std::vector<PointData>* out,
                             uint64_t max_answer_bytes) const {
  out->clear();
  std::shared_ptr<Segment> seg = Current();
  std::vector<InternalId> internal;  // one per distinct id found
  std::vector<uint64_t> external;    // their external ids
  std::vector<uint32_t> source;      // per answer entry: its index in `internal`
  {
    std::vector<std::optional<InternalId>> found;
    seg->ids.FindAll(ids, &found);
    absl::flat_hash_map<uint64_t, uint32_t> first;  // external id -> index in internal
    for (size_t i = 0; i < ids.size(); ++i) {
      auto [slot, inserted] = first.try_emplace(ids[i], static_cast<uint32_t>(internal.size()));
      if (inserted) {
        if (!found[i].has_value()) {
          slot->second = UINT32_MAX;  // missing: left out
        } else {
          internal.push_back(*found[i]);
          external.push_back(ids[i]);
        }
      }
      if (slot->second == UINT32_MAX) continue;
      out->push_back(PointData{ids[i], {}, {}});
      source.push_back(slot->second);
    }
  }
  // Each id is read once, however often it is asked for; every answer entry
  // counts against the budget (an id repeated 600 times is 600 answers).
  const size_t d = config_.dim;
  uint64_t budget = max_answer_bytes;
  const uint64_t fixed = out->size() * (16 + (with_vectors ? d * sizeof(float) + 8 : 0));
  if (fixed > budget) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the answer (", out->size(), " points", with_vectors ? " with vectors" : "",
        ", about ", fixed, " bytes) would be larger than the ", max_answer_bytes,
        " bytes this server sends in one message; ask for fewer points"));
  }
  budget -= fixed;
  std::vector<std::string> payloads;
  std::vector<PayloadFields> fields;
  if (with_payload && !internal.empty()) {
    ZOOM_RETURN_IF_ERROR(ReadPayloadsWithin(*seg, internal, external, &budget, &payloads, &fields));
    // Repeats beyond the first of each id cost their payload again.
    std::vector<bool> used(internal.size(), false);
    for (uint32_t src : source) {
      if (!used[src]) {
        used[src] = true;
        continue;
      }
      const uint64_t again = payloads[src].size() + EncodeFields(fields[src]).size();
      if (again > budget) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "the answer (", out->size(), " points, ids repeated) would be larger than the ",
            max_answer_bytes, " bytes this server sends in one message; ask for each id once"));
      }
      budget -= again;
    }
  }
  std::vector<float> buf;
  if (with_vectors && !internal.empty()) {
    buf.resize(internal.size() * d);
    ZOOM_RETURN_IF_ERROR(seg->engine->store().ReadVectors(internal, buf.data()));
  }
  for (size_t i = 0; i < out->size(); ++i) {
    const uint32_t src = source[i];
    if (with_vectors) (*out)[i].vector.assign(buf.begin() + src * d, buf.begin() + (src + 1) * d);
    if (with_payload) {
      (*out)[i].payload = payloads[src];
      (*out)[i].fields = fields[src];
    }
  }
  return absl::OkStatus();
}

absl::Status Collection::EngineParams(const Segment& seg, const CollectionSearchParams& params,
                                      SearchParams* out, QueryStats* stats) const {
  SearchParams& p = *out;
  p = params.engine;
  p.filter = &seg;
  p.live_points = seg.ids.live();
  const double asked = params.target_recall;
  if (!(asked >= 0 && asked <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "target_recall ", asked, " must be in (0, 1] (0: the collection's default)"));
  }
  // The target: the request's; else (for the knobs it leaves 0) the
  // collection's default.
  const double target = asked > 0 ? asked : DefaultTarget();
  std::shared_ptr<const Calibration> cal;
  if (target > 0 && !p.exact && (p.ef == 0 || p.nprobe == 0 || p.rerank_candidates == 0)) {
    cal = CurrentCalibration();
  }
  if (cal != nullptr && seg.engine->index() != nullptr) {
    const Calibration::Choice choice = cal->Choose(target);
    const CalibrationPoint& c = choice.point;
    const bool all = p.ef == 0 && p.nprobe == 0 && p.rerank_candidates == 0;
    uint32_t rerank = c.rerank_candidates;
    if (p.k > cal->k) {
      rerank = static_cast<uint32_t>(std::min<uint64_t>(
          params.context.limits.max_rerank, (uint64_t{rerank} * p.k + cal->k - 1) / cal->k));
    }
    if (p.rerank_candidates == 0) p.rerank_candidates = rerank;
    if (p.nprobe == 0) {
      p.nprobe = c.nprobe != 0 ? std::min(c.nprobe, params.context.limits.max_nprobe)
                               : config_.default_nprobe;
    }
    if (p.ef == 0) {
      p.ef = c.ef;
      if (config_.index.kind == index::IndexKind::kHnswPq) p.ef = std::max(p.ef, p.rerank_candidates);
      p.ef = std::min(p.ef, params.context.limits.max_ef);
    }
    // Knobs cut by this server's limits are not the curve's any more.
    const bool cut = p.ef < c.ef || (c.nprobe != 0 && p.nprobe < c.nprobe);
    stats->target_recall = static_cast<float>(target);
    stats->target_reached = choice.reached;
    stats->knobs_calibrated = true;
    // The curve's recall holds for its own knobs only.
    if (all && !cut) stats->calibrated_recall = static_cast<float>(c.recall);
    if (cut) stats->target_reached = false;
  } else if (asked > 0) {
    stats->target_recall = static_cast<float>(asked);
  }
  if (p.ef == 0) p.ef = config_.default_ef;
  if (p.nprobe == 0) p.nprobe = config_.default_nprobe;
  if (p.rerank_candidates == 0) p.rerank_candidates = config_.default_rerank;
  // Brute force asked for, or no index yet: no knob runs, none is reported
  // (they were reported as if they had).
  if (!p.exact && seg.engine->index() != nullptr) {
    stats->knob_ef = p.ef;
    stats->knob_nprobe = p.nprobe;
    stats->knob_rerank = p.rerank_candidates;
  }
  return absl::OkStatus();
}

double Collection::DefaultTarget() const {
  return config_.DefaultTarget(options_.default_target_recall);
}

std::shared_ptr<const Calibration> Collection::CurrentCalibration() const {
  absl::MutexLock l(&calibration_mu_);
  return calibration_;
}

void Collection::SetCalibration(std::shared_ptr<const Calibration> calibration, bool current) {
  absl::MutexLock l(&calibration_mu_);
  calibration_ = std::move(calibration);
  calibration_current_ = current;
  if (current) calibration_error_.clear();
}

absl::Status Collection::JoinHits(const Segment& seg, const CollectionSearchParams& params,
                                  uint64_t* budget, QueryResult* result) const {
  std::vector<Hit>& hits = result->hits;
  std::vector<InternalId> internal(hits.size());
  for (size_t i = 0; i < hits.size(); ++i) {
    internal[i] = static_cast<InternalId>(hits[i].id);
    hits[i].id = seg.ids.External(internal[i]);
  }
  const bool with_vectors = params.engine.with_vectors;
  const uint64_t fixed =
      internal.size() * (16 + (with_vectors ? config_.dim * sizeof(float) + 8 : 0));
  if (fixed > *budget) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the answer (", internal.size(), " hits", with_vectors ? " with vectors" : "",
        ", about ", fixed, " bytes) would be larger than this server sends in one message; "
        "ask for a smaller k or without vectors"));
  }
  *budget -= fixed;
  if (params.with_payload && !internal.empty()) {
    std::vector<uint64_t> external(hits.size());
    for (size_t i = 0; i < hits.size(); ++i) external[i] = hits[i].id;
    std::vector<std::string> payloads;
    std::vector<PayloadFields> fields;
    ZOOM_RETURN_IF_ERROR(ReadPayloadsWithin(seg, internal, external, budget, &payloads, &fields));
    for (size_t i = 0; i < internal.size(); ++i) {
      hits[i].payload = std::move(payloads[i]);
      hits[i].fields = std::move(fields[i]);
    }
  }
  return absl::OkStatus();
}

absl::Status Collection::MatchFilter(const Segment& seg, const Filter& filter, MatchSet* out,
                                     bool* scan, const QueryContext* ctx) const {
  *scan = false;
  const uint64_t size = seg.ids.visible();
  std::string unindexed;
  bool building = false;
  if (seg.payload.CanEvaluate(filter, &unindexed, &building)) {
    absl::Status st = seg.payload.Evaluate(filter, seg.ids, size, out);
    // (FailedPrecondition: an index deleted since CanEvaluate: scan.)
    if (st.code() != absl::StatusCode::kFailedPrecondition) return st;
  }
  // A field without a ready index: evaluated from the stored payloads
  // (every live point's; a scan, flagged in the stats), stopping at the
  // call's deadline or cancellation.
  *scan = true;
  out->Reset(size);
  static const PayloadFields kNone;
  for (const auto& [id, ext] : seg.ids.LiveRecords()) {
    if (id < size) out->Assign(id, Matches(filter, ext, kNone));
  }
  const auto check = [&]() -> absl::Status {
    if (ctx == nullptr) return absl::OkStatus();
    if (ctx->cancelled != nullptr && ctx->cancelled->load(std::memory_order_relaxed)) {
      return absl::CancelledError("the search was cancelled");
    }
    if (ctx->deadline != absl::InfiniteFuture() && absl::Now() >= ctx->deadline) {
      return absl::DeadlineExceededError(
          "the deadline passed while the filter was evaluated from the stored payloads (a "
          "field without a payload index: CreateFieldIndex makes it fast)");
    }
    return absl::OkStatus();
  };
  ZOOM_RETURN_IF_ERROR(ScanStoredFields(
      seg.ids,
      [&](uint64_t ext, InternalId id, const PayloadFields& f) {
        out->Assign(id, Matches(filter, ext, f));
      },
      [&](uint64_t) { return check(); }));
  AndLive(seg.ids, out);
  return absl::OkStatus();
}

absl::Status Collection::PrepareFilter(const Segment& seg, const CollectionSearchParams& params,
                                       MatchSet* match, SearchParams* engine,
                                       bool* scan) const {
  *scan = false;
  if (params.filter == nullptr || params.filter->empty()) return absl::OkStatus();
  ZOOM_RETURN_IF_ERROR(ValidateFilter(*params.filter));
  ZOOM_RETURN_IF_ERROR(MatchFilter(seg, *params.filter, match, scan, &params.context));
  engine->match = match;
  engine->live_points = seg.ids.live();
  return absl::OkStatus();
}

absl::StatusOr<Collection::FilterCount> Collection::Count(const Filter* filter) const {
  std::shared_ptr<Segment> seg = Current();
  FilterCount c;
  if (filter == nullptr || filter->empty()) {
    c.count = seg->ids.live();
    return c;
  }
  ZOOM_RETURN_IF_ERROR(ValidateFilter(*filter));
  MatchSet m;
  ZOOM_RETURN_IF_ERROR(MatchFilter(*seg, *filter, &m, &c.scan));
  c.count = m.Count();
  return c;
}

std::string Collection::UnindexedField(const Filter& filter) const {
  std::shared_ptr<Segment> seg = Current();
  std::string unindexed;
  bool building = false;
  if (seg->payload.CanEvaluate(filter, &unindexed, &building)) return "";
  return unindexed;
}

namespace {
// The knob choice (EngineParams) into a query's stats.
void KeepChoice(const QueryStats& chosen, QueryStats* stats) {
  stats->target_recall = chosen.target_recall;
  stats->calibrated_recall = chosen.calibrated_recall;
  stats->target_reached = chosen.target_reached;
  stats->knobs_calibrated = chosen.knobs_calibrated;
  stats->knob_ef = chosen.knob_ef;
  stats->knob_nprobe = chosen.knob_nprobe;
  stats->knob_rerank = chosen.knob_rerank;
}
}  // namespace

absl::Status Collection::Search(absl::Span<const float> query,
                                const CollectionSearchParams& params,
                                QueryResult* result) const {
  result->hits.clear();
  std::shared_ptr<Segment> seg = Current();
  SearchParams engine;
  QueryStats chosen;
  ZOOM_RETURN_IF_ERROR(EngineParams(*seg, params, &engine, &chosen));
  MatchSet match;
  bool scan = false;
  ZOOM_RETURN_IF_ERROR(PrepareFilter(*seg, params, &match, &engine, &scan));
  ZOOM_RETURN_IF_ERROR(seg->engine->Search(query, engine, result, params.context));
  result->stats.filter_scan = scan;
  KeepChoice(chosen, &result->stats);
  uint64_t budget = params.max_answer_bytes;
  return JoinHits(*seg, params, &budget, result);
}

absl::Status Collection::SearchBatch(absl::Span<const float> queries, size_t nq,
                                     const CollectionSearchParams& params,
                                     std::vector<QueryResult>* results) const {
  std::shared_ptr<Segment> seg = Current();
  SearchParams engine;
  QueryStats chosen;
  ZOOM_RETURN_IF_ERROR(EngineParams(*seg, params, &engine, &chosen));
  MatchSet match;
  bool scan = false;
  ZOOM_RETURN_IF_ERROR(PrepareFilter(*seg, params, &match, &engine, &scan));
  ZOOM_RETURN_IF_ERROR(seg->engine->SearchBatch(queries, nq, engine,
                                                /*threads=*/1, results, params.context));
  for (QueryResult& r : *results) {
    r.stats.filter_scan = scan;
    KeepChoice(chosen, &r.stats);
  }
  uint64_t budget = params.max_answer_bytes;
  for (size_t q = 0; q < nq; ++q) {
    if (absl::Status st = JoinHits(*seg, params, &budget, &(*results)[q]); !st.ok()) {
      return absl::Status(st.code(), absl::StrCat("query #", q, ": ", st.message()));
    }
  }
  return absl::OkStatus();
}

// ---- Index builds ------------------------------------------------------------

absl::Status Collection::StartBuild() { return StartBuildImpl(/*join_running=*/false); }

absl::Status Collection::StartOrJoinBuild() { return StartBuildImpl(/*join_running=*/true); }

absl::Status Collection::StartBuildImpl(bool join_running) {
  if (join_running && build_.running()) return absl::OkStatus();
  if (dropped_) return DroppedError();
  if (closing_) return ClosingError("index build");
  if (compacting_.load()) {
    // The compaction rebuilds the index of the segment it makes.
    return absl::FailedPreconditionError(
        absl::StrCat("a compaction of '", config_.name, "' is running; build after it"));
  }
  const uint64_t live = Current()->ids.live();
  const uint64_t min_points = config_.MinIndexPoints();
  if (live < min_points) {
    return absl::FailedPreconditionError(absl::StrCat(
        "collection '", config_.name, "' has ", live, " points; an index needs at least ",
        min_points, min_points > kMinIndexPoints ? " (its nlist)" : "",
        " to train (searches are exact until then)"));
  }
  absl::MutexLock start(&build_start_mu_);
  if (build_.running()) {
    if (join_running) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat("an index build of '", config_.name, "' is already running"));
  }
  build_progress_ = 0;
  index_state_ = IndexState::kBuilding;
  build_.TryStart([this] { return RunBuild(); });  // cannot fail: none runs, starts serialised
  return absl::OkStatus();
}

absl::Status Collection::RunBuild() {
  Stopwatch sw;
  std::shared_ptr<Segment> seg = Current();
  const uint64_t n = seg->engine->size();
  // The live points among [0, n) the build trains on (the live count now:
  // writes after this moment are added to the new index, not trained on).
  const uint64_t trained = seg->ids.live();
  const bool replaces = seg->engine->index() != nullptr;
  index::StreamingBuildTimes phases;
  auto built =
      BuildSegmentIndex(config_, options_.build_threads, *seg, n, &build_progress_, &phases,
                        /*trained_from=*/nullptr, &closing_);
  const double build_s = sw.ElapsedMicros() / 1e6;
  absl::Status st = built.status();
  const bool cancelled = absl::IsCancelled(st) && closing_;
  if (cancelled) st = ClosingError("index build");
  build_progress_ = 0.9;
  if (st.ok()) {
    absl::MutexLock w(&write_mu_);
    if (Current() != seg || manifest_.pending_space != 0) {
      st = absl::AbortedError("the collection was compacted during the build; build again");
    } else {
      st = seg->engine->SetIndex(std::move(*built));
      if (st.ok()) {
        manifest_.trained_points = trained;
        manifest_.code_error = 0;  // the new index's first window sets it
        ++manifest_.index_epoch;  // the earlier curve serves until it is measured
        st = SaveSnapshotLocked();
        if (st.ok()) {
          SetCalibration(CurrentCalibration(), /*current=*/false);
        } else {
          --manifest_.index_epoch;  // the stored manifest still names the old index
        }
      }
    }
  }
  const double installed_s = sw.ElapsedMicros() / 1e6;
  if (st.ok() && options_.calibration_queries > 0) {
    build_progress_ = 0.95;
    (void)RunCalibration();  // logged; a failure leaves the default knobs
  }
  built = absl::StatusOr<std::unique_ptr<index::VectorIndex>>();
  ReleaseFreedMemory();  // the build's staging and the old index (when no search holds it)
  build_progress_ = 1.0;
  // A build overtaken by a compaction is not a failure: the compaction made
  // the index of the segment now serving (or none).
  // Nor is one cancelled by the close (the server stops; it starts again).
  const bool overtaken = absl::IsAborted(st) || cancelled;
  index_state_ = st.ok() ? IndexState::kReady
                 : Current()->engine->index() != nullptr ? IndexState::kReady
                 : overtaken                              ? IndexState::kNone
                                                          : IndexState::kFailed;
  if (st.ok()) {
    // The phases (zoomload --workload scale reads this line): the
    // streaming build's own (zero for hnsw_pq, which builds in RAM), the
    // install (the index snapshot written), the recall curve's calibration.
    ZOOM_LOG(INFO, "collection ", config_.name, ": index build over ", n, " points (",
             trained, " live) done in ", absl::SixDigits(sw.ElapsedMicros() / 1e6),
             " s (phases: sample ", absl::SixDigits(phases.sample_s), " s, train ",
             absl::SixDigits(phases.train_s), " s, encode ", absl::SixDigits(phases.encode_s),
             " s, layout ", absl::SixDigits(phases.layout_s), " s, build ",
             absl::SixDigits(build_s), " s, install ", absl::SixDigits(installed_s - build_s),
             " s, calibration ", absl::SixDigits(sw.ElapsedMicros() / 1e6 - installed_s), " s)",
             replaces ? "; the previous index is freed by the last search holding it" : "");
  } else if (cancelled) {
    ZOOM_LOG(INFO, "collection ", config_.name, ": index build over ", n,
             " points stopped after ", absl::SixDigits(build_s), " s: the collection is closing");
  } else {
    ZOOM_LOG(WARNING, "collection ", config_.name, ": index build over ", n, " points failed: ",
             st.message());
  }
  if (!overtaken) NoteMaintenance(/*compaction=*/false, st);
  return st;
}

void Collection::WhenBuildDone(std::function<void(absl::Status)> done) {
  build_.WhenDone(std::move(done));
}

absl::Status Collection::WaitForBuild() { return build_.Wait(); }

void Collection::NoteMaintenance(bool compaction, const absl::Status& st) {
  absl::MutexLock b(&maintenance_mu_);
  if (compaction) compaction_status_ = st;
  if (st.ok()) {
    maintenance_failures_ = 0;
    maintenance_retry_at_ = absl::InfinitePast();
    return;
  }
  ++maintenance_failures_;
  absl::Duration wait = options_.maintenance_retry_base;
  for (uint32_t i = 1; i < maintenance_failures_ && wait < options_.maintenance_retry_max; ++i) {
    wait *= 2;
  }
  wait = std::min(wait, options_.maintenance_retry_max);
  maintenance_retry_at_ = absl::Now() + wait;
  ZOOM_LOG(WARNING, "collection ", config_.name, ": ", compaction ? "compaction" : "index build",
           " failed (", maintenance_failures_, " in a row); automatic maintenance retries in ",
           absl::FormatDuration(wait));
}

bool Collection::MaintenanceDue() const {
  absl::MutexLock b(&maintenance_mu_);
  return absl::Now() >= maintenance_retry_at_;
}

// ---- Compaction --------------------------------------------------------------

absl::Status Collection::Compact() {
  if (closing_ && !dropped_) return ClosingError("compaction");  // dropped: CompactOnce says so
  if (build_.running()) {
    return absl::FailedPreconditionError(
        absl::StrCat("an index build of '", config_.name, "' is running; compact after it"));
  }
  absl::Status st;
  try {
    st = CompactOnce();
  } catch (const std::bad_alloc&) {
    st = absl::ResourceExhaustedError("out of memory during compaction");
  } catch (const std::exception& e) {
    st = absl::InternalError(absl::StrCat("compaction failed: ", e.what()));
  }
  if (!dropped_) NoteMaintenance(/*compaction=*/true, st);
  ReleaseRetired();
  return st;
}

void Collection::MarkDropped(bool dropped) {
  dropping_ = dropped;  // a compaction in progress stops at its next chunk
  absl::MutexLock c(&compact_mu_);
  absl::MutexLock w(&write_mu_);
  dropped_ = dropped;
}

absl::Status Collection::CompactOnce() {
  absl::MutexLock one(&compact_mu_);
  compacting_ = true;  // no build starts until it ends (StartBuildImpl)
  absl::Cleanup not_compacting = [this] { compacting_ = false; };
  // 1. The plan, under the write lock (briefly); the new space announced in
  //    the manifest (a crash from here on leaves no garbage).
  CompactionPlan plan;
  {
    absl::MutexLock w(&write_mu_);
    if (dropped_) return DroppedError();
    plan.old = Current();
    plan.visible = plan.old->ids.visible();
    for (const auto& [id, ext] : plan.old->ids.LiveRecords()) plan.live_ids.push_back(id);
    if (plan.live_ids.size() == plan.old->engine->size()) return absl::OkStatus();  // none dead
    if (build_.running()) {
      return absl::FailedPreconditionError(
          absl::StrCat("an index build of '", config_.name, "' is running; compact after it"));
    }
    ZOOM_ASSIGN_OR_RETURN(plan.space, metadata_->AllocateId());
    plan.vectors_file = manifest_.NextFile("vectors", ".zvec");
    plan.snapshot_file = manifest_.NextFile("index", ".zidx");
    plan.rebuild_index = plan.old->engine->index() != nullptr &&
                         plan.live_ids.size() >= config_.MinIndexPoints();
    plan.keep_quantizer = plan.rebuild_index &&
                          plan.old->engine->index()->spec().kind == index::IndexKind::kIvfHnswPq &&
                          !RetrainDueLocked(plan.live_ids.size());
    manifest_.pending_space = plan.space;
    if (absl::Status st = SaveManifestLocked(); !st.ok()) {
      manifest_.pending_space = 0;
      return st;
    }
  }
  Stopwatch sw;
  // Removes what the compaction made; under the write lock.
  auto undo = [&](const absl::Status& why) {
    metadata_->DropRecords(plan.space).IgnoreError();
    std::error_code ec;
    fs::remove(fs::path(dir_) / plan.vectors_file, ec);
    fs::remove(fs::path(dir_) / plan.snapshot_file, ec);
    manifest_.pending_space = 0;
    if (!dropped_) SaveManifestLocked().IgnoreError();
    return why;
  };
  // 2. The copy, without the lock (writes go on).
  CompactorOptions copts{options_.store, EngineOptionsFor(), options_.build_threads, &closing_};
  auto fresh_or =
      CopyLiveRecords(dir_, plan, config_, copts, metadata_, dropping_, DroppedError());
  absl::MutexLock w(&write_mu_);
  if (!fresh_or.ok()) return undo(fresh_or.status());
  if (dropped_) return undo(DroppedError());
  std::shared_ptr<Segment> fresh = std::move(*fresh_or);
  // 3. The writes made during the copy.
  uint64_t added = 0, removed = 0;
  if (absl::Status st = CatchUp(plan, fresh.get(), metadata_, &added, &removed); !st.ok()) {
    fresh.reset();
    return undo(st);
  }
  // The payload indexes of the new segment's ids, from the fields as they
  // are now (under the lock: no write can slip between).
  if (absl::Status st = FillPayloadIndex(fresh.get(), manifest_.field_indexes); !st.ok()) {
    fresh.reset();
    return undo(st);
  }
  // 4. The switch: one manifest names the new space, file and snapshot,
  //    and lists the old space as retired.
  const CollectionManifest before = manifest_;
  {
    absl::MutexLock m(&segment_mu_);
    std::swap(segment_, fresh);  // `fresh` is now the old segment
  }
  manifest_.pending_space = 0;
  manifest_.snapshot = plan.rebuild_index ? plan.snapshot_file : "";
  manifest_.snapshot_count = plan.rebuild_index ? plan.live_ids.size() : 0;
  if (!plan.keep_quantizer) {
    // Trained anew (or no index): the new index's first window sets the
    // code error's baseline. A kept quantiser keeps both.
    manifest_.trained_points = plan.rebuild_index ? plan.live_ids.size() : 0;
    manifest_.code_error = 0;
  }
  if (plan.rebuild_index) ++manifest_.index_epoch;
  manifest_.retired_spaces.push_back(plan.old->space);
  if (absl::Status st = SaveManifestLocked(); !st.ok()) {
    // The stored manifest still names the old files: go back to them.
    {
      absl::MutexLock m(&segment_mu_);
      std::swap(segment_, fresh);
    }
    manifest_ = before;
    return undo(st);
  }
  if (plan.rebuild_index) SetCalibration(CurrentCalibration(), /*current=*/false);
  retired_.push_back(std::move(fresh));  // released once no reader holds it
  std::error_code ec;
  fs::remove(fs::path(dir_) / plan.old->vectors_file, ec);  // open readers keep reading it
  if (!before.snapshot.empty()) fs::remove(fs::path(dir_) / before.snapshot, ec);
  index_state_ = Current()->engine->index() != nullptr ? IndexState::kReady : IndexState::kNone;
  ZOOM_LOG(INFO, "collection ", config_.name, ": compacted ", plan.old->ids.visible(), " -> ",
           Current()->ids.visible(), " records in ", absl::SixDigits(sw.ElapsedMicros() / 1e6),
           " s (", added, " added and ", removed, " removed during it, applied at the switch)");
  ReleaseFreedMemory();
  return absl::OkStatus();
}

bool Collection::NeedsCompaction() const {
  if (options_.auto_compact_dead_ratio <= 0 || dropped_ || build_.running()) return false;
  if (!MaintenanceDue()) return false;  // a failed one waits for its backoff
  std::shared_ptr<Segment> seg = Current();
  const uint64_t stored = seg->engine->size();
  const uint64_t live = seg->ids.live();
  const uint64_t dead = stored - std::min(stored, live);
  return dead >= options_.auto_compact_min_dead &&
         static_cast<double>(dead) >= options_.auto_compact_dead_ratio * static_cast<double>(stored);
}

// ---- Calibration ---------------------------------------------------------------

absl::Status Collection::RunCalibration() {
  std::shared_ptr<Segment> seg;
  uint64_t epoch = 0;
  {
    absl::MutexLock w(&write_mu_);
    if (dropped_) return DroppedError();
    seg = Current();
    epoch = manifest_.index_epoch;
    calibration_tried_epoch_ = epoch;
  }
  Stopwatch sw;
  CalibrationOptions options;
  options.queries = options_.calibration_queries;
  options.cancelled = &closing_;
  absl::StatusOr<Calibration> cal =
      server::Calibrate(*seg->engine, config_.index.kind, *seg, options);
  absl::Status st = cal.status();
  if (st.ok()) {
    absl::MutexLock w(&write_mu_);
    if (dropped_ || Current() != seg || manifest_.index_epoch != epoch) {
      st = absl::AbortedError("the index was replaced during its calibration");
    } else {
      const CollectionManifest before = manifest_;
      manifest_.calibration = cal->Encode();
      manifest_.calibration_epoch = epoch;
      st = SaveManifestLocked();
      if (st.ok()) {
        SetCalibration(std::make_shared<const Calibration>(*cal), /*current=*/true);
      } else {
        manifest_ = before;
      }
    }
  }
  if (!st.ok()) {
    // Overtaken (a new index is measured next) or stopped by the close:
    // not a failure of the curve.
    if (absl::IsAborted(st) || absl::IsCancelled(st)) {
      ZOOM_LOG(INFO, "collection ", config_.name, ": calibration not kept: ", st.message());
      return st;
    }
    ZOOM_LOG(WARNING, "collection ", config_.name, ": calibration failed: ", st.message());
    absl::MutexLock l(&calibration_mu_);
    calibration_error_ = std::string(st.message());
    return st;
  }
  const double target = options_.default_target_recall > 0 ? options_.default_target_recall : 0.95;
  const Calibration::Choice c = cal->Choose(target);
  ZOOM_LOG(INFO, "collection ", config_.name, ": calibrated over ", cal->queries, " queries, ",
           cal->points.size(), " knob settings, in ", absl::SixDigits(sw.ElapsedMicros() / 1e6),
           " s; recall@", cal->k, " ", target, (c.reached ? "" : " not reached; best"), ": ef ",
           c.point.ef, " nprobe ", c.point.nprobe, " K' ", c.point.rerank_candidates, " (recall ",
           absl::SixDigits(c.point.recall), ", ", absl::SixDigits(c.point.mean_us), " us)");
  return absl::OkStatus();
}

absl::Status Collection::CalibrateNow() {
  if (Current()->engine->index() == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("collection '", config_.name, "' has no index to calibrate"));
  }
  return RunCalibration();
}

void Collection::StopBackgroundWork() {
  closing_ = true;
  calibrate_.Join();
}

absl::Status Collection::ClosingError(absl::string_view what) const {
  return absl::UnavailableError(absl::StrCat(
      "collection '", config_.name, "' is closing (the server is shutting down or it is dropped): the ",
      what, " stopped or did not start; once the server is back, automatic builds start again, or ",
      "call it again"));
}

bool Collection::MaybeStartCalibration() {
  if (options_.calibration_queries == 0 || dropped_ || closing_ || compacting_.load() ||
      build_.running() || calibrate_.running()) {
    return false;
  }
  {
    absl::MutexLock w(&write_mu_);
    if (Current()->engine->index() == nullptr) return false;
    if (calibration_tried_epoch_ == manifest_.index_epoch) return false;
    absl::MutexLock l(&calibration_mu_);
    if (calibration_current_) return false;
  }
  return calibrate_.TryStart([this] { return RunCalibration(); });
}

// ---- Info --------------------------------------------------------------------

CollectionInfo Collection::Info() const {
  CollectionInfo info;
  std::shared_ptr<Segment> seg = Current();
  info.config = config_;
  info.points = seg->ids.live();
  info.stored_records = seg->engine->size();
  info.deleted_records = info.stored_records - std::min(info.stored_records, info.points);
  info.index_state = index_state_.load();
  const std::shared_ptr<const index::VectorIndex> idx = seg->engine->index();
  info.indexed_points = idx ? idx->size() : 0;
  info.auto_retrains = auto_retrains_.load();
  info.drift_retrains = drift_retrains_.load();
  if (idx != nullptr) {
    info.trained_points = trained_points_.load();
    const index::CodeErrorStats e = idx->CodeError();
    const double base = code_error_base_.load();
    info.code_error_baseline = base;
    if (e.windows > 0 && base > 0) info.code_error_ratio = e.latest_window_mean / base;
  }
  // Every index still alive counts (a replaced one a search holds too).
  info.field_indexes = seg->payload.Info();
  info.resident_bytes = seg->engine->IndexBytes() + seg->engine->CacheBytes() + seg->ids.Bytes() +
                        seg->payload.Bytes();
  info.disk_bytes = seg->engine->store().file_bytes();
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    // (not a snapshot's hard link: ".snapshot-link-*")
    if (entry.path().extension() == ".zidx" &&
        entry.path().filename().string().rfind('.', 0) != 0) {
      info.disk_bytes += entry.file_size(ec);
    }
  }
  info.build_progress = build_.running() ? build_progress_.load() : 0;
  info.index_error = std::string(build_.last_status().message());
  {
    absl::MutexLock l(&calibration_mu_);
    info.calibration = calibration_;
    info.calibration_current = calibration_current_;
    info.calibration_error = calibration_error_;
  }
  info.default_target_recall = DefaultTarget();
  absl::MutexLock b(&maintenance_mu_);
  info.compaction_error = std::string(compaction_status_.message());
  info.maintenance_failures = maintenance_failures_;
  info.maintenance_retry_at = maintenance_retry_at_;
  return info;
}

}  // namespace zoom::server
