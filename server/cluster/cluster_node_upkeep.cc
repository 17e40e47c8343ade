// File: server/cluster/cluster_node_upkeep.cc
//
// ClusterNode's upkeep of the cluster, beside its own replicas: the log
// trim (TrimLogs) and re-replication (Rereplicate), both over the nodes
// absent from the node bucket (NoteAbsent).
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "server/cluster/cluster_node.h"

#include "server/cluster/versioned_apply.h"

namespace zoom::cluster {

std::map<std::string, absl::Time> ClusterNode::NoteAbsent(
    const std::vector<VersionedShardMap>& maps,
    const std::map<std::string, const NodeInfo*>& live, absl::Time now) {
  absl::MutexLock l(&trim_mu_);
  for (const auto& [node, info] : live) {
    Heard& h = heard_[node];
    if (h.heartbeat_unix_ms != info->heartbeat_unix_ms || h.seen == absl::Time()) {
      h.heartbeat_unix_ms = info->heartbeat_unix_ms;
      h.seen = now;
    }
  }
  for (const VersionedShardMap& vm : maps) {
    for (const auto& replicas : vm.map.assignment) {
      for (const std::string& node : replicas) {
        if (live.count(node) != 0) {
          absent_since_.erase(node);
        } else if (absent_since_.count(node) == 0) {
          auto h = heard_.find(node);
          absent_since_.emplace(node, h != heard_.end() ? std::min(h->second.seen, now) : now);
        }
      }
    }
  }
  return absent_since_;
}

absl::StatusOr<ClusterNode::Membership> ClusterNode::ReadMembership() {
  Membership m;
  ZOOM_ASSIGN_OR_RETURN(m.maps, catalog_->ListMaps());
  absl::StatusOr<std::vector<NodeInfo>> nodes = ReadBucket([&] { return catalog_->LiveNodes(); });
  ZOOM_ASSIGN_OR_RETURN(m.nodes, std::move(nodes));
  for (const NodeInfo& n : m.nodes) m.live[n.node] = &n;
  m.now = absl::Now();
  m.absent = NoteAbsent(m.maps, m.live, m.now);
  return m;
}

absl::StatusOr<int> ClusterNode::Rereplicate() {
  ZOOM_ASSIGN_OR_RETURN(Membership ms, ReadMembership());
  const std::vector<VersionedShardMap>& maps = ms.maps;
  const std::map<std::string, const NodeInfo*>& live = ms.live;
  const absl::Time now = ms.now;
  const std::map<std::string, absl::Time>& absent = ms.absent;
  // One healer: the live node first by id (a compare-and-set on each map
  // keeps two from ever both writing one).
  if (live.empty() || live.begin()->first != options_.node_id) return 0;
  std::set<std::string> gone;
  for (const auto& [node, since] : absent) {
    if (now - since >= options_.rereplicate_after) gone.insert(node);
  }
  if (gone.empty()) return 0;
  std::vector<std::string> candidates;
  for (const auto& [node, info] : live) candidates.push_back(node);
  std::map<std::string, int> load;
  for (const VersionedShardMap& vm : maps) {
    for (const auto& replicas : vm.map.assignment) {
      for (const std::string& node : replicas) ++load[node];
    }
  }
  int moved = 0;
  absl::Status first;
  for (const VersionedShardMap& vm : maps) {
    ShardMap m = vm.map;
    const int n = ReplaceGone(&m.assignment, candidates, gone, &load);
    if (n == 0) continue;
    absl::StatusOr<uint64_t> rev = catalog_->UpdateMap(m, vm.revision);
    if (!rev.ok()) {
      if (first.ok()) first = rev.status();  // moved meanwhile: the next pass
      continue;
    }
    moved += n;
    for (uint32_t k = 0; k < m.shards; ++k) {
      if (m.assignment[k] == vm.map.assignment[k]) continue;
      ZOOM_LOG(WARNING, "cluster node ", options_.node_id, ": shard ", k, " of ", m.collection,
               ": replicas on ", absl::StrJoin(vm.map.assignment[k], ", "), " are now on ",
               absl::StrJoin(m.assignment[k], ", "), " (", absl::StrJoin(gone, ", "),
               " silent longer than ", absl::FormatDuration(options_.rereplicate_after),
               " since the last heartbeat seen)");
    }
  }
  if (!first.ok() && moved == 0) return first;
  return moved;
}

absl::Status ClusterNode::PublishState(const std::string& collection, uint32_t k,
                                       const std::string& local, const server::Collection& c,
                                       const char* why) {
  ZOOM_ASSIGN_OR_RETURN(std::vector<std::string> state, WholeStateEntries(c));
  const std::string subject = ShardSubject(options_.catalog.cluster, collection, k);
  const int64_t now = absl::ToUnixNanos(absl::Now());
  for (size_t i = 0; i < state.size(); ++i) {
    ZOOM_RETURN_IF_ERROR(
        js_->Publish(subject, state[i], absl::StrCat(local, "-state-", now, "-", i)).status());
  }
  if (!state.empty()) {
    ZOOM_LOG(WARNING, "cluster node ", options_.node_id, ": shard ", k, " of ", collection,
             ": its state published (", state.size(), " entries) ", why);
  }
  return absl::OkStatus();
}

void ClusterNode::CheckDigests() {
  constexpr int kChecks = 3;  // in a row: positions that only met once prove little
  constexpr absl::Duration kEvery = absl::Minutes(2);
  struct Mine {
    std::string local;
    HostedShard shard;
    std::shared_ptr<ShardReplica> replica;
  };
  std::vector<Mine> mine;
  {
    absl::MutexLock l(&mu_);
    for (const auto& [local, h] : hosted_) mine.push_back({local, h.shard, h.replica});
  }
  if (mine.empty()) return;
  absl::StatusOr<Membership> ms = ReadMembership();
  if (!ms.ok()) return;
  for (const Mine& r : mine) {
    const std::pair<uint64_t, uint32_t> key{r.shard.uid, r.shard.shard};
    const ReplicaStatus st = r.replica->status();
    std::string differs;
    if (st.caught_up && !st.failed) {
      for (const auto& [node, info] : ms->live) {
        if (node == options_.node_id) continue;
        const HostedShard* p = info->Find(r.shard.uid, r.shard.shard);
        if (p != nullptr && p->has_digest && p->applied == st.applied &&
            p->digest != st.digest) {
          differs = absl::StrCat(node, " (", absl::Hex(p->digest, absl::kZeroPad16), " against ",
                                 absl::Hex(st.digest, absl::kZeroPad16), " here, both at ",
                                 st.applied, ")");
          break;
        }
      }
    }
    if (differs.empty()) {
      digest_mismatches_.erase(key);
      continue;
    }
    if (++digest_mismatches_[key] < kChecks) continue;
    auto last = digest_published_.find(key);
    if (last != digest_published_.end() && absl::Now() - last->second < kEvery) continue;
    digest_published_[key] = absl::Now();
    digest_mismatches_.erase(key);
    absl::Status st2 = PublishState(r.shard.collection, r.shard.shard, r.local,
                                    *r.replica->collection(),
                                    absl::StrCat("because it differs from ", differs).c_str());
    if (!st2.ok()) {
      ZOOM_LOG(WARNING, "cluster node ", options_.node_id, ": shard ", r.shard.shard, " of ",
               r.shard.collection, " differs from ", differs, "; publishing its state: ",
               st2.message());
    }
  }
}

absl::StatusOr<int> ClusterNode::TrimLogs() {
  ZOOM_ASSIGN_OR_RETURN(Membership ms, ReadMembership());
  const std::vector<VersionedShardMap>& maps = ms.maps;
  const std::map<std::string, const NodeInfo*>& live = ms.live;
  const absl::Time now = ms.now;
  const std::map<std::string, absl::Time>& absent = ms.absent;
  int purged = 0;
  absl::Status first;
  for (const VersionedShardMap& vm : maps) {
    const ShardMap& m = vm.map;
    for (uint32_t k = 0; k < m.shards; ++k) {
      std::vector<std::string> replicas = m.assignment[k];
      std::sort(replicas.begin(), replicas.end());
      // The purger of the shard: its first live replica.
      auto first_live = std::find_if(replicas.begin(), replicas.end(),
                                     [&](const std::string& n) { return live.count(n) != 0; });
      if (first_live == replicas.end() || *first_live != options_.node_id) continue;
      uint64_t floor = UINT64_MAX, highest = 0;
      bool hold = false;
      for (const std::string& node : replicas) {
        auto it = live.find(node);
        if (it == live.end()) {
          // Absent for less than log_hold: it may come back and replay.
          auto a = absent.find(node);
          hold = hold || a == absent.end() || now - a->second < options_.log_hold;
          continue;
        }
        const HostedShard* h = it->second->Find(m.uid, k);
        if (h == nullptr) {
          hold = true;  // opening it (a bootstrap reports its position when done)
          continue;
        }
        floor = std::min(floor, h->applied);
        highest = std::max(highest, h->applied);
      }
      if (hold || floor == UINT64_MAX || floor <= 1) continue;
      // A position past the log's end is one the log lost (a power failure
      // of its servers) that the replica has not yet rewound from, or one its
      // record still shows after the rewind: its number says nothing of
      // this log, whose new entries no replica may have applied yet.
      absl::StatusOr<uint64_t> end =
          js_->LastSequence(StreamName(options_.catalog.cluster, m.collection),
                            ShardSubject(options_.catalog.cluster, m.collection, k));
      if (!end.ok()) {
        if (first.ok()) first = end.status();
        continue;
      }
      if (highest > *end) continue;
      absl::StatusOr<uint64_t> now_floor = catalog_->LogFloor(m.uid, k);
      if (!now_floor.ok()) {
        if (first.ok()) first = now_floor.status();
        continue;
      }
      if (floor <= *now_floor) continue;
      // The floor first: a replica that reads it knows what may be gone.
      absl::Status st = catalog_->RaiseLogFloor(m.uid, k, floor);
      if (st.ok()) {
        st = js_->PurgeBefore(StreamName(options_.catalog.cluster, m.collection),
                              ShardSubject(options_.catalog.cluster, m.collection, k), floor);
      }
      if (!st.ok()) {
        if (first.ok()) first = st;
        continue;
      }
      ++purged;
      ZOOM_LOG(INFO, "cluster node ", options_.node_id, ": log of shard ", k, " of ",
               m.collection, " purged below sequence ", floor,
               " (the lowest position of its replicas)");
    }
  }
  if (!first.ok()) return first;
  return purged;
}

}  // namespace zoom::cluster
