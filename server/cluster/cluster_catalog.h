// File: server/cluster/cluster_catalog.h
//
// ClusterCatalog: one cluster's shard maps and node records in JetStream
// key-value buckets (cluster_map.h names them), and the streams of its
// collections. What the router and every node read; collection admin
// (create, drop) goes through it.
//
// Create: the collection's stream (a subject per shard), then its shard
// map with create-only semantics (AlreadyExists if the name is taken: two
// routers creating one name, one wins). Drop: the map first (nodes stop
// their replicas and drop their local collections when they see it gone),
// then the stream.
//
// Thread safety: all methods from any thread.
#ifndef ZOOM_SERVER_CLUSTER_CLUSTER_CATALOG_H_
#define ZOOM_SERVER_CLUSTER_CLUSTER_CATALOG_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/cluster/cluster_map.h"
#include "server/cluster/jetstream.h"

namespace zoom::cluster {

struct ClusterCatalogOptions {
  std::string cluster = "zoomd";
  // JetStream's replicas of the collection streams and of the buckets: 3
  // on a 3-server NATS cluster, 1 on a single server.
  int nats_replicas = 1;
  // A node whose record is older than this is gone (the node bucket's max
  // age; heartbeats come several times within it).
  absl::Duration node_ttl = absl::Seconds(10);
};

struct VersionedShardMap {
  ShardMap map;
  uint64_t revision = 0;
};

class ClusterCatalog {
 public:
  // `js` must outlive the catalog.
  static absl::StatusOr<std::unique_ptr<ClusterCatalog>> Open(JetStream* js,
                                                              ClusterCatalogOptions options);

  // nullopt when no such clustered collection exists.
  absl::StatusOr<std::optional<VersionedShardMap>> GetMap(const std::string& collection) const;
  // Every collection's map, by name. Undecodable entries are skipped (and
  // logged): a newer zoomd's map is not this one's to serve.
  absl::StatusOr<std::vector<VersionedShardMap>> ListMaps() const;
  // Validates (ValidateClustered, config.Validate), places the replicas on
  // the nodes present now (AssignShards: FailedPrecondition when too few),
  // creates the stream and the map. AlreadyExists for a taken name.
  absl::StatusOr<ShardMap> CreateCollection(const server::CollectionConfig& config,
                                            uint32_t shards, uint32_t replicas,
                                            uint32_t max_dim = 4096);
  // NotFound when absent.
  absl::Status DropCollection(const std::string& collection);
  // Replaces a collection's map if it is still at `revision` (Aborted
  // otherwise: read it again); the new revision.
  absl::StatusOr<uint64_t> UpdateMap(const ShardMap& map, uint64_t revision);

  // The records of the nodes heartbeating now (role "node"), by id: those
  // in the bucket (it expires a record node_ttl after its last write) whose
  // heartbeat is within node_ttl of the newest one (the bucket's expiry may
  // lag while its leader is elected; when NATS takes no writes every
  // heartbeat ages alike and none is dropped). Hosts' clocks are assumed
  // within a small part of node_ttl of each other, as NTP keeps them.
  absl::StatusOr<std::vector<NodeInfo>> LiveNodes() const;
  absl::Status PutNode(const NodeInfo& info);
  absl::Status RemoveNode(const std::string& node);

  // Log retention. The floor of shard `shard` of the collection with
  // `uid`: the lowest stream sequence of its subject that may still be in
  // the stream (1 until a purge). A replica whose log position is below
  // floor - 1 may have missed purged entries: it must restore a peer's
  // snapshot instead of replaying.
  absl::StatusOr<uint64_t> LogFloor(uint64_t uid, uint32_t shard) const;
  // Raises the floor to `floor` (never lowers it: compare-and-set on the
  // key's revision, retried). Written BEFORE the purge it announces.
  absl::Status RaiseLogFloor(uint64_t uid, uint32_t shard, uint64_t floor);
  // Lowers the floor to `floor` when it is above (compare-and-set,
  // retried): after a log repair re-seeded the log from a fork point F
  // (every entry after F is in the stream again), the floor a lost history
  // had raised past F + 1 is F + 1, or every replica rewound to F would
  // stop as purged past.
  absl::Status LowerLogFloor(uint64_t uid, uint32_t shard, uint64_t floor);

  // What NATS lost (a power failure before JetStream synced its files can
  // take a bucket or a stream with everything in it):
  //   * EnsureBuckets creates the buckets again where they are missing;
  //   * HasRecordOf tells whether the shards bucket knows `collection` at
  //     all: its map, or the delete marker a drop leaves. A node keeps a
  //     local replica whose map is absent only while the bucket has no
  //     record of it (it never drops what the catalog merely lost);
  //   * RestoreMap puts back a map a node kept a copy of (create-only: a
  //     map there already wins) with its stream (EnsureStream).
  absl::Status EnsureBuckets();
  //   * RemakeSoftBuckets opens the node and floor buckets again, deleting
  //     and making again one whose stream does not answer while JetStream
  //     does (BucketSpec::soft): their entries come back from their writers.
  absl::Status RemakeSoftBuckets();
  //   * RemakeNodesBucket deletes the node bucket's stream and makes it
  //     again: for a bucket whose stream answers its info but takes no
  //     write (its Raft group leaderless after a power failure, NATS
  //     logging "duplicate assignment"), which RemakeSoftBuckets cannot
  //     tell from a healthy one. Node records are rewritten every
  //     heartbeat; the floors are not remade so (a floor lost would hide
  //     a purge from a replica behind it).
  absl::Status RemakeNodesBucket();
  absl::StatusOr<bool> HasRecordOf(const std::string& collection) const;
  absl::Status RestoreMap(const ShardMap& map);
  absl::Status EnsureStreamOf(const ShardMap& map);

  // The repair lock of a shard's log (ShardReplicaOptions::repair_lock:
  // one repair at a time): a key of the floors bucket created by `holder`,
  // taken over once older than `stale` (its holder died mid-repair).
  // Waits up to `wait` (Unavailable naming the holder); returns the
  // release (deletes the key).
  absl::StatusOr<std::function<void()>> LockRepair(uint64_t uid, uint32_t shard,
                                                   const std::string& holder,
                                                   absl::Duration stale = absl::Minutes(1),
                                                   absl::Duration wait = absl::Seconds(30));

  // Decoder models (every node loads each from its own --models_dir).
  absl::StatusOr<std::vector<ModelSpec>> ListModels() const;
  // Validates and records `spec`; the same model again is OK (returns the
  // recorded one), another under the name AlreadyExists.
  absl::StatusOr<ModelSpec> AddModel(const ModelSpec& spec);
  // NotFound when absent.
  absl::Status RemoveModel(const std::string& name);

  JetStream* js() const { return js_; }
  const ClusterCatalogOptions& options() const { return options_; }

 private:
  ClusterCatalog(JetStream* js, ClusterCatalogOptions options, std::unique_ptr<KeyValue> shards,
                 std::unique_ptr<KeyValue> nodes, std::unique_ptr<KeyValue> floors,
                 std::unique_ptr<KeyValue> models)
      : js_(js), options_(std::move(options)), shards_(std::move(shards)),
        nodes_(std::move(nodes)), floors_(std::move(floors)), models_(std::move(models)) {}
  JetStream* js_;
  ClusterCatalogOptions options_;
  std::unique_ptr<KeyValue> shards_, nodes_, floors_, models_;
};

}  // namespace zoom::cluster

#endif  // ZOOM_SERVER_CLUSTER_CLUSTER_CATALOG_H_
