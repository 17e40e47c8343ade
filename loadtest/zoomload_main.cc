// File: loadtest/zoomload_main.cc
//
// zoomload: a gRPC load generator for zoomd (see kUsage below).
//
// Exit status: 0 on success; 1 when setup or the data fails, the server
// cannot be used, or every measured request failed; 2 on a usage error.
// Flags are checked before absl::ParseCommandLine runs (which would exit 1 on
// a bad flag) so that every usage error exits 2, as in zoomctl.

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/decoder_client.h"
#include "client/zoom_client.h"
#include "common/binary_io.h"
#include "common/json.h"
#include "common/texmex.h"
#include "common/vector_dataset.h"
#include "google/protobuf/util/json_util.h"
#include "client/cli_flags.h"
#include "client/connection_flags.h"
#include "client/progress_bar.h"
#include "loadtest/server_workload.h"
#include "loadtest/zoomload.h"
#include "zoom/v1/decoder.grpc.pb.h"
#include "zoom/v1/zoom.grpc.pb.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051", "zoomd address, HOST:PORT");
ABSL_FLAG(std::string, workload, "search",
          "search, mixed or topk (load tests); grpc, fgd or scale (benchmarks of a zoomd "
          "zoomload starts)");
ABSL_FLAG(std::string, dataset, "", "data set folder (see --help)");
ABSL_FLAG(std::string, collection, "", "search, mixed: the collection");
ABSL_FLAG(std::string, model, "", "topk: the Decoder model name");
ABSL_FLAG(std::string, model_dir, "",
          "topk --setup: the model directory's name under the server's --models_dir "
          "(default: the --dataset folder's name)");
ABSL_FLAG(uint32_t, k, 10, "neighbours (or top-K words) per request");
ABSL_FLAG(uint32_t, concurrency, 0, "closed loop: concurrent workers");
ABSL_FLAG(double, rate, 0, "open loop: offered requests per second");
ABSL_FLAG(double, duration, 10, "seconds measured per step");
ABSL_FLAG(double, warmup, 1, "seconds of warm-up per step (not counted)");
ABSL_FLAG(uint64_t, max_requests, 0, "measured requests per step at most (0: no cap)");
ABSL_FLAG(std::string, json, "", "write the JSON report to this file");
ABSL_FLAG(std::string, svg, "", "write the latency-vs-load SVG plot to this file");
ABSL_FLAG(std::string, sweep, "", "closed-loop sweep: comma list of concurrencies");
ABSL_FLAG(std::string, sweep_rates, "", "open-loop sweep: comma list of rates");
ABSL_FLAG(uint32_t, ef, 0, "HNSW ef (0: the collection's / model's default)");
ABSL_FLAG(uint32_t, nprobe, 0, "IVF clusters probed (0: default)");
ABSL_FLAG(uint32_t, rerank, 0, "candidates re-ranked from the SSD (0: default)");
ABSL_FLAG(bool, preview_only, false, "rank by PQ codes only");
ABSL_FLAG(bool, exact, false, "brute force (search) / full softmax (topk)");
ABSL_FLAG(uint32_t, timeout_ms, 10000, "deadline of each request in milliseconds");
ABSL_FLAG(std::string, metric, "", "l2, ip or cosine (default: see --help)");
ABSL_FLAG(double, write_fraction, 0.1, "mixed: share of requests that write");
ABSL_FLAG(uint64_t, seed, 1, "seed of the open loop's arrival times");
ABSL_FLAG(bool, setup, false, "create, import and index the collection first "
                              "(topk: load the model)");
ABSL_FLAG(uint32_t, max_in_flight, 4096, "open loop: outstanding requests at most");
ABSL_FLAG(bool, progress, true, "progress line on stderr");
ABSL_FLAG(uint32_t, import_batch, 1000, "--setup: points per Import message");
ABSL_FLAG(std::string, filter, "",
          "search, mixed: every search carries this filter (the JSON form of zoom.v1.Filter); "
          "recall is then not scored (the ground truth is unfiltered)");
ABSL_FLAG(bool, payloads, false,
          "--setup: give each imported point generated fields (tag: \"t<n>\" from a Zipf law, "
          "s = 2 over 1,000 values; price: an integer uniform in [0, 10^6)) and index them");

namespace zoom::load {
namespace {

using ::zoom::client::FlagScan;
using ::zoom::client::ScanFlags;

constexpr int kExitOk = 0;
constexpr int kExitError = 1;
constexpr int kExitUsage = 2;

constexpr char kUsage[] =
    R"(usage: zoomload --target HOST:PORT --workload search|mixed|topk --dataset DIR
         (--collection NAME | --model NAME) [--k 10]
         (--concurrency N | --rate R | --sweep 'c1,c2,...' | --sweep_rates 'r1,r2,...')
         [--duration S] [--warmup S] [--max_requests N] [--json FILE] [--svg FILE]
         [--ef N] [--nprobe N] [--rerank N] [--preview_only] [--exact] [--timeout_ms MS]
         [--metric l2|ip|cosine] [--write_fraction F] [--seed N] [--setup] [--payloads]
         [--filter JSON]
       zoomload --workload grpc|fgd|scale [--zoomd BIN] [--json FILE] [workload flags]

A gRPC load generator for zoomd. Bounded: each step sends requests for
--warmup + --duration seconds (and at most --max_requests measured ones), then
waits for the replies still in flight (each has a --timeout_ms deadline).

Load:
  --concurrency N    closed loop: N workers, each sends its next request when
                     the reply to the previous one arrives
  --rate R           open loop: Poisson arrivals at R requests/s (exponential
                     gaps from --seed); requests are asynchronous and latency
                     counts from the INTENDED send time, so queueing in the
                     server (or a late dispatcher) is never hidden
  --sweep / --sweep_rates  one step per value, in the order given

Workloads (--dataset DIR):
  search  queries from DIR/query.fvecs|bvecs, cycling; each reply is scored for
          recall@k = |returned top-k ∩ ground-truth top-k| / k against
          DIR/groundtruth_<metric>.ivecs (--metric; default: the collection's
          metric, else the first of cosine, l2, ip with ground truth, as
          zoombench; the folder is read by common/vector_dataset.h)
  mixed   as search, plus a --write_fraction share (default 0.1) of writes:
          upserts of new ids (the base count and up; vectors copied from base
          rows) and deletes of those new ids; the new ids still present at the
          end are deleted. A new id counts in recall as its source row.
  topk    the Decoder service: contexts from DIR/H.f32 (d = "dim" of
          DIR/meta.json) against --model NAME; recall@k against
          DIR/ref_ids.i32 when present
  --setup  search/mixed: create the collection (dim of the file, --metric,
           dtype uint8 for .bvecs) unless it exists with the same dim, import
           DIR/base.* with a progress bar, build the index and wait; topk:
           load --model unless it is already serving, from the directory
           --model_dir (default: DIR's name) under the server's --models_dir
           (the server reads its own copy of the model: run zoomd with
           --models_dir set to DIR's parent, or a folder holding a copy)

Server workloads: benchmarks of a zoomd that zoomload starts itself (--zoomd
BIN, default ../server/main/zoomd next to zoomload) as a child process on a
port the OS picks (--port_file), its data dir its own; no --target. They
print tables as they go and, with --json FILE, JSON lines (one object per
row, as zoombench writes them); only their own flags apply (--helpfull):
  grpc   Search and SearchBatch through gRPC (--grpc_* flags, --dataset,
         --metric, --k, --ef/--nprobe/--rerank (0: the collection's default),
         --max_queries): the data set imported and indexed (--grpc_parts
         setup), then Health.Check and a preview-only Search at 1 caller
         (floor), every query once at each --grpc_concurrency (search: recall@10,
         QPS, p50/p99, reads and the CPU of zoomload + zoomd per query), and
         SearchBatch (batch). The in-process half is zoombench
         --benchmarks=collection over the same --grpc_work_dir;
         loadtest/grpc_overhead.py runs both and prints them side by side.
  fgd    the Decoder: the model --dataset DIR loaded (zoomd's --models_dir is
         its parent), then --fgd_calls contexts of DIR/H.f32 one TopK each and
         one StreamTopK step each, one caller: microseconds per context
         (--ef, --k; loadtest/grpc_overhead.py --workload fgd puts zoombench
         --benchmarks=fgd's in-process time beside them).
  scale  how zoomd's costs grow with N (--scale_* flags): for each N of
         --scale_n a SIFT-like set from zoomdatagen, a fresh zoomd: import,
         build, memory, queries, restart, compaction; then the log-log slope
         of each cost against N.

Filters: --filter JSON puts the filter (zoom.v1.Filter's JSON form) on every
search (recall is then not scored: the ground truth is unfiltered);
--payloads with --setup gives every imported point generated fields (tag:
"t<n>", Zipf s = 2 over 1,000 values, t0 ~61%, t2 ~7%, t9 ~0.6%; price: an
integer uniform in [0, 10^6)) and indexes both (keyword, integer).

Connection: --api_key_file FILE (or $ZOOM_API_KEY, or --api_key KEY), and
--tls_ca FILE [--tls_cert FILE --tls_key FILE] [--tls_server_name N] for TLS.

Output: a summary table on stdout (sched/s: the rate the Poisson schedule
actually drew; achieved QPS = measured requests / (time from the end of the
warm-up to the last reply, at least --duration); p50/p90/p99/p99.9/max latency
in microseconds over the successful requests; requests, errors, mean recall@k,
mean SSD reads per query) and errors by status code; --json FILE:
one object (an array of objects for a sweep) with qps, p50_us, p90_us,
p99_us, p999_us, max_us, min_us, mean_us, requests, ok, errors,
errors_by_code, recall_at_k, reads_per_query, offered_rate, scheduled_rate,
concurrency, percentiles (0 50 75 90 95 99 99.9 99.99 100), histogram (log
buckets of at most 0.8% relative width: [from_us, to_us, count]), by_op,
send_lag_us (open loop), knee; --svg FILE: p50/p99/p99.9 against the offered
load, log latency axis. Latency fields are null when no request succeeded.
Progress: one line a second on stderr (redrawn in place on a terminal);
--progress=false for none.

The knee of a sweep: the last step of the leading run of steps that keep up.
A step keeps up when at most 1% of its requests failed, its p99 is at most 10x
the first step's p99, and (open loop) its achieved QPS is at least 95% of its
scheduled rate, or (closed loop) its QPS is at least 5% above every earlier
step's.

Exit status: 0 success; 1 setup, data or server error, or every measured
request failed; 2 usage error.
)";

int UsageError(absl::string_view message) {
  absl::FPrintF(stderr, "zoomload: %s\nRun 'zoomload --help' for usage.\n", message);
  return kExitUsage;
}

int Fail(const absl::Status& status) {
  absl::FPrintF(stderr, "zoomload: error: %s: %s\n", absl::StatusCodeToString(status.code()),
                status.message());
  return kExitError;
}

// ---- Options ----------------------------------------------------------------------

enum class Workload { kSearch, kMixed, kTopK };

struct Options {
  Workload workload = Workload::kSearch;
  std::string workload_name;
  std::string target;
  std::string dataset;
  std::string collection;
  std::string model;
  std::string model_dir;  // topk --setup: under the server's --models_dir
  client::ClientOptions connection;  // API key, TLS
  uint32_t k = 10;
  bool open_loop = false;
  bool sweep = false;
  std::vector<double> loads;  // concurrencies or rates, one per step
  double duration_s = 10;
  double warmup_s = 1;
  uint64_t max_requests = 0;
  std::string json_path, svg_path;
  uint32_t ef = 0, nprobe = 0, rerank = 0;
  bool preview_only = false, exact = false;
  absl::Duration timeout;
  std::string metric;  // "" = resolve
  double write_fraction = 0.1;
  uint64_t seed = 1;
  bool setup = false;
  uint32_t max_in_flight = 4096;
  bool progress = true;
  uint32_t import_batch = 1000;
  std::optional<v1::Filter> filter;
  bool payloads = false;
};

// The flags the load-test workloads (search, mixed, topk) read: a server
// workload may read some of them too (--dataset, --k, ...).
bool IsLoadTestFlag(const std::string& flag) {
  static const std::set<std::string>* const kFlags = new std::set<std::string>{
      "target", "workload", "dataset", "collection", "model", "model_dir", "k", "concurrency",
      "rate", "duration", "warmup", "max_requests", "json", "svg", "sweep", "sweep_rates",
      "ef", "nprobe", "rerank", "preview_only", "exact", "timeout_ms", "metric",
      "write_fraction", "seed", "setup", "max_in_flight", "progress", "import_batch",
      "filter", "payloads"};
  return kFlags->count(flag) > 0;
}

// Reads and checks the flags; a message on error (exit 2).
absl::StatusOr<Options> ReadOptions(const std::set<std::string>& given) {
  auto bad = [](absl::string_view message) { return absl::InvalidArgumentError(message); };
  Options o;
  o.workload_name = absl::AsciiStrToLower(absl::GetFlag(FLAGS_workload));
  if (o.workload_name == "search") {
    o.workload = Workload::kSearch;
  } else if (o.workload_name == "mixed") {
    o.workload = Workload::kMixed;
  } else if (o.workload_name == "topk") {
    o.workload = Workload::kTopK;
  } else {
    return bad(absl::StrCat("bad --workload '", o.workload_name,
                            "': expected search, mixed, topk, grpc, fgd or scale"));
  }
  // The server workloads' own flags (--zoomd, --grpc_*, ...) do not apply here.
  for (const auto& [name, info] : ServerWorkloads()) {
    for (const std::string& flag : info.flags) {
      if (given.count(flag) > 0 && !IsLoadTestFlag(flag)) {
        return bad(absl::StrCat("--", flag, " applies to --workload ", name, " only"));
      }
    }
  }
  o.target = absl::GetFlag(FLAGS_target);
  if (o.target.empty()) return bad("--target is empty");
  if (absl::Status st = client::ApplyConnectionFlags(&o.connection); !st.ok()) {
    return bad(st.message());
  }
  if (auto channel = client::MakeChannel(o.target, o.connection); !channel.ok()) {
    return bad(channel.status().message());
  }
  o.dataset = absl::GetFlag(FLAGS_dataset);
  if (o.dataset.empty()) return bad("--dataset DIR is required");
  o.collection = absl::GetFlag(FLAGS_collection);
  o.model = absl::GetFlag(FLAGS_model);
  o.model_dir = absl::GetFlag(FLAGS_model_dir);
  if (o.model_dir.empty()) {
    std::filesystem::path p = std::filesystem::path(o.dataset).lexically_normal();
    if (!p.has_filename()) p = p.parent_path();
    o.model_dir = p.filename().string();
  }
  if (o.workload != Workload::kTopK && given.count("model_dir")) {
    return bad("--model_dir applies to --workload topk only");
  }
  if (o.workload == Workload::kTopK) {
    if (o.model.empty()) return bad("--workload topk needs --model NAME");
    if (given.count("collection")) return bad("--collection does not apply to --workload topk");
    for (const char* flag : {"nprobe", "rerank", "preview_only", "metric"}) {
      if (given.count(flag)) {
        return bad(absl::StrCat("--", flag, " does not apply to --workload topk"));
      }
    }
  } else {
    if (o.collection.empty()) {
      return bad(absl::StrCat("--workload ", o.workload_name, " needs --collection NAME"));
    }
    if (given.count("model")) return bad("--model applies to --workload topk only");
  }
  if (o.workload != Workload::kMixed && given.count("write_fraction")) {
    return bad("--write_fraction applies to --workload mixed only");
  }
  o.k = absl::GetFlag(FLAGS_k);
  if (o.k == 0 || o.k > 10000) return bad("--k must be 1..10000");

  const uint32_t concurrency = absl::GetFlag(FLAGS_concurrency);
  const double rate = absl::GetFlag(FLAGS_rate);
  const std::string sweep = absl::GetFlag(FLAGS_sweep);
  const std::string sweep_rates = absl::GetFlag(FLAGS_sweep_rates);
  const int modes = (given.count("concurrency") ? 1 : 0) + (given.count("rate") ? 1 : 0) +
                    (given.count("sweep") ? 1 : 0) + (given.count("sweep_rates") ? 1 : 0);
  if (modes != 1) {
    return bad("give exactly one of --concurrency N, --rate R, --sweep LIST, --sweep_rates LIST");
  }
  if (given.count("concurrency")) {
    if (concurrency == 0 || concurrency > 4096) return bad("--concurrency must be 1..4096");
    o.loads = {static_cast<double>(concurrency)};
  } else if (given.count("rate")) {
    if (!std::isfinite(rate) || rate <= 0 || rate > 1e6) {
      return bad("--rate must be a number of requests per second in (0, 1000000]");
    }
    o.open_loop = true;
    o.loads = {rate};
  } else if (given.count("sweep")) {
    absl::StatusOr<std::vector<double>> list = ParseNumberList(sweep, /*integers=*/true);
    if (!list.ok()) return bad(absl::StrCat("bad --sweep: ", list.status().message()));
    for (double c : *list) {
      if (c > 4096) return bad("bad --sweep: concurrencies must be 1..4096");
    }
    o.loads = *list;
    o.sweep = true;
  } else {
    absl::StatusOr<std::vector<double>> list = ParseNumberList(sweep_rates, /*integers=*/false);
    if (!list.ok()) return bad(absl::StrCat("bad --sweep_rates: ", list.status().message()));
    o.loads = *list;
    o.open_loop = true;
    o.sweep = true;
  }
  if (o.loads.size() > 64) return bad("a sweep has at most 64 steps");
  if (given.count("max_in_flight") && !o.open_loop) {
    return bad("--max_in_flight applies to the open loop (--rate, --sweep_rates) only");
  }
  if (given.count("seed") && !o.open_loop) {
    return bad("--seed applies to the open loop (--rate, --sweep_rates) only");
  }

  o.duration_s = absl::GetFlag(FLAGS_duration);
  if (!std::isfinite(o.duration_s) || o.duration_s <= 0 || o.duration_s > 86400) {
    return bad("--duration must be a number of seconds in (0, 86400]");
  }
  o.warmup_s = absl::GetFlag(FLAGS_warmup);
  if (!std::isfinite(o.warmup_s) || o.warmup_s < 0 || o.warmup_s > 3600) {
    return bad("--warmup must be a number of seconds in [0, 3600]");
  }
  o.max_requests = absl::GetFlag(FLAGS_max_requests);
  o.json_path = absl::GetFlag(FLAGS_json);
  o.svg_path = absl::GetFlag(FLAGS_svg);
  if (given.count("json") && o.json_path.empty()) return bad("--json FILE is empty");
  if (given.count("svg") && o.svg_path.empty()) return bad("--svg FILE is empty");
  o.ef = absl::GetFlag(FLAGS_ef);
  o.nprobe = absl::GetFlag(FLAGS_nprobe);
  o.rerank = absl::GetFlag(FLAGS_rerank);
  o.preview_only = absl::GetFlag(FLAGS_preview_only);
  o.exact = absl::GetFlag(FLAGS_exact);
  if (o.preview_only && o.exact) return bad("--preview_only and --exact exclude each other");
  const uint32_t timeout_ms = absl::GetFlag(FLAGS_timeout_ms);
  if (timeout_ms == 0 || timeout_ms > 3600 * 1000) {
    return bad("--timeout_ms must be 1..3600000 (every request has a deadline)");
  }
  o.timeout = absl::Milliseconds(timeout_ms);
  o.metric = absl::AsciiStrToLower(absl::GetFlag(FLAGS_metric));
  if (o.metric == "inner_product") o.metric = "ip";
  if (!o.metric.empty() && o.metric != "l2" && o.metric != "ip" && o.metric != "cosine") {
    return bad(absl::StrCat("bad --metric '", o.metric, "': expected l2, ip or cosine"));
  }
  o.write_fraction = absl::GetFlag(FLAGS_write_fraction);
  if (!(o.write_fraction >= 0 && o.write_fraction <= 1)) {
    return bad("--write_fraction must be in [0, 1]");
  }
  o.seed = absl::GetFlag(FLAGS_seed);
  o.setup = absl::GetFlag(FLAGS_setup);
  o.max_in_flight = absl::GetFlag(FLAGS_max_in_flight);
  if (o.max_in_flight == 0 || o.max_in_flight > 1000000) {
    return bad("--max_in_flight must be 1..1000000");
  }
  o.progress = absl::GetFlag(FLAGS_progress);
  o.import_batch = absl::GetFlag(FLAGS_import_batch);
  if (o.import_batch == 0 || o.import_batch > 100000) return bad("--import_batch must be 1..100000");
  if (const std::string json = absl::GetFlag(FLAGS_filter); !json.empty()) {
    v1::Filter f;
    auto st = google::protobuf::util::JsonStringToMessage(json, &f);
    if (!st.ok()) {
      return bad(absl::StrCat("--filter is not a zoom.v1.Filter in JSON: ",
                              st.message().as_string()));
    }
    o.filter = std::move(f);
  }
  o.payloads = absl::GetFlag(FLAGS_payloads);
  if (o.payloads && !o.setup) return bad("--payloads attaches fields at --setup: give both");
  return o;
}

// ---- Data ----------------------------------------------------------------------------

// --payloads: point i's generated fields, a function of i alone (so that a
// second --setup, or another tool, agrees): tag "t<n>" with P(n) ~ 1/(n+1)^2
// over 1,000 values (t0 about 61%, t1 15%, t2 7%, t9 0.6%, t99 0.006%),
// price uniform in [0, 10^6).
void GeneratedFields(uint64_t i, v1::Point* point) {
  static const std::vector<double> cdf = [] {
    std::vector<double> c(1000);
    double sum = 0;
    for (int n = 0; n < 1000; ++n) c[n] = (sum += 1.0 / ((n + 1.0) * (n + 1.0)));
    for (double& x : c) x /= sum;
    return c;
  }();
  uint64_t h = i * 0x9e3779b97f4a7c15ULL + 0x632be59bd9b4e019ULL;
  h ^= h >> 31;
  h *= 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 29;
  const double u = static_cast<double>(h >> 11) * 0x1.0p-53;
  const int tag = static_cast<int>(std::lower_bound(cdf.begin(), cdf.end(), u) - cdf.begin());
  (*point->mutable_fields())["tag"].set_string_value(absl::StrCat("t", std::min(tag, 999)));
  h = h * 0x94d049bb133111ebULL + 1;
  h ^= h >> 32;
  (*point->mutable_fields())["price"].set_integer_value(static_cast<int64_t>(h % 1000000));
}

namespace fs = std::filesystem;

bool Exists(const std::string& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec);
}

v1::Metric MetricEnum(const std::string& name) {
  if (name == "ip") return v1::INNER_PRODUCT;
  if (name == "cosine") return v1::COSINE;
  return v1::L2;
}

std::string MetricName(v1::Metric metric) {
  switch (metric) {
    case v1::INNER_PRODUCT:
      return "ip";
    case v1::COSINE:
      return "cosine";
    default:
      return "l2";
  }
}

// A little-endian raw array file of T, read whole.
template <typename T>
absl::StatusOr<std::vector<T>> ReadRaw(const std::string& path, size_t max_elements) {
  std::error_code ec;
  const uint64_t bytes = fs::file_size(path, ec);
  if (ec) return absl::NotFoundError(absl::StrCat("cannot read ", path, ": ", ec.message()));
  const size_t n = std::min<uint64_t>(bytes / sizeof(T), max_elements);
  std::vector<T> data(n);
  std::ifstream in(path, std::ios::binary);
  if (!in.read(reinterpret_cast<char*>(data.data()), static_cast<std::streamsize>(n * sizeof(T)))) {
    return absl::DataLossError(absl::StrCat("cannot read ", n * sizeof(T), " bytes of ", path));
  }
  return data;
}

// ---- Vector workloads (search, mixed) ----------------------------------------

struct VectorData {
  std::string query_path, base_path, gt_path;
  bool base_is_uint8 = false;
  bool query_is_uint8 = false;    // .bvecs queries: sent as vector_bytes
  uint32_t dim = 0;
  uint64_t base_rows = 0;         // rows of the base file
  VecsMatrix<float> queries;
  VecsMatrix<float> base;         // mixed: the rows new points copy (a prefix)
  VecsMatrix<int32_t> gt;         // empty when there is no ground truth
};

// search and mixed: Start() sends a Search, or for mixed sometimes an Upsert
// or a Delete, through the asynchronous (callback) API of the stub.
class VectorSource : public RequestSource {
 public:
  VectorSource(client::ZoomClient* client, const Options& options, const VectorData* data)
      : stub_(&client->stub()), options_(options), data_(data) {
    first_new_id_ = data->base_rows;
    recall_ok_ = data->gt.rows > 0 && data->gt.dim >= options.k && !options.filter.has_value();
  }

  void Start(uint64_t seq, std::function<void(const Outcome&)> done) override {
    if (options_.workload == Workload::kMixed) {
      const uint64_t h = Mix(seq ^ (options_.seed * 0x9e3779b97f4a7c15ULL));
      const double u = static_cast<double>(h >> 11) * 0x1.0p-53;
      if (u < options_.write_fraction) {
        std::optional<uint64_t> victim;
        if ((h & 1) != 0) {
          absl::MutexLock lock(&mu_);
          if (!live_.empty()) {
            victim = live_.front();
            live_.pop_front();
          }
        }
        if (victim.has_value()) {
          StartDelete(*victim, std::move(done));
        } else {
          StartUpsert(std::move(done));
        }
        return;
      }
    }
    StartSearch(seq, std::move(done));
  }

  // mixed: deletes the new ids still present (best effort).
  absl::Status Cleanup(client::ZoomClient* client) {
    std::vector<uint64_t> ids;
    {
      absl::MutexLock lock(&mu_);
      ids.assign(live_.begin(), live_.end());
      live_.clear();
    }
    for (size_t i = 0; i < ids.size(); i += 1000) {
      std::vector<uint64_t> batch(ids.begin() + i,
                                  ids.begin() + std::min(ids.size(), i + 1000));
      absl::StatusOr<uint64_t> deleted = client->Delete(options_.collection, batch);
      if (!deleted.ok()) return deleted.status();
    }
    return absl::OkStatus();
  }

  bool recall_ok() const { return recall_ok_; }

 private:
  static uint64_t Mix(uint64_t x) {  // SplitMix64's finaliser
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
  }

  void Prepare(grpc::ClientContext* context) const {
    context->set_deadline(std::chrono::system_clock::now() +
                          absl::ToChronoMilliseconds(options_.timeout));
  }

  void StartSearch(uint64_t seq, std::function<void(const Outcome&)> done) {
    struct Call {
      grpc::ClientContext context;
      v1::SearchRequest request;
      v1::SearchResponse response;
    };
    auto* call = new Call;
    const uint64_t q = seq % data_->queries.rows;
    const float* row = data_->queries.row(q);
    call->request.set_collection(options_.collection);
    client::SetVector(row, data_->queries.dim, data_->query_is_uint8, &call->request);
    call->request.set_k(options_.k);
    call->request.mutable_knobs()->set_ef(options_.ef);
    call->request.mutable_knobs()->set_nprobe(options_.nprobe);
    call->request.mutable_knobs()->set_rerank_candidates(options_.rerank);
    call->request.set_preview_only(options_.preview_only);
    call->request.set_exact(options_.exact);
    if (options_.filter.has_value()) *call->request.mutable_filter() = *options_.filter;
    Prepare(&call->context);
    stub_->async()->Search(
        &call->context, &call->request, &call->response,
        [this, call, q, done = std::move(done)](grpc::Status status) {
          Outcome o;
          o.op = "search";
          o.code = static_cast<int>(status.error_code());
          if (status.ok()) {
            o.ssd_reads = call->response.stats().ssd_reads();
            if (recall_ok_ && q < data_->gt.rows) o.recall = Recall(q, call->response);
          }
          delete call;
          done(o);
        });
  }

  double Recall(uint64_t q, const v1::SearchResponse& response) const {
    const int32_t* truth = data_->gt.row(q);
    const uint32_t k = options_.k;
    std::set<int64_t> wanted(truth, truth + k);
    std::set<int64_t> found;
    int n = 0;
    for (const v1::Hit& hit : response.hits()) {
      if (n++ >= static_cast<int>(k)) break;
      uint64_t id = hit.id();
      // A new point of the mixed workload stands for its source row.
      if (options_.workload == Workload::kMixed && id >= first_new_id_ && data_->base.rows > 0) {
        id = (id - first_new_id_) % data_->base.rows;
      }
      if (id <= static_cast<uint64_t>(std::numeric_limits<int32_t>::max()) &&
          wanted.count(static_cast<int64_t>(id)) > 0) {
        found.insert(static_cast<int64_t>(id));
      }
    }
    return static_cast<double>(found.size()) / k;
  }

  void StartUpsert(std::function<void(const Outcome&)> done) {
    struct Call {
      grpc::ClientContext context;
      v1::UpsertRequest request;
      v1::UpsertResponse response;
    };
    auto* call = new Call;
    const uint64_t n = next_new_.fetch_add(1);
    const uint64_t id = first_new_id_ + n;
    const float* row = data_->base.row(n % data_->base.rows);
    call->request.set_collection(options_.collection);
    v1::Point* point = call->request.add_points();
    point->set_id(id);
    client::SetVector(row, data_->base.dim, data_->base_is_uint8, point);
    Prepare(&call->context);
    stub_->async()->Upsert(&call->context, &call->request, &call->response,
                           [this, call, id, done = std::move(done)](grpc::Status status) {
                             Outcome o;
                             o.op = "upsert";
                             o.code = static_cast<int>(status.error_code());
                             if (status.ok()) {
                               absl::MutexLock lock(&mu_);
                               live_.push_back(id);
                             }
                             delete call;
                             done(o);
                           });
  }

  void StartDelete(uint64_t id, std::function<void(const Outcome&)> done) {
    struct Call {
      grpc::ClientContext context;
      v1::DeleteRequest request;
      v1::DeleteResponse response;
    };
    auto* call = new Call;
    call->request.set_collection(options_.collection);
    call->request.add_ids(id);
    Prepare(&call->context);
    stub_->async()->Delete(&call->context, &call->request, &call->response,
                           [call, done = std::move(done)](grpc::Status status) {
                             Outcome o;
                             o.op = "delete";
                             o.code = static_cast<int>(status.error_code());
                             delete call;
                             done(o);
                           });
  }

  v1::VectorSearch::Stub* stub_;
  const Options& options_;
  const VectorData* data_;
  uint64_t first_new_id_ = 0;
  bool recall_ok_ = false;
  std::atomic<uint64_t> next_new_{0};
  absl::Mutex mu_;
  std::deque<uint64_t> live_ ABSL_GUARDED_BY(mu_);  // new ids upserted, not deleted
};

// Prints a note on stderr.
void Note(const std::string& text) { absl::FPrintF(stderr, "zoomload: %s\n", text); }

// Loads the vector data set and checks (or, with --setup, makes) the
// collection. Fills the metric actually used into options->metric.
absl::StatusOr<VectorData> PrepareVectors(client::ZoomClient* client, Options* options) {
  VectorData data;
  const bool need_base = options->setup || options->workload == Workload::kMixed;
  absl::StatusOr<DatasetFolder> folder = OpenDatasetFolder(options->dataset, need_base);
  if (!folder.ok()) return folder.status();
  data.query_path = folder->query_path;
  data.base_path = folder->base_path;
  data.base_rows = folder->base_rows;
  data.base_is_uint8 = folder->base_is_uint8;
  data.query_is_uint8 = absl::EndsWith(data.query_path, ".bvecs");
  absl::StatusOr<VecsMatrix<float>> queries = LoadQueries(*folder);
  if (!queries.ok()) return queries.status();
  data.queries = std::move(*queries);
  data.dim = data.queries.dim;

  // The collection: it must exist (or be made by --setup) with our dim.
  absl::StatusOr<v1::CollectionInfo> info = client->GetCollection(options->collection);
  if (!info.ok() && info.status().code() != absl::StatusCode::kNotFound) {
    return absl::Status(info.status().code(),
                        absl::StrCat("GetCollection '", options->collection, "' at ",
                                     options->target, ": ", info.status().message()));
  }
  if (options->metric.empty()) {
    if (info.ok()) {
      options->metric = MetricName(info->spec().metric());
    } else {
      options->metric = ::zoom::MetricName(folder->DefaultMetric());
    }
  }
  if (!info.ok() && !options->setup) {
    return absl::NotFoundError(absl::StrCat("collection '", options->collection,
                                            "' does not exist on ", options->target,
                                            "; --setup creates it from ", options->dataset));
  }

  if (options->setup) {
    if (data.base_rows == 0) {
      return absl::FailedPreconditionError(absl::StrCat(data.base_path, " is empty"));
    }
    client::ClientOptions long_calls = options->connection;
    long_calls.timeout = absl::InfiniteDuration();
    std::unique_ptr<client::ZoomClient> setup =
        client::ZoomClient::Connect(options->target, long_calls);
    absl::StatusOr<VecsMatrix<float>> base = LoadBase(*folder);
    if (!base.ok()) return base.status();
    bool import = true;
    if (info.ok()) {
      if (info->spec().dim() != data.dim) {
        return absl::FailedPreconditionError(absl::StrCat(
            "collection '", options->collection, "' exists with dimension ", info->spec().dim(),
            " but ", options->dataset, " has dimension ", data.dim,
            "; drop it or use another --collection"));
      }
      Note(absl::StrCat("collection '", options->collection, "' exists (dim ", data.dim, ", ",
                        info->points(), " points): not created"));
      import = info->points() < base->rows;
    } else {
      v1::CollectionSpec spec;
      spec.set_name(options->collection);
      spec.set_dim(data.dim);
      spec.set_metric(MetricEnum(options->metric));
      spec.set_dtype(data.base_is_uint8 ? v1::UINT8 : v1::FLOAT32);
      absl::StatusOr<v1::CollectionInfo> created = setup->CreateCollection(spec);
      if (!created.ok()) return created.status();
      Note(absl::StrCat("created collection '", options->collection, "' (dim ", data.dim,
                        ", metric ", options->metric, ", dtype ",
                        data.base_is_uint8 ? "uint8" : "float32", ")"));
    }
    if (import) {
      client::ProgressBar::Options bar_options;
      bar_options.prefix = "import";
      bar_options.lines_when_not_a_tty = true;
      client::ProgressBar bar(base->rows, bar_options);
      const VecsMatrix<float>& rows = *base;
      const bool payloads = options->payloads;
      absl::StatusOr<uint64_t> imported = setup->Import(
          options->collection, rows.rows,
          [&rows, payloads, bytes = data.base_is_uint8](uint64_t i, v1::Point* point) {
            point->set_id(i);
            // A .bvecs base goes as bytes: a quarter of the floats' size.
            client::SetVector(rows.row(i), rows.dim, bytes, point);
            if (payloads) GeneratedFields(i, point);
          },
          options->import_batch, [&bar](uint64_t done, uint64_t) { bar.Update(done); });
      bar.Finish();
      if (!imported.ok()) return imported.status();
    }
    if (options->payloads) {
      for (const auto& [field, type] : {std::pair{"tag", v1::KEYWORD}, std::pair{"price", v1::INTEGER}}) {
        v1::CreateFieldIndexRequest r;
        r.set_collection(options->collection);
        r.set_field(field);
        r.set_type(type);
        r.set_wait(true);
        absl::StatusOr<v1::CollectionInfo> indexed = setup->CreateFieldIndex(r);
        if (!indexed.ok()) return indexed.status();
      }
      Note("fields tag (keyword) and price (integer) indexed; e.g. --filter "
           "'{\"must\":[{\"key\":\"tag\",\"match\":{\"value\":\"t2\"}}]}' (about 15%)");
    }
    absl::StatusOr<v1::CollectionInfo> now = setup->GetCollection(options->collection);
    if (!now.ok()) return now.status();
    if (now->index_state() != v1::READY || now->indexed_points() < now->points()) {
      Note("building the index (BuildIndex --wait)...");
      const absl::Time start = absl::Now();
      absl::StatusOr<v1::CollectionInfo> built = setup->BuildIndex(options->collection, true);
      if (!built.ok()) return built.status();
      if (built->index_state() == v1::FAILED) {
        return absl::InternalError(absl::StrCat("index build failed: ", built->index_error()));
      }
      Note(absl::StrFormat("index %s in %.1fs (%d points)",
                           v1::IndexState_Name(built->index_state()),
                           absl::ToDoubleSeconds(absl::Now() - start), built->indexed_points()));
    }
    info = std::move(now);
  }
  if (info->spec().dim() != data.dim) {
    return absl::FailedPreconditionError(
        absl::StrCat("collection '", options->collection, "' has dimension ", info->spec().dim(),
                     " but ", data.query_path, " has dimension ", data.dim));
  }
  if (MetricName(info->spec().metric()) != options->metric) {
    Note(absl::StrCat("warning: collection '", options->collection, "' uses metric ",
                      MetricName(info->spec().metric()), " but recall is scored against the ",
                      options->metric, " ground truth"));
  }

  // Ground truth covering fewer queries than the file holds is used for
  // those it covers (a warning), unlike zoombench's strict LoadGroundTruth.
  absl::StatusOr<Metric> gt_metric = ParseMetric(options->metric);
  if (!gt_metric.ok()) return gt_metric.status();
  data.gt_path = folder->GroundTruthPath(*gt_metric);
  if (folder->HasGroundTruth(*gt_metric)) {
    absl::StatusOr<VecsMatrix<int32_t>> gt = LoadIvecs(data.gt_path);
    if (!gt.ok()) return gt.status();
    if (gt->dim < options->k) {
      Note(absl::StrCat("warning: ", data.gt_path, " has ", gt->dim,
                        " neighbours per query, fewer than --k ", options->k,
                        ": recall is not scored"));
    } else {
      if (gt->rows < data.queries.rows) {
        Note(absl::StrCat("warning: ", data.gt_path, " has ", gt->rows, " rows for ",
                          data.queries.rows, " queries: the others are not scored"));
      }
      data.gt = std::move(*gt);
    }
  } else {
    Note(absl::StrCat("no ", data.gt_path, ": recall is not scored"));
  }

  if (options->workload == Workload::kMixed) {
    // The rows new points copy: a prefix of the base file is enough.
    absl::StatusOr<VecsMatrix<float>> base =
        LoadBase(*folder, std::min<uint64_t>(data.base_rows, 10000));
    if (!base.ok()) return base.status();
    data.base = std::move(*base);
  }
  return data;
}

// ---- topk workload ----------------------------------------------------------------

struct TopKData {
  uint32_t dim = 0;
  uint64_t contexts = 0;
  std::vector<float> h;           // contexts * dim
  uint32_t ref_width = 0;         // 1 + the reference's top-K; 0 = none
  std::vector<int32_t> ref_ids;   // rows of ref_width: true next id, top ids
};

class TopKSource : public RequestSource {
 public:
  TopKSource(std::shared_ptr<grpc::Channel> channel, const Options& options,
             const TopKData* data)
      : decoder_(std::move(channel), client::ClientOptions()), options_(options), data_(data) {}

  void Start(uint64_t seq, std::function<void(const Outcome&)> done) override {
    struct Call {
      grpc::ClientContext context;
      v1::TopKRequest request;
      v1::TopKResponse response;
    };
    auto* call = new Call;
    const uint64_t c = seq % data_->contexts;
    const float* h = data_->h.data() + c * data_->dim;
    call->request.set_model(options_.model);
    call->request.add_contexts()->mutable_h()->Assign(h, h + data_->dim);
    call->request.set_k(options_.k);
    call->request.set_ef(options_.ef);
    call->request.set_exact(options_.exact);
    call->context.set_deadline(std::chrono::system_clock::now() +
                               absl::ToChronoMilliseconds(options_.timeout));
    decoder_.stub().async()->TopK(&call->context, &call->request, &call->response,
                         [this, call, c, done = std::move(done)](grpc::Status status) {
                           Outcome o;
                           o.op = "topk";
                           o.code = static_cast<int>(status.error_code());
                           if (status.ok() && call->response.results_size() > 0) {
                             o.recall = Recall(c, call->response.results(0));
                           }
                           delete call;
                           done(o);
                         });
  }

 private:
  double Recall(uint64_t c, const v1::TopKResult& result) const {
    const uint32_t k = options_.k;
    if (data_->ref_width == 0 || k + 1 > data_->ref_width ||
        (c + 1) * data_->ref_width > data_->ref_ids.size()) {
      return std::numeric_limits<double>::quiet_NaN();
    }
    const int32_t* ref = data_->ref_ids.data() + c * data_->ref_width + 1;
    std::set<int64_t> wanted(ref, ref + k);
    std::set<int64_t> found;
    for (int i = 0; i < result.ids_size() && i < static_cast<int>(k); ++i) {
      if (wanted.count(result.ids(i)) > 0) found.insert(result.ids(i));
    }
    return static_cast<double>(found.size()) / k;
  }

  client::DecoderClient decoder_;
  const Options& options_;
  const TopKData* data_;
};

absl::StatusOr<TopKData> PrepareTopK(client::ZoomClient* client, const Options& options) {
  TopKData data;
  const std::string meta_path = absl::StrCat(options.dataset, "/meta.json");
  absl::StatusOr<std::string> meta = ReadFileToString(meta_path);
  if (!meta.ok()) return meta.status();
  std::optional<uint64_t> dim = JsonUintField(*meta, "dim");
  if (!dim.has_value() || *dim == 0 || *dim > kMaxVecsDim) {
    return absl::InvalidArgumentError(absl::StrCat(meta_path, " has no positive \"dim\""));
  }
  data.dim = static_cast<uint32_t>(*dim);
  const std::string h_path = absl::StrCat(options.dataset, "/H.f32");
  std::error_code ec;
  const uint64_t h_bytes = fs::file_size(h_path, ec);
  if (ec) return absl::NotFoundError(absl::StrCat(h_path, " is missing (the contexts)"));
  data.contexts = h_bytes / (4ull * data.dim);
  if (data.contexts == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(h_path, " holds no whole context of dimension ", data.dim));
  }
  // Cap the memory: 100k contexts are plenty to cycle through.
  data.contexts = std::min<uint64_t>(data.contexts, 100000);
  absl::StatusOr<std::vector<float>> h = ReadRaw<float>(h_path, data.contexts * data.dim);
  if (!h.ok()) return h.status();
  data.h = std::move(*h);

  const std::string ref_path = absl::StrCat(options.dataset, "/ref_ids.i32");
  std::optional<uint64_t> topk = JsonUintField(*meta, "topk");
  if (Exists(ref_path) && topk.has_value() && *topk > 0 && *topk < 100000) {
    data.ref_width = static_cast<uint32_t>(*topk + 1);
    absl::StatusOr<std::vector<int32_t>> ref =
        ReadRaw<int32_t>(ref_path, data.contexts * data.ref_width);
    if (!ref.ok()) return ref.status();
    data.ref_ids = std::move(*ref);
    if (options.k > *topk) {
      Note(absl::StrCat("warning: ", ref_path, " holds the top ", *topk, ", fewer than --k ",
                        options.k, ": recall is not scored"));
    }
  } else {
    Note(absl::StrCat("no ", ref_path, " (with \"topk\" in meta.json): recall is not scored"));
  }

  // The model must be serving (or be loaded by --setup).
  client::ClientOptions list_options;
  list_options.timeout = absl::Seconds(30);
  client::DecoderClient lister(client->channel(), list_options);
  auto find_model = [&]() -> absl::StatusOr<std::optional<v1::ModelInfo>> {
    auto models = lister.ListModels();
    if (!models.ok()) {
      return absl::Status(models.status().code(), absl::StrCat("ListModels at ", options.target,
                                                               ": ", models.status().message()));
    }
    for (const v1::ModelInfo& m : *models) {
      if (m.name() == options.model) return std::optional<v1::ModelInfo>(m);
    }
    return std::optional<v1::ModelInfo>();
  };
  absl::StatusOr<std::optional<v1::ModelInfo>> found = find_model();
  if (!found.ok()) return found.status();
  const bool serving = found->has_value() && (*found)->state() == v1::SERVING;
  if (!serving) {
    if (!options.setup) {
      return absl::NotFoundError(absl::StrCat("model '", options.model, "' is not serving on ",
                                              options.target, "; --setup loads it from ",
                                              options.dataset));
    }
    client::ClientOptions load_options;
    load_options.timeout = absl::InfiniteDuration();
    client::DecoderClient loader(client->channel(), load_options);
    Note(absl::StrCat("loading model '", options.model, "' from '", options.model_dir,
                      "' under the server's --models_dir..."));
    const absl::Time start = absl::Now();
    // The directory is a name under the server's --models_dir.
    auto info = loader.LoadModel(options.model, options.model_dir, /*wait=*/true);
    if (!info.ok()) {
      return absl::Status(info.status().code(),
                          absl::StrCat("LoadModel: ", info.status().message()));
    }
    Note(absl::StrFormat("model '%s' %s in %.1fs", options.model,
                         v1::ModelState_Name(info->state()),
                         absl::ToDoubleSeconds(absl::Now() - start)));
    found = find_model();
    if (!found.ok()) return found.status();
  } else if (options.setup) {
    Note(absl::StrCat("model '", options.model, "' is already serving: not loaded again"));
  }
  if (found->has_value() && (*found)->dim() != 0 && (*found)->dim() != data.dim) {
    return absl::FailedPreconditionError(
        absl::StrCat("model '", options.model, "' has dimension ", (*found)->dim(), " but ",
                     meta_path, " says ", data.dim));
  }
  return data;
}

// ---- Main --------------------------------------------------------------------------

std::string KnobsText(const Options& o) {
  std::string text = absl::StrFormat("ef=%d", o.ef);
  if (o.workload != Workload::kTopK) {
    absl::StrAppendFormat(&text, " nprobe=%d rerank=%d metric=%s", o.nprobe, o.rerank, o.metric);
    if (o.preview_only) absl::StrAppend(&text, " preview_only");
  }
  if (o.exact) absl::StrAppend(&text, " exact");
  if (o.workload == Workload::kMixed) {
    absl::StrAppendFormat(&text, " write_fraction=%g", o.write_fraction);
  }
  return text;
}

std::string LoadText(bool open_loop, double load) {
  return open_loop ? absl::StrFormat("rate %g/s", load) : absl::StrFormat("concurrency %g", load);
}

// A server workload (server_workload.h): its flags checked, then Setup,
// Run and Report in order.
int RunServerWorkload(const std::string& name, const ServerWorkloadInfo& info,
                      const std::set<std::string>& given) {
  for (const std::string& flag : given) {
    if (flag == "workload" || flag == "json") continue;
    if (std::find(info.flags.begin(), info.flags.end(), flag) == info.flags.end()) {
      return UsageError(absl::StrCat("--", flag, " does not apply to --workload ", name));
    }
  }
  std::unique_ptr<ServerWorkload> workload = info.make();
  if (absl::Status st = workload->ReadFlags(); !st.ok()) return UsageError(st.message());
  const std::string json_path = absl::GetFlag(FLAGS_json);
  if (given.count("json") > 0 && json_path.empty()) return UsageError("--json FILE is empty");
  JsonLines json(json_path);
  if (!json.ok()) return Fail(absl::PermissionDeniedError(absl::StrCat("cannot write ", json_path)));
  absl::PrintF("== %s\n", name);
  std::fflush(stdout);
  if (absl::Status st = workload->Setup(); !st.ok()) return Fail(st);
  if (absl::Status st = workload->Run(json); !st.ok()) return Fail(st);
  if (absl::Status st = workload->Report(json); !st.ok()) return Fail(st);
  std::fflush(stdout);
  return kExitOk;
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  FlagScan scan = ScanFlags(argc, argv);
  if (scan.help) {
    absl::PrintF("%s", kUsage);
    return kExitOk;
  }
  if (!scan.defer_to_absl && !scan.error.empty()) return UsageError(scan.error);
  if (!scan.defer_to_absl && !scan.positional.empty()) {
    return UsageError(absl::StrCat("unexpected argument '", scan.positional[0], "'"));
  }
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  if (positional.size() > 1) {
    return UsageError(absl::StrCat("unexpected argument '", positional[1], "'"));
  }
  const std::string workload = absl::AsciiStrToLower(absl::GetFlag(FLAGS_workload));
  if (auto it = ServerWorkloads().find(workload); it != ServerWorkloads().end()) {
    return RunServerWorkload(workload, it->second, scan.given);
  }
  absl::StatusOr<Options> parsed = ReadOptions(scan.given);
  if (!parsed.ok()) return UsageError(parsed.status().message());
  Options options = std::move(*parsed);
  {
    std::error_code ec;
    if (!fs::is_directory(options.dataset, ec)) {
      return Fail(absl::NotFoundError(
          absl::StrCat("--dataset ", options.dataset, " is not a directory")));
    }
  }

  client::ClientOptions client_options = options.connection;
  client_options.timeout = absl::Seconds(30);
  std::unique_ptr<client::ZoomClient> client =
      client::ZoomClient::Connect(options.target, client_options);

  std::unique_ptr<RequestSource> source;
  VectorSource* vector_source = nullptr;
  VectorData vector_data;
  TopKData topk_data;
  std::string name;
  if (options.workload == Workload::kTopK) {
    absl::StatusOr<TopKData> data = PrepareTopK(client.get(), options);
    if (!data.ok()) return Fail(data.status());
    topk_data = std::move(*data);
    source = std::make_unique<TopKSource>(client->channel(), options, &topk_data);
    name = options.model;
  } else {
    absl::StatusOr<VectorData> data = PrepareVectors(client.get(), &options);
    if (!data.ok()) return Fail(data.status());
    vector_data = std::move(*data);
    auto vs = std::make_unique<VectorSource>(client.get(), options, &vector_data);
    vector_source = vs.get();
    source = std::move(vs);
    name = options.collection;
  }

  const bool tty = isatty(STDERR_FILENO) == 1;
  std::vector<StepResult> steps;
  for (size_t i = 0; i < options.loads.size(); ++i) {
    StepConfig config;
    config.open_loop = options.open_loop;
    config.concurrency = options.open_loop ? 0 : static_cast<int>(options.loads[i]);
    config.rate = options.open_loop ? options.loads[i] : 0;
    config.warmup_s = options.warmup_s;
    config.duration_s = options.duration_s;
    config.max_requests = options.max_requests;
    config.seed = options.seed + i;
    config.max_in_flight = static_cast<int>(options.max_in_flight);
    config.progress_tty = tty;
    const std::string step_name =
        options.loads.size() > 1
            ? absl::StrFormat("[%d/%d %s]", i + 1, options.loads.size(),
                              LoadText(options.open_loop, options.loads[i]))
            : absl::StrFormat("[%s]", LoadText(options.open_loop, options.loads[i]));
    if (options.progress) config.progress_label = step_name;
    absl::FPrintF(stderr, "zoomload: %s %s '%s' at %s for %gs (+%gs warm-up)\n", step_name,
                  options.workload_name, name, options.target, options.duration_s,
                  options.warmup_s);
    steps.push_back(RunStep(*source, config));
  }

  if (vector_source != nullptr && options.workload == Workload::kMixed) {
    absl::Status cleaned = vector_source->Cleanup(client.get());
    if (!cleaned.ok()) {
      Note(absl::StrCat("warning: deleting the new points failed: ", cleaned.ToString()));
    }
  }

  absl::PrintF("zoomload %s '%s' at %s, k=%d, %s\n", options.workload_name, name,
               options.target, options.k, KnobsText(options));
  absl::PrintF("%s", SummaryTable(steps));
  if (options.sweep) {
    const std::optional<size_t> knee = FindKnee(steps);
    if (knee.has_value()) {
      const StepResult& s = steps[*knee];
      absl::PrintF("knee: %s (achieved %.1f qps, p99 %s)\n",
                   LoadText(options.open_loop, options.loads[*knee]), s.qps(),
                   HumanMicros(s.p_us(99)));
    } else {
      absl::PrintF("knee: none (the first step already falls behind)\n");
    }
    absl::PrintF(
        "(knee = the last step of the leading run that keeps up: <= 1%% errors, p99 <= 10x the "
        "first step's, %s)\n",
        options.open_loop ? "achieved QPS >= 95% of the scheduled rate"
                          : "QPS >= 105% of every earlier step's");
  }

  ReportContext context;
  context.workload = options.workload_name;
  context.target = options.target;
  context.collection = name;
  context.dataset = options.dataset;
  context.k = options.k;
  context.knobs = KnobsText(options);
  int rc = kExitOk;
  if (!options.json_path.empty()) {
    absl::Status written =
        WriteTextFile(options.json_path, ReportJson(steps, context, options.sweep));
    if (!written.ok()) rc = Fail(written);
  }
  if (!options.svg_path.empty()) {
    // The knobs and the recall under the title: a latency curve means little
    // without the quality it was bought at.
    double recall_sum = 0;
    uint64_t recall_n = 0;
    for (const StepResult& s : steps) {
      recall_sum += s.recall_sum;
      recall_n += s.recall_samples;
    }
    const std::string title = absl::StrFormat("zoomload %s '%s' (k=%d): latency vs offered load",
                                              options.workload_name, name, options.k);
    std::string subtitle = context.knobs;
    if (recall_n > 0) {
      absl::StrAppendFormat(&subtitle, ", mean recall@%d %.3f", options.k, recall_sum / recall_n);
    }
    absl::Status written = WriteTextFile(options.svg_path, LatencySvg(steps, title, subtitle));
    if (!written.ok()) rc = Fail(written);
  }

  std::fflush(stdout);
  uint64_t ok = 0, requests = 0;
  for (const StepResult& s : steps) {
    ok += s.ok;
    requests += s.requests;
  }
  if (ok == 0) {
    absl::FPrintF(stderr, "zoomload: %s\n",
                  requests == 0 ? "no measured request completed"
                                : "every measured request failed");
    return kExitError;
  }
  return rc;
}

}  // namespace
}  // namespace zoom::load

int main(int argc, char** argv) { return zoom::load::Main(argc, argv); }
