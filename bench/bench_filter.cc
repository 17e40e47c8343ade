// zoombench --benchmarks=filter: filtered search on a real vector set
// (--dataset) with generated attributes of known selectivity:
//
//   tag     a keyword drawn from a Zipf law (s = 2 over 1,000 values): single
//           tag filters at each --filter_buckets share (the tag whose share
//           is closest)
//   price   an integer, uniform in [0, 10^6): range filters at each share
//   region  the nearest of 64 base points sampled as seeds (a cluster):
//           "correlated" filters ask for the region nearest the query (the
//           matches are near it), "anti-correlated" the farthest one, alone
//           and ANDed with a 10% price range
//
// Each case runs --filter_queries queries against an exact filtered oracle
// (brute force over the matching points in RAM). Systems, side by side in
// one run: zoomd with its planner and with each strategy forced (exact,
// match_scan, filtered_preview, post_filter), evaluating each query's filter through
// the payload indexes (counted in its time), the planner swept over nprobe
// (or ef) x K', and each forced strategy swept the same way (each at its
// own best knobs; exact has none), the chosen configurations then measured
// in --filter_rounds interleaved rounds per thread count (the median);
// hnswlib M32 post-filtered and
// FAISS IVF-HNSW-PQ + refine with an IDSelectorBitmap (bench_baselines.h),
// swept over their knobs on one thread, their best configuration (the
// fastest at recall@10 >= 0.95, else the most accurate) again on every
// --threads; the baselines get each filter's bitmap precomputed (not in
// their time). A configuration stops after --filter_budget_s (its QPS and
// recall are over the queries it ran, and say how many). Reported: recall@10
// (tie-aware), QPS, p50/p99, SSD reads per query, the strategies the
// planner chose, and "short": queries answered with fewer than min(k,
// matches) hits. The end: every zoomd strategy over the whole query mix.
//
// The attributes and cases are generated in bench_filter_cases.cc; the
// oracle and the timed runs are bench_filter_harness.cc's (shared with
// --benchmarks=filter_labels, bench_filter_labels.cc).
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench/bench_baselines.h"
#include "bench/bench_dataset.h"
#include "bench/bench_filter_cases.h"
#include "bench/bench_filter_harness.h"
#include "bench/bench_util.h"
#include "bench/bench_zoom.h"
#include "common/process.h"
#include "common/status_macros.h"
#include "common/timer.h"
#include "index/distance_kernels.h"
#include "index/vector_index.h"
#include "server/engine/filter.h"
#include "server/engine/id_tracker.h"
#include "server/engine/payload_index.h"
#include "server/engine/search_engine.h"

ABSL_FLAG(int64_t, filter_queries, 200, "filter: queries per case (the first of the file)");
ABSL_FLAG(std::string, filter_buckets, "0.5,0.1,0.01,0.001,0.0001",
          "filter: target shares of the single-condition filters");
ABSL_FLAG(double, filter_budget_s, 3.0,
          "filter: a configuration stops after this many seconds (its numbers are over the "
          "queries it ran)");
ABSL_FLAG(bool, filter_baselines, true, "filter: also run hnswlib and FAISS filtered");
ABSL_FLAG(int, filter_rounds, 5,
          "filter: the chosen configurations are measured again in this many interleaved "
          "rounds (each of --filter_budget_s / rounds), the median reported");
ABSL_FLAG(std::string, filter_cases, "",
          "filter: only the cases whose name contains one of these comma-separated strings "
          "(e.g. \"price<,tag=t0\"; empty: all; the mix then covers those cases only)");
ABSL_DECLARE_FLAG(std::string, work_dir);

namespace zoom::bench::filter_bench {
namespace {

void PrintRow(const Row& r, size_t nq) {
  std::printf("  %-28s %-22s %2dt  recall@10 %.4f  QPS %9.1f  p50 %8.0f us  p99 %8.0f us  "
              "reads/q %7.1f  short %llu%s%s%s%s\n",
              r.system.c_str(), r.params.c_str(), r.threads, r.o.recall, r.o.qps, r.o.p50_us,
              r.o.p99_us, r.o.reads, static_cast<unsigned long long>(r.o.short_answers),
              r.o.preview_us + r.o.fullview_us > 0
                  ? absl::StrFormat("  preview %.0f us (%.0f codes) fullview %.0f us",
                                    r.o.preview_us, r.o.distance_evals, r.o.fullview_us)
                        .c_str()
                  : "",
              r.o.violations > 0 ? absl::StrCat("  VIOLATIONS ", r.o.violations).c_str() : "",
              r.o.queries < nq ? absl::StrCat("  (budget: ", r.o.queries, " queries)").c_str() : "",
              r.o.strategies.empty() ? "" : absl::StrCat("  [", Strategies(r.o), "]").c_str());
  std::fflush(stdout);
}

void JsonRow(JsonLines& rep, const Dataset& ds, const Case& c, double share, const Row& r) {
  rep.Line({{"record", std::string("filter")},
            {"name", r.system},
            {"dataset", ds.name},
            {"case", c.name},
            {"kind", c.kind},
            {"target_share", c.target},
            {"share", share},
            {"params", r.params},
            {"threads", int64_t{r.threads}},
            {"recall_at_10", r.o.recall},
            {"qps", r.o.qps},
            {"p50_us", r.o.p50_us},
            {"p99_us", r.o.p99_us},
            {"reads_per_query", r.o.reads},
            {"preview_us", r.o.preview_us},
            {"fullview_us", r.o.fullview_us},
            {"rerank_us", r.o.rerank_us},
            {"distance_evals", r.o.distance_evals},
            {"queries", static_cast<int64_t>(r.o.queries)},
            {"short_answers", static_cast<int64_t>(r.o.short_answers)},
            {"violations", static_cast<int64_t>(r.o.violations)},
            {"strategies", Strategies(r.o)}});
}

// zoomd's strategies: the planner, then each one forced.
const std::vector<std::pair<std::string, FilterStrategy>>& ZoomStrategies() {
  static const auto* const kStrategies = new std::vector<std::pair<std::string, FilterStrategy>>{
      {"zoomd_planner", FilterStrategy::kNone},
      {"zoomd_exact", FilterStrategy::kExact},
      {"zoomd_match_scan", FilterStrategy::kMatchScan},
      {"zoomd_filtered_preview", FilterStrategy::kFilteredPreview},
      {"zoomd_post_filter", FilterStrategy::kPostFilter}};
  return *kStrategies;
}

// The workload: Setup gets the engine, makes the attributes, the payload
// indexes, the cases and the baselines; Run measures each case (zoomd's
// strategies swept, then in interleaved rounds; the baselines swept); Report
// prints every zoomd strategy over the whole query mix beside the oracle.
class FilterWorkload : public Workload {
 public:
  absl::Status Setup() override;
  absl::Status Run(JsonLines& rep) override;
  absl::Status Report(JsonLines& rep) override;

 private:
  absl::Status IndexPayloads();
  absl::Status SelectCases();
  absl::Status RunOneCase(const Case& c, JsonLines& rep);
  // zoomd's search of query q of case c: the filter evaluated through the
  // payload indexes (in its time), then the engine with `forced` and `knobs`.
  QueryFn ZoomFn(const Case& c, FilterStrategy forced, const ZoomKnobs& knobs) const;
  // Every strategy at its own best knobs of a one-thread sweep (exact's
  // answer does not depend on them): the knobs, and how many were swept.
  absl::Status ChooseKnobs(const Case& c, const Truth& truth, std::vector<ZoomKnobs>* chosen,
                           std::vector<size_t>* swept) const;
  // The chosen configurations measured again in --filter_rounds
  // interleaved rounds on every --threads (the round's order rotated),
  // each row the round of median QPS: the machine's drift hits every
  // strategy alike, and the sweep's best-of-16 (a maximum of noisy runs)
  // is not what is compared.
  absl::Status Rounds(const Case& c, const Truth& truth, double share,
                      const std::vector<ZoomKnobs>& chosen, const std::vector<size_t>& swept,
                      JsonLines& rep);
  // The row's share of the mix; a forced strategy's row may be the case's
  // oracle pick at its thread count.
  void CountInMix(const std::string& name, FilterStrategy forced, const Row& row,
                  std::map<int, Outcome>* case_best);
  // The baselines: each filter's bitmap precomputed (outside their time).
  absl::Status Baselines(const Case& c, const Truth& truth, double share, JsonLines& rep) const;

  ZoomBuilt zb_;
  size_t n_ = 0, nq_ = 0;
  std::vector<int> threads_;
  std::vector<double> buckets_;
  double budget_ = 0;
  Space space_;
  Attributes attrs_;
  server::IdTracker ids_;
  server::PayloadIndex pindex_;
  std::vector<Case> cases_;
  std::vector<std::unique_ptr<FilteredBaseline>> baselines_;
  std::vector<ZoomKnobs> zoom_sweep_;
  // Per zoomd strategy and thread count: queries and seconds over the mix.
  std::map<std::pair<std::string, int>, std::pair<double, double>> mix_;
  std::map<std::pair<std::string, int>, double> mix_min_recall_;
  // The oracle: per case, the forced strategy that was fastest at recall@10
  // >= 0.95 (else the most accurate), chosen in hindsight; its seconds over
  // the mix bound what any per-query choice among them could reach.
  std::map<int, double> oracle_seconds_;
};

absl::Status FilterWorkload::Setup() {
  ZOOM_ASSIGN_OR_RETURN(zb_, GetZoomBuilt());
  const Dataset& ds = *zb_.ds;
  n_ = ds.base.rows;
  nq_ = std::min<size_t>(ds.queries.rows,
                         static_cast<size_t>(absl::GetFlag(FLAGS_filter_queries)));
  ZOOM_ASSIGN_OR_RETURN(threads_, ThreadsFlag());
  for (absl::string_view b : absl::StrSplit(absl::GetFlag(FLAGS_filter_buckets), ',')) {
    double v = 0;
    if (!absl::SimpleAtod(b, &v) || !(v > 0 && v <= 1)) {
      return absl::InvalidArgumentError(absl::StrCat("--filter_buckets: bad share '", b, "'"));
    }
    buckets_.push_back(v);
  }
  budget_ = absl::GetFlag(FLAGS_filter_budget_s);
  std::printf("filter: %s, %zu points, %zu queries per case, index %s, SIMD %s, load %.1f\n",
              ds.name.c_str(), n_, nq_, zb_.params.c_str(),
              index::KernelChoices(), LoadAverage1m());
  ZOOM_RETURN_IF_ERROR(IndexPayloads());
  ZOOM_RETURN_IF_ERROR(SelectCases());
  if (absl::GetFlag(FLAGS_filter_baselines)) {
    ZOOM_ASSIGN_OR_RETURN(BaselineOptions bo, BaselineOptionsFromFlags());
    if (bo.cache_dir.empty()) bo.cache_dir = absl::GetFlag(FLAGS_work_dir);
    ZOOM_ASSIGN_OR_RETURN(baselines_, BuildFilteredBaselines(ds, bo));
  }
  // zoomd's knobs are swept like the baselines': the planner's over
  // nprobe (ivf_hnsw_pq) or ef (hnsw_pq) x K' on one thread, then its best
  // on every --threads; each forced strategy the same way.
  zoom_sweep_ = ZoomSweep(ScansLists(*zb_.engine->index()));
  return absl::OkStatus();
}

// The attributes, and the payload indexes over every base row (all live),
// as a collection's.
absl::Status FilterWorkload::IndexPayloads() {
  Stopwatch sw;
  space_ = Prepare(*zb_.ds, nq_);
  attrs_ = MakeAttributes(space_, n_);
  ids_.Reserve(n_);
  pindex_.AddField("tag", server::FieldIndexType::kKeyword, true);
  pindex_.AddField("price", server::FieldIndexType::kInteger, true);
  pindex_.AddField("region", server::FieldIndexType::kInteger, true);
  for (size_t i = 0; i < n_; ++i) {
    ids_.Set(static_cast<InternalId>(i), i);
    server::PayloadFields f;
    f["tag"] = server::FieldValue::Of(absl::StrCat("t", attrs_.tag[i]));
    f["price"] = server::FieldValue::Of(attrs_.price[i]);
    f["region"] = server::FieldValue::Of(int64_t{attrs_.region[i]});
    pindex_.Update(static_cast<InternalId>(i), nullptr, &f);
  }
  ids_.Publish(n_);
  std::printf("attributes and payload indexes in %.1f s (%.1f MB of payload index)\n",
              sw.ElapsedSeconds(), pindex_.Bytes() / 1e6);
  return absl::OkStatus();
}

absl::Status FilterWorkload::SelectCases() {
  cases_ = MakeCases(space_, attrs_, n_, buckets_);
  const std::string only = absl::GetFlag(FLAGS_filter_cases);
  if (only.empty()) return absl::OkStatus();
  const std::vector<std::string> parts = absl::StrSplit(only, ',', absl::SkipEmpty());
  std::erase_if(cases_, [&](const Case& c) {
    return std::none_of(parts.begin(), parts.end(), [&](const std::string& p) {
      return absl::StrContains(c.name, p);
    });
  });
  if (cases_.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--filter_cases: no case matches '", only, "'"));
  }
  return absl::OkStatus();
}

QueryFn FilterWorkload::ZoomFn(const Case& c, FilterStrategy forced,
                               const ZoomKnobs& knobs) const {
  return [this, &c, forced, knobs](size_t q, int64_t* out, QueryStats* st) {
    thread_local server::MatchSet match;
    thread_local server::QueryResult r;
    const server::Filter f = c.filter(q);
    ZOOM_RETURN_IF_ERROR(pindex_.Evaluate(f, ids_, n_, &match));
    server::SearchParams p;
    p.k = kK;
    p.ef = knobs.ef;
    p.nprobe = knobs.nprobe;
    p.rerank_candidates = knobs.rerank;
    p.force_strategy = forced;
    server::QueryContext ctx;
    ctx.match = &match;
    ctx.live_points = n_;
    ZOOM_RETURN_IF_ERROR(zb_.engine->Search(
        absl::MakeConstSpan(zb_.ds->queries.row(q), zb_.ds->dim()), p, &r, ctx));
    *st = r.stats;
    for (size_t i = 0; i < kK; ++i) {
      out[i] = i < r.hits.size() ? static_cast<int64_t>(r.hits[i].id) : -1;
    }
    return absl::OkStatus();
  };
}

absl::Status FilterWorkload::ChooseKnobs(const Case& c, const Truth& truth,
                                         std::vector<ZoomKnobs>* chosen,
                                         std::vector<size_t>* swept) const {
  const auto& strategies = ZoomStrategies();
  chosen->assign(strategies.size(), zoom_sweep_[0]);
  swept->assign(strategies.size(), 1);
  for (size_t si = 0; si < strategies.size(); ++si) {
    const auto& [name, forced] = strategies[si];
    std::vector<Row> sweep_rows;
    const bool sweep = forced != FilterStrategy::kExact;
    for (const ZoomKnobs& knobs : zoom_sweep_) {
      ZOOM_ASSIGN_OR_RETURN(Outcome o, RunCase(space_, c, truth, nq_, 1, budget_,
                                               ZoomFn(c, forced, knobs)));
      sweep_rows.push_back({name, knobs.Label(), 1, o});
      if (!sweep) break;
    }
    const Row* best_zoom = Best(sweep_rows);
    for (const ZoomKnobs& k : zoom_sweep_) {
      if (k.Label() == best_zoom->params) (*chosen)[si] = k;
    }
    (*swept)[si] = sweep_rows.size();
  }
  return absl::OkStatus();
}

void FilterWorkload::CountInMix(const std::string& name, FilterStrategy forced, const Row& row,
                                std::map<int, Outcome>* case_best) {
  // Over the mix, each case counts its nq queries (a run the budget cut
  // short at its measured rate).
  const int t = row.threads;
  auto& m = mix_[{name, t}];
  m.first += nq_;
  m.second += nq_ / std::max(row.o.qps, 1e-9);
  auto [it, fresh] = mix_min_recall_.try_emplace({name, t}, row.o.recall);
  if (!fresh) it->second = std::min(it->second, row.o.recall);
  if (forced == FilterStrategy::kNone) return;
  auto [b, first] = case_best->try_emplace(t, row.o);
  const bool ok = row.o.recall >= 0.95, best_ok = b->second.recall >= 0.95;
  if (!first && ((ok && (!best_ok || row.o.qps > b->second.qps)) ||
                 (!ok && !best_ok && row.o.recall > b->second.recall))) {
    b->second = row.o;
  }
}

absl::Status FilterWorkload::Rounds(const Case& c, const Truth& truth, double share,
                                    const std::vector<ZoomKnobs>& chosen,
                                    const std::vector<size_t>& swept, JsonLines& rep) {
  const auto& strategies = ZoomStrategies();
  const int rounds = std::max(1, absl::GetFlag(FLAGS_filter_rounds));
  std::map<int, Outcome> case_best;  // threads -> the oracle's pick
  for (int t : threads_) {
    std::vector<std::vector<Outcome>> runs(strategies.size());
    for (int r = 0; r < rounds; ++r) {
      for (size_t j = 0; j < strategies.size(); ++j) {
        const size_t si = (j + static_cast<size_t>(r)) % strategies.size();
        ZOOM_ASSIGN_OR_RETURN(Outcome o,
                              RunCase(space_, c, truth, nq_, t, budget_ / rounds,
                                      ZoomFn(c, strategies[si].second, chosen[si])));
        runs[si].push_back(std::move(o));
      }
    }
    for (size_t si = 0; si < strategies.size(); ++si) {
      const auto& [name, forced] = strategies[si];
      std::vector<Outcome>& v = runs[si];
      std::sort(v.begin(), v.end(),
                [](const Outcome& x, const Outcome& y) { return x.qps < y.qps; });
      Row row{name, chosen[si].Label(), t, v[v.size() / 2]};
      const std::string of = swept[si] > 1 ? absl::StrCat(" (of ", swept[si], ")") : "";
      const std::string spread =
          rounds > 1 ? absl::StrCat(" [median of ", rounds, ": ", static_cast<int>(v.front().qps),
                                    "..", static_cast<int>(v.back().qps), "]")
                     : "";
      row.params = absl::StrCat(chosen[si].Label(), of, spread);
      PrintRow(row, nq_);
      JsonRow(rep, *zb_.ds, c, share, row);
      CountInMix(name, forced, row, &case_best);
    }
  }
  for (const auto& [t, o] : case_best) oracle_seconds_[t] += nq_ / std::max(o.qps, 1e-9);
  return absl::OkStatus();
}

absl::Status FilterWorkload::Baselines(const Case& c, const Truth& truth, double share,
                                       JsonLines& rep) const {
  std::vector<server::MatchSet> sets(c.per_query ? nq_ : 1);
  for (size_t q = 0; q < sets.size(); ++q) {
    ZOOM_RETURN_IF_ERROR(pindex_.Evaluate(c.filter(q), ids_, n_, &sets[q]));
  }
  for (const auto& b : baselines_) {
    const auto fn_for = [&](const FilterKnobs& knobs) -> QueryFn {
      return [&, knobs](size_t q, int64_t* out, QueryStats*) {
        const server::MatchSet& m = sets[c.per_query ? q : 0];
        return b->Search(q, kK, knobs, reinterpret_cast<const uint8_t*>(m.words().data()),
                         truth.matches[q], out);
      };
    };
    std::vector<Row> rows;
    for (const FilterKnobs& knobs : b->Sweep()) {
      ZOOM_ASSIGN_OR_RETURN(Outcome o, RunCase(space_, c, truth, nq_, 1, budget_, fn_for(knobs)));
      rows.push_back({b->name(), knobs.Label(), 1, o});
    }
    const Row* best = Best(rows);
    if (best == nullptr) continue;
    const std::string label = best->params;
    FilterKnobs knobs;
    for (const FilterKnobs& k : b->Sweep()) {
      if (k.Label() == label) knobs = k;
    }
    for (int t : threads_) {
      Row row = *best;
      if (t != 1) {
        ZOOM_ASSIGN_OR_RETURN(row.o, RunCase(space_, c, truth, nq_, t, budget_, fn_for(knobs)));
        row.threads = t;
      }
      row.params = absl::StrCat(label, " (best of ", rows.size(), ")");
      PrintRow(row, nq_);
      JsonRow(rep, *zb_.ds, c, share, row);
    }
  }
  return absl::OkStatus();
}

absl::Status FilterWorkload::RunOneCase(const Case& c, JsonLines& rep) {
  Stopwatch sw;
  const Truth truth = Oracle(space_, c, n_, nq_);
  double share = 0;
  for (uint64_t m : truth.matches) share += static_cast<double>(m) / n_;
  share /= nq_;
  std::printf("\n-- %s: %s, mean share %.4f%% (%llu..%llu matches), oracle %.1f s\n",
              c.kind.c_str(), c.name.c_str(), 100 * share,
              static_cast<unsigned long long>(*std::min_element(truth.matches.begin(), truth.matches.end())),
              static_cast<unsigned long long>(*std::max_element(truth.matches.begin(), truth.matches.end())),
              sw.ElapsedSeconds());
  std::vector<ZoomKnobs> chosen;
  std::vector<size_t> swept;
  ZOOM_RETURN_IF_ERROR(ChooseKnobs(c, truth, &chosen, &swept));
  ZOOM_RETURN_IF_ERROR(Rounds(c, truth, share, chosen, swept, rep));
  return Baselines(c, truth, share, rep);
}

absl::Status FilterWorkload::Run(JsonLines& rep) {
  for (const Case& c : cases_) ZOOM_RETURN_IF_ERROR(RunOneCase(c, rep));
  return absl::OkStatus();
}

absl::Status FilterWorkload::Report(JsonLines& rep) {
  std::printf("\n== the whole query mix (%zu cases x %zu queries): QPS = queries / time\n",
              cases_.size(), nq_);
  for (int t : threads_) {
    double planner = 0, best_single = 0;
    std::string best_name;
    for (const auto& [name, forced] : ZoomStrategies()) {
      const auto& [queries, seconds] = mix_[{name, t}];
      const double qps = queries / std::max(seconds, 1e-9);
      std::printf("  %-24s %dt  QPS %9.1f  min recall@10 over the cases %.4f\n", name.c_str(),
                  t, qps, mix_min_recall_[{name, t}]);
      if (forced == FilterStrategy::kNone) {
        planner = qps;
      } else if (qps > best_single) {
        best_single = qps;
        best_name = name;
      }
    }
    const double oracle = cases_.size() * nq_ / std::max(oracle_seconds_[t], 1e-9);
    std::printf("  oracle (each case's fastest strategy at recall@10 >= 0.95, in hindsight) "
                "%dt  QPS %9.1f\n", t, oracle);
    std::printf("  planner / best single strategy (%s) at %d thread%s: %.2fx; oracle / best "
                "single: %.2fx; planner / oracle: %.2fx\n",
                best_name.c_str(), t, t == 1 ? "" : "s", planner / std::max(best_single, 1e-9),
                oracle / std::max(best_single, 1e-9), planner / std::max(oracle, 1e-9));
    rep.Line({{"record", std::string("filter_mix")},
              {"dataset", zb_.ds->name},
              {"threads", int64_t{t}},
              {"planner_qps", planner},
              {"best_single_qps", best_single},
              {"best_single", best_name},
              {"planner_over_best_single", planner / std::max(best_single, 1e-9)},
              {"oracle_qps", oracle},
              {"oracle_over_best_single", oracle / std::max(best_single, 1e-9)},
              {"planner_over_oracle", planner / std::max(oracle, 1e-9)}});
  }
  return absl::OkStatus();
}

const RegisterWorkload kFilter("filter", RunWorkload<FilterWorkload>);

}  // namespace
}  // namespace zoom::bench::filter_bench
