// Collection: writes (points, payloads, the log position) and the payload
// indexes' declarations and builds.
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/timer.h"
#include "common/vector_limits.h"
#include "server/engine/collection.h"

namespace zoom::server {

bool Collection::FieldBuildRunning(const std::string& field) const {
  return jobs_->Active(JobKey(absl::StrCat("field/", field)));
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
      if (Current()->FieldReady(field) || FieldBuildRunning(field)) return absl::OkStatus();
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
    generation = Current()->DeclareField(field, type);
  }
  if (!background) return BuildFieldIndex(field, generation);
  // After a build of the field that still runs (of a declaration deleted
  // since: it ends at its next step), as a job of its own.
  JobRunner::Job job;
  job.key = JobKey(absl::StrCat("field/", field));
  job.group = jobs_group_;
  job.priority = JobRunner::Priority::kUser;
  job.run = [this, field, generation] {
    return BuildFieldIndex(field, generation);  // logged; filters scan meanwhile
  };
  if (!jobs_->Submit(std::move(job))) {
    return absl::UnavailableError("the server is stopping: the payload index is built at the "
                                  "next start");
  }
  return absl::OkStatus();
}

absl::Status Collection::BuildFieldIndex(const std::string& field, uint64_t generation) {
  // In steps under the write lock: each step reads the fields as they are
  // now, and writers update the index between steps (idempotent).
  Stopwatch sw;
  std::shared_ptr<Segment> seg;
  uint64_t from = 0, points = 0;
  for (bool done = false; !done;) {
    absl::MutexLock w(&write_mu_);
    if (dropped_) return DroppedError();
    if (stopping_) return absl::CancelledError("the collection is closing");
    std::shared_ptr<Segment> now = Current();
    // Compacted: the new segment's index is complete.
    if (seg != nullptr && now != seg) return absl::OkStatus();
    seg = now;
    if (absl::Status st = seg->FillFieldStep(field, generation, &from, &points, &done); !st.ok()) {
      ZOOM_LOG(WARNING, "collection ", config_.name, ": payload index of '", field,
               "' failed: ", st.message(), " (filters on it scan; CreateFieldIndex retries)");
      return st;  // stays not ready
    }
  }
  if (seg->FieldReady(field)) {
    ZOOM_LOG(INFO, "collection ", config_.name, ": payload index of '", field, "' built over ",
             points, " points in ", static_cast<int64_t>(sw.ElapsedMicros() / 1000), " ms");
  }
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
  Current()->RemoveField(field);
  return absl::OkStatus();
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
  const UpsertBatch batch(points, config_.dim);  // outside the lock
  absl::MutexLock w(&write_mu_);
  if (dropped_) return DroppedError();
  ZOOM_RETURN_IF_ERROR(Current()->Upsert(batch));
  MaybeAutoMaintainLocked();
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> Collection::Delete(absl::Span<const uint64_t> ids) {
  if (ids.empty()) return absl::InvalidArgumentError("no ids to delete");
  absl::MutexLock w(&write_mu_);
  if (dropped_) return DroppedError();
  ZOOM_ASSIGN_OR_RETURN(uint64_t deleted, Current()->Delete(ids));
  if (deleted > 0) MaybeAutoMaintainLocked();
  return deleted;
}

absl::StatusOr<uint64_t> Collection::DeleteByFilter(const Filter& given, bool all) {
  ZOOM_RETURN_IF_ERROR(ValidateFilter(given));
  Filter filter = given;
  NormalizeFilter(&filter);
  ZOOM_RETURN_IF_ERROR(CheckDeleteFilter(filter, all));
  // The filter is evaluated without the write lock (a scan of the stored
  // payloads can take seconds: writers must not wait for it), then each
  // batch is deleted under the lock after a check that the evaluation still
  // holds: the same segment, no payload edited in place since (its
  // edits()), and each point still at the internal id that matched (an
  // upsert moves it, a delete removes it). When writes keep invalidating it, the third
  // attempt evaluates under the lock, so the call always ends.
  constexpr size_t kBatch = 65536;
  constexpr int kOptimisticAttempts = 2;
  uint64_t deleted = 0;
  const auto failed = [&](const absl::Status& st) {
    return absl::Status(st.code(),
                        absl::StrCat(st.message(), " (", deleted,
                                     " points passing the filter were deleted before it)"));
  };
  // Deletes those of found[first, first + n) still at the internal id that
  // matched. Holds write_mu_.
  const auto delete_batch = [&](Segment& seg,
                                const std::vector<std::pair<uint64_t, InternalId>>& found,
                                size_t first, size_t n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_)
      -> absl::Status {
    absl::StatusOr<uint64_t> d =
        seg.DeleteIfUnchanged(absl::MakeConstSpan(found).subspan(first, n));
    if (!d.ok()) return failed(d.status());
    deleted += *d;
    if (*d > 0) MaybeAutoMaintainLocked();
    return absl::OkStatus();
  };
  const auto evaluate = [&](const Segment& seg,
                            std::vector<std::pair<uint64_t, InternalId>>* found) -> absl::Status {
    MatchSet match;
    bool scan = false;
    if (absl::Status st = seg.Match(filter, &match, &scan); !st.ok()) return failed(st);
    found->clear();
    match.ForEach([&](InternalId id) { found->push_back({seg.External(id), id}); });
    // Every live point matching: refused unless asked for by name (a
    // filter meant to be narrow must not wipe the collection).
    if (absl::Status st = CheckDeleteMatches(found->size(), seg.live(), all, name());
        !st.ok()) {
      return failed(st);
    }
    return absl::OkStatus();
  };
  std::vector<std::pair<uint64_t, InternalId>> found;  // external, internal
  for (int attempt = 0; attempt < kOptimisticAttempts; ++attempt) {
    std::shared_ptr<Segment> seg = Current();
    const uint64_t edits = seg->edits();
    ZOOM_RETURN_IF_ERROR(evaluate(*seg, &found));
    bool stale = false;
    for (size_t first = 0; first < found.size(); first += kBatch) {
      absl::MutexLock w(&write_mu_);
      if (dropped_) return DroppedError();
      if (Current() != seg || seg->edits() != edits) {
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

absl::StatusOr<uint64_t> Collection::EditFields(
    absl::Span<const uint64_t> ids, const std::function<bool(PayloadFields*)>& change) {
  if (ids.empty()) return absl::InvalidArgumentError("no ids to change the payload of");
  absl::MutexLock w(&write_mu_);
  if (dropped_) return DroppedError();
  return Current()->EditFields(ids, change);
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


}  // namespace zoom::server
