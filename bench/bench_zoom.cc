// zoombench workloads for zoomd's own engine (in-process, no gRPC):
//
//   build   builds the preview index and the vector store from --dataset,
//           reports build time, peak RSS and the preview's resident bytes;
//           the index and store are cached under --work_dir for the others.
//   search  runs the queries at --ef/--nprobe/--rerank (first of each list)
//           at each --threads: recall@1/10/100 (tie-aware), QPS,
//           p50/p99/p99.9, reads and bytes per query, memory.
//   sweep   the grid --ef x --nprobe x --rerank (plus preview-only rows),
//           the Pareto front of recall@10 vs QPS, and the disk's ceiling
//           (fio QD128 IOPS on the store file / reads per query).
//
// Full vectors are read with O_DIRECT (VectorStore's default), so the page
// cache does not answer the fullview.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <atomic>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/process.h"
#include "common/recall.h"
#include "common/status_macros.h"
#include "common/timer.h"
#include "index/distance_kernels.h"
#include "index/vector_index.h"
#include "bench/bench_dataset.h"
#include "bench/bench_session.h"
#include "bench/bench_zoom.h"
#include "bench/bench_util.h"
#include "server/engine/search_engine.h"
#include "storage/vector_store.h"

ABSL_FLAG(std::string, work_dir, "/var/tmp/zoombench",
          "Where the vector store and index files are kept between workloads");
ABSL_FLAG(std::string, index_kind, "ivf_hnsw_pq", "hnsw_pq | ivf_hnsw_pq");
ABSL_FLAG(double, filter_two_hop_share, 0.3,
          "hnsw_pq's filtered preview walks two hops below this share (0: never; the "
          "engine's index::FilterTuning)");
ABSL_FLAG(int32_t, pq_m, 0, "PQ sub-quantisers (code bytes); 0 = dim / 2 for float, dim / 8 for uint8");
ABSL_FLAG(int32_t, pq_nbits, 8,
          "Bits per PQ sub-quantiser: 8, or 4 (ivf_hnsw_pq's fast scan; pq_m 0 then means "
          "dim for float, dim / 4 for uint8: the same code bytes as 8-bit's default)");
ABSL_FLAG(bool, opq, false, "Learn an OPQ rotation before PQ");
ABSL_FLAG(std::string, quantizer, "pq",
          "pq | rabitq (ivf_hnsw_pq, dim <= 1024: pq_m and pq_nbits are then dim and 4); sweep "
          "takes a list (pq,rabitq: each code's index swept in turn, in one run, its rows "
          "named zoomd / zoomd_rabitq)");
ABSL_FLAG(int32_t, hnsw_m, 16, "HNSW M (graph over vectors or centroids)");
ABSL_FLAG(bool, compact_links, false,
          "hnsw_pq: keep the graph's level-0 links bit-packed");
ABSL_FLAG(int32_t, ef_construction, 200, "HNSW ef_construction");
ABSL_FLAG(int32_t, nlist, 0, "ivf_hnsw_pq clusters; 0 = automatic");
ABSL_FLAG(int32_t, kmeans_points, 0,
          "ivf_hnsw_pq k-means training sample; 0 = the index's default");
ABSL_FLAG(std::string, ef, "", "Preview ef values (default: a grid per kind)");
ABSL_FLAG(std::string, nprobe, "", "ivf_hnsw_pq nprobe values (default: a grid)");
ABSL_FLAG(std::string, rerank, "", "rerank_candidates (K') values (default: 20,50,100,200)");
ABSL_FLAG(std::string, rerank_stop_sd, "0",
          "sweep: SearchParams::rerank_stop_sd values (0 = read all K'; e.g. 0,2)");
ABSL_FLAG(std::string, cache_mib, "0,4,16,64",
          "cache: DRAM cache sizes (MiB) of hot full vectors to compare");
ABSL_FLAG(double, cache_zipf, 1.0, "cache: Zipf exponent of the query stream");
ABSL_FLAG(int64_t, cache_stream, 20000, "cache: queries in the timed stream");
ABSL_FLAG(bool, rebuild, false, "Rebuild the cached index and store");
ABSL_FLAG(bool, sweep_fio, true, "Measure the store file's fio QD128 ceiling in sweep");
ABSL_FLAG(int32_t, links_rounds, 7,
          "links: interleaved timing rounds per layout");

namespace zoom::bench {
namespace {

struct Built {
  std::string key;
  Dataset ds;
  std::unique_ptr<server::SearchEngine> engine;
  double build_s = 0;
  uint64_t peak_rss = 0;
  std::string store_path;
  std::string index_path;
};

std::unique_ptr<Built>& Cache() {
  static auto* b = new std::unique_ptr<Built>();
  return *b;
}

absl::StatusOr<index::IndexSpec> SpecFromFlags(const Dataset& ds) {
  index::IndexSpec spec;
  ZOOM_ASSIGN_OR_RETURN(spec.kind, index::ParseIndexKind(absl::GetFlag(FLAGS_index_kind)));
  spec.metric = ds.metric;
  spec.dim = static_cast<uint32_t>(ds.dim());
  // The first of a list (sweep sets the flag to each in turn).
  const std::vector<std::string> codes =
      absl::StrSplit(absl::GetFlag(FLAGS_quantizer), ',');
  ZOOM_ASSIGN_OR_RETURN(spec.pq.code, index::ParseCodeKind(codes.front()));
  int m = absl::GetFlag(FLAGS_pq_m);
  int nbits = absl::GetFlag(FLAGS_pq_nbits);
  if (spec.pq.code == index::CodeKind::kRabitq) {
    m = static_cast<int>(spec.dim);
    nbits = 4;
  } else if (m <= 0) {
    m = std::max<int>(1, ds.is_uint8 ? spec.dim / 8 : spec.dim / 2);
    if (nbits == 4) m = std::min<int>(2 * m, 256);
  }
  spec.pq.m = static_cast<uint32_t>(m);
  spec.pq.nbits = static_cast<uint32_t>(nbits);
  spec.pq.opq = absl::GetFlag(FLAGS_opq);
  spec.hnsw.M = static_cast<uint32_t>(absl::GetFlag(FLAGS_hnsw_m));
  spec.hnsw.ef_construction = static_cast<uint32_t>(absl::GetFlag(FLAGS_ef_construction));
  spec.hnsw.compact_links = absl::GetFlag(FLAGS_compact_links);
  spec.nlist = static_cast<uint32_t>(absl::GetFlag(FLAGS_nlist));
  if (absl::GetFlag(FLAGS_kmeans_points) > 0) {
    spec.max_kmeans_points = static_cast<uint32_t>(absl::GetFlag(FLAGS_kmeans_points));
  }
  spec.build_threads = 2;
  ZOOM_RETURN_IF_ERROR(spec.Validate());
  return spec;
}

// "m=50" style PQ label suffix: "" for 8-bit codes, "x4" for 4-bit.
std::string NbitsSuffix(const index::IndexSpec& s) {
  if (s.pq.code == index::CodeKind::kRabitq) return "rq4";
  return s.pq.nbits == 8 ? std::string() : absl::StrCat("x", s.pq.nbits);
}

std::string SpecKey(const Dataset& ds, const index::IndexSpec& s) {
  return absl::StrCat(ds.name, "-", MetricName(ds.metric), "-",
                      index::IndexKindName(s.kind), "-m", s.pq.m,
                      NbitsSuffix(s), s.pq.opq ? "opq" : "", "-M", s.hnsw.M,
                      s.hnsw.compact_links ? "c" : "", "-efc",
                      s.hnsw.ef_construction, "-nl", s.nlist, "-km", s.max_kmeans_points);
}

// The store of `ds` at `path`: opened when it holds the data set (unless
// --rebuild), else written (full vectors, normalised for cosine).
absl::StatusOr<std::unique_ptr<storage::VectorStore>> OpenOrWriteStore(const Dataset& ds,
                                                                       const std::string& path) {
  if (!absl::GetFlag(FLAGS_rebuild) && std::filesystem::exists(path)) {
    auto s = storage::VectorStore::Open(path);
    if (s.ok() && (*s)->count() == ds.base.rows && (*s)->dim() == ds.dim()) {
      return std::move(s).value();
    }
  }
  Stopwatch sw;
  std::filesystem::remove(path);
  storage::VectorStoreOptions opt;
  opt.sync_on_append = false;
  ZOOM_ASSIGN_OR_RETURN(
      auto store, storage::VectorStore::Create(path, static_cast<uint32_t>(ds.dim()),
                                               ds.is_uint8 ? storage::DType::kUint8
                                                           : storage::DType::kFloat32,
                                               opt));
  const size_t d = ds.dim();
  for (size_t first = 0; first < ds.base.rows; first += 8192) {
    const size_t n = std::min<size_t>(8192, ds.base.rows - first);
    if (ds.is_uint8) {
      // The base was widened from bytes: narrowing it back is exact.
      const float* rows = ds.base.row(first);
      std::vector<uint8_t> x(rows, rows + n * d);
      ZOOM_RETURN_IF_ERROR(store->Append(x.data(), n));
    } else {
      std::vector<float> x(ds.base.row(first), ds.base.row(first) + n * d);
      if (ds.metric == Metric::kCosine) {
        for (size_t i = 0; i < n; ++i) NormalizeL2(x.data() + i * d, d);
      }
      ZOOM_RETURN_IF_ERROR(store->Append(x.data(), n));
    }
  }
  ZOOM_RETURN_IF_ERROR(store->Sync());
  std::printf("vector store %s written in %.1f s (%.1f MB)\n", path.c_str(),
              sw.ElapsedSeconds(), store->file_bytes() / 1e6);
  return store;
}

// The index of `b` (its key and index_path set): loaded when the file holds
// it (unless --rebuild), else built (timed: b->build_s, b->peak_rss) and
// saved.
absl::StatusOr<std::unique_ptr<index::VectorIndex>> LoadOrBuildIndex(
    Built* b, const index::IndexSpec& spec, bool report_build) {
  const Dataset& ds = b->ds;
  if (!absl::GetFlag(FLAGS_rebuild) && std::filesystem::exists(b->index_path)) {
    auto loaded = index::LoadIndex(b->index_path);
    if (loaded.ok() && (*loaded)->size() == ds.base.rows) {
      if (report_build) {
        std::printf("index %s loaded from %s (use --rebuild to time a build)\n", b->key.c_str(),
                    b->index_path.c_str());
      }
      return std::move(loaded).value();
    }
  }
  std::printf("building %s over %zu vectors (SIMD: %s) ...\n", b->key.c_str(),
              static_cast<size_t>(ds.base.rows),
              index::KernelChoices());
  std::fflush(stdout);
  Stopwatch sw;
  ZOOM_ASSIGN_OR_RETURN(auto idx, index::BuildIndex(spec, ds.base.data.data(), ds.base.rows));
  b->build_s = sw.ElapsedSeconds();
  b->peak_rss = PeakRssBytes();
  ZOOM_RETURN_IF_ERROR(idx->Save(b->index_path));
  std::printf("  built in %.1f s; peak RSS %.1f MB; preview resident %.2f MB "
              "(%.1f bytes/vector)\n",
              b->build_s, b->peak_rss / 1e6, idx->ResidentBytes() / 1e6,
              double(idx->ResidentBytes()) / ds.base.rows);
  return idx;
}

// Builds (or loads from --work_dir) the store and index of folder `dir`
// under `metric`.
absl::StatusOr<Built*> GetBuiltFor(const std::string& dir, Metric metric, bool report_build,
                                   JsonLines* rep) {
  const int64_t maxq = absl::GetFlag(FLAGS_max_queries);
  if (Cache() && Cache()->ds.dir == dir && Cache()->ds.metric == metric) {
    ZOOM_ASSIGN_OR_RETURN(auto spec, SpecFromFlags(Cache()->ds));
    if (Cache()->key == SpecKey(Cache()->ds, spec)) return Cache().get();
  }
  auto b = std::make_unique<Built>();
  ZOOM_ASSIGN_OR_RETURN(b->ds, LoadDataset(dir, metric, maxq > 0 ? maxq : 0));
  const Dataset& ds = b->ds;
  ZOOM_ASSIGN_OR_RETURN(auto spec, SpecFromFlags(ds));
  b->key = SpecKey(ds, spec);
  const std::string work = absl::GetFlag(FLAGS_work_dir);
  std::filesystem::create_directories(work);
  b->store_path = absl::StrCat(work, "/", ds.name, "-", MetricName(ds.metric), ".zvec");
  b->index_path = absl::StrCat(work, "/", b->key, ".zidx");
  ZOOM_ASSIGN_OR_RETURN(auto store, OpenOrWriteStore(ds, b->store_path));
  ZOOM_ASSIGN_OR_RETURN(auto idx, LoadOrBuildIndex(b.get(), spec, report_build));
  if (report_build && rep != nullptr) {
    rep->Line({{"name", std::string("zoomd_build")},
               {"dataset", ds.name},
               {"params", b->key},
               {"build_s", b->build_s},
               {"peak_rss_bytes", static_cast<int64_t>(b->peak_rss)},
               {"resident_bytes", static_cast<int64_t>(idx->ResidentBytes())},
               {"n_vectors", static_cast<int64_t>(ds.base.rows)}});
  }
  server::EngineOptions options;
  options.filter.two_hop_share = absl::GetFlag(FLAGS_filter_two_hop_share);
  b->engine =
      std::make_unique<server::SearchEngine>(metric, std::move(store), std::move(idx), options);
  Cache() = std::move(b);
  return Cache().get();
}

// The same for --dataset.
absl::StatusOr<Built*> GetBuilt(bool report_build, JsonLines* rep) {
  const std::string dir = DatasetDirFlag();
  ZOOM_ASSIGN_OR_RETURN(Metric metric, MetricFlag(dir));
  return GetBuiltFor(dir, metric, report_build, rep);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return Percentile(v, 50);
}

absl::StatusOr<std::vector<int>> ListFlag(const std::string& value, std::vector<int> dflt) {
  if (value.empty()) return dflt;
  return ParseIntList(value);
}

absl::StatusOr<ConfigResult> RunConfig(Built& b, const server::SearchParams& p, int threads,
                                       size_t k) {
  const Dataset& ds = b.ds;
  const server::SearchEngine& engine = *b.engine;
  SearchFn fn = [&](size_t q, size_t kk, int64_t* out, QueryStats* stats) -> absl::Status {
    thread_local server::QueryResult r;
    server::SearchParams pp = p;
    pp.k = static_cast<uint32_t>(kk);
    ZOOM_RETURN_IF_ERROR(engine.Search(absl::MakeConstSpan(ds.queries.row(q), ds.dim()), pp, &r));
    if (stats != nullptr) stats->Merge(r.stats);
    for (size_t i = 0; i < kk; ++i) {
      out[i] = i < r.hits.size() ? static_cast<int64_t>(r.hits[i].id) : -1;
    }
    return absl::OkStatus();
  };
  ZOOM_ASSIGN_OR_RETURN(RunResult run, RunQueries(ds, k, threads, fn));
  ConfigResult r;
  r.name = p.preview_only ? "zoomd_preview_only" : "zoomd";
  if (engine.index()->spec().pq.code == index::CodeKind::kRabitq) r.name += "_rabitq";
  r.dataset = ds.name;
  const bool ivf = ScansLists(*engine.index());
  r.params = absl::StrCat(
      index::IndexKindName(engine.index()->spec().kind),
      ",m=", engine.index()->spec().pq.m, NbitsSuffix(engine.index()->spec()),
      ",ef=", p.ef, ivf ? absl::StrCat(",nprobe=", p.nprobe) : std::string(),
      p.preview_only ? std::string(",preview_only")
                     : absl::StrCat(",rerank=", p.rerank_candidates),
      p.preview_only || p.rerank_stop_sd == 0 ? std::string()
                                              : absl::StrCat(",stop_sd=", p.rerank_stop_sd));
  r.threads = threads;
  r.k = k;
  r.run = run;
  r.resident_bytes = engine.index()->ResidentBytes();
  r.n_vectors = ds.base.rows;
  r.rss_bytes = CurrentRssBytes();
  return r;
}

// Where each configuration's time goes: per-stage p50/p99 (preview in RAM,
// fullview reads, exact re-rank) beside the end-to-end p99.
void PrintStages(const std::vector<ConfigResult>& results) {
  std::printf("\nper-stage latency, us (p50 / p99):\n");
  for (const ConfigResult& r : results) {
    const RunResult& x = r.run;
    std::printf("  %-55s threads=%d preview %.0f / %.0f  fullview %.0f / %.0f  "
                "rerank %.0f / %.0f  total %.0f / %.0f\n",
                r.params.c_str(), r.threads, x.preview_p50_us, x.preview_p99_us,
                x.fullview_p50_us, x.fullview_p99_us, x.rerank_p50_us, x.rerank_p99_us,
                x.p50_us, x.p99_us);
  }
}

double FioCeilingIops(const std::string& path) {
  if (!absl::GetFlag(FLAGS_sweep_fio) || ::access("/usr/bin/fio", X_OK) != 0) return -1;
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return -1;
  const std::string cmd = absl::StrCat(
      "fio --name=ceiling --filename=", path, " --size=", st.st_size,
      " --rw=randread --bs=4k --direct=1 --time_based --runtime=5 --ioengine=io_uring"
      " --iodepth=128 --readonly --output-format=terse --terse-version=3 2>/dev/null");
  const absl::StatusOr<std::string> out = RunCommand(cmd);
  if (!out.ok()) return -1;
  // Terse v3: field 8 (1-based) is read IOPS.
  std::vector<std::string> f;
  size_t start = 0;
  for (size_t i = 0; i <= out->size(); ++i) {
    if (i == out->size() || (*out)[i] == ';') {
      f.push_back(out->substr(start, i - start));
      start = i + 1;
    }
  }
  double iops = -1;
  if (f.size() > 8 && absl::SimpleAtod(f[7], &iops)) return iops;
  return -1;
}

// build: the index built (or loaded) and reported; nothing else.
class BuildWorkload : public Workload {
 public:
  absl::Status Setup() override { return absl::OkStatus(); }
  absl::Status Run(JsonLines& rep) override {
    return GetBuilt(/*report_build=*/true, &rep).status();
  }
  absl::Status Report(JsonLines& /*rep*/) override { return absl::OkStatus(); }
};

// search (and recall): one configuration, the first of --ef, --nprobe and
// --rerank, at each --threads; then the per-stage latency.
class SearchWorkload : public Workload {
 public:
  absl::Status Setup() override {
    ZOOM_ASSIGN_OR_RETURN(b_, GetBuilt(false, nullptr));
    ZOOM_ASSIGN_OR_RETURN(threads_, ThreadsFlag());
    ZOOM_ASSIGN_OR_RETURN(auto efs, ListFlag(absl::GetFlag(FLAGS_ef), {64}));
    ZOOM_ASSIGN_OR_RETURN(auto nprobes, ListFlag(absl::GetFlag(FLAGS_nprobe), {16}));
    ZOOM_ASSIGN_OR_RETURN(auto reranks, ListFlag(absl::GetFlag(FLAGS_rerank), {100}));
    p_.ef = efs[0];
    p_.nprobe = nprobes[0];
    p_.rerank_candidates = reranks[0];
    return absl::OkStatus();
  }
  absl::Status Run(JsonLines& rep) override {
    Table table = MakeResultTable();
    for (int t : threads_) {
      ZOOM_ASSIGN_OR_RETURN(ConfigResult r,
                            RunConfig(*b_, p_, t, static_cast<size_t>(absl::GetFlag(FLAGS_k))));
      bench::Report(rep, table, r);
      mine_.push_back(r);
      SessionResults().push_back(r);
    }
    return absl::OkStatus();
  }
  absl::Status Report(JsonLines& /*rep*/) override {
    PrintStages(mine_);
    return absl::OkStatus();
  }

 private:
  Built* b_ = nullptr;
  std::vector<int> threads_;
  server::SearchParams p_;
  std::vector<ConfigResult> mine_;
};

// sweep, one code: the grid --ef x --nprobe x --rerank (x --rerank_stop_sd)
// with a preview-only row per (ef, nprobe), at each --threads; then the
// Pareto front, its per-stage latency and the disk's ceiling.
class SweepWorkload : public Workload {
 public:
  absl::Status Setup() override;
  absl::Status Run(JsonLines& rep) override;
  absl::Status Report(JsonLines& rep) override;

 private:
  // The rows of one (threads, ef, nprobe): preview only, then each K' and
  // stop rule.
  absl::Status Point(int t, int ef, int np, Table& table, JsonLines& rep);

  Built* b_ = nullptr;
  bool ivf_ = false;
  size_t k_ = 10;
  std::vector<int> threads_, efs_, nprobes_, reranks_;
  std::vector<double> stop_sds_;
  double ceiling_iops_ = -1;
  std::vector<ConfigResult> mine_;
};

absl::Status SweepWorkload::Setup() {
  ZOOM_ASSIGN_OR_RETURN(b_, GetBuilt(false, nullptr));
  ZOOM_ASSIGN_OR_RETURN(threads_, ThreadsFlag());
  ivf_ = ScansLists(*b_->engine->index());
  ZOOM_ASSIGN_OR_RETURN(efs_, ListFlag(absl::GetFlag(FLAGS_ef),
                                       ivf_ ? std::vector<int>{64}
                                            : std::vector<int>{32, 64, 128, 256}));
  ZOOM_ASSIGN_OR_RETURN(nprobes_, ListFlag(absl::GetFlag(FLAGS_nprobe),
                                           ivf_ ? std::vector<int>{8, 16, 32, 64, 128}
                                                : std::vector<int>{1}));
  ZOOM_ASSIGN_OR_RETURN(reranks_, ListFlag(absl::GetFlag(FLAGS_rerank), {20, 50, 100, 200}));
  for (absl::string_view v : absl::StrSplit(absl::GetFlag(FLAGS_rerank_stop_sd), ',')) {
    double x = 0;
    if (!absl::SimpleAtod(v, &x) || !(x >= 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--rerank_stop_sd: '", v, "' is not a number >= 0"));
    }
    stop_sds_.push_back(x);
  }
  k_ = static_cast<size_t>(absl::GetFlag(FLAGS_k));
  ceiling_iops_ = FioCeilingIops(b_->store_path);
  if (ceiling_iops_ > 0) {
    std::printf("fio QD128 random 4 KiB O_DIRECT reads on the store file: %.0f IOPS\n",
                ceiling_iops_);
  }
  return absl::OkStatus();
}

absl::Status SweepWorkload::Point(int t, int ef, int np, Table& table, JsonLines& rep) {
  server::SearchParams p;
  p.ef = static_cast<uint32_t>(std::max(ef, ivf_ ? 2 * np : ef));
  p.nprobe = static_cast<uint32_t>(np);
  p.preview_only = true;
  ZOOM_ASSIGN_OR_RETURN(ConfigResult pr, RunConfig(*b_, p, t, k_));
  bench::Report(rep, table, pr);
  mine_.push_back(pr);
  p.preview_only = false;
  for (int rr : reranks_) {
    for (double sd : stop_sds_) {
      p.rerank_candidates = static_cast<uint32_t>(rr);
      p.rerank_stop_sd = sd;
      ZOOM_ASSIGN_OR_RETURN(ConfigResult r, RunConfig(*b_, p, t, k_));
      bench::Report(rep, table, r);
      mine_.push_back(r);
    }
  }
  return absl::OkStatus();
}

absl::Status SweepWorkload::Run(JsonLines& rep) {
  Table table = MakeResultTable();
  for (int t : threads_) {
    for (int ef : efs_) {
      for (int np : nprobes_) ZOOM_RETURN_IF_ERROR(Point(t, ef, np, table, rep));
    }
  }
  return absl::OkStatus();
}

absl::Status SweepWorkload::Report(JsonLines& rep) {
  std::printf("\nPareto front (recall@10 up, QPS up), zoomd:\n");
  Table front = MakeResultTable();
  for (const ConfigResult& r : ParetoFront(mine_)) bench::Report(rep, front, r);
  PrintStages(ParetoFront(mine_));
  if (ceiling_iops_ > 0) {
    std::printf("\ndisk ceiling per configuration (fio QD128 IOPS / reads per query):\n");
    for (const ConfigResult& r : ParetoFront(mine_)) {
      if (r.run.reads_per_query <= 0) continue;
      const double ceiling = ceiling_iops_ / r.run.reads_per_query;
      std::printf("  %-55s threads=%d recall@10=%.3f qps=%.0f ceiling=%.0f (%.0f%%)\n",
                  r.params.c_str(), r.threads, r.run.recall_at_10, r.run.qps, ceiling,
                  100.0 * r.run.qps / ceiling);
      rep.Line({{"name", std::string("zoomd_disk_ceiling")},
                {"params", r.params},
                {"threads", int64_t{r.threads}},
                {"fio_qd128_iops", ceiling_iops_},
                {"reads_per_query", r.run.reads_per_query},
                {"ceiling_qps", ceiling},
                {"qps", r.run.qps}});
    }
  }
  for (auto& r : mine_) SessionResults().push_back(r);
  return absl::OkStatus();
}

// --quantizer pq,rabitq: each code's index swept in turn (one run, the same
// grid), the flag restored after.
absl::Status RunSweep(JsonLines& rep) {
  const std::string all = absl::GetFlag(FLAGS_quantizer);
  const std::vector<std::string> codes = absl::StrSplit(all, ',');
  absl::Status st;
  for (const std::string& code : codes) {
    absl::SetFlag(&FLAGS_quantizer, code);
    if (codes.size() > 1) std::printf("-- sweep, quantizer %s\n", code.c_str());
    st = RunWorkload<SweepWorkload>(rep);
    if (!st.ok()) break;
  }
  absl::SetFlag(&FLAGS_quantizer, all);
  return st;
}

// links: what hnsw_pq's compact link layout costs the preview, on one graph.
// The --index_kind hnsw_pq index file (built if missing) is loaded twice,
// level 0 unpacked and packed (LoadIndexOptions; the file holds the same
// rows), and every query's preview search (K' = --rerank's first value) is
// timed on each in interleaved rounds (ABAB..., then BABA...), on the first
// --threads value; medians of the rounds. The packed index must return the
// same candidates (a link list's order can break distance ties differently:
// the overlap is printed).
class LinksWorkload : public Workload {
 public:
  absl::Status Setup() override;
  absl::Status Run(JsonLines& rep) override;
  absl::Status Report(JsonLines& /*rep*/) override { return absl::OkStatus(); }

 private:
  // Every query's preview on layout `which` from t_ threads: the answers
  // into got[which], the time per query appended to us[which].
  absl::Status TimeLayout(int which, const index::IndexSearchParams& p,
                          std::vector<std::vector<index::Neighbor>> got[2],
                          std::vector<double> us[2]) const;

  Built* b_ = nullptr;
  std::vector<int> efs_;
  int t_ = 1, rounds_ = 1;
  size_t kprime_ = 20;
  std::unique_ptr<index::VectorIndex> layouts_[2];
};

absl::Status LinksWorkload::Setup() {
  ZOOM_ASSIGN_OR_RETURN(b_, GetBuilt(false, nullptr));
  if (ScansLists(*b_->engine->index())) {  // a graph over every point: hnsw_pq
    return absl::InvalidArgumentError(
        "links measures hnsw_pq: pass --index_kind hnsw_pq");
  }
  ZOOM_ASSIGN_OR_RETURN(auto threads, ThreadsFlag());
  ZOOM_ASSIGN_OR_RETURN(efs_, ListFlag(absl::GetFlag(FLAGS_ef), {64, 128, 256}));
  ZOOM_ASSIGN_OR_RETURN(auto reranks, ListFlag(absl::GetFlag(FLAGS_rerank), {20}));
  t_ = threads.front();
  kprime_ = static_cast<size_t>(reranks.front());
  rounds_ = std::max(1, absl::GetFlag(FLAGS_links_rounds));
  for (int packed = 0; packed < 2; ++packed) {
    index::LoadIndexOptions opt;
    opt.compact_links = packed == 1;
    ZOOM_ASSIGN_OR_RETURN(layouts_[packed], index::LoadIndex(b_->index_path, opt));
  }
  const Dataset& ds = b_->ds;
  std::printf(
      "hnsw_pq preview, %zu queries, K' %zu, %d thread(s), %d rounds; resident "
      "%.1f MiB unpacked (%.1f B/vector), %.1f MiB packed (%.1f B/vector)\n",
      static_cast<size_t>(ds.queries.rows), kprime_, t_, rounds_,
      layouts_[0]->ResidentBytes() / 1048576.0,
      double(layouts_[0]->ResidentBytes()) / ds.base.rows,
      layouts_[1]->ResidentBytes() / 1048576.0,
      double(layouts_[1]->ResidentBytes()) / ds.base.rows);
  std::printf("%8s %16s %16s %10s %10s\n", "ef", "unpacked_us/q", "packed_us/q",
              "ratio", "overlap");
  return absl::OkStatus();
}

absl::Status LinksWorkload::TimeLayout(int which, const index::IndexSearchParams& p,
                                       std::vector<std::vector<index::Neighbor>> got[2],
                                       std::vector<double> us[2]) const {
  const Dataset& ds = b_->ds;
  const size_t nq = ds.queries.rows;
  const index::VectorIndex& idx = *layouts_[which];
  absl::Status failed;
  std::mutex failed_mu;
  Stopwatch sw;
  std::vector<std::thread> pool;
  for (int w = 0; w < t_; ++w) {
    pool.emplace_back([&, w] {
      for (size_t q = static_cast<size_t>(w); q < nq; q += static_cast<size_t>(t_)) {
        const absl::Status st =
            idx.Search(ds.queries.row(q), kprime_, p, &got[which][q], nullptr);
        if (!st.ok()) {
          std::lock_guard<std::mutex> lock(failed_mu);
          failed = st;
        }
      }
    });
  }
  for (auto& th : pool) th.join();
  us[which].push_back(sw.ElapsedSeconds() * 1e6 * t_ / double(nq));
  return failed;
}

absl::Status LinksWorkload::Run(JsonLines& rep) {
  const Dataset& ds = b_->ds;
  const size_t nq = ds.queries.rows;
  for (int ef : efs_) {
    index::IndexSearchParams p;
    p.ef = static_cast<uint32_t>(ef);
    std::vector<std::vector<index::Neighbor>> got[2];
    got[0].resize(nq);
    got[1].resize(nq);
    std::vector<double> us[2];
    absl::Status failed;
    for (int r = 0; r < rounds_; ++r) {
      for (int i = 0; i < 2; ++i) {
        const absl::Status st = TimeLayout((r % 2 == 0) ? i : 1 - i, p, got, us);
        if (!st.ok()) failed = st;
      }
    }
    ZOOM_RETURN_IF_ERROR(failed);
    size_t same = 0, total = 0;
    for (size_t q = 0; q < nq; ++q) {
      std::set<InternalId> a;
      for (const auto& n : got[0][q]) a.insert(n.id);
      for (const auto& n : got[1][q]) same += a.count(n.id);
      total += got[0][q].size();
    }
    const double u0 = Median(us[0]), u1 = Median(us[1]);
    const double overlap = total > 0 ? double(same) / double(total) : 0;
    std::printf("%8d %16.1f %16.1f %10.3f %10.4f\n", ef, u0, u1, u1 / u0,
                overlap);
    rep.Line(
        {{"name", std::string("zoomd_links")},
     {"dataset", ds.name},
     {"params", absl::StrCat(b_->key, ",ef=", ef, ",kprime=", kprime_)},
     {"threads", int64_t{t_}},
     {"unpacked_us_per_query", u0},
     {"packed_us_per_query", u1},
     {"packed_over_unpacked", u1 / u0},
     {"candidate_overlap", overlap},
     {"unpacked_resident_bytes",
      static_cast<int64_t>(layouts_[0]->ResidentBytes())},
     {"packed_resident_bytes",
      static_cast<int64_t>(layouts_[1]->ResidentBytes())}});
  }
  return absl::OkStatus();
}

// pipeline: the same configurations run two ways on the first --threads
// value, alternating (3 rounds each, medians): closed-loop single searches
// (each thread: preview, wait for the reads, re-rank, next query) and
// SearchBatch, where each thread runs the next query's preview while the
// current one's reads are in flight. Prints QPS, recall@10, reads/query
// and the share of the fio QD128 disk ceiling for both.
class PipelineWorkload : public Workload {
 public:
  absl::Status Setup() override;
  absl::Status Run(JsonLines& rep) override;
  absl::Status Report(JsonLines& /*rep*/) override { return absl::OkStatus(); }

 private:
  // One K': both ways, then its row.
  absl::Status OneRerank(int rr, JsonLines& rep) const;

  Built* b_ = nullptr;
  bool ivf_ = false;
  std::vector<int> efs_, nprobes_, reranks_;
  size_t k_ = 10;
  int t_ = 1;
  double ceiling_iops_ = -1;
};

absl::Status PipelineWorkload::Setup() {
  ZOOM_ASSIGN_OR_RETURN(b_, GetBuilt(false, nullptr));
  ZOOM_ASSIGN_OR_RETURN(auto threads, ThreadsFlag());
  ivf_ = ScansLists(*b_->engine->index());
  ZOOM_ASSIGN_OR_RETURN(efs_, ListFlag(absl::GetFlag(FLAGS_ef), {64}));
  ZOOM_ASSIGN_OR_RETURN(nprobes_, ListFlag(absl::GetFlag(FLAGS_nprobe), {16}));
  ZOOM_ASSIGN_OR_RETURN(reranks_, ListFlag(absl::GetFlag(FLAGS_rerank), {20}));
  k_ = static_cast<size_t>(absl::GetFlag(FLAGS_k));
  t_ = threads.front();
  ceiling_iops_ = FioCeilingIops(b_->store_path);
  std::printf("%zu queries, %d thread(s); fio QD128 %.0f IOPS\n",
              static_cast<size_t>(b_->ds.queries.rows), t_, ceiling_iops_);
  std::printf("%-40s %10s %10s %8s %10s %10s %9s %10s %10s\n", "params",
              "single_qps", "batch_qps", "ratio", "single_r10", "batch_r10",
              "reads/q", "single_%", "batch_%");
  return absl::OkStatus();
}

absl::Status PipelineWorkload::OneRerank(int rr, JsonLines& rep) const {
  const Dataset& ds = b_->ds;
  const size_t nq = ds.queries.rows, k = k_;
  server::SearchParams p;
  p.ef = static_cast<uint32_t>(std::max(efs_.front(), ivf_ ? 2 * nprobes_.front() : 0));
  p.nprobe = static_cast<uint32_t>(nprobes_.front());
  p.rerank_candidates = static_cast<uint32_t>(rr);
  p.k = static_cast<uint32_t>(k);
  std::vector<double> single_qps, batch_qps;
  double single_recall = 0;
  std::vector<server::QueryResult> results;
  // Warm-up of the batch path (the single path warms up in RunQueries).
  const size_t warm = std::min<size_t>(200, nq);
  ZOOM_RETURN_IF_ERROR(b_->engine->SearchBatch(
      absl::MakeConstSpan(ds.queries.data.data(), warm * ds.dim()), warm, p, t_, &results));
  for (int round = 0; round < 3; ++round) {
    ZOOM_ASSIGN_OR_RETURN(ConfigResult single, RunConfig(*b_, p, t_, k));
    single_qps.push_back(single.run.qps);
    single_recall = single.run.recall_at_10;
    Stopwatch sw;
    ZOOM_RETURN_IF_ERROR(b_->engine->SearchBatch(
        absl::MakeConstSpan(ds.queries.data.data(), nq * ds.dim()), nq, p, t_, &results));
    batch_qps.push_back(double(nq) / sw.ElapsedSeconds());
  }
  double sum_recall = 0, sum_reads = 0;
  std::vector<int64_t> ids(k);
  for (size_t q = 0; q < nq; ++q) {
    for (size_t i = 0; i < k; ++i)
      ids[i] = i < results[q].hits.size() ? static_cast<int64_t>(results[q].hits[i].id) : -1;
    sum_recall += RecallAtK(ds, q, ids.data(), k, 10);
    sum_reads += double(results[q].stats.reads);
  }
  const double batch_recall = sum_recall / double(nq);
  const double reads = sum_reads / double(nq);
  const double s_qps = Median(single_qps), b_qps = Median(batch_qps);
  const double ceiling = reads > 0 && ceiling_iops_ > 0 ? ceiling_iops_ / reads : 0;
  const std::string params = absl::StrCat(
      index::IndexKindName(b_->engine->index()->spec().kind), ",ef=", p.ef,
      ivf_ ? absl::StrCat(",nprobe=", p.nprobe) : std::string(),
      ",rerank=", rr);
  std::printf(
      "%-40s %10.0f %10.0f %8.3f %10.4f %10.4f %9.1f %9.0f%% %9.0f%%\n",
      params.c_str(), s_qps, b_qps, b_qps / s_qps, single_recall,
      batch_recall, reads, ceiling > 0 ? 100 * s_qps / ceiling : 0.0,
      ceiling > 0 ? 100 * b_qps / ceiling : 0.0);
  rep.Line({{"name", std::string("zoomd_pipeline")},
            {"dataset", ds.name},
            {"params", params},
            {"threads", int64_t{t_}},
            {"single_qps", s_qps},
            {"batch_qps", b_qps},
            {"single_recall_at_10", single_recall},
            {"batch_recall_at_10", batch_recall},
            {"reads_per_query", reads},
            {"fio_qd128_iops", ceiling_iops_},
            {"ceiling_qps", ceiling}});
  return absl::OkStatus();
}

absl::Status PipelineWorkload::Run(JsonLines& rep) {
  for (int rr : reranks_) ZOOM_RETURN_IF_ERROR(OneRerank(rr, rep));
  return absl::OkStatus();
}

// cache: the DRAM cache of hot full vectors (EngineOptions::cache_bytes,
// CollectionSpec.cache_bytes) under a skewed workload. A stream of
// --cache_stream queries drawn from the query file with Zipf(--cache_zipf)
// popularity (a random rank per query, fixed seed; the same stream for
// every size) runs on --threads[0] threads against an engine over the same
// store and index with each --cache_mib; a warm-up stream of the same
// length (another seed, the same popularity) fills the cache first. Prints
// the hit rate, reads per query, reads saved per MiB against no cache,
// QPS, p50/p99 and recall@10, at --nprobe[0] and --rerank[0].
class CacheWorkload : public Workload {
 public:
  absl::Status Setup() override;
  absl::Status Run(JsonLines& rep) override;
  absl::Status Report(JsonLines& /*rep*/) override { return absl::OkStatus(); }

 private:
  // The warm and timed streams: query numbers drawn Zipf(zipf_) over ranks
  // 1..nq, the ranks assigned to queries by a fixed shuffle.
  void MakeStreams();
  // One cache size: a fresh engine over the store and index.
  absl::Status OneSize(int mib, JsonLines& rep);

  Built* b_ = nullptr;
  std::vector<int> mibs_;
  int t_ = 1;
  size_t len_ = 0, k_ = 10;
  double zipf_ = 1;
  server::SearchParams p_;
  std::vector<size_t> warm_, timed_;
  double base_reads_ = -1;  // reads per query without a cache (the first size)
};

void CacheWorkload::MakeStreams() {
  const size_t nq = b_->ds.queries.rows;
  std::vector<double> cdf(nq);
  double sum = 0;
  for (size_t r = 0; r < nq; ++r) cdf[r] = (sum += std::pow(static_cast<double>(r + 1), -zipf_));
  std::vector<size_t> query_of_rank(nq);
  std::iota(query_of_rank.begin(), query_of_rank.end(), 0);
  std::mt19937_64 shuffle_rng(7);
  std::shuffle(query_of_rank.begin(), query_of_rank.end(), shuffle_rng);
  const auto stream = [&](uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> u(0, sum);
    std::vector<size_t> out(len_);
    for (size_t& q : out) {
      const size_t r = std::lower_bound(cdf.begin(), cdf.end(), u(rng)) - cdf.begin();
      q = query_of_rank[std::min(r, nq - 1)];
    }
    return out;
  };
  warm_ = stream(1);
  timed_ = stream(2);
}

absl::Status CacheWorkload::Setup() {
  ZOOM_ASSIGN_OR_RETURN(b_, GetBuilt(false, nullptr));
  ZOOM_ASSIGN_OR_RETURN(auto threads, ThreadsFlag());
  for (absl::string_view v : absl::StrSplit(absl::GetFlag(FLAGS_cache_mib), ',')) {
    int x = 0;
    if (!absl::SimpleAtoi(v, &x) || x < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--cache_mib: '", v, "' is not a number of MiB >= 0"));
    }
    mibs_.push_back(x);
  }
  ZOOM_ASSIGN_OR_RETURN(auto nprobes, ListFlag(absl::GetFlag(FLAGS_nprobe), {64}));
  ZOOM_ASSIGN_OR_RETURN(auto reranks, ListFlag(absl::GetFlag(FLAGS_rerank), {20}));
  ZOOM_ASSIGN_OR_RETURN(auto efs, ListFlag(absl::GetFlag(FLAGS_ef), {0}));
  t_ = threads[0];
  len_ = static_cast<size_t>(std::max<int64_t>(1, absl::GetFlag(FLAGS_cache_stream)));
  zipf_ = absl::GetFlag(FLAGS_cache_zipf);
  k_ = static_cast<size_t>(absl::GetFlag(FLAGS_k));
  MakeStreams();
  const std::set<size_t> distinct(timed_.begin(), timed_.end());
  p_.k = static_cast<uint32_t>(k_);
  p_.nprobe = static_cast<uint32_t>(nprobes[0]);
  p_.ef = static_cast<uint32_t>(efs[0] > 0 ? efs[0] : 2 * nprobes[0]);
  p_.rerank_candidates = static_cast<uint32_t>(reranks[0]);
  std::printf("== cache: %zu queries drawn Zipf(%.2f) from %zu (%zu distinct), %d threads, "
              "%s nprobe=%u ef=%u K'=%u\n",
              len_, zipf_, static_cast<size_t>(b_->ds.queries.rows), distinct.size(), t_,
              b_->key.c_str(), p_.nprobe, p_.ef, p_.rerank_candidates);
  std::printf("%10s %10s %10s %10s %14s %10s %10s %10s %10s\n", "cache_MiB", "hit_rate",
              "reads/q", "saved/q", "saved/q/MiB", "QPS", "p50_us", "p99_us", "recall@10");
  return absl::OkStatus();
}

absl::Status CacheWorkload::OneSize(int mib, JsonLines& rep) {
  const Dataset& ds = b_->ds;
  const size_t len = len_, k = k_;
  ZOOM_ASSIGN_OR_RETURN(auto store, storage::VectorStore::Open(b_->store_path));
  ZOOM_ASSIGN_OR_RETURN(auto idx, index::LoadIndex(b_->index_path));
  server::EngineOptions opt;
  opt.cache_bytes = uint64_t(mib) << 20;
  server::SearchEngine engine(ds.metric, std::move(store), std::move(idx), opt);
  std::vector<double> lat(len);
  std::vector<std::vector<int64_t>> ids(len, std::vector<int64_t>(k, -1));
  QueryStats total;
  std::mutex mu;
  absl::Status first_error;
  const auto run = [&](const std::vector<size_t>& qs, bool timed_pass) {
    std::atomic<size_t> next{0};
    auto work = [&] {
      server::QueryResult r;
      QueryStats mine;
      for (size_t i; (i = next.fetch_add(1)) < qs.size();) {
        Stopwatch sw;
        absl::Status st =
            engine.Search(absl::MakeConstSpan(ds.queries.row(qs[i]), ds.dim()), p_, &r);
        if (!st.ok()) {
          std::lock_guard<std::mutex> l(mu);
          first_error = st;
          return;
        }
        if (!timed_pass) continue;
        lat[i] = sw.ElapsedMicros();
        mine.Merge(r.stats);
        for (size_t j = 0; j < k && j < r.hits.size(); ++j) ids[i][j] = r.hits[j].id;
      }
      std::lock_guard<std::mutex> l(mu);
      total.Merge(mine);
    };
    std::vector<std::thread> pool;
    for (int j = 1; j < t_; ++j) pool.emplace_back(work);
    work();
    for (auto& th : pool) th.join();
  };
  run(warm_, false);
  Stopwatch wall;
  run(timed_, true);
  const double secs = wall.ElapsedSeconds();
  ZOOM_RETURN_IF_ERROR(first_error);
  double recall = 0;
  for (size_t i = 0; i < len; ++i) recall += RecallAtK(ds, timed_[i], ids[i].data(), k, k);
  recall /= static_cast<double>(len);
  std::sort(lat.begin(), lat.end());
  const double reads = static_cast<double>(total.reads) / static_cast<double>(len);
  const double looked = static_cast<double>(total.cache_hits + total.cache_misses);
  const double hit_rate = looked > 0 ? static_cast<double>(total.cache_hits) / looked : 0;
  if (base_reads_ < 0) base_reads_ = reads;
  const double saved = base_reads_ - reads;
  const double per_mib = mib > 0 ? saved / mib : 0;
  const double qps = static_cast<double>(len) / secs;
  std::printf("%10d %10.4f %10.2f %10.2f %14.4f %10.0f %10.1f %10.1f %10.4f\n", mib,
              hit_rate, reads, saved, per_mib, qps, Percentile(lat, 50), Percentile(lat, 99),
              recall);
  rep.Line({{"name", std::string("zoomd_cache")},
            {"dataset", ds.name},
            {"params", b_->key},
            {"zipf", zipf_},
            {"threads", int64_t{t_}},
            {"cache_mib", int64_t{mib}},
            {"cache_resident_bytes", static_cast<int64_t>(engine.CacheBytes())},
            {"hit_rate", hit_rate},
            {"reads_per_query", reads},
            {"reads_saved_per_query", saved},
            {"reads_saved_per_query_per_mib", per_mib},
            {"qps", qps},
            {"p50_us", Percentile(lat, 50)},
            {"p99_us", Percentile(lat, 99)},
            {"recall_at_10", recall}});
  return absl::OkStatus();
}

absl::Status CacheWorkload::Run(JsonLines& rep) {
  for (int mib : mibs_) ZOOM_RETURN_IF_ERROR(OneSize(mib, rep));
  return absl::OkStatus();
}

const RegisterWorkload kBuild("build", RunWorkload<BuildWorkload>);
const RegisterWorkload kPipeline("pipeline", RunWorkload<PipelineWorkload>);
const RegisterWorkload kLinks("links", RunWorkload<LinksWorkload>);
const RegisterWorkload kSearch("search", RunWorkload<SearchWorkload>);
const RegisterWorkload kRecall("recall", RunWorkload<SearchWorkload>);
const RegisterWorkload kSweep("sweep", RunSweep);
const RegisterWorkload kCache("cache", RunWorkload<CacheWorkload>);

}  // namespace

bool ScansLists(const index::VectorIndex& idx) {
  return index::TraitsOf(idx.spec()).breadth == index::KindTraits::Breadth::kNprobe;
}

absl::StatusOr<ZoomBuilt> GetZoomBuilt() {
  ZOOM_ASSIGN_OR_RETURN(Built * b, GetBuilt(/*report_build=*/true, nullptr));
  ZoomBuilt out;
  out.ds = &b->ds;
  out.engine = b->engine.get();
  out.params = b->key;
  return out;
}

absl::StatusOr<ZoomBuilt> GetZoomBuiltFor(const std::string& dir, Metric metric) {
  ZOOM_ASSIGN_OR_RETURN(Built * b, GetBuiltFor(dir, metric, /*report_build=*/true, nullptr));
  ZoomBuilt out;
  out.ds = &b->ds;
  out.engine = b->engine.get();
  out.params = b->key;
  return out;
}

absl::StatusOr<ConfigResult> RunZoomConfig(const server::SearchParams& p, int threads,
                                           size_t k) {
  ZOOM_ASSIGN_OR_RETURN(Built * b, GetBuilt(/*report_build=*/false, nullptr));
  return RunConfig(*b, p, threads, k);
}

std::vector<ConfigResult>& SessionResults() {
  static auto* results = new std::vector<ConfigResult>();
  return *results;
}

}  // namespace zoom::bench
