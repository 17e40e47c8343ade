// File: server/engine/compactor.h
//
// Compaction of a collection's segment: a new segment with only the live
// records, built without the collection's write lock, then caught up with
// the writes made meanwhile and switched in by the collection (under it).
//
//   1. plan      (write lock, brief)  Collection: the live ids, a new record
//                                     space and file names, announced in
//                                     the manifest as pending
//   2. Copy      (no lock)            each live record read once (raw
//                                     bytes appended to the new file), its
//                                     payload committed in the new space;
//                                     the index rebuilt from the new file
//                                     (BuildSegmentIndex: ivf_hnsw_pq
//                                     streams it) and saved when there
//                                     was one
//   3. CatchUp   (write lock)         records deleted or overwritten since
//                                     die in the new segment, records added
//                                     since are appended to it
//   4. switch    (write lock)         Collection: one manifest names the
//                                     new space, file and snapshot
#ifndef ZOOM_SERVER_ENGINE_COMPACTOR_H_
#define ZOOM_SERVER_ENGINE_COMPACTOR_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/engine/collection_config.h"
#include "server/engine/segment.h"
#include "storage/metadata_store.h"
#include "storage/vector_store.h"

namespace zoom::server {

struct CompactionPlan {
  std::shared_ptr<Segment> old;
  uint64_t visible = 0;                // old's records at the plan
  std::vector<InternalId> live_ids;    // old's live records then, in id order
  uint32_t space = 0;                  // the new segment's record space
  std::string vectors_file, snapshot_file;
  bool rebuild_index = false;          // old has an index and enough points stay
  // The rebuild keeps the old index's quantiser (ivf_hnsw_pq, when no
  // retrain is due: a compaction removes points, it does not change what
  // they look like); else it trains anew.
  bool keep_quantizer = false;
};

struct CompactorOptions {
  storage::VectorStoreOptions store;
  EngineOptions engine;
  int build_threads = 2;
  // Set when the collection closes (the server stops): the copy stops at
  // its next chunk and the index build at its next cancellation point, with
  // CancelledError (may be null; must outlive the call).
  const std::atomic<bool>* cancel = nullptr;
};

// Step 2. Stops with `stop_error` once *stop turns true (checked per
// chunk). On error the caller removes the new files and space.
absl::StatusOr<std::shared_ptr<Segment>> CopyLiveRecords(
    const std::string& dir, const CompactionPlan& plan, const CollectionConfig& config,
    const CompactorOptions& options, storage::MetadataStore* metadata,
    const std::atomic<bool>& stop, const absl::Status& stop_error);

// Step 3, under the collection's write lock (plan.old takes no writes).
// *added / *removed: records applied.
absl::Status CatchUp(const CompactionPlan& plan, Segment* fresh, storage::MetadataStore* metadata,
                     uint64_t* added, uint64_t* removed);

}  // namespace zoom::server

#endif  // ZOOM_SERVER_ENGINE_COMPACTOR_H_
