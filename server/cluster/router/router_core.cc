#include "server/cluster/router/router_core.h"

#include <algorithm>
#include <random>

#include "common/logging.h"
#include "common/status_macros.h"
#include "server/engine/collection_config.h"

namespace zoom::server::router {

using cluster::ReplicaState;
using cluster::ShardMap;
using cluster::VersionedShardMap;

struct RouterCore::NodeStats {
  std::atomic<int> outstanding{0};
  absl::Mutex mu;
  double ewma_us ABSL_GUARDED_BY(mu) = 0;
  absl::Time suspect_until ABSL_GUARDED_BY(mu) = absl::InfinitePast();
};

// A shard's recent latencies (µs), for its hedge delay.
struct RouterCore::ShardLatency {
  absl::Mutex mu;
  std::vector<double> ring ABSL_GUARDED_BY(mu);
  size_t next ABSL_GUARDED_BY(mu) = 0;
  void Add(double us) {
    absl::MutexLock l(&mu);
    if (ring.size() < 64) {
      ring.push_back(us);
    } else {
      ring[next] = us;
      next = (next + 1) % ring.size();
    }
  }
  // The p95, or `fallback` before 16 are known.
  absl::Duration P95(absl::Duration fallback) {
    std::vector<double> v;
    {
      absl::MutexLock l(&mu);
      if (ring.size() < 16) return fallback;
      v = ring;
    }
    const size_t i = v.size() * 95 / 100;
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(i), v.end());
    return absl::Microseconds(v[i]);
  }
};

absl::StatusOr<std::unique_ptr<RouterCore>> RouterCore::Create(RouterOptions options,
                                                               RouterHooks hooks) {
  std::unique_ptr<RouterCore> core(new RouterCore(std::move(options), std::move(hooks)));
  cluster::JetStreamOptions nats = core->opt_.nats;
  nats.name = "zoomd-router";
  ZOOM_ASSIGN_OR_RETURN(core->js_, cluster::JetStream::Connect(nats));
  ZOOM_ASSIGN_OR_RETURN(core->catalog_,
                        cluster::ClusterCatalog::Open(core->js_.get(), core->opt_.catalog));
  // The replicas' durable positions (write concerns), before any write.
  ZOOM_ASSIGN_OR_RETURN(
      core->acks_sub_,
      core->js_->Subscribe(cluster::AcksSubject(core->opt_.catalog.cluster),
                           [core = core.get()](std::string_view data) {
                             absl::StatusOr<cluster::ReplicaAck> a =
                                 cluster::ReplicaAck::Decode(data);
                             if (!a.ok()) return;  // a newer node's: ignored
                             // One handler thread: the count moves only here.
                             const uint64_t before = core->acks_->divergences();
                             core->acks_->Record(*a);
                             if (core->acks_->divergences() > before) {
                               core->Event(RouterEvent::kLogDivergence);
                             }
                           }));
  ZOOM_RETURN_IF_ERROR(core->Refresh());
  RouterCore* p = core.get();
  core->refresher_ = std::thread([p] { p->RefreshLoop(); });
  return core;
}

absl::Status RouterCore::Refresh() {
  ZOOM_ASSIGN_OR_RETURN(std::vector<VersionedShardMap> maps, catalog_->ListMaps());
  ZOOM_ASSIGN_OR_RETURN(std::vector<cluster::NodeInfo> nodes, catalog_->LiveNodes());
  auto t = std::make_shared<Topology>();
  for (VersionedShardMap& m : maps) t->maps[m.map.collection] = std::move(m);
  for (cluster::NodeInfo& n : nodes) t->nodes[n.node] = std::move(n);
  absl::MutexLock l(&topo_mu_);
  for (const auto& [name, m] : t->maps) seen_.insert(name);
  const absl::Time now = absl::Now();
  if (!t->nodes.empty()) {
    last_nodes_seen_ = now;
  } else if (topo_ != nullptr && !topo_->nodes.empty() &&
             now - last_nodes_seen_ < opt_.catalog.node_ttl) {
    // Every node gone at once is the bucket's doing (its records expired
    // as its leader came back, before the nodes' next heartbeats), not
    // the nodes': keep them for up to a max age.
    t->nodes = topo_->nodes;
  }
  if (hooks_.live_nodes) hooks_.live_nodes(static_cast<int>(t->nodes.size()));
  topo_ = std::move(t);
  return absl::OkStatus();
}

std::shared_ptr<const Topology> RouterCore::Topo() const {
  absl::MutexLock l(&topo_mu_);
  return topo_;
}

void RouterCore::RefreshLoop() {
  for (;;) {
    {
      absl::MutexLock l(&topo_mu_);
      auto stop = [this]() ABSL_SHARED_LOCKS_REQUIRED(topo_mu_) { return stopping_; };
      topo_mu_.AwaitWithTimeout(absl::Condition(&stop), opt_.refresh);
      if (stopping_) return;
    }
    stale_ = false;
    if (absl::Status st = Refresh(); !st.ok()) {
      ZOOM_LOG(WARNING, "router: cannot read the cluster's topology: ", st.message());
    }
  }
}

absl::StatusOr<VersionedShardMap> RouterCore::MapOf(const std::string& collection) {
  ZOOM_RETURN_IF_ERROR(ValidateCollectionName(collection));
  auto t = Topo();
  auto it = t->maps.find(collection);
  if (it != t->maps.end()) return it->second;
  Event(RouterEvent::kMapRefresh);
  ZOOM_RETURN_IF_ERROR(Refresh());
  t = Topo();
  it = t->maps.find(collection);
  if (it != t->maps.end()) return it->second;
  // Put back since the listing (a node restoring a map NATS lost): the
  // record below would then say it exists, not that it was dropped.
  absl::StatusOr<std::optional<VersionedShardMap>> direct = catalog_->GetMap(collection);
  if (direct.ok() && direct->has_value()) return **direct;
  // A collection this router served, or that a live node still holds a
  // replica of (a router started since does not know it), whose map is
  // gone with no drop recorded (not even the delete marker a drop leaves)
  // was lost by NATS, not dropped: its nodes put it back from their
  // copies. Not NOT_FOUND, on which a client might create it again (the
  // fault runner: after a power failure of every nats-server a restarted
  // router answered NOT_FOUND for seconds).
  bool seen = false;
  {
    absl::MutexLock l(&topo_mu_);
    seen = seen_.count(collection) != 0;
  }
  for (const auto& [id, node] : t->nodes) {
    for (const cluster::HostedShard& h : node.hosted) seen = seen || h.collection == collection;
  }
  if (seen) {
    absl::StatusOr<bool> recorded = catalog_->HasRecordOf(collection);
    if (!recorded.ok() || !*recorded) {
      return absl::UnavailableError(absl::StrCat(
          "collection '", collection, "' is missing from the cluster's catalog with no drop "
          "recorded (NATS lost it; its nodes put it back): retry"));
    }
  }
  return absl::NotFoundError(absl::StrCat("collection '", collection, "' does not exist"));
}

std::shared_ptr<grpc::Channel> RouterCore::ChannelForLocked(const std::string& address) {
  auto it = channels_.find(address);
  if (it != channels_.end()) return it->second;
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetMaxSendMessageSize(64 << 20);
  // A dead node is noticed between requests too.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  auto creds = opt_.node_credentials ? opt_.node_credentials : grpc::InsecureChannelCredentials();
  auto channel = grpc::CreateCustomChannel(address, creds, args);
  channels_[address] = channel;
  return channel;
}

template <typename Stub>
std::shared_ptr<Stub> RouterCore::StubOf(const std::string& address) {
  absl::MutexLock l(&stubs_mu_);
  if constexpr (std::is_same_v<Stub, v1::Decoder::Stub>) {
    auto& s = decoder_stubs_[address];
    if (s == nullptr) s = v1::Decoder::NewStub(ChannelForLocked(address));
    return s;
  } else {
    auto& s = stubs_[address];
    if (s == nullptr) s = v1::VectorSearch::NewStub(ChannelForLocked(address));
    return s;
  }
}
template std::shared_ptr<v1::VectorSearch::Stub> RouterCore::StubOf(const std::string&);
template std::shared_ptr<v1::Decoder::Stub> RouterCore::StubOf(const std::string&);

class RouterCore::Env final : public FanOutEnv {
 public:
  explicit Env(RouterCore* core) : core_(core) {}
  std::shared_ptr<v1::VectorSearch::Stub> SearchStub(const std::string& address) override {
    return core_->StubOf<v1::VectorSearch::Stub>(address);
  }
  std::shared_ptr<v1::Decoder::Stub> DecoderStub(const std::string& address) override {
    return core_->StubOf<v1::Decoder::Stub>(address);
  }
  void Started(const std::string& node) override { core_->Started(node); }
  void Finished(const std::string& node, uint64_t uid, uint32_t shard, double us, bool ok,
                bool counted_latency, bool suspect) override {
    core_->Finished(node, uid, shard, us, ok, counted_latency, suspect);
  }
  absl::Duration HedgeDelay(uint64_t uid, uint32_t shard) override {
    return core_->HedgeDelay(uid, shard);
  }
  void Event(RouterEvent e) override { core_->Event(e); }
  void MarkStale() override { core_->MarkStale(); }

 private:
  RouterCore* core_;
};

RouterCore::RouterCore(RouterOptions options, RouterHooks hooks)
    : opt_(std::move(options)),
      hooks_(std::move(hooks)),
      env_(std::make_unique<Env>(this)),
      fan_out_(std::make_unique<router::FanOut>(env_.get(), opt_.merge_margin)) {}

RouterCore::~RouterCore() {
  {
    absl::MutexLock l(&topo_mu_);
    stopping_ = true;
  }
  if (refresher_.joinable()) refresher_.join();
  acks_sub_.reset();  // no report is recorded after this
}

std::shared_ptr<RouterCore::NodeStats> RouterCore::StatsOf(const std::string& node) {
  absl::MutexLock l(&stats_mu_);
  auto& s = node_stats_[node];
  if (s == nullptr) s = std::make_shared<NodeStats>();
  return s;
}

std::shared_ptr<RouterCore::ShardLatency> RouterCore::LatencyOf(uint64_t uid, uint32_t shard) {
  absl::MutexLock l(&stats_mu_);
  auto& s = latency_[{uid, shard}];
  if (s == nullptr) s = std::make_shared<ShardLatency>();
  return s;
}

void RouterCore::Started(const std::string& node) { StatsOf(node)->outstanding++; }

void RouterCore::Finished(const std::string& node, uint64_t uid, uint32_t shard, double us,
                          bool ok, bool counted_latency, bool suspect) {
  auto stats = StatsOf(node);
  stats->outstanding--;
  {
    absl::MutexLock l(&stats->mu);
    if (ok) stats->ewma_us = stats->ewma_us == 0 ? us : 0.8 * stats->ewma_us + 0.2 * us;
    if (suspect) stats->suspect_until = absl::Now() + opt_.suspect_for;
  }
  if (counted_latency) LatencyOf(uid, shard)->Add(us);
}

absl::Duration RouterCore::HedgeDelay(uint64_t uid, uint32_t shard) {
  return std::max(opt_.min_hedge_delay, LatencyOf(uid, shard)->P95(opt_.default_hedge_delay));
}

std::vector<Candidate> RouterCore::Candidates(const Topology& t, const ShardMap& m, uint32_t k,
                                              bool serving_only, uint64_t session) {
  struct Ranked {
    Candidate c;
    bool suspect, behind;
    int outstanding;
    double ewma;
  };
  std::vector<Ranked> ranked;
  const absl::Time now = absl::Now();
  for (const std::string& node : m.assignment[k]) {
    auto it = t.nodes.find(node);
    if (it == t.nodes.end() || it->second.address.empty()) continue;
    const cluster::HostedShard* h = it->second.Find(m.uid, k);
    if (serving_only && (h == nullptr || h->state != ReplicaState::kServing)) continue;
    auto stats = StatsOf(node);
    Ranked r;
    r.c = {node, it->second.address, h != nullptr ? h->applied : 0};
    r.behind = session > 0 && r.c.applied < session;
    r.outstanding = stats->outstanding.load();
    {
      absl::MutexLock l(&stats->mu);
      r.suspect = stats->suspect_until > now;
      r.ewma = stats->ewma_us;
    }
    ranked.push_back(std::move(r));
  }
  std::stable_sort(ranked.begin(), ranked.end(), [](const Ranked& a, const Ranked& b) {
    if (a.suspect != b.suspect) return !a.suspect;
    if (a.behind != b.behind) return !a.behind;
    if (a.outstanding != b.outstanding) return a.outstanding < b.outstanding;
    return a.ewma < b.ewma;
  });
  // One call in 16 tries the second best first (when it is not suspect
  // either): a replica that was slow once is measured again, not left with
  // its old latency forever; a hedge covers it if it is still slow.
  static thread_local std::mt19937 rng(std::random_device{}());
  if (ranked.size() >= 2 && !ranked[1].suspect && !ranked[1].behind && rng() % 16 == 0) {
    std::swap(ranked[0], ranked[1]);
  }
  std::vector<Candidate> out;
  for (Ranked& r : ranked) out.push_back(std::move(r.c));
  return out;
}

std::vector<Candidate> RouterCore::ModelCandidates(const Topology& t, const std::string& model) {
  std::vector<Candidate> all;
  for (const auto& [id, n] : t.nodes) {
    if (!n.address.empty() && n.Serves(model)) all.push_back({id, n.address, 0});
  }
  if (all.size() < 2) return all;
  std::rotate(all.begin(),
              all.begin() + static_cast<std::ptrdiff_t>(model_turn_.fetch_add(1) % all.size()),
              all.end());
  const absl::Time now = absl::Now();
  std::stable_partition(all.begin(), all.end(), [&](const Candidate& c) {
    auto s = StatsOf(c.node);
    absl::MutexLock l(&s->mu);
    return s->suspect_until <= now;
  });
  return all;
}

}  // namespace zoom::server::router
