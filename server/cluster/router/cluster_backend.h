// File: server/cluster/router/cluster_backend.h
//
// ClusterBackend: the CollectionBackend of a router (zoomd --role=router):
// the collections of a zoomd cluster, served through the same adapter as a
// standalone's (server/grpc/vector_search_service.h), so that a request is
// checked once and answered alike on both (tests/conformance).
//
// Files: cluster_backend.cc (collections, reads, indexes and maintenance),
// cluster_backend_write.cc (writes), cluster_backend_search.cc (searches).
//
// Writes (Upsert, Delete by ids, SetPayload, DeletePayload, field indexes):
// checked here as a node would (PointRefsOf, ValidatePoints: what a replica
// would refuse never enters the log), then published through the shards'
// logs and acknowledged under the request's write concern (WritePublisher);
// the answer carries a WriteToken a shard written. A write does not read
// first: under MAJORITY and ALL Delete's, SetPayload's and DeletePayload's
// counts are what the replicas reported changing; under LOG the ids sent
// (zoom.proto says so).
//
// Reads: one replica a shard (the router's fan-out, fan_out.h: failover,
// hedging), each with the client's deadline (default_deadline when none)
// less the merge margin, merged over the API's types (merge.h). Search and
// SearchBatch are completion-driven (SearchAsync, SearchBatchAsync: no
// thread waits while the nodes answer; the merge runs in the fan-out's
// continuation, a batch's next query starts there); their blocking forms
// wait for those. The other reads block their caller's thread. A search's
// `coverage` is the share of shards that answered; short of 1 it is
// `degraded` and returned only when the request allows it (allow_partial,
// or coverage >= min_coverage), else UNAVAILABLE naming the shards and why.
// Count, Scroll, Get and GetCollection need every shard.
//
// Scroll: each shard's page from the offset, merged by id. Compact and
// BuildIndex: every live replica, its own files. Delete by filter: the ids
// matching when the router reads them (Scroll), deleted by id through the
// log (not atomic with writes racing it), read from replicas that have
// applied every write acknowledged before the call; without `all`, first
// the standalone's guard (nothing deleted when the filter matches every
// live point) over each shard's count and live points read together on
// one such replica (CountAtHead). Snapshots: ClusterSnapshots
// (cluster_snapshots.h): a cut at the shards' heads, kept by the router;
// restores replay the points through the logs.
#ifndef ZOOM_SERVER_CLUSTER_ROUTER_CLUSTER_BACKEND_H_
#define ZOOM_SERVER_CLUSTER_ROUTER_CLUSTER_BACKEND_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "server/api/backend.h"
#include "server/api/convert.h"
#include "server/cluster/router/cluster_snapshots.h"
#include "server/cluster/router/router_core.h"
#include "server/cluster/router/write_publisher.h"

namespace zoom::server::router {

class ClusterBackend final : public api::CollectionBackend {
 public:
  // What a router checks a new collection against, as a standalone's
  // Database does (zoomd's --max_dim, --max_cache_bytes), and the target a
  // search naming none aims at (--default_target_recall).
  struct Defaults {
    uint32_t max_dim = 4096;
    uint64_t max_cache_bytes = uint64_t{1} << 30;
    double default_target_recall = 0.95;
    // Where the router keeps its snapshots (ClusterSnapshots).
    DatabaseOptions snapshot_store;
  };
  // `core` outlives the backend.
  ClusterBackend(RouterCore* core, const ServiceLimits& limits, const Defaults& defaults);
  ~ClusterBackend() override;

  absl::StatusOr<api::CollectionDescription> CreateCollection(
      const api::Call& call, const api::CreateCollectionRequest& req) override;
  absl::Status DropCollection(const api::Call& call, const std::string& name) override;
  absl::StatusOr<std::vector<api::CollectionDescription>> ListCollections(
      const api::Call& call) override;
  absl::StatusOr<api::CollectionDescription> GetCollection(const api::Call& call,
                                                           const std::string& name) override;

  absl::StatusOr<api::WriteAnswer> Upsert(const api::Call& call,
                                          const api::UpsertRequest& req) override;
  absl::StatusOr<api::WriteAnswer> Delete(const api::Call& call,
                                          const api::DeleteRequest& req) override;
  absl::StatusOr<std::vector<PointData>> Get(const api::Call& call,
                                             const api::GetRequest& req) override;
  absl::StatusOr<api::WriteAnswer> SetPayload(const api::Call& call,
                                              const api::SetPayloadRequest& req) override;
  absl::StatusOr<api::WriteAnswer> DeletePayload(const api::Call& call,
                                                 const api::DeletePayloadRequest& req) override;

  absl::StatusOr<api::SearchAnswer> Search(const api::Call& call,
                                           const api::SearchRequest& req) override;
  absl::StatusOr<std::vector<api::SearchAnswer>> SearchBatch(
      const api::Call& call, const api::SearchBatchRequest& req) override;
  void SearchAsync(const api::Call& call, api::SearchRequest req,
                   std::function<void(absl::StatusOr<api::SearchAnswer>)> done) override;
  void SearchBatchAsync(
      const api::Call& call, api::SearchBatchRequest req,
      std::function<void(absl::StatusOr<std::vector<api::SearchAnswer>>)> done) override;
  absl::StatusOr<api::CountAnswer> Count(const api::Call& call,
                                         const api::CountRequest& req) override;
  absl::StatusOr<api::ScrollAnswer> Scroll(const api::Call& call,
                                           const api::ScrollRequest& req) override;

  absl::StatusOr<api::CollectionDescription> CreateFieldIndex(
      const api::Call& call, const api::CreateFieldIndexRequest& req) override;
  absl::StatusOr<api::CollectionDescription> DeleteFieldIndex(
      const api::Call& call, const api::DeleteFieldIndexRequest& req) override;
  void BuildIndex(const api::Call& call, const api::BuildIndexRequest& req,
                  std::function<void(absl::StatusOr<api::CollectionDescription>)> done) override;
  absl::StatusOr<api::CollectionDescription> Compact(const api::Call& call,
                                                     const std::string& collection) override;

  absl::StatusOr<SnapshotInfo> CreateSnapshot(const api::Call& call,
                                              const std::string& collection) override;
  absl::StatusOr<std::vector<SnapshotInfo>> ListSnapshots(const api::Call& call,
                                                          const std::string& collection) override;
  absl::Status DeleteSnapshot(const api::Call& call, const std::string& collection,
                              const std::string& name) override;
  absl::StatusOr<std::unique_ptr<api::SnapshotReader>> OpenSnapshot(
      const api::Call& call, const std::string& collection, const std::string& name) override;
  absl::StatusOr<std::unique_ptr<api::SnapshotRestore>> BeginRestore(
      const api::Call& call, const std::string& collection, bool overwrite,
      const std::string& source) override;

 private:
  // Every shard's info (UNAVAILABLE without all of them).
  absl::StatusOr<std::vector<std::pair<uint32_t, api::CollectionDescription>>> ShardInfos(
      const cluster::VersionedShardMap& vm, absl::Time deadline, const api::Call& call);
  // The info merged once every shard's satisfies `shard_done` (or at the
  // deadline: as it is then).
  absl::StatusOr<api::CollectionDescription> InfoWhen(
      const cluster::VersionedShardMap& vm, absl::Time deadline, const api::Call& call,
      const std::function<bool(const CollectionInfo&)>& shard_done);
  // Every shard's info merged (UNAVAILABLE without all of them).
  absl::StatusOr<api::CollectionDescription> Info(const cluster::VersionedShardMap& vm,
                                                  absl::Time deadline, const api::Call& call);
  // One query over every shard (cluster_backend_search.cc); `done` as
  // SearchAsync's.
  void SearchOne(const api::Call& call, const cluster::VersionedShardMap& vm,
                 const api::Query& q, absl::Time deadline,
                 std::function<void(absl::StatusOr<api::SearchAnswer>)> done);
  // A SearchBatch's queries, one after another from b->next.
  struct Batch;
  void RunBatch(std::shared_ptr<Batch> b);
  absl::StatusOr<api::CountAnswer> CountIn(const cluster::VersionedShardMap& vm,
                                           const api::CountRequest& req, absl::Time deadline,
                                           const api::Call& call);
  // `replicas` (if given): shard k's page asked of replicas[k] only, in
  // that order, without a hedge; else of its serving replicas.
  absl::StatusOr<api::ScrollAnswer> ScrollIn(
      const cluster::VersionedShardMap& vm, const api::ScrollRequest& req, absl::Time deadline,
      const api::Call& call, const std::vector<std::vector<Candidate>>* replicas = nullptr);
  // What a delete by filter reads first: `req` counted on every shard by a
  // replica that has applied the shard's log up to its head as read now
  // (every write acknowledged before the call), each shard's count and
  // live points from that one replica's one read (CountResponse.live), and
  // per shard the replicas found that far, the one counted first: the
  // delete's pages are read from them (a replica only moves forward, so
  // they cannot see the collection before the writes the guard saw).
  // UNAVAILABLE when a shard has no replica answering, or none that far by
  // `deadline`.
  struct HeadCounts {
    uint64_t matched = 0, live = 0;
    std::vector<std::vector<Candidate>> replicas;  // by shard
    std::vector<uint64_t> heads;                     // by shard: the log heads read first
  };
  absl::StatusOr<HeadCounts> CountAtHead(const cluster::VersionedShardMap& vm,
                                         const api::CountRequest& req, absl::Time deadline,
                                         const api::Call& call);
  absl::StatusOr<api::WriteAnswer> DeleteByFilter(const api::Call& call,
                                                  const api::DeleteRequest& req);

  RouterCore* core_;
  ServiceLimits limits_;
  Defaults defaults_;
  WritePublisher writes_;
  std::unique_ptr<ClusterSnapshots> snapshots_;
};

}  // namespace zoom::server::router

#endif  // ZOOM_SERVER_CLUSTER_ROUTER_CLUSTER_BACKEND_H_
