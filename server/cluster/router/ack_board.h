// File: server/cluster/router/ack_board.h
//
// AckBoard: the log entries each shard replica has applied and made
// durable, from the replicas' notices (cluster::ReplicaAck on AcksSubject:
// after each batch a replica applied and synced, each entry by stream
// sequence and message id). The write concerns wait on it: a write whose
// last entry on shard k is (s, id) is acknowledged under MAJORITY once more
// than half of the shard's replicas (ShardMap::assignment) reported that
// very entry, under ALL once every one did. An entry is known by its
// sequence AND its id: a replica that applied another entry at sequence s
// (a log that lost its tail and gave its sequences to new entries) never
// acknowledges this one, and the board counts such a divergence. A replica
// that began as a copy of peer P's snapshot at position b (ReplicaAck::
// base) also has every entry at or before b that P reported, unless the
// board saw two entries at that sequence (the copy may hold either).
//
// Kept: the last kKeptEntries entries of each shard (writers wait right
// after their publish), and each replica's latest durable position.
//
// Thread safety: every method from any thread.
#ifndef ZOOM_SERVER_CLUSTER_ROUTER_ACK_BOARD_H_
#define ZOOM_SERVER_CLUSTER_ROUTER_ACK_BOARD_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/cluster/cluster_map.h"

namespace zoom::server::router {

class AckBoard {
 public:
  static constexpr size_t kKeptEntries = 4096;

  // One replica's report (the subscription's handler; tests).
  void Record(const cluster::ReplicaAck& a);

  // Waits until at least `need` of `replicas` (node ids) reported entry
  // (sequence, id) of shard (uid, shard) durable, or `deadline` passes;
  // returns those that had, in `replicas` order.
  std::vector<std::string> Await(uint64_t uid, uint32_t shard, uint64_t sequence,
                                 const std::string& id, const std::vector<std::string>& replicas,
                                 size_t need, absl::Time deadline) const;

  // The points entry (sequence, id) of shard (uid, shard) changed, as its
  // replicas reported; nullopt when none did (yet, or no longer kept).
  std::optional<uint64_t> Changed(uint64_t uid, uint32_t shard, uint64_t sequence,
                                  const std::string& id) const;

  // The latest durable position `node`'s replica of (uid, shard) reported;
  // 0 if none.
  uint64_t Position(uint64_t uid, uint32_t shard, const std::string& node) const;

  // How many times two replicas reported different entries at one sequence
  // of a shard (their logs diverged), since this board began.
  uint64_t divergences() const;

 private:
  struct Entry {
    std::string id;
    std::optional<uint64_t> changed;
    std::set<std::string> nodes;  // the replicas that reported it
  };
  struct Base {
    std::string node;
    uint64_t position = 0;
  };
  struct Shard {
    std::map<std::string, uint64_t> positions;          // node -> durable position
    std::map<std::string, Base> bases;                  // node -> the copy it began as
    std::map<uint64_t, std::vector<Entry>> entries;     // sequence -> what was applied there
  };
  using Key = std::pair<uint64_t, uint32_t>;
  const Entry* Find(const Key& key, uint64_t sequence, const std::string& id) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Whether `node` has entry `e` (at `sequence` of `key`): reported it, or
  // began as a copy of a peer's snapshot that holds it.
  bool Has(const Key& key, uint64_t sequence, const Entry& e, const std::string& node) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::map<Key, Shard> shards_ ABSL_GUARDED_BY(mu_);
  uint64_t divergences_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace zoom::server::router

#endif  // ZOOM_SERVER_CLUSTER_ROUTER_ACK_BOARD_H_
