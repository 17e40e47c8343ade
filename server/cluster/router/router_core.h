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
//   acks       the entries replicas made durable (AckBoard), for write
//              concerns, from their notices on the cluster's acks subject
//   fan-out    one call a shard (or a node), with failover to the next
//              replica and (`hedge`) a second replica asked once the first
//              has not answered after the shard's recent p95 latency; the
//              first answer wins, the rest are cancelled. Completion-driven
//              (FanOutAsync: no thread waits while the nodes answer; the
//              state machine and its timer thread are fan_out.h's), or
//              waited for (FanOut)
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

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/api/types.h"
#include "server/cluster/cluster_catalog.h"
#include "server/cluster/jetstream.h"
#include "server/cluster/router/ack_board.h"
#include "server/cluster/router/fan_out.h"
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
  // How long a write whose client set no deadline waits for its write
  // concern (MAJORITY, ALL) before UNAVAILABLE.
  absl::Duration write_concern_wait = absl::Seconds(10);
  // A log entry's size at most, besides the NATS servers' max_payload less
  // room for headers (which decides by default: nats-server's own default
  // is 1 MB, too small for the largest writes; docs/cluster.md gives it 8MB).
  size_t max_entry_bytes = size_t{64} << 20;
  // How long CreateCollection waits for every shard to have a serving
  // replica before it answers (OK either way: nodes converge on their own).
  absl::Duration create_wait = absl::Seconds(10);
  // The credentials of the router's channels to the nodes (null: plaintext).
  std::shared_ptr<grpc::ChannelCredentials> node_credentials;
};

struct RouterHooks {
  std::function<void(RouterEvent)> event;
  std::function<void(int live_nodes)> live_nodes;
};

struct Topology {
  std::map<std::string, cluster::VersionedShardMap> maps;
  std::map<std::string, cluster::NodeInfo> nodes;  // live, by id
};

class RouterCore {
 public:
  // Connects to NATS, opens the catalog, reads the topology once and starts
  // the refresh thread.
  static absl::StatusOr<std::unique_ptr<RouterCore>> Create(RouterOptions options,
                                                            RouterHooks hooks);
  // REQUIRES: every fan-out's `done` ran (a server finishes its calls only
  // from `done`: a stopped gRPC server leaves none running).
  ~RouterCore();

  const RouterOptions& options() const { return opt_; }
  cluster::JetStream& js() const { return *js_; }
  cluster::ClusterCatalog& catalog() const { return *catalog_; }
  const std::string& cluster() const { return opt_.catalog.cluster; }
  const AckBoard& acks() const { return *acks_; }

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

  // The VectorSearch stub of the node at `address` (one channel a node),
  // for the calls a fan-out does not make (a snapshot's download).
  std::shared_ptr<v1::VectorSearch::Stub> NodeStub(const std::string& address) {
    return StubOf<v1::VectorSearch::Stub>(address);
  }

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
  using AsyncFn = router::FanOut::Invoke<Req, Resp, Stub>;

  // Asks one replica of each shard in `calls` (their candidates set), with
  // failover and (`hedge`) hedging, until every shard answered or ran out
  // of replicas, or `deadline` less the merge margin; then `done(status,
  // calls)`, once, after every attempt finished: the status is the first
  // request error (the request's fault: no failover helps), else OK; each
  // call says whether its shard answered. Returns at once: `done` runs on
  // a gRPC callback thread or the fan-out's timer thread (or on this one,
  // before FanOutAsync returns, when no call could be started). The calls
  // (requests included) are owned by the fan-out until `done`. See
  // fan_out.h.
  template <typename Req, typename Resp, typename Stub = v1::VectorSearch::Stub>
  void FanOutAsync(uint64_t uid, std::vector<ShardCall<Req, Resp>> calls, absl::Time deadline,
                   const api::Call& call, bool hedge,
                   std::type_identity_t<AsyncFn<Req, Resp, Stub>> invoke,
                   std::type_identity_t<router::FanOut::Done<Req, Resp>> done) {
    fan_out_->Start<Req, Resp, Stub>(uid, std::move(calls), deadline, call, hedge,
                                     std::move(invoke), std::move(done));
  }
  // FanOutAsync, waiting for `done` on this thread (for callers that have a
  // thread to spend): the calls back in `calls`, the status returned.
  template <typename Req, typename Resp, typename Stub = v1::VectorSearch::Stub>
  absl::Status FanOut(uint64_t uid, std::vector<ShardCall<Req, Resp>>& calls,
                      absl::Time deadline, const api::Call& call, bool hedge,
                      const std::type_identity_t<AsyncFn<Req, Resp, Stub>>& invoke) {
    return fan_out_->Run<Req, Resp, Stub>(uid, calls, deadline, call, hedge, invoke);
  }

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
  class Env;  // the fan-out's view of the core (FanOutEnv)
  // Node bookkeeping of one finished attempt (the fan-out's callbacks).
  void Started(const std::string& node);
  void Finished(const std::string& node, uint64_t uid, uint32_t shard, double us, bool ok,
                bool counted_latency, bool suspect);
  absl::Duration HedgeDelay(uint64_t uid, uint32_t shard);

  RouterOptions opt_;
  RouterHooks hooks_;
  std::unique_ptr<cluster::JetStream> js_;
  std::unique_ptr<cluster::ClusterCatalog> catalog_;
  std::unique_ptr<AckBoard> acks_ = std::make_unique<AckBoard>();
  std::unique_ptr<cluster::Subscription> acks_sub_;  // records into acks_

  mutable absl::Mutex topo_mu_;
  std::shared_ptr<const Topology> topo_ ABSL_GUARDED_BY(topo_mu_);
  absl::Time last_nodes_seen_ ABSL_GUARDED_BY(topo_mu_) = absl::InfinitePast();
  bool stopping_ ABSL_GUARDED_BY(topo_mu_) = false;
  // Every collection a topology read has held (MapOf: lost, or dropped).
  absl::flat_hash_set<std::string> seen_ ABSL_GUARDED_BY(topo_mu_);
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
  // Last: destroyed first (its timer thread joined) while the rest lives.
  std::unique_ptr<Env> env_;
  std::unique_ptr<router::FanOut> fan_out_;
};

}  // namespace zoom::server::router

#endif  // ZOOM_SERVER_CLUSTER_ROUTER_ROUTER_CORE_H_
