// zoombench --benchmarks=filter_labels: filters that fight the vectors, on a
// data set's real labels (issue 45, the trust issue's case 1): what a new
// user gets with the collection's default knobs. The in-process twin of
// loadtest/filter_real_labels.py (which goes through a real zoomd).
//
// A labelled set (--filter_labels_dataset, default <data root>/mnist-784:
// base.bvecs with base_labels.txt, query.bvecs with query_labels.txt, one
// integer label a line) gets its label as the integer field `cls` and its
// row number as `n` (both indexed, as a collection's payload indexes). Each
// case runs --filter_labels_queries queries (a seeded sample of the query
// file) against the exact filtered top-10 (brute force in RAM over the
// matching rows, bench_filter_harness.h):
//
//   not_own_class        must_not cls == the query's class    (~90% match)
//   two_other_classes    cls in two classes not the query's   (~20%)
//   own_class            cls == the query's class             (~10%, correlated)
//   own_class_and_range  the query's class AND n < half       (~5%)
//   unfiltered           no filter
//
// The knobs (--filter_labels_knobs), each at every --threads over every
// query of the sample (no time budget), the planner choosing the strategy;
// --filter_rounds interleaved rounds, the round of median QPS reported:
//   default   the collection's: the index calibrated as a build does
//             (server::Calibrate, CollectionOptions::calibration_queries)
//             and the cheapest point reaching the server's default target
//             (CollectionOptions::default_target_recall), as
//             CollectionKnobs::EngineParams picks them for a search naming no
//             knobs
//   built_in  ef 64, nprobe 16, K' 100 (SearchParams' own, what a search
//             ran before calibration; the Python script's "built-in")
//   best      per case, the planner's best of --benchmarks=filter's one-thread
//             sweep (ZoomSweep: the fastest at mean recall@10 >= 0.95, else
//             the most accurate; each point stops after --filter_budget_s)
//
// Reported per case, knobs and threads: the pass share, recall@10
// (tie-aware) mean and min over the queries, how many queries fell below 0.9
// and below 0.5, SSD reads a query, QPS, p99, the planner's strategies and
// the SIMD kernels that ran; --json writes the same rows (record
// "filter_labels"). Without the data set folder or its label files the
// workload is skipped with a message.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/bench_dataset.h"
#include "bench/bench_filter_harness.h"
#include "bench/bench_util.h"
#include "bench/bench_zoom.h"
#include "common/process.h"
#include "common/status_macros.h"
#include "common/timer.h"
#include "common/vector_dataset.h"
#include "index/distance_kernels.h"
#include "index/vector_index.h"
#include "server/engine/calibration.h"
#include "server/engine/collection.h"
#include "server/engine/collection_config.h"
#include "server/engine/filter.h"
#include "server/engine/id_tracker.h"
#include "server/engine/payload_index.h"
#include "server/engine/search_engine.h"

ABSL_FLAG(std::string, filter_labels_dataset, "",
          "filter_labels: a labelled data set folder (base_labels.txt and query_labels.txt "
          "beside the vectors); default: <data root>/mnist-784");
ABSL_FLAG(int64_t, filter_labels_queries, 500,
          "filter_labels: queries per case (a seeded sample of the query file)");
ABSL_FLAG(std::string, filter_labels_cases, "",
          "filter_labels: only these cases (comma-separated names: not_own_class, "
          "two_other_classes, own_class, own_class_and_range, unfiltered; empty: all)");
ABSL_FLAG(std::string, filter_labels_knobs, "default,built_in,best",
          "filter_labels: the knob settings run (default: the calibrated ones a collection "
          "uses; built_in: ef 64 nprobe 16 K' 100; best: the planner's best of the filter "
          "sweep, per case)");
ABSL_DECLARE_FLAG(double, filter_budget_s);
ABSL_DECLARE_FLAG(int, filter_rounds);

namespace zoom::bench::filter_bench {
namespace {

constexpr uint64_t kSampleSeed = 45;  // the Python script's (its sampler differs)

// One integer a line; NotFound when the file is missing.
absl::StatusOr<std::vector<int64_t>> ReadLabels(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("no ", path));
  std::vector<int64_t> out;
  int64_t v = 0;
  while (in >> v) out.push_back(v);
  if (!in.eof()) return absl::DataLossError(absl::StrCat(path, ": not one integer a line"));
  return out;
}

// `k` distinct rows of [0, n), drawn with a fixed seed (a partial
// Fisher-Yates shuffle: the same sample on every machine).
std::vector<size_t> Sample(size_t n, size_t k) {
  std::vector<size_t> rows(n);
  for (size_t i = 0; i < n; ++i) rows[i] = i;
  std::mt19937_64 rng(kSampleSeed);
  k = std::min(k, n);
  for (size_t i = 0; i < k; ++i) std::swap(rows[i], rows[i + rng() % (n - i)]);
  rows.resize(k);
  return rows;
}

// For each query, two classes other than its own, as the Python script
// picks them.
std::vector<std::pair<int64_t, int64_t>> OtherClasses(const std::vector<int64_t>& base,
                                                      const std::vector<int64_t>& qcls) {
  std::vector<int64_t> classes = base;
  std::sort(classes.begin(), classes.end());
  classes.erase(std::unique(classes.begin(), classes.end()), classes.end());
  std::vector<std::pair<int64_t, int64_t>> others(qcls.size());
  for (size_t q = 0; q < qcls.size(); ++q) {
    const int64_t c = qcls[q];
    std::vector<int64_t> rest;
    for (int64_t x : classes) {
      if (x != c) rest.push_back(x);
    }
    if (rest.empty()) rest.push_back(c);  // one class only: nothing else to ask for
    const int64_t r = static_cast<int64_t>(rest.size());
    const int64_t a = rest[((c * 3) % r + r) % r];
    int64_t b = rest[((c * 7 + 1) % r + r) % r];
    if (a == b) {
      for (int64_t x : classes) {
        if (x != a && x != c) {
          b = x;
          break;
        }
      }
    }
    others[q] = {a, b};
  }
  return others;
}

// The cases of the file comment. `base` and `qcls` (the class of query q of
// the space) must outlive them.
std::vector<Case> MakeLabelCases(const std::vector<int64_t>& base,
                                 const std::vector<int64_t>& qcls) {
  const int64_t half = static_cast<int64_t>(base.size() / 2);
  auto shared_others =
      std::make_shared<std::vector<std::pair<int64_t, int64_t>>>(OtherClasses(base, qcls));
  std::vector<Case> cases;
  {
    Case c;
    c.name = "not_own_class";
    c.filter = [&qcls](size_t q) {
      server::Filter f;
      f.must_not.push_back(Match("cls", qcls[q]));
      return f;
    };
    c.pass = [&base, &qcls](uint32_t id, size_t q) { return base[id] != qcls[q]; };
    cases.push_back(std::move(c));
  }
  {
    Case c;
    c.name = "two_other_classes";
    c.filter = [shared_others](size_t q) {
      server::Condition any;
      any.type = server::Condition::Type::kMatchAny;
      any.key = "cls";
      any.values = {(*shared_others)[q].first, (*shared_others)[q].second};
      server::Filter f;
      f.must.push_back(std::move(any));
      return f;
    };
    c.pass = [&base, shared_others](uint32_t id, size_t q) {
      return base[id] == (*shared_others)[q].first || base[id] == (*shared_others)[q].second;
    };
    cases.push_back(std::move(c));
  }
  {
    Case c;
    c.name = "own_class";
    c.filter = [&qcls](size_t q) {
      server::Filter f;
      f.must.push_back(Match("cls", qcls[q]));
      return f;
    };
    c.pass = [&base, &qcls](uint32_t id, size_t q) { return base[id] == qcls[q]; };
    cases.push_back(std::move(c));
  }
  {
    Case c;
    c.name = "own_class_and_range";
    c.filter = [&qcls, half](size_t q) {
      server::Condition range;
      range.type = server::Condition::Type::kRange;
      range.key = "n";
      range.range.lt = static_cast<double>(half);
      server::Filter f;
      f.must.push_back(Match("cls", qcls[q]));
      f.must.push_back(std::move(range));
      return f;
    };
    c.pass = [&base, &qcls, half](uint32_t id, size_t q) {
      return base[id] == qcls[q] && static_cast<int64_t>(id) < half;
    };
    cases.push_back(std::move(c));
  }
  {
    Case c;
    c.name = "unfiltered";
    c.filter = [](size_t) { return server::Filter(); };
    c.pass = [](uint32_t, size_t) { return true; };
    cases.push_back(std::move(c));
  }
  for (Case& c : cases) {
    c.kind = "labels";
    c.per_query = c.name != "unfiltered";
  }
  return cases;
}

class NoneExcluded : public index::IdFilter {
 public:
  bool IsExcluded(InternalId) const override { return false; }
};

// The knobs a collection over this engine's index searches with when a
// request names none: its calibration's pick for the server's default target
// (CollectionMaintenance::RunCalibration, CollectionKnobs::EngineParams).
absl::StatusOr<ZoomKnobs> DefaultKnobs(const server::SearchEngine& engine, std::string* note) {
  const server::CollectionOptions collection;
  const server::CollectionConfig config;
  server::CalibrationOptions options;
  options.queries = collection.calibration_queries;
  const NoneExcluded live;
  Stopwatch sw;
  ZOOM_ASSIGN_OR_RETURN(server::Calibration cal,
                        server::Calibrate(engine, live, options));
  const server::Calibration::Choice choice = cal.Choose(collection.default_target_recall);
  const server::CalibrationPoint& c = choice.point;
  ZoomKnobs k;
  k.rerank = c.rerank_candidates;
  k.nprobe = c.nprobe != 0 ? c.nprobe : config.default_nprobe;
  k.ef = c.ef;
  if (index::TraitsOf(engine.index()->spec()).ef_at_least_k) k.ef = std::max(k.ef, k.rerank);
  *note = absl::StrFormat(
      "calibrated (%u stored points as queries, %zu knob settings, %.1f s) for the default "
      "target %.2f: %s, calibrated recall %.4f (lower bound %.4f)%s",
      cal.queries, cal.points.size(), sw.ElapsedSeconds(), collection.default_target_recall,
      k.Label(), c.recall, c.recall_lower, choice.reached ? "" : ", target NOT reached");
  return k;
}

struct LabelRow {
  std::string knobs;  // default | built_in | best
  Row row;            // the round of median QPS
  double qps_low = 0, qps_high = 0;  // over the rounds
};

void PrintHeader() {
  std::printf("  %-20s %7s %-9s %-19s %3s %8s %7s %5s %5s %5s %8s %8s %-7s %s\n", "case", "share",
              "knobs", "params", "thr", "QPS", "mean", "min", "<0.9", "<0.5", "reads/q",
              "p99_us", "simd", "strategies");
}

void PrintLabelRow(const Case& c, double share, const LabelRow& r, size_t nq, int rounds) {
  const Outcome& o = r.row.o;
  std::printf(
      "  %-20s %6.2f%% %-9s %-19s %3d %8.1f %7.4f %5.2f %5llu %5llu %8.1f %8.0f %-7s %s%s%s%s%s\n",
      c.name.c_str(), 100 * share, r.knobs.c_str(), r.row.params.c_str(), r.row.threads, o.qps,
      o.recall, o.min_recall, static_cast<unsigned long long>(o.below_0_9),
      static_cast<unsigned long long>(o.below_0_5), o.reads, o.p99_us,
      index::SimdLevelName(index::ActiveSimdLevel()),
      o.strategies.empty() ? "none" : Strategies(o).c_str(),
      rounds > 1 ? absl::StrFormat("  [QPS median of %d: %.0f..%.0f]", rounds, r.qps_low,
                                   r.qps_high).c_str()
                 : "",
      o.short_answers > 0 ? absl::StrCat("  short ", o.short_answers).c_str() : "",
      o.violations > 0 ? absl::StrCat("  VIOLATIONS ", o.violations).c_str() : "",
      o.queries < nq ? absl::StrCat("  (", o.queries, " queries)").c_str() : "");
  std::fflush(stdout);
}

void JsonLabelRow(JsonLines& rep, const Dataset& ds, const std::string& index_key,
                  const Case& c, double share, const LabelRow& r, int rounds) {
  const Outcome& o = r.row.o;
  rep.Line({{"record", std::string("filter_labels")},
            {"name", r.row.system},
            {"dataset", ds.name},
            {"index", index_key},
            {"case", c.name},
            {"kind", c.kind},
            {"share", share},
            {"knobs", r.knobs},
            {"params", r.row.params},
            {"threads", int64_t{r.row.threads}},
            {"qps", o.qps},
            {"qps_low", r.qps_low},
            {"qps_high", r.qps_high},
            {"rounds", int64_t{rounds}},
            {"recall_at_10", o.recall},
            {"min_recall_at_10", o.min_recall},
            {"below_0_9", static_cast<int64_t>(o.below_0_9)},
            {"below_0_5", static_cast<int64_t>(o.below_0_5)},
            {"reads_per_query", o.reads},
            {"p50_us", o.p50_us},
            {"p99_us", o.p99_us},
            {"queries", static_cast<int64_t>(o.queries)},
            {"short_answers", static_cast<int64_t>(o.short_answers)},
            {"violations", static_cast<int64_t>(o.violations)},
            {"strategies", Strategies(o)},
            {"simd", std::string(index::SimdLevelName(index::ActiveSimdLevel()))},
            {"kernels", std::string(index::KernelChoices())}});
}

// The workload: Setup reads the labels (skipping the workload when there
// are none), gets the engine, samples the queries, indexes the payloads and
// makes the cases; Run measures each case with each knob setting.
class FilterLabelsWorkload : public Workload {
 public:
  absl::Status Setup() override;
  absl::Status Run(JsonLines& rep) override;
  absl::Status Report(JsonLines& /*rep*/) override { return absl::OkStatus(); }

 private:
  absl::Status ReadFlags();
  absl::Status Prepare();
  void IndexPayloads();
  absl::Status FixKnobs();
  absl::Status SelectCases();
  // zoomd's search of query q of case c with the planner at `knobs`.
  QueryFn ZoomFn(const Case& c, const ZoomKnobs& knobs) const;
  // The knobs of each setting (best: this case's sweep, one thread).
  absl::StatusOr<std::vector<ZoomKnobs>> ChooseKnobs(const Case& c, const Truth& truth) const;
  absl::Status RunOneCase(const Case& c, JsonLines& rep) const;

  bool skipped_ = false;
  std::string dir_;
  std::vector<std::string> knob_sets_;
  ZoomBuilt zb_;
  size_t n_ = 0, nq_ = 0;
  std::vector<int64_t> base_labels_, query_labels_, qcls_;
  std::vector<int> threads_;
  std::vector<size_t> sample_;
  Space space_;
  server::IdTracker ids_;
  server::PayloadIndex pindex_;
  std::map<std::string, ZoomKnobs> fixed_;
  std::vector<ZoomKnobs> sweep_;
  double budget_ = 0;
  int rounds_ = 1;
  std::vector<Case> cases_;
};

absl::Status FilterLabelsWorkload::ReadFlags() {
  knob_sets_ = absl::StrSplit(absl::GetFlag(FLAGS_filter_labels_knobs), ',', absl::SkipEmpty());
  for (const std::string& k : knob_sets_) {
    if (k != "default" && k != "built_in" && k != "best") {
      return absl::InvalidArgumentError(
          absl::StrCat("--filter_labels_knobs: '", k, "' is not default, built_in or best"));
    }
  }
  ZOOM_ASSIGN_OR_RETURN(threads_, ThreadsFlag());
  budget_ = absl::GetFlag(FLAGS_filter_budget_s);
  rounds_ = std::max(1, absl::GetFlag(FLAGS_filter_rounds));
  return absl::OkStatus();
}

// The engine, the labels, the query sample and the space.
absl::Status FilterLabelsWorkload::Prepare() {
  ZOOM_ASSIGN_OR_RETURN(const DatasetFolder folder, OpenDatasetFolder(dir_, /*need_base=*/true));
  ZOOM_ASSIGN_OR_RETURN(zb_, GetZoomBuiltFor(dir_, folder.DefaultMetric()));
  const Dataset& ds = *zb_.ds;
  n_ = ds.base.rows;
  ZOOM_ASSIGN_OR_RETURN(base_labels_, ReadLabels(dir_ + "/base_labels.txt"));
  ZOOM_ASSIGN_OR_RETURN(query_labels_, ReadLabels(dir_ + "/query_labels.txt"));
  if (base_labels_.size() != n_ || query_labels_.size() < ds.queries.rows) {
    return absl::FailedPreconditionError(absl::StrCat(
        dir_, ": ", base_labels_.size(), " base labels for ", n_, " base rows, ",
        query_labels_.size(), " query labels for ", ds.queries.rows, " queries"));
  }
  sample_ = Sample(ds.queries.rows, static_cast<size_t>(std::max<int64_t>(
                                        1, absl::GetFlag(FLAGS_filter_labels_queries))));
  nq_ = sample_.size();
  qcls_.resize(nq_);
  for (size_t q = 0; q < nq_; ++q) qcls_[q] = query_labels_[sample_[q]];
  std::vector<int64_t> classes = base_labels_;
  std::sort(classes.begin(), classes.end());
  classes.erase(std::unique(classes.begin(), classes.end()), classes.end());
  std::printf("filter_labels: %s (%s), %zu points, %zu classes, %zu queries per case (a seeded "
              "sample of %zu), index %s, SIMD %s, load %.1f\n",
              ds.name.c_str(), MetricName(ds.metric), n_, classes.size(), nq_,
              static_cast<size_t>(ds.queries.rows), zb_.params.c_str(), index::KernelChoices(),
              LoadAverage1m());
  return absl::OkStatus();
}

// The payload indexes over every base row (all live), as a collection's.
void FilterLabelsWorkload::IndexPayloads() {
  Stopwatch sw;
  space_ = filter_bench::Prepare(*zb_.ds, sample_);
  ids_.Reserve(n_);
  pindex_.AddField("cls", server::FieldIndexType::kInteger, true);
  pindex_.AddField("n", server::FieldIndexType::kInteger, true);
  for (size_t i = 0; i < n_; ++i) {
    ids_.Set(static_cast<InternalId>(i), i);
    server::PayloadFields f;
    f["cls"] = server::FieldValue::Of(base_labels_[i]);
    f["n"] = server::FieldValue::Of(static_cast<int64_t>(i));
    pindex_.Update(static_cast<InternalId>(i), nullptr, &f);
  }
  ids_.Publish(n_);
  std::printf("payload indexes in %.1f s (%.1f MB)\n", sw.ElapsedSeconds(), pindex_.Bytes() / 1e6);
}

absl::Status FilterLabelsWorkload::FixKnobs() {
  if (std::find(knob_sets_.begin(), knob_sets_.end(), "default") != knob_sets_.end()) {
    std::string note;
    ZOOM_ASSIGN_OR_RETURN(fixed_["default"], DefaultKnobs(*zb_.engine, &note));
    std::printf("default knobs: %s\n", note.c_str());
  }
  const server::SearchParams builtin;
  fixed_["built_in"] = ZoomKnobs{builtin.ef, builtin.nprobe, builtin.rerank_candidates};
  sweep_ = ZoomSweep(ScansLists(*zb_.engine->index()));
  return absl::OkStatus();
}

absl::Status FilterLabelsWorkload::SelectCases() {
  cases_ = MakeLabelCases(base_labels_, qcls_);
  const std::string only = absl::GetFlag(FLAGS_filter_labels_cases);
  if (only.empty()) return absl::OkStatus();
  const std::vector<std::string> parts = absl::StrSplit(only, ',', absl::SkipEmpty());
  std::erase_if(cases_, [&](const Case& c) {
    return std::find(parts.begin(), parts.end(), c.name) == parts.end();
  });
  if (cases_.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--filter_labels_cases: no case is named in '", only, "'"));
  }
  return absl::OkStatus();
}

absl::Status FilterLabelsWorkload::Setup() {
  dir_ = absl::GetFlag(FLAGS_filter_labels_dataset);
  if (dir_.empty()) dir_ = DefaultDataRoot() + "/mnist-784";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(dir_ + "/base_labels.txt", ec) ||
      !std::filesystem::is_regular_file(dir_ + "/query_labels.txt", ec)) {
    std::printf("filter_labels: skipped: no labelled data set at %s (base_labels.txt and "
                "query_labels.txt beside the vectors; --filter_labels_dataset)\n",
                dir_.c_str());
    skipped_ = true;
    return absl::OkStatus();
  }
  ZOOM_RETURN_IF_ERROR(ReadFlags());
  ZOOM_RETURN_IF_ERROR(Prepare());
  IndexPayloads();
  ZOOM_RETURN_IF_ERROR(FixKnobs());
  return SelectCases();
}

QueryFn FilterLabelsWorkload::ZoomFn(const Case& c, const ZoomKnobs& knobs) const {
  return [this, &c, knobs](size_t q, int64_t* out, QueryStats* st) {
    thread_local server::MatchSet match;
    thread_local server::QueryResult r;
    const server::Filter f = c.filter(q);
    server::SearchParams p;
    p.k = kK;
    p.ef = knobs.ef;
    p.nprobe = knobs.nprobe;
    p.rerank_candidates = knobs.rerank;
    server::QueryContext ctx;
    ctx.live_points = n_;
    if (!f.empty()) {
      ZOOM_RETURN_IF_ERROR(pindex_.Evaluate(f, ids_, n_, &match));
      ctx.match = &match;
    }
    const Dataset& ds = *zb_.ds;
    ZOOM_RETURN_IF_ERROR(zb_.engine->Search(
        absl::MakeConstSpan(ds.queries.row(sample_[q]), ds.dim()), p, &r, ctx));
    *st = r.stats;
    for (size_t i = 0; i < kK; ++i) {
      out[i] = i < r.hits.size() ? static_cast<int64_t>(r.hits[i].id) : -1;
    }
    return absl::OkStatus();
  };
}

absl::StatusOr<std::vector<ZoomKnobs>> FilterLabelsWorkload::ChooseKnobs(
    const Case& c, const Truth& truth) const {
  std::vector<ZoomKnobs> chosen;
  for (const std::string& which : knob_sets_) {
    if (which != "best") {
      chosen.push_back(fixed_.at(which));
      continue;
    }
    std::vector<Row> rows;
    for (const ZoomKnobs& k : sweep_) {
      ZOOM_ASSIGN_OR_RETURN(Outcome o, RunCase(space_, c, truth, nq_, 1, budget_, ZoomFn(c, k)));
      rows.push_back({"zoomd_planner", k.Label(), 1, o});
    }
    const Row* best = Best(rows);
    chosen.push_back(sweep_[0]);
    for (const ZoomKnobs& k : sweep_) {
      if (k.Label() == best->params) chosen.back() = k;
    }
  }
  return chosen;
}

absl::Status FilterLabelsWorkload::RunOneCase(const Case& c, JsonLines& rep) const {
  const Truth truth = Oracle(space_, c, n_, nq_);
  double share = 0;
  for (uint64_t m : truth.matches) share += static_cast<double>(m) / n_;
  share /= nq_;
  ZOOM_ASSIGN_OR_RETURN(const std::vector<ZoomKnobs> chosen, ChooseKnobs(c, truth));
  // Every query of the sample, --filter_rounds interleaved rounds per
  // thread count (the order rotated), the round of median QPS reported.
  std::vector<std::vector<LabelRow>> by_knobs(knob_sets_.size());
  for (int t : threads_) {
    std::vector<std::vector<Outcome>> runs(knob_sets_.size());
    for (int r = 0; r < rounds_; ++r) {
      for (size_t j = 0; j < knob_sets_.size(); ++j) {
        const size_t si = (j + static_cast<size_t>(r)) % knob_sets_.size();
        ZOOM_ASSIGN_OR_RETURN(
            Outcome o, RunCase(space_, c, truth, nq_, t, std::numeric_limits<double>::infinity(),
                               ZoomFn(c, chosen[si])));
        runs[si].push_back(std::move(o));
      }
    }
    for (size_t si = 0; si < knob_sets_.size(); ++si) {
      std::vector<Outcome>& v = runs[si];
      std::sort(v.begin(), v.end(),
                [](const Outcome& x, const Outcome& y) { return x.qps < y.qps; });
      LabelRow row{knob_sets_[si], Row{"zoomd_planner", chosen[si].Label(), t, v[v.size() / 2]}};
      row.qps_low = v.front().qps;
      row.qps_high = v.back().qps;
      by_knobs[si].push_back(std::move(row));
    }
  }
  for (const std::vector<LabelRow>& rows : by_knobs) {
    for (const LabelRow& row : rows) {
      PrintLabelRow(c, share, row, nq_, rounds_);
      JsonLabelRow(rep, *zb_.ds, zb_.params, c, share, row, rounds_);
    }
  }
  return absl::OkStatus();
}

absl::Status FilterLabelsWorkload::Run(JsonLines& rep) {
  if (skipped_) return absl::OkStatus();
  std::printf("\n");
  PrintHeader();
  for (const Case& c : cases_) ZOOM_RETURN_IF_ERROR(RunOneCase(c, rep));
  return absl::OkStatus();
}

const RegisterWorkload kFilterLabels("filter_labels", RunWorkload<FilterLabelsWorkload>);

}  // namespace
}  // namespace zoom::bench::filter_bench
