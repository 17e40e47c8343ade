// File: server/api/backend.h
//
// CollectionBackend: what serves zoom.v1.VectorSearch behind the one API
// adapter (server/grpc/vector_search_service.h; a JSON gateway would be
// another adapter over the same backend). The adapter authenticates, admits
// (WorkerPool), converts the proto into a checked request (convert.h) and
// the answer back; the backend runs it:
//
//   LocalBackend    (local_backend.h) the collections of this process's
//                   Database: a standalone zoomd
//   NodeBackend     (local_backend.h) a cluster node's: refuses the
//                   clients' writes (the shards are written by their logs),
//                   waits for session tokens
//   ClusterBackend  a router's: the collections of a cluster, written
//                   through their logs, read from the nodes
//                   (server/cluster/router/cluster_backend.h)
//
// Every method answers one request: a Status with the code and message the
// client gets (NotFound "collection 'x' does not exist", ...). A backend
// is called from many threads at once.
#ifndef ZOOM_SERVER_API_BACKEND_H_
#define ZOOM_SERVER_API_BACKEND_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/api/types.h"
#include "server/engine/database.h"

namespace zoom::server::api {

// A snapshot archive being read out (DownloadSnapshot).
class SnapshotReader {
 public:
  virtual ~SnapshotReader() = default;
  virtual const SnapshotInfo& info() const = 0;
  // Up to `max` next bytes into *out (empty at the end); DataLoss when the
  // archive cannot be read.
  virtual absl::Status Read(size_t max, std::string* out) = 0;
};

// A snapshot being restored (RestoreSnapshot): an upload's bytes appended
// as they come, or a snapshot on the server named at the start.
class SnapshotRestore {
 public:
  // Removes what was staged, unless Finish moved it.
  virtual ~SnapshotRestore() = default;
  // ResourceExhausted when the bytes cannot be staged (disk full).
  virtual absl::Status Append(absl::string_view data) = 0;
  // Verifies the archive and restores it: the restored collection.
  virtual absl::StatusOr<CollectionDescription> Finish(const Call& call) = 0;
};

class CollectionBackend {
 public:
  virtual ~CollectionBackend() = default;

  // OK when this backend takes the clients' writes and collection admin
  // (`rpc` names the call in the refusal); a cluster node refuses them.
  virtual absl::Status AcceptsWrites(absl::string_view rpc) const {
    (void)rpc;
    return absl::OkStatus();
  }
  // Whether the searches run here (their engine stats are this process's
  // to count in its metrics); a router's run on its nodes, which count them.
  virtual bool SearchesHere() const { return false; }
  // Whether a search of `collection` that stays in RAM (no payloads,
  // vectors, filter or exact scan) can be answered on the calling thread:
  // the collection is local and has an index.
  virtual bool AnswersInRam(const std::string& collection) const {
    (void)collection;
    return false;
  }

  // ---- collections
  virtual absl::StatusOr<CollectionDescription> CreateCollection(
      const Call& call, const CreateCollectionRequest& req) = 0;
  virtual absl::Status DropCollection(const Call& call, const std::string& name) = 0;
  virtual absl::StatusOr<std::vector<CollectionDescription>> ListCollections(
      const Call& call) = 0;
  virtual absl::StatusOr<CollectionDescription> GetCollection(const Call& call,
                                                              const std::string& name) = 0;

  // ---- points
  virtual absl::StatusOr<WriteAnswer> Upsert(const Call& call, const UpsertRequest& req) = 0;
  virtual absl::StatusOr<WriteAnswer> Delete(const Call& call, const DeleteRequest& req) = 0;
  virtual absl::StatusOr<std::vector<PointData>> Get(const Call& call,
                                                     const GetRequest& req) = 0;
  virtual absl::StatusOr<WriteAnswer> SetPayload(const Call& call,
                                                 const SetPayloadRequest& req) = 0;
  virtual absl::StatusOr<WriteAnswer> DeletePayload(const Call& call,
                                                    const DeletePayloadRequest& req) = 0;

  // ---- reads
  virtual absl::StatusOr<SearchAnswer> Search(const Call& call, const SearchRequest& req) = 0;
  // The answers in the queries' order; an error names its query ("query
  // #i: ..."). The answer's size is checked before anything runs.
  virtual absl::StatusOr<std::vector<SearchAnswer>> SearchBatch(
      const Call& call, const SearchBatchRequest& req) = 0;
  // Search and SearchBatch whose answer comes to `done`, once: on this
  // thread before the call returns, or later on another one (a router's:
  // no thread waits while its nodes answer; `done` must then be short, it
  // holds a gRPC thread). The request is the backend's (kept as long as it
  // needs it); `call`'s credentials are copied, its `cancelled` flag must
  // outlive `done`. By default the blocking call, then `done`.
  virtual void SearchAsync(const Call& call, SearchRequest req,
                           std::function<void(absl::StatusOr<SearchAnswer>)> done) {
    done(Search(call, req));
  }
  virtual void SearchBatchAsync(
      const Call& call, SearchBatchRequest req,
      std::function<void(absl::StatusOr<std::vector<SearchAnswer>>)> done) {
    done(SearchBatch(call, req));
  }
  virtual absl::StatusOr<CountAnswer> Count(const Call& call, const CountRequest& req) = 0;
  virtual absl::StatusOr<ScrollAnswer> Scroll(const Call& call, const ScrollRequest& req) = 0;

  // ---- indexes and maintenance
  virtual absl::StatusOr<CollectionDescription> CreateFieldIndex(
      const Call& call, const CreateFieldIndexRequest& req) = 0;
  virtual absl::StatusOr<CollectionDescription> DeleteFieldIndex(
      const Call& call, const DeleteFieldIndexRequest& req) = 0;
  // Starts (or joins) the build; `done` gets the collection once it started
  // or, with req.wait, once it ended. `done` may run on this thread or on
  // another one later (no worker waits for a build); it runs once.
  virtual void BuildIndex(const Call& call, const BuildIndexRequest& req,
                          std::function<void(absl::StatusOr<CollectionDescription>)> done) = 0;
  virtual absl::StatusOr<CollectionDescription> Compact(const Call& call,
                                                        const std::string& collection) = 0;

  // ---- snapshots
  virtual absl::StatusOr<SnapshotInfo> CreateSnapshot(const Call& call,
                                                      const std::string& collection) = 0;
  virtual absl::StatusOr<std::vector<SnapshotInfo>> ListSnapshots(
      const Call& call, const std::string& collection) = 0;
  virtual absl::Status DeleteSnapshot(const Call& call, const std::string& collection,
                                      const std::string& name) = 0;
  virtual absl::StatusOr<std::unique_ptr<SnapshotReader>> OpenSnapshot(
      const Call& call, const std::string& collection, const std::string& name) = 0;
  // A restore into `collection` (replacing it when `overwrite`), from
  // `source` (a snapshot on the server, "<collection>/<name>.zsnap") or,
  // when `source` is empty, from the bytes appended.
  virtual absl::StatusOr<std::unique_ptr<SnapshotRestore>> BeginRestore(
      const Call& call, const std::string& collection, bool overwrite,
      const std::string& source) = 0;
};

}  // namespace zoom::server::api

#endif  // ZOOM_SERVER_API_BACKEND_H_
