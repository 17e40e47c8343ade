// File: server/grpc/vector_search_service.h
//
// VectorSearchService: the zoom.v1.VectorSearch gRPC service (callback API)
// over a Database. Handlers validate the request against the server's
// limits, convert proto <-> engine types, run the work on a WorkerPool (so
// gRPC's threads never block on the SSD) and map absl::Status to the same
// gRPC code with the message. Every RPC is counted in Metrics.
//
// Thread safety: gRPC calls the handlers from many threads; the service has
// no mutable state of its own besides the Database and Metrics, which are
// thread-safe. The Database, Metrics (may be null) and pool outlive it.
#ifndef ZOOM_SERVER_GRPC_VECTOR_SEARCH_SERVICE_H_
#define ZOOM_SERVER_GRPC_VECTOR_SEARCH_SERVICE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/engine/database.h"
#include "server/grpc/auth.h"
#include "server/grpc/worker_pool.h"
#include "server/metrics/metrics.h"
#include "zoom/v1/zoom.grpc.pb.h"

namespace zoom::server {

struct ServiceLimits {
  uint32_t max_k = 1000;
  uint32_t max_batch = 10000;  // points per Upsert/Import message, queries per SearchBatch
  uint32_t max_ids = 100000;   // ids per Get/Delete
  uint32_t max_ef = 10000;
  uint32_t max_nprobe = 65536;
  uint32_t max_rerank = 10000;
  uint32_t max_payload_bytes = 1 << 20;
  // The largest answer built (payloads and vectors counted as they are
  // read): the server's send limit, less room for the framing.
  uint64_t max_response_bytes = (uint64_t{64} << 20) - (64 << 10);
};

// A zoomd that is a node of a cluster (zoomd --role=node, server/cluster):
// its collections are shard replicas, written by their logs only.
struct ClusterNodeRole {
  std::string cluster, node;
  // Session consistency (SearchRequest.consistency SESSION): OK once local
  // collection `collection` has applied its shard's token among `tokens`,
  // Unavailable saying how far it is when not by `deadline`.
  std::function<absl::Status(const std::string& collection,
                             const google::protobuf::RepeatedPtrField<v1::WriteToken>& tokens,
                             absl::Time deadline)>
      wait_applied;
  // How long a SESSION search waits for its tokens (then UNAVAILABLE: the
  // router asks another replica).
  absl::Duration max_session_wait = absl::Seconds(1);
};

// Import is a raw method (grpc::ByteBuffer messages, parsed here): gRPC's
// typed streaming handler reports a message that does not parse like the
// end of the stream, which would end the import OK and drop the rest.
class VectorSearchService final
    : public v1::VectorSearch::WithRawCallbackMethod_RestoreSnapshot<
          v1::VectorSearch::WithRawCallbackMethod_Import<v1::VectorSearch::CallbackService>> {
 public:
  // `auth` (may be null: every call allowed) checks each call's API key.
  VectorSearchService(Database* db, Metrics* metrics, WorkerPool* pool,
                      const ServiceLimits& limits, const Authenticator* auth = nullptr);

  // What GetServerInfo answers (before the server starts).
  void SetServerVersion(std::string version) { version_ = std::move(version); }
  // Makes this service a cluster node's (before the server starts): the
  // writes and collection admin of clients are refused (FailedPrecondition
  // naming the router to use), searches wait for session tokens.
  void SetClusterNode(ClusterNodeRole role) { cluster_ = std::move(role); }
  // FailedPrecondition for `rpc` (a write or collection admin) on a cluster
  // node; OK otherwise.
  absl::Status ClusterRefuses(const char* rpc) const;

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
  Database* db() const { return db_; }

  // Publishes every collection's gauges to Metrics (the server calls it
  // periodically).
  void RefreshCollectionMetrics() const;

  // Shared with the Import reactor.
  absl::Status ApplyPoints(const std::string& collection,
                           const google::protobuf::RepeatedPtrField<v1::Point>& points,
                           uint64_t* applied) const;
  WorkerPool* pool() const { return pool_; }
  const Authenticator* auth() const { return auth_; }
  // A Search / Get answered as the RPC would (the same validation and
  // limits), without gRPC: the fuzz targets' way in.
  absl::Status AnswerSearch(const v1::SearchRequest& req, v1::SearchResponse* resp) const;
  absl::Status AnswerGet(const v1::GetRequest& req, v1::GetResponse* resp) const;
  void Record(const char* rpc, const absl::Status& status, double seconds) const;

 private:
  // Runs `work` on the pool and finishes the RPC with its status.
  template <typename Work>
  grpc::ServerUnaryReactor* Run(grpc::CallbackServerContext* ctx, const char* rpc,
                                WorkClass cls, uint64_t units, Work work);

  // One query into `resp`; its payload and vector bytes are taken from
  // *budget (ResourceExhausted past it). `degrade`: the preview only,
  // flagged degraded (load shedding with allow_partial).
  absl::Status DoSearch(absl::Time deadline, const Collection& c, const v1::SearchRequest& req,
                        const std::atomic<bool>* cancelled, v1::SearchResponse* resp,
                        uint64_t* budget, bool degrade) const;
  // A SearchBatch whose queries share their knobs and flags runs as one
  // pipelined Collection::SearchBatch; the others query by query.
  // `degrade`: every query's preview only, flagged degraded (shedding).
  absl::Status DoSearchBatch(absl::Time deadline, const Collection& c,
                             const v1::SearchBatchRequest& req, const std::atomic<bool>* cancelled,
                             v1::SearchBatchResponse* resp, uint64_t* budget,
                             bool degrade = false) const;
  // The request's filter (empty without one); InvalidArgument /
  // ResourceExhausted for one that must not run.
  absl::Status FilterOf(const v1::SearchRequest& req, Filter* out) const;
  // A query's answer into `resp` (the bytes taken from *budget); `filter`
  // (the query's) names the unindexed field in a scan's warning.
  void FillResponse(const Collection& c, const Filter* filter, QueryResult* result,
                    bool degrade, v1::SearchResponse* resp, uint64_t* budget) const;
  // The collection's params of one request (the budget is set by the
  // caller); the query itself is validated by the engine.
  CollectionSearchParams ParamsOf(const v1::SearchRequest& req, absl::Time deadline,
                                  const std::atomic<bool>* cancelled, bool degrade) const;

  Database* db_;
  Metrics* metrics_;
  WorkerPool* pool_;
  ServiceLimits limits_;
  const Authenticator* auth_;
  std::string version_;
  ClusterNodeRole cluster_;
  int64_t started_unix_ms_ = absl::ToUnixMillis(absl::Now());
};

// The points of an Upsert / Import message as engine points (`refs` point
// into `points`, *fields and *converted: the vectors sent as vector_bytes,
// as floats): InvalidArgument for none or more than limits.max_batch, a
// vector of another dimension than `dim` or given both ways, a payload
// over limits.max_payload_bytes, fields that do not convert. What the
// engine checks besides is ValidatePoints (collection.h).
absl::Status PointsFromProto(const std::string& collection, uint32_t dim,
                             const google::protobuf::RepeatedPtrField<v1::Point>& points,
                             const ServiceLimits& limits, std::vector<PointRef>* refs,
                             std::vector<PayloadFields>* fields, std::vector<float>* converted);

// InvalidArgument for a search's cluster fields out of range (min_coverage
// outside [0, 1], an unknown consistency, more than 1,024 write tokens).
absl::Status CheckClusterFields(const v1::SearchRequest& req);

// A CreateCollection spec as a config (FromProto), with the limits' checks
// of its default knobs: what a standalone zoomd and a router both refuse.
absl::StatusOr<CollectionConfig> ConfigFromSpec(const v1::CollectionSpec& spec,
                                                const ServiceLimits& limits);

// Proto <-> engine.
v1::CollectionInfo ToProto(const CollectionInfo& info);
absl::StatusOr<CollectionConfig> FromProto(const v1::CollectionSpec& spec);

}  // namespace zoom::server

#endif  // ZOOM_SERVER_GRPC_VECTOR_SEARCH_SERVICE_H_
