// zoombench --benchmarks=fgd: the Fast Graph Decoder on a real language
// model, side by side with the full softmax (OpenBLAS sgemv / sgemm) in one
// run, on one thread each.
//
//   zoombench --benchmarks=fgd --model ../shared/data/lm-ptb --json fgd.json
//
// MODEL is laid out like ../shared/data/lm-ptb (see its README): W.f32,
// b.f32, vocab.txt, meta.json, and for the evaluation H.f32 (contexts),
// ref_ids.i32 and ref_logp.f32 (the exact top-100 and the true next word).
//
// Sections: (1) quality at k = 1, 5, 10 against the exact top-k (a returned
// id counts when its exact log-probability is within --fgd_tolerance of the
// k-th reference), true-word coverage, top-k-renormalised perplexity, the
// tail-mass estimate's error; (2) latency per context at batch 1, 8, 64, 256
// and the speedup over the full softmax, with and without the tail
// estimate; (2b) the tail-mass estimators side by side (none, the cluster
// summaries, 64/256/1024 sampled words): cost and error against the exact
// tail; (2c) the server's calibrated default ef (CalibrateDefaultEf on the
// first half of the contexts) measured on the held-out second half; (3) a
// sweep over M and ef with the
// Pareto front of precision@1 vs speedup; (4) scaling to larger vocabularies
// made from the real W (each new row: a random convex mix a·w_r1 + (1−a)·w_r2
// of two real rows, a ~ U(0,1), plus Gaussian noise of --fgd_noise times the
// mix's component standard deviation; its bias mixed the same way plus noise
// of the same relative size); (5) the in-process time per context that
// loadtest/grpc_overhead.py --workload fgd puts beside zoomload --workload
// fgd's TopK and StreamTopK through gRPC.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "absl/flags/flag.h"
#include "cblas.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/process.h"
#include "common/status_macros.h"
#include "common/timer.h"
#include "index/distance_kernels.h"
#include "index/fgd_index.h"
#include "bench/bench_dataset.h"
#include "bench/bench_util.h"
#include "server/engine/decoder_engine.h"

ABSL_FLAG(std::string, model, "", "fgd: model directory (default: <data root>/lm-ptb)");
ABSL_FLAG(int32_t, fgd_contexts, 5000, "fgd: contexts evaluated (at most the file's)");
ABSL_FLAG(double, fgd_tolerance, 1e-4, "fgd: log-probability tolerance of a near-tie");
ABSL_FLAG(std::string, fgd_m, "8,16,32", "fgd: HNSW M values of the sweep");
ABSL_FLAG(std::string, fgd_ef, "16,32,64,128,256", "fgd: ef values of the sweep");
ABSL_FLAG(std::string, fgd_tail_ef, "16,32,64", "fgd: ef values of the tail-estimator table");
ABSL_FLAG(int32_t, fgd_ef_main, 64, "fgd: ef of the quality and latency sections");
ABSL_FLAG(std::string, fgd_scaling, "10000,50000,200000,1000000",
          "fgd: vocabulary sizes of the scaling section (the first is the real model)");
ABSL_FLAG(int32_t, fgd_scaling_efc, 100, "fgd: ef_construction of the scaling graphs");
ABSL_FLAG(double, fgd_noise, 0.1, "fgd: relative noise of the synthesised rows");
ABSL_FLAG(std::string, fgd_sections, "quality,latency,tail,default,sweep,scaling,in_process",
          "fgd: the sections to run");
ABSL_FLAG(int32_t, fgd_scaling_contexts, 500, "fgd: contexts timed per scaling step");

namespace zoom::bench {
namespace {

namespace fs = std::filesystem;

template <typename T>
absl::StatusOr<std::vector<T>> ReadRaw(const std::string& path, size_t count) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::vector<T> v(count);
  in.read(reinterpret_cast<char*>(v.data()), count * sizeof(T));
  if (static_cast<size_t>(in.gcount()) != count * sizeof(T)) {
    return absl::DataLossError(absl::StrCat(path, " is shorter than ", count * sizeof(T), " bytes"));
  }
  return v;
}

struct Eval {
  server::SoftmaxModel model;
  size_t n = 0, ref_cols = 101;
  std::vector<float> H;         // n × d
  std::vector<int32_t> ref_ids;  // n × 101
  std::vector<float> ref_logp;   // n × 101
  std::vector<double> log_z;     // n
};

double ExactLogit(const server::SoftmaxModel& m, const float* h, uint32_t id) {
  double z = m.b[id];
  const float* w = m.W.data() + size_t{id} * m.dim;
  for (uint32_t j = 0; j < m.dim; ++j) z += double{w[j]} * h[j];
  return z;
}

struct Quality {
  double p_at[3] = {0, 0, 0};  // k = 1, 5, 10
  double coverage = 0, coverage_exact = 0;  // true word in top-10
  double ppl = 0, uncovered = 0;            // top-10 renormalised
  double tail_mae = 0;
};

// Quality of `results` (top-10 per context) against the references.
Quality Score(const Eval& ev, const std::vector<index::FgdResult>& results, double tol) {
  Quality q;
  const uint32_t ks[3] = {1, 5, 10};
  double nll = 0;
  size_t covered = 0;
  for (size_t i = 0; i < ev.n; ++i) {
    const float* h = ev.H.data() + i * ev.model.dim;
    const int32_t* ref = ev.ref_ids.data() + i * ev.ref_cols;
    const float* lp = ev.ref_logp.data() + i * ev.ref_cols;
    const index::FgdResult& r = results[i];
    for (int j = 0; j < 3; ++j) {
      const uint32_t k = ks[j];
      const double kth = lp[k];  // the k-th reference log-probability
      std::set<uint32_t> seen;
      size_t hits = 0;
      for (size_t t = 0; t < k && t < r.ids.size(); ++t) {
        if (!seen.insert(r.ids[t]).second) continue;
        const double logp = ExactLogit(ev.model, h, r.ids[t]) - ev.log_z[i];
        hits += logp >= kth - tol;
      }
      q.p_at[j] += static_cast<double>(hits) / k;
    }
    const uint32_t truth = static_cast<uint32_t>(ref[0]);
    const bool in_found = std::find(r.ids.begin(), r.ids.begin() + std::min<size_t>(10, r.ids.size()),
                                    truth) != r.ids.begin() + std::min<size_t>(10, r.ids.size());
    q.coverage += in_found;
    bool in_exact = false;
    for (int t = 1; t <= 10; ++t) in_exact |= static_cast<uint32_t>(ref[t]) == truth;
    q.coverage_exact += in_exact;
    if (in_found) {
      double m = -1e300;
      for (float z : r.logits) m = std::max<double>(m, z);
      double s = 0;
      for (float z : r.logits) s += std::exp(z - m);
      nll -= ExactLogit(ev.model, h, truth) - (m + std::log(s));
      ++covered;
    }
    // The exact tail outside the returned ids.
    double inside = 0;
    for (uint32_t id : r.ids) inside += std::exp(ExactLogit(ev.model, h, id) - ev.log_z[i]);
    q.tail_mae += std::abs(r.tail_mass - std::max(0.0, 1.0 - inside));
  }
  for (double& p : q.p_at) p /= ev.n;
  q.coverage /= ev.n;
  q.coverage_exact /= ev.n;
  q.ppl = covered ? std::exp(nll / covered) : NAN;
  q.uncovered = 1.0 - static_cast<double>(covered) / ev.n;
  q.tail_mae /= ev.n;
  return q;
}

// Mean µs per context of searching all contexts in batches of `batch`.
absl::StatusOr<double> TimePerContext(const index::FgdIndex& idx, const float* H, size_t n,
                                      size_t batch, const index::FgdSearchParams& p,
                                      std::vector<index::FgdResult>* all = nullptr) {
  const uint32_t d = idx.dim();
  std::vector<index::FgdResult> out;
  if (all != nullptr) all->clear();
  // Warm-up.
  ZOOM_RETURN_IF_ERROR(idx.Search(H, std::min(n, batch), p, &out));
  Stopwatch sw;
  for (size_t first = 0; first + batch <= n; first += batch) {
    ZOOM_RETURN_IF_ERROR(idx.Search(H + first * d, batch, p, &out));
    if (all != nullptr) all->insert(all->end(), out.begin(), out.end());
  }
  const size_t done = (n / batch) * batch;
  return sw.ElapsedMicros() / std::max<size_t>(1, done);
}

// The baseline: a full softmax over a contiguous W (V × d) with OpenBLAS,
// sgemv for one context, sgemm for a batch, then + b, the log-partition
// (max, Σ exp) and the top-k by partial sort: the work a decoder does
// without FGD. Mean µs per context over all contexts in batches of `batch`.
double FullSoftmaxUs(const std::vector<float>& W, const std::vector<float>& b, uint32_t V,
                     uint32_t d, const float* H, size_t n, size_t batch, size_t k) {
  std::vector<float> Z(batch * V);
  std::vector<uint32_t> order(V);
  double checksum = 0;
  auto run = [&](const float* h, size_t rows) {
    if (rows == 1) {
      cblas_sgemv(CblasRowMajor, CblasNoTrans, V, d, 1.0f, W.data(), d, h, 1, 0.0f, Z.data(), 1);
    } else {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, V, d, 1.0f, h, d, W.data(), d,
                  0.0f, Z.data(), V);
    }
    for (size_t r = 0; r < rows; ++r) {
      float* z = Z.data() + r * V;
      float m = -INFINITY;
      for (uint32_t i = 0; i < V; ++i) {
        z[i] += b[i];
        m = std::max(m, z[i]);
      }
      double sum = 0;
      for (uint32_t i = 0; i < V; ++i) sum += std::exp(z[i] - m);
      for (uint32_t i = 0; i < V; ++i) order[i] = i;
      std::partial_sort(order.begin(), order.begin() + k, order.end(),
                        [z](uint32_t a, uint32_t c) { return z[a] > z[c] || (z[a] == z[c] && a < c); });
      checksum += z[order[0]] - m - std::log(sum);
    }
  };
  run(H, std::min(n, batch));  // warm-up
  Stopwatch sw;
  size_t done = 0;
  for (size_t first = 0; first + batch <= n; first += batch, done += batch) run(H + first * d, batch);
  if (checksum == 12345.678) std::printf(" ");  // keep the work observable
  return sw.ElapsedMicros() / std::max<size_t>(1, done);
}

absl::StatusOr<Eval> LoadEval(const std::string& dir, size_t max_contexts) {
  Eval ev;
  ZOOM_ASSIGN_OR_RETURN(ev.model, server::ReadModelDirAt(dir));
  const uint32_t d = ev.model.dim;
  std::error_code ec;
  const uint64_t hbytes = fs::file_size(fs::path(dir) / "H.f32", ec);
  if (ec) return absl::NotFoundError(absl::StrCat(dir, "/H.f32 is missing (the contexts)"));
  ev.n = std::min<size_t>(hbytes / (4 * d), max_contexts);
  ZOOM_ASSIGN_OR_RETURN(ev.H, ReadRaw<float>((fs::path(dir) / "H.f32").string(), ev.n * d));
  ZOOM_ASSIGN_OR_RETURN(ev.ref_ids,
                        ReadRaw<int32_t>((fs::path(dir) / "ref_ids.i32").string(), ev.n * 101));
  ZOOM_ASSIGN_OR_RETURN(ev.ref_logp,
                        ReadRaw<float>((fs::path(dir) / "ref_logp.f32").string(), ev.n * 101));
  ev.log_z.resize(ev.n);
  for (size_t i = 0; i < ev.n; ++i) {
    const uint32_t top = static_cast<uint32_t>(ev.ref_ids[i * 101 + 1]);
    ev.log_z[i] = ExactLogit(ev.model, ev.H.data() + i * d, top) - ev.ref_logp[i * 101 + 1];
  }
  return ev;
}

// The workload: Setup loads the model and its contexts; Run builds the
// default graph, times FGD and the softmax on every context (the figures
// the sections compare against), then runs the sections --fgd_sections
// names; Report prints the load average.
class FgdWorkload : public Workload {
 public:
  absl::Status Setup() override;
  absl::Status Run(JsonLines& rep) override;
  absl::Status Report(JsonLines& rep) override;

 private:
  bool Want(const char* section) const { return absl::StrContains(sections_, section); }
  void Machine(JsonLines& rep) const;
  absl::Status BuildAndTime();
  void QualitySection(JsonLines& rep) const;
  absl::Status LatencySection(JsonLines& rep) const;
  absl::Status TailSection(JsonLines& rep) const;
  absl::Status DefaultSection(JsonLines& rep) const;
  absl::Status SweepSection(JsonLines& rep) const;
  absl::Status ScalingSection(JsonLines& rep) const;
  // One vocabulary size of the scaling section: the graph over `v` rows
  // (the real ones, then synthesised from `rng`), ef doubled until P@10
  // reaches 0.99.
  absl::Status ScaleTo(uint32_t v, size_t n_scale, std::mt19937_64& rng, Table& table,
                       JsonLines& rep) const;
  void InProcessSection(JsonLines& rep) const;

  std::string dir_, sections_;
  Eval ev_;
  double tol_ = 0;
  uint32_t V_ = 0, d_ = 0;
  index::FgdOptions opts_;
  std::unique_ptr<index::FgdIndex> idx_;
  index::FgdSearchParams fgd_;  // k 10, --fgd_ef_main, the default tail
  double fgd_us_ = 0, exact_us_ = 0;
  Quality qf_, qe_;  // FGD's and the exact mode's quality on every context
};

absl::Status FgdWorkload::Setup() {
  dir_ = absl::GetFlag(FLAGS_model);
  if (dir_.empty()) dir_ = DefaultDataRoot() + "/lm-ptb";
  ZOOM_ASSIGN_OR_RETURN(ev_, LoadEval(dir_, absl::GetFlag(FLAGS_fgd_contexts)));
  tol_ = absl::GetFlag(FLAGS_fgd_tolerance);
  V_ = ev_.model.vocab;
  d_ = ev_.model.dim;
  sections_ = absl::GetFlag(FLAGS_fgd_sections);
  double s = 0;
  for (size_t i = 0; i < ev_.n; ++i) s -= ev_.ref_logp[i * 101];
  std::printf("model %s: |V| = %u, d = %u, %zu contexts; full-softmax perplexity on them %.2f; "
              "tolerance %.0e in log-probability; one thread for everything\n",
              dir_.c_str(), V_, d_, ev_.n, std::exp(s / ev_.n), tol_);
  return absl::OkStatus();
}

void FgdWorkload::Machine(JsonLines& rep) const {
  // Which OpenBLAS kernel the baseline runs (Debian's build picks it per CPU
  // at load; OPENBLAS_CORETYPE in the environment forces one).
  const char* forced = std::getenv("OPENBLAS_CORETYPE");
  std::printf("OpenBLAS %s, core %s%s%s; zoomd kernels %s\n", openblas_get_config(),
              openblas_get_corename(),
              forced ? ", forced by OPENBLAS_CORETYPE=" : " (its own choice)",
              forced ? forced : "", index::KernelChoices());
  rep.Line({{"workload", std::string("fgd")}, {"section", std::string("machine")},
            {"openblas_core", std::string(openblas_get_corename())},
            {"openblas_config", std::string(openblas_get_config())},
            {"openblas_coretype_forced", std::string(forced ? forced : "")},
            {"kernels", std::string(index::KernelChoices())}});
}

// The default graph, and FGD, its exact mode and the full softmax timed on
// every context at batch 1.
absl::Status FgdWorkload::BuildAndTime() {
  opts_.build_threads = 2;
  Stopwatch sw;
  ZOOM_ASSIGN_OR_RETURN(idx_, index::FgdIndex::Build(ev_.model.W.data(), ev_.model.b.data(), V_,
                                                     d_, opts_));
  std::printf("graph M=%u ef_construction=%u built in %.1f s (2 threads), %.1f MiB graph, "
              "%.1f MiB resident\n",
              opts_.hnsw.M, opts_.hnsw.ef_construction, sw.ElapsedMicros() / 1e6,
              idx_->GraphBytes() / 1048576.0, idx_->ResidentBytes() / 1048576.0);
  fgd_.k = 10;
  fgd_.ef = absl::GetFlag(FLAGS_fgd_ef_main);
  index::FgdSearchParams exact = fgd_;
  exact.exact = true;
  std::vector<index::FgdResult> fgd_results, exact_results;
  ZOOM_ASSIGN_OR_RETURN(fgd_us_,
                        TimePerContext(*idx_, ev_.H.data(), ev_.n, 1, fgd_, &fgd_results));
  ZOOM_ASSIGN_OR_RETURN(double exact_mode_us,
                        TimePerContext(*idx_, ev_.H.data(), ev_.n, 1, exact, &exact_results));
  exact_us_ = FullSoftmaxUs(ev_.model.W, ev_.model.b, V_, d_, ev_.H.data(), ev_.n, 1, 10);
  std::printf("full softmax (contiguous W, sgemv): %.1f us per context; FgdIndex exact mode: "
              "%.1f us\n", exact_us_, exact_mode_us);
  qf_ = Score(ev_, fgd_results, tol_);
  qe_ = Score(ev_, exact_results, tol_);
  return absl::OkStatus();
}

// (1) quality with the default graph.
void FgdWorkload::QualitySection(JsonLines& rep) const {
  std::printf("\n(1) quality, k = 10, ef = %u\n", fgd_.ef);
  Table qt({"method", "P@1", "P@5", "P@10", "true in top10", "PPL top10", "not covered",
            "tail MAE"}, 14);
  for (const auto& [name, q] : {std::pair{"FGD", qf_}, std::pair{"full softmax", qe_}}) {
    qt.Row({name, Fmt(q.p_at[0], 4), Fmt(q.p_at[1], 4), Fmt(q.p_at[2], 4), Fmt(q.coverage, 4),
            Fmt(q.ppl, 2), Fmt(q.uncovered, 4), Fmt(q.tail_mae, 4)});
    rep.Line({{"workload", std::string("fgd")}, {"section", std::string("quality")},
              {"method", std::string(name)}, {"ef", static_cast<int64_t>(fgd_.ef)},
              {"p_at_1", q.p_at[0]}, {"p_at_5", q.p_at[1]}, {"p_at_10", q.p_at[2]},
              {"true_in_top10", q.coverage}, {"ppl_top10", q.ppl},
              {"not_covered", q.uncovered}, {"tail_mae", q.tail_mae}});
  }
  std::printf("(the exact top-10 holds the true word for %.4f of contexts; the tail estimate: "
              "the model's %u cluster summaries)\n",
              qf_.coverage_exact, idx_->tail_clusters());
}

// (2) latency per context by batch, with and without the tail estimate.
absl::Status FgdWorkload::LatencySection(JsonLines& rep) const {
  std::printf("\n(2) latency per context, k = 10, ef = %u (exact: sgemv at batch 1, sgemm above); "
              "FGD with the default tail estimate (clusters) and without one\n",
              fgd_.ef);
  Table lt({"batch", "FGD us", "no-tail us", "softmax us", "speedup", "no-tail speedup"});
  index::FgdSearchParams bare = fgd_;
  bare.tail = index::FgdTail::kNone;
  for (size_t batch : {1, 8, 64, 256}) {
    ZOOM_ASSIGN_OR_RETURN(double f, TimePerContext(*idx_, ev_.H.data(), ev_.n, batch, fgd_));
    ZOOM_ASSIGN_OR_RETURN(double f0, TimePerContext(*idx_, ev_.H.data(), ev_.n, batch, bare));
    const double e =
        FullSoftmaxUs(ev_.model.W, ev_.model.b, V_, d_, ev_.H.data(), ev_.n, batch, 10);
    lt.Row({std::to_string(batch), Fmt(f, 1), Fmt(f0, 1), Fmt(e, 1), Fmt(e / f, 2),
            Fmt(e / f0, 2)});
    rep.Line({{"workload", std::string("fgd")}, {"section", std::string("latency")},
              {"batch", static_cast<int64_t>(batch)}, {"fgd_us", f}, {"fgd_no_tail_us", f0},
              {"softmax_us", e}, {"speedup", e / f}, {"speedup_no_tail", e / f0}});
  }
  return absl::OkStatus();
}

// (2b) the tail-mass estimators side by side.
absl::Status FgdWorkload::TailSection(JsonLines& rep) const {
  ZOOM_ASSIGN_OR_RETURN(std::vector<int> tail_efs, ParseIntList(absl::GetFlag(FLAGS_fgd_tail_ef)));
  // The baseline timed again here; the ratios use the faster of the two
  // timings (the machine's noise counts against FGD, not for it).
  const double softmax_us = std::min(
      exact_us_, FullSoftmaxUs(ev_.model.W, ev_.model.b, V_, d_, ev_.H.data(), ev_.n, 1, 10));
  std::printf("\n(2b) tail-mass estimators, batch 1, k = 10, against the exact tail "
              "(full softmax %.1f us per context, the faster of two timings; the model has %u "
              "tail clusters)\n",
              softmax_us, idx_->tail_clusters());
  Table tt({"ef", "estimate", "us", "speedup", "tail MAE", "P@1", "P@5"});
  struct Est { const char* name; index::FgdTail tail; uint32_t samples; };
  for (int tail_ef : tail_efs) {
    for (const Est& est : {Est{"none", index::FgdTail::kNone, 0},
                           Est{"clusters", index::FgdTail::kClusters, 0},
                           Est{"sample 64", index::FgdTail::kSample, 64},
                           Est{"sample 256", index::FgdTail::kSample, 256},
                           Est{"sample 1024", index::FgdTail::kSample, 1024}}) {
      index::FgdSearchParams p = fgd_;
      p.ef = static_cast<uint32_t>(tail_ef);
      p.tail = est.tail;
      p.tail_samples = est.samples;
      std::vector<index::FgdResult> res;
      ZOOM_ASSIGN_OR_RETURN(double us, TimePerContext(*idx_, ev_.H.data(), ev_.n, 1, p, &res));
      const Quality q = Score(ev_, res, tol_);
      // "none" reports 0 for the tail: its error is the tail itself.
      tt.Row({std::to_string(tail_ef), est.name, Fmt(us, 1), Fmt(softmax_us / us, 2),
              Fmt(q.tail_mae, 4), Fmt(q.p_at[0], 4), Fmt(q.p_at[1], 4)});
      rep.Line({{"workload", std::string("fgd")}, {"section", std::string("tail")},
                {"estimate", std::string(est.name)}, {"ef", static_cast<int64_t>(tail_ef)},
                {"us", us}, {"softmax_us", softmax_us}, {"speedup", softmax_us / us},
                {"tail_mae", q.tail_mae},
                {"p_at_1", q.p_at[0]}, {"p_at_5", q.p_at[1]}});
    }
  }
  return absl::OkStatus();
}

// (2c) the calibrated default ef, on held-out contexts: what LoadModel does
// with the model directory's H.f32, here on its first half only; the second
// half is never seen by the calibration.
absl::Status FgdWorkload::DefaultSection(JsonLines& rep) const {
  const size_t half = ev_.n / 2;
  Stopwatch cal_sw;
  ZOOM_ASSIGN_OR_RETURN(server::FgdCalibration cal,
                        server::CalibrateDefaultEf(*idx_, ev_.H.data(), half));
  const double cal_s = cal_sw.ElapsedMicros() / 1e6;
  Eval held;
  held.model = ev_.model;  // copies W (10 MB at PTB): the bench's own
  held.n = ev_.n - half;
  held.H.assign(ev_.H.begin() + half * d_, ev_.H.end());
  held.ref_ids.assign(ev_.ref_ids.begin() + half * 101, ev_.ref_ids.end());
  held.ref_logp.assign(ev_.ref_logp.begin() + half * 101, ev_.ref_logp.end());
  held.log_z.assign(ev_.log_z.begin() + half, ev_.log_z.end());
  const double softmax_us = std::min(
      exact_us_, FullSoftmaxUs(ev_.model.W, ev_.model.b, V_, d_, held.H.data(), held.n, 1, 10));
  std::printf("\n(2c) the calibrated default ef: CalibrateDefaultEf on %u of the first %zu "
              "contexts picked ef %u (P@1 %.4f, P@5 %.4f there) in %.2f s; measured on the "
              "other %zu, batch 1, clusters tail (full softmax %.1f us, the faster of two "
              "timings)\n",
              cal.contexts, half, cal.ef, cal.p1, cal.p5, cal_s, held.n, softmax_us);
  Table dt({"k", "ef", "us", "speedup", "P@1", "P@5", "tail MAE"});
  for (uint32_t k : {1u, 5u, 10u}) {
    index::FgdSearchParams p = fgd_;
    p.k = k;
    p.ef = server::DefaultEfFor(cal.ef, k);
    p.tail = index::FgdTail::kClusters;
    std::vector<index::FgdResult> res;
    ZOOM_ASSIGN_OR_RETURN(double us, TimePerContext(*idx_, held.H.data(), held.n, 1, p, &res));
    const Quality q = Score(held, res, tol_);
    // Score's P@5 needs 5 ids: blank at k 1.
    dt.Row({std::to_string(k), std::to_string(p.ef), Fmt(us, 1), Fmt(softmax_us / us, 2),
            Fmt(q.p_at[0], 4), k >= 5 ? Fmt(q.p_at[1], 4) : std::string("-"),
            Fmt(q.tail_mae, 4)});
    rep.Line({{"workload", std::string("fgd")}, {"section", std::string("default")},
              {"k", static_cast<int64_t>(k)}, {"default_ef", static_cast<int64_t>(cal.ef)},
              {"ef", static_cast<int64_t>(p.ef)},
              {"calibration_contexts", static_cast<int64_t>(cal.contexts)},
              {"calibration_p1", cal.p1}, {"calibration_p5", cal.p5},
              {"calibration_s", cal_s}, {"held_out_contexts", static_cast<int64_t>(held.n)},
              {"us", us}, {"softmax_us", softmax_us}, {"speedup", softmax_us / us},
              {"p_at_1", q.p_at[0]}, {"p_at_5", k >= 5 ? q.p_at[1] : NAN},
              {"tail_mae", q.tail_mae}});
  }
  return absl::OkStatus();
}

// (3) sweep over M and ef, with the Pareto front of P@1 against time.
absl::Status FgdWorkload::SweepSection(JsonLines& rep) const {
  ZOOM_ASSIGN_OR_RETURN(std::vector<int> ms, ParseIntList(absl::GetFlag(FLAGS_fgd_m)));
  ZOOM_ASSIGN_OR_RETURN(std::vector<int> efs, ParseIntList(absl::GetFlag(FLAGS_fgd_ef)));
  std::printf("\n(3) sweep, batch 1, k = 10 (full softmax %.1f us per context)\n", exact_us_);
  Table st({"M", "ef", "P@1", "P@10", "us", "speedup", "pareto"});
  struct Point { int m, ef; double p1, p10, us; };
  std::vector<Point> points;
  for (int m : ms) {
    index::FgdOptions o = opts_;
    o.hnsw.M = m;
    ZOOM_ASSIGN_OR_RETURN(auto g, index::FgdIndex::Build(ev_.model.W.data(), ev_.model.b.data(),
                                                         V_, d_, o));
    for (int ef : efs) {
      index::FgdSearchParams p = fgd_;
      p.ef = ef;
      p.tail = index::FgdTail::kNone;
      std::vector<index::FgdResult> res;
      ZOOM_ASSIGN_OR_RETURN(double us, TimePerContext(*g, ev_.H.data(), ev_.n, 1, p, &res));
      const Quality q = Score(ev_, res, tol_);
      points.push_back({m, ef, q.p_at[0], q.p_at[2], us});
    }
  }
  for (const Point& p : points) {
    bool dominated = false;
    for (const Point& o : points) {
      dominated |= o.p1 >= p.p1 && o.us <= p.us && (o.p1 > p.p1 || o.us < p.us);
    }
    st.Row({std::to_string(p.m), std::to_string(p.ef), Fmt(p.p1, 4), Fmt(p.p10, 4),
            Fmt(p.us, 1), Fmt(exact_us_ / p.us, 2), dominated ? "" : "*"});
    rep.Line({{"workload", std::string("fgd")}, {"section", std::string("sweep")},
              {"M", static_cast<int64_t>(p.m)}, {"ef", static_cast<int64_t>(p.ef)},
              {"p_at_1", p.p1}, {"p_at_10", p.p10}, {"us", p.us},
              {"speedup", exact_us_ / p.us}, {"pareto", !dominated}});
  }
  return absl::OkStatus();
}

// A vocabulary of `v` rows: the real ones, then each new row a random convex
// mix of two real rows plus Gaussian noise of `rel` times the mix's
// component standard deviation, its bias mixed the same way (new words
// between real ones, not near-copies of one).
void Synthesise(const server::SoftmaxModel& m, uint32_t v, float rel, std::mt19937_64& rng,
                std::vector<float>* W, std::vector<float>* b) {
  const uint32_t V = m.vocab, d = m.dim;
  W->assign(size_t{v} * d, 0.0f);
  b->assign(v, 0.0f);
  std::normal_distribution<float> noise;
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  for (uint32_t r = 0; r < v; ++r) {
    float* out = W->data() + size_t{r} * d;
    if (r < V) {
      std::copy_n(m.W.data() + size_t{r} * d, d, out);
      (*b)[r] = m.b[r];
      continue;
    }
    const uint32_t r1 = static_cast<uint32_t>(rng() % V), r2 = static_cast<uint32_t>(rng() % V);
    const float a = unit(rng);
    const float* w1 = m.W.data() + size_t{r1} * d;
    const float* w2 = m.W.data() + size_t{r2} * d;
    double mean = 0, sq = 0;
    for (uint32_t j = 0; j < d; ++j) {
      out[j] = a * w1[j] + (1 - a) * w2[j];
      mean += out[j];
    }
    mean /= d;
    for (uint32_t j = 0; j < d; ++j) sq += (out[j] - mean) * (out[j] - mean);
    const float sd = static_cast<float>(std::sqrt(sq / d)) * rel;
    for (uint32_t j = 0; j < d; ++j) out[j] += sd * noise(rng);
    const float bm = a * m.b[r1] + (1 - a) * m.b[r2];
    (*b)[r] = bm + rel * std::abs(bm) * noise(rng);
  }
}

absl::Status FgdWorkload::ScaleTo(uint32_t v, size_t n_scale, std::mt19937_64& rng,
                                  Table& table, JsonLines& rep) const {
  std::vector<float> W, b;
  Synthesise(ev_.model, v, static_cast<float>(absl::GetFlag(FLAGS_fgd_noise)), rng, &W, &b);
  index::FgdOptions o = opts_;
  o.hnsw.ef_construction = absl::GetFlag(FLAGS_fgd_scaling_efc);
  Stopwatch bw;
  ZOOM_ASSIGN_OR_RETURN(auto g, index::FgdIndex::Build(W.data(), b.data(), v, d_, o));
  const double build_s = bw.ElapsedMicros() / 1e6;
  index::FgdSearchParams pe = fgd_;
  pe.tail = index::FgdTail::kNone;
  pe.exact = true;
  std::vector<index::FgdResult> re;
  ZOOM_RETURN_IF_ERROR(TimePerContext(*g, ev_.H.data(), n_scale, 1, pe, &re).status());
  const double e = FullSoftmaxUs(W, b, v, d_, ev_.H.data(), n_scale, 1, 10);
  // ef doubles from 64 until precision@10 reaches 0.99 (or 1024).
  for (uint32_t ef = 64; ef <= 1024; ef *= 2) {
    index::FgdSearchParams p = fgd_;
    p.tail = index::FgdTail::kNone;
    p.ef = ef;
    std::vector<index::FgdResult> rf;
    ZOOM_ASSIGN_OR_RETURN(double f, TimePerContext(*g, ev_.H.data(), n_scale, 1, p, &rf));
    double prec = 0, evals = 0;
    for (size_t i = 0; i < rf.size(); ++i) {
      const float kth = re[i].logits.back();
      size_t hits = 0;
      for (float z : rf[i].logits) hits += z >= kth - 1e-4f;
      prec += static_cast<double>(hits) / 10;
      evals += rf[i].distance_evals;
    }
    prec /= rf.size();
    evals /= rf.size();
    table.Row({std::to_string(v), std::to_string(ef), Fmt(build_s, 1), Fmt(f, 1), Fmt(e, 1),
               Fmt(e / f, 1), Fmt(prec, 4), Fmt(evals, 0)});
    rep.Line({{"workload", std::string("fgd")}, {"section", std::string("scaling")},
              {"vocab", static_cast<int64_t>(v)}, {"ef", static_cast<int64_t>(ef)},
              {"build_s", build_s}, {"fgd_us", f}, {"softmax_us", e}, {"speedup", e / f},
              {"p_at_10_vs_exact", prec}, {"distance_evals", evals}});
    if (prec >= 0.99) break;
  }
  return absl::OkStatus();
}

// (4) scaling to larger vocabularies made from the real W.
absl::Status FgdWorkload::ScalingSection(JsonLines& rep) const {
  ZOOM_ASSIGN_OR_RETURN(std::vector<int> sizes, ParseIntList(absl::GetFlag(FLAGS_fgd_scaling)));
  std::printf("\n(4) scaling, batch 1, k = 10, M = 16, ef_construction = %d; ef doubles "
              "until P@10 >= 0.99 (rows beyond the real %u: a random mix of two real rows + %.2f "
              "relative Gaussian noise)\n",
              absl::GetFlag(FLAGS_fgd_scaling_efc), V_, absl::GetFlag(FLAGS_fgd_noise));
  Table sc({"|V|", "ef", "build s", "FGD us", "softmax us", "speedup", "P@10 exact", "evals"});
  std::mt19937_64 rng(42);  // one stream over the sizes, in order
  const size_t n_scale =
      std::min<size_t>(ev_.n, static_cast<size_t>(absl::GetFlag(FLAGS_fgd_scaling_contexts)));
  for (int size : sizes) {
    ZOOM_RETURN_IF_ERROR(ScaleTo(static_cast<uint32_t>(size), n_scale, rng, sc, rep));
  }
  return absl::OkStatus();
}

// (5) the in-process time per context: zoomload --workload fgd measures
// TopK and StreamTopK through gRPC; loadtest/grpc_overhead.py --workload fgd
// puts this time beside them.
void FgdWorkload::InProcessSection(JsonLines& rep) const {
  std::printf("\n(5) in process, batch 1, k = 10, ef = %u, %zu contexts: %.1f us per context "
              "(FgdIndex::Search, the clusters tail)\n",
              fgd_.ef, ev_.n, fgd_us_);
  rep.Line({{"workload", std::string("fgd")}, {"section", std::string("in_process")},
            {"ef", static_cast<int64_t>(fgd_.ef)},
            {"contexts", static_cast<int64_t>(ev_.n)}, {"in_process_us", fgd_us_}});
}

absl::Status FgdWorkload::Run(JsonLines& rep) {
  openblas_set_num_threads(1);  // same threads for both: one (BLAS included)
  Machine(rep);
  ZOOM_RETURN_IF_ERROR(BuildAndTime());
  if (Want("quality")) QualitySection(rep);
  if (Want("latency")) ZOOM_RETURN_IF_ERROR(LatencySection(rep));
  if (Want("tail")) ZOOM_RETURN_IF_ERROR(TailSection(rep));
  if (Want("default")) ZOOM_RETURN_IF_ERROR(DefaultSection(rep));
  if (Want("sweep")) ZOOM_RETURN_IF_ERROR(SweepSection(rep));
  if (Want("scaling")) ZOOM_RETURN_IF_ERROR(ScalingSection(rep));
  if (Want("in_process")) InProcessSection(rep);
  return absl::OkStatus();
}

absl::Status FgdWorkload::Report(JsonLines& /*rep*/) {
  std::printf("load average (1 min) after the run: %.2f\n", LoadAverage1m());
  return absl::OkStatus();
}

const RegisterWorkload kRegisterFgd("fgd", RunWorkload<FgdWorkload>);

}  // namespace
}  // namespace zoom::bench
