// File: server/engine/segment.h
//
// Segment: one vector file, the SearchEngine over it (preview index +
// fullview) and the id space of its records (IdTracker + the RocksDB
// record space `space`). A collection serves one segment at a time;
// compaction builds a new one and switches. Readers hold a
// shared_ptr<Segment> for the length of a call.
//
// Retirement: a replaced segment does no I/O when its last reader lets go
// (that may be a search thread). Its records are dropped by the
// collection's maintenance once it sees no reader holds it
// (Collection::ReleaseRetired); the manifest lists the space meanwhile, so
// a crash leaves nothing behind either.
#ifndef ZOOM_SERVER_ENGINE_SEGMENT_H_
#define ZOOM_SERVER_ENGINE_SEGMENT_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "index/vector_index.h"
#include "server/engine/collection_config.h"
#include "server/engine/id_tracker.h"
#include "server/engine/payload_index.h"
#include "server/engine/search_engine.h"
#include "storage/metadata_store.h"
#include "storage/vector_store.h"

namespace zoom::server {

struct Segment : public index::IdFilter {
  uint32_t space = 0;
  std::string vectors_file;  // name inside the collection's directory
  std::unique_ptr<SearchEngine> engine;
  IdTracker ids;
  // Typed payload indexes over this segment's records (declared by the
  // collection; filled at open, kept current by its writes).
  PayloadIndex payload;

  // Creates an empty vector file (create) or opens one and loads its
  // records of `space` from `metadata` (the newest record of an external
  // id is live; records past the file's end are ignored with a warning).
  // DataLoss when the file's dim/dtype differ from the config's.
  static absl::StatusOr<std::shared_ptr<Segment>> Open(
      const std::string& dir, const std::string& vectors_file, uint32_t space, bool create,
      const CollectionConfig& config, const storage::VectorStoreOptions& store_options,
      const EngineOptions& engine_options, const storage::MetadataStore& metadata);

  // A search never returns a record that is not live.
  bool IsExcluded(InternalId id) const override { return !ids.IsLive(id); }
};

}  // namespace zoom::server

#endif  // ZOOM_SERVER_ENGINE_SEGMENT_H_
