#include "server/cluster/router/write_publisher.h"

#include <algorithm>
#include <atomic>
#include <random>
#include <thread>

#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "server/api/convert.h"
#include "server/engine/payload_fields.h"

namespace zoom::server::router {
namespace {

std::string RandomId() {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  return absl::StrCat(absl::Hex(rng(), absl::kZeroPad16), absl::Hex(rng(), absl::kZeroPad16));
}

// nats-server's own default max_payload (1 MB), taken while the connected
// server's is not known.
constexpr int64_t kNatsDefaultMaxPayload = 1 << 20;

int64_t ServerMaxPayload(const cluster::JetStream& js) {
  const int64_t server = js.max_payload();
  return server > 4096 ? server : kNatsDefaultMaxPayload;
}

}  // namespace

absl::Time ConcernWaitUntil(absl::Time now, absl::Time deadline) {
  const absl::Duration left = deadline - now;
  if (left <= absl::ZeroDuration()) return deadline;
  return deadline - std::min(left / 10, kConcernAnswerMargin);
}

size_t NatsMaxPayloadNeeded(uint64_t max_payload_bytes, uint32_t dim) {
  return static_cast<size_t>((max_payload_bytes * 9 + 3) / 4) + size_t{4} * dim +
         (size_t{64} << 10);
}

WritePublisher::WritePublisher(RouterCore* core) : core_(core) {
  const int64_t server = ServerMaxPayload(core_->js());
  const uint64_t limit = ServiceLimits().max_payload_bytes;
  const uint32_t dim = 4096;  // --max_dim's default
  const size_t need = NatsMaxPayloadNeeded(limit, dim);
  const std::string largest =
      absl::StrCat(need, " bytes (a point's ", limit, " bytes of payload and fields at ", dim,
                   "-d)");
  if (MaxEntryBytes() + kNatsHeaderRoom >= need) {
    ZOOM_LOG(INFO, "router: NATS max_payload ", server, " bytes: log entries up to ",
             MaxEntryBytes(), " bytes; every write within zoomd's limits fits (at most ",
             largest, ")");
  } else {
    ZOOM_LOG(WARNING, "router: NATS max_payload ", server, " bytes: log entries up to ",
             MaxEntryBytes(), " bytes, below the ", largest, " a write within zoomd's limits "
             "may take: larger writes are refused (INVALID_ARGUMENT) where a standalone zoomd "
             "takes them; start nats-server with max_payload: 8MB (docs/cluster.md)");
  }
}

size_t WritePublisher::MaxEntryBytes() const {
  return std::min<size_t>(core_->options().max_entry_bytes,
                          static_cast<size_t>(ServerMaxPayload(core_->js())) - kNatsHeaderRoom);
}

absl::Status WritePublisher::TooLarge(const std::string& what, uint32_t dim) const {
  const int64_t server = ServerMaxPayload(core_->js());
  const size_t cap = MaxEntryBytes();
  const bool ours = cap < static_cast<size_t>(server) - kNatsHeaderRoom;
  return absl::InvalidArgumentError(absl::StrCat(
      what, "; a log entry is at most ", cap, " bytes (",
      ours ? "the router's max_entry_bytes"
           : absl::StrCat("the NATS servers' max_payload of ", server, " less ",
                          kNatsHeaderRoom),
      "): make it smaller, or give the NATS servers a max_payload of at least ",
      NatsMaxPayloadNeeded(ServiceLimits().max_payload_bytes, dim),
      " bytes, which every write zoomd takes fits in (8MB: docs/cluster.md)"));
}

absl::StatusOr<Written> WritePublisher::Upsert(const cluster::ShardMap& m,
                                               absl::Span<const PointRef> points,
                                               api::WriteConcern concern,
                                               absl::Time deadline) const {
  const size_t cap = MaxEntryBytes();
  const size_t empty = cluster::UpsertEntryBytes(m.config.dim, 0, 0);
  std::map<uint32_t, std::vector<std::string>> entries;
  std::map<uint32_t, cluster::LogEntry> open;  // a shard's entry being filled
  std::map<uint32_t, size_t> open_bytes;
  for (size_t i = 0; i < points.size(); ++i) {
    const PointRef& p = points[i];
    const uint32_t k = cluster::ShardOf(p.id, m.shards);
    cluster::LogPoint lp;
    lp.id = p.id;
    lp.vector.assign(p.vector, p.vector + m.config.dim);
    lp.payload = std::string(p.payload);
    if (p.fields != nullptr) lp.fields = *p.fields;
    const size_t bytes =
        cluster::UpsertEntryBytes(m.config.dim, 1,
                                  lp.payload.size() + EncodeFields(lp.fields).size()) -
        empty;
    if (empty + bytes > cap) {
      return TooLarge(absl::StrCat("point ", p.id, " (#", i, ") is ", empty + bytes,
                                   " bytes in the cluster's log"),
                      m.config.dim);
    }
    cluster::LogEntry& e = open[k];
    if (!e.points.empty() && open_bytes[k] + bytes > cap) {
      entries[k].push_back(cluster::EncodeLogEntry(e));
      e.points.clear();
    }
    if (e.points.empty()) {
      e.op = cluster::LogOp::kUpsert;
      e.dim = m.config.dim;
      open_bytes[k] = empty;
    }
    open_bytes[k] += bytes;
    e.points.push_back(std::move(lp));
  }
  for (auto& [k, e] : open) {
    if (!e.points.empty()) entries[k].push_back(cluster::EncodeLogEntry(e));
  }
  Written out;
  if (absl::Status st = Publish(m, entries, concern, false, deadline, &out); !st.ok()) return st;
  return out;
}

absl::Status WritePublisher::ToAll(const cluster::ShardMap& m, const cluster::LogEntry& e,
                                   absl::Time deadline) const {
  std::map<uint32_t, std::vector<std::string>> entries;
  const std::string bytes = cluster::EncodeLogEntry(e);
  for (uint32_t k = 0; k < m.shards; ++k) entries[k].push_back(bytes);
  Written out;
  return Publish(m, entries, api::WriteConcern::kLog, false, deadline, &out);
}

absl::Status WritePublisher::Publish(const cluster::ShardMap& m,
                                     const std::map<uint32_t, std::vector<std::string>>& entries,
                                     api::WriteConcern concern, bool counted,
                                     absl::Time deadline, Written* out) const {
  struct Part {
    uint32_t shard;
    const std::vector<std::string>* list;
    std::vector<uint64_t> sequences;  // of its entries, as the log took them
    std::vector<std::string> ids;     // their message ids (what replicas acknowledge)
    std::vector<std::string> acked;   // the replicas that had the last one
    absl::Status status;
  };
  if (concern == api::WriteConcern::kDefault) concern = api::WriteConcern::kMajority;
  out->concern = concern;
  const std::string& cluster_name = core_->cluster();
  std::vector<Part> parts;
  for (const auto& [k, list] : entries) parts.push_back({k, &list, {}, {}, {}, absl::OkStatus()});
  auto run = [&](Part& p) {
    const std::string subject = cluster::ShardSubject(cluster_name, m.collection, p.shard);
    for (const std::string& e : *p.list) {
      absl::Duration wait = absl::ZeroDuration();  // the publish timeout
      if (deadline != absl::InfiniteFuture()) {
        wait = deadline - absl::Now();
        if (wait <= absl::ZeroDuration()) {
          p.status = absl::DeadlineExceededError("the call's deadline passed");
          return;
        }
      }
      std::string id = RandomId();
      absl::StatusOr<cluster::PubAck> ack = core_->js().Publish(subject, e, id, wait);
      if (!ack.ok()) {
        p.status = absl::Status(
            absl::Now() >= deadline ? absl::StatusCode::kDeadlineExceeded : ack.status().code(),
            absl::StrCat("its write log (JetStream stream ",
                         cluster::StreamName(cluster_name, m.collection), ", subject ", subject,
                         ") did not take the write: ", ack.status().message()));
        return;
      }
      p.sequences.push_back(ack->sequence);
      p.ids.push_back(std::move(id));
    }
  };
  if (parts.size() == 1) {
    run(parts[0]);
  } else {
    std::atomic<size_t> next{0};
    std::vector<std::thread> workers;
    for (size_t w = 0; w < std::min<size_t>(parts.size(), 8); ++w) {
      workers.emplace_back([&] {
        for (size_t i; (i = next.fetch_add(1)) < parts.size();) run(parts[i]);
      });
    }
    for (std::thread& t : workers) t.join();
  }
  // The concern: each part's entries durable on enough of its replicas,
  // every entry by its sequence and id (a replica that skipped one, its
  // log having diverged, does not count), the last awaited first (the
  // shards' waits overlap: each waits for the same deadline).
  if (concern != api::WriteConcern::kLog) {
    const absl::Time until = deadline != absl::InfiniteFuture()
                                 ? ConcernWaitUntil(absl::Now(), deadline)
                                 : absl::Now() + core_->options().write_concern_wait;
    for (Part& p : parts) {
      if (!p.status.ok()) continue;
      const std::vector<std::string>& replicas = m.assignment[p.shard];
      const size_t need =
          concern == api::WriteConcern::kAll ? replicas.size() : replicas.size() / 2 + 1;
      p.acked = replicas;
      for (size_t i = p.sequences.size(); i-- > 0 && p.acked.size() >= need;) {
        std::vector<std::string> had =
            core_->acks().Await(m.uid, p.shard, p.sequences[i], p.ids[i], p.acked, need, until);
        p.acked = std::move(had);
      }
      if (p.acked.size() < need) {
        core_->Event(RouterEvent::kConcernUnmet);
        p.status = absl::Status(
            deadline != absl::InfiniteFuture() ? absl::StatusCode::kDeadlineExceeded
                                               : absl::StatusCode::kUnavailable,
            absl::StrCat(
                "its write log took the write (sequence ", p.sequences.back(), ") but ",
                p.acked.empty() ? std::string("none") : absl::StrJoin(p.acked, ", "),
                " of its replicas ",
                absl::StrJoin(replicas, ", ",
                              [&](std::string* out, const std::string& r) {
                                // The last position each reported: says whether
                                // their notices reach this router at all.
                                absl::StrAppend(out, r, " (reported ",
                                                core_->acks().Position(m.uid, p.shard, r),
                                                ")");
                              }),
                " had it on disk within ",
                deadline != absl::InfiniteFuture()
                    ? std::string("the call's deadline")
                    : absl::StrCat(absl::FormatDuration(core_->options().write_concern_wait),
                                   " (no deadline was set)"),
                ", where write concern ", api::WriteConcernName(concern), " needs ", need,
                " (a replica that applies it later keeps it)"));
      }
    }
  }
  std::vector<uint32_t> done;
  const Part* failed = nullptr;
  uint64_t changed = 0;
  bool changed_known = counted && concern != api::WriteConcern::kLog;
  for (const Part& p : parts) {
    if (!p.status.ok()) {
      if (failed == nullptr) failed = &p;
      continue;
    }
    out->tokens.push_back({p.shard, p.sequences.back(), p.acked});
    done.push_back(p.shard);
    for (size_t i = 0; i < p.sequences.size(); ++i) {
      if (!changed_known) break;
      std::optional<uint64_t> n = core_->acks().Changed(m.uid, p.shard, p.sequences[i], p.ids[i]);
      if (n.has_value()) {
        changed += *n;
      } else {
        changed_known = false;
      }
    }
  }
  if (changed_known) out->changed = changed;
  if (failed == nullptr) return absl::OkStatus();
  const bool late = failed->status.code() == absl::StatusCode::kDeadlineExceeded;
  const bool logged = !failed->sequences.empty() &&
                      failed->sequences.size() == failed->list->size();
  return absl::Status(
      late ? absl::StatusCode::kDeadlineExceeded : absl::StatusCode::kUnavailable,
      absl::StrCat(
          "collection ", m.collection, ", shard ", failed->shard, ": ", failed->status.message(),
          ". NATS: ",
          core_->js().connected() ? absl::StrCat("connected to ", core_->js().connected_url())
                                  : std::string("not connected (reconnecting)"),
          late || logged ? "; the write may or may not be kept. "
                         : "; a stream whose NATS servers lost their majority takes no writes. ",
          done.empty() ? std::string("No shard acknowledged its part")
                       : absl::StrCat("Shards ", absl::StrJoin(done, ", "),
                                      " acknowledged their part"),
          "; retrying the same request is safe (writes are idempotent)"));
}

}  // namespace zoom::server::router
