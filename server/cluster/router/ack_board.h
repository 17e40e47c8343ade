// File: server/cluster/router/ack_board.h
//
// AckBoard: what a router knows of each shard replica's durable position,
// from the replicas' notices (cluster::ReplicaAck on AcksSubject: after
// each batch a replica applied and made durable, and again every second
// while idle). The write concerns wait on it: a write whose log sequence on
// shard k is s is acknowledged under MAJORITY once more than half of the
// shard's replicas (ShardMap::assignment) reported a position at or past s,
// under ALL once every one did.
//
// A replica's position is its latest report (not the largest seen: a
// replica restored from an older snapshot reports less, and counts for
// less). Reports from one replica arrive in order (one NATS connection, one
// subscriber).
//
// Counts: the points each counting entry (delete, set/delete payload)
// changed, as the first replica to report it said; kept for the last
// kKeptCounts entries of each shard.
//
// Thread safety: every method from any thread.
#ifndef ZOOM_SERVER_CLUSTER_ROUTER_ACK_BOARD_H_
#define ZOOM_SERVER_CLUSTER_ROUTER_ACK_BOARD_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/cluster/cluster_map.h"

namespace zoom::server::router {

class AckBoard {
 public:
  static constexpr size_t kKeptCounts = 4096;

  // One replica's report (the subscription's handler; tests).
  void Record(const cluster::ReplicaAck& a);

  // Waits until at least `need` of `replicas` (node ids) reported a
  // position at or past `sequence` for shard (uid, shard), or `deadline`
  // passes; returns those that had, in `replicas` order.
  std::vector<std::string> Await(uint64_t uid, uint32_t shard, uint64_t sequence,
                                 const std::vector<std::string>& replicas, size_t need,
                                 absl::Time deadline) const;

  // The points entry `sequence` of shard (uid, shard) changed, as reported;
  // nullopt when no replica reported it (yet, or it is no longer kept).
  std::optional<uint64_t> Changed(uint64_t uid, uint32_t shard, uint64_t sequence) const;

  // The reported position of `node`'s replica of (uid, shard); 0 if none.
  uint64_t Position(uint64_t uid, uint32_t shard, const std::string& node) const;

 private:
  struct Shard {
    std::map<std::string, uint64_t> positions;  // node -> durable position
    std::map<uint64_t, uint64_t> changed;       // sequence -> points changed
  };
  using Key = std::pair<uint64_t, uint32_t>;
  size_t Reached(const Shard& s, uint64_t sequence, const std::vector<std::string>& replicas,
                 std::vector<std::string>* who) const;

  mutable absl::Mutex mu_;
  std::map<Key, Shard> shards_ ABSL_GUARDED_BY(mu_);
};

}  // namespace zoom::server::router

#endif  // ZOOM_SERVER_CLUSTER_ROUTER_ACK_BOARD_H_
