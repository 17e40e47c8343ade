// FieldIndexes: payload index declarations and their builds (see
// collection_field_indexes.h).
#include "server/engine/collection_field_indexes.h"

#include <algorithm>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/timer.h"
#include "server/engine/payload_fields.h"

namespace zoom::server {

absl::Status ValidateFieldIndexName(std::string_view field) {
  if (field.empty() || field.size() > FieldLimits().max_name_bytes ||
      field.find('\0') != std::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a field name has 1..", FieldLimits().max_name_bytes, " bytes and no NUL byte"));
  }
  return absl::OkStatus();
}

bool FieldIndexes::BuildRunning(const std::string& field) const {
  return core_.jobs_->Active(core_.JobKey(absl::StrCat("field/", field)));
}

absl::Status FieldIndexes::Create(const std::string& field, FieldIndexType type,
                                  bool background) {
  uint64_t generation = 0;
  ZOOM_RETURN_IF_ERROR(ValidateFieldIndexName(field));
  {
    absl::MutexLock w(&core_.write_mu_);
    if (core_.dropped_) return core_.DroppedError();
    bool declared = false;
    for (const CollectionManifest::FieldIndex& f : core_.manifest_.field_indexes) {
      if (f.field != field) continue;
      if (f.type != FieldIndexTypeName(type)) {
        return absl::FailedPreconditionError(absl::StrCat(
            "field '", field.substr(0, 64), "' has a ", f.type, " index; delete it first"));
      }
      // Declared already: OK when built (or building); a build that failed
      // is started again below.
      if (core_.Current()->FieldReady(field) || BuildRunning(field)) return absl::OkStatus();
      declared = true;
    }
    if (!declared) {
      if (core_.manifest_.field_indexes.size() >= 64) {
        return absl::ResourceExhaustedError("a collection has at most 64 payload indexes");
      }
      core_.manifest_.field_indexes.push_back({field, FieldIndexTypeName(type)});
      if (absl::Status st = core_.SaveManifestLocked(); !st.ok()) {
        core_.manifest_.field_indexes.pop_back();
        return st;
      }
    }
    // Writes keep it current from here on; the build fills in the rest.
    generation = core_.Current()->DeclareField(field, type);
  }
  if (!background) return Build(field, generation);
  // After a build of the field that still runs (of a declaration deleted
  // since: it ends at its next step), as a job of its own.
  JobRunner::Job job;
  job.key = core_.JobKey(absl::StrCat("field/", field));
  job.group = core_.jobs_group_;
  job.priority = JobRunner::Priority::kUser;
  job.run = [this, field, generation] {
    return Build(field, generation);  // logged; filters scan meanwhile
  };
  if (!core_.jobs_->Submit(std::move(job))) {
    return absl::UnavailableError("the server is stopping: the payload index is built at the "
                                  "next start");
  }
  return absl::OkStatus();
}

absl::Status FieldIndexes::Build(const std::string& field, uint64_t generation) {
  // In steps under the write lock: each step reads the fields as they are
  // now, and writers update the index between steps (idempotent).
  Stopwatch sw;
  std::shared_ptr<Segment> seg;
  uint64_t from = 0, points = 0;
  for (bool done = false; !done;) {
    absl::MutexLock w(&core_.write_mu_);
    if (core_.dropped_) return core_.DroppedError();
    if (stopping_) return absl::CancelledError("the collection is closing");
    std::shared_ptr<Segment> now = core_.Current();
    // Compacted: the new segment's index is complete.
    if (seg != nullptr && now != seg) return absl::OkStatus();
    seg = now;
    if (absl::Status st = seg->FillFieldStep(field, generation, &from, &points, &done); !st.ok()) {
      ZOOM_LOG(WARNING, "collection ", core_.config_.name, ": payload index of '", field,
               "' failed: ", st.message(), " (filters on it scan; CreateFieldIndex retries)");
      return st;  // stays not ready
    }
  }
  if (seg->FieldReady(field)) {
    ZOOM_LOG(INFO, "collection ", core_.config_.name, ": payload index of '", field,
             "' built over ", points, " points in ",
             static_cast<int64_t>(sw.ElapsedMicros() / 1000), " ms");
  }
  return absl::OkStatus();
}

absl::Status FieldIndexes::Delete(const std::string& field) {
  absl::MutexLock w(&core_.write_mu_);
  if (core_.dropped_) return core_.DroppedError();
  auto& list = core_.manifest_.field_indexes;
  auto it = std::find_if(list.begin(), list.end(),
                         [&](const CollectionManifest::FieldIndex& f) { return f.field == field; });
  if (it == list.end()) {
    return absl::NotFoundError(
        absl::StrCat("field '", field.substr(0, 64), "' has no payload index"));
  }
  const CollectionManifest::FieldIndex removed = *it;
  list.erase(it);
  if (absl::Status st = core_.SaveManifestLocked(); !st.ok()) {
    list.push_back(removed);
    return st;
  }
  core_.Current()->RemoveField(field);
  return absl::OkStatus();
}

}  // namespace zoom::server
