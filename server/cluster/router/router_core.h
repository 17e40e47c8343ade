// File: server/cluster/router/router_core.h
//
// RouterCore: what every part of a zoomd router shares (zoomd
// --role=router; any number of them, stateless). It holds no data:
//
//   topology   the shard maps and live nodes, read from the cluster's
//              JetStream key-value buckets (ClusterCatalog) every `refresh`,
//              again on a miss (MapOf) and soon after a node answered
//              NOT_FOUND (MarkStale)
//   replicas   which replica of a shard to ask first (Candidates): serving
//              ones only for reads (applied close to the head); not
//              suspected after a recent failure; for a session read those
//              that applied its token; then the fewest outstanding
//              requests, then the lowest recent latency
//   channels   one gRPC channel a node, the stubs of both services over it
//   FanOut     one call a shard (or a node), with failover to the next
//              replica and (`hedge`) a second replica asked once the first
//              has not answered after the shard's recent p95 latency; the
//              first answer wins, the rest are cancelled
//
// The API is served by ClusterBackend (cluster_backend.h) through the one
// adapter; the decoder's models by the router's Decoder service.
//
// Thread safety: every method may be called from any thread.
#ifndef ZOOM_SERVER_CLUSTER_ROUTER_ROUTER_CORE_H_
#define ZOOM_SERVER_CLUSTER_ROUTER_ROUTER_CORE_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/api/types.h"
#include "server/cluster/cluster_catalog.h"
#include "server/cluster/jetstream.h"
#include "zoom/v1/decoder.grpc.pb.h"
#include "zoom/v1/zoom.grpc.pb.h"

namespace zoom::server::router {

struct RouterOptions {
  cluster::ClusterCatalogOptions catalog;
  cluster::JetStreamOptions nats;
  absl::Duration refresh = absl::Milliseconds(500);
  // A read whose client set no deadline gets this one.
  absl::Duration default_deadline = absl::Seconds(10);
  // Kept from the client's deadline for the merge and the reply.
  absl::Duration merge_margin = absl::Milliseconds(3);
  // A hedge waits the shard's recent p95 latency, at least this; before
  // 16 latencies are known, default_hedge_delay.
  absl::Duration min_hedge_delay = absl::Milliseconds(1);
  absl::Duration default_hedge_delay = absl::Milliseconds(20);
  bool hedge = true;
  // A replica that failed is asked last for this long.
  absl::Duration suspect_for = absl::Seconds(2);
  // A log entry's size at most (NATS's max payload is 1 MiB by default).
  size_t max_entry_bytes = 1000000;
  // How long CreateCollection waits for every shard to have a serving
  // replica before it answers (OK either way: nodes converge on their own).
  absl::Duration create_wait = absl::Seconds(10);
  // The credentials of the router's channels to the nodes (null: plaintext).
  std::shared_ptr<grpc::ChannelCredentials> node_credentials;
};

// What a router counts (the adapter maps them to its metrics).
enum class RouterEvent { kHedge, kFailover, kPartial, kUnavailable, kMapRefresh };
struct RouterHooks {
  std::function<void(RouterEvent)> event;
  std::function<void(int live_nodes)> live_nodes;
};

struct Topology {
  std::map<std::string, cluster::VersionedShardMap> maps;
  std::map<std::string, cluster::NodeInfo> nodes;  // live, by id
};

// A replica (or a node) a call may go to.
struct Candidate {
  std::string node, address;
  uint64_t applied = 0;
};

// One call to one replica.
template <typename Resp>
struct Attempt {
  grpc::ClientContext ctx;
  Resp resp;
  std::string node;
  absl::Time start;
  bool finished = false;
};

// One shard's part of a fan-out: the request, the replicas to try in
// order, and (answered) the answer, else the last error.
template <typename Req, typename Resp>
struct ShardCall {
  uint32_t shard = 0;
  Req req;
  std::vector<Candidate> candidates;
  size_t next = 0;
  int inflight = 0;
  bool answered = false;
  bool need_next = false;
  bool hedged = false;
  absl::Time hedge_at = absl::InfiniteFuture();
  Resp answer;
  std::string last_error;
  grpc::StatusCode last_code = grpc::StatusCode::UNAVAILABLE;
  std::vector<std::unique_ptr<Attempt<Resp>>> attempts;
  bool settled() const { return answered || (inflight == 0 && next >= candidates.size()); }
};

class RouterCore {
 public:
  // Connects to NATS, opens the catalog, reads the topology once and starts
  // the refresh thread.
  static absl::StatusOr<std::unique_ptr<RouterCore>> Create(RouterOptions options,
                                                            RouterHooks hooks);
  ~RouterCore();

  const RouterOptions& options() const { return opt_; }
  cluster::JetStream& js() const { return *js_; }
  cluster::ClusterCatalog& catalog() const { return *catalog_; }
  const std::string& cluster() const { return opt_.catalog.cluster; }

  // Reads the shard maps and the live nodes now.
  absl::Status Refresh();
  std::shared_ptr<const Topology> Topo() const;
  // Re-read soon (a node answered NOT_FOUND: its map may be newer).
  void MarkStale() { stale_ = true; }
  // The map of `collection`, read again once when this router does not
  // know it (created through another router a moment ago); NotFound
  // "collection 'x' does not exist" as a standalone says it.
  absl::StatusOr<cluster::VersionedShardMap> MapOf(const std::string& collection);

  // The replicas of shard k that may answer, best first (see the file
  // comment). `serving_only`: only those close to the head (reads); else
  // every live one (admin). `session`: those that applied it first.
  std::vector<Candidate> Candidates(const Topology& t, const cluster::ShardMap& m, uint32_t k,
                                    bool serving_only, uint64_t session);
  // The nodes serving decoder model `model`, in turn (each call starts one
  // further), a node that failed recently last.
  std::vector<Candidate> ModelCandidates(const Topology& t, const std::string& model);

  void Event(RouterEvent e) const {
    if (hooks_.event) hooks_.event(e);
  }
  // A read's deadline: the client's, or default_deadline from now.
  absl::Time ReadDeadline(const api::Call& call) const {
    return call.deadline == absl::InfiniteFuture() ? absl::Now() + opt_.default_deadline
                                                   : call.deadline;
  }
  // An admin call's that waits for the nodes' work (a build, a compaction, a
  // field index built with `wait`): the client's, or an hour from now (as a
  // standalone, which has none, would wait for it).
  absl::Time AdminDeadline(const api::Call& call) const {
    return call.deadline == absl::InfiniteFuture() ? absl::Now() + absl::Hours(1)
                                                   : call.deadline;
  }

  template <typename Req, typename Resp, typename Stub = v1::VectorSearch::Stub>
  using AsyncFn = std::function<void(Stub*, grpc::ClientContext*, const Req*, Resp*,
                                     std::function<void(grpc::Status)>)>;

  // Asks one replica of each shard in `calls` (their candidates set), with
  // failover and (`hedge`) hedging, until every shard answered or ran out
  // of replicas, or `deadline` less the merge margin. Returns the first
  // request error (the request's fault: no failover helps), else OK; each
  // call says whether its shard answered.
  template <typename Req, typename Resp, typename Stub = v1::VectorSearch::Stub>
  absl::Status FanOut(uint64_t uid, std::vector<ShardCall<Req, Resp>>& calls,
                      absl::Time deadline, const api::Call& call, bool hedge,
                      const std::type_identity_t<AsyncFn<Req, Resp, Stub>>& invoke);

 private:
  struct NodeStats;
  struct ShardLatency;

  explicit RouterCore(RouterOptions options, RouterHooks hooks);
  void RefreshLoop();
  std::shared_ptr<grpc::Channel> ChannelForLocked(const std::string& address)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(stubs_mu_);
  template <typename Stub>
  std::shared_ptr<Stub> StubOf(const std::string& address);
  std::shared_ptr<NodeStats> StatsOf(const std::string& node);
  std::shared_ptr<ShardLatency> LatencyOf(uint64_t uid, uint32_t shard);
  // Node bookkeeping of one finished attempt (FanOut's callbacks).
  void Started(const std::string& node);
  void Finished(const std::string& node, uint64_t uid, uint32_t shard, double us, bool ok,
                bool counted_latency, bool suspect);
  absl::Duration HedgeDelay(uint64_t uid, uint32_t shard);

  RouterOptions opt_;
  RouterHooks hooks_;
  std::unique_ptr<cluster::JetStream> js_;
  std::unique_ptr<cluster::ClusterCatalog> catalog_;

  mutable absl::Mutex topo_mu_;
  std::shared_ptr<const Topology> topo_ ABSL_GUARDED_BY(topo_mu_);
  absl::Time last_nodes_seen_ ABSL_GUARDED_BY(topo_mu_) = absl::InfinitePast();
  bool stopping_ ABSL_GUARDED_BY(topo_mu_) = false;
  std::atomic<bool> stale_{false};
  std::thread refresher_;

  absl::Mutex stubs_mu_;
  std::map<std::string, std::shared_ptr<v1::VectorSearch::Stub>> stubs_
      ABSL_GUARDED_BY(stubs_mu_);
  std::map<std::string, std::shared_ptr<v1::Decoder::Stub>> decoder_stubs_
      ABSL_GUARDED_BY(stubs_mu_);
  std::map<std::string, std::shared_ptr<grpc::Channel>> channels_ ABSL_GUARDED_BY(stubs_mu_);
  std::atomic<uint64_t> model_turn_{0};  // TopK's round-robin
  absl::Mutex stats_mu_;
  std::map<std::string, std::shared_ptr<NodeStats>> node_stats_ ABSL_GUARDED_BY(stats_mu_);
  std::map<std::pair<uint64_t, uint32_t>, std::shared_ptr<ShardLatency>> latency_
      ABSL_GUARDED_BY(stats_mu_);
};

// Errors that are the request's, not the replica's: every replica would
// answer the same, so they end the call instead of a failover.
inline bool RequestError(grpc::StatusCode c) {
  return c == grpc::StatusCode::INVALID_ARGUMENT || c == grpc::StatusCode::OUT_OF_RANGE ||
         c == grpc::StatusCode::PERMISSION_DENIED || c == grpc::StatusCode::UNAUTHENTICATED;
}

// ---- FanOut -------------------------------------------------------------------

template <typename Req, typename Resp, typename Stub>
absl::Status RouterCore::FanOut(uint64_t uid, std::vector<ShardCall<Req, Resp>>& calls,
                                absl::Time deadline, const api::Call& call, bool hedge,
                                const std::type_identity_t<AsyncFn<Req, Resp, Stub>>& invoke) {
  const absl::Time shard_deadline = deadline - opt_.merge_margin;
  absl::Mutex mu;
  uint64_t events = 0;
  absl::Status request_error;
  struct Start {
    ShardCall<Req, Resp>* sc;
    Attempt<Resp>* at;
    std::string address;
  };
  // Under mu: the next candidate of `sc` as an attempt to start.
  auto prepare = [&](ShardCall<Req, Resp>& sc, std::vector<Start>* out) {
    const Candidate& c = sc.candidates[sc.next++];
    auto at = std::make_unique<Attempt<Resp>>();
    at->node = c.node;
    ++sc.inflight;
    out->push_back({&sc, at.get(), c.address});
    sc.attempts.push_back(std::move(at));
  };
  auto start = [&](std::vector<Start>& todo) {
    for (Start& s : todo) {
      Attempt<Resp>* at = s.at;
      ShardCall<Req, Resp>* sc = s.sc;
      at->ctx.set_deadline(absl::ToChronoTime(shard_deadline));
      for (const auto& [key, value] : call.credentials) at->ctx.AddMetadata(key, value);
      at->start = absl::Now();
      Started(at->node);
      invoke(StubOf<Stub>(s.address).get(), &at->ctx, &sc->req, &at->resp,
             [&, at, sc, uid](grpc::Status st) {
               const double us = absl::ToDoubleMicroseconds(absl::Now() - at->start);
               absl::MutexLock l(&mu);
               at->finished = true;
               --sc->inflight;
               ++events;
               if (st.ok()) {
                 Finished(at->node, uid, sc->shard, us, true, true, false);
                 if (!sc->answered) {
                   sc->answered = true;
                   sc->answer = std::move(at->resp);
                 }
                 return;
               }
               if (sc->answered) {  // a hedge's loser: slow, counted so
                 Finished(at->node, uid, sc->shard, us, true, false, false);
                 return;
               }
               const bool cancelled = st.error_code() == grpc::StatusCode::CANCELLED;
               Finished(at->node, uid, sc->shard, us, false, false,
                        !cancelled && !RequestError(st.error_code()));
               if (RequestError(st.error_code())) {
                 if (request_error.ok()) {
                   request_error = absl::Status(static_cast<absl::StatusCode>(st.error_code()),
                                                st.error_message());
                 }
                 return;
               }
               sc->last_error =
                   absl::StrCat(at->node, ": ",
                                absl::StatusCodeToString(
                                    static_cast<absl::StatusCode>(st.error_code())),
                                " ", st.error_message());
               sc->last_code = st.error_code();
               if (st.error_code() == grpc::StatusCode::NOT_FOUND) MarkStale();
               if (sc->inflight == 0) sc->need_next = true;
             });
    }
  };

  std::vector<Start> todo;
  {
    absl::MutexLock l(&mu);
    for (ShardCall<Req, Resp>& sc : calls) {
      if (sc.candidates.empty()) {
        if (sc.last_error.empty()) sc.last_error = "no serving replica";
        continue;
      }
      sc.hedge_at = absl::Now() + HedgeDelay(uid, sc.shard);
      prepare(sc, &todo);
    }
  }
  start(todo);
  for (;;) {
    todo.clear();
    {
      absl::MutexLock l(&mu);
      uint64_t seen = events;
      for (;;) {
        const absl::Time now = absl::Now();
        if (!request_error.ok() || now >= shard_deadline) break;
        bool all = true;
        for (auto& sc : calls) all = all && sc.settled();
        if (all) break;
        absl::Time wake = shard_deadline;
        for (auto& sc : calls) {
          if (sc.answered) continue;
          if (sc.need_next) {
            sc.need_next = false;
            if (sc.next < sc.candidates.size()) {
              Event(RouterEvent::kFailover);
              prepare(sc, &todo);
            }
          } else if (hedge && !sc.hedged && sc.inflight > 0 && sc.next < sc.candidates.size()) {
            if (now >= sc.hedge_at) {
              sc.hedged = true;
              Event(RouterEvent::kHedge);
              prepare(sc, &todo);
            } else {
              wake = std::min(wake, sc.hedge_at);
            }
          }
        }
        if (!todo.empty()) break;
        auto changed = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu) { return events != seen; };
        mu.AwaitWithDeadline(absl::Condition(&changed), wake);
        seen = events;
      }
    }
    if (todo.empty()) break;
    start(todo);
  }
  // The calls still out are cancelled; their callbacks come at once.
  std::vector<Attempt<Resp>*> out;
  {
    absl::MutexLock l(&mu);
    for (auto& sc : calls) {
      for (auto& at : sc.attempts) {
        if (!at->finished) out.push_back(at.get());
      }
    }
  }
  for (Attempt<Resp>* at : out) at->ctx.TryCancel();
  {
    absl::MutexLock l(&mu);
    auto done = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu) {
      for (auto& sc : calls) {
        if (sc.inflight > 0) return false;
      }
      return true;
    };
    mu.Await(absl::Condition(&done));
  }
  return request_error;
}

}  // namespace zoom::server::router

#endif  // ZOOM_SERVER_CLUSTER_ROUTER_ROUTER_CORE_H_
