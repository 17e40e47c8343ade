#include "server/grpc/zoom_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <climits>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/timer.h"
#include "common/binary_io.h"
#include "server/grpc/parse_errors.h"
#include "server/grpc/reflection_service.h"

namespace zoom::server {
namespace {

// "127.0.0.1:50051", "localhost:1", "[::1]:9" (and "unix:..." sockets) are
// reachable from this host only.
bool IsLoopbackAddress(const std::string& address) {
  if (address.rfind("unix:", 0) == 0) return true;
  std::string host = address;
  if (!host.empty() && host.front() == '[') {
    host = host.substr(1, host.find(']') - 1);
  } else if (const size_t colon = host.rfind(':'); colon != std::string::npos) {
    host = host.substr(0, colon);
  }
  if (host == "localhost") return true;
  // Numeric addresses only (a name like 127.example.com is not loopback).
  in_addr v4;
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6;
  return inet_pton(AF_INET6, host.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
}

}  // namespace

absl::StatusOr<ServerRole> ParseServerRole(absl::string_view name) {
  if (name.empty() || name == "standalone") return ServerRole::kStandalone;
  if (name == "node") return ServerRole::kNode;
  if (name == "router") return ServerRole::kRouter;
  return absl::InvalidArgumentError(absl::StrCat(
      "--role must be node or router (or empty: a standalone zoomd), not '",
      name.substr(0, 64), "'"));
}

const char* ServerRoleName(ServerRole role) {
  switch (role) {
    case ServerRole::kStandalone: return "standalone";
    case ServerRole::kNode: return "node";
    case ServerRole::kRouter: return "router";
  }
  return "unknown";
}

ZoomServer::ZoomServer(const ServerOptions& options) : options_(options) {}

ZoomServer::~ZoomServer() { Shutdown(absl::Seconds(1)); }

absl::Status ZoomServer::Start() {
  if (started_) return absl::FailedPreconditionError("already started");
  if (options_.threads < 1) return absl::InvalidArgumentError("threads must be at least 1");
  const ServerRole role = options_.cluster.role;
  if (role != ServerRole::kStandalone && options_.cluster.nats.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--role=", ServerRoleName(role),
                                                   " needs the cluster's NATS servers (--nats "
                                                   "nats://host:4222,...)"));
  }
  auth_ = std::make_unique<Authenticator>(options_.api_key_file);
  ZOOM_RETURN_IF_ERROR(auth_->Load());
  if (options_.require_key_off_loopback && !auth_->enabled() &&
      !IsLoopbackAddress(options_.grpc_address)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "refusing to serve ", options_.grpc_address,
        " without API keys: give --api_key_file (see docs/operations.md, \"Security\"), listen on "
        "127.0.0.1, or pass --allow_unauthenticated to run open"));
  }
  if (options_.metrics_require_key && !auth_->enabled()) {
    return absl::InvalidArgumentError("--metrics_require_key needs --api_key_file");
  }
  std::function<bool(std::string_view)> metrics_auth;
  if (options_.metrics_require_key) {
    const Authenticator* auth = auth_.get();
    metrics_auth = [auth](std::string_view header) {
      return auth->AuthorizeHeader(header, Role::kAdmin).ok();
    };
  }
  ZOOM_ASSIGN_OR_RETURN(metrics_, Metrics::Create(options_.metrics_address, metrics_auth));
  metrics_->SetBuildInfo(options_.version);

  WorkerPoolOptions pool_options = WorkerPoolOptions::ForServer(
      role == ServerRole::kRouter ? std::max(options_.threads, options_.cluster.router_threads)
                                  : options_.threads);
  if (options_.max_queued_reads > 0) pool_options.limits[0].max_queued_units = options_.max_queued_reads;
  if (options_.max_queued_writes > 0) pool_options.limits[1].max_queued_units = options_.max_queued_writes;
  if (options_.max_queued_admin > 0) pool_options.limits[2].max_queued_units = options_.max_queued_admin;
  pool_options.initial_unit_time = options_.initial_unit_time;
  pool_options.max_inline = std::max(0, options_.max_inline_reads);
  pool_ = std::make_unique<WorkerPool>(pool_options);
  options_.limits.max_response_bytes =
      std::min<uint64_t>(options_.limits.max_response_bytes,
                         static_cast<uint64_t>(std::max(options_.max_message_bytes, 1 << 20)) - (64 << 10));
  grpc::ServerBuilder builder;
  std::shared_ptr<grpc::ServerCredentials> creds;
  ZOOM_ASSIGN_OR_RETURN(creds, ServerCredentials());
  // Connections (ServerOptions::Connections, connection_gate.h): a host:port
  // address is zoomd's own listener, its connections handed to gRPC.
  std::string listen_host;
  int listen_port = 0;
  std::string limit_notes;
  const ConnectionGate::Limits limits = ConnectionGate::Resolve(
      {.fd_reserve = options_.connections.fd_reserve,
       .max_connections = options_.connections.max_connections,
       .max_connections_per_peer = options_.connections.max_connections_per_peer,
       .handshake_timeout = options_.connections.handshake_timeout},
      &limit_notes);
  const bool gated =
      ConnectionGate::SplitHostPort(options_.grpc_address, &listen_host, &listen_port);
  std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> acceptor;
  if (gated) {
    acceptor = builder.experimental().AddExternalConnectionAcceptor(
        grpc::ServerBuilder::experimental_type::ExternalConnectionType::FROM_FD, creds);
  } else {
    builder.AddListeningPort(options_.grpc_address, creds, &grpc_port_);
  }
  {
    const ServerOptions::Connections& c = options_.connections;
    // Milliseconds for a channel argument; `off` for an infinite or
    // non-positive duration.
    auto ms = [](absl::Duration d, int off) {
      if (d == absl::InfiniteDuration() || d <= absl::ZeroDuration()) return off;
      return static_cast<int>(std::clamp<int64_t>(absl::ToInt64Milliseconds(d), 1, INT_MAX));
    };
    builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                               ms(c.handshake_timeout, 120000));
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, ms(c.max_connection_idle, INT_MAX));
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS, ms(c.max_connection_age, INT_MAX));
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, ms(c.keepalive_time, INT_MAX));
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, ms(c.keepalive_timeout, 20000));
    builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                               ms(c.min_ping_interval, 0));
    builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, std::max(0, c.max_ping_strikes));
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS,
                               c.permit_without_calls ? 1 : 0);
  }
  builder.SetMaxReceiveMessageSize(options_.max_message_bytes);
  builder.SetMaxSendMessageSize(options_.max_message_bytes);
  {
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> creators;
    Metrics* metrics = metrics_.get();
    creators.push_back(std::make_unique<ParseErrorInterceptorFactory>(
        [metrics](const std::string& method) {
          metrics->RecordRpc(method, absl::StatusCode::kInvalidArgument, 0);
        }));
    builder.experimental().SetInterceptorCreators(std::move(creators));
  }
  Stopwatch sw;
  std::string backend_note = "none (a router holds no data)";
  if (role == ServerRole::kRouter) {
    ZOOM_RETURN_IF_ERROR(StartRouter(builder));
  } else {
    ZOOM_RETURN_IF_ERROR(StartLocal(builder, &backend_note));
  }
  // Health and both reflection versions are zoomd's own (gRPC's default
  // health service stays off: EnableDefaultHealthCheckService is never
  // called), so that a message that does not parse is INVALID_ARGUMENT.
  health_ = std::make_unique<HealthService>(
      std::vector<std::string>{"", "zoom.v1.VectorSearch", "zoom.v1.Decoder"});
  builder.RegisterService(health_.get());
  reflection_ = std::make_unique<ReflectionService>(std::vector<std::string>{
      "zoom.v1.VectorSearch", "zoom.v1.Decoder", "grpc.health.v1.Health",
      "grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection"},
      auth_.get());
  builder.RegisterService(reflection_->v1());
  builder.RegisterService(reflection_->v1alpha());
  if (gated) {
    // Bound only now: the port opens once every collection is recovered.
    auto gate = std::make_unique<ConnectionGate>(limits);
    if (absl::Status st = gate->Listen(options_.grpc_address, listen_host, listen_port);
        !st.ok()) {
      ReleaseServices();
      db_.reset();
      return absl::Status(st.code(), absl::StrCat(st.message(),
                                                  " (address in use or not local? set "
                                                  "--grpc_address)"));
    }
    gate_ = std::move(gate);
  }
  server_ = builder.BuildAndStart();
  if (gate_ != nullptr && server_ != nullptr) {
    if (gate_->Start(std::move(acceptor)).ok()) grpc_port_ = gate_->port();
  }
  if (server_ == nullptr || grpc_port_ == 0) {
    gate_.reset();
    if (server_ != nullptr) {
      server_->Shutdown(absl::ToChronoTime(absl::Now()));
      server_->Wait();
      server_.reset();
    }
    ReleaseServices();
    db_.reset();
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", options_.grpc_address,
        " (address in use or not local? set --grpc_address)"));
  }
  bool join_later = false;
  if (role == ServerRole::kNode) {
    // Listening first: peers fetch snapshots from us, routers reach us.
    if (absl::Status st = JoinCluster(); absl::IsUnavailable(st) || absl::IsDeadlineExceeded(st)) {
      ZOOM_LOG(WARNING, "cluster ", options_.cluster.name, ": node ", options_.cluster.node_id,
               " cannot join yet (", st.message(), "): serving the replicas it holds, at the "
               "positions they reached, and joining when JetStream answers");
      join_later = true;
    } else if (!st.ok()) {
      if (gate_ != nullptr) gate_->Stop();
      server_->Shutdown(absl::ToChronoTime(absl::Now()));
      server_->Wait();
      pool_->Stop();
      service_.reset();
      backend_.reset();
      decoder_service_.reset();
      decoder_.reset();
      db_.reset();
      server_.reset();
      return st;
    }
  }
  // "" (the process, what a liveness probe asks) serves now; a node's
  // services once it has joined its cluster (KeepJoining, if not yet).
  health_->SetServingStatus("", true);
  const bool member = role != ServerRole::kNode || joined_.load() != nullptr;
  health_->SetServingStatus("zoom.v1.VectorSearch", member);
  health_->SetServingStatus("zoom.v1.Decoder", member);
  if (join_later) joiner_ = std::thread([this] { KeepJoining(); });  // after: it sets them
  if (service_ != nullptr) service_->RefreshCollectionMetrics();
  if (db_ != nullptr) {
    housekeeping_ = std::thread([this] { Housekeeping(); });
  }
  started_ = true;
  {
    const ServerOptions::Connections& c = options_.connections;
    auto dur = [](absl::Duration d) {
      return d == absl::InfiniteDuration() || d <= absl::ZeroDuration() ? std::string("never")
                                                                         : absl::FormatDuration(d);
    };
    ZOOM_LOG(INFO, "connections: ",
             gate_ == nullptr
                 ? absl::StrCat(options_.grpc_address,
                                " is gRPC's own listener: no connection caps")
                 : absl::StrCat("RLIMIT_NOFILE ", limits.fd_limit, " (hard ", limits.fd_hard_limit,
                                "), fd reserve ", limits.fd_reserve, ", at most ",
                                limits.max_connections, " open, ", limits.max_per_peer,
                                " per client address (one holding none may use half the "
                                "reserve)", limit_notes),
             "; handshake timeout ", dur(c.handshake_timeout), ", idle connections closed after ",
             dur(c.max_connection_idle), ", any after ", dur(c.max_connection_age),
             "; keepalive pings every ", dur(c.keepalive_time), " (timeout ",
             dur(c.keepalive_timeout), "); clients' pings at least ", dur(c.min_ping_interval),
             " apart", c.permit_without_calls ? "" : " (without calls: 2h)", ", ",
             c.max_ping_strikes, " strikes");
  }
  ZOOM_LOG(INFO, "zoomd ", options_.version, role == ServerRole::kStandalone
                                   ? ""
                                   : absl::StrCat(" (", ServerRoleName(role), " of cluster ",
                                                  options_.cluster.name, ")"),
           " serving on ", options_.grpc_address, " (port ",
           grpc_port_, "), metrics on ",
           options_.metrics_address.empty() ? std::string("(off)")
                                            : absl::StrCat(options_.metrics_address, " (port ",
                                                           metrics_->port(), ")"),
           db_ == nullptr ? std::string() : absl::StrCat(", data dir ", options_.database.data_dir),
           ", io backend ", backend_note,
           ", kernels ", server::Database::KernelChoices(),
           ", sync ", options_.database.sync_always ? "always" : "batch",
           options_.database.collection.snapshot_key == nullptr
               ? std::string(", snapshots unsigned")
               : absl::StrCat(", snapshots signed (key ",
                              options_.database.collection.snapshot_key->id, ")"),
           ", ", options_.threads, " workers, ", db_ == nullptr ? 0 : db_->ListCollections().size(),
           " collections loaded in ", static_cast<int64_t>(sw.ElapsedMicros() / 1000), " ms");
  return absl::OkStatus();
}

absl::Status ZoomServer::StartLocal(grpc::ServerBuilder& builder, std::string* io_note) {
  // Every collection is recovered before the port opens, so a health check
  // that gets an answer sees SERVING only with all collections loaded.
  // The maintenance tick runs on the database's job runner.
  DatabaseOptions db_options = options_.database;
  db_options.maintenance_interval = options_.maintenance_interval;
  // A node's replicas are copies: a damaged one is set aside and made again
  // from a peer, not a reason to stay down.
  if (options_.cluster.role == ServerRole::kNode) {
    // A node's replicas have copies on peers: damage found at the open
    // (a vector file's every record checked) sets the replica aside and the
    // node makes it again from a peer (Database::Open).
    db_options.quarantine_damaged = true;
    db_options.collection.store.verify_on_open = true;
  }
  ZOOM_ASSIGN_OR_RETURN(db_, Database::Open(db_options));
  // What the collections' readers use (a fallback to pread included), said
  // in the start line: a container's seccomp profile refusing io_uring is
  // the usual reason (deploy/README.md).
  const IoBackendInfo backend = db_->IoBackendInUse();
  {
    absl::MutexLock l(&io_backend_mu_);
    io_backend_ = backend.name;
  }
  metrics_->SetIoBackend(backend.name);
  *io_note =
      backend.note.empty() ? backend.name : absl::StrCat(backend.name, " (", backend.note, ")");
  if (options_.cluster.role == ServerRole::kNode) {
    api::NodeOptions node;
    node.cluster = options_.cluster.name;
    node.node = options_.cluster.node_id;
    node.max_session_wait = options_.cluster.max_session_wait;
    node.wait_applied = [this](const std::string& collection,
                               const std::vector<api::WriteToken>& t, absl::Time deadline) {
      return WaitApplied(collection, t, deadline);
    };
    backend_ = std::make_unique<api::NodeBackend>(db_.get(), options_.limits, std::move(node));
  } else {
    backend_ = std::make_unique<api::LocalBackend>(db_.get(), options_.limits);
  }
  service_ = std::make_unique<VectorSearchService>(backend_.get(), metrics_.get(), pool_.get(),
                                                   options_.limits, auth_.get());
  service_->SetServerVersion(options_.version);
  builder.RegisterService(service_.get());
  DecoderOptions decoder_options;
  decoder_options.cache_dir = options_.database.data_dir + "/models";
  decoder_options.build_threads = options_.database.collection.build_threads;
  decoder_options.models_dir = options_.models_dir;
  decoder_options.max_models = options_.max_models;
  decoder_options.max_model_bytes = options_.max_model_bytes;
  decoder_options.limits = options_.decoder_limits;
  decoder_ = std::make_unique<DecoderEngine>(decoder_options);
  for (const auto& [name, dir] : options_.models) {
    auto model = decoder_->Load(name, dir, index::FgdOptions());
    absl::Status st = model.ok() ? decoder_->Wait(*model) : model.status();
    if (!st.ok()) return absl::Status(st.code(), absl::StrCat("model ", name, ": ", st.message()));
  }
  decoder_service_ =
      std::make_unique<DecoderService>(decoder_.get(), metrics_.get(), pool_.get(), auth_.get());
  if (options_.cluster.role == ServerRole::kNode) decoder_service_->SetClusterNode(options_.cluster.name);
  builder.RegisterService(decoder_service_.get());
  return absl::OkStatus();
}

absl::Status ZoomServer::StartRouter(grpc::ServerBuilder& builder) {
  router::RouterOptions ro = options_.cluster.router;
  ro.catalog.cluster = options_.cluster.name;
  ro.catalog.nats_replicas = options_.cluster.nats_replicas;
  ro.catalog.node_ttl = options_.cluster.node_ttl;
  ro.nats.servers = options_.cluster.nats;
  Metrics* metrics = metrics_.get();
  router::RouterHooks hooks;
  hooks.event = [metrics](router::RouterEvent e) {
    switch (e) {
      case router::RouterEvent::kHedge:
        return metrics->RecordRouterEvent(Metrics::RouterEvent::kHedge);
      case router::RouterEvent::kFailover:
        return metrics->RecordRouterEvent(Metrics::RouterEvent::kFailover);
      case router::RouterEvent::kPartial:
        return metrics->RecordRouterEvent(Metrics::RouterEvent::kPartial);
      case router::RouterEvent::kUnavailable:
        return metrics->RecordRouterEvent(Metrics::RouterEvent::kUnavailable);
      case router::RouterEvent::kMapRefresh:
        return metrics->RecordRouterEvent(Metrics::RouterEvent::kMapRefresh);
      case router::RouterEvent::kConcernUnmet:
        return metrics->RecordRouterEvent(Metrics::RouterEvent::kConcernUnmet);
      case router::RouterEvent::kLogDivergence:
        return metrics->RecordRouterEvent(Metrics::RouterEvent::kLogDivergence);
    }
  };
  hooks.live_nodes = [metrics](int n) { metrics->SetRouterLiveNodes(n); };
  ZOOM_ASSIGN_OR_RETURN(router_, router::RouterCore::Create(ro, std::move(hooks)));
  router::ClusterBackend::Defaults defaults;
  defaults.max_dim = options_.database.max_dim;
  defaults.max_cache_bytes = options_.database.collection.max_cache_bytes;
  defaults.default_target_recall = options_.database.collection.default_target_recall;
  defaults.snapshot_store = options_.database;
  backend_ = std::make_unique<router::ClusterBackend>(router_.get(), options_.limits, defaults);
  service_ = std::make_unique<VectorSearchService>(backend_.get(), metrics_.get(), pool_.get(),
                                                   options_.limits, auth_.get());
  service_->SetServerVersion(options_.version);
  builder.RegisterService(service_.get());
  model_router_ = std::make_unique<router::ModelRouter>(router_.get(), options_.decoder_limits);
  router_decoder_ = std::make_unique<RouterDecoderService>(
      model_router_.get(), ro.default_deadline, metrics_.get(), pool_.get(), auth_.get());
  builder.RegisterService(router_decoder_.get());
  return absl::OkStatus();
}

void ZoomServer::ReleaseServices() {
  router_decoder_.reset();
  service_.reset();
  backend_.reset();
  model_router_.reset();
  router_.reset();
}

absl::Status ZoomServer::JoinCluster() {
  cluster::ClusterNodeOptions o;
  o.catalog.cluster = options_.cluster.name;
  o.catalog.nats_replicas = options_.cluster.nats_replicas;
  o.catalog.node_ttl = options_.cluster.node_ttl;
  o.nats.servers = options_.cluster.nats;
  o.node_id = options_.cluster.node_id;
  o.heartbeat = options_.cluster.heartbeat;
  o.log_trim = options_.cluster.log_trim;
  o.log_hold = options_.cluster.log_hold;
  o.rereplicate_after = options_.cluster.rereplicate_after;
  o.decoder = decoder_.get();
  o.fetch_snapshot = options_.cluster.fetch_snapshot;
  o.replica.on_fork = [metrics = metrics_.get()](const cluster::LogRepairResult* repaired,
                                                 const std::string&) {
    if (repaired == nullptr) return metrics->RecordLogRepair(Metrics::LogRepairEvent::kFork);
    metrics->RecordLogRepair(Metrics::LogRepairEvent::kRepaired);
    metrics->RecordLogRepair(Metrics::LogRepairEvent::kRepublished, repaired->republished);
  };
  o.advertise_address = options_.cluster.advertise_address;
  if (o.advertise_address.empty()) {
    std::string host = options_.grpc_address.substr(0, options_.grpc_address.rfind(':'));
    if (host.empty() || host == "0.0.0.0" || host == "[::]") {
      char name[256] = {0};
      gethostname(name, sizeof(name) - 1);
      host = name;
    }
    o.advertise_address = absl::StrCat(host, ":", grpc_port_);
  }
  ZOOM_ASSIGN_OR_RETURN(cluster_node_, cluster::ClusterNode::Start(db_.get(), std::move(o)));
  joined_ = cluster_node_.get();
  return absl::OkStatus();
}

void ZoomServer::KeepJoining() {
  absl::Duration wait = absl::Seconds(1);
  absl::Time said = absl::Now();
  for (;;) {
    {
      absl::MutexLock l(&join_mu_);
      auto stop = [this]() ABSL_SHARED_LOCKS_REQUIRED(join_mu_) { return join_stop_; };
      join_mu_.AwaitWithTimeout(absl::Condition(&stop), wait);
      if (join_stop_) return;
    }
    absl::Status st = JoinCluster();
    if (st.ok()) {
      ZOOM_LOG(INFO, "cluster ", options_.cluster.name, ": node ", options_.cluster.node_id,
               " joined");
      health_->SetServingStatus("zoom.v1.VectorSearch", true);
      health_->SetServingStatus("zoom.v1.Decoder", true);
      return;
    }
    if (!absl::IsUnavailable(st) && !absl::IsDeadlineExceeded(st)) {
      // Nothing will change by trying again: said, and the node serves
      // what it holds until an operator acts.
      ZOOM_LOG(ERROR, "cluster ", options_.cluster.name, ": node ", options_.cluster.node_id,
               " cannot join: ", st.message(), "; it serves only the replicas it holds; "
               "fix the cause and restart it");
      return;
    }
    if (absl::Now() - said >= absl::Seconds(30)) {
      said = absl::Now();
      ZOOM_LOG(WARNING, "cluster ", options_.cluster.name, ": node ", options_.cluster.node_id,
               " still cannot join: ", st.message());
    }
    wait = std::min(wait * 2, absl::Seconds(5));
  }
}

absl::Status ZoomServer::WaitApplied(const std::string& collection,
                                     const std::vector<api::WriteToken>& tokens,
                                     absl::Time deadline) const {
  const std::optional<cluster::LocalShard> local = cluster::ParseLocalName(collection);
  if (!local.has_value()) return absl::OkStatus();
  uint64_t need = 0;
  for (const api::WriteToken& t : tokens) {
    if (t.shard == local->shard) need = std::max(need, t.sequence);
  }
  if (need == 0) return absl::OkStatus();
  cluster::ClusterNode* node = joined_.load();
  if (node == nullptr) return absl::UnavailableError("this node has not joined its cluster yet");
  const absl::Time start = absl::Now();
  if (node->WaitApplied(collection, need, absl::InfinitePast())) return absl::OkStatus();
  // A token past the end of its shard's log was not given by this cluster
  // (or its collection was dropped and created again): it would hold the
  // call until its deadline for nothing.
  absl::StatusOr<uint64_t> head = node->js().LastSequence(
      cluster::StreamName(options_.cluster.name, local->collection),
      cluster::ShardSubject(options_.cluster.name, local->collection, local->shard));
  if (head.ok() && need > *head) {
    return absl::InvalidArgumentError(absl::StrCat(
        "write token (shard ", local->shard, ", sequence ", need, ") is past the end of ",
        local->collection, "'s log for that shard (its last entry is ", *head,
        "): pass the tokens this cluster's write replies gave, for this collection"));
  }
  if (node->WaitApplied(collection, need, deadline)) return absl::OkStatus();
  auto replica = node->ReplicaOf(collection);
  return absl::UnavailableError(absl::StrCat(
      "shard ", local->shard, " of ", local->collection, " on node ", options_.cluster.node_id,
      " has applied its log through ", replica ? replica->status().applied : 0,
      "; the writes asked for need ", need, " (waited ",
      absl::FormatDuration(absl::Now() - start), ")"));
}

ConnectionStats ZoomServer::connection_stats() const {
  if (gate_ != nullptr) return gate_->Stats();
  ConnectionStats s;
  const FdLimits fds = CurrentFdLimits();
  s.fd_limit = fds.soft;
  s.fd_hard_limit = fds.hard;
  return s;
}

absl::Status ZoomServer::ReloadApiKeys() {
  if (auth_ == nullptr || !auth_->enabled()) {
    return absl::FailedPreconditionError("this server has no --api_key_file");
  }
  absl::Status st = auth_->Load();
  if (st.ok()) {
    ZOOM_LOG(INFO, "API keys reloaded from ", options_.api_key_file);
  } else {
    ZOOM_LOG(ERROR, "API keys not reloaded from ", options_.api_key_file, ": ", st.message(),
             " (the previous keys stay in force)");
  }
  return st;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ZoomServer::ServerCredentials() const {
  if (options_.tls_cert_file.empty() && options_.tls_key_file.empty()) {
    if (!options_.tls_client_ca_file.empty()) {
      return absl::InvalidArgumentError("--tls_client_ca needs --tls_cert and --tls_key");
    }
    return grpc::InsecureServerCredentials();
  }
  if (options_.tls_cert_file.empty() || options_.tls_key_file.empty()) {
    return absl::InvalidArgumentError("TLS needs both --tls_cert and --tls_key");
  }
  auto read = [](const std::string& path, const char* what) -> absl::StatusOr<std::string> {
    auto text = ReadFileToString(path);
    if (!text.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " ", path, ": ", text.status().message()));
    }
    if (text->find("-----BEGIN") == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(what, " ", path, " is not a PEM file"));
    }
    return text;
  };
  grpc::SslServerCredentialsOptions ssl(
      options_.tls_client_ca_file.empty()
          ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
          : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  ZOOM_ASSIGN_OR_RETURN(pair.cert_chain, read(options_.tls_cert_file, "--tls_cert"));
  ZOOM_ASSIGN_OR_RETURN(pair.private_key, read(options_.tls_key_file, "--tls_key"));
  ssl.pem_key_cert_pairs.push_back(std::move(pair));
  if (!options_.tls_client_ca_file.empty()) {
    ZOOM_ASSIGN_OR_RETURN(ssl.pem_root_certs, read(options_.tls_client_ca_file, "--tls_client_ca"));
  }
  return grpc::SslServerCredentials(ssl);
}

void ZoomServer::Housekeeping() {
  absl::Time last_metrics = absl::Now();
  while (!stopping_.load()) {
    absl::SleepFor(options_.database.sync_always ? absl::Milliseconds(100)
                                                 : options_.wal_sync_interval);
    if (!options_.database.sync_always) {
      absl::Status st = db_->SyncWal();
      if (!st.ok()) ZOOM_LOG(ERROR, "WAL sync failed: ", st.message());
    }
    if (absl::Now() - last_metrics > absl::Seconds(1)) {
      service_->RefreshCollectionMetrics();
      // The backend the readers actually use (one may have fallen back).
      const std::string backend = db_->IoBackendInUse().name;
      bool changed = false;
      {
        absl::MutexLock l(&io_backend_mu_);
        changed = backend != io_backend_;
        io_backend_ = backend;
      }
      if (changed) metrics_->SetIoBackend(backend);
      last_metrics = absl::Now();
    }
  }
}

void ZoomServer::Shutdown(absl::Duration grace) {
  if (!started_) return;
  started_ = false;
  ZOOM_LOG(INFO, "zoomd shutting down: draining in-flight requests");
  // Builds, compactions and calibrations stop now (at their next
  // cancellation point): a build can take minutes, the grace is seconds.
  if (db_ != nullptr) db_->StopBackgroundWork();
  health_->Shutdown();  // NOT_SERVING; ends the watches, which would hold up server_->Shutdown
  if (gate_ != nullptr) gate_->Stop();  // no new connections
  const absl::Time deadline = absl::Now() + grace;
  pool_->Drain(absl::UnavailableError(
      "zoomd is shutting down: nothing was done; retry (on another server if there is one)"));
  // The open calls, and the health watches' last statuses, out before the
  // connections are cut.
  const bool idle = pool_->WaitIdle(deadline) && health_->WaitWatchesEnded(deadline);
  const int severed = idle && gate_ != nullptr ? gate_->Sever() : 0;
  ZOOM_LOG(INFO, "drained: ", idle ? "every call ended" : "calls still open at the grace's end",
           "; ", severed, " connections closed");
  server_->Shutdown(absl::ToChronoTime(deadline));
  server_->Wait();
  pool_->Stop();
  stopping_ = true;
  if (housekeeping_.joinable()) housekeeping_.join();
  {
    absl::MutexLock l(&join_mu_);
    join_stop_ = true;
  }
  if (joiner_.joinable()) joiner_.join();  // within one join attempt
  // Replicas stop applying before the database closes; the node's record
  // leaves the cluster's bucket (a clean leave).
  joined_ = nullptr;
  cluster_node_.reset();
  ReleaseServices();
  if (db_ != nullptr) {
    absl::Status st = db_->SyncWal();
    if (!st.ok()) ZOOM_LOG(ERROR, "final WAL sync failed: ", st.message());
  }
  service_.reset();
  backend_.reset();
  decoder_.reset();  // cancels and joins model loads (their waiting calls are finished)
  decoder_service_.reset();
  db_.reset();  // joins builds, saves snapshots
  server_.reset();
  ZOOM_LOG(INFO, "zoomd stopped");
}

}  // namespace zoom::server
