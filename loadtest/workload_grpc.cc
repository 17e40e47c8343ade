// File: loadtest/workload_grpc.cc
//
// zoomload --workload grpc: the service's cost per call, measured over the
// wire against a zoomd started here (a child process on loopback, in its
// own process as a deployment has it). Its in-process twin is zoombench
// --benchmarks=collection over the same data dir, with the same queries and
// knobs; loadtest/grpc_overhead.py runs the two alternately and prints them
// side by side (docs/benchmarks.md, "grpc").
//
//   zoomload --workload grpc --dataset ../shared/data/glove-6b-100d
//       --max_queries 2000 --ef 64 --nprobe 32 --rerank 50
//
// Parts (--grpc_parts, run in this order):
//   setup   wipes --grpc_work_dir, starts zoomd on it, creates the
//           collection, imports the data set over gRPC (Import) and builds
//           the index (BuildIndex, wait); without it, the collection that
//           is in --grpc_work_dir is served as it is;
//   floor   one caller: Health.Check (gRPC's own service: what any unary
//           call costs on this channel) and a preview-only Search (RAM only,
//           answered on gRPC's thread when the server is idle);
//   search  Search at each --grpc_concurrency: every query once from that
//           many threads (closed loop, one channel per thread), after an
//           untimed pass over the first 200: recall@10 (tie-aware), QPS,
//           p50 / p99, SSD reads per query, and the CPU time per query of
//           zoomload and zoomd together;
//   batch   SearchBatch: every query once, in batches of --grpc_batch_size,
//           --grpc_batch_callers calls in flight (after an untimed pass).
// zoomd is stopped at the end (SIGTERM) and its data dir kept.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "client/zoom_client.h"
#include "common/process.h"
#include "common/recall.h"
#include "common/report_table.h"
#include "common/status_macros.h"
#include "common/timer.h"
#include "common/vector_dataset.h"
#include "loadtest/server_workload.h"
#include "loadtest/zoomd_child.h"
#include "zoom/v1/zoom.pb.h"

ABSL_FLAG(std::string, grpc_work_dir, "/var/tmp/zoomload-grpc",
          "grpc: zoomd's data dir (wiped by the setup part; kept at the end, for zoombench "
          "--benchmarks=collection)");
ABSL_FLAG(std::string, grpc_parts, "setup,floor,search,batch",
          "grpc: the parts to run (setup, floor, search, batch; always in this order); without "
          "setup, the collection in --grpc_work_dir is served");
ABSL_FLAG(std::string, grpc_concurrency, "1,2,4,8,16", "grpc: concurrent callers of Search");
ABSL_FLAG(std::string, grpc_index_kind, "ivf_hnsw_pq", "grpc: hnsw_pq | ivf_hnsw_pq");
ABSL_FLAG(int32_t, grpc_pq_m, 0, "grpc: PQ bytes per vector (0: the server's default)");
ABSL_FLAG(int32_t, grpc_server_threads, 16, "grpc: zoomd's request workers (its --threads)");
ABSL_FLAG(int32_t, grpc_batch_size, 32, "grpc: queries per SearchBatch call (0: skip)");
ABSL_FLAG(std::string, grpc_batch_callers, "1,2", "grpc: SearchBatch calls in flight");

namespace zoom::load {
namespace {

constexpr char kCollection[] = "bench";
constexpr int kChannels = 64;  // one per client thread, as separate clients would have
const char* const kParts[] = {"setup", "floor", "search", "batch"};

// One pass of every query, as zoombench's RunResult has it.
using Figures = ServingFigures;

class GrpcWorkload : public ServerWorkload {
 public:
  absl::Status ReadFlags() override;
  absl::Status Setup() override;
  absl::Status Run(JsonLines& json) override;
  absl::Status Report(JsonLines& json) override;

 private:
  bool Wants(const std::string& part) const {
    return std::find(parts_.begin(), parts_.end(), part) != parts_.end();
  }
  absl::Status CreateAndImport(JsonLines& json);
  absl::Status CheckServed();
  absl::Status Floor(JsonLines& json);
  absl::Status SearchAt(int callers, Table& table, JsonLines& json);
  absl::Status Batch(JsonLines& json);
  // Every query once from `threads` threads after an untimed pass over the
  // first min(200, nq); the request is built inside the timed call, as
  // zoombench's in-process SearchFn builds its params.
  absl::StatusOr<Figures> RunQueries(int threads, bool preview_only);
  v1::SearchRequest Request(size_t q, bool preview_only) const;

  std::vector<std::string> parts_;
  std::vector<int> concurrency_, batch_callers_;
  std::string dataset_, work_dir_, index_kind_;
  uint32_t k_ = 10, ef_ = 0, nprobe_ = 0, rerank_ = 0;
  int pq_m_ = 0, server_threads_ = 16, batch_size_ = 32;
  uint64_t max_queries_ = 0;
  Dataset set_;
  std::unique_ptr<ZoomdChild> zoomd_;
  std::vector<std::unique_ptr<client::ZoomClient>> clients_;
};

absl::Status GrpcWorkload::ReadFlags() {
  dataset_ = absl::GetFlag(FLAGS_dataset);
  if (dataset_.empty()) return absl::InvalidArgumentError("--dataset DIR is required");
  parts_ = absl::StrSplit(absl::GetFlag(FLAGS_grpc_parts), ',', absl::SkipEmpty());
  for (const std::string& p : parts_) {
    if (std::find(std::begin(kParts), std::end(kParts), p) == std::end(kParts)) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad --grpc_parts '", p, "': expected setup, floor, search, batch"));
    }
  }
  auto concurrency = ParseIntList(absl::GetFlag(FLAGS_grpc_concurrency));
  if (!concurrency.ok()) return absl::InvalidArgumentError(concurrency.status().message());
  concurrency_ = *concurrency;
  auto callers = ParseIntList(absl::GetFlag(FLAGS_grpc_batch_callers));
  if (!callers.ok()) return absl::InvalidArgumentError(callers.status().message());
  batch_callers_ = *callers;
  index_kind_ = absl::GetFlag(FLAGS_grpc_index_kind);
  if (index_kind_ != "hnsw_pq" && index_kind_ != "ivf_hnsw_pq") {
    return absl::InvalidArgumentError("--grpc_index_kind must be hnsw_pq or ivf_hnsw_pq");
  }
  work_dir_ = absl::GetFlag(FLAGS_grpc_work_dir);
  if (work_dir_.empty()) return absl::InvalidArgumentError("--grpc_work_dir is empty");
  ZOOM_ASSIGN_OR_RETURN(k_, KFlag());
  ef_ = absl::GetFlag(FLAGS_ef);
  nprobe_ = absl::GetFlag(FLAGS_nprobe);
  rerank_ = absl::GetFlag(FLAGS_rerank);
  pq_m_ = absl::GetFlag(FLAGS_grpc_pq_m);
  server_threads_ = absl::GetFlag(FLAGS_grpc_server_threads);
  batch_size_ = absl::GetFlag(FLAGS_grpc_batch_size);
  max_queries_ = absl::GetFlag(FLAGS_max_queries);
  if (server_threads_ < 1) return absl::InvalidArgumentError("--grpc_server_threads must be >= 1");
  if (batch_size_ < 0) return absl::InvalidArgumentError("--grpc_batch_size must be >= 0");
  return absl::OkStatus();
}

absl::Status GrpcWorkload::Setup() {
  ZOOM_ASSIGN_OR_RETURN(const Metric metric, MetricFor(dataset_));
  ZOOM_ASSIGN_OR_RETURN(set_, LoadDataset(dataset_, metric, max_queries_));
  ZOOM_ASSIGN_OR_RETURN(
      zoomd_, StartZoomd(work_dir_, Wants("setup") ? DataDir::kWipe : DataDir::kKeep,
                         {absl::StrCat("--threads=", server_threads_), "--auto_build_points=0"}));
  for (int i = 0; i < kChannels; ++i) {
    clients_.push_back(client::ZoomClient::Connect(zoomd_->target()));
  }
  return Wants("setup") ? absl::OkStatus() : CheckServed();
}

absl::Status GrpcWorkload::CreateAndImport(JsonLines& json) {
  client::ZoomClient& admin = zoomd_->client();
  v1::CollectionSpec spec;
  spec.set_name(kCollection);
  spec.set_dim(set_.dim());
  spec.set_metric(set_.metric == Metric::kL2             ? v1::L2
                  : set_.metric == Metric::kInnerProduct ? v1::INNER_PRODUCT
                                                         : v1::COSINE);
  spec.set_dtype(set_.is_uint8 ? v1::UINT8 : v1::FLOAT32);
  spec.mutable_index()->set_kind(index_kind_ == "hnsw_pq" ? v1::HNSW_PQ : v1::IVF_HNSW_PQ);
  spec.mutable_index()->set_pq_m(pq_m_);
  ZOOM_RETURN_IF_ERROR(admin.CreateCollection(spec).status());
  Stopwatch sw;
  ZOOM_RETURN_IF_ERROR(admin.Import(kCollection, set_.base.rows, [&](uint64_t i, v1::Point* p) {
                              p->set_id(i);
                              p->mutable_vector()->Assign(set_.base.row(i),
                                                          set_.base.row(i) + set_.dim());
                            }).status());
  const double import_s = sw.ElapsedMicros() / 1e6;
  sw.Reset();
  ZOOM_ASSIGN_OR_RETURN(v1::CollectionInfo info, admin.BuildIndex(kCollection, /*wait=*/true));
  const double build_s = sw.ElapsedMicros() / 1e6;
  std::printf("dataset %s: %llu points imported over gRPC in %.1f s (%.0f points/s), "
              "index %s built in %.1f s, preview %.1f MiB\n",
              set_.name.c_str(), static_cast<unsigned long long>(info.points()), import_s,
              set_.base.rows / import_s, index_kind_.c_str(), build_s,
              info.resident_bytes() / 1048576.0);
  std::fflush(stdout);
  json.Line({{"workload", std::string("grpc")},
             {"dataset", set_.name},
             {"path", std::string("setup")},
             {"points", static_cast<int64_t>(info.points())},
             {"import_s", import_s},
             {"import_points_per_s", set_.base.rows / import_s},
             {"index_kind", index_kind_},
             {"build_s", build_s},
             {"resident_bytes", static_cast<int64_t>(info.resident_bytes())}});
  return absl::OkStatus();
}

absl::Status GrpcWorkload::CheckServed() {
  absl::StatusOr<v1::CollectionInfo> info = zoomd_->client().GetCollection(kCollection);
  if (!info.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(work_dir_, " holds no collection '", kCollection,
                     "' (", info.status().message(), "): run the setup part first"));
  }
  if (info->points() != set_.base.rows || info->index_state() != v1::READY ||
      info->spec().dim() != set_.dim()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "collection '", kCollection, "' of ", work_dir_, " holds ", info->points(),
        " points (index ", v1::IndexState_Name(info->index_state()), ", dim ",
        info->spec().dim(), "), not the ", set_.base.rows, " of ", dataset_,
        " indexed: run the setup part"));
  }
  std::printf("dataset %s: collection '%s' of %s served as it is (%llu points, preview %.1f "
              "MiB)\n",
              set_.name.c_str(), kCollection, work_dir_.c_str(),
              static_cast<unsigned long long>(info->points()), info->resident_bytes() / 1048576.0);
  std::fflush(stdout);
  return absl::OkStatus();
}

v1::SearchRequest GrpcWorkload::Request(size_t q, bool preview_only) const {
  v1::SearchRequest req;
  req.set_collection(kCollection);
  req.mutable_vector()->Assign(set_.queries.row(q), set_.queries.row(q) + set_.dim());
  req.set_k(k_);
  req.set_preview_only(preview_only);
  req.mutable_knobs()->set_ef(ef_);
  req.mutable_knobs()->set_nprobe(nprobe_);
  if (!preview_only) req.mutable_knobs()->set_rerank_candidates(rerank_);
  return req;
}

absl::StatusOr<Figures> GrpcWorkload::RunQueries(int threads, bool preview_only) {
  const size_t nq = set_.queries.rows, k = k_;
  if (nq == 0) return absl::InvalidArgumentError("no queries");
  std::vector<int64_t> ids(nq * k, -1);
  std::vector<double> latency_us(nq, 0), reads(nq, 0);
  auto pass = [&](size_t count, bool timed) -> absl::Status {
    std::atomic<size_t> next{0};
    std::atomic<bool> failed{false};
    absl::Mutex mu;
    absl::Status first_error;
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        client::ZoomClient& channel = *clients_[t % kChannels];
        for (size_t q; !failed.load() && (q = next.fetch_add(1)) < count;) {
          Stopwatch sw;
          absl::StatusOr<v1::SearchResponse> r = channel.Search(Request(q, preview_only));
          const double us = sw.ElapsedMicros();
          if (!r.ok()) {
            absl::MutexLock lock(&mu);
            if (first_error.ok()) first_error = r.status();
            failed = true;
            return;
          }
          if (!timed) continue;
          latency_us[q] = us;
          reads[q] = static_cast<double>(r->stats().ssd_reads());
          for (size_t i = 0; i < k && i < static_cast<size_t>(r->hits_size()); ++i) {
            ids[q * k + i] = static_cast<int64_t>(r->hits(static_cast<int>(i)).id());
          }
        }
      });
    }
    for (std::thread& th : pool) th.join();
    return first_error;
  };
  ZOOM_RETURN_IF_ERROR(pass(std::min<size_t>(200, nq), /*timed=*/false));
  // The CPU of both ends: this process (the client) and zoomd.
  const double cpu_before = ProcessCpuSeconds() + zoomd_->CpuSeconds();
  Stopwatch wall;
  ZOOM_RETURN_IF_ERROR(pass(nq, /*timed=*/true));
  const double seconds = wall.ElapsedSeconds();
  const double cpu_seconds = ProcessCpuSeconds() + zoomd_->CpuSeconds() - cpu_before;

  Figures f;
  f.qps = static_cast<double>(nq) / seconds;
  f.cpu_us_per_query = cpu_seconds * 1e6 / static_cast<double>(nq);
  std::sort(latency_us.begin(), latency_us.end());
  f.p50_us = Percentile(latency_us, 50);
  f.p99_us = Percentile(latency_us, 99);
  double recall = 0, total_reads = 0;
  for (size_t q = 0; q < nq; ++q) {
    recall += RecallAtK(set_, q, ids.data() + q * k, k, 10);
    total_reads += reads[q];
  }
  if (k >= 10) f.recall_at_10 = recall / static_cast<double>(nq);
  f.reads_per_query = total_reads / static_cast<double>(nq);
  return f;
}

absl::Status GrpcWorkload::Floor(JsonLines& json) {
  const size_t nq = set_.queries.rows;
  std::vector<double> health_us;
  for (size_t i = 0; i < nq + 200; ++i) {
    Stopwatch one;
    ZOOM_RETURN_IF_ERROR(clients_[0]->Health().status());
    if (i >= 200) health_us.push_back(one.ElapsedMicros());
  }
  std::sort(health_us.begin(), health_us.end());
  ZOOM_ASSIGN_OR_RETURN(const Figures preview, RunQueries(1, /*preview_only=*/true));
  const double health_p50 = Percentile(health_us, 50), health_p99 = Percentile(health_us, 99);
  std::printf("floor, 1 caller: Health.Check p50 %.0f us p99 %.0f us; preview-only Search "
              "through gRPC p50 %.0f us\n",
              health_p50, health_p99, preview.p50_us);
  json.Line({{"workload", std::string("grpc")},
             {"dataset", set_.name},
             {"path", std::string("floor")},
             {"callers", int64_t{1}},
             {"health_p50_us", health_p50},
             {"health_p99_us", health_p99},
             {"preview_grpc_p50_us", preview.p50_us}});
  return absl::OkStatus();
}

absl::Status GrpcWorkload::SearchAt(int callers, Table& table, JsonLines& json) {
  ZOOM_ASSIGN_OR_RETURN(const Figures r, RunQueries(callers, /*preview_only=*/false));
  ServingRow("grpc", set_.name, "grpc", "gRPC", callers, r, table, json);
  return absl::OkStatus();
}

absl::Status GrpcWorkload::Batch(JsonLines& json) {
  const size_t nq = set_.queries.rows, k = k_, batch = static_cast<size_t>(batch_size_);
  const size_t batches = (nq + batch - 1) / batch;
  Table table({"calls in flight", "batch", "recall@10", "QPS (queries/s)", "batches/s"},
              /*width=*/16);
  for (int c : batch_callers_) {
    for (int pass = 0; pass < 2; ++pass) {  // pass 0 warms up, pass 1 is timed
      std::vector<int64_t> ids(nq * k, -1);
      std::atomic<size_t> next{0};
      std::atomic<bool> failed{false};
      absl::Status first_error;
      absl::Mutex mu;
      Stopwatch wall;
      std::vector<std::thread> threads;
      for (int t = 0; t < c; ++t) {
        threads.emplace_back([&, t] {
          for (size_t b; !failed.load() && (b = next.fetch_add(1)) < batches;) {
            v1::SearchBatchRequest req;
            req.set_collection(kCollection);
            const size_t first = b * batch, last = std::min(nq, first + batch);
            for (size_t q = first; q < last; ++q) *req.add_queries() = Request(q, false);
            auto r = clients_[t % kChannels]->SearchBatch(req);
            if (!r.ok()) {
              absl::MutexLock lock(&mu);
              if (first_error.ok()) first_error = r.status();
              failed = true;
              return;
            }
            for (size_t q = first; q < last && q - first < size_t(r->results_size()); ++q) {
              const v1::SearchResponse& one = r->results(static_cast<int>(q - first));
              for (size_t i = 0; i < k && i < size_t(one.hits_size()); ++i) {
                ids[q * k + i] = static_cast<int64_t>(one.hits(static_cast<int>(i)).id());
              }
            }
          }
        });
      }
      for (std::thread& th : threads) th.join();
      ZOOM_RETURN_IF_ERROR(first_error);
      if (pass == 0) continue;
      const double secs = wall.ElapsedMicros() / 1e6;
      double recall = 0;
      for (size_t q = 0; q < nq; ++q) recall += RecallAtK(set_, q, ids.data() + q * k, k, 10);
      recall /= static_cast<double>(nq);
      table.Row({std::to_string(c), std::to_string(batch), Fmt(recall, 4), Fmt(nq / secs, 0),
                 Fmt(batches / secs, 1)});
      json.Line({{"workload", std::string("grpc")},
                 {"dataset", set_.name},
                 {"path", std::string("grpc_search_batch")},
                 {"callers", static_cast<int64_t>(c)},
                 {"batch", static_cast<int64_t>(batch)},
                 {"recall_at_10", recall},
                 {"qps", nq / secs},
                 {"batches_per_s", batches / secs}});
    }
  }
  return absl::OkStatus();
}

absl::Status GrpcWorkload::Run(JsonLines& json) {
  if (Wants("setup")) ZOOM_RETURN_IF_ERROR(CreateAndImport(json));
  if (Wants("floor")) ZOOM_RETURN_IF_ERROR(Floor(json));
  if (Wants("search")) {
    // CPU us/q: zoomload's and zoomd's CPU time per query (both ends of the
    // channel; zoombench --benchmarks=collection counts its one process).
    Table table({"callers", "path", "recall@10", "QPS", "p50 us", "p99 us", "reads/q",
                 "CPU us/q"});
    for (int c : concurrency_) ZOOM_RETURN_IF_ERROR(SearchAt(c, table, json));
  }
  if (Wants("batch") && batch_size_ > 0) ZOOM_RETURN_IF_ERROR(Batch(json));
  return absl::OkStatus();
}

absl::Status GrpcWorkload::Report(JsonLines& /*json*/) {
  std::printf("load average (1 min) after the run: %.2f\n", LoadAverage1m());
  clients_.clear();
  ZOOM_RETURN_IF_ERROR(zoomd_->Stop());
  std::printf("zoomd stopped; its data dir %s is kept\n", work_dir_.c_str());
  return absl::OkStatus();
}

const RegisterServerWorkload kRegisterGrpc(
    "grpc",
    {"Search and SearchBatch through gRPC against a zoomd it starts (the over-the-wire half "
     "of loadtest/grpc_overhead.py)",
     {"dataset", "metric", "k", "ef", "nprobe", "rerank", "max_queries", "zoomd",
      "grpc_work_dir", "grpc_parts", "grpc_concurrency", "grpc_index_kind", "grpc_pq_m",
      "grpc_server_threads", "grpc_batch_size", "grpc_batch_callers"},
     [] { return std::make_unique<GrpcWorkload>(); }});

}  // namespace
}  // namespace zoom::load
