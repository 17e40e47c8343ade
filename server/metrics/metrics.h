// File: server/metrics/metrics.h
//
// Metrics: zoomd's Prometheus metrics, and the optional HTTP endpoint that
// serves them (GET /metrics, text exposition format). The only user of
// prometheus-cpp in the project; its headers stay in metrics.cc.
//
//   ZOOM_ASSIGN_OR_RETURN(auto metrics, Metrics::Create("0.0.0.0:9464"));
//   metrics->SetBuildInfo("0.1.0");
//   metrics->RecordRpc("Search", status.code(), watch.ElapsedSeconds());
//   metrics->RecordQuery("docs", stats);
//
// Series (labels in braces):
//   RPCs      zoomd_rpc_requests_total{rpc,code}   counter, every call
//             zoomd_rpc_errors_total{rpc,code}     counter, code != OK only
//             zoomd_rpc_latency_seconds{rpc}       histogram, 50us .. 10s
//   searches  zoomd_searches_total{collection}     counter
//             zoomd_search_ssd_reads{collection}   histogram of reads/query,
//                                                  buckets 0,1,2,4,..,1024
//             zoomd_search_stage_seconds{stage}    histogram, stage =
//                                                  preview|fullview|rerank
//             zoomd_ssd_reads_total, zoomd_ssd_bytes_read_total,
//             zoomd_ssd_read_errors_total, zoomd_search_candidates_total,
//             zoomd_search_degraded_total, zoomd_vector_cache_hits_total,
//             zoomd_vector_cache_misses_total      counters, all collections
//             zoomd_filtered_searches_total{strategy}, zoomd_filter_scans_total,
//             zoomd_filter_expansions_total        counters (filters)
//   state     zoomd_collection_points{collection}, ..._resident_bytes,
//             ..._disk_bytes, zoomd_index_build_progress{collection} (0..1)
//             zoomd_collection_index_state{collection,state}  1 for the
//                                   current state, 0 for the others
//             zoomd_io_backend{backend} = 1, zoomd_build_info{version} = 1
//   cluster   zoomd_router_events_total{event}  counter: hedge, failover,
//                                   partial, unavailable, map_refresh,
//                                   concern_unmet, log_divergence
//             zoomd_router_live_nodes           gauge
//             zoomd_log_repairs_total{event}    counter: fork, repaired,
//                                   republished (a node's replicas)
//   process   zoomd_process_resident_memory_bytes,
//             zoomd_process_virtual_memory_bytes (read from /proc/self/statm
//             at scrape time), zoomd_process_start_time_seconds (unix time)
//
// Label values are the strings given (rpc and collection names should come
// from a bounded set: every distinct value is a new series, kept until
// RemoveCollection or the end of the Metrics object).
//
// Thread safety: every method is thread-safe. The Record* methods are meant
// for the hot path: after the first call for a given (rpc, code) or
// collection they only take a shared lock, look the cached series up (no
// allocation) and bump atomics / a histogram's own lock. Scrapes (HTTP or
// Serialize) run concurrently with them.
#ifndef ZOOM_SERVER_METRICS_METRICS_H_
#define ZOOM_SERVER_METRICS_METRICS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/query_stats.h"

namespace zoom::server {

class Metrics {
 public:
  // listen_address "" = no HTTP endpoint (the registry only: tests, tools).
  // Otherwise "ip:port" ("127.0.0.1:9464", "0.0.0.0:9464", "[::1]:9464")
  // or just "port" (all interfaces); port 0 picks a free port, see port().
  // InvalidArgument if the address does not parse, Unavailable if the HTTP
  // server cannot listen on it (port busy, address not local, ...).
  // `authorize` (may be empty): called with a scrape's Authorization
  // header; false answers 401.
  static absl::StatusOr<std::unique_ptr<Metrics>> Create(
      const std::string& listen_address,
      std::function<bool(std::string_view)> authorize = nullptr);

  ~Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // One finished RPC: `code` is its final status (codes outside absl's range
  // count as UNKNOWN), `seconds` its wall time.
  void RecordRpc(std::string_view rpc, absl::StatusCode code, double seconds);

  // One finished search in `collection` (for a batch: once per query, or
  // once with the merged stats, which then counts as one search). Stages
  // with zero time (not run, e.g. no fullview for an in-RAM answer) are not
  // observed in zoomd_search_stage_seconds.
  void RecordQuery(std::string_view collection, const QueryStats& stats);

  // One Decoder TopK call (or stream step) of `contexts` contexts:
  // zoomd_decoder_contexts_total, zoomd_decoder_distance_evals_total,
  // zoomd_decoder_exact_contexts_total, zoomd_decoder_context_seconds
  // (seconds / contexts).
  void RecordDecode(uint64_t contexts, uint64_t distance_evals, bool exact, double seconds);

  // The current size and index state of `collection`. `build_progress` is
  // 0..1; `index_state` is normally NONE, BUILDING, READY or FAILED (another
  // string gets its own state series).
  void SetCollection(std::string_view collection, uint64_t points,
                     uint64_t resident_bytes, uint64_t disk_bytes,
                     double build_progress, std::string_view index_state);
  // Removes every series labelled with `collection` (the gauges above and
  // its searches/ssd_reads series). Recording for it again recreates them.
  void RemoveCollection(std::string_view collection);

  // A cluster router's events, zoomd_router_events_total{event}: kHedge (a
  // second replica asked after the shard's recent p95), kFailover (a
  // replica failed, the next one asked), kPartial (an answer short of some
  // shards, allowed by the request), kUnavailable (a search refused: a
  // shard without an answer), kMapRefresh (the shard maps read again on a
  // miss), kConcernUnmet (a write whose write concern was not met by its
  // deadline), kLogDivergence (two replicas reported different entries at
  // one sequence of a shard's log: the log lost entries it had
  // acknowledged and gave their sequences to others).
  enum class RouterEvent {
    kHedge = 0,
    kFailover,
    kPartial,
    kUnavailable,
    kMapRefresh,
    kConcernUnmet,
    kLogDivergence,
    kCount
  };
  void RecordRouterEvent(RouterEvent event);
  // A cluster node's log repairs, zoomd_log_repairs_total{event}: fork (a
  // replica found the log's entry at its position changed: JetStream lost
  // an acknowledged tail), repaired (a fork repaired: the replica rewound),
  // republished (entries the log had lost, published again; by count).
  enum class LogRepairEvent { kFork = 0, kRepaired, kRepublished, kCount };
  void RecordLogRepair(LogRepairEvent event, uint64_t n = 1);
  // The nodes a router routes to now (zoomd_router_live_nodes): those whose
  // heartbeats its last read of the node bucket found current.
  void SetRouterLiveNodes(int nodes);

  // The BlockReader backend in use ("io_uring", "pread"); replaces the
  // previous one.
  void SetIoBackend(std::string_view backend);
  // The server version; replaces the previous one.
  void SetBuildInfo(std::string_view version);

  // Everything, in the Prometheus text exposition format (what GET /metrics
  // returns, process metrics included).
  std::string Serialize() const;

  // The port the HTTP endpoint listens on (the chosen one for port 0);
  // 0 without an endpoint.
  int port() const;

 private:
  struct Impl;
  explicit Metrics(std::unique_ptr<Impl> impl);

  std::unique_ptr<Impl> impl_;
};

}  // namespace zoom::server

#endif  // ZOOM_SERVER_METRICS_METRICS_H_
