// Collection: writes (points, payloads, the log position). (The payload
// indexes' declarations and builds: collection_field_indexes.cc.)
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/timer.h"
#include "common/vector_limits.h"
#include "server/engine/collection.h"

namespace zoom::server {

// ---- Writes ------------------------------------------------------------------

absl::Status Collection::SetLogPosition(uint64_t position, uint64_t version) {
  absl::MutexLock w(&core_.write_mu_);
  if (core_.dropped_) return core_.DroppedError();
  ZOOM_RETURN_IF_ERROR(core_.metadata_->PutLogPosition(core_.id_, position, version));
  core_.log_position_.store(position, std::memory_order_release);
  core_.log_version_.store(version, std::memory_order_release);
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
  ZOOM_RETURN_IF_ERROR(ValidatePoints(config(), points));
  const UpsertBatch batch(points, config().dim);  // outside the lock
  absl::MutexLock w(&core_.write_mu_);
  if (core_.dropped_) return core_.DroppedError();
  ZOOM_RETURN_IF_ERROR(core_.Current()->Upsert(batch));
  maintenance_.AfterWrite();
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> Collection::Delete(absl::Span<const uint64_t> ids) {
  if (ids.empty()) return absl::InvalidArgumentError("no ids to delete");
  absl::MutexLock w(&core_.write_mu_);
  if (core_.dropped_) return core_.DroppedError();
  ZOOM_ASSIGN_OR_RETURN(uint64_t deleted, core_.Current()->Delete(ids));
  if (deleted > 0) maintenance_.AfterWrite();
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
                                size_t first, size_t n)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(core_.write_mu_) -> absl::Status {
    absl::StatusOr<uint64_t> d =
        seg.DeleteIfUnchanged(absl::MakeConstSpan(found).subspan(first, n));
    if (!d.ok()) return failed(d.status());
    deleted += *d;
    if (*d > 0) maintenance_.AfterWrite();
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
    if (absl::Status st = CheckDeleteMatches(found->size(), seg.live(), all, config().name);
        !st.ok()) {
      return failed(st);
    }
    return absl::OkStatus();
  };
  std::vector<std::pair<uint64_t, InternalId>> found;  // external, internal
  for (int attempt = 0; attempt < kOptimisticAttempts; ++attempt) {
    std::shared_ptr<Segment> seg = core_.Current();
    const uint64_t edits = seg->edits();
    ZOOM_RETURN_IF_ERROR(evaluate(*seg, &found));
    bool stale = false;
    for (size_t first = 0; first < found.size(); first += kBatch) {
      absl::MutexLock w(&core_.write_mu_);
      if (core_.dropped_) return core_.DroppedError();
      if (core_.Current() != seg || seg->edits() != edits) {
        stale = true;
        break;
      }
      ZOOM_RETURN_IF_ERROR(delete_batch(*seg, found, first, std::min(kBatch, found.size() - first)));
    }
    if (!stale) return deleted;
  }
  absl::MutexLock w(&core_.write_mu_);
  if (core_.dropped_) return core_.DroppedError();
  std::shared_ptr<Segment> seg = core_.Current();
  ZOOM_RETURN_IF_ERROR(evaluate(*seg, &found));
  for (size_t first = 0; first < found.size(); first += kBatch) {
    ZOOM_RETURN_IF_ERROR(delete_batch(*seg, found, first, std::min(kBatch, found.size() - first)));
  }
  return deleted;
}

// SetPayload and DeletePayload: Segment::EditFields under the write lock.
absl::StatusOr<uint64_t> Collection::SetPayload(absl::Span<const uint64_t> ids,
                                                const PayloadFields& fields, bool overwrite) {
  ZOOM_RETURN_IF_ERROR(ValidateFields(fields));
  const auto change = [&](PayloadFields* f) {
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
  };
  if (ids.empty()) return absl::InvalidArgumentError("no ids to change the payload of");
  absl::MutexLock w(&core_.write_mu_);
  if (core_.dropped_) return core_.DroppedError();
  return core_.Current()->EditFields(ids, change);
}

absl::StatusOr<uint64_t> Collection::DeletePayload(absl::Span<const uint64_t> ids,
                                                   absl::Span<const std::string> keys) {
  const auto change = [&](PayloadFields* f) {
    if (f->empty()) return false;
    if (keys.empty()) {
      f->clear();
      return true;
    }
    bool changed = false;
    for (const std::string& k : keys) changed = f->erase(k) > 0 || changed;
    return changed;
  };
  if (ids.empty()) return absl::InvalidArgumentError("no ids to change the payload of");
  absl::MutexLock w(&core_.write_mu_);
  if (core_.dropped_) return core_.DroppedError();
  return core_.Current()->EditFields(ids, change);
}

}  // namespace zoom::server
