// File: server/metrics/metrics.cc
#include "server/metrics/metrics.h"

#include "server/metrics/http_endpoint.h"

#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <ctime>
#include <exception>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "prometheus/client_metric.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/metric_family.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"

namespace zoom::server {
namespace {

using prometheus::Counter;
using prometheus::Family;
using prometheus::Gauge;
using prometheus::Histogram;

// absl::StatusCode::kOk (0) .. kUnauthenticated (16).
constexpr int kNumCodes = 17;
constexpr int kUnknownCode = static_cast<int>(absl::StatusCode::kUnknown);

constexpr std::array<const char*, 4> kIndexStates = {"NONE", "BUILDING",
                                                     "READY", "FAILED"};

// 50us .. 10s, 1-2.5-5 steps.
const Histogram::BucketBoundaries& LatencyBuckets() {
  static const Histogram::BucketBoundaries kBuckets = {
      50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3,
      50e-3, 100e-3, 250e-3, 500e-3, 1.0,  2.5,    5.0,  10.0};
  return kBuckets;
}

// 0, 1, 2, 4, ..., 1024 reads per query.
const Histogram::BucketBoundaries& ReadsBuckets() {
  static const Histogram::BucketBoundaries kBuckets = [] {
    Histogram::BucketBoundaries b = {0.0};
    for (double v = 1; v <= 1024; v *= 2) b.push_back(v);
    return b;
  }();
  return kBuckets;
}

int CodeIndex(absl::StatusCode code) {
  const int c = static_cast<int>(code);
  return (c >= 0 && c < kNumCodes) ? c : kUnknownCode;
}

// True if `s` is 1-5 decimal digits with a value <= 65535.
bool IsPort(std::string_view s) {
  if (s.empty() || s.size() > 5) return false;
  int value = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + (c - '0');
  }
  return value <= 65535;
}

// Accepts "port", "a.b.c.d:port" and "[ipv6]:port" (what civetweb's
// listening_ports takes, without its 's'/'r' suffixes or lists).
absl::Status ValidateListenAddress(const std::string& address) {
  auto invalid = [&address](std::string_view why) {
    return absl::InvalidArgumentError("metrics listen address \"" + address +
                                      "\": " + std::string(why));
  };
  std::string host;
  std::string_view port;
  if (!address.empty() && address.front() == '[') {
    const size_t close = address.find("]:");
    if (close == std::string::npos) return invalid("expected [ipv6]:port");
    host = address.substr(1, close - 1);
    port = std::string_view(address).substr(close + 2);
    in6_addr addr6;
    if (inet_pton(AF_INET6, host.c_str(), &addr6) != 1) {
      return invalid("not an IPv6 address");
    }
  } else {
    const size_t colon = address.rfind(':');
    if (colon == std::string::npos) {
      port = address;
    } else {
      host = address.substr(0, colon);
      port = std::string_view(address).substr(colon + 1);
      in_addr addr4;
      if (inet_pton(AF_INET, host.c_str(), &addr4) != 1) {
        return invalid("not an IPv4 address (expected ip:port)");
      }
    }
  }
  if (!IsPort(port)) return invalid("port must be a number in 0..65535");
  return absl::OkStatus();
}

// Unix time the process started: /proc/self/stat starttime (clock ticks
// since boot) + /proc/stat btime. Falls back to `fallback`.
double ReadProcessStartTime(double fallback) {
  std::ifstream stat_file("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(stat_file)),
                   std::istreambuf_iterator<char>());
  // The command name (field 2) is in parentheses and may hold spaces.
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return fallback;
  std::istringstream fields(stat.substr(paren + 1));
  std::string field;
  // Field 3 (state) is the first after ')'; starttime is field 22.
  for (int i = 3; i <= 22; ++i) {
    if (!(fields >> field)) return fallback;
  }
  const double start_ticks = std::strtod(field.c_str(), nullptr);

  std::ifstream proc_stat("/proc/stat");
  std::string line;
  double boot_time = -1;
  while (std::getline(proc_stat, line)) {
    if (line.rfind("btime ", 0) == 0) {
      boot_time = std::strtod(line.c_str() + 6, nullptr);
      break;
    }
  }
  const long ticks_per_second = sysconf(_SC_CLK_TCK);
  if (boot_time <= 0 || ticks_per_second <= 0) return fallback;
  return boot_time + start_ticks / static_cast<double>(ticks_per_second);
}

prometheus::MetricFamily GaugeFamily(std::string name, std::string help,
                                     double value) {
  prometheus::MetricFamily family;
  family.name = std::move(name);
  family.help = std::move(help);
  family.type = prometheus::MetricType::Gauge;
  prometheus::ClientMetric metric;
  metric.gauge.value = value;
  family.metric.push_back(std::move(metric));
  return family;
}

// Process memory, read at scrape time.
class ProcessCollector : public prometheus::Collectable {
 public:
  explicit ProcessCollector(double start_time) : start_time_(start_time) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    std::vector<prometheus::MetricFamily> families;
    unsigned long long size_pages = 0;
    unsigned long long resident_pages = 0;
    bool have_memory = false;
    if (FILE* f = std::fopen("/proc/self/statm", "r")) {
      have_memory = std::fscanf(f, "%llu %llu", &size_pages,
                                &resident_pages) == 2;
      std::fclose(f);
    }
    if (have_memory) {
      const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
      families.push_back(
          GaugeFamily("zoomd_process_resident_memory_bytes",
                      "Resident set size of the zoomd process in bytes.",
                      static_cast<double>(resident_pages) * page));
      families.push_back(
          GaugeFamily("zoomd_process_virtual_memory_bytes",
                      "Virtual memory size of the zoomd process in bytes.",
                      static_cast<double>(size_pages) * page));
    }
    families.push_back(
        GaugeFamily("zoomd_process_start_time_seconds",
                    "Start time of the zoomd process since the unix epoch "
                    "in seconds.",
                    start_time_));
    return families;
  }

 private:
  const double start_time_;
};

template <typename T>
Family<T>& Register(prometheus::detail::Builder<T> builder,
                    prometheus::Registry& registry, const std::string& name,
                    const std::string& help) {
  return builder.Name(name).Help(help).Register(registry);
}

template <typename T>
void RemoveIfSet(Family<T>& family, T*& metric) {
  if (metric != nullptr) family.Remove(metric);
  metric = nullptr;
}

}  // namespace

struct Metrics::Impl {
  struct RpcSeries {
    Histogram* latency = nullptr;
    std::array<Counter*, kNumCodes> requests{};
    std::array<Counter*, kNumCodes> errors{};  // null for OK
  };
  struct CollectionSeries {
    // Created by the first RecordQuery.
    Counter* searches = nullptr;
    Histogram* ssd_reads = nullptr;
    // Created by the first SetCollection.
    Gauge* points = nullptr;
    Gauge* resident_bytes = nullptr;
    Gauge* disk_bytes = nullptr;
    Gauge* build_progress = nullptr;
    std::vector<std::pair<std::string, Gauge*>> states;
  };

  explicit Impl(double start_time)
      : registry(std::make_shared<prometheus::Registry>()),
        process(std::make_shared<ProcessCollector>(start_time)),
        rpc_requests(Register(prometheus::BuildCounter(), *registry,
                              "zoomd_rpc_requests_total",
                              "RPCs handled, by method and status code.")),
        rpc_errors(Register(prometheus::BuildCounter(), *registry,
                            "zoomd_rpc_errors_total",
                            "RPCs that ended with a non-OK status code.")),
        rpc_latency(Register(prometheus::BuildHistogram(), *registry,
                             "zoomd_rpc_latency_seconds",
                             "RPC wall time in seconds.")),
        stage_seconds(Register(prometheus::BuildHistogram(), *registry,
                               "zoomd_search_stage_seconds",
                               "Wall time of a search stage in seconds "
                               "(preview, fullview, rerank).")),
        ssd_reads(Register(prometheus::BuildHistogram(), *registry,
                           "zoomd_search_ssd_reads",
                           "SSD read requests per search.")),
        searches(Register(prometheus::BuildCounter(), *registry,
                          "zoomd_searches_total", "Searches run.")),
        points(Register(prometheus::BuildGauge(), *registry,
                        "zoomd_collection_points",
                        "Points stored in the collection.")),
        resident_bytes(Register(prometheus::BuildGauge(), *registry,
                                "zoomd_collection_resident_bytes",
                                "Bytes of the collection held in RAM.")),
        disk_bytes(Register(prometheus::BuildGauge(), *registry,
                            "zoomd_collection_disk_bytes",
                            "Bytes of the collection on disk.")),
        build_progress(Register(prometheus::BuildGauge(), *registry,
                                "zoomd_index_build_progress",
                                "Progress of the running index build, 0..1.")),
        index_state(Register(prometheus::BuildGauge(), *registry,
                             "zoomd_collection_index_state",
                             "1 for the collection's current index state, "
                             "0 for the others.")),
        io_backend(Register(prometheus::BuildGauge(), *registry,
                            "zoomd_io_backend",
                            "1 for the block reader backend in use.")),
        build_info(Register(prometheus::BuildGauge(), *registry,
                            "zoomd_build_info",
                            "1, labelled with the zoomd version.")) {
    auto counter = [this](const std::string& name, const std::string& help) {
      return &Register(prometheus::BuildCounter(), *registry, name, help)
                  .Add({});
    };
    ssd_reads_total = counter("zoomd_ssd_reads_total",
                              "SSD read requests sent by searches.");
    ssd_bytes_read_total = counter("zoomd_ssd_bytes_read_total",
                                   "Bytes read from the SSD by searches.");
    ssd_read_errors_total = counter("zoomd_ssd_read_errors_total",
                                    "Failed SSD reads of searches.");
    candidates_total = counter("zoomd_search_candidates_total",
                               "Candidates handed from preview to fullview.");
    degraded_total = counter("zoomd_search_degraded_total",
                             "Searches answered from the preview ranking "
                             "only (the fullview did not finish).");
    {
      auto& family = Register(prometheus::BuildCounter(), *registry,
                              "zoomd_filtered_searches_total",
                              "Filtered searches by the strategy that answered them "
                              "(exact, match_scan, filtered_preview, post_filter).");
      for (FilterStrategy st : {FilterStrategy::kExact, FilterStrategy::kMatchScan,
                                FilterStrategy::kFilteredPreview, FilterStrategy::kPostFilter}) {
        filter_strategy_total[static_cast<int>(st)] =
            &family.Add({{"strategy", FilterStrategyName(st)}});
      }
    }
    {
      auto& family = Register(prometheus::BuildCounter(), *registry, "zoomd_router_events_total",
                              "A cluster router's events: hedge (a second replica asked after "
                              "the shard's recent p95), failover (the next replica asked after "
                              "one failed), partial (an answer short of some shards), "
                              "unavailable (a search refused for a shard without an answer), "
                              "map_refresh (shard maps read again on a miss), concern_unmet "
                              "(a write whose write concern was not met by its deadline), "
                              "log_divergence (replicas applied different entries at one "
                              "sequence of a shard's log).");
      const char* names[] = {"hedge",       "failover",      "partial",       "unavailable",
                             "map_refresh", "concern_unmet", "log_divergence"};
      static_assert(std::size(names) == static_cast<size_t>(RouterEvent::kCount));
      for (size_t i = 0; i < std::size(names); ++i) {
        router_events[i] = &family.Add({{"event", names[i]}});
      }
    }
    {
      auto& family = Register(prometheus::BuildCounter(), *registry, "zoomd_log_repairs_total",
                              "A cluster node's log repairs: fork (a replica found the log's "
                              "entry at its position changed: the log lost an acknowledged "
                              "tail), repaired (a fork repaired, the replica rewound), "
                              "republished (entries the log had lost, published again).");
      const char* names[] = {"fork", "repaired", "republished"};
      static_assert(std::size(names) == static_cast<size_t>(LogRepairEvent::kCount));
      for (size_t i = 0; i < std::size(names); ++i) {
        log_repairs[i] = &family.Add({{"event", names[i]}});
      }
    }
    router_live_nodes = &Register(prometheus::BuildGauge(), *registry, "zoomd_router_live_nodes",
                                  "The nodes a cluster router routes to now.")
                             .Add({});
    filter_scans_total = counter("zoomd_filter_scans_total",
                                 "Filters evaluated from the stored payloads (a field "
                                 "without a ready payload index).");
    filter_expansions_total = counter("zoomd_filter_expansions_total",
                                      "Times a filtered preview was widened (or fell back "
                                      "to exact) to find k matching points.");
    cache_hits_total = counter("zoomd_vector_cache_hits_total",
                               "Full vectors found in the DRAM cache.");
    cache_misses_total = counter("zoomd_vector_cache_misses_total",
                                 "Full vectors not found in the DRAM cache.");
    decoder_contexts_total = counter("zoomd_decoder_contexts_total",
                                     "Contexts decoded by the FGD Decoder service.");
    decoder_distance_evals_total =
        counter("zoomd_decoder_distance_evals_total",
                "Distances computed by FGD searches (divide by contexts for the mean).");
    decoder_exact_total = counter("zoomd_decoder_exact_contexts_total",
                                  "Contexts decoded with the full softmax (exact mode).");
    decoder_context_seconds =
        &Register(prometheus::BuildHistogram(), *registry, "zoomd_decoder_context_seconds",
                  "Decoding time per context (a batch's time divided by its contexts).")
             .Add({}, LatencyBuckets());
    preview_seconds = &stage_seconds.Add({{"stage", "preview"}},
                                         LatencyBuckets());
    fullview_seconds = &stage_seconds.Add({{"stage", "fullview"}},
                                          LatencyBuckets());
    rerank_seconds = &stage_seconds.Add({{"stage", "rerank"}},
                                        LatencyBuckets());
  }

  // Returns the series of (rpc, code), creating what is missing.
  RpcSeries& RpcSeriesLocked(std::string_view rpc, int code)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    auto it = rpcs.find(rpc);
    if (it == rpcs.end()) {
      it = rpcs.emplace(std::string(rpc), RpcSeries{}).first;
    }
    RpcSeries& s = it->second;
    const std::string rpc_label(rpc);
    if (s.latency == nullptr) {
      s.latency = &rpc_latency.Add({{"rpc", rpc_label}}, LatencyBuckets());
    }
    if (s.requests[code] == nullptr) {
      const std::string code_label =
          absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
      s.requests[code] =
          &rpc_requests.Add({{"rpc", rpc_label}, {"code", code_label}});
      if (code != 0) {
        s.errors[code] =
            &rpc_errors.Add({{"rpc", rpc_label}, {"code", code_label}});
      }
    }
    return s;
  }

  CollectionSeries& CollectionLocked(std::string_view collection)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    auto it = collections.find(collection);
    if (it == collections.end()) {
      it = collections.emplace(std::string(collection), CollectionSeries{})
               .first;
    }
    return it->second;
  }

  void AddQuerySeriesLocked(std::string_view collection, CollectionSeries& s)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    const prometheus::Labels labels = {{"collection", std::string(collection)}};
    if (s.searches == nullptr) s.searches = &searches.Add(labels);
    if (s.ssd_reads == nullptr) {
      s.ssd_reads = &ssd_reads.Add(labels, ReadsBuckets());
    }
  }

  void AddGaugeSeriesLocked(std::string_view collection, CollectionSeries& s)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (s.points != nullptr) return;
    const prometheus::Labels labels = {{"collection", std::string(collection)}};
    s.points = &points.Add(labels);
    s.resident_bytes = &resident_bytes.Add(labels);
    s.disk_bytes = &disk_bytes.Add(labels);
    s.build_progress = &build_progress.Add(labels);
    for (const char* state : kIndexStates) AddStateLocked(collection, s, state);
  }

  void AddStateLocked(std::string_view collection, CollectionSeries& s,
                      std::string_view state)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    Gauge* gauge = &index_state.Add({{"collection", std::string(collection)},
                                     {"state", std::string(state)}});
    s.states.emplace_back(std::string(state), gauge);
  }

  // Replaces the single series of an info-style gauge family.
  void SetInfoLocked(Family<Gauge>& family, Gauge*& current,
                     const std::string& label, std::string_view value)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    RemoveIfSet(family, current);
    current = &family.Add({{label, std::string(value)}});
    current->Set(1);
  }

  const std::shared_ptr<prometheus::Registry> registry;
  const std::shared_ptr<ProcessCollector> process;

  Family<Counter>& rpc_requests;
  Family<Counter>& rpc_errors;
  Family<Histogram>& rpc_latency;
  Family<Histogram>& stage_seconds;
  Family<Histogram>& ssd_reads;
  Family<Counter>& searches;
  Family<Gauge>& points;
  Family<Gauge>& resident_bytes;
  Family<Gauge>& disk_bytes;
  Family<Gauge>& build_progress;
  Family<Gauge>& index_state;
  Family<Gauge>& io_backend;
  Family<Gauge>& build_info;

  // Unlabelled series, created once.
  Counter* ssd_reads_total = nullptr;
  Counter* ssd_bytes_read_total = nullptr;
  Counter* ssd_read_errors_total = nullptr;
  Counter* candidates_total = nullptr;
  Counter* degraded_total = nullptr;
  Counter* filter_strategy_total[5] = {nullptr, nullptr, nullptr, nullptr, nullptr};
  Counter* filter_scans_total = nullptr;
  Counter* filter_expansions_total = nullptr;
  Counter* cache_hits_total = nullptr;
  Counter* cache_misses_total = nullptr;
  Histogram* preview_seconds = nullptr;
  std::array<Counter*, static_cast<size_t>(RouterEvent::kCount)> router_events{};
  std::array<Counter*, static_cast<size_t>(LogRepairEvent::kCount)> log_repairs{};
  Gauge* router_live_nodes = nullptr;
  Counter* decoder_contexts_total = nullptr;
  Counter* decoder_distance_evals_total = nullptr;
  Counter* decoder_exact_total = nullptr;
  Histogram* decoder_context_seconds = nullptr;
  Histogram* fullview_seconds = nullptr;
  Histogram* rerank_seconds = nullptr;

  mutable absl::Mutex mu;
  // RPC series are never removed: pointers read under the lock stay valid
  // after it. Collection series are, so they are used under the lock.
  std::map<std::string, RpcSeries, std::less<>> rpcs ABSL_GUARDED_BY(mu);
  std::map<std::string, CollectionSeries, std::less<>> collections
      ABSL_GUARDED_BY(mu);
  Gauge* io_backend_series ABSL_GUARDED_BY(mu) = nullptr;
  Gauge* build_info_series ABSL_GUARDED_BY(mu) = nullptr;

  int port = 0;
  // Last: stopped (destroyed) first, before what it serves.
  std::unique_ptr<HttpEndpoint> exposer;
};

absl::StatusOr<std::unique_ptr<Metrics>> Metrics::Create(
    const std::string& listen_address, std::function<bool(std::string_view)> authorize) {
  std::unique_ptr<Impl> impl;
  try {
    impl = std::make_unique<Impl>(
        ReadProcessStartTime(static_cast<double>(std::time(nullptr))));
  } catch (const std::exception& e) {
    return absl::InternalError(std::string("metrics registry: ") + e.what());
  }
  if (!listen_address.empty()) {
    if (absl::Status s = ValidateListenAddress(listen_address); !s.ok()) {
      return s;
    }
    // Our own endpoint, not prometheus::Exposer: see http_endpoint.h.
    Impl* raw = impl.get();
    HttpEndpointOptions endpoint_options;
    endpoint_options.authorize = std::move(authorize);
    auto endpoint = HttpEndpoint::Start(listen_address, "/metrics", [raw] {
      std::vector<prometheus::MetricFamily> families = raw->registry->Collect();
      std::vector<prometheus::MetricFamily> process = raw->process->Collect();
      families.insert(families.end(), std::make_move_iterator(process.begin()),
                      std::make_move_iterator(process.end()));
      return prometheus::TextSerializer().Serialize(families);
    }, endpoint_options);
    if (!endpoint.ok()) return endpoint.status();
    impl->exposer = std::move(*endpoint);
    impl->port = impl->exposer->port();
  }
  return std::unique_ptr<Metrics>(new Metrics(std::move(impl)));
}

Metrics::Metrics(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Metrics::~Metrics() = default;

void Metrics::RecordRpc(std::string_view rpc, absl::StatusCode code,
                        double seconds) {
  const int c = CodeIndex(code);
  Impl::RpcSeries* series = nullptr;
  {
    absl::ReaderMutexLock lock(&impl_->mu);
    auto it = impl_->rpcs.find(rpc);
    if (it != impl_->rpcs.end() && it->second.requests[c] != nullptr) {
      series = &it->second;
    }
  }
  if (series == nullptr) {
    absl::MutexLock lock(&impl_->mu);
    series = &impl_->RpcSeriesLocked(rpc, c);
  }
  // Never removed, so valid without the lock; `requests[c]`/`errors[c]` were
  // set before `series` was published under the lock.
  series->requests[c]->Increment();
  if (series->errors[c] != nullptr) series->errors[c]->Increment();
  series->latency->Observe(std::max(0.0, seconds));
}

void Metrics::RecordDecode(uint64_t contexts, uint64_t distance_evals, bool exact,
                           double seconds) {
  Impl& m = *impl_;
  if (contexts == 0) return;
  m.decoder_contexts_total->Increment(static_cast<double>(contexts));
  if (distance_evals > 0) {
    m.decoder_distance_evals_total->Increment(static_cast<double>(distance_evals));
  }
  if (exact) m.decoder_exact_total->Increment(static_cast<double>(contexts));
  m.decoder_context_seconds->Observe(seconds / static_cast<double>(contexts));
}

void Metrics::RecordQuery(std::string_view collection,
                          const QueryStats& stats) {
  Impl& m = *impl_;
  if (stats.preview_us > 0) m.preview_seconds->Observe(stats.preview_us * 1e-6);
  if (stats.fullview_us > 0) {
    m.fullview_seconds->Observe(stats.fullview_us * 1e-6);
  }
  if (stats.rerank_us > 0) m.rerank_seconds->Observe(stats.rerank_us * 1e-6);
  auto add = [](Counter* counter, uint64_t value) {
    if (value > 0) counter->Increment(static_cast<double>(value));
  };
  add(m.ssd_reads_total, stats.reads);
  add(m.ssd_bytes_read_total, stats.bytes_read);
  add(m.ssd_read_errors_total, stats.read_errors);
  add(m.candidates_total, stats.candidates);
  add(m.cache_hits_total, stats.cache_hits);
  add(m.cache_misses_total, stats.cache_misses);
  if (stats.degraded) m.degraded_total->Increment();
  if (stats.filter_strategy != FilterStrategy::kNone) {
    const size_t st = static_cast<size_t>(stats.filter_strategy);
    if (st < std::size(m.filter_strategy_total)) {
      if (Counter* c = m.filter_strategy_total[st]) c->Increment();
    }
  }
  if (stats.filter_scan) m.filter_scans_total->Increment();
  add(m.filter_expansions_total, stats.filter_expansions);

  auto record = [&stats](Impl::CollectionSeries& s) {
    s.searches->Increment();
    s.ssd_reads->Observe(static_cast<double>(stats.reads));
  };
  {
    absl::ReaderMutexLock lock(&m.mu);
    auto it = m.collections.find(collection);
    if (it != m.collections.end() && it->second.searches != nullptr) {
      record(it->second);
      return;
    }
  }
  absl::MutexLock lock(&m.mu);
  Impl::CollectionSeries& s = m.CollectionLocked(collection);
  m.AddQuerySeriesLocked(collection, s);
  record(s);
}

void Metrics::SetCollection(std::string_view collection, uint64_t points,
                            uint64_t resident_bytes, uint64_t disk_bytes,
                            double build_progress,
                            std::string_view index_state) {
  // Not a hot path: exclusive, so concurrent calls cannot leave two states
  // at 1.
  Impl& m = *impl_;
  absl::MutexLock lock(&m.mu);
  Impl::CollectionSeries& s = m.CollectionLocked(collection);
  m.AddGaugeSeriesLocked(collection, s);
  bool known_state = false;
  for (const auto& [state, gauge] : s.states) {
    if (state == index_state) known_state = true;
  }
  if (!known_state) m.AddStateLocked(collection, s, index_state);
  s.points->Set(static_cast<double>(points));
  s.resident_bytes->Set(static_cast<double>(resident_bytes));
  s.disk_bytes->Set(static_cast<double>(disk_bytes));
  s.build_progress->Set(build_progress);
  for (const auto& [state, gauge] : s.states) {
    gauge->Set(state == index_state ? 1 : 0);
  }
}

void Metrics::RemoveCollection(std::string_view collection) {
  Impl& m = *impl_;
  absl::MutexLock lock(&m.mu);
  auto it = m.collections.find(collection);
  if (it == m.collections.end()) return;
  Impl::CollectionSeries& s = it->second;
  RemoveIfSet(m.searches, s.searches);
  RemoveIfSet(m.ssd_reads, s.ssd_reads);
  RemoveIfSet(m.points, s.points);
  RemoveIfSet(m.resident_bytes, s.resident_bytes);
  RemoveIfSet(m.disk_bytes, s.disk_bytes);
  RemoveIfSet(m.build_progress, s.build_progress);
  for (auto& [state, gauge] : s.states) RemoveIfSet(m.index_state, gauge);
  m.collections.erase(it);
}

void Metrics::RecordRouterEvent(RouterEvent event) {
  const int i = static_cast<int>(event);
  if (i >= 0 && i < static_cast<int>(RouterEvent::kCount)) impl_->router_events[i]->Increment();
}

void Metrics::RecordLogRepair(LogRepairEvent event, uint64_t n) {
  const int i = static_cast<int>(event);
  if (i >= 0 && i < static_cast<int>(LogRepairEvent::kCount)) {
    impl_->log_repairs[i]->Increment(static_cast<double>(n));
  }
}

void Metrics::SetRouterLiveNodes(int nodes) { impl_->router_live_nodes->Set(nodes); }

void Metrics::SetIoBackend(std::string_view backend) {
  absl::MutexLock lock(&impl_->mu);
  impl_->SetInfoLocked(impl_->io_backend, impl_->io_backend_series, "backend",
                       backend);
}

void Metrics::SetBuildInfo(std::string_view version) {
  absl::MutexLock lock(&impl_->mu);
  impl_->SetInfoLocked(impl_->build_info, impl_->build_info_series, "version",
                       version);
}

std::string Metrics::Serialize() const {
  std::vector<prometheus::MetricFamily> families = impl_->registry->Collect();
  std::vector<prometheus::MetricFamily> process = impl_->process->Collect();
  families.insert(families.end(), std::make_move_iterator(process.begin()),
                  std::make_move_iterator(process.end()));
  return prometheus::TextSerializer().Serialize(families);
}

int Metrics::port() const { return impl_->port; }

}  // namespace zoom::server
