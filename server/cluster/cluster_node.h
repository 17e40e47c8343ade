// File: server/cluster/cluster_node.h
//
// ClusterNode: what makes a zoomd a node of a cluster. Given the node's
// Database, it
//
//   * heartbeats its NodeInfo (address, every hosted shard's applied
//     sequence, lag and state) into the node bucket every `heartbeat`; a
//     node that stops (crash, partition) leaves the bucket after the
//     bucket's max age, and the routers stop sending it requests;
//   * reconciles every `reconcile` period with the shard maps: for each
//     shard the maps assign it, a local collection (ShardMap::LocalName)
//     and a ShardReplica applying the shard's subject; a local shard
//     collection whose collection is gone (its map absent in two passes in
//     a row, read key by key) or was dropped and created again (another
//     uid) is stopped and dropped;
//   * bootstraps a shard it does not have from a peer: when another node
//     hosting the shard has applied anything, its snapshot is fetched
//     (`fetch_snapshot`, the gRPC layer's DownloadSnapshot), written to a
//     staging file through the node's FileSystem (the Database's:
//     DatabaseOptions::collection.store.file_system) and restored, and the
//     replica replays the stream from the snapshot's position; a failed
//     fetch (a write fault included) leaves no staged file and the shard
//     starts as without a peer, or, when the log is purged, waits for the
//     next pass; without such a peer (a new collection) the local
//     collection starts empty at position 0;
//   * serves the cluster's decoder models (`decoder` set): each model of
//     the models bucket is loaded from this node's own --models_dir (the
//     same files on every node), models the bucket no longer has are
//     unloaded, and the record says each one's state (routers send TopK
//     to the nodes serving it). A model that failed here stays failed
//     until its record changes (unloaded and loaded again);
//   * trims the log (every `log_trim`): for each shard whose first live
//     replica (by node id) it is, the shard's subject is purged below the
//     lowest position its replicas report (ClusterCatalog::RaiseLogFloor
//     first, then JetStream::PurgeBefore). A replica absent from the node
//     bucket holds the log for `log_hold` from when this node first missed
//     it; after that it is left out, and when it comes back below the
//     floor it restores a peer's snapshot (as does a replica that finds
//     the floor above its position: ShardReplica's check) instead of
//     replaying.
//
// The data directory belongs to one cluster and node: DATA_DIR/CLUSTER
// records both at the first start; a later start with another cluster or
// node id, or a data directory holding collections of a standalone zoomd,
// is refused (FailedPrecondition naming both).
//
// Thread safety: all methods from any thread.
#ifndef ZOOM_SERVER_CLUSTER_CLUSTER_NODE_H_
#define ZOOM_SERVER_CLUSTER_CLUSTER_NODE_H_

#include <functional>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/file_system.h"
#include "server/cluster/cluster_catalog.h"
#include "server/cluster/cluster_map.h"
#include "server/cluster/jetstream.h"
#include "server/cluster/shard_replica.h"
#include "server/engine/database.h"
#include "server/engine/decoder_engine.h"

namespace zoom::cluster {

// Receives a snapshot archive's bytes in order: `chunk` holds the bytes at
// `offset`, each chunk starting where the previous one ended (the first at
// 0); the view lives for the call only. A non-OK return stops the
// download; the fetcher returns it.
using SnapshotSink = std::function<absl::Status(absl::string_view chunk, uint64_t offset)>;
// Streams the snapshot of local collection `local` from the node at
// `address` into `sink` (zoomd's main: CreateSnapshot, DownloadSnapshot,
// DeleteSnapshot over the peer's gRPC API). It writes no file itself: the
// node writes the archive through its own FileSystem
// (FetchSnapshotToFile).
using SnapshotFetcher = std::function<absl::Status(
    const std::string& address, const std::string& local, const SnapshotSink& sink)>;

// Fetches the snapshot of `local` from `address` into the new file `dest`
// through `files`: each chunk written at its offset as it arrives, the file
// synced and closed at the end. Any failure (the fetch's, an out-of-order
// chunk, a write's, the sync's) removes `dest` and is returned: no part of
// an archive is left behind to be restored. AlreadyExists if `dest`
// exists (a staging path is new).
absl::Status FetchSnapshotToFile(const SnapshotFetcher& fetch, const std::string& address,
                                 const std::string& local, FileSystem& files,
                                 const std::string& dest);

struct ClusterNodeOptions {
  ClusterCatalogOptions catalog;
  JetStreamOptions nats;
  std::string node_id;
  // host:port at which routers and peers reach this node's gRPC API.
  std::string advertise_address;
  absl::Duration heartbeat = absl::Seconds(2);
  absl::Duration reconcile = absl::Seconds(1);
  // A replica is "serving" when at most this many messages of its shard
  // are not yet applied (routers pick serving replicas).
  uint64_t max_serving_lag = 1000;
  // Log retention (0: the log is never trimmed).
  absl::Duration log_trim = absl::Seconds(30);
  absl::Duration log_hold = absl::Hours(1);
  // Re-replication: a node absent from the node bucket (it expires a record
  // node_ttl after its last heartbeat) this much longer loses its replicas
  // to live nodes (0: never; the node must come back with its id).
  absl::Duration rereplicate_after = absl::Minutes(1);
  SnapshotFetcher fetch_snapshot;  // may be empty: shards start empty
  server::DecoderEngine* decoder = nullptr;  // may be null: no models; outlives the node
  ShardReplicaOptions replica;     // fetch sizes and waits; names are set per shard
};

class ClusterNode {
 public:
  // Checks the data directory's ownership, connects to NATS, writes the
  // first heartbeat, reconciles once and starts the background thread.
  // `db` must outlive the node.
  static absl::StatusOr<std::unique_ptr<ClusterNode>> Start(server::Database* db,
                                                            ClusterNodeOptions options);
  // Stops the thread and the replicas; removes this node's record (a clean
  // leave; a crash leaves it to expire).
  ~ClusterNode();
  ClusterNode(const ClusterNode&) = delete;
  ClusterNode& operator=(const ClusterNode&) = delete;

  // One reconciliation pass now (also run by the thread).
  absl::Status Reconcile();
  // One log trim now (also run by a thread every log_trim): the purges done.
  absl::StatusOr<int> TrimLogs();
  // One re-replication pass now (also run by a thread every reconcile when
  // rereplicate_after > 0): on the cluster's first live node by id, each
  // replica on a node absent from the node bucket for rereplicate_after is
  // moved to a live node (ReplaceGone) by a compare-and-set of its map; the
  // new node bootstraps it from a peer's snapshot, the old one, if it comes
  // back, drops it. Returns the replicas moved.
  absl::StatusOr<int> Rereplicate();
  // The record this node heartbeats.
  NodeInfo Info() const;
  // The replica applying to local collection `local` (null if none).
  std::shared_ptr<ShardReplica> ReplicaOf(const std::string& local) const;
  // Session consistency: waits until the replica of `local` has applied
  // `sequence` or `deadline` passes. True at once for a collection that is
  // not a shard replica.
  bool WaitApplied(const std::string& local, uint64_t sequence, absl::Time deadline) const;

  ClusterCatalog& catalog() { return *catalog_; }
  JetStream& js() { return *js_; }
  const ClusterNodeOptions& options() const { return options_; }

 private:
  ClusterNode(server::Database* db, ClusterNodeOptions options) : db_(db), options_(std::move(options)) {}
  // Runs `step` every `period` until the node stops (the reconciliation,
  // which may wait on NATS for seconds, and the heartbeat, each on a thread
  // of its own: a slow reconciliation must not let the node's record
  // expire); a failed step is logged as `what`.
  void Every(absl::Duration period, const char* what, const std::function<absl::Status()>& step);
  absl::Status Heartbeat();
  // A local collection for shard `k` of `m`: restored from a peer's
  // snapshot when one has data (*restored_from: the peer's node id, when
  // not null), else created empty.
  // `floor`: the shard's log floor (a peer's snapshot must reach floor - 1;
  // an empty start needs floor 1). `replace`: the local collection exists
  // (behind the floor) and is replaced by the snapshot.
  absl::StatusOr<std::shared_ptr<server::Collection>> OpenShard(const ShardMap& m, uint32_t k,
                                                                uint64_t floor, bool replace,
                                                                std::string* restored_from);
  absl::Status CheckDataDir() const;
  // The copy of a hosted collection's shard map in the data directory
  // (cluster_map.<collection>: ShardMap::Encode), put back into the
  // catalog when NATS lost it (ClusterCatalog::RestoreMap). Written when
  // it changes; Reconcile's own.
  absl::Status KeepMapCopy(const ShardMap& map);
  absl::StatusOr<std::optional<ShardMap>> ReadMapCopy(const std::string& collection) const;
  // What the node writes its own files through: the Database's FileSystem.
  FileSystem& files() const;
  // The models part of a reconciliation pass.
  absl::Status ReconcileModels();

  server::Database* db_;
  ClusterNodeOptions options_;
  std::unique_ptr<JetStream> js_;
  std::unique_ptr<ClusterCatalog> catalog_;
  absl::Mutex reconcile_mu_;  // one pass at a time
  // A stuck soft bucket (ClusterCatalog::RemakeSoftBuckets): since when the
  // heartbeats (node bucket) and the floor reads (floor bucket) have
  // failed as unavailable with no success (InfiniteFuture: they answer),
  // and when the buckets were last made again.
  void NoteBucket(const absl::Status& st, absl::Time* failing_since);
  absl::Mutex bucket_mu_;
  absl::Time nodes_failing_since_ ABSL_GUARDED_BY(bucket_mu_) = absl::InfiniteFuture();
  absl::Time floors_failing_since_ ABSL_GUARDED_BY(bucket_mu_) = absl::InfiniteFuture();
  absl::Time remade_at_ ABSL_GUARDED_BY(bucket_mu_) = absl::InfinitePast();
  mutable absl::Mutex mu_;
  // local collection name -> (the shard, its replica)
  struct Hosted {
    HostedShard shard;
    std::shared_ptr<ShardReplica> replica;
  };
  std::map<std::string, Hosted> hosted_ ABSL_GUARDED_BY(mu_);
  // Local shard collections whose map the last pass found absent (dropped
  // if the next pass finds it absent too). Reconcile's own.
  std::set<std::string> missing_;
  std::map<std::string, std::string> map_copies_;  // collection -> encoded map kept
  // Models this node loaded for the cluster (Reconcile's own), and those
  // whose load was refused at once, with the spec tried (reported failed).
  std::map<std::string, ModelSpec> cluster_models_;
  std::map<std::string, ModelSpec> refused_models_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // TrimLogs': when it first missed each assigned node from the bucket.
  // The maps, the live nodes (`live` points into `nodes`) and since when
  // each node of a map has been absent (NoteAbsent), read once.
  struct Membership {
    std::vector<VersionedShardMap> maps;
    std::vector<NodeInfo> nodes;
    std::map<std::string, const NodeInfo*> live;
    absl::Time now;
    std::map<std::string, absl::Time> absent;
  };
  absl::StatusOr<Membership> ReadMembership();
  // A read of a cluster bucket, once more after the buckets are made again
  // when NATS lost its stream (NOT_FOUND: a power failure before JetStream
  // synced it; the shard maps come back from the nodes' copies, node
  // records with the next heartbeats, models from an operator).
  template <typename Read>
  auto ReadBucket(Read read) -> decltype(read()) {
    auto got = read();
    if (!absl::IsNotFound(got.status())) return got;
    if (absl::Status st = RemakeBuckets(got.status()); !st.ok()) return st;
    return read();
  }
  absl::Status RemakeBuckets(const absl::Status& lost);
  // Publishes replica `local`'s whole state (WholeStateEntries, at its
  // write versions) on shard k's subject of `collection`; logs `why`.
  // Before a peer's snapshot replaces a replica (a write only it had
  // reaches the restored copy and every peer, and changes nothing newer
  // anywhere), and when it differs from a peer (CheckDigests).
  absl::Status PublishState(const std::string& collection, uint32_t k, const std::string& local,
                            const server::Collection& c, const char* why);
  // Anti-entropy: for each replica here that is caught up, a live peer
  // caught up at the same log position with another StateDigest (NATS
  // served the replicas different entries: its Raft groups can diverge
  // after power failures) in three checks in a row makes it publish its
  // whole state (at most every digest_every per shard); every replica
  // that differs does the same, and versioned apply makes them equal.
  void CheckDigests();
  std::map<std::pair<uint64_t, uint32_t>, int> digest_mismatches_;       // CheckDigests' own
  std::map<std::pair<uint64_t, uint32_t>, absl::Time> digest_published_;  // CheckDigests' own
  // Updates absent_since_ from the maps' nodes and the live ones; a copy.
  // A node's absence counts from the last heartbeat this node saw it
  // write (the local time its record's heartbeat last changed: no peer's
  // clock), not from its record's expiry a ttl later; a node never seen
  // counts from now.
  std::map<std::string, absl::Time> NoteAbsent(const std::vector<VersionedShardMap>& maps,
                                               const std::map<std::string, const NodeInfo*>& live,
                                               absl::Time now);
  absl::Mutex trim_mu_;
  std::map<std::string, absl::Time> absent_since_ ABSL_GUARDED_BY(trim_mu_);
  struct Heard {
    int64_t heartbeat_unix_ms = 0;  // the record's (the peer's clock)
    absl::Time seen;                // when it changed (ours)
  };
  std::map<std::string, Heard> heard_ ABSL_GUARDED_BY(trim_mu_);
  std::thread thread_, beat_thread_, trim_thread_, heal_thread_;
  // The heartbeat's loop: every options_.heartbeat, and at once after a
  // replica's repair rewound it (its record must not keep showing the old
  // position: the trim purges below the positions records show).
  void BeatLoop();
  void BeatSoon();
  absl::Mutex beat_mu_;
  bool beat_now_ ABSL_GUARDED_BY(beat_mu_) = false;
  bool beat_stop_ ABSL_GUARDED_BY(beat_mu_) = false;
};

}  // namespace zoom::cluster

#endif  // ZOOM_SERVER_CLUSTER_CLUSTER_NODE_H_
