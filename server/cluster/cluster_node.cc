#include "server/cluster/cluster_node.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/binary_io.h"
#include "common/file_system.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "server/cluster/versioned_apply.h"
#include "server/engine/key_value_text.h"

namespace zoom::cluster {
namespace fs = std::filesystem;

absl::Status FetchSnapshotToFile(const SnapshotFetcher& fetch, const std::string& address,
                                 const std::string& local, FileSystem& files,
                                 const std::string& dest) {
  ZOOM_ASSIGN_OR_RETURN(std::unique_ptr<File> out, files.Open(dest, FileSystem::Mode::kCreateNew));
  uint64_t written = 0;
  absl::Status st = fetch(address, local, [&](absl::string_view chunk, uint64_t offset) {
    if (offset != written) {
      return absl::DataLossError(absl::StrCat("the snapshot of ", local, " from ", address,
                                              ": a chunk at offset ", offset, " after ", written,
                                              " bytes"));
    }
    ZOOM_RETURN_IF_ERROR(out->PWrite(offset, chunk.data(), chunk.size()));
    written += chunk.size();
    return absl::OkStatus();
  });
  if (st.ok()) st = out->Sync();
  if (absl::Status closed = out->Close(); st.ok()) st = closed;
  if (!st.ok()) {
    if (absl::Status rm = files.Remove(dest); !rm.ok() && !absl::IsNotFound(rm)) {
      ZOOM_LOG(WARNING, "cannot remove the partial snapshot ", dest, ": ", rm.message(),
               " (swept at the next start)");
    }
    return st;
  }
  return absl::OkStatus();
}

FileSystem& ClusterNode::files() const {
  FileSystem* f = db_->options().collection.store.file_system;
  return f != nullptr ? *f : *FileSystem::Posix();
}

absl::StatusOr<std::unique_ptr<ClusterNode>> ClusterNode::Start(server::Database* db,
                                                                ClusterNodeOptions options) {
  ZOOM_RETURN_IF_ERROR(ValidateNodeId(options.node_id));
  ZOOM_RETURN_IF_ERROR(ValidateClusterName(options.catalog.cluster));
  if (options.advertise_address.empty()) {
    return absl::InvalidArgumentError(
        "a cluster node needs the address routers reach it at (--advertise_address host:port)");
  }
  std::unique_ptr<ClusterNode> node(new ClusterNode(db, std::move(options)));
  ZOOM_RETURN_IF_ERROR(node->CheckDataDir());
  JetStreamOptions nats = node->options_.nats;
  nats.name = absl::StrCat("zoomd-node-", node->options_.node_id);
  ZOOM_ASSIGN_OR_RETURN(node->js_, JetStream::Connect(nats));
  ZOOM_ASSIGN_OR_RETURN(node->catalog_, ClusterCatalog::Open(node->js_.get(),
                                                             node->options_.catalog));
  if (absl::Status st = node->Heartbeat(); !st.ok()) {
    // A node bucket that takes no write (its stream's group leaderless
    // after a power failure) is made again by the heartbeat thread once it
    // has failed long enough (NoteBucket): the node starts meanwhile.
    if (!absl::IsUnavailable(st) && !absl::IsDeadlineExceeded(st)) return st;
    ZOOM_LOG(WARNING, "cluster node ", node->options_.node_id, ": first heartbeat: ",
             st.message(), " (retried in the background)");
  }
  if (absl::Status st = node->Reconcile(); !st.ok()) {
    ZOOM_LOG(WARNING, "cluster node ", node->options_.node_id, ": first reconciliation: ",
             st.message(), " (retried in the background)");
  }
  (void)node->Heartbeat();
  ClusterNode* p = node.get();
  node->thread_ = std::thread([p] {
    p->Every(p->options_.reconcile, "reconciliation", [p] {
      p->CheckDigests();
      return p->Reconcile();
    });
  });
  node->beat_thread_ = std::thread([p] { p->BeatLoop(); });
  if (node->options_.log_trim > absl::ZeroDuration()) {
    node->trim_thread_ = std::thread([p] {
      p->Every(p->options_.log_trim, "log trim", [p] { return p->TrimLogs().status(); });
    });
  }
  if (node->options_.rereplicate_after > absl::ZeroDuration()) {
    node->heal_thread_ = std::thread([p] {
      p->Every(p->options_.reconcile, "re-replication", [p] { return p->Rereplicate().status(); });
    });
  }
  return node;
}

ClusterNode::~ClusterNode() {
  {
    absl::MutexLock l(&mu_);
    stopping_ = true;
  }
  {
    absl::MutexLock l(&beat_mu_);
    beat_stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
  if (beat_thread_.joinable()) beat_thread_.join();
  if (trim_thread_.joinable()) trim_thread_.join();
  if (heal_thread_.joinable()) heal_thread_.join();
  std::map<std::string, Hosted> hosted;
  {
    absl::MutexLock l(&mu_);
    hosted.swap(hosted_);
  }
  hosted.clear();  // stops the replicas
  if (catalog_ != nullptr) (void)catalog_->RemoveNode(options_.node_id);
}

absl::Status ClusterNode::CheckDataDir() const {
  const std::string path = db_->options().data_dir + "/CLUSTER";
  const std::string want =
      absl::StrCat("cluster=", options_.catalog.cluster, "\nnode=", options_.node_id, "\n");
  std::error_code ec;
  if (fs::exists(path, ec)) {
    ZOOM_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
    ZOOM_ASSIGN_OR_RETURN(server::KeyValueText kv,
                          server::KeyValueText::Parse(text, "the data directory's CLUSTER file"));
    const std::string cluster = kv.String("cluster"), node = kv.String("node");
    if (cluster != options_.catalog.cluster || node != options_.node_id) {
      return absl::FailedPreconditionError(absl::StrCat(
          "data directory ", db_->options().data_dir, " belongs to cluster '", cluster,
          "' node '", node, "', not cluster '", options_.catalog.cluster, "' node '",
          options_.node_id, "': start with those, or give this node its own --data_dir"));
    }
    return absl::OkStatus();
  }
  std::vector<std::string> standalone;
  for (const auto& c : db_->ListCollections()) {
    if (!ParseLocalName(c->config().name).has_value()) standalone.push_back(c->config().name);
  }
  if (!standalone.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "data directory ", db_->options().data_dir, " holds collections of a standalone zoomd (",
        absl::StrJoin(standalone, ", "),
        "): a cluster node needs its own data directory (--data_dir)"));
  }
  return WriteFileAtomically(files(), path, want);
}

void ClusterNode::Every(absl::Duration period, const char* what,
                        const std::function<absl::Status()>& step) {
  for (;;) {
    {
      absl::MutexLock l(&mu_);
      auto stop = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stopping_; };
      mu_.AwaitWithTimeout(absl::Condition(&stop), period);
      if (stopping_) return;
    }
    if (absl::Status st = step(); !st.ok()) {
      ZOOM_LOG(WARNING, "cluster node ", options_.node_id, ": ", what, ": ", st.message());
    }
  }
}

void ClusterNode::BeatLoop() {
  for (;;) {
    {
      absl::MutexLock l(&beat_mu_);
      auto wake = [&]() ABSL_SHARED_LOCKS_REQUIRED(beat_mu_) { return beat_stop_ || beat_now_; };
      beat_mu_.AwaitWithTimeout(absl::Condition(&wake), options_.heartbeat);
      if (beat_stop_) return;
      beat_now_ = false;
    }
    if (absl::Status st = Heartbeat(); !st.ok()) {
      ZOOM_LOG(WARNING, "cluster node ", options_.node_id, ": heartbeat: ", st.message());
    }
  }
}

void ClusterNode::BeatSoon() {
  absl::MutexLock l(&beat_mu_);
  beat_now_ = true;
}

absl::Status ClusterNode::Heartbeat() {
  absl::Status st = catalog_->PutNode(Info());
  NoteBucket(st, &nodes_failing_since_);
  return st;
}

void ClusterNode::NoteBucket(const absl::Status& st, absl::Time* failing_since) {
  // Unanswered for this long (many heartbeats, several floor reads) while
  // the node is connected: the bucket's stream is taken for stuck.
  constexpr absl::Duration kStuck = absl::Seconds(15);
  constexpr absl::Duration kAgain = absl::Seconds(60);
  const absl::Time now = absl::Now();
  {
    absl::MutexLock l(&bucket_mu_);
    if (!absl::IsUnavailable(st) && !absl::IsDeadlineExceeded(st)) {
      *failing_since = absl::InfiniteFuture();
      return;
    }
    if (*failing_since == absl::InfiniteFuture()) *failing_since = now;
    if (now - *failing_since < kStuck || now - remade_at_ < kAgain || !js_->connected()) return;
    remade_at_ = now;
  }
  ZOOM_LOG(WARNING, "cluster node ", options_.node_id, ": a cluster bucket has not answered for ",
           absl::FormatDuration(kStuck), " (", st.message(), "): opening the soft buckets again");
  absl::Status remade = catalog_->RemakeSoftBuckets();
  if (remade.ok() && failing_since == &nodes_failing_since_) {
    // Its stream may answer its info and still take no write: made again.
    remade = catalog_->RemakeNodesBucket();
    ZOOM_LOG(WARNING, "cluster node ", options_.node_id, ": the node bucket made again: ",
             remade.ok() ? "done" : remade.ToString());
  }
  if (!remade.ok()) {
    ZOOM_LOG(WARNING, "cluster node ", options_.node_id, ": ", remade.message());
  }
}

NodeInfo ClusterNode::Info() const {
  NodeInfo info;
  info.node = options_.node_id;
  info.address = options_.advertise_address;
  info.role = "node";
  info.heartbeat_unix_ms = absl::ToUnixMillis(absl::Now());
  absl::MutexLock l(&mu_);
  for (const auto& [local, h] : hosted_) {
    HostedShard s = h.shard;
    const ReplicaStatus st = h.replica->status();
    s.applied = st.applied;
    s.pending = st.pending;
    s.repairs = st.repairs;
    s.has_digest = st.caught_up && !st.failed;
    s.digest = s.has_digest ? st.digest : 0;
    if (st.failed) {
      s.state = ReplicaState::kFailed;
    } else if (st.caught_up || (st.entries > 0 && st.pending <= options_.max_serving_lag)) {
      s.state = ReplicaState::kServing;
    } else {
      s.state = ReplicaState::kCatchingUp;
    }
    info.hosted.push_back(std::move(s));
  }
  if (options_.decoder != nullptr) {
    for (const auto& m : options_.decoder->List()) {
      const server::ModelState st = m->state.load();
      info.models.push_back({m->name, st == server::ModelState::kServing ? ModelLoadState::kServing
                                      : st == server::ModelState::kLoading
                                          ? ModelLoadState::kLoading
                                          : ModelLoadState::kFailed});
    }
    for (const auto& [name, spec] : refused_models_) {
      info.models.push_back({name, ModelLoadState::kFailed});
    }
  }
  return info;
}

std::shared_ptr<ShardReplica> ClusterNode::ReplicaOf(const std::string& local) const {
  absl::MutexLock l(&mu_);
  auto it = hosted_.find(local);
  return it == hosted_.end() ? nullptr : it->second.replica;
}

bool ClusterNode::WaitApplied(const std::string& local, uint64_t sequence,
                              absl::Time deadline) const {
  std::shared_ptr<ShardReplica> r = ReplicaOf(local);
  if (r == nullptr) return true;
  return r->WaitApplied(sequence, deadline);
}

absl::StatusOr<std::shared_ptr<server::Collection>> ClusterNode::OpenShard(const ShardMap& m,
                                                                           uint32_t k,
                                                                           uint64_t floor,
                                                                           bool replace,
                                                                           std::string* restored_from) {
  const std::string local = m.LocalName(k);
  // A peer with data: its snapshot, then the stream after it.
  absl::StatusOr<std::vector<NodeInfo>> nodes = catalog_->LiveNodes();
  const NodeInfo* best = nullptr;
  const HostedShard* best_shard = nullptr;
  if (nodes.ok()) {
    for (const NodeInfo& n : *nodes) {
      if (n.node == options_.node_id || n.address.empty()) continue;
      const HostedShard* h = n.Find(m.uid, k);
      if (h == nullptr || h->applied == 0 || h->state == ReplicaState::kFailed) continue;
      if (h->applied + 1 < floor) continue;  // behind the floor too
      if (best_shard == nullptr || h->applied > best_shard->applied) {
        best = &n;
        best_shard = h;
      }
    }
  }
  if (best != nullptr && options_.fetch_snapshot) {
    // Staged through the node's FileSystem; a failed fetch removes it, so
    // only a whole, synced archive reaches the restore (which verifies it).
    const std::string dest = db_->UploadPath();
    absl::Status st =
        FetchSnapshotToFile(options_.fetch_snapshot, best->address, local, files(), dest);
    absl::StatusOr<std::shared_ptr<server::Collection>> restored =
        st.ok() ? db_->RestoreSnapshot(dest, local, /*overwrite=*/replace)
                : absl::StatusOr<std::shared_ptr<server::Collection>>(st);
    if (st.ok()) files().Remove(dest).IgnoreError();  // swept at the next start otherwise
    if (restored.ok()) {
      ZOOM_LOG(INFO, "cluster node ", options_.node_id, ": shard ", k, " of ", m.collection,
               " bootstrapped from ", best->node, "'s snapshot at sequence ",
               (*restored)->log_position());
      if (restored_from != nullptr) *restored_from = best->node;
      return restored;
    }
    ZOOM_LOG(WARNING, "cluster node ", options_.node_id, ": shard ", k, " of ", m.collection,
             ": bootstrap from ", best->node, " failed: ", restored.status().message());
  }
  // Empty, replaying the stream from its start: only if it still has it.
  const std::string stream = StreamName(options_.catalog.cluster, m.collection);
  ZOOM_ASSIGN_OR_RETURN(StreamState state, js_->GetStreamState(stream));
  if (replace || floor > 1 || state.first_sequence > 1) {
    return absl::UnavailableError(absl::StrCat(
        "shard ", k, " of ", m.collection, ": its log is purged below sequence ",
        std::max(floor, state.first_sequence), " and no peer's snapshot reaching it could be "
        "fetched: waiting for a peer (if every replica of the shard is lost, restore the "
        "collection from a backup)"));
  }
  server::CollectionConfig config = m.config;
  config.name = local;
  return db_->CreateCollection(config);
}

absl::Status ClusterNode::KeepMapCopy(const ShardMap& map) {
  std::string text = map.Encode();
  auto it = map_copies_.find(map.collection);
  if (it != map_copies_.end() && it->second == text) return absl::OkStatus();
  ZOOM_RETURN_IF_ERROR(WriteFileAtomically(
      files(), absl::StrCat(db_->options().data_dir, "/cluster_map.", map.collection), text));
  map_copies_[map.collection] = std::move(text);
  return absl::OkStatus();
}

absl::StatusOr<std::optional<ShardMap>> ClusterNode::ReadMapCopy(
    const std::string& collection) const {
  const std::string path = absl::StrCat(db_->options().data_dir, "/cluster_map.", collection);
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::optional<ShardMap>();
  ZOOM_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  ZOOM_ASSIGN_OR_RETURN(ShardMap map, ShardMap::Decode(text));
  return std::optional<ShardMap>(std::move(map));
}

absl::Status ClusterNode::RemakeBuckets(const absl::Status& lost) {
  ZOOM_LOG(WARNING, "cluster node ", options_.node_id, ": ", lost.message(),
           ": creating the cluster's buckets again");
  return catalog_->EnsureBuckets();
}

absl::Status ClusterNode::Reconcile() {
  absl::MutexLock pass(&reconcile_mu_);
  absl::StatusOr<std::vector<VersionedShardMap>> listed =
      ReadBucket([&] { return catalog_->ListMaps(); });
  ZOOM_ASSIGN_OR_RETURN(std::vector<VersionedShardMap> maps, std::move(listed));
  std::map<std::string, std::pair<const ShardMap*, uint32_t>> want;
  for (const VersionedShardMap& vm : maps) {
    bool hosts = false;
    for (uint32_t k = 0; k < vm.map.shards; ++k) {
      const auto& nodes = vm.map.assignment[k];
      if (std::find(nodes.begin(), nodes.end(), options_.node_id) != nodes.end()) {
        want[vm.map.LocalName(k)] = {&vm.map, k};
        hosts = true;
      }
    }
    if (hosts) {
      if (absl::Status st = KeepMapCopy(vm.map); !st.ok()) {
        ZOOM_LOG(WARNING, "cluster node ", options_.node_id, ": keeping a copy of the map of ",
                 vm.map.collection, ": ", st.message());
      }
    }
  }
  // Local shard collections no map wants: dropped only when that is
  // certain, never on one read of the bucket's keys (a short or failed
  // listing must not cost a replica its data): the collection's own map is
  // read, and a replica goes when its map names another collection (a drop
  // and a new create: another uid) or when the map has been absent in two
  // passes in a row.
  std::set<std::string> locals;
  {
    absl::MutexLock l(&mu_);
    for (const auto& [local, h] : hosted_) locals.insert(local);
  }
  for (const auto& c : db_->ListCollections()) {
    if (ParseLocalName(c->config().name).has_value()) locals.insert(c->config().name);
  }
  std::set<std::string> missing_now;
  std::vector<std::string> drop;
  for (const std::string& local : locals) {
    if (want.count(local) != 0) continue;
    const std::optional<LocalShard> ls = ParseLocalName(local);
    if (!ls.has_value()) continue;
    absl::StatusOr<std::optional<VersionedShardMap>> m = catalog_->GetMap(ls->collection);
    if (!m.ok()) continue;  // cannot tell now: kept
    if (m->has_value()) {
      if (static_cast<uint32_t>((*m)->map.uid & 0xffffffffu) != ls->uid8) {
        drop.push_back(local);
      } else if (ls->shard < (*m)->map.shards &&
                 std::find((*m)->map.assignment[ls->shard].begin(),
                           (*m)->map.assignment[ls->shard].end(),
                           options_.node_id) == (*m)->map.assignment[ls->shard].end()) {
        // Its replica moved to another node (re-replication while this one
        // was gone): dropped on the second pass that finds it so.
        if (missing_.count(local) != 0) {
          drop.push_back(local);
        } else {
          missing_now.insert(local);
        }
      }
      continue;  // its map is there and wants it (a short listing): kept
    }
    // Absent: dropped (the bucket holds the drop's delete marker), or lost
    // with un-synced NATS data (the bucket has no record of it at all):
    // then kept, and its map put back from this node's copy.
    absl::StatusOr<bool> known = catalog_->HasRecordOf(ls->collection);
    if (!known.ok()) continue;
    if (!*known) {
      absl::StatusOr<std::optional<ShardMap>> copy = ReadMapCopy(ls->collection);
      absl::Status st = copy.status();
      if (st.ok() && copy->has_value() &&
          static_cast<uint32_t>((*copy)->uid & 0xffffffffu) == ls->uid8) {
        st = catalog_->RestoreMap(**copy);
        ZOOM_LOG(WARNING, "cluster node ", options_.node_id, ": the catalog has no record of ",
                 ls->collection, " (NATS lost it): its map put back from this node's copy: ",
                 st.ok() ? "done" : std::string(st.message()));
      } else {
        ZOOM_LOG(WARNING, "cluster node ", options_.node_id, ": the catalog has no record of ",
                 ls->collection, " and this node keeps no copy of its map: ", local,
                 " kept, not served");
      }
      continue;
    }
    if (missing_.count(local) != 0) {
      drop.push_back(local);
    } else {
      missing_now.insert(local);
    }
  }
  missing_ = std::move(missing_now);
  absl::Status first;
  for (const std::string& local : drop) {
    Hosted h;
    {
      absl::MutexLock l(&mu_);
      auto it = hosted_.find(local);
      if (it != hosted_.end()) {
        h = std::move(it->second);
        hosted_.erase(it);
      }
    }
    h.replica.reset();  // outside the lock: a stop joins the replica's thread
    ZOOM_LOG(INFO, "cluster node ", options_.node_id, ": ", local,
             " belongs to no collection of the cluster any more: dropped");
    absl::Status st = db_->DropCollection(local);
    if (!st.ok() && !absl::IsNotFound(st) && first.ok()) first = st;
  }
  // Replicas the log was purged past: stopped, reopened below from a
  // peer's snapshot.
  std::vector<std::shared_ptr<ShardReplica>> behind;
  std::set<std::string> restore;  // a fork older than the replica retains
  {
    absl::MutexLock l(&mu_);
    for (auto it = hosted_.begin(); it != hosted_.end();) {
      const ReplicaStatus st = it->second.replica->status();
      if (st.behind_floor || st.needs_restore) {
        if (st.needs_restore) restore.insert(it->first);
        behind.push_back(std::move(it->second.replica));
        it = hosted_.erase(it);
      } else {
        ++it;
      }
    }
  }
  behind.clear();  // outside the lock: a stop joins the replica's thread
  for (const auto& [local, mk] : want) {
    if (ReplicaOf(local) != nullptr) continue;
    const ShardMap& m = *mk.first;
    const uint32_t k = mk.second;
    absl::StatusOr<uint64_t> floor = catalog_->LogFloor(m.uid, k);
    NoteBucket(floor.status(), &floors_failing_since_);
    if (!floor.ok()) {
      if (first.ok()) first = floor.status();
      continue;  // cannot tell whether the local copy can replay: next pass
    }
    absl::StatusOr<std::shared_ptr<server::Collection>> coll = db_->GetCollection(local);
    std::string base_node;  // the peer whose snapshot it began as, if so
    // Before a peer's snapshot replaces a replica, what it holds goes to
    // the log at its write versions (versioned_apply.h): a write only it
    // had (its log lost, or purged while it was rewound) reaches the
    // restored copy and every peer, and changes nothing newer anywhere.
    if (coll.ok() && restore.contains(local)) {
      ZOOM_LOG(WARNING, "cluster node ", options_.node_id, ": shard ", k, " of ", m.collection,
               " forked from the log before what it retains: restoring a peer's snapshot");
      absl::Status kept = PublishState(m.collection, k, local, **coll,
                                       "before a peer's snapshot replaces it");
      coll = kept.ok() ? OpenShard(m, k, *floor, /*replace=*/true, &base_node)
                       : absl::StatusOr<std::shared_ptr<server::Collection>>(kept);
    } else if (coll.ok() && (*coll)->log_position() + 1 < *floor) {
      ZOOM_LOG(WARNING, "cluster node ", options_.node_id, ": shard ", k, " of ", m.collection,
               " is at log position ", (*coll)->log_position(), ", below the floor ", *floor,
               " (the log before it was purged): restoring a peer's snapshot");
      absl::Status kept = PublishState(m.collection, k, local, **coll,
                                       "before a peer's snapshot replaces it");
      coll = kept.ok() ? OpenShard(m, k, *floor, /*replace=*/true, &base_node)
                       : absl::StatusOr<std::shared_ptr<server::Collection>>(kept);
    } else if (!coll.ok()) {
      coll = OpenShard(m, k, *floor, /*replace=*/false, &base_node);
    }
    if (!coll.ok()) {
      if (first.ok()) first = coll.status();
      continue;
    }
    ShardReplicaOptions ro = options_.replica;
    // A copy of a peer's snapshot holds the entries the peer acknowledged
    // up to its position (ReplicaAck::base), until a fork's repair rewinds
    // it (then it may hold other entries there).
    auto base = std::make_shared<std::atomic<uint64_t>>(
        base_node.empty() ? 0 : (*coll)->log_position());
    // After a repair's rewind the node's record shows the new position at
    // once (the heartbeat thread's: not from the replica's thread).
    ro.on_fork = [this, told = options_.replica.on_fork, base](const LogRepairResult* repaired,
                                                               const std::string& detail) {
      base->store(0, std::memory_order_relaxed);
      if (repaired != nullptr) BeatSoon();
      if (told) told(repaired, detail);
    };
    ro.stream = StreamName(options_.catalog.cluster, m.collection);
    ro.subject = ShardSubject(options_.catalog.cluster, m.collection, k);
    ro.durable = ConsumerName(options_.node_id, m.uid, k);
    ro.log_floor = [this, uid = m.uid, k] {
      absl::StatusOr<uint64_t> floor = catalog_->LogFloor(uid, k);
      NoteBucket(floor.status(), &floors_failing_since_);
      return floor;
    };
    ro.lower_floor = [catalog = catalog_.get(), uid = m.uid, k](uint64_t floor) {
      return catalog->LowerLogFloor(uid, k, floor);
    };
    // A repair (and a stream made again) only for the collection this
    // replica belongs to: one dropped, or dropped and created again under
    // its name (the same stream name), is not this replica's to write to.
    auto still_mine = [catalog = catalog_.get(), collection = m.collection,
                       uid = m.uid]() -> absl::Status {
      ZOOM_ASSIGN_OR_RETURN(std::optional<VersionedShardMap> now, catalog->GetMap(collection));
      if (!now.has_value() || now->map.uid != uid) {
        return absl::FailedPreconditionError(absl::StrCat(
            "collection ", collection, " was dropped", now.has_value() ? " and made again" : "",
            ": its old replica repairs nothing"));
      }
      return absl::OkStatus();
    };
    ro.repair_lock = [catalog = catalog_.get(), uid = m.uid, k, node = options_.node_id,
                      still_mine]() -> absl::StatusOr<std::function<void()>> {
      ZOOM_RETURN_IF_ERROR(still_mine());
      return catalog->LockRepair(uid, k, node);
    };
    ro.ensure_stream = [catalog = catalog_.get(), map = m, still_mine]() -> absl::Status {
      ZOOM_RETURN_IF_ERROR(still_mine());
      return catalog->EnsureStreamOf(map);
    };
    // Durable positions for write concerns: the node's own sync (none
    // needed under --sync=always), reported on the acks subject.
    if (!db_->options().sync_always) ro.sync = [db = db_] { return db->SyncWal(); };
    ro.on_durable = [js = js_.get(), subject = AcksSubject(options_.catalog.cluster),
                     node = options_.node_id, uid = m.uid, k, base, base_node](
                        uint64_t durable, const std::vector<AppliedEntry>& applied) {
      ReplicaAck a;
      a.node = node;
      a.uid = uid;
      a.shard = k;
      a.durable = durable;
      a.applied = applied;
      a.base = base->load(std::memory_order_relaxed);
      if (a.base > 0) a.base_node = base_node;
      // Core NATS: a lost notice's entries come again (ShardReplica).
      (void)js->PublishNotice(subject, a.Encode());
    };
    absl::StatusOr<std::unique_ptr<ShardReplica>> r = ShardReplica::Start(js_.get(), *coll, ro);
    if (!r.ok()) {
      if (first.ok()) first = r.status();
      continue;
    }
    Hosted h;
    h.shard.collection = m.collection;
    h.shard.shard = k;
    h.shard.uid = m.uid;
    h.replica = std::shared_ptr<ShardReplica>(std::move(*r));
    ZOOM_LOG(INFO, "cluster node ", options_.node_id, ": replica of shard ", k, " of ",
             m.collection, " started at sequence ", (*coll)->log_position() + 1);
    absl::MutexLock l(&mu_);
    hosted_[local] = std::move(h);
  }
  if (absl::Status st = ReconcileModels(); !st.ok() && first.ok()) first = st;
  return first;
}

absl::Status ClusterNode::ReconcileModels() {
  server::DecoderEngine* engine = options_.decoder;
  if (engine == nullptr) return absl::OkStatus();
  absl::StatusOr<std::vector<ModelSpec>> listed_models =
      ReadBucket([&] { return catalog_->ListModels(); });
  ZOOM_ASSIGN_OR_RETURN(std::vector<ModelSpec> specs, std::move(listed_models));
  std::map<std::string, ModelSpec> want;
  for (ModelSpec& s : specs) want[s.name] = std::move(s);
  std::map<std::string, std::shared_ptr<server::LoadedModel>> loaded;
  for (auto& m : engine->List()) loaded[m->name] = std::move(m);
  // Gone from the bucket, or changed (unloaded and loaded again under the
  // name with another dir or graph): unloaded.
  for (auto it = cluster_models_.begin(); it != cluster_models_.end();) {
    auto w = want.find(it->first);
    if (w != want.end() && w->second.SameModel(it->second)) {
      ++it;
      continue;
    }
    (void)engine->Unload(it->first);
    loaded.erase(it->first);
    ZOOM_LOG(INFO, "cluster node ", options_.node_id, ": model ", it->first, " unloaded");
    it = cluster_models_.erase(it);
  }
  {
    absl::MutexLock l(&mu_);
    for (auto it = refused_models_.begin(); it != refused_models_.end();) {
      auto w = want.find(it->first);
      it = w == want.end() || !w->second.SameModel(it->second) ? refused_models_.erase(it)
                                                               : std::next(it);
    }
  }
  for (const auto& [name, spec] : want) {
    if (cluster_models_.count(name) != 0 || loaded.count(name) != 0) continue;
    {
      absl::MutexLock l(&mu_);
      if (refused_models_.count(name) != 0) continue;  // reported failed until it changes
    }
    index::FgdOptions fo;
    if (spec.m != 0) fo.hnsw.M = spec.m;
    if (spec.ef_construction != 0) fo.hnsw.ef_construction = spec.ef_construction;
    absl::StatusOr<std::shared_ptr<server::LoadedModel>> m =
        engine->Load(name, spec.dir, fo, spec.default_ef);
    if (!m.ok()) {
      ZOOM_LOG(WARNING, "cluster node ", options_.node_id, ": model ", name, " (dir '",
               spec.dir, "') not loaded: ", m.status().message());
      absl::MutexLock l(&mu_);
      refused_models_[name] = spec;
      continue;
    }
    cluster_models_[name] = spec;
    ZOOM_LOG(INFO, "cluster node ", options_.node_id, ": loading model ", name, " from '",
             spec.dir, "'");
  }
  return absl::OkStatus();
}

}  // namespace zoom::cluster
