#include "server/cluster/router/ack_board.h"

namespace zoom::server::router {

void AckBoard::Record(const cluster::ReplicaAck& a) {
  absl::MutexLock l(&mu_);
  Shard& s = shards_[{a.uid, a.shard}];
  s.positions[a.node] = a.durable;
  for (const auto& [seq, n] : a.changed) s.changed.emplace(seq, n);  // the first report stays
  while (s.changed.size() > kKeptCounts) s.changed.erase(s.changed.begin());
}

size_t AckBoard::Reached(const Shard& s, uint64_t sequence,
                         const std::vector<std::string>& replicas,
                         std::vector<std::string>* who) const {
  size_t n = 0;
  for (const std::string& r : replicas) {
    auto it = s.positions.find(r);
    if (it == s.positions.end() || it->second < sequence) continue;
    ++n;
    if (who != nullptr) who->push_back(r);
  }
  return n;
}

std::vector<std::string> AckBoard::Await(uint64_t uid, uint32_t shard, uint64_t sequence,
                                         const std::vector<std::string>& replicas, size_t need,
                                         absl::Time deadline) const {
  const Key key{uid, shard};
  absl::MutexLock l(&mu_);
  auto reached = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    auto it = shards_.find(key);
    return it != shards_.end() && Reached(it->second, sequence, replicas, nullptr) >= need;
  };
  mu_.AwaitWithDeadline(absl::Condition(&reached), deadline);
  std::vector<std::string> who;
  auto it = shards_.find(key);
  if (it != shards_.end()) Reached(it->second, sequence, replicas, &who);
  return who;
}

std::optional<uint64_t> AckBoard::Changed(uint64_t uid, uint32_t shard, uint64_t sequence) const {
  absl::MutexLock l(&mu_);
  auto it = shards_.find({uid, shard});
  if (it == shards_.end()) return std::nullopt;
  auto c = it->second.changed.find(sequence);
  if (c == it->second.changed.end()) return std::nullopt;
  return c->second;
}

uint64_t AckBoard::Position(uint64_t uid, uint32_t shard, const std::string& node) const {
  absl::MutexLock l(&mu_);
  auto it = shards_.find({uid, shard});
  if (it == shards_.end()) return 0;
  auto p = it->second.positions.find(node);
  return p == it->second.positions.end() ? 0 : p->second;
}

}  // namespace zoom::server::router
