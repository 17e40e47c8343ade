// File: server/cluster/router/cluster_snapshots.h
//
// ClusterSnapshots: a router's snapshots of clustered collections (issue 47,
// part 3), the part ClusterBackend's snapshot calls delegate to.
//
// A snapshot is one archive (api::ClusterSnapshotManifest: the manifest,
// then one collection archive a shard) kept in the router's snapshots
// directory (--snapshots_dir, default DATA_DIR/snapshots), named, listed,
// read out and deleted as a standalone's (through a Database opened there at
// the first snapshot call: it holds no collection). Run several routers
// against one shared volume, or snapshot through one of them: a router
// lists only the snapshots in its own directory.
//
// The cut: CreateSnapshot reads every shard's log head first, then takes
// each shard's archive from one replica that has applied its log up to that
// head (ClusterBackend::CountAtHead picks them), while writes go on. So
// every write acknowledged before the call is in the snapshot; each shard's
// archive is at a log position at or past its head, recorded in the
// manifest (shard.K.sequence); a write acknowledged during the call may be
// in it or not, shard by shard. The replica's archive is fetched over the
// node's API (CreateSnapshot, DownloadSnapshot, DeleteSnapshot, with the
// client's credentials), verified whole (its digests), then copied into
// the cluster archive; a replica that fails is replaced by the next at the
// head.
//
// Restores go through api::RestoreByReplay: any archive (a cluster's or a
// standalone's) into any cluster, every point through the logs under the
// default write concern.
//
// Thread safety: every method may be called from any thread.
#ifndef ZOOM_SERVER_CLUSTER_ROUTER_CLUSTER_SNAPSHOTS_H_
#define ZOOM_SERVER_CLUSTER_ROUTER_CLUSTER_SNAPSHOTS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/api/backend.h"
#include "server/api/snapshot_files.h"
#include "server/cluster/router/router_core.h"

namespace zoom::server::router {

class ClusterSnapshots {
 public:
  // `store`: where the router keeps its snapshots (data_dir, snapshots_dir,
  // the limits a restore's scratch is checked against).
  ClusterSnapshots(RouterCore* core, DatabaseOptions store)
      : core_(core), store_options_(std::move(store)) {}
  ~ClusterSnapshots();

  // The router's snapshots directory (opened at the first call).
  absl::StatusOr<Database*> Store();

  // The snapshot of `vm`'s collection from the replicas in `at_head` (by
  // shard, best first: each has applied its shard's log to `heads`, read
  // before; see the file comment). A replica whose archive is behind its
  // shard's head (a repair rewound it meanwhile) is passed over.
  absl::StatusOr<SnapshotInfo> Create(
      const api::Call& call, const cluster::VersionedShardMap& vm,
      const std::vector<std::vector<Candidate>>& at_head,
      const std::vector<uint64_t>& heads);

  // What a restore by replay's scratch is made under.
  absl::StatusOr<DatabaseOptions> ScratchOptions();

 private:
  // Shard k's archive from `c` into the new file `dest`: its manifest part
  // (sequence, sha256, points, records, bytes) filled.
  absl::Status FetchShard(const api::Call& call, const Candidate& c,
                          const std::string& local, const std::string& dest,
                          api::ClusterSnapshotShard* part);

  RouterCore* core_;
  DatabaseOptions store_options_;
  absl::Mutex mu_;
  std::unique_ptr<Database> store_ ABSL_GUARDED_BY(mu_);
};

}  // namespace zoom::server::router

#endif  // ZOOM_SERVER_CLUSTER_ROUTER_CLUSTER_SNAPSHOTS_H_
