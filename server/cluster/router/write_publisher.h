// File: server/cluster/router/write_publisher.h
//
// WritePublisher: a router's writes as log entries (server/cluster/
// log_entry.h) on the collections' JetStream streams. A write is split by
// shard (ShardOf) into entries of at most MaxEntryBytes (the NATS servers'
// max_payload less room, at most RouterOptions::max_entry_bytes); a point
// or a set of fields that does not fit in one entry is INVALID_ARGUMENT,
// saying the max_payload every write zoomd takes needs
// (NatsMaxPayloadNeeded: docs/cluster.md gives nats-server 8MB). Each
// shard's entries are published in order (the shards in parallel, up to 8
// at once). JetStream acknowledges each entry once a quorum of the
// stream's NATS servers stored it (in memory: nats-server 2.9 syncs its
// files every two minutes). The write is then acknowledged under its write
// concern (api::WriteConcern): kLog at once; kMajority (the default) once
// more than half of each written shard's replicas, kAll once all of them,
// reported each of the shard's entries durable, each by its sequence and
// message id (AckBoard: never a position alone), with a WriteToken
// (shard, sequence of its last entry, the replicas that had it) a shard.
// A publish that fails, or a concern not met in time, is UNAVAILABLE
// (DEADLINE_EXCEEDED when the client set a deadline) naming the stream,
// the replicas that had it and what was acknowledged before: the write may
// or may not be kept, and retrying the whole request is safe, every write
// is idempotent. "In time": RouterOptions::write_concern_wait without a
// client deadline; with one, ConcernWaitUntil: a little before it, so that
// the client receives this answer rather than its own bare "Deadline
// Exceeded" (CI once saw only that, and no replica named).
#ifndef ZOOM_SERVER_CLUSTER_ROUTER_WRITE_PUBLISHER_H_
#define ZOOM_SERVER_CLUSTER_ROUTER_WRITE_PUBLISHER_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "server/api/types.h"
#include "server/cluster/cluster_map.h"
#include "server/cluster/log_entry.h"
#include "server/cluster/router/router_core.h"

namespace zoom::server::router {

// Room kept in a NATS message for its headers (the message id).
inline constexpr size_t kNatsHeaderRoom = 1024;

// The NATS max_payload that every write within `max_payload_bytes`
// (ServiceLimits: a point's payload and typed fields as sent) fits in at
// dimension `dim`: the log stores typed fields at up to 2.25 times their
// request size (a list of small integers: 9 bytes a value, 4 in the
// request), then the vector, the names and counts of up to 1,024 fields,
// the entry's framing and the headers. 1 MiB at 4,096-d: 2,441,216 bytes.
size_t NatsMaxPayloadNeeded(uint64_t max_payload_bytes, uint32_t dim);

// The most a write concern's wait stops short of the client's deadline.
inline constexpr absl::Duration kConcernAnswerMargin = absl::Milliseconds(500);

// When a write concern stops waiting, at `now`, for a client's `deadline`:
// a tenth of what is left, at most kConcernAnswerMargin, before it (the
// answer's way back); `deadline` itself once it has passed.
absl::Time ConcernWaitUntil(absl::Time now, absl::Time deadline);

// A write as it was acknowledged.
struct Written {
  std::vector<api::WriteToken> tokens;  // a shard, in shard order
  api::WriteConcern concern = api::WriteConcern::kMajority;  // never kDefault
  // The points the entries changed, as their replicas reported (the
  // entries that count points, under kMajority / kAll); nullopt when some
  // entry's count is not known.
  std::optional<uint64_t> changed;
};

class WritePublisher {
 public:
  // Logs the NATS servers' max_payload and what it lets through (a
  // WARNING when it is below what writes within the default limits need).
  explicit WritePublisher(RouterCore* core);

  // The largest log entry the NATS servers take (less room for headers).
  size_t MaxEntryBytes() const;
  // InvalidArgument: `what` (e.g. "point 7 (#0) is 2000000 bytes in the
  // cluster's log") does not fit a log entry; says the cap, where it comes
  // from and the max_payload the NATS servers need at dimension `dim`.
  absl::Status TooLarge(const std::string& what, uint32_t dim) const;

  // Points (checked: PointRefsOf, ValidatePoints) into their shards' logs.
  absl::StatusOr<Written> Upsert(const cluster::ShardMap& m, absl::Span<const PointRef> points,
                                 api::WriteConcern concern, absl::Time deadline) const;
  // One entry kind over ids: `make(ids)` builds it for a shard's ids, split
  // so that an entry stays under the cap with `extra_bytes` besides them.
  template <typename Make>
  absl::StatusOr<Written> ByIds(const cluster::ShardMap& m, absl::Span<const uint64_t> ids,
                                size_t extra_bytes, Make make, api::WriteConcern concern,
                                absl::Time deadline) const;
  // The same entry for every shard (field indexes), acknowledged by the log
  // (kLog: the callers wait for the replicas' work themselves).
  absl::Status ToAll(const cluster::ShardMap& m, const cluster::LogEntry& e,
                     absl::Time deadline) const;

  // Publishes the entries of each shard, in order, then waits for the
  // concern; out->tokens: those of the shards whose part was acknowledged
  // (by the log, and by the replicas the concern needs), in shard order.
  // `counted`: the entries count points (out->changed is summed).
  absl::Status Publish(const cluster::ShardMap& m,
                       const std::map<uint32_t, std::vector<std::string>>& entries,
                       api::WriteConcern concern, bool counted, absl::Time deadline,
                       Written* out) const;

 private:
  RouterCore* core_;
};

template <typename Make>
absl::StatusOr<Written> WritePublisher::ByIds(const cluster::ShardMap& m,
                                              absl::Span<const uint64_t> ids, size_t extra_bytes,
                                              Make make, api::WriteConcern concern,
                                              absl::Time deadline) const {
  const size_t cap = MaxEntryBytes();
  if (extra_bytes + 64 > cap) {
    return TooLarge(absl::StrCat("the request's fields are ", extra_bytes,
                                 " bytes in the cluster's log"),
                    m.config.dim);
  }
  const size_t per_entry = std::max<size_t>(1, (cap - extra_bytes - 64) / 8);
  std::map<uint32_t, std::vector<uint64_t>> by_shard;
  for (uint64_t id : ids) by_shard[cluster::ShardOf(id, m.shards)].push_back(id);
  std::map<uint32_t, std::vector<std::string>> entries;
  bool counted = false;  // the entries count the points they change
  for (auto& [k, list] : by_shard) {
    for (size_t i = 0; i < list.size(); i += per_entry) {
      std::vector<uint64_t> part(list.begin() + static_cast<std::ptrdiff_t>(i),
                                 list.begin() + static_cast<std::ptrdiff_t>(
                                                    std::min(list.size(), i + per_entry)));
      const cluster::LogEntry e = make(std::move(part));
      counted = e.op == cluster::LogOp::kDelete || e.op == cluster::LogOp::kSetPayload ||
                e.op == cluster::LogOp::kDeletePayload;
      entries[k].push_back(cluster::EncodeLogEntry(e));
    }
  }
  Written out;
  if (absl::Status st = Publish(m, entries, concern, counted, deadline, &out); !st.ok()) {
    return st;
  }
  return out;
}

}  // namespace zoom::server::router

#endif  // ZOOM_SERVER_CLUSTER_ROUTER_WRITE_PUBLISHER_H_
