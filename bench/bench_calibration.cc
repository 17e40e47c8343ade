// zoombench --benchmarks=calibration: recall as a knob (issue 19, section 4),
// checked against the real ground truth.
//
// 1. The engine's index is calibrated as a collection's is at each build
//    (server::Calibrate: --calib_queries stored points as queries, the
//    point itself excluded, the default grid), and the curve's Pareto front
//    printed.
// 2. For each --calib_targets value, the knobs the calibration picks run
//    the dataset's own held-back queries (never in the base) on --threads:
//    recall@10 against their exact ground truth, QPS, p99, reads.
// 3. The best hand-picked knobs at that target, from a sweep over the same
//    queries (every nprobe or ef of the calibration's grid x --calib_rerank
//    values): the fastest configuration whose real recall@10 reaches the
//    target. cost_ratio = best QPS / the calibrated pick's QPS (target:
//    <= 1.2; below 1 when the pick beat the grid).
// 4. The built-in default knobs (ef 64, nprobe 16, K' 100) for comparison:
//    what a search naming no knobs ran before calibration.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/bench_dataset.h"
#include "bench/bench_util.h"
#include "bench/bench_zoom.h"
#include "common/status_macros.h"
#include "common/timer.h"
#include "server/engine/calibration.h"

ABSL_FLAG(int32_t, calib_queries, 500,
          "calibration: stored points used as queries (at most max(200, points / 100))");
ABSL_FLAG(std::string, calib_targets, "0.90,0.95,0.99", "calibration: target recalls");
ABSL_FLAG(std::string, calib_rerank, "10,12,15,18,20,25,30,40",
          "calibration: the hand-picked sweep's K' values");

namespace zoom::bench {
namespace {

class NoneExcluded : public index::IdFilter {
 public:
  bool IsExcluded(InternalId) const override { return false; }
};

std::string Knobs(uint32_t ef, uint32_t nprobe, uint32_t rerank, bool ivf) {
  return ivf ? absl::StrCat("nprobe=", nprobe, ",ef=", ef, ",rerank=", rerank)
             : absl::StrCat("ef=", ef, ",rerank=", rerank);
}

absl::Status RunCalibration(Reporter& rep) {
  ZOOM_ASSIGN_OR_RETURN(ZoomBuilt zb, GetZoomBuilt());
  const Dataset& ds = *zb.ds;
  const server::SearchEngine& engine = *zb.engine;
  const index::IndexKind kind = engine.index()->spec().kind;
  const bool ivf = kind == index::IndexKind::kIvfHnswPq;
  ZOOM_ASSIGN_OR_RETURN(auto threads, ThreadsFlag());
  const int t = threads.back();
  const size_t k = static_cast<size_t>(absl::GetFlag(FLAGS_k));
  std::vector<double> targets;
  for (absl::string_view v : absl::StrSplit(absl::GetFlag(FLAGS_calib_targets), ',')) {
    double x = 0;
    if (!absl::SimpleAtod(v, &x) || !(x > 0 && x <= 1)) {
      return absl::InvalidArgumentError(absl::StrCat("--calib_targets: bad value '", v, "'"));
    }
    targets.push_back(x);
  }
  ZOOM_ASSIGN_OR_RETURN(std::vector<int> reranks,
                        ParseIntList(absl::GetFlag(FLAGS_calib_rerank)));

  // 1. The calibration, as a build runs it.
  server::CalibrationOptions options;
  options.queries = static_cast<uint32_t>(absl::GetFlag(FLAGS_calib_queries));
  const NoneExcluded live;
  Stopwatch sw;
  ZOOM_ASSIGN_OR_RETURN(server::Calibration cal, server::Calibrate(engine, kind, live, options));
  const double calib_s = sw.ElapsedSeconds();
  std::printf("\n== calibration of %s: %u stored points as queries, %zu knob settings, %.2f s "
              "(one thread, exact neighbours included)\n",
              zb.params.c_str(), cal.queries, cal.points.size(), calib_s);
  std::vector<server::CalibrationPoint> front = cal.points;
  std::sort(front.begin(), front.end(), [](const auto& a, const auto& b) {
    return a.mean_us < b.mean_us;
  });
  std::printf("%10s %10s %10s %8s  %s\n", "recall", "lower", "mean_us", "reads", "knobs");
  double best_lower = -1;
  for (const auto& p : front) {
    if (p.recall_lower <= best_lower) continue;
    best_lower = p.recall_lower;
    std::printf("%10.4f %10.4f %10.1f %8.1f  %s\n", p.recall, p.recall_lower, p.mean_us,
                p.ssd_reads, Knobs(p.ef, p.nprobe, p.rerank_candidates, ivf).c_str());
  }
  rep.JsonLine({{"name", std::string("calibration_run")},
                {"dataset", ds.name},
                {"params", zb.params},
                {"queries", static_cast<int64_t>(cal.queries)},
                {"points", static_cast<int64_t>(cal.points.size())},
                {"calibration_s", calib_s}});

  // 3 first (its rows print as a table), then 2 against it.
  std::printf("\n== hand-picked sweep on the %zu held-back queries, %d threads\n",
              static_cast<size_t>(ds.queries.rows), t);
  Table table = MakeResultTable();
  std::vector<ConfigResult> sweep;
  const std::vector<uint32_t> primary = ivf ? options.nprobe : options.ef;
  for (uint32_t v : primary) {
    for (int rr : reranks) {
      server::SearchParams p;
      p.nprobe = ivf ? v : 16;
      p.ef = ivf ? std::max<uint32_t>(64, 2 * v) : std::max<uint32_t>(v, rr);
      if (!ivf && static_cast<uint32_t>(rr) > v) continue;  // the same as ef = K'
      p.rerank_candidates = static_cast<uint32_t>(rr);
      ZOOM_ASSIGN_OR_RETURN(ConfigResult r, RunZoomConfig(p, t, k));
      Report(rep, table, r);
      sweep.push_back(r);
    }
  }

  // What a search without knobs ran before calibration: the built-in
  // defaults (ef 64, nprobe 16, K' 100).
  {
    const server::SearchParams defaults;
    ZOOM_ASSIGN_OR_RETURN(ConfigResult r, RunZoomConfig(defaults, t, k));
    std::printf("\nthe built-in default knobs (%s): recall@10 %.4f, %.0f QPS, p99 %.0f us, "
                "%.1f reads\n",
                Knobs(defaults.ef, defaults.nprobe, defaults.rerank_candidates, ivf).c_str(),
                r.run.recall_at_10, r.run.qps, r.run.p99_us, r.run.reads_per_query);
    rep.JsonLine({{"name", std::string("calibration_defaults")},
                  {"dataset", ds.name},
                  {"params", r.params},
                  {"threads", int64_t{t}},
                  {"recall_at_10", r.run.recall_at_10},
                  {"qps", r.run.qps},
                  {"p99_us", r.run.p99_us},
                  {"reads_per_query", r.run.reads_per_query}});
  }
  std::printf("\n== target_recall against the best hand-picked knobs (%d threads)\n", t);
  std::printf("%8s %-32s %8s %8s %9s %8s %8s | %-32s %8s %9s %7s\n", "target", "calibrated pick",
              "cal_rec", "recall", "qps", "p99_us", "reads", "best hand-picked", "recall", "qps",
              "ratio");
  for (double target : targets) {
    const server::Calibration::Choice c = cal.Choose(target);
    server::SearchParams p;
    p.ef = c.point.ef;
    p.nprobe = ivf ? c.point.nprobe : 16;
    p.rerank_candidates = c.point.rerank_candidates;
    ZOOM_ASSIGN_OR_RETURN(ConfigResult mine, RunZoomConfig(p, t, k));
    const ConfigResult* best = nullptr;
    for (const ConfigResult& r : sweep) {
      if (r.run.recall_at_10 >= target && (best == nullptr || r.run.qps > best->run.qps)) {
        best = &r;
      }
    }
    const double ratio = best != nullptr ? best->run.qps / mine.run.qps : 0;
    const std::string knobs = Knobs(p.ef, c.point.nprobe, p.rerank_candidates, ivf);
    std::printf("%8.2f %-32s %8.4f %8.4f %9.0f %8.0f %8.1f | %-32s %8.4f %9.0f %7.2f%s%s\n",
                target, knobs.c_str(), c.point.recall, mine.run.recall_at_10, mine.run.qps,
                mine.run.p99_us, mine.run.reads_per_query,
                best ? best->params.c_str() : "(none reached it)",
                best ? best->run.recall_at_10 : 0.0, best ? best->run.qps : 0.0, ratio,
                c.reached ? "" : "  (calibration: not reached)",
                mine.run.recall_at_10 >= target ? "" : "  MISSED");
    rep.JsonLine({{"name", std::string("calibration")},
                  {"dataset", ds.name},
                  {"params", zb.params},
                  {"threads", int64_t{t}},
                  {"target_recall", target},
                  {"knobs", knobs},
                  {"calibrated_recall", c.point.recall},
                  {"calibrated_recall_lower", c.point.recall_lower},
                  {"reached_in_calibration", c.reached},
                  {"recall_at_10", mine.run.recall_at_10},
                  {"qps", mine.run.qps},
                  {"p99_us", mine.run.p99_us},
                  {"reads_per_query", mine.run.reads_per_query},
                  {"best_params", best ? best->params : std::string()},
                  {"best_recall_at_10", best ? best->run.recall_at_10 : 0.0},
                  {"best_qps", best ? best->run.qps : 0.0},
                  {"cost_ratio", ratio}});
  }
  return absl::OkStatus();
}

const RegisterWorkload kCalibration("calibration", RunCalibration);

}  // namespace
}  // namespace zoom::bench
