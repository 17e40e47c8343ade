// File: server/cluster/cluster_map.h
//
// What a zoomd cluster keeps in NATS JetStream besides the write logs, and
// the names it gives things. One cluster (a name, [A-Za-z0-9_-]) may share
// a NATS system with others: every name below carries it.
//
//   stream  zoomd_<cluster>_<collection>         the collection's write log
//   subject zoomd.<cluster>.<collection>.<shard>  one per shard
//   bucket  zoomd_<cluster>_shards   key <collection> -> ShardMap
//           (written with compare-and-set on the revision)
//   bucket  zoomd_<cluster>_nodes    key <node id> -> NodeInfo (max age:
//           a node that stops heartbeating leaves it)
//   subject zoomd_acks.<cluster>   (core NATS, no stream) ReplicaAck: the
//           entries each replica applied and made durable (write concerns)
//
// A shard's replica on a node is the local collection
// <collection>_s<shard>_<uid> (uid: 8 hex digits of the ShardMap's uid, so
// that a collection dropped and created again never meets the old one's
// replicas), hence clustered collection names are at most 48 characters.
//
// Encodings (golden files tests/data/golden/shard_map_v1.txt,
// node_info_v1.txt): "key=value" lines (key_value_text.h), a `format`
// key first; unknown keys are ignored by readers.
//
//   ShardMap:  format=1, collection, uid (16 hex), shards, replicas,
//              config (the CollectionConfig's own text, hex),
//              shard.<k>=<node>,<node>,... (one per shard, replicas in
//              preference order), created_unix_ms
//   NodeInfo:  format=1, node, address (host:port of its gRPC API), role
//              (node | router), heartbeat_unix_ms, hosted.<i>=<collection>,
//              <shard>,<uid>,<applied>,<pending>,<state> with state
//              catching_up | serving | failed
#ifndef ZOOM_SERVER_CLUSTER_CLUSTER_MAP_H_
#define ZOOM_SERVER_CLUSTER_CLUSTER_MAP_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/engine/collection_config.h"

namespace zoom::cluster {

inline constexpr uint32_t kMaxShards = 1024;
inline constexpr uint32_t kMaxReplicas = 16;
inline constexpr size_t kMaxClusteredName = 48;

// The shard of a point: a fixed 64-bit mix of the id, modulo `shards`
// (never changes: the shard count of a collection is fixed).
uint32_t ShardOf(uint64_t id, uint32_t shards);

std::string StreamName(std::string_view cluster, std::string_view collection);
std::string ShardSubject(std::string_view cluster, std::string_view collection, uint32_t shard);
std::string ShardsBucket(std::string_view cluster);
std::string NodesBucket(std::string_view cluster);
// The log floors: key FloorKey(uid, shard) holds the lowest stream
// sequence of the shard's subject not purged (decimal; absent: 1).
std::string FloorsBucket(std::string_view cluster);
// The decoder models every node serves: key = model name, value a
// ModelSpec.
std::string ModelsBucket(std::string_view cluster);
std::string FloorKey(uint64_t uid, uint32_t shard);
// The consumer of (node, collection uid, shard).
std::string ConsumerName(std::string_view node, uint64_t uid, uint32_t shard);

// Where replicas report their durable positions: core NATS, not a stream
// (a report is a notice, sent again; its first token is not the streams'
// "zoomd", so no stream takes it).
std::string AcksSubject(std::string_view cluster);

// InvalidArgument naming what to fix: a cluster or node name that is not
// 1..32 of [A-Za-z0-9_-].
absl::Status ValidateClusterName(std::string_view name);
absl::Status ValidateNodeId(std::string_view id);
// InvalidArgument for a collection name a cluster cannot take (the
// collection rule, and at most kMaxClusteredName characters), shards
// outside 1..kMaxShards, replicas outside 1..kMaxReplicas.
absl::Status ValidateClustered(std::string_view collection, uint32_t shards, uint32_t replicas);

struct ShardMap {
  static constexpr uint32_t kFormat = 1;

  std::string collection;
  uint64_t uid = 0;
  uint32_t shards = 0;
  uint32_t replicas = 0;
  server::CollectionConfig config;
  // [shard] -> the nodes holding its replicas.
  std::vector<std::vector<std::string>> assignment;
  int64_t created_unix_ms = 0;

  // The local collection of shard `shard` on a node.
  std::string LocalName(uint32_t shard) const;
  std::string Encode() const;
  // DataLoss for a malformed text (naming the key), FailedPrecondition for
  // a newer format.
  static absl::StatusOr<ShardMap> Decode(std::string_view text);
};

// `local`'s collection, shard and uid when it is a shard replica's name.
struct LocalShard {
  std::string collection;
  uint32_t shard = 0;
  uint32_t uid8 = 0;  // the low 32 bits of the map's uid
};
std::optional<LocalShard> ParseLocalName(std::string_view local);

// Places `replicas` replicas of each of `shards` shards on `nodes` (sorted,
// distinct): replica r of shard k on nodes[(k * replicas + r) mod N], so
// that a shard's replicas are on distinct nodes and the load is even.
// FailedPrecondition when replicas > nodes.size(), naming both.
absl::StatusOr<std::vector<std::vector<std::string>>> AssignShards(
    const std::vector<std::string>& nodes, uint32_t shards, uint32_t replicas);

// Re-replication: the assignment with each replica on a node of `gone`
// moved to a live node (`live`, sorted) that holds no replica of that
// shard, the one with the fewest replicas of any shard of `load` (node ->
// replicas it holds, counted over every collection; updated here), ties
// by name. A replica with no such node stays where it is. Returns the
// replicas moved (0: `assignment` unchanged).
int ReplaceGone(std::vector<std::vector<std::string>>* assignment,
                const std::vector<std::string>& live, const std::set<std::string>& gone,
                std::map<std::string, int>* load);

enum class ReplicaState { kCatchingUp = 0, kServing = 1, kFailed = 2 };
const char* ReplicaStateName(ReplicaState s);

struct HostedShard {
  std::string collection;
  uint32_t shard = 0;
  uint64_t uid = 0;
  uint64_t applied = 0;
  uint64_t pending = 0;
  ReplicaState state = ReplicaState::kCatchingUp;
  // Forks of the shard's log this replica repaired (log_repair.h); written
  // as a seventh field only when not 0 (older nodes read six).
  uint64_t repairs = 0;
  // The replica's StateDigest at `applied` when it is caught up (then
  // has_digest; versioned_apply.h), as "digest.<i>=<hex>" beside its entry
  // (older nodes ignore the key).
  bool has_digest = false;
  uint64_t digest = 0;
  bool operator==(const HostedShard&) const = default;
};

// A decoder model of the cluster (the models bucket): read-only, loaded by
// every node from its own --models_dir (the same files on each).
struct ModelSpec {
  static constexpr uint32_t kFormat = 1;

  std::string name;  // ValidateModelName
  std::string dir;   // under each node's --models_dir; no line breaks
  uint32_t m = 0, ef_construction = 0, default_ef = 0;  // 0: the engine's
  int64_t created_unix_ms = 0;

  std::string Encode() const;
  static absl::StatusOr<ModelSpec> Decode(std::string_view text);
  // The same model (the creation time aside).
  bool SameModel(const ModelSpec& o) const {
    return name == o.name && dir == o.dir && m == o.m && ef_construction == o.ef_construction &&
           default_ef == o.default_ef;
  }
  bool operator==(const ModelSpec&) const = default;
};
// InvalidArgument naming what to fix.
absl::Status ValidateModelSpec(const ModelSpec& spec);

enum class ModelLoadState { kLoading = 0, kServing = 1, kFailed = 2 };

// A model as a node reports it.
struct HostedModel {
  std::string name;
  ModelLoadState state = ModelLoadState::kLoading;
  bool operator==(const HostedModel&) const = default;
};

struct NodeInfo {
  static constexpr uint32_t kFormat = 1;

  std::string node;
  std::string address;
  std::string role = "node";
  int64_t heartbeat_unix_ms = 0;
  std::vector<HostedShard> hosted;
  // Decoder models (lines "model.<i>=name,state", absent from records of
  // zoomds before them: format 1 still, a reader ignores keys it does not
  // know).
  std::vector<HostedModel> models;

  // The entry for (collection uid, shard), if hosted here.
  const HostedShard* Find(uint64_t uid, uint32_t shard) const;
  // Whether this node serves decoder model `name`.
  bool Serves(const std::string& name) const;
  std::string Encode() const;
  static absl::StatusOr<NodeInfo> Decode(std::string_view text);
  bool operator==(const NodeInfo&) const = default;
};

// One log entry a replica applied and made durable: its stream sequence,
// the message id its publisher gave it (the router's: unique a write, ""
// when none), and for the entries that change points by id (delete, set
// and delete payload) the points it changed.
struct AppliedEntry {
  uint64_t sequence = 0;
  std::string id;
  std::optional<uint64_t> changed;
  bool operator==(const AppliedEntry&) const = default;
};

// A replica's report on AcksSubject (a write concern's acknowledgement):
// node `node`'s replica of shard (uid, shard) has applied every entry of
// its subject up to stream sequence `durable` and made it durable in its
// own store (the same sync a standalone's write does); `applied`: the
// entries it applied since its last report, each by sequence and id. A
// write is acknowledged by the replicas that reported its own entry (the
// same sequence and id), never by a position alone: a log that lost its
// tail and gave the same sequences to new entries cannot make a replica
// that applied the old ones acknowledge the new ones. Sent after each
// applied batch, and again while idle (with no entries: a liveness sign).
// A replica that began as a copy of a peer's snapshot (ClusterNode::
// OpenShard) never applied the entries the copy holds: `base_node` and
// `base` name that peer and the position of its snapshot, and an entry at
// or before `base` counts for this replica when `base_node` reported it
// (AckBoard). Without it a write taken while a new collection's replica
// was still opening waited for a majority that could not come (CI).
//
// Encoding: key=value text (golden tests/data/golden/replica_ack_v1.txt;
// replica_ack_v1_base.txt with a base), format=1 first; node, uid (16
// hex), shard, durable, applied=<sequence>:<id>[:<changed>],... (absent:
// none), base_node and base (absent: none). Unknown keys are ignored.
struct ReplicaAck {
  static constexpr uint32_t kFormat = 1;

  std::string node;
  uint64_t uid = 0;
  uint32_t shard = 0;
  uint64_t durable = 0;
  std::vector<AppliedEntry> applied;
  std::string base_node;  // "" and 0: the replica began empty
  uint64_t base = 0;

  std::string Encode() const;
  // DataLoss for a malformed text (naming the key), FailedPrecondition for
  // a newer format.
  static absl::StatusOr<ReplicaAck> Decode(std::string_view text);
  bool operator==(const ReplicaAck&) const = default;
};

}  // namespace zoom::cluster

#endif  // ZOOM_SERVER_CLUSTER_CLUSTER_MAP_H_
