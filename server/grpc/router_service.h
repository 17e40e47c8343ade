// File: server/grpc/router_service.h
//
// RouterService: the zoom.v1.VectorSearch API of a zoomd cluster, served by
// a stateless router (zoomd --role=router; any number of them). It holds no
// data: the shard maps and live nodes come from the cluster's JetStream
// key-value buckets (ClusterCatalog, re-read every `refresh` and on a miss),
// writes go to the collections' JetStream streams, reads to the nodes.
//
// Writes (Upsert, Delete by ids, SetPayload, DeletePayload, field indexes):
// validated here as a node would (PointsFromProto, ValidatePoints: what a
// replica would refuse never enters the log), split by shard (ShardOf) into
// log entries of at most max_entry_bytes, published; the reply comes after
// JetStream's acknowledgement of every entry (stored by a quorum of the
// stream's replicas) and carries a WriteToken (shard, sequence) per shard.
// A publish that fails is UNAVAILABLE naming the stream and what was
// acknowledged before it (retrying the whole request is safe: every write
// is idempotent).
//
// Searches: one replica per shard (serving ones only: applied close to the
// head; not suspected after a recent failure; then the fewest outstanding
// requests, then the lowest recent latency), each with the client's
// deadline less `merge_margin`. A replica that fails is replaced by the
// next at once (failover); one that has not answered after the shard's
// recent p95 latency gets a second replica asked beside it (a hedge; the
// first answer wins, the other is cancelled). Top-k merged by score. The
// reply's `coverage` is the share of shards that answered; short of 1 it
// is `degraded` and returned only when the request allows it
// (allow_partial, or coverage >= min_coverage), else UNAVAILABLE before the
// deadline naming the shards and why.
//
// Scroll: each shard's page from the offset, merged by id (a page ends at
// the limit, the byte budget, or the lowest next_offset of a shard that
// stopped early). Compact: every live replica compacts its own files.
// Delete by filter: the ids matching when the router reads them (Scroll),
// deleted by id through the log (not atomic with writes racing it).
// Not routed (UNIMPLEMENTED saying so): snapshots.
// GetCollection sums the shards' records; ListCollections does so
// best-effort.
//
// RouterDecoderService serves zoom.v1.Decoder beside it: decoder models are
// read-only and every node serves each (the cluster's models bucket).
//
// Thread safety: gRPC calls the handlers from many threads.
#ifndef ZOOM_SERVER_GRPC_ROUTER_SERVICE_H_
#define ZOOM_SERVER_GRPC_ROUTER_SERVICE_H_

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/cluster/cluster_catalog.h"
#include "server/cluster/jetstream.h"
#include "server/grpc/auth.h"
#include "server/grpc/decoder_service.h"
#include "server/grpc/vector_search_service.h"
#include "server/grpc/worker_pool.h"
#include "server/metrics/metrics.h"
#include "zoom/v1/zoom.grpc.pb.h"

namespace grpc {
class ChannelCredentials;
}

namespace zoom::server {

struct RouterOptions {
  cluster::ClusterCatalogOptions catalog;
  cluster::JetStreamOptions nats;
  absl::Duration refresh = absl::Milliseconds(500);
  // A search whose client set no deadline gets this one.
  absl::Duration default_deadline = absl::Seconds(10);
  // Kept from the client's deadline for the merge and the reply.
  absl::Duration merge_margin = absl::Milliseconds(3);
  // A hedge waits the shard's recent p95 latency, at least this; before
  // 16 latencies are known, default_hedge_delay.
  absl::Duration min_hedge_delay = absl::Milliseconds(1);
  absl::Duration default_hedge_delay = absl::Milliseconds(20);
  bool hedge = true;
  // A replica that failed is asked last for this long.
  absl::Duration suspect_for = absl::Seconds(2);
  // A log entry's size at most (NATS's max payload is 1 MiB by default).
  size_t max_entry_bytes = 1000000;
  // How long CreateCollection waits for every shard to have a serving
  // replica before it answers (OK either way: nodes converge on their own).
  absl::Duration create_wait = absl::Seconds(10);
  ServiceLimits limits;
  std::string version = "0.1.0";
  // The credentials of the router's channels to the nodes (null: plaintext).
  std::shared_ptr<grpc::ChannelCredentials> node_credentials;
};

class RouterService final
    : public v1::VectorSearch::WithRawCallbackMethod_Import<v1::VectorSearch::CallbackService> {
 public:
  // Connects to NATS, opens the catalog, reads the topology once and starts
  // the refresh thread. `metrics` may be null; `pool` runs the handlers
  // (they wait on the nodes: size it for concurrency, not cores).
  static absl::StatusOr<std::unique_ptr<RouterService>> Create(RouterOptions options,
                                                               Metrics* metrics, WorkerPool* pool,
                                                               const Authenticator* auth);
  ~RouterService() override;

  // Reads the shard maps and the live nodes now.
  absl::Status Refresh();

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
  grpc::ServerUnaryReactor* GetCollection(grpc::CallbackServerContext* ctx,
                                          const v1::GetCollectionRequest* req,
                                          v1::GetCollectionResponse* resp) override;
  grpc::ServerUnaryReactor* Upsert(grpc::CallbackServerContext* ctx, const v1::UpsertRequest* req,
                                   v1::UpsertResponse* resp) override;
  grpc::ServerUnaryReactor* Delete(grpc::CallbackServerContext* ctx, const v1::DeleteRequest* req,
                                   v1::DeleteResponse* resp) override;
  // Each message as an Upsert, acknowledged by the log before the next is
  // read.
  grpc::ServerReadReactor<grpc::ByteBuffer>* Import(grpc::CallbackServerContext* ctx,
                                                    grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* SetPayload(grpc::CallbackServerContext* ctx,
                                       const v1::SetPayloadRequest* req,
                                       v1::SetPayloadResponse* resp) override;
  grpc::ServerUnaryReactor* DeletePayload(grpc::CallbackServerContext* ctx,
                                          const v1::DeletePayloadRequest* req,
                                          v1::DeletePayloadResponse* resp) override;
  grpc::ServerUnaryReactor* CreateFieldIndex(grpc::CallbackServerContext* ctx,
                                             const v1::CreateFieldIndexRequest* req,
                                             v1::CreateFieldIndexResponse* resp) override;
  grpc::ServerUnaryReactor* DeleteFieldIndex(grpc::CallbackServerContext* ctx,
                                             const v1::DeleteFieldIndexRequest* req,
                                             v1::DeleteFieldIndexResponse* resp) override;
  grpc::ServerUnaryReactor* Get(grpc::CallbackServerContext* ctx, const v1::GetRequest* req,
                                v1::GetResponse* resp) override;
  grpc::ServerUnaryReactor* Search(grpc::CallbackServerContext* ctx,
                                   const v1::SearchRequest* req,
                                   v1::SearchResponse* resp) override;
  grpc::ServerUnaryReactor* SearchBatch(grpc::CallbackServerContext* ctx,
                                        const v1::SearchBatchRequest* req,
                                        v1::SearchBatchResponse* resp) override;
  grpc::ServerUnaryReactor* Count(grpc::CallbackServerContext* ctx, const v1::CountRequest* req,
                                  v1::CountResponse* resp) override;
  grpc::ServerUnaryReactor* BuildIndex(grpc::CallbackServerContext* ctx,
                                       const v1::BuildIndexRequest* req,
                                       v1::BuildIndexResponse* resp) override;
  grpc::ServerUnaryReactor* Scroll(grpc::CallbackServerContext* ctx,
                                   const v1::ScrollRequest* req,
                                   v1::ScrollResponse* resp) override;
  grpc::ServerUnaryReactor* Compact(grpc::CallbackServerContext* ctx,
                                    const v1::CompactRequest* req,
                                    v1::CompactResponse* resp) override;
  grpc::ServerUnaryReactor* CreateSnapshot(grpc::CallbackServerContext* ctx,
                                           const v1::CreateSnapshotRequest* req,
                                           v1::CreateSnapshotResponse* resp) override;

  struct Impl;
  Impl* impl() const { return impl_.get(); }

 private:
  explicit RouterService(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The zoom.v1.Decoder API of a cluster, served by a router. Models are
// read-only and every node serves each one, loaded from its own
// --models_dir (the same files on every node):
//   * LoadModel records the model in the models bucket (the same model
//     again is OK; another under its name AlreadyExists) and the nodes load
//     it; with `wait` the reply comes once every live node serves it (a
//     node whose load failed fails the call, naming the node and its
//     error, and the model is removed again), else at once, LOADING.
//   * UnloadModel removes it (NotFound when absent); the nodes unload it.
//   * ListModels: each model as the nodes report it (serving before
//     loading before failed).
//   * TopK, and each step of StreamTopK, goes to the next node serving the
//     model (round-robin; a node that failed recently last), with failover
//     to the others on failure; NotFound for a model the cluster does not
//     have, Unavailable while no node serves it yet (saying their states).
// `router` outlives the service.
class RouterDecoderService final : public DecoderCallbackBase, public TopKBackend {
 public:
  explicit RouterDecoderService(RouterService* router) : impl_(router->impl()) {}

  grpc::ServerUnaryReactor* LoadModel(grpc::CallbackServerContext* ctx,
                                      const v1::LoadModelRequest* req,
                                      v1::LoadModelResponse* resp) override;
  grpc::ServerUnaryReactor* UnloadModel(grpc::CallbackServerContext* ctx,
                                        const v1::UnloadModelRequest* req,
                                        v1::UnloadModelResponse* resp) override;
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* ctx,
                                       const v1::ListModelsRequest* req,
                                       v1::ListModelsResponse* resp) override;
  grpc::ServerUnaryReactor* TopK(grpc::CallbackServerContext* ctx, const v1::TopKRequest* req,
                                 v1::TopKResponse* resp) override;
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* StreamTopK(
      grpc::CallbackServerContext* ctx) override;

  absl::Status Decode(const v1::TopKRequest& req, const CallContext& call,
                      const grpc::ServerContextBase& ctx, v1::TopKResponse* resp) const override;
  WorkerPool* pool() const override;
  const Authenticator* auth() const override;
  void Record(const char* rpc, const absl::Status& status, double seconds) const override;

 private:
  RouterService::Impl* impl_;
};

}  // namespace zoom::server

#endif  // ZOOM_SERVER_GRPC_ROUTER_SERVICE_H_
