// zoombench --benchmarks=grpc: the service overhead. One run, same data,
// same knobs: Search through gRPC (a real ZoomServer on loopback, one client
// channel per client thread, closed loop) beside Collection::Search called
// in-process, at 1..16 concurrent callers; then SearchBatch through gRPC
// (every query once, in batches of --grpc_batch_size, --grpc_batch_callers
// batches in flight), beside the same queries sent one Search each.
//
//   zoombench --benchmarks=grpc --dataset ../shared/data/glove-6b-100d
//             --grpc_concurrency 1,2,4,8,16
#include <algorithm>
#include <atomic>
#include <filesystem>
#include <memory>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/synchronization/mutex.h"
#include "absl/strings/str_cat.h"
#include "client/zoom_client.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/timer.h"
#include "bench/bench_dataset.h"
#include "bench/bench_util.h"
#include "server/grpc/zoom_server.h"

ABSL_FLAG(std::string, grpc_work_dir, "/var/tmp/zoombench-grpc",
          "grpc: the server's data dir (wiped at the start)");
ABSL_FLAG(std::string, grpc_concurrency, "1,2,4,8,16", "grpc: concurrent callers");
ABSL_FLAG(std::string, grpc_index_kind, "ivf_hnsw_pq", "grpc: hnsw_pq | ivf_hnsw_pq");
ABSL_FLAG(int32_t, grpc_pq_m, 0, "grpc: PQ bytes per vector (0: the server's default)");
ABSL_FLAG(int32_t, grpc_ef, 64, "grpc: ef");
ABSL_FLAG(int32_t, grpc_nprobe, 32, "grpc: nprobe");
ABSL_FLAG(int32_t, grpc_rerank, 50, "grpc: rerank_candidates (K')");
ABSL_FLAG(int32_t, grpc_server_threads, 16, "grpc: the server's request workers");
ABSL_FLAG(int32_t, grpc_batch_size, 32, "grpc: queries per SearchBatch call (0: skip)");
ABSL_FLAG(std::string, grpc_batch_callers, "1,2", "grpc: SearchBatch calls in flight");

namespace zoom::bench {
namespace {

absl::Status RunGrpc(Reporter& rep) {
  const std::string dir = DatasetDirFlag();
  ZOOM_ASSIGN_OR_RETURN(Metric metric, MetricFlag(dir));
  ZOOM_ASSIGN_OR_RETURN(Dataset ds, LoadDataset(dir, metric, absl::GetFlag(FLAGS_max_queries)));
  ZOOM_ASSIGN_OR_RETURN(std::vector<int> concurrency,
                        ParseIntList(absl::GetFlag(FLAGS_grpc_concurrency)));
  const size_t k = absl::GetFlag(FLAGS_k);

  const std::string work = absl::GetFlag(FLAGS_grpc_work_dir);
  std::error_code ec;
  std::filesystem::remove_all(work, ec);
  server::ServerOptions options;
  options.database.data_dir = work;
  options.database.collection.auto_build_min_points = 0;
  options.grpc_address = "127.0.0.1:0";
  options.metrics_address = "";
  options.threads = absl::GetFlag(FLAGS_grpc_server_threads);
  server::ZoomServer srv(options);
  ZOOM_RETURN_IF_ERROR(srv.Start());
  const std::string target = absl::StrCat("127.0.0.1:", srv.grpc_port());
  auto admin = client::ZoomClient::Connect(target);

  v1::CollectionSpec spec;
  spec.set_name("bench");
  spec.set_dim(ds.dim());
  spec.set_metric(metric == Metric::kL2             ? v1::L2
                  : metric == Metric::kInnerProduct ? v1::INNER_PRODUCT
                                                    : v1::COSINE);
  spec.set_dtype(ds.is_uint8 ? v1::UINT8 : v1::FLOAT32);
  spec.mutable_index()->set_kind(absl::GetFlag(FLAGS_grpc_index_kind) == "hnsw_pq"
                                     ? v1::HNSW_PQ
                                     : v1::IVF_HNSW_PQ);
  spec.mutable_index()->set_pq_m(absl::GetFlag(FLAGS_grpc_pq_m));
  ZOOM_RETURN_IF_ERROR(admin->CreateCollection(spec).status());
  Stopwatch sw;
  ZOOM_RETURN_IF_ERROR(admin->Import("bench", ds.base.rows, [&](uint64_t i, v1::Point* p) {
                         p->set_id(i);
                         p->mutable_vector()->Assign(ds.base.row(i), ds.base.row(i) + ds.dim());
                       }).status());
  const double import_s = sw.ElapsedMicros() / 1e6;
  sw.Reset();
  ZOOM_ASSIGN_OR_RETURN(v1::CollectionInfo info, admin->BuildIndex("bench", /*wait=*/true));
  const double build_s = sw.ElapsedMicros() / 1e6;
  std::printf("dataset %s: %llu points imported over gRPC in %.1f s (%.0f points/s), "
              "index %s built in %.1f s, preview %.1f MiB\n",
              ds.name.c_str(), static_cast<unsigned long long>(info.points()), import_s,
              ds.base.rows / import_s, absl::GetFlag(FLAGS_grpc_index_kind).c_str(), build_s,
              info.resident_bytes() / 1048576.0);
  ZOOM_ASSIGN_OR_RETURN(auto collection, srv.database()->GetCollection("bench"));

  const uint32_t ef = absl::GetFlag(FLAGS_grpc_ef), nprobe = absl::GetFlag(FLAGS_grpc_nprobe),
                 rerank = absl::GetFlag(FLAGS_grpc_rerank);
  // One channel per client thread (as separate client processes would have).
  std::vector<std::unique_ptr<client::ZoomClient>> clients;
  std::atomic<int> next_client{0};
  for (int i = 0; i < 64; ++i) clients.push_back(client::ZoomClient::Connect(target));
  // The same search through gRPC (a channel per client thread) and
  // in-process; preview_only: the preview's ranking alone (no reads).
  auto grpc_search = [&](bool preview_only) -> SearchFn {
    return [&, preview_only](size_t q, size_t kk, int64_t* out, QueryStats* stats) {
      thread_local int mine = next_client.fetch_add(1) % 64;
      v1::SearchRequest req;
      req.set_collection("bench");
      req.mutable_vector()->Assign(ds.queries.row(q), ds.queries.row(q) + ds.dim());
      req.set_k(kk);
      req.set_preview_only(preview_only);
      req.mutable_knobs()->set_ef(ef);
      req.mutable_knobs()->set_nprobe(nprobe);
      if (!preview_only) req.mutable_knobs()->set_rerank_candidates(rerank);
      ZOOM_ASSIGN_OR_RETURN(v1::SearchResponse r, clients[mine]->Search(req));
      for (size_t i = 0; i < kk; ++i) out[i] = i < static_cast<size_t>(r.hits_size()) ? r.hits(i).id() : -1;
      stats->reads = r.stats().ssd_reads();
      stats->bytes_read = r.stats().bytes_read();
      return absl::OkStatus();
    };
  };
  auto local_search = [&](bool preview_only) -> SearchFn {
    return [&, preview_only](size_t q, size_t kk, int64_t* out, QueryStats* stats) {
      server::CollectionSearchParams p;
      p.engine.k = kk;
      p.engine.ef = ef;
      p.engine.nprobe = nprobe;
      p.engine.rerank_candidates = rerank;
      p.engine.preview_only = preview_only;
      thread_local server::QueryResult r;
      ZOOM_RETURN_IF_ERROR(collection->Search(absl::MakeConstSpan(ds.queries.row(q), ds.dim()), p, &r));
      if (stats != nullptr) stats->Merge(r.stats);
      for (size_t i = 0; i < kk; ++i) {
        out[i] = i < r.hits.size() ? static_cast<int64_t>(r.hits[i].id) : -1;
      }
      return absl::OkStatus();
    };
  };
  const SearchFn via_grpc = grpc_search(false), in_process = local_search(false);

  // The floor, one caller: what any unary call on this channel costs
  // (Health.Check, gRPC's own service), and a preview-only search (RAM only,
  // answered on gRPC's thread when the server is idle) beside the same search
  // in-process. The gap between the two searches is the service's overhead
  // without a worker hop or an SSD wait.
  {
    std::vector<double> health_us;
    for (size_t i = 0; i < ds.queries.rows + 200; ++i) {
      Stopwatch one;
      ZOOM_RETURN_IF_ERROR(clients[0]->Health().status());
      if (i >= 200) health_us.push_back(static_cast<double>(one.ElapsedMicros()));
    }
    std::sort(health_us.begin(), health_us.end());
    ZOOM_ASSIGN_OR_RETURN(RunResult plocal, RunQueries(ds, k, 1, local_search(true)));
    ZOOM_ASSIGN_OR_RETURN(RunResult premote, RunQueries(ds, k, 1, grpc_search(true)));
    const double health_p50 = Percentile(health_us, 50), health_p99 = Percentile(health_us, 99);
    std::printf("floor, 1 caller: Health.Check p50 %.0f us p99 %.0f us; preview-only Search "
                "in-process p50 %.0f us, gRPC p50 %.0f us (gap %.0f us)\n",
                health_p50, health_p99, plocal.p50_us, premote.p50_us,
                premote.p50_us - plocal.p50_us);
    rep.JsonLine({{"workload", std::string("grpc")},
                  {"dataset", ds.name},
                  {"path", std::string("floor")},
                  {"callers", int64_t{1}},
                  {"health_p50_us", health_p50},
                  {"health_p99_us", health_p99},
                  {"preview_in_process_p50_us", plocal.p50_us},
                  {"preview_grpc_p50_us", premote.p50_us}});
  }

  // CPU us/q: the process's CPU time per query (the client, the server and
  // the engine share this process): gRPC's minus in-process is what a call
  // costs both ends of the channel together.
  Table table({"callers", "path", "recall@10", "QPS", "p50 us", "p99 us", "reads/q",
               "CPU us/q", "QPS ratio", "p99 ratio"});
  for (int c : concurrency) {
    ZOOM_ASSIGN_OR_RETURN(RunResult local, RunQueries(ds, k, c, in_process));
    ZOOM_ASSIGN_OR_RETURN(RunResult remote, RunQueries(ds, k, c, via_grpc));
    table.Row({std::to_string(c), "in-process", Fmt(local.recall_at_10, 4), Fmt(local.qps, 0),
               Fmt(local.p50_us, 0), Fmt(local.p99_us, 0), Fmt(local.reads_per_query, 1),
               Fmt(local.cpu_us_per_query, 0), "1", "1"});
    table.Row({std::to_string(c), "gRPC", Fmt(remote.recall_at_10, 4), Fmt(remote.qps, 0),
               Fmt(remote.p50_us, 0), Fmt(remote.p99_us, 0), Fmt(remote.reads_per_query, 1),
               Fmt(remote.cpu_us_per_query, 0), Fmt(remote.qps / local.qps, 2), Fmt(remote.p99_us / local.p99_us, 2)});
    for (const auto& [path, r] : {std::pair{"in-process", local}, std::pair{"grpc", remote}}) {
      rep.JsonLine({{"workload", std::string("grpc")},
                    {"dataset", ds.name},
                    {"path", std::string(path)},
                    {"callers", static_cast<int64_t>(c)},
                    {"recall_at_10", r.recall_at_10},
                    {"qps", r.qps},
                    {"p50_us", r.p50_us},
                    {"p99_us", r.p99_us},
                    {"reads_per_query", r.reads_per_query},
                    {"cpu_us_per_query", r.cpu_us_per_query}});
    }
  }
  // SearchBatch: every query once, in batches, closed loop.
  const int batch = absl::GetFlag(FLAGS_grpc_batch_size);
  if (batch > 0) {
    ZOOM_ASSIGN_OR_RETURN(std::vector<int> batch_callers,
                          ParseIntList(absl::GetFlag(FLAGS_grpc_batch_callers)));
    const size_t nq = ds.queries.rows;
    const size_t batches = (nq + batch - 1) / batch;
    Table btable({"calls in flight", "batch", "recall@10", "QPS (queries/s)", "batches/s"},
                  /*width=*/16);
    for (int c : batch_callers) {
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
              req.set_collection("bench");
              const size_t first = b * batch, last = std::min(nq, first + batch);
              for (size_t q = first; q < last; ++q) {
                v1::SearchRequest* one = req.add_queries();
                one->set_collection("bench");
                one->mutable_vector()->Assign(ds.queries.row(q), ds.queries.row(q) + ds.dim());
                one->set_k(k);
                one->mutable_knobs()->set_ef(ef);
                one->mutable_knobs()->set_nprobe(nprobe);
                one->mutable_knobs()->set_rerank_candidates(rerank);
              }
              auto r = clients[t % clients.size()]->SearchBatch(req);
              if (!r.ok()) {
                absl::MutexLock l(&mu);
                if (first_error.ok()) first_error = r.status();
                failed = true;
                return;
              }
              for (size_t q = first; q < last && q - first < size_t(r->results_size()); ++q) {
                const v1::SearchResponse& one = r->results(q - first);
                for (size_t i = 0; i < k && i < size_t(one.hits_size()); ++i) {
                  ids[q * k + i] = static_cast<int64_t>(one.hits(i).id());
                }
              }
            }
          });
        }
        for (auto& th : threads) th.join();
        ZOOM_RETURN_IF_ERROR(first_error);
        if (pass == 0) continue;
        const double secs = wall.ElapsedMicros() / 1e6;
        double recall = 0;
        for (size_t q = 0; q < nq; ++q) recall += RecallAtK(ds, q, ids.data() + q * k, k, 10);
        recall /= static_cast<double>(nq);
        btable.Row({std::to_string(c), std::to_string(batch), Fmt(recall, 4), Fmt(nq / secs, 0),
                    Fmt(batches / secs, 1)});
        rep.JsonLine({{"workload", std::string("grpc")},
                      {"dataset", ds.name},
                      {"path", std::string("grpc_search_batch")},
                      {"callers", static_cast<int64_t>(c)},
                      {"batch", static_cast<int64_t>(batch)},
                      {"recall_at_10", recall},
                      {"qps", nq / secs}});
      }
    }
  }
  std::printf("load average (1 min) after the run: %.2f\n", LoadAverage1m());
  srv.Shutdown(absl::Seconds(5));
  return absl::OkStatus();
}

const RegisterWorkload kRegisterGrpc("grpc", RunGrpc);

}  // namespace
}  // namespace zoom::bench
