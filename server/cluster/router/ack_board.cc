#include "server/cluster/router/ack_board.h"

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace zoom::server::router {

void AckBoard::Record(const cluster::ReplicaAck& a) {
  absl::MutexLock l(&mu_);
  Shard& s = shards_[{a.uid, a.shard}];
  s.positions[a.node] = a.durable;
  if (a.base > 0 && a.base_node != a.node) {
    s.bases[a.node] = {a.base_node, a.base};
  } else {
    s.bases.erase(a.node);
  }
  for (const cluster::AppliedEntry& e : a.applied) {
    std::vector<Entry>& at = s.entries[e.sequence];
    Entry* same = nullptr;
    for (Entry& x : at) {
      if (x.id == e.id) same = &x;
    }
    if (same == nullptr) {
      if (!at.empty()) {
        ++divergences_;
        ZOOM_LOG(WARNING, "router: replicas of shard ", a.shard, " (collection uid ",
                 absl::Hex(a.uid, absl::kZeroPad16), ") applied different entries at log "
                 "sequence ", e.sequence, " (", a.node, ": id '", e.id, "', others: id '",
                 at.front().id, "'): their logs diverged; writes there are acknowledged only "
                 "by the replicas that applied them");
      }
      at.push_back({e.id, e.changed, {}});
      same = &at.back();
    }
    same->nodes.insert(a.node);
    if (!same->changed.has_value()) same->changed = e.changed;
  }
  while (s.entries.size() > kKeptEntries) s.entries.erase(s.entries.begin());
}

const AckBoard::Entry* AckBoard::Find(const Key& key, uint64_t sequence,
                                      const std::string& id) const {
  auto it = shards_.find(key);
  if (it == shards_.end()) return nullptr;
  auto at = it->second.entries.find(sequence);
  if (at == it->second.entries.end()) return nullptr;
  for (const Entry& e : at->second) {
    if (e.id == id) return &e;
  }
  return nullptr;
}

bool AckBoard::Has(const Key& key, uint64_t sequence, const Entry& e,
                   const std::string& node) const {
  if (e.nodes.contains(node)) return true;
  auto it = shards_.find(key);
  if (it == shards_.end()) return false;
  auto b = it->second.bases.find(node);
  if (b == it->second.bases.end() || sequence > b->second.position) return false;
  auto at = it->second.entries.find(sequence);
  return at != it->second.entries.end() && at->second.size() == 1 &&
         e.nodes.contains(b->second.node);
}

std::vector<std::string> AckBoard::Await(uint64_t uid, uint32_t shard, uint64_t sequence,
                                         const std::string& id,
                                         const std::vector<std::string>& replicas, size_t need,
                                         absl::Time deadline) const {
  const Key key{uid, shard};
  auto who = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    std::vector<std::string> out;
    if (const Entry* e = Find(key, sequence, id); e != nullptr) {
      for (const std::string& r : replicas) {
        if (Has(key, sequence, *e, r)) out.push_back(r);
      }
    }
    return out;
  };
  absl::MutexLock l(&mu_);
  // Evaluated on every release of mu_ while waiting: counts, allocates nothing.
  auto reached = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    const Entry* e = Find(key, sequence, id);
    if (e == nullptr) return need == 0;
    size_t n = 0;
    for (const std::string& r : replicas) n += Has(key, sequence, *e, r) ? 1 : 0;
    return n >= need;
  };
  mu_.AwaitWithDeadline(absl::Condition(&reached), deadline);
  return who();
}

std::optional<uint64_t> AckBoard::Changed(uint64_t uid, uint32_t shard, uint64_t sequence,
                                          const std::string& id) const {
  absl::MutexLock l(&mu_);
  const Entry* e = Find({uid, shard}, sequence, id);
  return e == nullptr ? std::nullopt : e->changed;
}

uint64_t AckBoard::Position(uint64_t uid, uint32_t shard, const std::string& node) const {
  absl::MutexLock l(&mu_);
  auto it = shards_.find({uid, shard});
  if (it == shards_.end()) return 0;
  auto p = it->second.positions.find(node);
  return p == it->second.positions.end() ? 0 : p->second;
}

uint64_t AckBoard::divergences() const {
  absl::MutexLock l(&mu_);
  return divergences_;
}

}  // namespace zoom::server::router
