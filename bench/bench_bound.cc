// zoombench --benchmarks=bound: how far the preview's distance is from the
// exact one, and how many of the K' fullview reads a re-rank that stops
// early would need (issue 19, section 1). An analysis, not a timing: for
// each query the preview's K' candidates are scored exactly from the base
// in RAM, and re-rank policies are replayed on those numbers (reads,
// rounds of reads, recall@k against the ground truth).
//
// A staged policy reads the first `first` candidates (preview order), then
// in rounds every unread candidate whose preview distance minus a margin
// is below the current k-th exact distance, until none is; the margin
// comes from the errors seen (preview - exact).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "bench/bench_dataset.h"
#include "bench/bench_util.h"
#include "bench/bench_zoom.h"
#include "common/metric.h"
#include "common/recall.h"
#include "common/status_macros.h"
#include "index/distance_kernels.h"
#include "index/vector_index.h"

ABSL_FLAG(std::string, bound_rerank, "20,50", "bound: K' values");
ABSL_FLAG(int32_t, bound_nprobe, 64, "bound: ivf_hnsw_pq nprobe");
ABSL_FLAG(int32_t, bound_ef, 128, "bound: preview ef");

namespace zoom::bench {
namespace {

struct QueryData {
  std::vector<float> est;    // preview distance, preview order
  std::vector<float> exact;  // exact distance of the same candidates
  std::vector<int64_t> ids;
};

// The index's distance convention (vector_index.h): squared L2 (for cosine
// on unit vectors), or minus the inner product.
double IndexDistance(const Dataset& ds, size_t q, size_t id) {
  const double s = TrueScore(ds, q, id);
  switch (ds.metric) {
    case Metric::kL2:
      return s;
    case Metric::kCosine:
      return 2.0 - 2.0 * s;
    default:
      return -s;
  }
}

double Quantile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i =
      std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5));
  return v[i];
}

struct PolicyResult {
  double reads = 0, rounds = 0, recall = 0;
};

// margin(q, i): the margin for candidate i of query q given the errors of
// the candidates read so far.
template <typename Margin>
PolicyResult Replay(const Dataset& ds, const std::vector<QueryData>& data,
                    size_t k, size_t first, const Margin& margin) {
  PolicyResult r;
  for (size_t q = 0; q < data.size(); ++q) {
    const QueryData& x = data[q];
    const size_t n = x.est.size();
    std::vector<char> read(n, 0);
    std::vector<double> errs;
    size_t nread = 0;
    int rounds = 0;
    auto kth = [&] {
      std::vector<float> got;
      for (size_t i = 0; i < n; ++i)
        if (read[i]) got.push_back(x.exact[i]);
      if (got.size() < k) return std::numeric_limits<float>::infinity();
      std::nth_element(got.begin(), got.begin() + (k - 1), got.end());
      return got[k - 1];
    };
    std::vector<size_t> batch;
    for (size_t i = 0; i < std::min(first, n); ++i) batch.push_back(i);
    while (!batch.empty()) {
      ++rounds;
      for (size_t i : batch) {
        read[i] = 1;
        ++nread;
        errs.push_back(static_cast<double>(x.est[i]) - x.exact[i]);
      }
      batch.clear();
      const float tau = kth();
      for (size_t i = 0; i < n; ++i) {
        if (!read[i] && x.est[i] - margin(errs, x.est[i]) < tau)
          batch.push_back(i);
      }
    }
    // The k best read, by exact distance.
    std::vector<std::pair<float, int64_t>> best;
    for (size_t i = 0; i < n; ++i)
      if (read[i]) best.push_back({x.exact[i], x.ids[i]});
    std::sort(best.begin(), best.end());
    std::vector<int64_t> out(k, -1);
    for (size_t i = 0; i < k && i < best.size(); ++i) out[i] = best[i].second;
    r.reads += nread;
    r.rounds += rounds;
    r.recall += RecallAtK(ds, q, out.data(), k, k);
  }
  const double nq = std::max<size_t>(1, data.size());
  r.reads /= nq;
  r.rounds /= nq;
  r.recall /= nq;
  return r;
}

// The workload: Setup gets the engine (built or loaded) and the K' values;
// Run, for each K', scores every query's K' candidates exactly, prints the
// preview's error, then replays the policies on those numbers.
class BoundWorkload : public Workload {
 public:
  absl::Status Setup() override;
  absl::Status Run(JsonLines& rep) override;
  absl::Status Report(JsonLines& /*rep*/) override { return absl::OkStatus(); }

 private:
  // The preview's K' candidates of every query with their exact distances;
  // every error (preview - exact) and relative error into the vectors.
  absl::StatusOr<std::vector<QueryData>> Collect(size_t kp, std::vector<double>* all_err,
                                                 std::vector<double>* all_rel) const;
  void Policies(size_t kp, const std::vector<QueryData>& data, double mean, double sd,
                JsonLines& rep) const;
  absl::Status Band(size_t kp, const std::vector<QueryData>& data, JsonLines& rep) const;

  ZoomBuilt zb_;
  size_t k_ = 10;
  std::vector<int> kps_;
};

absl::Status BoundWorkload::Setup() {
  ZOOM_ASSIGN_OR_RETURN(zb_, GetZoomBuilt());
  k_ = static_cast<size_t>(absl::GetFlag(FLAGS_k));
  ZOOM_ASSIGN_OR_RETURN(kps_, ParseIntList(absl::GetFlag(FLAGS_bound_rerank)));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<QueryData>> BoundWorkload::Collect(
    size_t kp, std::vector<double>* all_err, std::vector<double>* all_rel) const {
  const Dataset& ds = *zb_.ds;
  const index::VectorIndex& idx = *zb_.engine->index();
  const size_t d = ds.dim();
  std::vector<QueryData> data(ds.queries.rows);
  for (size_t q = 0; q < ds.queries.rows; ++q) {
    std::vector<float> query(ds.queries.row(q), ds.queries.row(q) + d);
    if (ds.metric == Metric::kCosine) NormalizeL2(query.data(), d);
    index::IndexSearchParams ip;
    ip.ef = absl::GetFlag(FLAGS_bound_ef);
    ip.nprobe = absl::GetFlag(FLAGS_bound_nprobe);
    std::vector<index::Neighbor> cand;
    QueryStats st;
    ZOOM_RETURN_IF_ERROR(idx.Search(query.data(), kp, ip, &cand, &st));
    QueryData& x = data[q];
    for (const index::Neighbor& nb : cand) {
      x.est.push_back(nb.distance);
      x.exact.push_back(static_cast<float>(IndexDistance(ds, q, nb.id)));
      x.ids.push_back(nb.id);
      const double e = static_cast<double>(x.est.back()) - x.exact.back();
      all_err->push_back(e);
      all_rel->push_back(e / std::max(1e-9, std::abs(static_cast<double>(x.exact.back()))));
    }
  }
  return data;
}

void BoundWorkload::Policies(size_t kp, const std::vector<QueryData>& data, double mean,
                             double sd, JsonLines& rep) const {
  const Dataset& ds = *zb_.ds;
  const size_t k = k_;
  std::printf("%-34s %8s %8s %8s\n", "policy", "reads", "rounds", "recall");
  auto row = [&](const std::string& name, const PolicyResult& r) {
    std::printf("%-34s %8.2f %8.2f %8.4f\n", name.c_str(), r.reads, r.rounds,
                r.recall);
    rep.Line({{"name", std::string("bound")},
              {"policy", name},
              {"params", zb_.params},
              {"dataset", ds.name},
              {"rerank", static_cast<int64_t>(kp)},
              {"reads_per_query", r.reads},
              {"rounds", r.rounds},
              {"recall_at_10", r.recall}});
  };
  row("all K'",
      Replay(ds, data, k, kp,
             [](const std::vector<double>&, float) { return 0.0; }));
  for (size_t first : {k / 2, k, k + k / 2}) {
    for (double c : {0.0, 1.0, 2.0, 3.0, 4.0}) {
      // Global: c standard deviations of the error (over every query),
      // plus its mean.
      row(absl::StrCat("global first=", first, " c=", c),
          Replay(ds, data, k, first, [&](const std::vector<double>&, float) {
            return mean + c * sd;
          }));
    }
    for (double c : {1.0, 1.5, 2.0, 3.0}) {
      // Per query: c times the largest |error| of the candidates read.
      row(absl::StrCat("query-max first=", first, " c=", c),
          Replay(ds, data, k, first,
                 [&](const std::vector<double>& errs, float) {
                   double m = 0;
                   for (double e : errs) m = std::max(m, std::abs(e));
                   return c * m;
                 }));
      // Per query: mean + c sd of the errors read.
      row(absl::StrCat("query-sd first=", first, " c=", c),
          Replay(ds, data, k, first,
                 [&](const std::vector<double>& errs, float) {
                   double mu = 0, s2 = 0;
                   for (double e : errs) mu += e;
                   mu /= std::max<size_t>(1, errs.size());
                   for (double e : errs) s2 += (e - mu) * (e - mu);
                   return mu + c * std::sqrt(
                                       s2 / std::max<size_t>(1, errs.size()));
                 }));
    }
  }
}

// Issue 48, section 1, measured before it is built: the band. A PQ code's
// preview distance is exact for the point's reconstruction x^ (the index
// distance is ||q - x^||^2: L2, and cosine on unit vectors); with
// r = ||x - x^||, the code's own error for that point, the true distance
// ||q - x|| lies in [sqrt(est) - r, sqrt(est) + r] whatever the query (the
// triangle inequality). Of the K' candidates, those whose upper bound is
// below the (k+1)-th smallest lower bound are certainly in the top k, those
// whose lower bound is above the k-th smallest upper bound certainly out;
// only the rest (the band) needs a read, and the top k of the K' comes out
// as reading all K' gives it. r is taken here exactly (the code's distance
// to the point's own vector, SearchIds) and as one stored byte (rounded up,
// on a scale to the largest r), and beside it the probabilistic interval
// (below). rabitq's distance is an estimate, not ||q - x^||: its interval is
// another matter (not measured here).
absl::Status BoundWorkload::Band(size_t kp, const std::vector<QueryData>& data,
                                 JsonLines& rep) const {
  const Dataset& ds = *zb_.ds;
  const index::VectorIndex& idx = *zb_.engine->index();
  if (ds.metric == Metric::kInnerProduct || idx.spec().pq.code != index::CodeKind::kPq) {
    std::printf("band: measured for PQ codes under L2 and cosine only\n");
    return absl::OkStatus();
  }
  const size_t d = ds.dim(), k = k_;
  std::vector<uint64_t> words((idx.size() + 63) / 64, 0);
  std::vector<std::vector<float>> r(data.size());
  double r_max = 0;
  std::vector<float> x(d);
  for (size_t q = 0; q < data.size(); ++q) {
    for (int64_t id : data[q].ids) {
      std::copy(ds.base.row(id), ds.base.row(id) + d, x.begin());
      if (ds.metric == Metric::kCosine) NormalizeL2(x.data(), d);
      words[id >> 6] |= uint64_t{1} << (id & 63);
      index::IdBitsView one;
      one.words = words.data();
      one.size = idx.size();
      std::vector<index::Neighbor> got;
      ZOOM_RETURN_IF_ERROR(idx.SearchIds(x.data(), 1, one, index::IndexSearchParams{}, &got,
                                         nullptr));
      words[id >> 6] = 0;
      if (got.size() != 1 || got[0].id != id) {
        return absl::InternalError(absl::StrCat("band: no code for point ", id));
      }
      r[q].push_back(std::sqrt(std::max(0.0f, got[0].distance)));
      r_max = std::max<double>(r_max, r[q].back());
    }
  }
  // The interval models, in the index's (squared) distance. Triangle: the
  // hard bound above, r exact or as one stored byte. Probabilistic: with
  // e = x - x^ and v = q - x^, ||q - x||^2 = ||v||^2 - 2<v, e> + r^2 and,
  // the error's direction about random in d dimensions, |<v, e>| is about
  // ||v|| r / sqrt(d): the estimate est + r^2 within 2 c ||v|| r / sqrt(d)
  // (c the confidence; RaBitQ's bound has this shape).
  struct Model {
    std::string name;
    int kind;  // 0 triangle, 1 probabilistic
    bool byte;
    double c;
  };
  const std::vector<Model> models = {{"band triangle (r exact)", 0, false, 0},
                                     {"band triangle (r one byte)", 0, true, 0},
                                     {"band prob c=1", 1, false, 1},
                                     {"band prob c=2", 1, false, 2},
                                     {"band prob c=3", 1, false, 3},
                                     {"band prob c=3 (r one byte)", 1, true, 3}};
  const double sqrt_d = std::sqrt(static_cast<double>(d));
  for (const Model& model : models) {
    std::vector<double> band, in_top, recall;
    int64_t wrong = 0;
    for (size_t q = 0; q < data.size(); ++q) {
      const QueryData& c = data[q];
      const size_t n = c.est.size();
      std::vector<double> lo(n), hi(n);
      for (size_t i = 0; i < n; ++i) {
        double ri = r[q][i];
        if (model.byte) ri = std::ceil(ri / r_max * 255.0) * r_max / 255.0;
        const double est = std::max(0.0f, c.est[i]);
        const double v = std::sqrt(est);
        const double slack = 1e-5 * (est + ri * ri) + 1e-6;  // the float ADC's rounding
        if (model.kind == 0) {
          const double l = std::max(0.0, v - ri);
          lo[i] = l * l - slack;
          hi[i] = (v + ri) * (v + ri) + slack;
        } else {
          const double half = 2.0 * model.c * v * ri / sqrt_d;
          lo[i] = est + ri * ri - half - slack;
          hi[i] = est + ri * ri + half + slack;
        }
      }
      std::vector<double> slo = lo, shi = hi;
      std::sort(slo.begin(), slo.end());
      std::sort(shi.begin(), shi.end());
      const double lo_k1 = n > k ? slo[k] : std::numeric_limits<double>::infinity();
      const double hi_k = n >= k ? shi[k - 1] : std::numeric_limits<double>::infinity();
      // The exact top k of the K' (what reading all K' returns): a
      // certain-in outside it or a certain-out inside it is a bound that
      // did not hold.
      std::vector<size_t> order(n);
      for (size_t i = 0; i < n; ++i) order[i] = i;
      std::sort(order.begin(), order.end(),
                [&](size_t a, size_t b) { return c.exact[a] < c.exact[b]; });
      std::vector<char> top(n, 0);
      for (size_t j = 0; j < std::min(k, n); ++j) top[order[j]] = 1;
      // The answer: the certain-in (unread), then the band's best by exact
      // distance (read).
      std::vector<int64_t> out;
      size_t nin = 0, nout = 0;
      for (size_t i = 0; i < n; ++i) {
        const bool in = hi[i] < lo_k1, outside = lo[i] > hi_k;
        if (in && out.size() < k) out.push_back(c.ids[i]);
        nin += in;
        nout += outside;
        if ((in && !top[i]) || (outside && top[i])) ++wrong;
      }
      for (size_t j = 0; j < n && out.size() < k; ++j) {
        const size_t i = order[j];
        if (!(hi[i] < lo_k1) && !(lo[i] > hi_k)) out.push_back(c.ids[i]);
      }
      out.resize(k, -1);
      band.push_back(static_cast<double>(n - nin - nout));
      in_top.push_back(static_cast<double>(nin));
      recall.push_back(RecallAtK(ds, q, out.data(), k, k));
    }
    double mb = 0, mi = 0, mr = 0;
    for (size_t q = 0; q < band.size(); ++q) {
      mb += band[q];
      mi += in_top[q];
      mr += recall[q];
    }
    const double nq = std::max<size_t>(1, band.size());
    std::printf("%-30s reads mean %.2f p50 %.0f p99 %.0f max %.0f of K'=%zu; certain-in %.2f; "
                "recall@%zu %.4f; bound violations %lld\n",
                model.name.c_str(), mb / nq, Quantile(band, 0.5), Quantile(band, 0.99),
                Quantile(band, 1.0), kp, mi / nq, k, mr / nq, static_cast<long long>(wrong));
    rep.Line({{"name", std::string("bound")},
              {"policy", model.name},
              {"params", zb_.params},
              {"dataset", ds.name},
              {"rerank", static_cast<int64_t>(kp)},
              {"reads_per_query", mb / nq},
              {"reads_p99", Quantile(band, 0.99)},
              {"reads_max", Quantile(band, 1.0)},
              {"certain_in", mi / nq},
              {"r_max", r_max},
              {"bound_violations", static_cast<int64_t>(wrong)},
              {"recall_at_10", mr / nq}});
  }
  return absl::OkStatus();
}

absl::Status BoundWorkload::Run(JsonLines& rep) {
  const Dataset& ds = *zb_.ds;
  for (int kp_int : kps_) {
    const size_t kp = static_cast<size_t>(kp_int);
    std::vector<double> all_err, all_rel;
    ZOOM_ASSIGN_OR_RETURN(const std::vector<QueryData> data, Collect(kp, &all_err, &all_rel));
    double mean = 0, sq = 0;
    for (double e : all_err) mean += e;
    mean /= std::max<size_t>(1, all_err.size());
    for (double e : all_err) sq += (e - mean) * (e - mean);
    const double sd = std::sqrt(sq / std::max<size_t>(1, all_err.size()));
    std::vector<double> abs_err;
    for (double e : all_err) abs_err.push_back(std::abs(e - mean));
    std::printf("\n== bound, %s, K'=%zu, nprobe=%d ef=%d, %zu queries\n",
                zb_.params.c_str(), kp, absl::GetFlag(FLAGS_bound_nprobe),
                absl::GetFlag(FLAGS_bound_ef),
                static_cast<size_t>(ds.queries.rows));
    std::printf(
        "error preview - exact: mean %.5f sd %.5f; quantiles 1%% %.5f 50%% "
        "%.5f 99%% "
        "%.5f; |e - mean| 99%% %.5f 99.9%% %.5f; relative sd-ish 99%% %.4f\n",
        mean, sd, Quantile(all_err, 0.01), Quantile(all_err, 0.5),
        Quantile(all_err, 0.99), Quantile(abs_err, 0.99),
        Quantile(abs_err, 0.999), Quantile(all_rel, 0.99));
    Policies(kp, data, mean, sd, rep);
    ZOOM_RETURN_IF_ERROR(Band(kp, data, rep));
  }
  return absl::OkStatus();
}

const RegisterWorkload kBound("bound", RunWorkload<BoundWorkload>);

}  // namespace
}  // namespace zoom::bench
