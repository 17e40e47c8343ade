// File: server/grpc/vector_search_service.h
//
// VectorSearchService: the zoom.v1.VectorSearch gRPC service (callback API),
// the one adapter of the API over a CollectionBackend (server/api/backend.h:
// a standalone's or a node's Database, a router's cluster). A handler checks
// the call's key, admits it to the WorkerPool (so gRPC's threads never block
// on the SSD or on other servers), converts the proto into a checked request
// (server/api/convert.h: the server's limits, applied once), runs it on the
// backend, converts the answer back and maps absl::Status to the same gRPC
// code with the message. Every RPC is counted in Metrics. Search and
// SearchBatch start the backend's SearchAsync on a worker and return it:
// the answer finishes the call from wherever it comes (a router's fan-out:
// a gRPC callback thread; a local backend: the worker, at once).
//
// Thread safety: gRPC calls the handlers from many threads; the service has
// no mutable state of its own. The backend, Metrics (may be null) and pool
// outlive it.
#ifndef ZOOM_SERVER_GRPC_VECTOR_SEARCH_SERVICE_H_
#define ZOOM_SERVER_GRPC_VECTOR_SEARCH_SERVICE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/api/backend.h"
#include "server/api/convert.h"
#include "server/grpc/auth.h"
#include "server/grpc/worker_pool.h"
#include "server/metrics/metrics.h"
#include "zoom/v1/zoom.grpc.pb.h"

namespace zoom::server {

class PendingReply;  // unary_call.h

// Import is a raw method (grpc::ByteBuffer messages, parsed here): gRPC's
// typed streaming handler reports a message that does not parse like the
// end of the stream, which would end the import OK and drop the rest.
class VectorSearchService final
    : public v1::VectorSearch::WithRawCallbackMethod_RestoreSnapshot<
          v1::VectorSearch::WithRawCallbackMethod_Import<v1::VectorSearch::CallbackService>> {
 public:
  // `auth` (may be null: every call allowed) checks each call's API key.
  VectorSearchService(api::CollectionBackend* backend, Metrics* metrics, WorkerPool* pool,
                      const ServiceLimits& limits, const Authenticator* auth = nullptr);

  // What GetServerInfo answers (before the server starts).
  void SetServerVersion(std::string version) { version_ = std::move(version); }

  grpc::ServerUnaryReactor* GetServerInfo(grpc::CallbackServerContext* ctx,
                                          const v1::GetServerInfoRequest* req,
                                          v1::GetServerInfoResponse* resp) override;
  grpc::ServerUnaryReactor* CreateCollection(grpc::CallbackServerContext* ctx,
                                             const v1::CreateCollectionRequest* req,
                                             v1::CreateCollectionResponse* resp) override;
  grpc::ServerUnaryReactor* DropCollection(grpc::CallbackServerContext* ctx,
                                           const v1::DropCollectionRequest* req,
                                           v1::DropCollectionResponse* resp) override;
  grpc::ServerUnaryReactor* ListCollections(grpc::CallbackServerContext* ctx,
                                            const v1::ListCollectionsRequest* req,
                                            v1::ListCollectionsResponse* resp) override;
  grpc::ServerUnaryReactor* SetPayload(grpc::CallbackServerContext* ctx,
                                       const v1::SetPayloadRequest* req,
                                       v1::SetPayloadResponse* resp) override;
  grpc::ServerUnaryReactor* DeletePayload(grpc::CallbackServerContext* ctx,
                                          const v1::DeletePayloadRequest* req,
                                          v1::DeletePayloadResponse* resp) override;
  grpc::ServerUnaryReactor* GetCollection(grpc::CallbackServerContext* ctx,
                                          const v1::GetCollectionRequest* req,
                                          v1::GetCollectionResponse* resp) override;
  grpc::ServerUnaryReactor* Upsert(grpc::CallbackServerContext* ctx,
                                   const v1::UpsertRequest* req,
                                   v1::UpsertResponse* resp) override;
  grpc::ServerUnaryReactor* Delete(grpc::CallbackServerContext* ctx,
                                   const v1::DeleteRequest* req,
                                   v1::DeleteResponse* resp) override;
  grpc::ServerUnaryReactor* Get(grpc::CallbackServerContext* ctx, const v1::GetRequest* req,
                                v1::GetResponse* resp) override;
  grpc::ServerReadReactor<grpc::ByteBuffer>* Import(grpc::CallbackServerContext* ctx,
                                                    grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* Search(grpc::CallbackServerContext* ctx,
                                   const v1::SearchRequest* req,
                                   v1::SearchResponse* resp) override;
  grpc::ServerUnaryReactor* SearchBatch(grpc::CallbackServerContext* ctx,
                                        const v1::SearchBatchRequest* req,
                                        v1::SearchBatchResponse* resp) override;
  grpc::ServerUnaryReactor* Count(grpc::CallbackServerContext* ctx, const v1::CountRequest* req,
                                  v1::CountResponse* resp) override;
  grpc::ServerUnaryReactor* Scroll(grpc::CallbackServerContext* ctx,
                                   const v1::ScrollRequest* req,
                                   v1::ScrollResponse* resp) override;
  grpc::ServerUnaryReactor* CreateFieldIndex(grpc::CallbackServerContext* ctx,
                                             const v1::CreateFieldIndexRequest* req,
                                             v1::CreateFieldIndexResponse* resp) override;
  grpc::ServerUnaryReactor* DeleteFieldIndex(grpc::CallbackServerContext* ctx,
                                             const v1::DeleteFieldIndexRequest* req,
                                             v1::DeleteFieldIndexResponse* resp) override;
  grpc::ServerUnaryReactor* BuildIndex(grpc::CallbackServerContext* ctx,
                                       const v1::BuildIndexRequest* req,
                                       v1::BuildIndexResponse* resp) override;
  grpc::ServerUnaryReactor* Compact(grpc::CallbackServerContext* ctx,
                                    const v1::CompactRequest* req,
                                    v1::CompactResponse* resp) override;
  grpc::ServerUnaryReactor* CreateSnapshot(grpc::CallbackServerContext* ctx,
                                           const v1::CreateSnapshotRequest* req,
                                           v1::CreateSnapshotResponse* resp) override;
  grpc::ServerUnaryReactor* ListSnapshots(grpc::CallbackServerContext* ctx,
                                          const v1::ListSnapshotsRequest* req,
                                          v1::ListSnapshotsResponse* resp) override;
  grpc::ServerUnaryReactor* DeleteSnapshot(grpc::CallbackServerContext* ctx,
                                           const v1::DeleteSnapshotRequest* req,
                                           v1::DeleteSnapshotResponse* resp) override;
  grpc::ServerWriteReactor<v1::SnapshotChunk>* DownloadSnapshot(
      grpc::CallbackServerContext* ctx, const v1::DownloadSnapshotRequest* req) override;
  grpc::ServerReadReactor<grpc::ByteBuffer>* RestoreSnapshot(grpc::CallbackServerContext* ctx,
                                                             grpc::ByteBuffer* resp) override;
  api::CollectionBackend* backend() const { return backend_; }

  // Publishes every collection's gauges to Metrics (the server calls it
  // periodically; a standalone's or node's backend).
  void RefreshCollectionMetrics() const;

  // One Upsert / Import message applied as the RPC would (shared with the
  // Import reactor; the fuzz targets' way in) under write concern `concern`
  // (zoom.v1.WriteConcern's number): the points taken added to
  // answer->count, the write's tokens appended, its concern set.
  absl::Status ApplyPoints(const api::Call& call, const std::string& collection,
                           const google::protobuf::RepeatedPtrField<v1::Point>& points,
                           int concern, api::WriteAnswer* answer) const;
  WorkerPool* pool() const { return pool_; }
  const Authenticator* auth() const { return auth_; }
  // A Search / Get answered as the RPC would (the same validation and
  // limits), without gRPC: the fuzz targets' way in.
  absl::Status AnswerSearch(const v1::SearchRequest& req, v1::SearchResponse* resp) const;
  absl::Status AnswerGet(const v1::GetRequest& req, v1::GetResponse* resp) const;
  void Record(const char* rpc, const absl::Status& status, double seconds) const;

 private:
  // Whether an RPC writes or administers collections (a node refuses it).
  enum class Writes : bool { kNo = false, kYes = true };
  // Runs `work(call)` on the pool and finishes the RPC with its status.
  template <typename Work>
  grpc::ServerUnaryReactor* Run(grpc::CallbackServerContext* ctx, const char* rpc,
                                WorkClass cls, uint64_t units, Writes writes, Work work);
  // Runs `work(call, reply)` on the pool; the RPC finishes at the reply's
  // Complete, on whichever thread calls it (unary_call.h RunAsyncOnPool).
  template <typename Work>
  grpc::ServerUnaryReactor* RunAsync(grpc::CallbackServerContext* ctx, const char* rpc,
                                     WorkClass cls, uint64_t units, Work work);

  // A Search on this thread (load shedding, an idle server's preview).
  grpc::ServerUnaryReactor* SearchHere(grpc::CallbackServerContext* ctx,
                                       const v1::SearchRequest* req, v1::SearchResponse* resp,
                                       bool degrade);
  absl::Status DoSearch(const api::Call& call, const v1::SearchRequest& req, bool degrade,
                        v1::SearchResponse* resp) const;
  absl::Status DoSearchBatch(const api::Call& call, const v1::SearchBatchRequest& req,
                             bool degrade, v1::SearchBatchResponse* resp) const;
  // A search started on the backend (SearchAsync) whose answer completes
  // `reply`: no thread waits for it.
  void StartSearch(const api::Call& call, const v1::SearchRequest* req, v1::SearchResponse* resp,
                   std::shared_ptr<PendingReply> reply) const;
  void StartSearchBatch(const api::Call& call, const v1::SearchBatchRequest* req,
                        v1::SearchBatchResponse* resp, std::shared_ptr<PendingReply> reply) const;
  // An answer into the response, its stats into Metrics (where the search
  // ran here).
  void FillSearch(const std::string& collection, api::SearchAnswer a,
                  v1::SearchResponse* resp) const;
  void FillSearchBatch(const std::string& collection, std::vector<api::SearchAnswer> answers,
                       v1::SearchBatchResponse* resp) const;

  api::CollectionBackend* backend_;
  Metrics* metrics_;
  WorkerPool* pool_;
  ServiceLimits limits_;
  const Authenticator* auth_;
  std::string version_;
  int64_t started_unix_ms_ = absl::ToUnixMillis(absl::Now());
};

// The call of a gRPC request for a backend: `deadline`, the client's
// credentials (its authorization / api-key metadata), `cancelled` (the
// reactor's; may be null).
api::Call CallOf(const grpc::ServerContextBase& ctx, absl::Time deadline,
                 const std::atomic<bool>* cancelled);
// ... with the call's own deadline.
api::Call CallOf(const grpc::CallbackServerContext* ctx, const std::atomic<bool>* cancelled);

}  // namespace zoom::server

#endif  // ZOOM_SERVER_GRPC_VECTOR_SEARCH_SERVICE_H_
