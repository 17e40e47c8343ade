// zoombench --benchmarks=band (issue 48, section 1): the engine's band
// (SearchParams::band_confidence, server/engine/search_band.h) against
// reading every candidate, one run, the same engine and queries: for each
// K' of --band_rerank and each confidence of --band_confidence (0: every
// candidate read), recall@10, SSD reads a query (mean, p50, p99, max),
// the certain-in and certain-out a query, the estimated hits, QPS,
// latency p50/p99 and CPU us a query, and the worst query's recall@10.
// The index is --dataset's with the index flags (as sweep builds it);
// ivf_hnsw_pq indexes built before the radii read every candidate.
//
//   build/bench/zoombench --benchmarks=band --dataset=../shared/data/glove-6b-100d
//       --metric=cosine --band_rerank=13,16,20,30 --band_confidence=0,1,1.5,2,3

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/bench_dataset.h"
#include "bench/bench_util.h"
#include "bench/bench_zoom.h"
#include "common/recall.h"
#include "common/status_macros.h"
#include "index/vector_index.h"

ABSL_FLAG(std::string, band_rerank, "13,16,20,30", "band: K' values");
ABSL_FLAG(std::string, band_confidence, "0,1,1.5,2,3",
          "band: confidences (0: every candidate read)");
ABSL_FLAG(int32_t, band_nprobe, 64, "band: ivf_hnsw_pq nprobe");
ABSL_FLAG(int32_t, band_ef, 128, "band: preview ef");
ABSL_FLAG(bool, band_exact_scores, false, "band: read the certain-in too (exact scores)");

namespace zoom::bench {
namespace {

double At(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * double(v.size() - 1) + 0.5))];
}

class BandWorkload : public Workload {
 public:
  absl::Status Setup() override {
    ZOOM_ASSIGN_OR_RETURN(zb_, GetZoomBuilt());
    ZOOM_ASSIGN_OR_RETURN(threads_, ThreadsFlag());
    for (absl::string_view v : absl::StrSplit(absl::GetFlag(FLAGS_band_rerank), ',')) {
      int x = 0;
      if (!absl::SimpleAtoi(v, &x) || x < 1) {
        return absl::InvalidArgumentError(absl::StrCat("--band_rerank: '", v, "'"));
      }
      reranks_.push_back(x);
    }
    for (absl::string_view v : absl::StrSplit(absl::GetFlag(FLAGS_band_confidence), ',')) {
      double x = 0;
      if (!absl::SimpleAtod(v, &x) || !(x >= 0 && x <= 100)) {
        return absl::InvalidArgumentError(absl::StrCat("--band_confidence: '", v, "'"));
      }
      confidences_.push_back(x);
    }
    return absl::OkStatus();
  }

  absl::Status Run(JsonLines& rep) override {
    const Dataset& ds = *zb_.ds;
    const size_t nq = ds.queries.rows, k = 10;
    std::printf("\n== band, %s, nprobe=%d ef=%d, %zu queries, k=%zu%s\n", zb_.params.c_str(),
                absl::GetFlag(FLAGS_band_nprobe), absl::GetFlag(FLAGS_band_ef), nq, k,
                absl::GetFlag(FLAGS_band_exact_scores) ? ", exact scores" : "");
    std::printf("%-8s %-6s %3s %8s %8s %6s %6s %6s %8s %8s %9s %9s %8s %8s %8s %7s\n", "K'",
                "conf", "thr", "recall", "worst", "reads", "p50", "p99", "max", "in",
                "out", "estimated", "QPS", "p50_us", "p99_us", "cpu_us");
    for (int t : threads_) {
      for (int kp : reranks_) {
        for (double c : confidences_) {
          server::SearchParams p;
          p.k = static_cast<uint32_t>(k);
          p.ef = static_cast<uint32_t>(absl::GetFlag(FLAGS_band_ef));
          p.nprobe = static_cast<uint32_t>(absl::GetFlag(FLAGS_band_nprobe));
          p.rerank_candidates = static_cast<uint32_t>(kp);
          p.band_confidence = c;
          p.exact_scores = absl::GetFlag(FLAGS_band_exact_scores);
          std::vector<double> reads(nq, 0), in(nq, 0), out(nq, 0), est(nq, 0);
          const server::SearchEngine& engine = *zb_.engine;
          SearchFn fn = [&](size_t q, size_t kk, int64_t* ids, QueryStats* stats) {
            thread_local server::QueryResult r;
            server::SearchParams pp = p;
            pp.k = static_cast<uint32_t>(kk);
            ZOOM_RETURN_IF_ERROR(
                engine.Search(absl::MakeConstSpan(ds.queries.row(q), ds.dim()), pp, &r));
            if (stats != nullptr) stats->Merge(r.stats);
            size_t e = 0;
            for (size_t i = 0; i < kk; ++i) {
              ids[i] = i < r.hits.size() ? static_cast<int64_t>(r.hits[i].id) : -1;
              if (i < r.hits.size()) e += r.hits[i].estimated;
            }
            // The timed pass writes each query last (the warm-up runs first).
            reads[q] = static_cast<double>(r.stats.reads);
            in[q] = static_cast<double>(r.stats.certain_in);
            out[q] = static_cast<double>(r.stats.certain_out);
            est[q] = static_cast<double>(e);
            return absl::OkStatus();
          };
          ZOOM_ASSIGN_OR_RETURN(RunResult run, RunQueries(ds, k, t, fn));
          // The worst query's recall@10 (the ids again, untimed).
          double worst = 1;
          std::vector<int64_t> ids(k);
          for (size_t q = 0; q < nq; ++q) {
            ZOOM_RETURN_IF_ERROR(fn(q, k, ids.data(), nullptr));
            worst = std::min(worst, RecallAtK(ds, q, ids.data(), k, k));
          }
          auto mean = [nq](const std::vector<double>& v) {
            double s = 0;
            for (double x : v) s += x;
            return s / double(std::max<size_t>(1, nq));
          };
          std::printf("%-8d %-6g %3d %8.4f %8.2f %6.2f %6.0f %6.0f %8.0f %8.2f %9.2f %9.2f "
                      "%8.0f %8.0f %8.0f %7.0f\n",
                      kp, c, t, run.recall_at_10, worst, mean(reads), At(reads, 0.5),
                      At(reads, 0.99), At(reads, 1.0), mean(in), mean(out), mean(est), run.qps,
                      run.p50_us, run.p99_us, run.cpu_us_per_query);
          rep.Line({{"name", std::string("zoomd_band")},
                    {"dataset", ds.name},
                    {"params", zb_.params},
                    {"rerank_candidates", int64_t{kp}},
                    {"band_confidence", c},
                    {"exact_scores", p.exact_scores},
                    {"threads", int64_t{t}},
                    {"recall_at_10", run.recall_at_10},
                    {"worst_recall_at_10", worst},
                    {"reads_per_query", mean(reads)},
                    {"reads_p50", At(reads, 0.5)},
                    {"reads_p99", At(reads, 0.99)},
                    {"reads_max", At(reads, 1.0)},
                    {"certain_in", mean(in)},
                    {"certain_out", mean(out)},
                    {"estimated_hits", mean(est)},
                    {"bytes_per_query", run.bytes_per_query},
                    {"qps", run.qps},
                    {"p50_us", run.p50_us},
                    {"p99_us", run.p99_us},
                    {"cpu_us_per_query", run.cpu_us_per_query},
                    {"resident_bytes", int64_t(zb_.engine->index()->ResidentBytes())},
                    {"queries", int64_t(nq)}});
        }
      }
    }
    return absl::OkStatus();
  }

  absl::Status Report(JsonLines&) override { return absl::OkStatus(); }

 private:
  ZoomBuilt zb_;
  std::vector<int> threads_, reranks_;
  std::vector<double> confidences_;
};

const RegisterWorkload kBand("band", RunWorkload<BandWorkload>);

}  // namespace
}  // namespace zoom::bench
