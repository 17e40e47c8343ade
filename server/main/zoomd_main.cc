// zoomd: the Zoom vector search server.
//
//   zoomd --data_dir ./var/zoomd --grpc_address 127.0.0.1:50051
//
// Flags may also come from a file: --flagfile=zoomd.flags (one --flag=value
// per line). SIGTERM/SIGINT: stop accepting, drain in-flight requests, flush,
// exit 0.
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/binary_io.h"
#include "common/file_system.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/texmex.h"
#include "server/engine/payload_fields.h"
#include "client/zoom_client.h"
#include "server/grpc/zoom_server.h"

ABSL_FLAG(std::string, data_dir, "./var/zoomd", "Data directory (created if missing).");
ABSL_FLAG(std::string, grpc_address, "127.0.0.1:50051", "gRPC listen address (port 0: any).");
ABSL_FLAG(std::string, metrics_address, "127.0.0.1:9464",
          "Prometheus /metrics listen address; empty to disable.");
ABSL_FLAG(std::string, io_backend, "auto", "Fullview reads: auto | io_uring | pread.");
ABSL_FLAG(bool, direct_io, true, "Read full vectors with O_DIRECT (bypass the page cache).");
ABSL_FLAG(std::string, sync, "always",
          "always: every acknowledged write is on disk (WAL fsync); batch: the WAL is "
          "fsync'd every --wal_sync_ms (a process crash loses nothing, a power loss may "
          "lose the last interval).");
ABSL_FLAG(int, wal_sync_ms, 100, "WAL sync interval for --sync=batch.");
ABSL_FLAG(int, threads, 8, "Request worker threads.");
ABSL_FLAG(uint64_t, max_queued_reads, 8192,
          "Queued read units (a query each) beyond which requests are RESOURCE_EXHAUSTED.");
ABSL_FLAG(bool, mutex_deadlock_checks, false,
          "Run Abseil's mutex deadlock detector on every lock (debugging; costs CPU).");
ABSL_FLAG(int32_t, inline_reads, 1,
          "Preview-only searches an idle server answers at once on gRPC's threads instead of a "
          "worker (saves the hand-off's latency; 0: never).");
ABSL_FLAG(uint64_t, max_queued_writes, 1024,
          "Queued write units (about 100 points each) beyond which writes are RESOURCE_EXHAUSTED.");
ABSL_FLAG(uint64_t, max_queued_admin, 64, "Queued admin requests beyond which they are refused.");
ABSL_FLAG(int, build_threads, 2, "Threads of an index build.");
ABSL_FLAG(int64_t, cache_bytes, 0,
          "DRAM cache of hot full vectors per collection (0: off), for collections that do "
          "not set their own (CollectionSpec.cache_bytes).");
ABSL_FLAG(int64_t, max_cache_bytes, int64_t{1} << 30,
          "The largest CollectionSpec.cache_bytes a collection may ask for.");
ABSL_FLAG(int64_t, max_total_cache_bytes, int64_t{4} << 30,
          "The DRAM caches of all collections together: a CreateCollection or a restore "
          "past it is RESOURCE_EXHAUSTED (a collection opened past it, after it was "
          "lowered, gets what is left until the next restart; a compaction's new segment "
          "holds a second cache while it runs).");
ABSL_FLAG(int, max_message_bytes, 64 << 20, "Largest gRPC message accepted.");
ABSL_FLAG(uint32_t, max_k, 1000, "Largest k of a search.");
ABSL_FLAG(uint32_t, max_batch, 10000, "Most points per upsert message / queries per batch.");
ABSL_FLAG(uint32_t, max_dim, 4096, "Largest vector dimension of a collection.");
ABSL_FLAG(uint64_t, auto_build_points, 20000,
          "An unindexed collection builds its index by itself at this many points (0: never).");
ABSL_FLAG(double, auto_retrain_growth, 4.0,
          "An indexed collection retrains its index in the background once it holds this many "
          "times the points the index was trained on (0: never).");
ABSL_FLAG(double, auto_retrain_drift, 2.0,
          "An ivf_hnsw_pq index retrains in the background once its codes fit the latest 1,024 "
          "points this many times worse (mean squared error) than the first added after its "
          "build (0: never).");
ABSL_FLAG(double, default_target_recall, 0.95,
          "The recall@10 a search aims at when it names no knobs and no target_recall and its "
          "collection keeps the built-in default knobs: the cheapest knobs that reached it in "
          "the index's calibration run (0: the default knobs).");
ABSL_FLAG(uint32_t, calibration_queries, 500,
          "Each new index measures its recall curve with up to this many stored points as "
          "queries (at most max(200, points / 100); 0: never, target_recall then runs the "
          "default knobs).");
ABSL_FLAG(std::string, demo_collection, "",
          "If set and absent: create this collection from --demo_vectors and build its index.");
ABSL_FLAG(std::string, demo_vectors, "tests/data/sift-ngt-5k/base.bvecs",
          "The .fvecs/.bvecs file of the demo collection (row i gets id i).");
ABSL_FLAG(std::string, models_dir, "",
          "Directory of the Decoder's model directories: LoadModel and --load_model name a "
          "directory under it (nothing outside it is read). Empty: loading models is off.");
ABSL_FLAG(uint32_t, max_models, 16, "Most Decoder models loading or serving at once.");
ABSL_FLAG(uint64_t, max_model_bytes, uint64_t{4} << 30,
          "Memory budget of the Decoder's models (estimated before a model is read).");
ABSL_FLAG(std::vector<std::string>, load_model, {},
          "Language models for the Decoder service to load at start: NAME=DIR[,NAME=DIR...], "
          "DIR a directory under --models_dir");
ABSL_FLAG(std::string, port_file, "",
          "Write the bound gRPC port to this file once serving (atomically: FILE.tmp, synced, "
          "renamed); zoomd stops with status 1 if it cannot.");
ABSL_FLAG(std::string, snapshots_dir, "",
          "Where collection snapshots are kept (default DATA_DIR/snapshots); RestoreSnapshot "
          "sources are names under it.");
ABSL_FLAG(std::string, snapshot_key_file, "",
          "A secret (at least 16 bytes; trailing whitespace dropped) that signs every snapshot "
          "this zoomd makes (HMAC-SHA-256); RestoreSnapshot and a node's bootstrap from a "
          "peer then refuse archives not signed with it (PERMISSION_DENIED). A cluster's "
          "routers and nodes share one.");
ABSL_FLAG(std::string, api_key_file, "",
          "API keys, one 'admin KEY' or 'read KEY' per line (reloaded on SIGHUP). Without it "
          "every call is allowed, and zoomd serves only on loopback unless "
          "--allow_unauthenticated.");
ABSL_FLAG(bool, allow_unauthenticated, false,
          "Serve without --api_key_file on an address that is not loopback.");
ABSL_FLAG(bool, metrics_require_key, false, "/metrics answers only with an admin key (Bearer).");
ABSL_FLAG(std::string, tls_cert, "", "TLS: the server's certificate chain (PEM).");
ABSL_FLAG(std::string, tls_key, "", "TLS: the server's private key (PEM).");
ABSL_FLAG(std::string, tls_client_ca, "",
          "mTLS: CA certificates (PEM); clients must present a certificate signed by one.");
ABSL_FLAG(int, shutdown_grace_s, 10, "Seconds in-flight requests get at shutdown.");
ABSL_FLAG(int32_t, fd_reserve, 0,
          "File descriptors no client connection may take (the server's files, cluster peers, "
          "NATS); a client address holding no connection (a health probe, a new client) may use "
          "half of them. 0: RLIMIT_NOFILE / 8, between 32 and 4096 (zoomd raises the soft limit "
          "to the hard one at start).");
ABSL_FLAG(int32_t, max_connections, 0,
          "Open gRPC connections beyond which new ones are refused at once (reset); an address "
          "holding none may go --fd_reserve / 2 beyond (health probes). 0: RLIMIT_NOFILE - "
          "--fd_reserve (never more).");
ABSL_FLAG(int32_t, max_connections_per_peer, 0,
          "Open gRPC connections from one client IP address beyond which its new ones are "
          "refused. 0: --max_connections / 4.");
ABSL_FLAG(int32_t, handshake_timeout_s, 10,
          "A connection that has not completed its TLS handshake and sent its HTTP/2 settings "
          "within this many seconds is closed (gRPC's default: 120).");
ABSL_FLAG(int32_t, max_connection_idle_s, 300,
          "A connection without a call for this many seconds is closed (GOAWAY; clients reconnect "
          "on their next call). 0: never.");
ABSL_FLAG(int32_t, max_connection_age_s, 0,
          "Every connection is closed this many seconds after it opened (GOAWAY; its calls "
          "finish): spreads clients over new replicas behind a load balancer. 0: never.");
ABSL_FLAG(int32_t, keepalive_time_s, 60,
          "While calls are open the server pings the client this often and closes the "
          "connection when no answer comes within --keepalive_timeout_s. 0: never.");
ABSL_FLAG(int32_t, keepalive_timeout_s, 20, "See --keepalive_time_s.");
ABSL_FLAG(int32_t, keepalive_min_ping_interval_s, 5,
          "Keepalive policy: a client's ping sooner than this after its previous one (with no "
          "data sent between) is a strike; more than --keepalive_max_ping_strikes close the "
          "connection (GOAWAY too_many_pings). Without open calls pings may come once per 2 h "
          "unless --keepalive_permit_without_calls.");
ABSL_FLAG(int32_t, keepalive_max_ping_strikes, 2,
          "See --keepalive_min_ping_interval_s (0: no limit).");
ABSL_FLAG(bool, keepalive_permit_without_calls, false,
          "Allow clients' keepalive pings on connections without calls (every "
          "--keepalive_min_ping_interval_s); the server then pings idle clients too.");
ABSL_FLAG(std::string, role, "",
          "Cluster role (docs/cluster.md): empty for a standalone zoomd; node (hosts shard "
          "replicas and applies their logs from NATS JetStream) or router (holds no data: "
          "routes the API to the nodes and the logs).");
ABSL_FLAG(std::string, cluster, "zoomd", "The cluster's name (several may share one NATS).");
ABSL_FLAG(std::vector<std::string>, nats, {},
          "The cluster's NATS servers, with JetStream: nats://host:4222,nats://host2:4222.");
ABSL_FLAG(int, nats_replicas, 1,
          "JetStream replicas of the cluster's streams and buckets (3 on a 3-server NATS "
          "cluster: a write survives the loss of one).");
ABSL_FLAG(std::string, node_id, "",
          "A node's id in the cluster, 1..32 of [A-Za-z0-9_-] (default: the host name; a "
          "StatefulSet pod's name is stable).");
ABSL_FLAG(std::string, advertise_address, "",
          "host:port at which routers and peers reach this node (default: the gRPC address's "
          "host, or the host name when it listens on every interface, and its port).");
ABSL_FLAG(std::string, peer_key_file, "",
          "A node: the file holding the admin API key it presents to its peers when it fetches "
          "a shard's snapshot from one (when the nodes require keys).");
ABSL_FLAG(int, node_ttl_s, 10,
          "A node that has not heartbeated for this long leaves the cluster (routers stop "
          "using it); heartbeats every ttl/5.");
ABSL_FLAG(int, log_trim_s, 30,
          "A node: how often it purges its shards' write logs below every replica's position "
          "(0: never; the log then keeps every write).");
ABSL_FLAG(int, rereplicate_after_s, 60,
          "A node: how long after its last heartbeat a node absent from the node bucket "
          "(past --node_ttl_s) keeps its replicas before they are placed on live nodes (0: "
          "never; a lost machine must come back with its --node_id).");
ABSL_FLAG(int, log_hold_s, 3600,
          "A node: how long a replica absent from the cluster holds its shard's log; one back "
          "after longer restores a peer's snapshot instead of replaying the log.");

namespace zoom {
namespace {

// Written by the SIGTERM/SIGINT handler (one byte: the signal), read by Main.
int g_signal_pipe[2] = {-1, -1};

void OnStopSignal(int sig) {
  const int saved = errno;
  const unsigned char b = static_cast<unsigned char>(sig);
  [[maybe_unused]] ssize_t n = write(g_signal_pipe[1], &b, 1);
  errno = saved;
}

// The soft RLIMIT_NOFILE up to the hard one (systemd's default soft limit is
// 1024, a few hundred clients' worth): the connection caps are derived from
// it (ServerOptions::Connections). zoomd uses poll/epoll/io_uring, never
// select, so descriptors above 1024 are fine.
void RaiseFdLimit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
    ZOOM_LOG(WARNING, "RLIMIT_NOFILE: getrlimit: ", std::strerror(errno));
    return;
  }
  const rlim_t soft = rl.rlim_cur;
  rlim_t target = rl.rlim_max;
  if (target == RLIM_INFINITY) {  // not allowed for NOFILE: the kernel's fs.nr_open is the most
    target = 1 << 20;
    if (FILE* f = std::fopen("/proc/sys/fs/nr_open", "r")) {
      unsigned long n = 0;
      if (std::fscanf(f, "%lu", &n) == 1 && n > 0) target = n;
      std::fclose(f);
    }
  }
  if (soft >= target) {
    ZOOM_LOG(INFO, "RLIMIT_NOFILE: soft ", soft, ", hard ", rl.rlim_max,
             " (the soft limit is already the hard one)");
    return;
  }
  rl.rlim_cur = target;
  if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
    ZOOM_LOG(WARNING, "RLIMIT_NOFILE: soft ", soft, ", hard ", rl.rlim_max,
             ": cannot raise the soft limit: ", std::strerror(errno));
    return;
  }
  getrlimit(RLIMIT_NOFILE, &rl);
  ZOOM_LOG(INFO, "RLIMIT_NOFILE: soft ", soft, " -> ", rl.rlim_cur, ", hard ", rl.rlim_max);
}

absl::Status LoadDemo(server::Database* db, const std::string& name, const std::string& path) {
  if (db->GetCollection(name).ok()) return absl::OkStatus();
  ZOOM_ASSIGN_OR_RETURN(VecsMatrix<float> m, LoadVecsAsFloat(path));
  server::CollectionConfig config;
  config.name = name;
  config.dim = m.dim;
  config.metric = Metric::kL2;
  const bool bytes = path.size() > 6 && path.substr(path.size() - 6) == ".bvecs";
  config.dtype = bytes ? storage::DType::kUint8 : storage::DType::kFloat32;
  ZOOM_ASSIGN_OR_RETURN(auto c, db->CreateCollection(config));
  // Typed fields to try payloads (and, later, filters) on: the file's row
  // and a group of ten, e.g. {"group": "g3", "row": 13}.
  std::vector<server::PointRef> points;
  std::vector<server::PayloadFields> fields;
  for (uint64_t first = 0; first < m.rows; first += 1000) {
    points.clear();
    fields.clear();
    const uint64_t end = std::min<uint64_t>(m.rows, first + 1000);
    fields.reserve(end - first);
    for (uint64_t i = first; i < end; ++i) {
      server::PayloadFields& f = fields.emplace_back();
      f["row"] = server::FieldValue::Of(static_cast<int64_t>(i));
      f["group"] = server::FieldValue::Of(absl::StrCat("g", i % 10));
      points.push_back({i, m.data.data() + i * m.dim, {}, &f});
    }
    ZOOM_RETURN_IF_ERROR(c->Upsert(points));
  }
  ZOOM_RETURN_IF_ERROR(c->maintenance().StartBuild());
  // Not waited for: a SIGTERM during the build must stop it (the server's
  // shutdown cancels it), and searches are exact until it is done.
  ZOOM_LOG(INFO, "demo collection ", name, ": ", m.rows, " points from ", path,
           ", index build started");
  c->maintenance().WhenBuildDone([name](absl::Status st) {
    if (st.ok()) {
      ZOOM_LOG(INFO, "demo collection ", name, ": index built");
    } else {
      ZOOM_LOG(WARNING, "demo collection ", name, ": index build: ", st.message());
    }
  });
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "zoomd: the Zoom vector search server (gRPC zoom.v1.VectorSearch).\n"
      "  zoomd --data_dir DIR [--grpc_address HOST:PORT] [--metrics_address HOST:PORT]");
  absl::ParseCommandLine(argc, argv);
  // Debian's Abseil is built without NDEBUG, so every absl::Mutex lock
  // would run its deadlock detector (a GraphCycles lookup: ~7% of the
  // server's CPU on preview searches, perf). The tests keep it on.
  if (!absl::GetFlag(FLAGS_mutex_deadlock_checks)) {
    absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  }
  RaiseFdLimit();
  ZOOM_LOG(INFO, "OpenBLAS core ", server::Database::BlasCore(),
           std::getenv("OPENBLAS_CORETYPE") != nullptr ? " (OPENBLAS_CORETYPE)" : "");

  // SIGTERM/SIGINT go through a handler that writes to a pipe, read by this
  // thread once serving. Not sigwait with the signals blocked: threads that
  // exist before main (OpenBLAS starts its pool when the library loads) would
  // keep them unblocked and a signal during start would kill the process.
  if (pipe2(g_signal_pipe, O_CLOEXEC) != 0) {
    std::perror("zoomd: pipe2");
    return 1;
  }
  struct sigaction sa = {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);  // reload the API keys

  server::ServerOptions options;
  options.database.data_dir = absl::GetFlag(FLAGS_data_dir);
  const std::string sync = absl::GetFlag(FLAGS_sync);
  if (sync != "always" && sync != "batch") {
    std::fprintf(stderr, "zoomd: --sync must be 'always' or 'batch', got '%s'\n", sync.c_str());
    return 2;
  }
  options.database.sync_always = sync == "always";
  const double growth = absl::GetFlag(FLAGS_auto_retrain_growth);
  if (!(growth == 0 || (growth > 1 && growth <= 1e6))) {  // (NaN fails both)
    std::fprintf(stderr,
                 "zoomd: --auto_retrain_growth must be 0 (never) or above 1 (e.g. 4), got %g\n",
                 growth);
    return 2;
  }
  const double drift = absl::GetFlag(FLAGS_auto_retrain_drift);
  if (!(drift == 0 || (drift > 1 && drift <= 1e6))) {
    std::fprintf(stderr,
                 "zoomd: --auto_retrain_drift must be 0 (never) or above 1 (e.g. 2), got %g\n",
                 drift);
    return 2;
  }
  const double target = absl::GetFlag(FLAGS_default_target_recall);
  if (!(target >= 0 && target <= 1)) {
    std::fprintf(stderr, "zoomd: --default_target_recall must be in [0, 1] (0: off), got %g\n",
                 target);
    return 2;
  }
  if (absl::GetFlag(FLAGS_calibration_queries) > 100000) {
    std::fprintf(stderr, "zoomd: --calibration_queries must be at most 100000\n");
    return 2;
  }
  options.database.collection.default_target_recall = target;
  options.database.collection.calibration_queries = absl::GetFlag(FLAGS_calibration_queries);
  options.wal_sync_interval = absl::Milliseconds(absl::GetFlag(FLAGS_wal_sync_ms));
  {
    // Connections: counts and seconds are never negative; 0 = derived / never.
    struct {
      const char* name;
      int value;
    } const nonneg[] = {
        {"fd_reserve", absl::GetFlag(FLAGS_fd_reserve)},
        {"max_connections", absl::GetFlag(FLAGS_max_connections)},
        {"max_connections_per_peer", absl::GetFlag(FLAGS_max_connections_per_peer)},
        {"max_connection_idle_s", absl::GetFlag(FLAGS_max_connection_idle_s)},
        {"max_connection_age_s", absl::GetFlag(FLAGS_max_connection_age_s)},
        {"keepalive_time_s", absl::GetFlag(FLAGS_keepalive_time_s)},
        {"keepalive_min_ping_interval_s", absl::GetFlag(FLAGS_keepalive_min_ping_interval_s)},
        {"keepalive_max_ping_strikes", absl::GetFlag(FLAGS_keepalive_max_ping_strikes)},
    };
    for (const auto& f : nonneg) {
      if (f.value < 0) {
        std::fprintf(stderr, "zoomd: --%s must be 0 or more, got %d\n", f.name, f.value);
        return 2;
      }
    }
    for (const auto& [name, value] :
         {std::pair<const char*, int>{"handshake_timeout_s", absl::GetFlag(FLAGS_handshake_timeout_s)},
          {"keepalive_timeout_s", absl::GetFlag(FLAGS_keepalive_timeout_s)}}) {
      if (value < 1) {
        std::fprintf(stderr, "zoomd: --%s must be at least 1, got %d\n", name, value);
        return 2;
      }
    }
    auto seconds_or_never = [](int s) {
      return s == 0 ? absl::InfiniteDuration() : absl::Seconds(s);
    };
    server::ServerOptions::Connections& c = options.connections;
    c.fd_reserve = absl::GetFlag(FLAGS_fd_reserve);
    c.max_connections = absl::GetFlag(FLAGS_max_connections);
    c.max_connections_per_peer = absl::GetFlag(FLAGS_max_connections_per_peer);
    c.handshake_timeout = absl::Seconds(absl::GetFlag(FLAGS_handshake_timeout_s));
    c.max_connection_idle = seconds_or_never(absl::GetFlag(FLAGS_max_connection_idle_s));
    c.max_connection_age = seconds_or_never(absl::GetFlag(FLAGS_max_connection_age_s));
    c.keepalive_time = seconds_or_never(absl::GetFlag(FLAGS_keepalive_time_s));
    c.keepalive_timeout = absl::Seconds(absl::GetFlag(FLAGS_keepalive_timeout_s));
    c.min_ping_interval = absl::Seconds(absl::GetFlag(FLAGS_keepalive_min_ping_interval_s));
    c.max_ping_strikes = absl::GetFlag(FLAGS_keepalive_max_ping_strikes);
    c.permit_without_calls = absl::GetFlag(FLAGS_keepalive_permit_without_calls);
  }
  auto backend = storage::ParseIoBackend(absl::GetFlag(FLAGS_io_backend));
  if (!backend.ok()) {
    std::fprintf(stderr, "zoomd: --io_backend: %s\n", std::string(backend.status().message()).c_str());
    return 2;
  }
  options.database.collection.store.reader.backend = *backend;
  options.database.collection.store.reader.direct_io = absl::GetFlag(FLAGS_direct_io);
  options.database.collection.engine.cache_bytes =
      static_cast<uint64_t>(std::max<int64_t>(0, absl::GetFlag(FLAGS_cache_bytes)));
  options.database.collection.max_cache_bytes =
      static_cast<uint64_t>(std::max<int64_t>(0, absl::GetFlag(FLAGS_max_cache_bytes)));
  options.database.max_total_cache_bytes =
      static_cast<uint64_t>(std::max<int64_t>(0, absl::GetFlag(FLAGS_max_total_cache_bytes)));
  if (options.database.collection.engine.cache_bytes >
      options.database.collection.max_cache_bytes) {
    std::fprintf(stderr,
                 "zoomd: --cache_bytes (every collection's default) must be at most "
                 "--max_cache_bytes (%lld)\n",
                 static_cast<long long>(options.database.collection.max_cache_bytes));
    return 2;
  }
  options.database.collection.auto_build_min_points = absl::GetFlag(FLAGS_auto_build_points);
  options.database.collection.auto_retrain_growth = absl::GetFlag(FLAGS_auto_retrain_growth);
  options.database.collection.auto_retrain_drift = drift;
  options.database.collection.build_threads = absl::GetFlag(FLAGS_build_threads);
  options.database.max_dim = absl::GetFlag(FLAGS_max_dim);
  options.grpc_address = absl::GetFlag(FLAGS_grpc_address);
  options.metrics_address = absl::GetFlag(FLAGS_metrics_address);
  options.threads = absl::GetFlag(FLAGS_threads);
  options.max_queued_reads = absl::GetFlag(FLAGS_max_queued_reads);
  options.max_inline_reads = absl::GetFlag(FLAGS_inline_reads);
  options.max_queued_writes = absl::GetFlag(FLAGS_max_queued_writes);
  options.max_queued_admin = absl::GetFlag(FLAGS_max_queued_admin);
  options.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  options.limits.max_k = absl::GetFlag(FLAGS_max_k);
  options.limits.max_batch = absl::GetFlag(FLAGS_max_batch);
  options.database.snapshots_dir = absl::GetFlag(FLAGS_snapshots_dir);
  if (const std::string key_file = absl::GetFlag(FLAGS_snapshot_key_file); !key_file.empty()) {
    absl::StatusOr<storage::SnapshotKey> key = storage::SnapshotKey::ReadFile(key_file);
    if (!key.ok()) {
      std::fprintf(stderr, "zoomd: --snapshot_key_file: %s\n",
                   std::string(key.status().message()).c_str());
      return 1;
    }
    options.database.collection.snapshot_key =
        std::make_shared<const storage::SnapshotKey>(std::move(*key));
  }
  options.api_key_file = absl::GetFlag(FLAGS_api_key_file);
  options.require_key_off_loopback = !absl::GetFlag(FLAGS_allow_unauthenticated);
  options.metrics_require_key = absl::GetFlag(FLAGS_metrics_require_key);
  options.tls_cert_file = absl::GetFlag(FLAGS_tls_cert);
  options.tls_key_file = absl::GetFlag(FLAGS_tls_key);
  options.tls_client_ca_file = absl::GetFlag(FLAGS_tls_client_ca);
  options.models_dir = absl::GetFlag(FLAGS_models_dir);
  options.max_models = absl::GetFlag(FLAGS_max_models);
  options.max_model_bytes = absl::GetFlag(FLAGS_max_model_bytes);
  for (const std::string& spec : absl::GetFlag(FLAGS_load_model)) {
    const size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) {
      std::fprintf(stderr, "zoomd: --load_model wants NAME=DIR, got '%s'\n", spec.c_str());
      return 2;
    }
    options.models.emplace_back(spec.substr(0, eq), spec.substr(eq + 1));
  }

  absl::StatusOr<server::ServerRole> role = server::ParseServerRole(absl::GetFlag(FLAGS_role));
  if (!role.ok()) {
    std::fprintf(stderr, "zoomd: %s\n", std::string(role.status().message()).c_str());
    return 2;
  }
  options.cluster.role = *role;
  options.cluster.name = absl::GetFlag(FLAGS_cluster);
  options.cluster.nats = absl::GetFlag(FLAGS_nats);
  options.cluster.nats_replicas = absl::GetFlag(FLAGS_nats_replicas);
  options.cluster.node_id = absl::GetFlag(FLAGS_node_id);
  if (options.cluster.node_id.empty()) {
    char host[256] = {0};
    gethostname(host, sizeof(host) - 1);
    options.cluster.node_id = host;
  }
  options.cluster.advertise_address = absl::GetFlag(FLAGS_advertise_address);
  const int ttl_s = std::max(2, absl::GetFlag(FLAGS_node_ttl_s));
  options.cluster.node_ttl = absl::Seconds(ttl_s);
  options.cluster.heartbeat = absl::Seconds(ttl_s) / 5;
  options.cluster.log_trim = absl::Seconds(std::max(0, absl::GetFlag(FLAGS_log_trim_s)));
  options.cluster.log_hold = absl::Seconds(std::max(0, absl::GetFlag(FLAGS_log_hold_s)));
  options.cluster.rereplicate_after =
      absl::Seconds(std::max(0, absl::GetFlag(FLAGS_rereplicate_after_s)));
  // A node bootstraps a shard from a peer's snapshot over the peers' API,
  // with the admin key of --peer_key_file when the nodes require keys.
  std::string peer_key;
  if (const std::string f = absl::GetFlag(FLAGS_peer_key_file); !f.empty()) {
    absl::StatusOr<std::string> text = ReadFileToString(f);
    if (!text.ok()) {
      std::fprintf(stderr, "zoomd: --peer_key_file: %s\n", std::string(text.status().message()).c_str());
      return 2;
    }
    peer_key = std::string(absl::StripAsciiWhitespace(*text));
  }
  // The archive's bytes go to the node's sink, which writes them through
  // the node's FileSystem (cluster::FetchSnapshotToFile): nothing here
  // writes a file.
  options.cluster.fetch_snapshot = [peer_key](const std::string& address, const std::string& local,
                                              const cluster::SnapshotSink& sink) -> absl::Status {
    client::ClientOptions co;
    co.timeout = absl::Minutes(30);
    co.api_key = peer_key;
    auto peer = client::ZoomClient::Connect(address, co);
    ZOOM_ASSIGN_OR_RETURN(v1::SnapshotInfo info, peer->CreateSnapshot(local));
    absl::StatusOr<v1::SnapshotInfo> got = peer->DownloadSnapshot(local, info.name(), sink);
    (void)peer->DeleteSnapshot(local, info.name());
    return got.status();
  };

  server::ZoomServer server(options);
  if (absl::Status st = server.Start(); !st.ok()) {
    std::fprintf(stderr, "zoomd: cannot start: %s: %s\n",
                 absl::StatusCodeToString(st.code()).c_str(), std::string(st.message()).c_str());
    return 1;
  }
  const std::string demo = absl::GetFlag(FLAGS_demo_collection);
  if (!demo.empty()) {
    if (absl::Status st = LoadDemo(server.database(), demo, absl::GetFlag(FLAGS_demo_vectors));
        !st.ok()) {
      ZOOM_LOG(ERROR, "demo collection ", demo, ": ", st.message());
    }
  }
  // The port file says the server is serving: written through the
  // server's FileSystem (PORT_FILE.tmp, synced, renamed, the directory
  // synced). A zoomd that cannot say where it listens is of no use to
  // whoever waits for the file: it stops.
  const std::string port_file = absl::GetFlag(FLAGS_port_file);
  if (!port_file.empty()) {
    FileSystem* files = options.database.collection.store.file_system;
    if (absl::Status st = WriteFileAtomically(files != nullptr ? *files : *FileSystem::Posix(),
                                              port_file, absl::StrCat(server.grpc_port(), "\n"));
        !st.ok()) {
      ZOOM_LOG(ERROR, "--port_file: cannot write ", port_file, ": ",
               absl::StatusCodeToString(st.code()), ": ", st.message(), "; stopping");
      server.Shutdown(absl::Seconds(absl::GetFlag(FLAGS_shutdown_grace_s)));
      return 1;
    }
  }
  unsigned char sig = 0;
  for (;;) {
    while (read(g_signal_pipe[0], &sig, 1) != 1 && errno == EINTR) {
    }
    if (sig != SIGHUP) break;
    ZOOM_LOG(INFO, "SIGHUP: reloading the API keys");
    server.ReloadApiKeys().IgnoreError();  // logged; the previous keys stay on error
  }
  ZOOM_LOG(INFO, "signal ", static_cast<int>(sig), " received");
  server.Shutdown(absl::Seconds(absl::GetFlag(FLAGS_shutdown_grace_s)));
  return 0;
}

}  // namespace
}  // namespace zoom

int main(int argc, char** argv) {
  zoom::server::Database::EnsureBlasCore(argv);  // before any thread: may re-exec
  return zoom::Main(argc, argv);
}
