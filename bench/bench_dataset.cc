#include "bench/bench_dataset.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/process.h"
#include "common/recall.h"
#include "common/status_macros.h"
#include "common/timer.h"

ABSL_FLAG(std::string, dataset, "",
          "Data set folder (base.*vecs, query.*vecs, groundtruth_<metric>*); "
          "default: <data root>/glove-6b-100d, where the data root is "
          "../shared/data from the current directory or from the source tree");
ABSL_FLAG(std::string, metric, "",
          "l2 | ip | cosine; default: the first of cosine, l2, ip the folder "
          "has ground truth for (l2 when none)");
ABSL_FLAG(std::string, threads, "1,2", "Search thread counts, comma-separated");
ABSL_FLAG(int32_t, k, 10, "Neighbours returned per query");
ABSL_FLAG(int64_t, max_queries, 0, "Use at most this many queries (0 = all)");

namespace zoom::bench {
namespace {

namespace fs = std::filesystem;

std::string FmtRecall(double r) {
  return std::isnan(r) ? std::string("-") : Fmt(r, 4);
}

std::string FmtMiB(uint64_t bytes) {
  return Fmt(static_cast<double>(bytes) / (1 << 20), 1);
}

double BytesPerVector(const ConfigResult& r) {
  return r.n_vectors == 0 ? 0.0
                          : static_cast<double>(r.resident_bytes) /
                                static_cast<double>(r.n_vectors);
}

}  // namespace

std::string DefaultDataRoot() {
  std::error_code ec;
  const fs::path relative("../shared/data");
  if (fs::is_directory(relative, ec)) {
    return fs::absolute(relative, ec).lexically_normal().string();
  }
#ifdef ZOOM_SOURCE_DIR
  return (fs::path(ZOOM_SOURCE_DIR) / "../shared/data").lexically_normal().string();
#else
  return relative.string();
#endif
}

std::string DatasetDirFlag() {
  std::string dir = absl::GetFlag(FLAGS_dataset);
  if (dir.empty()) dir = DefaultDataRoot() + "/glove-6b-100d";
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

absl::StatusOr<Metric> MetricFlag(const std::string& dir) {
  return MetricOrDefault(absl::GetFlag(FLAGS_metric), dir);
}

absl::StatusOr<std::vector<int>> ThreadsFlag() {
  return ParseIntList(absl::GetFlag(FLAGS_threads));
}

namespace {

// The figures of a timed pass of every query: the sample vectors are
// sorted in place for their percentiles.
RunResult Summarise(const Dataset& ds, size_t k, double seconds, double cpu_seconds,
                    const std::vector<int64_t>& ids, std::vector<double>* latency_us,
                    std::vector<double>* preview_us, std::vector<double>* fullview_us,
                    std::vector<double>* rerank_us, const std::vector<QueryStats>& thread_stats) {
  const size_t nq = ds.queries.rows;
  RunResult r;
  r.queries = nq;
  r.cpu_us_per_query = cpu_seconds * 1e6 / static_cast<double>(nq);
  r.qps = seconds > 0 ? static_cast<double>(nq) / seconds : 0;
  std::sort(latency_us->begin(), latency_us->end());
  r.p50_us = Percentile(*latency_us, 50);
  r.p99_us = Percentile(*latency_us, 99);
  r.p999_us = Percentile(*latency_us, 99.9);
  for (auto* v : {preview_us, fullview_us, rerank_us}) std::sort(v->begin(), v->end());
  r.preview_p50_us = Percentile(*preview_us, 50);
  r.preview_p99_us = Percentile(*preview_us, 99);
  r.fullview_p50_us = Percentile(*fullview_us, 50);
  r.fullview_p99_us = Percentile(*fullview_us, 99);
  r.rerank_p50_us = Percentile(*rerank_us, 50);
  r.rerank_p99_us = Percentile(*rerank_us, 99);
  QueryStats total;
  for (const QueryStats& s : thread_stats) total.Merge(s);
  r.reads_per_query = static_cast<double>(total.reads) / static_cast<double>(nq);
  r.bytes_per_query = static_cast<double>(total.bytes_read) / static_cast<double>(nq);

  auto mean_recall = [&](size_t cut) {
    if (cut > k || cut > ds.gt_dist.dim) return std::numeric_limits<double>::quiet_NaN();
    double sum = 0;
    for (size_t q = 0; q < nq; ++q) sum += RecallAtK(ds, q, ids.data() + q * k, k, cut);
    return sum / static_cast<double>(nq);
  };
  r.recall_at_1 = mean_recall(1);
  r.recall_at_10 = mean_recall(10);
  r.recall_at_100 = mean_recall(100);
  if (10 <= k && 10 <= ds.gt_dist.dim) {
    r.worst_recall_at_10 = 1;
    for (size_t q = 0; q < nq; ++q) {
      r.worst_recall_at_10 =
          std::min(r.worst_recall_at_10, RecallAtK(ds, q, ids.data() + q * k, k, 10));
    }
  }
  return r;
}

}  // namespace

absl::StatusOr<RunResult> RunQueries(const Dataset& ds, size_t k, int threads,
                                     const SearchFn& fn) {
  const size_t nq = ds.queries.rows;
  if (nq == 0) return absl::InvalidArgumentError("no queries");
  if (k == 0) return absl::InvalidArgumentError("k must be >= 1");
  if (threads < 1) return absl::InvalidArgumentError("threads must be >= 1");

  std::vector<int64_t> ids(nq * k, -1);
  std::vector<double> latency_us(nq, 0.0);
  std::vector<double> preview_us(nq, 0.0), fullview_us(nq, 0.0), rerank_us(nq, 0.0);
  std::vector<QueryStats> thread_stats(static_cast<size_t>(threads));

  // One pass over queries [0, count); `timed` records latency and stats.
  auto pass = [&](size_t count, bool timed) -> absl::Status {
    std::atomic<size_t> next{0};
    std::atomic<bool> failed{false};
    std::mutex mu;
    absl::Status first_error;
    std::vector<std::thread> pool;
    pool.reserve(static_cast<size_t>(threads));
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        while (!failed.load(std::memory_order_relaxed)) {
          const size_t q = next.fetch_add(1, std::memory_order_relaxed);
          if (q >= count) break;
          int64_t* out = ids.data() + q * k;
          std::fill(out, out + k, int64_t{-1});
          QueryStats stats;
          Stopwatch sw;
          absl::Status st = fn(q, k, out, &stats);
          const double us = sw.ElapsedMicros();
          if (!st.ok()) {
            std::lock_guard<std::mutex> lock(mu);
            if (first_error.ok()) {
              first_error = absl::Status(
                  st.code(), absl::StrCat("query ", q, ": ", st.message()));
            }
            failed = true;
            break;
          }
          if (timed) {
            latency_us[q] = us;
            preview_us[q] = stats.preview_us;
            fullview_us[q] = stats.fullview_us;
            rerank_us[q] = stats.rerank_us;
            thread_stats[static_cast<size_t>(t)].Merge(stats);
          }
        }
      });
    }
    for (std::thread& th : pool) th.join();
    return first_error;
  };

  ZOOM_RETURN_IF_ERROR(pass(std::min<size_t>(200, nq), /*timed=*/false));
  const double cpu_before = ProcessCpuSeconds();
  Stopwatch wall;
  ZOOM_RETURN_IF_ERROR(pass(nq, /*timed=*/true));
  const double seconds = wall.ElapsedSeconds();
  const double cpu_seconds = ProcessCpuSeconds() - cpu_before;

  return Summarise(ds, k, seconds, cpu_seconds, ids, &latency_us, &preview_us, &fullview_us,
                   &rerank_us, thread_stats);
}

Table MakeResultTable() {
  return Table({"threads", "recall@1", "recall@10", "recall@100", "QPS",
                "p50_us", "p99_us", "p99.9_us", "reads/q", "resident_MiB",
                "B/vector", "params", "system"},
               13);
}

void Report(JsonLines& rep, Table& table, const ConfigResult& r) {
  const RunResult& x = r.run;
  table.Row({absl::StrCat(r.threads), FmtRecall(x.recall_at_1),
             FmtRecall(x.recall_at_10), FmtRecall(x.recall_at_100),
             Fmt(x.qps, 0), Fmt(x.p50_us), Fmt(x.p99_us), Fmt(x.p999_us),
             Fmt(x.reads_per_query, 1), FmtMiB(r.resident_bytes),
             Fmt(BytesPerVector(r), 1), r.params, "  " + r.name});
  rep.Line({{"name", r.name},
            {"dataset", r.dataset},
            {"params", r.params},
            {"recall_at_1", x.recall_at_1},
            {"recall_at_10", x.recall_at_10},
            {"worst_recall_at_10", x.worst_recall_at_10},
            {"recall_at_100", x.recall_at_100},
            {"qps", x.qps},
            {"p50_us", x.p50_us},
            {"p99_us", x.p99_us},
            {"p999_us", x.p999_us},
            {"reads_per_query", x.reads_per_query},
            {"bytes_per_query", x.bytes_per_query},
            {"preview_p50_us", x.preview_p50_us},
            {"preview_p99_us", x.preview_p99_us},
            {"fullview_p50_us", x.fullview_p50_us},
            {"fullview_p99_us", x.fullview_p99_us},
            {"rerank_p50_us", x.rerank_p50_us},
            {"rerank_p99_us", x.rerank_p99_us},
            {"resident_bytes", static_cast<int64_t>(r.resident_bytes)},
            {"bytes_per_vector", BytesPerVector(r)},
            {"rss_bytes", static_cast<int64_t>(r.rss_bytes)},
            {"threads", int64_t{r.threads}},
            {"k", static_cast<int64_t>(r.k)},
            {"queries", static_cast<int64_t>(x.queries)}});
}

bool IsOurs(const std::string& name) { return name.rfind("zoomd", 0) == 0; }

void PrintSideBySide(const std::vector<ConfigResult>& results,
                     const std::vector<double>& targets) {
  std::vector<int> thread_counts;
  std::vector<std::string> systems;
  for (const ConfigResult& r : results) {
    if (std::find(thread_counts.begin(), thread_counts.end(), r.threads) ==
        thread_counts.end()) {
      thread_counts.push_back(r.threads);
    }
    if (std::find(systems.begin(), systems.end(), r.name) == systems.end()) {
      systems.push_back(r.name);
    }
  }
  std::sort(thread_counts.begin(), thread_counts.end());
  std::printf("\nside by side: the fastest configuration of each system reaching "
              "recall@10 >= target (ratio = QPS / best baseline's QPS)\n");
  const char* kHeader = "  %-26s %-14s %9s %10s %9s %9s %13s %9s %9s\n";
  for (int t : thread_counts) {
    for (double target : targets) {
      std::printf("\n recall@10 >= %.2f, %d thread%s:\n", target, t, t == 1 ? "" : "s");
      std::printf(kHeader, "system", "params", "recall@10", "QPS", "p50_us",
                  "p99_us", "resident_MiB", "B/vector", "ratio");
      std::vector<const ConfigResult*> best(systems.size(), nullptr);
      std::vector<double> max_recall(systems.size(), 0.0);
      double best_baseline_qps = 0;
      for (size_t s = 0; s < systems.size(); ++s) {
        for (const ConfigResult& r : results) {
          if (r.name != systems[s] || r.threads != t) continue;
          const double rec = r.run.recall_at_10;
          if (std::isnan(rec)) continue;
          max_recall[s] = std::max(max_recall[s], rec);
          if (rec >= target && (best[s] == nullptr || r.run.qps > best[s]->run.qps)) {
            best[s] = &r;
          }
        }
        if (best[s] != nullptr && !IsOurs(systems[s])) {
          best_baseline_qps = std::max(best_baseline_qps, best[s]->run.qps);
        }
      }
      for (size_t s = 0; s < systems.size(); ++s) {
        const ConfigResult* b = best[s];
        if (b == nullptr) {
          std::printf("  %-26s not reached (best recall@10 %.4f)\n", systems[s].c_str(),
                      max_recall[s]);
          continue;
        }
        const std::string ratio =
            best_baseline_qps > 0 ? absl::StrFormat("%.2fx", b->run.qps / best_baseline_qps)
                                  : std::string("-");
        std::printf("  %-26s %-14s %9.4f %10.0f %9.1f %9.1f %13s %9.1f %9s\n",
                    systems[s].c_str(), b->params.c_str(), b->run.recall_at_10,
                    b->run.qps, b->run.p50_us, b->run.p99_us,
                    FmtMiB(b->resident_bytes).c_str(), BytesPerVector(*b),
                    ratio.c_str());
      }
    }
  }
  std::fflush(stdout);
}

std::vector<ConfigResult> ParetoFront(const std::vector<ConfigResult>& results) {
  std::vector<const ConfigResult*> sorted;
  for (const ConfigResult& r : results) {
    if (!std::isnan(r.run.recall_at_10)) sorted.push_back(&r);
  }
  // Best recall first (then fastest); a point survives when it is faster
  // than every point with at least its recall.
  std::sort(sorted.begin(), sorted.end(), [](const ConfigResult* a, const ConfigResult* b) {
    if (a->run.recall_at_10 != b->run.recall_at_10) {
      return a->run.recall_at_10 > b->run.recall_at_10;
    }
    return a->run.qps > b->run.qps;
  });
  std::vector<ConfigResult> front;
  double best_qps = -1;
  for (const ConfigResult* r : sorted) {
    if (r->run.qps > best_qps) {
      front.push_back(*r);
      best_qps = r->run.qps;
    }
  }
  std::reverse(front.begin(), front.end());
  return front;
}

}  // namespace zoom::bench
