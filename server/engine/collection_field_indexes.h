// File: server/engine/collection_field_indexes.h
//
// FieldIndexes: a collection's declared payload field indexes (the
// manifest's field_indexes): a declaration (Create), its build over the
// points already stored, and its removal (Delete). The indexes themselves
// are the serving segment's (PayloadIndex, segment.h): every write keeps a
// declared one current, and Collection::Open and a compaction's switch
// fill them from the manifest.
//
// Owns the stop flag of its builds; everything else it reaches through the
// collection's core (collection_core.h): the write lock, the manifest (saved
// by the core), the serving segment, the job keys ("field/<name>").
//
// Thread safety: every method is safe from many threads.
#ifndef ZOOM_SERVER_ENGINE_COLLECTION_FIELD_INDEXES_H_
#define ZOOM_SERVER_ENGINE_COLLECTION_FIELD_INDEXES_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "server/engine/collection_core.h"
#include "server/engine/payload_index.h"

namespace zoom::server {

// InvalidArgument unless `field` can name a payload index (1..256 bytes,
// no NUL byte): what FieldIndexes::Create refuses first.
absl::Status ValidateFieldIndexName(std::string_view field);

class FieldIndexes {
 public:
  // `core` outlives it.
  explicit FieldIndexes(CollectionCore& core) : core_(core) {}
  FieldIndexes(const FieldIndexes&) = delete;
  FieldIndexes& operator=(const FieldIndexes&) = delete;

  // Declares an in-RAM index of payload field `field` (it need not exist
  // yet: it fills as points arrive), built over the existing points in the
  // background; every write keeps it current from the call on, and until
  // it is built a filter on the field is evaluated from the stored
  // payloads (flagged). Durable (the manifest); rebuilt from RocksDB at
  // open. OK when the same index exists; FailedPrecondition for another
  // type on the field; InvalidArgument for a bad name.
  // background false: built on the caller's thread before it returns.
  absl::Status Create(const std::string& field, FieldIndexType type, bool background = true);
  // NotFound when the field has no index.
  absl::Status Delete(const std::string& field);

  // For the collection's destructor: a running build stops at its next
  // step (Cancelled); the collection then awaits its jobs.
  void StopBuilds() { stopping_ = true; }

 private:
  // The build of one declared field (Create) of the index's `generation`
  // (it stops when the field is deleted or declared again), in steps under
  // the write lock.
  absl::Status Build(const std::string& field, uint64_t generation)
      ABSL_LOCKS_EXCLUDED(core_.write_mu_);
  bool BuildRunning(const std::string& field) const;

  CollectionCore& core_;
  std::atomic<bool> stopping_{false};
};

}  // namespace zoom::server

#endif  // ZOOM_SERVER_ENGINE_COLLECTION_FIELD_INDEXES_H_
