// File: server/grpc/zoom_server.h
//
// ZoomServer: the whole zoomd server in one object (Database, WorkerPool,
// Metrics, gRPC server with the VectorSearch, health and reflection
// services), used by zoomd's main and by in-process integration tests.
//
//   ZoomServer server(options);
//   ZOOM_RETURN_IF_ERROR(server.Start());   // recovers the data dir, listens
//   ... server.grpc_port() ...
//   server.Shutdown(absl::Seconds(10));     // stop accepting, drain, flush
//
// Health (health_service.h): NOT_SERVING until every collection is loaded,
// then SERVING; back to NOT_SERVING when shutdown begins, which also ends
// every Health.Watch.
//
// Thread safety: Start and Shutdown from one thread; the accessors from any.
#ifndef ZOOM_SERVER_GRPC_ZOOM_SERVER_H_
#define ZOOM_SERVER_GRPC_ZOOM_SERVER_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/engine/database.h"
#include "server/engine/decoder_engine.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/grpc/auth.h"
#include "server/grpc/decoder_service.h"
#include "server/cluster/cluster_node.h"
#include "server/grpc/connection_gate.h"
#include "server/grpc/health_service.h"
#include "server/grpc/reflection_service.h"
#include "server/cluster/router/cluster_backend.h"
#include "server/cluster/router/model_router.h"
#include "server/cluster/router/router_core.h"
#include "server/grpc/router_decoder_service.h"
#include "server/api/local_backend.h"
#include "server/grpc/vector_search_service.h"

namespace grpc {
class Server;
class ServerBuilder;
class ServerCredentials;
}

namespace zoom::server {

// What a zoomd is: standalone (the embedded default: its own collections),
// a cluster's node (hosts shard replicas, applies their logs) or router (no
// data: serves the API over the nodes and the logs).
enum class ServerRole { kStandalone, kNode, kRouter };
// "" (or "standalone"), "node", "router"; InvalidArgument naming them.
absl::StatusOr<ServerRole> ParseServerRole(absl::string_view name);
const char* ServerRoleName(ServerRole role);

struct ServerOptions {
  DatabaseOptions database;
  std::string grpc_address = "127.0.0.1:50051";  // port 0: pick a free one
  std::string metrics_address = "127.0.0.1:9464";  // "" = no /metrics endpoint
  int threads = 8;                        // request workers
  // Admission control (worker_pool.h): queued units per class beyond which
  // requests are RESOURCE_EXHAUSTED at once (0: the defaults, 8192 / 1024 /
  // 64), and the time per unit assumed before any has been measured.
  uint64_t max_queued_reads = 0;
  uint64_t max_queued_writes = 0;
  uint64_t max_queued_admin = 0;
  absl::Duration initial_unit_time = absl::Microseconds(500);
  // Preview-only searches an idle server may run at once on gRPC's threads
  // instead of a worker (WorkerPool::TryBeginInline; 0: never).
  int max_inline_reads = 1;
  int max_message_bytes = 64 << 20;       // larger requests: RESOURCE_EXHAUSTED
  ServiceLimits limits;
  DecoderLimits decoder_limits;
  // Model directories for the Decoder live under models_dir ("" = loading
  // models is off); their graphs are cached under DATA_DIR/models.
  std::string models_dir;
  uint32_t max_models = 16;
  uint64_t max_model_bytes = uint64_t{4} << 30;
  // Language models to load at start (name -> directory under models_dir).
  std::vector<std::pair<std::string, std::string>> models;
  absl::Duration wal_sync_interval = absl::Milliseconds(100);  // --sync=batch
  absl::Duration maintenance_interval = absl::Seconds(5);     // automatic compaction
  std::string version = "0.1.0";
  // Security (see server/grpc/auth.h and docs/operations.md): API keys ("" = every
  // call allowed), reloaded by ReloadApiKeys (zoomd: SIGHUP); /metrics
  // behind an admin key; TLS with this certificate and key (PEM files), and
  // client certificates signed by tls_client_ca required (mTLS).
  std::string api_key_file;
  bool metrics_require_key = false;
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_client_ca_file;
  // Refuse to start without API keys on an address that is not loopback
  // (zoomd sets it unless --allow_unauthenticated).
  bool require_key_off_loopback = false;

  // Connections (server/grpc/connection_gate.h, docs/operations.md "zoomd flags",
  // deploy/README.md "Connections and file descriptors"). On a host:port
  // address zoomd accepts the TCP connections itself and hands them to gRPC
  // once they send their first bytes (gRPC 1.51 has no connection cap, and
  // its listener stops for good after one accept4 EMFILE). At a cap the
  // oldest connection that has not sent a byte yet is reset to make room,
  // or else the new one is. The caps come from RLIMIT_NOFILE's soft limit at
  // Start:
  //   fd_reserve       descriptors connections never take (files, peers,
  //                    NATS): 0 = limit / 8, between 32 and 4096 (at most
  //                    half the limit);
  //   max_connections  open connections: 0 = limit - fd_reserve (larger is
  //                    lowered to that);
  //   max_connections_per_peer  from one client IP address: 0 =
  //                    max_connections / 4 (at least 1).
  // An address holding no connection (a health probe, a new client) may go
  // fd_reserve / 2 beyond both caps: the other half of the reserve is never
  // given to a connection. unix: addresses are left to gRPC (no caps).
  struct Connections {
    int fd_reserve = 0;
    int max_connections = 0;
    int max_connections_per_peer = 0;
    // A connection that has not finished its TLS handshake and sent its
    // HTTP/2 SETTINGS by then is closed (gRPC's default is 120 s); one that
    // has not sent a byte, by the gate.
    absl::Duration handshake_timeout = absl::Seconds(10);
    // A connection with no call for this long is closed (GOAWAY; clients
    // reconnect on their next call); InfiniteDuration: never.
    absl::Duration max_connection_idle = absl::Minutes(5);
    // Any connection is closed (GOAWAY, its calls finish) this long after it
    // opened; InfiniteDuration: never.
    absl::Duration max_connection_age = absl::InfiniteDuration();
    // The server pings a client every keepalive_time while calls are open
    // and closes the connection when no answer comes within
    // keepalive_timeout (a client gone without a FIN).
    absl::Duration keepalive_time = absl::Seconds(60);
    absl::Duration keepalive_timeout = absl::Seconds(20);
    // Keepalive policy for the clients' pings: closer together than
    // min_ping_interval is a strike, and more than max_ping_strikes closes
    // the connection (GOAWAY too_many_pings). Without open calls pings are
    // allowed once per 2 h unless permit_without_calls.
    absl::Duration min_ping_interval = absl::Seconds(5);
    int max_ping_strikes = 2;
    bool permit_without_calls = false;
  } connections;

  // A cluster (server/cluster, docs/cluster.md): the role, and what a node
  // or a router needs.
  struct Cluster {
    ServerRole role = ServerRole::kStandalone;
    std::string name = "zoomd";
    std::vector<std::string> nats;  // nats://host:port, ...
    int nats_replicas = 1;          // JetStream replicas of streams and buckets
    std::string node_id;
    // host:port routers and peers reach a node at; "" = the gRPC address's
    // host (or this host's name when it listens on every interface) and the
    // port it listens on.
    std::string advertise_address;
    absl::Duration node_ttl = absl::Seconds(10);
    absl::Duration heartbeat = absl::Seconds(2);
    // Log retention (ClusterNode): how often a node trims its shards' logs
    // (0: never) and how long an absent replica holds them.
    absl::Duration log_trim = absl::Seconds(30);
    absl::Duration log_hold = absl::Hours(1);
    // Re-replication (ClusterNode::Rereplicate; 0: never).
    absl::Duration rereplicate_after = absl::Minutes(1);
    // How long a node's search waits for a session's writes to apply.
    absl::Duration max_session_wait = absl::Seconds(1);
    // A router's workers: its searches hold none while the nodes answer
    // (their units stay held in the read queue's limit, WorkerPool::Hold);
    // its other reads and admin calls wait on nodes, not cores.
    int router_threads = 64;
    router::RouterOptions router;  // its other knobs (the names above win)
    // A node fetches a peer's shard snapshot with it (zoomd's main: over
    // gRPC, DownloadSnapshot); empty: shards start empty and replay.
    cluster::SnapshotFetcher fetch_snapshot;
  } cluster;
};

class ZoomServer {
 public:
  explicit ZoomServer(const ServerOptions& options);
  ~ZoomServer();

  // A node that cannot reach its cluster's JetStream at start (UNAVAILABLE
  // or DEADLINE_EXCEEDED: the NATS servers down, or their JetStream taking
  // no request after a power failure) starts anyway: it serves the
  // replicas it holds (reads, at the positions they reached) and joins in
  // the background, trying again every few seconds until it does
  // (cluster_node() is null until then; health: "" SERVING,
  // zoom.v1.VectorSearch and zoom.v1.Decoder NOT_SERVING until it has
  // joined). Any other error of the join
  // (a bad NATS URL, a refused node id) fails Start.
  absl::Status Start();
  // Re-reads the API key file; on error the previous keys stay in force.
  absl::Status ReloadApiKeys();
  // Stops accepting calls, waits up to `grace` for in-flight ones (then
  // cancels them), stops the workers, syncs and closes the database.
  // The drain, so that no client call fails in a way it would not retry:
  // NOT_SERVING, no new connection; a call that starts is answered
  // UNAVAILABLE ("shutting down": nothing ran, retry); the open calls end
  // (WorkerPool::WaitIdle, within `grace`), and the health watches have
  // sent their last status; then the connections are cut
  // (ConnectionGate::Sever: a call sent meanwhile fails UNAVAILABLE on the
  // client's side) before gRPC's own shutdown, which answers a call that
  // reaches it CANCELLED. unix: addresses have no gate and keep that.
  void Shutdown(absl::Duration grace = absl::Seconds(10));

  int grpc_port() const { return grpc_port_; }
  int metrics_port() const { return metrics_ ? metrics_->port() : 0; }
  Database* database() { return db_.get(); }  // null on a router
  // A node's cluster membership (null unless role "node").
  cluster::ClusterNode* cluster_node() { return joined_.load(); }
  DecoderEngine* decoder() { return decoder_.get(); }
  Metrics* metrics() { return metrics_.get(); }
  WorkerPool* pool() { return pool_.get(); }
  // The connection caps in force and the counts (ServerOptions::Connections).
  ConnectionStats connection_stats() const;
  // The fullview reads' backend: "io_uring" or "pread" (what the readers
  // use, refreshed every second).
  std::string io_backend() const {
    absl::MutexLock l(&io_backend_mu_);
    return io_backend_;
  }

 private:
  void Housekeeping();
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials() const;
  // The services of each role, registered on `builder`; `io_note`: what the
  // start line says of the fullview's reads.
  absl::Status StartLocal(grpc::ServerBuilder& builder, std::string* io_note);
  absl::Status StartRouter(grpc::ServerBuilder& builder);
  // The services and backends, in the order they depend on each other.
  void ReleaseServices();
  absl::Status JoinCluster();
  // JoinCluster again every few seconds until it succeeds, fails for good
  // or the server stops (joiner_'s loop).
  void KeepJoining();
  // A node's session wait (api::NodeOptions::wait_applied).
  absl::Status WaitApplied(const std::string& collection,
                           const std::vector<api::WriteToken>& tokens,
                           absl::Time deadline) const;

  ServerOptions options_;
  std::unique_ptr<Database> db_;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<WorkerPool> pool_;
  std::unique_ptr<router::RouterCore> router_;  // a router's
  std::unique_ptr<router::ModelRouter> model_router_;
  std::unique_ptr<api::CollectionBackend> backend_;  // the service's (standalone, node)
  std::unique_ptr<VectorSearchService> service_;
  std::unique_ptr<RouterDecoderService> router_decoder_;
  std::unique_ptr<cluster::ClusterNode> cluster_node_;
  std::atomic<cluster::ClusterNode*> joined_{nullptr};  // cluster_node_ once started
  std::unique_ptr<DecoderEngine> decoder_;
  std::unique_ptr<DecoderService> decoder_service_;
  std::unique_ptr<ReflectionService> reflection_;
  std::unique_ptr<HealthService> health_;
  std::unique_ptr<Authenticator> auth_;
  std::unique_ptr<ConnectionGate> gate_;  // null on a unix: address
  std::unique_ptr<grpc::Server> server_;
  std::thread housekeeping_;
  std::thread joiner_;  // a node that could not join at start
  absl::Mutex join_mu_;
  bool join_stop_ ABSL_GUARDED_BY(join_mu_) = false;
  std::atomic<bool> stopping_{false};
  int grpc_port_ = 0;
  mutable absl::Mutex io_backend_mu_;
  std::string io_backend_ ABSL_GUARDED_BY(io_backend_mu_);
  bool started_ = false;
};

}  // namespace zoom::server

#endif  // ZOOM_SERVER_GRPC_ZOOM_SERVER_H_
