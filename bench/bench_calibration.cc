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

std::string Knobs(uint32_t ef, uint32_t nprobe, uint32_t rerank, bool ivf, double band = 0) {
  return absl::StrCat(ivf ? absl::StrCat("nprobe=", nprobe, ",ef=", ef, ",rerank=", rerank)
                          : absl::StrCat("ef=", ef, ",rerank=", rerank),
                      band > 0 ? absl::StrCat(",band=", band) : std::string());
}

// The workload: Setup gets the engine and reads the flags; Run calibrates
// the index as a build does (1), runs the hand-picked sweep (3) and the
// built-in defaults; Report runs each target's calibrated pick beside the
// fastest hand-picked configuration that reached it (2).
class CalibrationWorkload : public Workload {
 public:
  absl::Status Setup() override;
  absl::Status Run(JsonLines& rep) override;
  absl::Status Report(JsonLines& rep) override;

 private:
  absl::Status Calibrate(JsonLines& rep);
  absl::Status Sweep(JsonLines& rep);
  absl::Status Defaults(JsonLines& rep) const;
  absl::Status Target(double target, JsonLines& rep) const;

  ZoomBuilt zb_;
  bool ivf_ = false;
  int t_ = 1;
  size_t k_ = 10;
  std::vector<double> targets_;
  std::vector<int> reranks_;
  server::CalibrationOptions options_;
  server::Calibration cal_;
  std::vector<ConfigResult> sweep_;
};

absl::Status CalibrationWorkload::Setup() {
  ZOOM_ASSIGN_OR_RETURN(zb_, GetZoomBuilt());
  ivf_ = ScansLists(*zb_.engine->index());
  ZOOM_ASSIGN_OR_RETURN(auto threads, ThreadsFlag());
  t_ = threads.back();
  k_ = static_cast<size_t>(absl::GetFlag(FLAGS_k));
  for (absl::string_view v : absl::StrSplit(absl::GetFlag(FLAGS_calib_targets), ',')) {
    double x = 0;
    if (!absl::SimpleAtod(v, &x) || !(x > 0 && x <= 1)) {
      return absl::InvalidArgumentError(absl::StrCat("--calib_targets: bad value '", v, "'"));
    }
    targets_.push_back(x);
  }
  ZOOM_ASSIGN_OR_RETURN(reranks_, ParseIntList(absl::GetFlag(FLAGS_calib_rerank)));
  options_.queries = static_cast<uint32_t>(absl::GetFlag(FLAGS_calib_queries));
  return absl::OkStatus();
}

// 1. The calibration, as a build runs it, and its Pareto front.
absl::Status CalibrationWorkload::Calibrate(JsonLines& rep) {
  const NoneExcluded live;
  Stopwatch sw;
  ZOOM_ASSIGN_OR_RETURN(cal_, server::Calibrate(*zb_.engine, live, options_));
  const double calib_s = sw.ElapsedSeconds();
  std::printf("\n== calibration of %s: %u stored points as queries, %zu knob settings, %.2f s "
              "(one thread, exact neighbours included)\n",
              zb_.params.c_str(), cal_.queries, cal_.points.size(), calib_s);
  std::vector<server::CalibrationPoint> front = cal_.points;
  // By counted work, what the choice goes by.
  std::sort(front.begin(), front.end(), [](const auto& a, const auto& b) {
    return a.work < b.work;
  });
  std::printf("%10s %10s %10s %8s  %s\n", "recall", "lower", "mean_us", "reads", "knobs");
  double best_lower = -1;
  for (const auto& p : front) {
    if (p.recall_lower <= best_lower) continue;
    best_lower = p.recall_lower;
    std::printf("%10.4f %10.4f %10.1f %8.1f  %s\n", p.recall, p.recall_lower, p.mean_us,
                p.ssd_reads,
                Knobs(p.ef, p.nprobe, p.rerank_candidates, ivf_, p.band_confidence).c_str());
  }
  rep.Line({{"name", std::string("calibration_run")},
            {"dataset", zb_.ds->name},
            {"params", zb_.params},
            {"queries", static_cast<int64_t>(cal_.queries)},
            {"points", static_cast<int64_t>(cal_.points.size())},
            {"calibration_s", calib_s}});
  return absl::OkStatus();
}

// 3. Every nprobe (or ef) of the calibration's grid x --calib_rerank on the
// held-back queries (before 2, so that its rows print as one table).
absl::Status CalibrationWorkload::Sweep(JsonLines& rep) {
  std::printf("\n== hand-picked sweep on the %zu held-back queries, %d threads\n",
              static_cast<size_t>(zb_.ds->queries.rows), t_);
  Table table = MakeResultTable();
  const std::vector<uint32_t> primary = ivf_ ? options_.nprobe : options_.ef;
  for (uint32_t v : primary) {
    for (int rr : reranks_) {
      server::SearchParams p;
      p.nprobe = ivf_ ? v : 16;
      p.ef = ivf_ ? std::max<uint32_t>(64, 2 * v) : std::max<uint32_t>(v, rr);
      if (!ivf_ && static_cast<uint32_t>(rr) > v) continue;  // the same as ef = K'
      p.rerank_candidates = static_cast<uint32_t>(rr);
      ZOOM_ASSIGN_OR_RETURN(ConfigResult r, RunZoomConfig(p, t_, k_));
      bench::Report(rep, table, r);
      sweep_.push_back(r);
    }
  }
  return absl::OkStatus();
}

// What a search without knobs ran before calibration: the built-in
// defaults (ef 64, nprobe 16, K' 100).
absl::Status CalibrationWorkload::Defaults(JsonLines& rep) const {
  const server::SearchParams defaults;
  ZOOM_ASSIGN_OR_RETURN(ConfigResult r, RunZoomConfig(defaults, t_, k_));
  std::printf("\nthe built-in default knobs (%s): recall@10 %.4f, %.0f QPS, p99 %.0f us, "
              "%.1f reads\n",
              Knobs(defaults.ef, defaults.nprobe, defaults.rerank_candidates, ivf_).c_str(),
              r.run.recall_at_10, r.run.qps, r.run.p99_us, r.run.reads_per_query);
  rep.Line({{"name", std::string("calibration_defaults")},
            {"dataset", zb_.ds->name},
            {"params", r.params},
            {"threads", int64_t{t_}},
            {"recall_at_10", r.run.recall_at_10},
            {"qps", r.run.qps},
            {"p99_us", r.run.p99_us},
            {"reads_per_query", r.run.reads_per_query}});
  return absl::OkStatus();
}

absl::Status CalibrationWorkload::Run(JsonLines& rep) {
  ZOOM_RETURN_IF_ERROR(Calibrate(rep));
  ZOOM_RETURN_IF_ERROR(Sweep(rep));
  return Defaults(rep);
}

// 2. One target: the calibrated pick run on the held-back queries beside
// the fastest hand-picked configuration that reached the target there.
absl::Status CalibrationWorkload::Target(double target, JsonLines& rep) const {
  const server::Calibration::Choice c = cal_.Choose(target);
  server::SearchParams p;
  p.ef = c.point.ef;
  p.nprobe = ivf_ ? c.point.nprobe : 16;
  p.rerank_candidates = c.point.rerank_candidates;
  p.band_confidence = c.point.band_confidence;
  ZOOM_ASSIGN_OR_RETURN(ConfigResult mine, RunZoomConfig(p, t_, k_));
  const ConfigResult* best = nullptr;
  for (const ConfigResult& r : sweep_) {
    if (r.run.recall_at_10 >= target && (best == nullptr || r.run.qps > best->run.qps)) {
      best = &r;
    }
  }
  const double ratio = best != nullptr ? best->run.qps / mine.run.qps : 0;
  const std::string knobs =
      Knobs(p.ef, c.point.nprobe, p.rerank_candidates, ivf_, c.point.band_confidence);
  std::printf("%8.2f %-32s %8.4f %8.4f %6.2f %9.0f %8.0f %8.1f | %-32s %8.4f %9.0f %7.2f%s%s\n",
              target, knobs.c_str(), c.point.recall, mine.run.recall_at_10,
              mine.run.worst_recall_at_10, mine.run.qps, mine.run.p99_us,
              mine.run.reads_per_query,
              best ? best->params.c_str() : "(none reached it)",
              best ? best->run.recall_at_10 : 0.0, best ? best->run.qps : 0.0, ratio,
              c.reached ? "" : "  (calibration: not reached)",
              mine.run.recall_at_10 >= target ? "" : "  MISSED");
  rep.Line({{"name", std::string("calibration")},
            {"dataset", zb_.ds->name},
            {"params", zb_.params},
            {"threads", int64_t{t_}},
            {"target_recall", target},
            {"knobs", knobs},
            {"calibrated_recall", c.point.recall},
            {"calibrated_recall_lower", c.point.recall_lower},
            {"band_confidence", c.point.band_confidence},
            {"calibrated_reads", c.point.ssd_reads},
            {"reached_in_calibration", c.reached},
            {"recall_at_10", mine.run.recall_at_10},
            {"worst_recall_at_10", mine.run.worst_recall_at_10},
            {"qps", mine.run.qps},
            {"p99_us", mine.run.p99_us},
            {"reads_per_query", mine.run.reads_per_query},
            {"best_params", best ? best->params : std::string()},
            {"best_recall_at_10", best ? best->run.recall_at_10 : 0.0},
            {"best_qps", best ? best->run.qps : 0.0},
            {"cost_ratio", ratio}});
  return absl::OkStatus();
}

absl::Status CalibrationWorkload::Report(JsonLines& rep) {
  std::printf("\n== target_recall against the best hand-picked knobs (%d threads)\n", t_);
  std::printf("%8s %-32s %8s %8s %6s %9s %8s %8s | %-32s %8s %9s %7s\n", "target",
              "calibrated pick", "cal_rec", "recall", "worst", "qps", "p99_us", "reads",
              "best hand-picked", "recall", "qps", "ratio");
  for (double target : targets_) ZOOM_RETURN_IF_ERROR(Target(target, rep));
  return absl::OkStatus();
}

const RegisterWorkload kCalibration("calibration", RunWorkload<CalibrationWorkload>);

}  // namespace
}  // namespace zoom::bench
