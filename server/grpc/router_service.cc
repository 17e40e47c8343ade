#include "server/grpc/router_service.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <functional>
#include <optional>
#include <random>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "server/cluster/cluster_map.h"
#include "server/cluster/log_entry.h"
#include "server/engine/collection.h"
#include "server/engine/database.h"
#include "server/grpc/import_reactor.h"
#include "server/api/convert.h"
#include "server/grpc/unary_call.h"

namespace zoom::server {
namespace {

using cluster::ReplicaState;
using cluster::ShardMap;
using cluster::VersionedShardMap;

// Errors that are the request's, not the replica's: every replica would
// answer the same, so they end the call instead of a failover.
bool RequestError(grpc::StatusCode c) {
  return c == grpc::StatusCode::INVALID_ARGUMENT || c == grpc::StatusCode::OUT_OF_RANGE ||
         c == grpc::StatusCode::PERMISSION_DENIED || c == grpc::StatusCode::UNAUTHENTICATED;
}

std::string CodeName(grpc::StatusCode c) {
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(c));
}

struct Topology {
  std::map<std::string, VersionedShardMap> maps;
  std::map<std::string, cluster::NodeInfo> nodes;  // live, by id
};

struct NodeStats {
  std::atomic<int> outstanding{0};
  absl::Mutex mu;
  double ewma_us ABSL_GUARDED_BY(mu) = 0;
  absl::Time suspect_until ABSL_GUARDED_BY(mu) = absl::InfinitePast();
  void Observe(double us) {
    absl::MutexLock l(&mu);
    ewma_us = ewma_us == 0 ? us : 0.8 * ewma_us + 0.2 * us;
  }
  void Suspect(absl::Duration d) {
    absl::MutexLock l(&mu);
    suspect_until = absl::Now() + d;
  }
};

// A shard's recent latencies (µs), for its hedge delay.
struct ShardLatency {
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
    std::nth_element(v.begin(), v.begin() + i, v.end());
    return absl::Microseconds(v[i]);
  }
};

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

// One shard's part of a fan-out.
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

std::string RandomId() {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  return absl::StrCat(absl::Hex(rng(), absl::kZeroPad16), absl::Hex(rng(), absl::kZeroPad16));
}

}  // namespace

struct RouterService::Impl {
  RouterOptions opt;
  Metrics* metrics = nullptr;
  WorkerPool* pool = nullptr;
  const Authenticator* auth = nullptr;
  std::unique_ptr<cluster::JetStream> js;
  std::unique_ptr<cluster::ClusterCatalog> catalog;
  int64_t started_unix_ms = absl::ToUnixMillis(absl::Now());

  absl::Mutex topo_mu;
  std::shared_ptr<const Topology> topo ABSL_GUARDED_BY(topo_mu);
  absl::Time last_refresh ABSL_GUARDED_BY(topo_mu) = absl::InfinitePast();
  absl::Time last_nodes_seen ABSL_GUARDED_BY(topo_mu) = absl::InfinitePast();
  bool stopping ABSL_GUARDED_BY(topo_mu) = false;
  std::atomic<bool> stale{false};  // a node answered NOT_FOUND: re-read soon
  std::thread refresher;

  absl::Mutex stubs_mu;
  std::map<std::string, std::shared_ptr<v1::VectorSearch::Stub>> stubs ABSL_GUARDED_BY(stubs_mu);
  std::map<std::string, std::shared_ptr<v1::Decoder::Stub>> decoder_stubs
      ABSL_GUARDED_BY(stubs_mu);
  std::map<std::string, std::shared_ptr<grpc::Channel>> channels ABSL_GUARDED_BY(stubs_mu);
  std::atomic<uint64_t> model_turn{0};  // TopK's round-robin
  absl::Mutex stats_mu;
  std::map<std::string, std::shared_ptr<NodeStats>> node_stats ABSL_GUARDED_BY(stats_mu);
  std::map<std::pair<uint64_t, uint32_t>, std::shared_ptr<ShardLatency>> latency
      ABSL_GUARDED_BY(stats_mu);

  void Event(Metrics::RouterEvent e) const {
    if (metrics != nullptr) metrics->RecordRouterEvent(e);
  }
  void Record(const char* rpc, const absl::Status& st, double seconds) const {
    if (metrics != nullptr) metrics->RecordRpc(rpc, st.code(), seconds);
  }

  absl::Status Refresh() {
    ZOOM_ASSIGN_OR_RETURN(std::vector<VersionedShardMap> maps, catalog->ListMaps());
    ZOOM_ASSIGN_OR_RETURN(std::vector<cluster::NodeInfo> nodes, catalog->LiveNodes());
    auto t = std::make_shared<Topology>();
    for (VersionedShardMap& m : maps) t->maps[m.map.collection] = std::move(m);
    for (cluster::NodeInfo& n : nodes) t->nodes[n.node] = std::move(n);
    absl::MutexLock l(&topo_mu);
    const absl::Time now = absl::Now();
    if (!t->nodes.empty()) {
      last_nodes_seen = now;
    } else if (topo != nullptr && !topo->nodes.empty() &&
               now - last_nodes_seen < opt.catalog.node_ttl) {
      // Every node gone at once is the bucket's doing (its records expired
      // as its leader came back, before the nodes' next heartbeats), not
      // the nodes': keep them for up to a max age.
      t->nodes = topo->nodes;
    }
    if (metrics != nullptr) metrics->SetRouterLiveNodes(static_cast<int>(t->nodes.size()));
    topo = std::move(t);
    last_refresh = now;
    return absl::OkStatus();
  }
  std::shared_ptr<const Topology> Topo() {
    absl::MutexLock l(&topo_mu);
    return topo;
  }
  void RefreshLoop() {
    for (;;) {
      {
        absl::MutexLock l(&topo_mu);
        auto stop = [this]() ABSL_SHARED_LOCKS_REQUIRED(topo_mu) { return stopping; };
        topo_mu.AwaitWithTimeout(absl::Condition(&stop), opt.refresh);
        if (stopping) return;
      }
      stale = false;
      if (absl::Status st = Refresh(); !st.ok()) {
        ZOOM_LOG(WARNING, "router: cannot read the cluster's topology: ", st.message());
      }
    }
  }

  // The map of `collection`, read again once if this router does not know
  // it (created through another router a moment ago).
  absl::StatusOr<VersionedShardMap> MapOf(const std::string& collection) {
    ZOOM_RETURN_IF_ERROR(ValidateCollectionName(collection));
    auto t = Topo();
    auto it = t->maps.find(collection);
    if (it != t->maps.end()) return it->second;
    Event(Metrics::RouterEvent::kMapRefresh);
    ZOOM_RETURN_IF_ERROR(Refresh());
    t = Topo();
    it = t->maps.find(collection);
    if (it != t->maps.end()) return it->second;
    return absl::NotFoundError(absl::StrCat("collection '", collection, "' not found in cluster ",
                                            opt.catalog.cluster));
  }

  std::shared_ptr<grpc::Channel> ChannelForLocked(const std::string& address)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(stubs_mu) {
    auto it = channels.find(address);
    if (it != channels.end()) return it->second;
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(64 << 20);
    args.SetMaxSendMessageSize(64 << 20);
    // A dead node is noticed between requests too.
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
    auto creds = opt.node_credentials ? opt.node_credentials : grpc::InsecureChannelCredentials();
    auto channel = grpc::CreateCustomChannel(address, creds, args);
    channels[address] = channel;
    return channel;
  }
  // The stubs of a node's two services, over one channel.
  template <typename Stub>
  std::shared_ptr<Stub> StubOf(const std::string& address) {
    absl::MutexLock l(&stubs_mu);
    if constexpr (std::is_same_v<Stub, v1::Decoder::Stub>) {
      auto& s = decoder_stubs[address];
      if (s == nullptr) s = v1::Decoder::NewStub(ChannelForLocked(address));
      return s;
    } else {
      auto& s = stubs[address];
      if (s == nullptr) s = v1::VectorSearch::NewStub(ChannelForLocked(address));
      return s;
    }
  }
  std::shared_ptr<NodeStats> StatsOf(const std::string& node) {
    absl::MutexLock l(&stats_mu);
    auto& s = node_stats[node];
    if (s == nullptr) s = std::make_shared<NodeStats>();
    return s;
  }
  std::shared_ptr<ShardLatency> LatencyOf(uint64_t uid, uint32_t shard) {
    absl::MutexLock l(&stats_mu);
    auto& s = latency[{uid, shard}];
    if (s == nullptr) s = std::make_shared<ShardLatency>();
    return s;
  }

  // The replicas of shard k that may answer, best first. `serving_only`:
  // only those close to the head (searches); else every live one (admin).
  // `session`: those that have applied it first.
  std::vector<Candidate> Candidates(const Topology& t, const ShardMap& m, uint32_t k,
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
    // either): a replica that was slow once is measured again, not left
    // with its old latency forever; a hedge covers it if it is still slow.
    static thread_local std::mt19937 rng(std::random_device{}());
    if (ranked.size() >= 2 && !ranked[1].suspect && !ranked[1].behind && rng() % 16 == 0) {
      std::swap(ranked[0], ranked[1]);
    }
    std::vector<Candidate> out;
    for (Ranked& r : ranked) out.push_back(std::move(r.c));
    return out;
  }

  // The call's API key, passed on to the nodes.
  static void CopyCredentials(const grpc::ServerContextBase& from, grpc::ClientContext* to) {
    for (const char* key : {"authorization", "api-key"}) {
      auto range = from.client_metadata().equal_range(key);
      for (auto it = range.first; it != range.second; ++it) {
        to->AddMetadata(key, std::string(it->second.data(), it->second.size()));
      }
    }
  }

  template <typename Req, typename Resp, typename Stub = v1::VectorSearch::Stub>
  using AsyncFn = std::function<void(Stub*, grpc::ClientContext*, const Req*, Resp*,
                                     std::function<void(grpc::Status)>)>;

  // Asks one replica of each shard in `calls` (their candidates set), with
  // failover and (`hedge`) hedging, until every shard answered or ran out of
  // replicas, or `deadline` less the merge margin. Returns the first
  // request error (the request's fault: no failover helps), else OK; each
  // call says whether its shard answered.
  template <typename Req, typename Resp, typename Stub = v1::VectorSearch::Stub>
  absl::Status FanOut(uint64_t uid, std::vector<ShardCall<Req, Resp>>& calls, absl::Time deadline,
                      const grpc::ServerContextBase& sctx, bool hedge,
                      const std::type_identity_t<AsyncFn<Req, Resp, Stub>>& invoke) {
    const absl::Time shard_deadline = deadline - opt.merge_margin;
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
        CopyCredentials(sctx, &at->ctx);
        at->start = absl::Now();
        auto stats = StatsOf(at->node);
        auto lat = LatencyOf(uid, sc->shard);
        stats->outstanding++;
        invoke(StubOf<Stub>(s.address).get(), &at->ctx, &sc->req, &at->resp,
               [&, at, sc, stats, lat](grpc::Status st) {
                 const double us = absl::ToDoubleMicroseconds(absl::Now() - at->start);
                 stats->outstanding--;
                 absl::MutexLock l(&mu);
                 at->finished = true;
                 --sc->inflight;
                 ++events;
                 if (st.ok()) {
                   stats->Observe(us);
                   lat->Add(us);
                   if (!sc->answered) {
                     sc->answered = true;
                     sc->answer = std::move(at->resp);
                   }
                   return;
                 }
                 if (sc->answered) {
                   stats->Observe(us);  // a hedge's loser: slow, counted so
                   return;
                 }
                 if (RequestError(st.error_code())) {
                   if (request_error.ok()) {
                     request_error = absl::Status(
                         static_cast<absl::StatusCode>(st.error_code()),
                         absl::StrCat(st.error_message()));
                   }
                   return;
                 }
                 sc->last_error = absl::StrCat(at->node, ": ", CodeName(st.error_code()), " ",
                                               st.error_message());
                 sc->last_code = st.error_code();
                 if (st.error_code() == grpc::StatusCode::NOT_FOUND) stale = true;
                 if (st.error_code() != grpc::StatusCode::CANCELLED) {
                   stats->Suspect(opt.suspect_for);
                 }
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
        sc.hedge_at = absl::Now() + std::max(opt.min_hedge_delay,
                                             LatencyOf(uid, sc.shard)->P95(
                                                 opt.default_hedge_delay));
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
                Event(Metrics::RouterEvent::kFailover);
                prepare(sc, &todo);
              }
            } else if (hedge && !sc.hedged && sc.inflight > 0 &&
                       sc.next < sc.candidates.size()) {
              if (now >= sc.hedge_at) {
                sc.hedged = true;
                Event(Metrics::RouterEvent::kHedge);
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

  // UNAVAILABLE naming the shards in `calls` that did not answer.
  template <typename Req, typename Resp>
  absl::Status Uncovered(const std::string& collection,
                         const std::vector<ShardCall<Req, Resp>>& calls, uint32_t shards,
                         absl::Time deadline) {
    std::vector<std::string> why;
    size_t answered = 0;
    for (const auto& sc : calls) {
      if (sc.answered) {
        ++answered;
      } else {
        why.push_back(absl::StrCat("shard ", sc.shard, " (",
                                   sc.last_error.empty() ? "no answer before the deadline"
                                                         : sc.last_error,
                                   ")"));
      }
    }
    (void)deadline;
    return absl::UnavailableError(absl::StrCat(
        "collection ", collection, ": ", why.size(), " of ", shards,
        " shards did not answer: ", absl::StrJoin(why, "; "),
        ". Set allow_partial or min_coverage to accept an answer from the others"));
  }

  absl::Time DeadlineFor(const grpc::CallbackServerContext* ctx) const {
    absl::Time d = DeadlineOf(ctx);
    if (d == absl::InfiniteFuture()) d = absl::Now() + opt.default_deadline;
    return d;
  }

  // ---- writes ---------------------------------------------------------------

  // Publishes the entries of each shard, in order (the shards in parallel,
  // up to 8 at once), each publish waiting at most until `deadline`; the
  // tokens of the shards whose part was acknowledged, in shard order.
  absl::Status Publish(const ShardMap& m,
                       const std::map<uint32_t, std::vector<std::string>>& entries,
                       google::protobuf::RepeatedPtrField<v1::WriteToken>* tokens,
                       absl::Time deadline) {
    struct Part {
      uint32_t shard;
      const std::vector<std::string>* list;
      uint64_t last = 0;
      absl::Status status;
    };
    std::vector<Part> parts;
    for (const auto& [k, list] : entries) parts.push_back({k, &list, 0, absl::OkStatus()});
    auto run = [&](Part& p) {
      const std::string subject = cluster::ShardSubject(opt.catalog.cluster, m.collection,
                                                        p.shard);
      for (const std::string& e : *p.list) {
        absl::Duration wait = absl::ZeroDuration();  // the publish timeout
        if (deadline != absl::InfiniteFuture()) {
          wait = deadline - absl::Now();
          if (wait <= absl::ZeroDuration()) {
            p.status = absl::DeadlineExceededError("the call's deadline passed");
            return;
          }
        }
        absl::StatusOr<cluster::PubAck> ack = js->Publish(subject, e, RandomId(), wait);
        if (!ack.ok()) {
          p.status = absl::Status(
              absl::Now() >= deadline ? absl::StatusCode::kDeadlineExceeded : ack.status().code(),
              absl::StrCat("its write log (JetStream stream ",
                           cluster::StreamName(opt.catalog.cluster, m.collection), ", subject ",
                           subject, ") did not take the write: ", ack.status().message()));
          return;
        }
        p.last = ack->sequence;
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
    std::vector<uint32_t> done;
    const Part* failed = nullptr;
    for (const Part& p : parts) {
      if (!p.status.ok()) {
        if (failed == nullptr) failed = &p;
        continue;
      }
      v1::WriteToken* t = tokens->Add();
      t->set_shard(p.shard);
      t->set_sequence(p.last);
      done.push_back(p.shard);
    }
    if (failed == nullptr) return absl::OkStatus();
    const bool late = failed->status.code() == absl::StatusCode::kDeadlineExceeded;
    return absl::Status(
        late ? absl::StatusCode::kDeadlineExceeded : absl::StatusCode::kUnavailable,
        absl::StrCat(
            "collection ", m.collection, ", shard ", failed->shard, ": ",
            failed->status.message(), ". NATS: ",
            js->connected() ? absl::StrCat("connected to ", js->connected_url())
                            : std::string("not connected (reconnecting)"),
            late ? "; the write may or may not be stored. "
                 : "; a stream whose NATS servers lost their majority takes no writes. ",
            done.empty() ? std::string("No shard acknowledged its part")
                         : absl::StrCat("Shards ", absl::StrJoin(done, ", "),
                                        " acknowledged their part"),
            "; retrying the same request is safe (writes are idempotent)"));
  }

  size_t MaxEntryBytes() const {
    const int64_t server = js->max_payload();
    size_t cap = opt.max_entry_bytes;
    if (server > 4096) cap = std::min<size_t>(cap, static_cast<size_t>(server) - 1024);
    return cap;
  }

  // Ids by shard, in request order.
  static std::map<uint32_t, std::vector<uint64_t>> ByShard(
      const google::protobuf::RepeatedField<uint64_t>& ids, uint32_t shards) {
    std::map<uint32_t, std::vector<uint64_t>> out;
    for (uint64_t id : ids) out[cluster::ShardOf(id, shards)].push_back(id);
    return out;
  }

  absl::Status Upsert(const v1::UpsertRequest& req, v1::UpsertResponse* resp,
                      absl::Time deadline) {
    ZOOM_ASSIGN_OR_RETURN(VersionedShardMap vm, MapOf(req.collection()));
    const ShardMap& m = vm.map;
    ZOOM_ASSIGN_OR_RETURN(api::UpsertRequest points,
                          api::UpsertFromProto(req.collection(), req.points(), opt.limits));
    CollectionConfig named = m.config;
    named.name = req.collection();
    std::vector<PointRef> refs;
    ZOOM_RETURN_IF_ERROR(api::PointRefsOf(named, points.points, &refs));
    ZOOM_RETURN_IF_ERROR(ValidatePoints(m.config, refs));
    const size_t cap = MaxEntryBytes();
    const size_t empty = cluster::UpsertEntryBytes(m.config.dim, 0, 0);
    std::map<uint32_t, std::vector<std::string>> entries;
    std::map<uint32_t, cluster::LogEntry> open;  // a shard's entry being filled
    std::map<uint32_t, size_t> open_bytes;
    for (size_t i = 0; i < refs.size(); ++i) {
      const PointRef& p = refs[i];
      const uint32_t k = cluster::ShardOf(p.id, m.shards);
      cluster::LogPoint lp;
      lp.id = p.id;
      lp.vector.assign(p.vector, p.vector + m.config.dim);
      lp.payload = std::string(p.payload);
      if (p.fields != nullptr) lp.fields = *p.fields;
      const size_t bytes = cluster::UpsertEntryBytes(
                               m.config.dim, 1, lp.payload.size() + EncodeFields(lp.fields).size()) -
                           empty;
      if (empty + bytes > cap) {
        return absl::InvalidArgumentError(absl::StrCat(
            "point ", p.id, " (#", i, ") is ", empty + bytes, " bytes in the cluster's log; a "
            "log entry is at most ", cap, " bytes (the NATS servers' max_payload): make its "
            "payload smaller"));
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
    ZOOM_RETURN_IF_ERROR(Publish(m, entries, resp->mutable_tokens(), deadline));
    resp->set_upserted(refs.size());
    return absl::OkStatus();
  }

  // One entry kind over ids: `make(ids)` builds it for a shard's ids, split
  // so that an entry stays under the cap.
  template <typename Make>
  absl::Status PublishByIds(const ShardMap& m, const google::protobuf::RepeatedField<uint64_t>& ids,
                            size_t extra_bytes, Make make,
                            google::protobuf::RepeatedPtrField<v1::WriteToken>* tokens,
                            absl::Time deadline) {
    if (ids.size() > static_cast<int>(opt.limits.max_ids)) {
      return absl::InvalidArgumentError(absl::StrCat(
          ids.size(), " ids; this server takes at most ", opt.limits.max_ids, " per call"));
    }
    const size_t cap = MaxEntryBytes();
    if (extra_bytes + 64 > cap) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the request's fields are ", extra_bytes, " bytes; a log entry is at most ", cap));
    }
    const size_t per_entry = std::max<size_t>(1, (cap - extra_bytes - 64) / 8);
    std::map<uint32_t, std::vector<std::string>> entries;
    for (auto& [k, list] : ByShard(ids, m.shards)) {
      for (size_t i = 0; i < list.size(); i += per_entry) {
        std::vector<uint64_t> part(list.begin() + i,
                                   list.begin() + std::min(list.size(), i + per_entry));
        entries[k].push_back(cluster::EncodeLogEntry(make(std::move(part))));
      }
    }
    return Publish(m, entries, tokens, deadline);
  }

  // An entry for every shard (field indexes).
  absl::Status PublishToAll(const ShardMap& m, const cluster::LogEntry& e, absl::Time deadline) {
    std::map<uint32_t, std::vector<std::string>> entries;
    const std::string bytes = cluster::EncodeLogEntry(e);
    for (uint32_t k = 0; k < m.shards; ++k) entries[k].push_back(bytes);
    google::protobuf::RepeatedPtrField<v1::WriteToken> tokens;
    return Publish(m, entries, &tokens, deadline);
  }

  // ---- reads ----------------------------------------------------------------

  v1::CollectionInfo InfoOf(const ShardMap& m) const {
    CollectionInfo info;
    info.config = m.config;
    v1::CollectionInfo out = ToProto(info);
    out.mutable_spec()->set_shards(m.shards);
    out.mutable_spec()->set_replicas(m.replicas);
    return out;
  }

  // Every shard's GetCollection summed (strict: UNAVAILABLE without all).
  absl::Status Info(const VersionedShardMap& vm, absl::Time deadline,
                    const grpc::ServerContextBase& sctx, v1::CollectionInfo* out) {
    const ShardMap& m = vm.map;
    auto t = Topo();
    std::vector<ShardCall<v1::GetCollectionRequest, v1::GetCollectionResponse>> calls(m.shards);
    for (uint32_t k = 0; k < m.shards; ++k) {
      calls[k].shard = k;
      calls[k].req.set_name(m.LocalName(k));
      calls[k].candidates = Candidates(*t, m, k, true, 0);
    }
    ZOOM_RETURN_IF_ERROR((FanOut<v1::GetCollectionRequest, v1::GetCollectionResponse>(
        m.uid, calls, deadline, sctx, false,
        [](v1::VectorSearch::Stub* s, grpc::ClientContext* c, const v1::GetCollectionRequest* q,
           v1::GetCollectionResponse* r, std::function<void(grpc::Status)> f) {
          s->async()->GetCollection(c, q, r, std::move(f));
        })));
    for (const auto& sc : calls) {
      if (!sc.answered) return Uncovered(m.collection, calls, m.shards, deadline);
    }
    *out = InfoOf(m);
    v1::IndexState state = v1::READY;
    for (const auto& sc : calls) {
      const v1::CollectionInfo& i = sc.answer.info();
      out->set_points(out->points() + i.points());
      out->set_deleted_points(out->deleted_points() + i.deleted_points());
      out->set_stored_records(out->stored_records() + i.stored_records());
      out->set_indexed_points(out->indexed_points() + i.indexed_points());
      out->set_resident_bytes(out->resident_bytes() + i.resident_bytes());
      out->set_disk_bytes(out->disk_bytes() + i.disk_bytes());
      out->set_trained_points(out->trained_points() + i.trained_points());
      // The least ready shard speaks for the collection.
      auto rank = [](v1::IndexState s) {
        switch (s) {
          case v1::FAILED: return 0;
          case v1::NONE: return 1;
          case v1::BUILDING: return 2;
          default: return 3;
        }
      };
      if (rank(i.index_state()) < rank(state)) state = i.index_state();
      if (!i.index_error().empty() && out->index_error().empty()) {
        out->set_index_error(absl::StrCat("shard ", sc.shard, ": ", i.index_error()));
      }
      *out->mutable_field_indexes() = i.field_indexes();
    }
    out->set_index_state(state);
    return absl::OkStatus();
  }

  absl::Status Search(const v1::SearchRequest& req, absl::Time deadline,
                      const grpc::ServerContextBase& sctx, v1::SearchResponse* resp) {
    ZOOM_RETURN_IF_ERROR(CheckClusterFields(req));
    ZOOM_ASSIGN_OR_RETURN(VersionedShardMap vm, MapOf(req.collection()));
    const ShardMap& m = vm.map;
    auto t = Topo();
    std::map<uint32_t, uint64_t> session;
    if (req.consistency() == v1::SESSION) {
      for (const v1::WriteToken& tok : req.after()) {
        session[tok.shard()] = std::max(session[tok.shard()], tok.sequence());
      }
    }
    std::vector<ShardCall<v1::SearchRequest, v1::SearchResponse>> calls(m.shards);
    for (uint32_t k = 0; k < m.shards; ++k) {
      calls[k].shard = k;
      calls[k].req = req;
      calls[k].req.set_collection(m.LocalName(k));
      calls[k].candidates = Candidates(*t, m, k, true, session[k]);
    }
    ZOOM_RETURN_IF_ERROR((FanOut<v1::SearchRequest, v1::SearchResponse>(
        m.uid, calls, deadline, sctx, opt.hedge,
        [](v1::VectorSearch::Stub* s, grpc::ClientContext* c, const v1::SearchRequest* q,
           v1::SearchResponse* r, std::function<void(grpc::Status)> f) {
          s->async()->Search(c, q, r, std::move(f));
        })));
    return Merge(req, m, calls, deadline, resp);
  }

  // The shards' answers as one: top k by score, stats summed (times: the
  // slowest shard's), coverage.
  absl::Status Merge(const v1::SearchRequest& req, const ShardMap& m,
                     std::vector<ShardCall<v1::SearchRequest, v1::SearchResponse>>& calls,
                     absl::Time deadline, v1::SearchResponse* resp) {
    size_t answered = 0;
    for (const auto& sc : calls) answered += sc.answered ? 1 : 0;
    const float coverage = static_cast<float>(answered) / static_cast<float>(m.shards);
    if (answered < m.shards) {
      const bool allowed = req.allow_partial() ||
                           (req.min_coverage() > 0 && coverage >= req.min_coverage());
      if (!allowed) {
        Event(Metrics::RouterEvent::kUnavailable);
        return Uncovered(m.collection, calls, m.shards, deadline);
      }
      Event(Metrics::RouterEvent::kPartial);
    }
    const bool lower_better = m.config.metric == Metric::kL2;
    std::vector<v1::Hit*> hits;
    v1::QueryStats* st = resp->mutable_stats();
    bool first = true;
    for (auto& sc : calls) {
      if (!sc.answered) continue;
      for (v1::Hit& h : *sc.answer.mutable_hits()) hits.push_back(&h);
      const v1::QueryStats& s = sc.answer.stats();
      st->set_preview_us(std::max(st->preview_us(), s.preview_us()));
      st->set_fullview_us(std::max(st->fullview_us(), s.fullview_us()));
      st->set_rerank_us(std::max(st->rerank_us(), s.rerank_us()));
      st->set_ssd_reads(st->ssd_reads() + s.ssd_reads());
      st->set_bytes_read(st->bytes_read() + s.bytes_read());
      st->set_candidates(st->candidates() + s.candidates());
      st->set_distance_evals(st->distance_evals() + s.distance_evals());
      st->set_cache_hits(st->cache_hits() + s.cache_hits());
      st->set_degraded(st->degraded() || s.degraded());
      st->set_exact(first ? s.exact() : st->exact() && s.exact());
      st->set_filter_matches(st->filter_matches() + s.filter_matches());
      st->set_filter_expansions(st->filter_expansions() + s.filter_expansions());
      st->set_filter_scan(st->filter_scan() || s.filter_scan());
      st->set_fullview_rounds(std::max(st->fullview_rounds(), s.fullview_rounds()));
      if (first) {
        st->set_filter_strategy(s.filter_strategy());
        st->set_target_recall(s.target_recall());
        st->set_calibrated_recall(s.calibrated_recall());
        st->set_target_reached(s.target_reached());
        *st->mutable_knobs() = s.knobs();
      } else {
        st->set_target_reached(st->target_reached() && s.target_reached());
        st->set_calibrated_recall(std::min(st->calibrated_recall(), s.calibrated_recall()));
      }
      if (st->warning().empty() && !s.warning().empty()) st->set_warning(s.warning());
      first = false;
    }
    std::sort(hits.begin(), hits.end(), [lower_better](const v1::Hit* a, const v1::Hit* b) {
      if (a->score() != b->score()) {
        return lower_better ? a->score() < b->score() : a->score() > b->score();
      }
      return a->id() < b->id();
    });
    const size_t k = std::min<size_t>(hits.size(), req.k());
    for (size_t i = 0; i < k; ++i) *resp->add_hits() = std::move(*hits[i]);
    resp->set_coverage(coverage);
    resp->set_degraded(answered < m.shards);
    return absl::OkStatus();
  }

  // One page of Scroll over every shard: each shard's first points from
  // the offset (about twice its share of `limit`), merged by id. A shard's page covers the ids from the
  // offset up to its next_offset (it stops early at its byte budget): the
  // merged page stops at the lowest of them, and at the limit and this
  // router's byte budget.
  absl::Status Scroll(const v1::ScrollRequest& req, absl::Time deadline,
                      const grpc::ServerContextBase& sctx, v1::ScrollResponse* resp) {
    const uint32_t limit = req.limit() == 0 ? 100 : req.limit();
    if (limit > 10000) {
      return absl::InvalidArgumentError(absl::StrCat("limit ", limit, " is above 10000"));
    }
    ZOOM_ASSIGN_OR_RETURN(VersionedShardMap vm, MapOf(req.collection()));
    const ShardMap& m = vm.map;
    auto t = Topo();
    // Ids spread evenly over the shards (ShardOf), so about limit / S of a
    // page come from each: a shard is asked for twice that (not `limit`:
    // S times the points read, held and dropped). A shard whose part ran
    // short stops the merged page at its next_offset (the cutoff below), so
    // a page may be shorter than `limit`, never wrong.
    const uint32_t per_shard =
        std::min<uint32_t>(limit, 2 * ((limit + m.shards - 1) / m.shards) + 16);
    std::vector<ShardCall<v1::ScrollRequest, v1::ScrollResponse>> calls(m.shards);
    for (uint32_t k = 0; k < m.shards; ++k) {
      calls[k].shard = k;
      calls[k].req = req;
      calls[k].req.set_collection(m.LocalName(k));
      calls[k].req.set_limit(per_shard);
      calls[k].candidates = Candidates(*t, m, k, true, 0);
    }
    ZOOM_RETURN_IF_ERROR((FanOut<v1::ScrollRequest, v1::ScrollResponse>(
        m.uid, calls, deadline, sctx, opt.hedge,
        [](v1::VectorSearch::Stub* s, grpc::ClientContext* c, const v1::ScrollRequest* q,
           v1::ScrollResponse* r, std::function<void(grpc::Status)> f) {
          s->async()->Scroll(c, q, r, std::move(f));
        })));
    std::optional<uint64_t> cutoff;
    std::vector<v1::Point*> points;
    for (auto& sc : calls) {
      if (!sc.answered) return Uncovered(m.collection, calls, m.shards, deadline);
      if (sc.answer.has_next_offset()) {
        cutoff = std::min(cutoff.value_or(UINT64_MAX), sc.answer.next_offset());
      }
      resp->set_filter_scan(resp->filter_scan() || sc.answer.filter_scan());
      for (v1::Point& p : *sc.answer.mutable_points()) {
        if (!cutoff.has_value() || p.id() < *cutoff) points.push_back(&p);
      }
    }
    std::sort(points.begin(), points.end(),
              [](const v1::Point* a, const v1::Point* b) { return a->id() < b->id(); });
    std::optional<uint64_t> next = cutoff;
    uint64_t bytes = 0;
    for (v1::Point* p : points) {
      if (cutoff.has_value() && p->id() >= *cutoff) break;
      bytes += p->ByteSizeLong() + 8;
      if (static_cast<uint32_t>(resp->points_size()) == limit ||
          (resp->points_size() > 0 && bytes > opt.limits.max_response_bytes)) {
        next = p->id();
        break;
      }
      *resp->add_points() = std::move(*p);
    }
    if (next.has_value()) resp->set_next_offset(*next);
    return absl::OkStatus();
  }

  // The live points passing req's filter, summed over the shards.
  absl::Status Count(const v1::CountRequest& req, absl::Time deadline,
                     const grpc::ServerContextBase& sctx, v1::CountResponse* resp) {
    ZOOM_ASSIGN_OR_RETURN(VersionedShardMap vm, MapOf(req.collection()));
    const ShardMap& m = vm.map;
    auto t = Topo();
    std::vector<ShardCall<v1::CountRequest, v1::CountResponse>> calls(m.shards);
    for (uint32_t k = 0; k < m.shards; ++k) {
      calls[k].shard = k;
      calls[k].req = req;
      calls[k].req.set_collection(m.LocalName(k));
      calls[k].candidates = Candidates(*t, m, k, true, 0);
    }
    ZOOM_RETURN_IF_ERROR((FanOut<v1::CountRequest, v1::CountResponse>(
        m.uid, calls, deadline, sctx, opt.hedge,
        [](v1::VectorSearch::Stub* s, grpc::ClientContext* c, const v1::CountRequest* q,
           v1::CountResponse* r, std::function<void(grpc::Status)> f) {
          s->async()->Count(c, q, r, std::move(f));
        })));
    for (const auto& sc : calls) {
      if (!sc.answered) return Uncovered(m.collection, calls, m.shards, deadline);
      resp->set_count(resp->count() + sc.answer.count());
      resp->set_filter_scan(resp->filter_scan() || sc.answer.filter_scan());
      if (resp->warning().empty()) resp->set_warning(sc.answer.warning());
    }
    return absl::OkStatus();
  }

  // Delete by filter: the ids that match when the router reads them (a
  // Scroll of ids, page by page), deleted by id through the log. Not one
  // atomic step: a write racing it may make a point match after its page
  // was read (kept) or stop matching before its delete applies (deleted).
  absl::Status DeleteByFilter(const v1::DeleteRequest& req, absl::Time deadline,
                              const grpc::ServerContextBase& sctx, v1::DeleteResponse* resp) {
    if (!req.ids().empty()) {
      return absl::InvalidArgumentError("give either ids or a filter to delete by, not both");
    }
    Filter filter;
    ZOOM_RETURN_IF_ERROR(FilterFromProto(req.filter(), &filter));
    ZOOM_RETURN_IF_ERROR(CheckDeleteFilter(filter, req.all()));
    if (!req.all()) {
      // A filter that matches every live point deletes nothing unless
      // asked for by name. Counted before, the matches first: a delete
      // racing the two counts makes the check refuse rather than pass.
      v1::CountRequest count;
      count.set_collection(req.collection());
      *count.mutable_filter() = req.filter();
      v1::CountResponse all, matched;
      ZOOM_RETURN_IF_ERROR(Count(count, deadline, sctx, &matched));
      count.clear_filter();
      ZOOM_RETURN_IF_ERROR(Count(count, deadline, sctx, &all));
      ZOOM_RETURN_IF_ERROR(
          CheckDeleteMatches(matched.count(), all.count(), false, req.collection()));
    }
    ZOOM_ASSIGN_OR_RETURN(VersionedShardMap vm, MapOf(req.collection()));
    v1::ScrollRequest scroll;
    scroll.set_collection(req.collection());
    *scroll.mutable_filter() = req.filter();
    scroll.set_limit(std::min<uint32_t>(10000, static_cast<uint32_t>(opt.limits.max_ids)));
    std::map<uint32_t, uint64_t> last;  // shard -> last sequence
    uint64_t deleted = 0;
    for (;;) {
      v1::ScrollResponse page;
      absl::Status st = Scroll(scroll, deadline, sctx, &page);
      if (!st.ok()) {
        return absl::Status(st.code(), absl::StrCat(st.message(), deleted > 0 ? absl::StrCat(
            " (", deleted, " matching points were deleted before; asking again is safe)") : ""));
      }
      if (!page.points().empty()) {
        google::protobuf::RepeatedField<uint64_t> ids;
        for (const v1::Point& p : page.points()) ids.Add(p.id());
        google::protobuf::RepeatedPtrField<v1::WriteToken> tokens;
        ZOOM_RETURN_IF_ERROR(PublishByIds(
            vm.map, ids, 0,
            [](std::vector<uint64_t> part) {
              cluster::LogEntry e;
              e.op = cluster::LogOp::kDelete;
              e.ids = std::move(part);
              return e;
            },
            &tokens, deadline));
        for (const v1::WriteToken& t : tokens) last[t.shard()] = t.sequence();
        deleted += ids.size();
      }
      if (!page.has_next_offset()) break;
      scroll.set_offset(page.next_offset());
    }
    for (const auto& [k, seq] : last) {
      v1::WriteToken* t = resp->add_tokens();
      t->set_shard(k);
      t->set_sequence(seq);
    }
    resp->set_deleted(deleted);
    return absl::OkStatus();
  }

  // ---- decoder models -------------------------------------------------------

  // The nodes serving `model`, in turn (each call starts one further), a
  // node that failed recently last.
  std::vector<Candidate> ModelCandidates(const Topology& t, const std::string& model) {
    std::vector<Candidate> all;
    for (const auto& [id, n] : t.nodes) {
      if (!n.address.empty() && n.Serves(model)) all.push_back({id, n.address, 0});
    }
    if (all.size() < 2) return all;
    std::rotate(all.begin(), all.begin() + model_turn.fetch_add(1) % all.size(), all.end());
    const absl::Time now = absl::Now();
    std::stable_partition(all.begin(), all.end(), [&](const Candidate& c) {
      auto s = StatsOf(c.node);
      absl::MutexLock l(&s->mu);
      return s->suspect_until <= now;
    });
    return all;
  }

  // Why no node serves `model`: NotFound when the cluster does not have it,
  // else Unavailable with the nodes' states.
  absl::Status NoModel(const std::string& model) {
    absl::StatusOr<std::vector<cluster::ModelSpec>> specs = catalog->ListModels();
    if (!specs.ok()) return specs.status();
    const bool known = std::any_of(specs->begin(), specs->end(),
                                   [&](const cluster::ModelSpec& s) { return s.name == model; });
    if (!known) {
      return absl::NotFoundError(absl::StrCat("model ", model, " is not loaded in cluster ",
                                              opt.catalog.cluster,
                                              " (LoadModel through a router loads it on every "
                                              "node)"));
    }
    std::vector<std::string> states;
    auto t = Topo();
    for (const auto& [id, n] : t->nodes) {
      std::string state = "not yet loading";
      for (const cluster::HostedModel& h : n.models) {
        if (h.name != model) continue;
        state = h.state == cluster::ModelLoadState::kLoading ? "loading" : "failed";
      }
      states.push_back(absl::StrCat(id, ": ", state));
    }
    return absl::UnavailableError(absl::StrCat(
        "no node serves model ", model, " yet (", states.empty() ? "no live nodes"
                                                                 : absl::StrJoin(states, ", "),
        "); ListModels says when it serves"));
  }

  absl::Status TopK(const v1::TopKRequest& req, absl::Time deadline,
                    const grpc::ServerContextBase& sctx, v1::TopKResponse* resp) {
    ZOOM_RETURN_IF_ERROR(ValidateModelName(req.model()));
    std::vector<ShardCall<v1::TopKRequest, v1::TopKResponse>> calls(1);
    calls[0].candidates = ModelCandidates(*Topo(), req.model());
    if (calls[0].candidates.empty()) {
      // Loaded through another router a moment ago: read the records again.
      Event(Metrics::RouterEvent::kMapRefresh);
      ZOOM_RETURN_IF_ERROR(Refresh());
      calls[0].candidates = ModelCandidates(*Topo(), req.model());
      if (calls[0].candidates.empty()) return NoModel(req.model());
    }
    calls[0].req = req;
    ZOOM_RETURN_IF_ERROR((FanOut<v1::TopKRequest, v1::TopKResponse, v1::Decoder::Stub>(
        0, calls, deadline, sctx, false,
        [](v1::Decoder::Stub* s, grpc::ClientContext* c, const v1::TopKRequest* q,
           v1::TopKResponse* r, std::function<void(grpc::Status)> f) {
          s->async()->TopK(c, q, r, std::move(f));
        })));
    if (!calls[0].answered) {
      if (absl::Now() >= deadline - opt.merge_margin) {
        return absl::DeadlineExceededError(absl::StrCat(
            "model ", req.model(), ": no node answered before the deadline (",
            calls[0].last_error.empty() ? "none failed" : calls[0].last_error, ")"));
      }
      return absl::Status(
          static_cast<absl::StatusCode>(calls[0].last_code == grpc::StatusCode::CANCELLED
                                            ? grpc::StatusCode::UNAVAILABLE
                                            : calls[0].last_code),
          absl::StrCat("model ", req.model(), ": every node serving it failed; the last: ",
                       calls[0].last_error));
    }
    *resp = std::move(calls[0].answer);
    return absl::OkStatus();
  }

  // Every live node's ListModels (those that answered), by node id.
  std::map<std::string, v1::ListModelsResponse> NodeModels(absl::Time deadline,
                                                           const grpc::ServerContextBase& sctx) {
    auto t = Topo();
    std::vector<ShardCall<v1::ListModelsRequest, v1::ListModelsResponse>> calls;
    for (const auto& [id, n] : t->nodes) {
      if (n.address.empty()) continue;
      calls.emplace_back();
      calls.back().candidates = {{id, n.address, 0}};
    }
    (void)FanOut<v1::ListModelsRequest, v1::ListModelsResponse, v1::Decoder::Stub>(
        0, calls, deadline, sctx, false,
        [](v1::Decoder::Stub* s, grpc::ClientContext* c, const v1::ListModelsRequest* q,
           v1::ListModelsResponse* r, std::function<void(grpc::Status)> f) {
          s->async()->ListModels(c, q, r, std::move(f));
        });
    std::map<std::string, v1::ListModelsResponse> out;
    for (auto& sc : calls) {
      if (sc.answered) out[sc.candidates[0].node] = std::move(sc.answer);
    }
    return out;
  }

  // The model as the nodes report it: serving before loading before failed.
  static v1::ModelInfo Best(const cluster::ModelSpec& spec,
                            const std::map<std::string, v1::ListModelsResponse>& nodes) {
    auto rank = [](v1::ModelState s) {
      return s == v1::SERVING ? 3 : s == v1::LOADING ? 2 : s == v1::MODEL_FAILED ? 1 : 0;
    };
    v1::ModelInfo best;
    best.set_name(spec.name);
    best.set_dir(spec.dir);
    best.set_m(spec.m);
    best.set_ef_construction(spec.ef_construction);
    best.set_state(v1::LOADING);  // no node has taken it up yet
    int best_rank = 0;
    for (const auto& [node, resp] : nodes) {
      for (const v1::ModelInfo& info : resp.models()) {
        if (info.name() != spec.name || rank(info.state()) <= best_rank) continue;
        best = info;
        best_rank = rank(info.state());
      }
    }
    return best;
  }
};

// ---- RouterService ----------------------------------------------------------

RouterService::RouterService(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

RouterService::~RouterService() {
  {
    absl::MutexLock l(&impl_->topo_mu);
    impl_->stopping = true;
  }
  if (impl_->refresher.joinable()) impl_->refresher.join();
}

absl::StatusOr<std::unique_ptr<RouterService>> RouterService::Create(RouterOptions options,
                                                                     Metrics* metrics,
                                                                     WorkerPool* pool,
                                                                     const Authenticator* auth) {
  auto impl = std::make_unique<Impl>();
  impl->opt = std::move(options);
  impl->metrics = metrics;
  impl->pool = pool;
  impl->auth = auth;
  cluster::JetStreamOptions nats = impl->opt.nats;
  nats.name = "zoomd-router";
  ZOOM_ASSIGN_OR_RETURN(impl->js, cluster::JetStream::Connect(nats));
  ZOOM_ASSIGN_OR_RETURN(impl->catalog,
                        cluster::ClusterCatalog::Open(impl->js.get(), impl->opt.catalog));
  ZOOM_RETURN_IF_ERROR(impl->Refresh());
  Impl* p = impl.get();
  impl->refresher = std::thread([p] { p->RefreshLoop(); });
  return std::unique_ptr<RouterService>(new RouterService(std::move(impl)));
}

absl::Status RouterService::Refresh() { return impl_->Refresh(); }

namespace {

// Runs `work` (a Status-returning callable) on the pool after the key check.
template <typename Work>
grpc::ServerUnaryReactor* Routed(RouterService::Impl* impl, grpc::CallbackServerContext* ctx,
                                 const char* rpc, WorkClass cls, Work work) {
  auto record = [impl, rpc](const absl::Status& st, double s) { impl->Record(rpc, st, s); };
  if (absl::Status st = AuthorizeCall(impl->auth, *ctx, RoleFor(cls)); !st.ok()) {
    return FinishNow(st, record);
  }
  return RunUnaryOnPool(impl->pool, ctx, cls, 1, std::move(record),
                        [work = std::move(work)](const std::atomic<bool>*) { return work(); });
}

grpc::ServerUnaryReactor* NotRouted(RouterService::Impl* impl, const char* rpc,
                                    const char* instead) {
  absl::Status st = absl::UnimplementedError(
      absl::StrCat(rpc, " is not routed to a clustered collection (yet): ", instead));
  return FinishNow(st, [impl, rpc](const absl::Status& s, double t) { impl->Record(rpc, s, t); });
}

}  // namespace

grpc::ServerUnaryReactor* RouterService::GetServerInfo(grpc::CallbackServerContext* ctx,
                                                       const v1::GetServerInfoRequest*,
                                                       v1::GetServerInfoResponse* resp) {
  Impl* impl = impl_.get();
  return Routed(impl, ctx, "GetServerInfo", WorkClass::kRead, [impl, resp] {
    resp->set_version(impl->opt.version);
    resp->set_simd_level(Database::SimdLevel());
    resp->set_started_unix_ms(impl->started_unix_ms);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* RouterService::CreateCollection(grpc::CallbackServerContext* ctx,
                                                          const v1::CreateCollectionRequest* req,
                                                          v1::CreateCollectionResponse* resp) {
  Impl* impl = impl_.get();
  const absl::Time deadline = impl->DeadlineFor(ctx);
  return Routed(impl, ctx, "CreateCollection", WorkClass::kAdmin, [impl, req, resp, deadline] {
    ZOOM_ASSIGN_OR_RETURN(CollectionConfig config, ConfigFromSpec(req->spec(), impl->opt.limits));
    const uint32_t shards = req->spec().shards() == 0 ? 1 : req->spec().shards();
    uint32_t replicas = req->spec().replicas();
    if (replicas == 0) {
      ZOOM_ASSIGN_OR_RETURN(auto nodes, impl->catalog->LiveNodes());
      replicas = nodes.size() >= 2 ? 2 : 1;
    }
    ZOOM_ASSIGN_OR_RETURN(ShardMap m, impl->catalog->CreateCollection(config, shards, replicas));
    // Answer once every shard has a serving replica (or a while later: the
    // nodes converge on their own).
    const absl::Time until = std::min(deadline - absl::Milliseconds(50),
                                      absl::Now() + impl->opt.create_wait);
    for (;;) {
      if (impl->Refresh().ok()) {
        auto t = impl->Topo();
        bool ready = true;
        for (uint32_t k = 0; k < m.shards && ready; ++k) {
          ready = !impl->Candidates(*t, m, k, true, 0).empty();
        }
        if (ready) break;
      }
      if (absl::Now() >= until) break;
      absl::SleepFor(absl::Milliseconds(50));
    }
    *resp->mutable_info() = impl->InfoOf(m);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* RouterService::DropCollection(grpc::CallbackServerContext* ctx,
                                                        const v1::DropCollectionRequest* req,
                                                        v1::DropCollectionResponse*) {
  Impl* impl = impl_.get();
  return Routed(impl, ctx, "DropCollection", WorkClass::kAdmin, [impl, req] {
    ZOOM_RETURN_IF_ERROR(ValidateCollectionName(req->name()));
    ZOOM_RETURN_IF_ERROR(impl->catalog->DropCollection(req->name()));
    (void)impl->Refresh();
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* RouterService::ListCollections(grpc::CallbackServerContext* ctx,
                                                         const v1::ListCollectionsRequest*,
                                                         v1::ListCollectionsResponse* resp) {
  Impl* impl = impl_.get();
  const absl::Time deadline = impl->DeadlineFor(ctx);
  return Routed(impl, ctx, "ListCollections", WorkClass::kRead, [impl, ctx, resp, deadline] {
    ZOOM_RETURN_IF_ERROR(impl->Refresh());
    auto t = impl->Topo();
    for (const auto& [name, vm] : t->maps) {
      v1::CollectionInfo info;
      // Best effort: a collection with a shard down is listed by its spec.
      if (!impl->Info(vm, deadline, *ctx, &info).ok()) info = impl->InfoOf(vm.map);
      *resp->add_collections() = std::move(info);
    }
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* RouterService::GetCollection(grpc::CallbackServerContext* ctx,
                                                       const v1::GetCollectionRequest* req,
                                                       v1::GetCollectionResponse* resp) {
  Impl* impl = impl_.get();
  const absl::Time deadline = impl->DeadlineFor(ctx);
  return Routed(impl, ctx, "GetCollection", WorkClass::kRead, [impl, ctx, req, resp, deadline] {
    ZOOM_ASSIGN_OR_RETURN(VersionedShardMap vm, impl->MapOf(req->name()));
    return impl->Info(vm, deadline, *ctx, resp->mutable_info());
  });
}

grpc::ServerUnaryReactor* RouterService::Upsert(grpc::CallbackServerContext* ctx,
                                                const v1::UpsertRequest* req,
                                                v1::UpsertResponse* resp) {
  Impl* impl = impl_.get();
  const absl::Time deadline = DeadlineOf(ctx);
  return Routed(impl, ctx, "Upsert", WorkClass::kWrite,
                [impl, req, resp, deadline] { return impl->Upsert(*req, resp, deadline); });
}

grpc::ServerUnaryReactor* RouterService::Delete(grpc::CallbackServerContext* ctx,
                                                const v1::DeleteRequest* req,
                                                v1::DeleteResponse* resp) {
  Impl* impl = impl_.get();
  const absl::Time deadline = impl->DeadlineFor(ctx);
  return Routed(impl, ctx, "Delete", WorkClass::kWrite, [impl, ctx, req, resp, deadline] {
    if (req->has_filter() || (req->all() && req->ids().empty())) {
      return impl->DeleteByFilter(*req, deadline, *ctx, resp);
    }
    if (req->ids().empty()) return absl::InvalidArgumentError("no ids to delete");
    ZOOM_ASSIGN_OR_RETURN(VersionedShardMap vm, impl->MapOf(req->collection()));
    ZOOM_RETURN_IF_ERROR(impl->PublishByIds(
        vm.map, req->ids(), 0,
        [](std::vector<uint64_t> ids) {
          cluster::LogEntry e;
          e.op = cluster::LogOp::kDelete;
          e.ids = std::move(ids);
          return e;
        },
        resp->mutable_tokens(), deadline));
    resp->set_deleted(req->ids_size());
    return absl::OkStatus();
  });
}

grpc::ServerReadReactor<grpc::ByteBuffer>* RouterService::Import(grpc::CallbackServerContext* ctx,
                                                                 grpc::ByteBuffer* resp) {
  Impl* impl = impl_.get();
  // Each message an Upsert through the log; the last token of each shard
  // in the response.
  auto tokens = std::make_shared<std::map<uint32_t, uint64_t>>();
  ImportHooks hooks;
  hooks.pool = impl->pool;
  hooks.auth = impl->auth;
  hooks.apply = [impl, tokens](const std::string& collection, v1::ImportRequest* req,
                               uint64_t* imported) {
    v1::UpsertRequest up;
    up.set_collection(collection);
    up.mutable_points()->Swap(req->mutable_points());
    v1::UpsertResponse out;
    ZOOM_RETURN_IF_ERROR(impl->Upsert(up, &out, absl::InfiniteFuture()));
    *imported += out.upserted();
    for (const v1::WriteToken& t : out.tokens()) (*tokens)[t.shard()] = t.sequence();
    return absl::OkStatus();
  };
  hooks.finish = [tokens](v1::ImportResponse* out) {
    for (const auto& [k, seq] : *tokens) {
      v1::WriteToken* t = out->add_tokens();
      t->set_shard(k);
      t->set_sequence(seq);
    }
  };
  hooks.record = [impl](const absl::Status& st, double s) { impl->Record("Import", st, s); };
  return new ImportReactor(std::move(hooks), ctx, resp);
}

grpc::ServerUnaryReactor* RouterService::SetPayload(grpc::CallbackServerContext* ctx,
                                                    const v1::SetPayloadRequest* req,
                                                    v1::SetPayloadResponse* resp) {
  Impl* impl = impl_.get();
  const absl::Time deadline = DeadlineOf(ctx);
  return Routed(impl, ctx, "SetPayload", WorkClass::kWrite, [impl, req, resp, deadline] {
    if (req->ids().empty()) return absl::InvalidArgumentError("no ids to set the payload of");
    ZOOM_ASSIGN_OR_RETURN(VersionedShardMap vm, impl->MapOf(req->collection()));
    ZOOM_ASSIGN_OR_RETURN(PayloadFields fields, FieldsFromProto(req->fields()));
    ZOOM_RETURN_IF_ERROR(ValidateFields(fields));
    const size_t extra = EncodeFields(fields).size();
    google::protobuf::RepeatedPtrField<v1::WriteToken> tokens;
    ZOOM_RETURN_IF_ERROR(impl->PublishByIds(
        vm.map, req->ids(), extra,
        [&](std::vector<uint64_t> ids) {
          cluster::LogEntry e;
          e.op = cluster::LogOp::kSetPayload;
          e.ids = std::move(ids);
          e.fields = fields;
          e.overwrite = req->overwrite();
          return e;
        },
        &tokens, deadline));
    resp->set_updated(req->ids_size());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* RouterService::DeletePayload(grpc::CallbackServerContext* ctx,
                                                       const v1::DeletePayloadRequest* req,
                                                       v1::DeletePayloadResponse* resp) {
  Impl* impl = impl_.get();
  const absl::Time deadline = DeadlineOf(ctx);
  return Routed(impl, ctx, "DeletePayload", WorkClass::kWrite, [impl, req, resp, deadline] {
    if (req->ids().empty()) return absl::InvalidArgumentError("no ids to delete fields of");
    ZOOM_ASSIGN_OR_RETURN(VersionedShardMap vm, impl->MapOf(req->collection()));
    std::vector<std::string> keys(req->keys().begin(), req->keys().end());
    size_t extra = 0;
    for (const std::string& k : keys) extra += 4 + k.size();
    google::protobuf::RepeatedPtrField<v1::WriteToken> tokens;
    ZOOM_RETURN_IF_ERROR(impl->PublishByIds(
        vm.map, req->ids(), extra,
        [&](std::vector<uint64_t> ids) {
          cluster::LogEntry e;
          e.op = cluster::LogOp::kDeletePayload;
          e.ids = std::move(ids);
          e.keys = keys;
          return e;
        },
        &tokens, deadline));
    resp->set_updated(req->ids_size());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* RouterService::CreateFieldIndex(grpc::CallbackServerContext* ctx,
                                                          const v1::CreateFieldIndexRequest* req,
                                                          v1::CreateFieldIndexResponse* resp) {
  Impl* impl = impl_.get();
  const absl::Time deadline = impl->DeadlineFor(ctx);
  return Routed(impl, ctx, "CreateFieldIndex", WorkClass::kAdmin,
                [impl, ctx, req, resp, deadline] {
    ZOOM_ASSIGN_OR_RETURN(VersionedShardMap vm, impl->MapOf(req->collection()));
    ZOOM_ASSIGN_OR_RETURN(FieldIndexType type, FieldIndexTypeFromProto(req->type()));
    ZOOM_RETURN_IF_ERROR(ValidateFieldIndexName(req->field()));
    // What a replica would refuse must not enter the log: another type on
    // the field (checked against the indexes now).
    v1::CollectionInfo now;
    ZOOM_RETURN_IF_ERROR(impl->Info(vm, deadline, *ctx, &now));
    for (const v1::FieldIndexInfo& f : now.field_indexes()) {
      if (f.field() == req->field() && f.type() != req->type()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "field '", req->field().substr(0, 64), "' has an index of another type; delete it "
            "first"));
      }
    }
    cluster::LogEntry e;
    e.op = cluster::LogOp::kCreateFieldIndex;
    e.field = req->field();
    e.index_type = type;
    ZOOM_RETURN_IF_ERROR(impl->PublishToAll(vm.map, e, deadline));
    *resp->mutable_info() = impl->InfoOf(vm.map);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* RouterService::DeleteFieldIndex(grpc::CallbackServerContext* ctx,
                                                          const v1::DeleteFieldIndexRequest* req,
                                                          v1::DeleteFieldIndexResponse* resp) {
  Impl* impl = impl_.get();
  const absl::Time deadline = impl->DeadlineFor(ctx);
  return Routed(impl, ctx, "DeleteFieldIndex", WorkClass::kAdmin,
                [impl, ctx, req, resp, deadline] {
    ZOOM_ASSIGN_OR_RETURN(VersionedShardMap vm, impl->MapOf(req->collection()));
    ZOOM_RETURN_IF_ERROR(ValidateFieldIndexName(req->field()));
    v1::CollectionInfo now;
    ZOOM_RETURN_IF_ERROR(impl->Info(vm, deadline, *ctx, &now));
    bool found = false;
    for (const v1::FieldIndexInfo& f : now.field_indexes()) found = found || f.field() == req->field();
    if (!found) {
      return absl::NotFoundError(
          absl::StrCat("collection ", req->collection(), " has no index of field '",
                       req->field().substr(0, 64), "'"));
    }
    cluster::LogEntry e;
    e.op = cluster::LogOp::kDeleteFieldIndex;
    e.field = req->field();
    ZOOM_RETURN_IF_ERROR(impl->PublishToAll(vm.map, e, deadline));
    *resp->mutable_info() = impl->InfoOf(vm.map);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* RouterService::Get(grpc::CallbackServerContext* ctx,
                                             const v1::GetRequest* req, v1::GetResponse* resp) {
  Impl* impl = impl_.get();
  const absl::Time deadline = impl->DeadlineFor(ctx);
  return Routed(impl, ctx, "Get", WorkClass::kRead, [impl, ctx, req, resp, deadline] {
    if (req->ids_size() > static_cast<int>(impl->opt.limits.max_ids)) {
      return absl::InvalidArgumentError(absl::StrCat(req->ids_size(), " ids; at most ",
                                                     impl->opt.limits.max_ids, " per call"));
    }
    ZOOM_ASSIGN_OR_RETURN(VersionedShardMap vm, impl->MapOf(req->collection()));
    const ShardMap& m = vm.map;
    auto t = impl->Topo();
    std::vector<ShardCall<v1::GetRequest, v1::GetResponse>> calls;
    for (auto& [k, ids] : Impl::ByShard(req->ids(), m.shards)) {
      ShardCall<v1::GetRequest, v1::GetResponse> sc;
      sc.shard = k;
      sc.req = *req;
      sc.req.set_collection(m.LocalName(k));
      sc.req.mutable_ids()->Assign(ids.begin(), ids.end());
      sc.candidates = impl->Candidates(*t, m, k, true, 0);
      calls.push_back(std::move(sc));
    }
    ZOOM_RETURN_IF_ERROR((impl->FanOut<v1::GetRequest, v1::GetResponse>(
        m.uid, calls, deadline, *ctx, impl->opt.hedge,
        [](v1::VectorSearch::Stub* s, grpc::ClientContext* c, const v1::GetRequest* q,
           v1::GetResponse* r, std::function<void(grpc::Status)> f) {
          s->async()->Get(c, q, r, std::move(f));
        })));
    std::map<uint64_t, v1::Point*> found;
    for (auto& sc : calls) {
      if (!sc.answered) return impl->Uncovered(m.collection, calls, m.shards, deadline);
      for (v1::Point& p : *sc.answer.mutable_points()) found[p.id()] = &p;
    }
    for (uint64_t id : req->ids()) {
      auto it = found.find(id);
      if (it != found.end()) *resp->add_points() = *it->second;
    }
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* RouterService::Search(grpc::CallbackServerContext* ctx,
                                                const v1::SearchRequest* req,
                                                v1::SearchResponse* resp) {
  Impl* impl = impl_.get();
  const absl::Time deadline = impl->DeadlineFor(ctx);
  return Routed(impl, ctx, "Search", WorkClass::kRead, [impl, ctx, req, resp, deadline] {
    return impl->Search(*req, deadline, *ctx, resp);
  });
}

grpc::ServerUnaryReactor* RouterService::SearchBatch(grpc::CallbackServerContext* ctx,
                                                     const v1::SearchBatchRequest* req,
                                                     v1::SearchBatchResponse* resp) {
  Impl* impl = impl_.get();
  const absl::Time deadline = impl->DeadlineFor(ctx);
  return Routed(impl, ctx, "SearchBatch", WorkClass::kRead, [impl, ctx, req, resp, deadline] {
    if (req->queries().empty()) return absl::InvalidArgumentError("the batch has no queries");
    if (req->queries_size() > static_cast<int>(impl->opt.limits.max_batch)) {
      return absl::InvalidArgumentError(absl::StrCat("the batch has ", req->queries_size(),
                                                     " queries; at most ",
                                                     impl->opt.limits.max_batch));
    }
    // Query by query, each fanned out (a shard's SearchBatch would be one
    // call a shard; left for when it is measured to matter).
    for (int i = 0; i < req->queries_size(); ++i) {
      v1::SearchRequest q = req->queries(i);
      q.set_collection(req->collection());
      absl::Status st = impl->Search(q, deadline, *ctx, resp->add_results());
      if (!st.ok()) return absl::Status(st.code(), absl::StrCat("query #", i, ": ", st.message()));
    }
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* RouterService::Count(grpc::CallbackServerContext* ctx,
                                               const v1::CountRequest* req,
                                               v1::CountResponse* resp) {
  Impl* impl = impl_.get();
  const absl::Time deadline = impl->DeadlineFor(ctx);
  return Routed(impl, ctx, "Count", WorkClass::kRead, [impl, ctx, req, resp, deadline] {
    return impl->Count(*req, deadline, *ctx, resp);
  });
}

grpc::ServerUnaryReactor* RouterService::BuildIndex(grpc::CallbackServerContext* ctx,
                                                    const v1::BuildIndexRequest* req,
                                                    v1::BuildIndexResponse* resp) {
  Impl* impl = impl_.get();
  const absl::Time deadline = impl->DeadlineFor(ctx);
  return Routed(impl, ctx, "BuildIndex", WorkClass::kAdmin, [impl, ctx, req, resp, deadline] {
    ZOOM_ASSIGN_OR_RETURN(VersionedShardMap vm, impl->MapOf(req->collection()));
    const ShardMap& m = vm.map;
    auto t = impl->Topo();
    // Every live replica builds its own index: one call each, no failover;
    // each first applies its shard's log as far as it is now (a build asked
    // after an import covers it).
    google::protobuf::RepeatedPtrField<v1::WriteToken> heads;
    for (uint32_t k = 0; k < m.shards; ++k) {
      ZOOM_ASSIGN_OR_RETURN(
          uint64_t head,
          impl->js->LastSequence(cluster::StreamName(impl->opt.catalog.cluster, m.collection),
                                 cluster::ShardSubject(impl->opt.catalog.cluster, m.collection,
                                                       k)));
      v1::WriteToken* tok = heads.Add();
      tok->set_shard(k);
      tok->set_sequence(head);
    }
    std::vector<ShardCall<v1::BuildIndexRequest, v1::BuildIndexResponse>> calls;
    for (uint32_t k = 0; k < m.shards; ++k) {
      for (const Candidate& c : impl->Candidates(*t, m, k, false, 0)) {
        ShardCall<v1::BuildIndexRequest, v1::BuildIndexResponse> sc;
        sc.shard = k;
        sc.req = *req;
        *sc.req.mutable_after() = heads;
        sc.req.set_collection(m.LocalName(k));
        sc.candidates = {c};
        calls.push_back(std::move(sc));
      }
    }
    absl::Status st = impl->FanOut<v1::BuildIndexRequest, v1::BuildIndexResponse>(
        m.uid, calls, deadline, *ctx, false,
        [](v1::VectorSearch::Stub* s, grpc::ClientContext* c, const v1::BuildIndexRequest* q,
           v1::BuildIndexResponse* r, std::function<void(grpc::Status)> f) {
          s->async()->BuildIndex(c, q, r, std::move(f));
        });
    ZOOM_RETURN_IF_ERROR(st);
    std::vector<std::string> failed;
    bool refused = false;  // a replica's FAILED_PRECONDITION (too few points): the caller's
    for (const auto& sc : calls) {
      if (sc.answered) continue;
      failed.push_back(absl::StrCat("shard ", sc.shard, " (", sc.last_error, ")"));
      refused = refused || sc.last_code == grpc::StatusCode::FAILED_PRECONDITION;
    }
    if (!failed.empty()) {
      const std::string msg = absl::StrCat(
          "collection ", m.collection, ": the build did not start on ",
          absl::StrJoin(failed, "; "),
          ". A replica builds over what it has applied: writes just acknowledged may not be "
          "there yet");
      return refused ? absl::FailedPreconditionError(msg) : absl::UnavailableError(msg);
    }
    return impl->Info(vm, deadline, *ctx, resp->mutable_info());
  });
}

grpc::ServerUnaryReactor* RouterService::Scroll(grpc::CallbackServerContext* ctx,
                                                const v1::ScrollRequest* req,
                                                v1::ScrollResponse* resp) {
  Impl* impl = impl_.get();
  const absl::Time deadline = impl->DeadlineFor(ctx);
  return Routed(impl, ctx, "Scroll", WorkClass::kRead, [impl, ctx, req, resp, deadline] {
    return impl->Scroll(*req, deadline, *ctx, resp);
  });
}

grpc::ServerUnaryReactor* RouterService::Compact(grpc::CallbackServerContext* ctx,
                                                 const v1::CompactRequest* req,
                                                 v1::CompactResponse* resp) {
  Impl* impl = impl_.get();
  const absl::Time deadline = impl->DeadlineFor(ctx);
  return Routed(impl, ctx, "Compact", WorkClass::kAdmin, [impl, ctx, req, resp, deadline] {
    ZOOM_ASSIGN_OR_RETURN(VersionedShardMap vm, impl->MapOf(req->collection()));
    const ShardMap& m = vm.map;
    auto t = impl->Topo();
    // A compaction is a replica's own (its files, not its contents): every
    // live replica compacts, one call each.
    std::vector<ShardCall<v1::CompactRequest, v1::CompactResponse>> calls;
    for (uint32_t k = 0; k < m.shards; ++k) {
      for (const Candidate& c : impl->Candidates(*t, m, k, false, 0)) {
        ShardCall<v1::CompactRequest, v1::CompactResponse> sc;
        sc.shard = k;
        sc.req.set_collection(m.LocalName(k));
        sc.candidates = {c};
        calls.push_back(std::move(sc));
      }
    }
    ZOOM_RETURN_IF_ERROR((impl->FanOut<v1::CompactRequest, v1::CompactResponse>(
        m.uid, calls, deadline, *ctx, false,
        [](v1::VectorSearch::Stub* s, grpc::ClientContext* c, const v1::CompactRequest* q,
           v1::CompactResponse* r, std::function<void(grpc::Status)> f) {
          s->async()->Compact(c, q, r, std::move(f));
        })));
    std::vector<std::string> failed;
    for (const auto& sc : calls) {
      if (!sc.answered) {
        failed.push_back(absl::StrCat("shard ", sc.shard, " (", sc.last_error, ")"));
      }
    }
    if (!failed.empty()) {
      return absl::UnavailableError(absl::StrCat("collection ", m.collection,
                                                 ": the compaction failed on ",
                                                 absl::StrJoin(failed, "; "),
                                                 " (the others compacted; asking again is safe)"));
    }
    return impl->Info(vm, deadline, *ctx, resp->mutable_info());
  });
}

grpc::ServerUnaryReactor* RouterService::CreateSnapshot(grpc::CallbackServerContext*,
                                                        const v1::CreateSnapshotRequest*,
                                                        v1::CreateSnapshotResponse*) {
  return NotRouted(impl_.get(), "CreateSnapshot",
                   "the stream and the replicas are the backup; snapshot a replica on its node");
}

// ---- RouterDecoderService ---------------------------------------------------

WorkerPool* RouterDecoderService::pool() const { return impl_->pool; }
const Authenticator* RouterDecoderService::auth() const { return impl_->auth; }
void RouterDecoderService::Record(const char* rpc, const absl::Status& status,
                                  double seconds) const {
  impl_->Record(rpc, status, seconds);
}

absl::Status RouterDecoderService::Decode(const v1::TopKRequest& req, const CallContext& call,
                                          const grpc::ServerContextBase& ctx,
                                          v1::TopKResponse* resp) const {
  absl::Time deadline = call.deadline;
  if (deadline == absl::InfiniteFuture()) deadline = absl::Now() + impl_->opt.default_deadline;
  return impl_->TopK(req, deadline, ctx, resp);
}

grpc::ServerUnaryReactor* RouterDecoderService::LoadModel(grpc::CallbackServerContext* ctx,
                                                          const v1::LoadModelRequest* req,
                                                          v1::LoadModelResponse* resp) {
  RouterService::Impl* impl = impl_;
  // A load takes minutes for a large vocabulary: without a client deadline
  // the wait is bounded at an hour.
  absl::Time deadline = DeadlineOf(ctx);
  if (deadline == absl::InfiniteFuture()) deadline = absl::Now() + absl::Hours(1);
  return Routed(impl, ctx, "LoadModel", WorkClass::kAdmin, [impl, ctx, req, resp, deadline] {
    cluster::ModelSpec spec;
    spec.name = req->name();
    spec.dir = req->dir();
    spec.m = req->m();
    spec.ef_construction = req->ef_construction();
    spec.default_ef = req->default_ef();
    ZOOM_ASSIGN_OR_RETURN(cluster::ModelSpec added, impl->catalog->AddModel(spec));
    if (!req->wait()) {
      *resp->mutable_info() = RouterService::Impl::Best(added, {});
      return absl::OkStatus();
    }
    // Until every live node serves it, or one failed to load it.
    for (;;) {
      (void)impl->Refresh();
      auto t = impl->Topo();
      if (t->nodes.empty()) {
        return absl::UnavailableError(absl::StrCat("cluster ", impl->opt.catalog.cluster,
                                                   " has no live node to load model ",
                                                   spec.name, " (it stays recorded)"));
      }
      bool all = true;
      std::string failed_on;
      for (const auto& [id, n] : t->nodes) {
        bool serving = false;
        for (const cluster::HostedModel& h : n.models) {
          if (h.name != spec.name) continue;
          serving = h.state == cluster::ModelLoadState::kServing;
          if (h.state == cluster::ModelLoadState::kFailed) failed_on = id;
        }
        all = all && serving;
      }
      if (all || !failed_on.empty()) {
        const auto nodes = impl->NodeModels(absl::Now() + absl::Seconds(10), *ctx);
        if (failed_on.empty()) {
          *resp->mutable_info() = RouterService::Impl::Best(added, nodes);
          return absl::OkStatus();
        }
        // Nothing half-loaded behind a failed wait (as on a single zoomd).
        (void)impl->catalog->RemoveModel(spec.name);
        std::string why = "it was refused there (its log says why)";
        auto it = nodes.find(failed_on);
        if (it != nodes.end()) {
          for (const v1::ModelInfo& info : it->second.models()) {
            if (info.name() == spec.name && !info.error().empty()) why = info.error();
          }
        }
        return absl::FailedPreconditionError(absl::StrCat(
            "model ", spec.name, " did not load on node ", failed_on, ": ", why,
            ". It was removed from the cluster: every node needs the model's files under "
            "its --models_dir, as '", spec.dir.substr(0, 256), "'"));
      }
      if (absl::Now() + absl::Milliseconds(100) >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat(
            "model ", spec.name, " is still loading on some nodes; it stays recorded and "
            "loads on (ListModels says when it serves)"));
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
  });
}

grpc::ServerUnaryReactor* RouterDecoderService::UnloadModel(grpc::CallbackServerContext* ctx,
                                                            const v1::UnloadModelRequest* req,
                                                            v1::UnloadModelResponse*) {
  RouterService::Impl* impl = impl_;
  return Routed(impl, ctx, "UnloadModel", WorkClass::kAdmin,
                [impl, req] { return impl->catalog->RemoveModel(req->name()); });
}

grpc::ServerUnaryReactor* RouterDecoderService::ListModels(grpc::CallbackServerContext* ctx,
                                                           const v1::ListModelsRequest*,
                                                           v1::ListModelsResponse* resp) {
  RouterService::Impl* impl = impl_;
  const absl::Time deadline = impl->DeadlineFor(ctx);
  return Routed(impl, ctx, "ListModels", WorkClass::kRead, [impl, ctx, resp, deadline] {
    ZOOM_ASSIGN_OR_RETURN(std::vector<cluster::ModelSpec> specs, impl->catalog->ListModels());
    const auto nodes = impl->NodeModels(deadline, *ctx);
    for (const cluster::ModelSpec& spec : specs) {
      *resp->add_models() = RouterService::Impl::Best(spec, nodes);
    }
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* RouterDecoderService::TopK(grpc::CallbackServerContext* ctx,
                                                     const v1::TopKRequest* req,
                                                     v1::TopKResponse* resp) {
  RouterService::Impl* impl = impl_;
  const absl::Time deadline = impl->DeadlineFor(ctx);
  return Routed(impl, ctx, "TopK", WorkClass::kRead, [impl, ctx, req, resp, deadline] {
    return impl->TopK(*req, deadline, *ctx, resp);
  });
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* RouterDecoderService::StreamTopK(
    grpc::CallbackServerContext* ctx) {
  return NewStreamTopK(this, ctx);
}

}  // namespace zoom::server
