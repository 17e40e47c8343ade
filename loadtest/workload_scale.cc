// File: loadtest/workload_scale.cc
//
// zoomload --workload scale: how zoomd's costs grow with N (issue 16).
//
// For each N of --scale_n, on a SIFT-like set made by zoomdatagen (128-d
// uint8, L2; generated once under --scale_dir and reused), zoomd runs as a
// child process (so its RSS is the server's alone, read from
// /proc/PID/status) with a fresh data dir, --sync always, no DRAM cache:
//
//   import    zoomctl's path: one gRPC Import stream, batches of 1,000;
//             points/s and the server's RSS along the way;
//   build     BuildIndex(wait) over every point; wall time, the phases from
//             zoomd's log line, the peak RSS (VmHWM reset before);
//   memory    resident_bytes (the preview, the id maps, the payload
//             indexes) per point, and the whole server's RSS per point
//             after a restart and the queries (and net of an empty zoomd's);
//   queries   at fixed knobs (--scale_nprobe, --scale_rerank), at the
//             cheapest grid point with recall@10 >= 0.95, and with no knobs
//             (the server's calibrated default target): recall@10, QPS,
//             reads/query, p50 / p99, at each --scale_threads count;
//   restart   SIGTERM, start, until health is SERVING;
//   compact   --scale_delete of the points deleted, then Compact with a
//             searcher running: wall time, peak RSS, searches served and
//             failed meanwhile.
//
// Then the log-log slope of each cost against N (least squares over the
// N's) and, with --scale_svg, a log-log plot of them. The in-RAM baselines
// at one N: zoombench --benchmarks=baselines --dataset <scale_dir>/sift-like-N
// (FAISS IVF-PQ + refine and hnswlib, with their memory).
//
// (Until issue 46 this was zoombench --benchmarks=scale; the figures and the
// JSON lines are the same.)
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/zoom_client.h"
#include "common/process.h"
#include "common/report_table.h"
#include "common/status_macros.h"
#include "common/texmex.h"
#include "common/timer.h"
#include "common/vector_dataset.h"
#include "loadtest/server_workload.h"
#include "loadtest/zoomd_child.h"
#include "zoom/v1/zoom.pb.h"

ABSL_FLAG(std::string, scale_n, "1000000,3000000,10000000", "scale: the N's, ascending");
ABSL_FLAG(std::string, scale_dir, "/var/tmp/zoombench-scale",
          "scale: where the generated sets (sift-like-N) and zoomd's data dirs go");
ABSL_FLAG(std::string, scale_datagen, "",
          "scale: the zoomdatagen binary (default: ../bench/zoomdatagen next to zoomload)");
ABSL_FLAG(std::string, scale_threads, "1,2", "scale: search thread counts, comma-separated");
ABSL_FLAG(uint32_t, scale_queries, 1000,
          "scale: queries per set (their exact top-100 is made once)");
ABSL_FLAG(uint32_t, scale_pq_m, 32, "scale: PQ bytes per vector");
ABSL_FLAG(bool, scale_opq, true,
          "scale: learn an OPQ rotation (no RAM per point; at 3M, nprobe 64, K' 30: "
          "recall@10 0.941 with, 0.935 without)");
ABSL_FLAG(uint32_t, scale_nprobe, 64, "scale: the fixed knobs' nprobe");
ABSL_FLAG(uint32_t, scale_rerank, 30, "scale: the fixed knobs' K' (reads per query)");
ABSL_FLAG(std::string, scale_grid_nprobe, "16,32,64,128",
          "scale: nprobe values searched for the recall-0.95 point");
ABSL_FLAG(std::string, scale_grid_rerank, "20,30,50",
          "scale: K' values searched for the recall-0.95 point");
ABSL_FLAG(double, scale_delete, 0.2, "scale: share of the points deleted before the compaction");
ABSL_FLAG(bool, scale_keep, false, "scale: keep each N's zoomd data dir (else removed after)");
ABSL_FLAG(std::string, scale_svg, "", "scale: write the costs' log-log plot to this SVG file");

namespace zoom::load {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;
constexpr uint32_t kK = 10;
const char kCollection[] = "scale";

// zoomd's flags: every write synced, no DRAM cache, an index built only when
// asked (BuildIndex).
std::vector<std::string> ZoomdFlags() {
  return {"--sync=always", "--auto_build_points=0", "--cache_bytes=0"};
}

struct QuerySet {
  VecsMatrix<float> queries;
  VecsMatrix<int32_t> gt;
  VecsMatrix<float> gt_dist;
};

struct Knobs {
  uint32_t nprobe = 0, rerank = 0;  // 0, 0: none (the server's default target)
  std::string Label() const {
    return nprobe == 0 ? std::string("calibrated") : absl::StrCat("np", nprobe, ",K'", rerank);
  }
};

struct QueryRun {
  double recall = 0, qps = 0, reads = 0, p50_us = 0, p99_us = 0;
  uint64_t failed = 0;
};

// Tie-aware recall@10 of one answer: a hit counts when it is among the
// exact top 10, or scores as well as the 10th (squared L2 of integers:
// exact in float).
double Recall(const QuerySet& qs, size_t q, const v1::SearchResponse& r) {
  const int32_t* gt = qs.gt.row(q);
  const float cut = qs.gt_dist.row(q)[kK - 1];
  size_t hits = 0;
  for (int i = 0; i < r.hits_size() && i < static_cast<int>(kK); ++i) {
    const uint64_t id = r.hits(i).id();
    const bool in_top = std::find(gt, gt + kK, static_cast<int32_t>(id)) != gt + kK;
    hits += in_top || r.hits(i).score() <= cut * (1 + 1e-6f);
  }
  return static_cast<double>(std::min<size_t>(hits, kK)) / kK;
}

v1::SearchRequest MakeRequest(const QuerySet& qs, size_t q, const Knobs& knobs) {
  v1::SearchRequest req;
  req.set_collection(kCollection);
  req.set_k(kK);
  const float* v = qs.queries.row(q);
  req.mutable_vector()->Add(v, v + qs.queries.dim);
  if (knobs.nprobe != 0) {
    req.mutable_knobs()->set_nprobe(knobs.nprobe);
    req.mutable_knobs()->set_rerank_candidates(knobs.rerank);
  }
  return req;
}

// Every query once from `threads` threads (after an untimed pass over the
// first 200).
QueryRun RunQueries(client::ZoomClient& c, const QuerySet& qs, const Knobs& knobs,
                    int threads) {
  const size_t nq = qs.queries.rows;
  for (size_t q = 0; q < std::min<size_t>(200, nq); ++q) {
    (void)c.Search(MakeRequest(qs, q, knobs), absl::Seconds(30));
  }
  std::vector<double> lat(nq, 0), recall(nq, 0), reads(nq, 0);
  std::atomic<size_t> next{0};
  std::atomic<uint64_t> failed{0};
  Stopwatch wall;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (size_t q; (q = next.fetch_add(1)) < nq;) {
        const v1::SearchRequest req = MakeRequest(qs, q, knobs);
        Stopwatch sw;
        auto r = c.Search(req, absl::Seconds(30));
        lat[q] = sw.ElapsedMicros();
        if (!r.ok()) {
          ++failed;
          continue;
        }
        recall[q] = Recall(qs, q, *r);
        reads[q] = r->stats().ssd_reads();
      }
    });
  }
  for (std::thread& t : pool) t.join();
  const double secs = wall.ElapsedMicros() / 1e6;
  QueryRun out;
  for (size_t q = 0; q < nq; ++q) {
    out.recall += recall[q];
    out.reads += reads[q];
  }
  out.recall /= static_cast<double>(nq);
  out.reads /= static_cast<double>(nq);
  out.qps = static_cast<double>(nq) / secs;
  std::sort(lat.begin(), lat.end());
  out.p50_us = Percentile(lat, 50);
  out.p99_us = Percentile(lat, 99);
  out.failed = failed.load();
  return out;
}

// The phases of zoomd's last "index build ... (phases: ...)" log line.
std::map<std::string, double> BuildPhases(const std::string& log_path) {
  std::ifstream in(log_path);
  std::string line, last;
  while (std::getline(in, line)) {
    if (line.find("(phases: ") != std::string::npos) last = line;
  }
  std::map<std::string, double> out;
  const size_t at = last.find("(phases: ");
  if (at == std::string::npos) return out;
  std::string body = last.substr(at + 9);
  body = body.substr(0, body.find(')'));
  for (absl::string_view part : absl::StrSplit(body, ", ")) {
    std::vector<std::string> w = absl::StrSplit(part, ' ');
    double v = 0;
    if (w.size() >= 2 && absl::SimpleAtod(w[1], &v)) out[w[0]] = v;
  }
  return out;
}

struct ScaleResult {
  uint64_t n = 0;
  std::map<std::string, double> cost;  // the costs whose slopes are printed
};

// The fixed-knob, recall-0.95 and default rows of the query table.
using QueryRows = std::vector<std::pair<std::string, Knobs>>;

// One N: a fresh zoomd, then the steps in order (each adds its figures to
// the "point" JSON line in the order they are measured).
class ScalePoint {
 public:
  ScalePoint(uint64_t n, uint64_t empty_rss, std::vector<int> threads)
      : n_(n), empty_rss_(empty_rss), threads_(std::move(threads)) {
    result_.n = n;
    json_ = {{"scale", std::string("point")}, {"n", static_cast<int64_t>(n)}};
  }

  absl::StatusOr<ScaleResult> Run(const DatasetFolder& folder, JsonLines& json);

 private:
  void Put(const std::string& name, double v, bool slope) {
    json_.emplace_back(name, v);
    if (slope) result_.cost[name] = v;
  }
  absl::Status Create(const DatasetFolder& folder);
  absl::Status Import(const DatasetFolder& folder);
  absl::Status Build();
  absl::StatusOr<QueryRows> PickRecall95();
  absl::Status Queries(const QueryRows& rows, JsonLines& json);
  absl::Status Restart(const Knobs& warm_knobs);
  absl::Status Compact(const Knobs& knobs);

  const uint64_t n_, empty_rss_;
  const std::vector<int> threads_;
  std::string data_dir_;
  QuerySet qs_;
  std::unique_ptr<ZoomdChild> server_;
  ScaleResult result_;
  JsonLines::Fields json_;
};

absl::Status ScalePoint::Create(const DatasetFolder& folder) {
  ZOOM_ASSIGN_OR_RETURN(qs_.queries, LoadQueries(folder));
  ZOOM_ASSIGN_OR_RETURN(qs_.gt, LoadGroundTruth(folder, Metric::kL2, 0, &qs_.gt_dist));
  data_dir_ = absl::StrCat(absl::GetFlag(FLAGS_scale_dir), "/zoomd-", n_);
  std::printf("\n-- N = %llu (%s)\n", static_cast<unsigned long long>(n_), folder.dir.c_str());
  ZOOM_ASSIGN_OR_RETURN(server_, StartZoomd(data_dir_, DataDir::kWipe, ZoomdFlags()));
  v1::CollectionSpec spec;
  spec.set_name(kCollection);
  spec.set_dim(folder.base_dim);
  spec.set_metric(v1::L2);
  spec.set_dtype(v1::UINT8);
  spec.mutable_index()->set_kind(v1::IVF_HNSW_PQ);
  spec.mutable_index()->set_pq_m(absl::GetFlag(FLAGS_scale_pq_m));
  spec.mutable_index()->set_opq(absl::GetFlag(FLAGS_scale_opq));
  return server_->client().CreateCollection(spec).status();
}

// The base file streamed through one Import call, the server's RSS sampled
// along it.
absl::Status ScalePoint::Import(const DatasetFolder& folder) {
  ZOOM_ASSIGN_OR_RETURN(VecsReader reader, VecsReader::Open(folder.base_path));
  const uint32_t d = reader.dim();
  constexpr size_t kChunk = 65536;
  std::vector<uint8_t> buf(kChunk * d);
  uint64_t buf_first = 0, buf_rows = 0;
  absl::Status read_status;
  std::vector<std::pair<double, uint64_t>> rss;  // (share imported, bytes)
  std::atomic<uint64_t> done{0};
  std::atomic<bool> stop{false};
  std::thread sampler([&] {
    while (!stop.load()) {
      rss.emplace_back(static_cast<double>(done.load()) / static_cast<double>(n_), server_->Rss());
      absl::SleepFor(absl::Milliseconds(250));
    }
  });
  Stopwatch sw;
  auto imported = server_->client().Import(
      kCollection, n_,
      [&](uint64_t i, v1::Point* p) {
        if (i >= buf_first + buf_rows) {
          buf_first = i;
          auto got = reader.Read(kChunk, buf.data());
          buf_rows = got.ok() ? *got : 0;
          if (!got.ok()) read_status = got.status();
        }
        p->set_id(i);
        auto* v = p->mutable_vector();
        v->Resize(static_cast<int>(d), 0.0f);
        const uint8_t* row = buf.data() + (i - buf_first) * d;
        if (i < buf_first + buf_rows) {
          for (uint32_t j = 0; j < d; ++j) (*v)[static_cast<int>(j)] = row[j];
        }
      },
      1000, [&](uint64_t k, uint64_t) { done = k; });
  const double secs = sw.ElapsedMicros() / 1e6;
  stop = true;
  sampler.join();
  ZOOM_RETURN_IF_ERROR(read_status);
  ZOOM_RETURN_IF_ERROR(imported.status());
  // RSS at the middle and the end of the import: "flat" is the growth over
  // the second half, per point imported then.
  uint64_t mid = 0, peak = 0;
  for (const auto& [share, bytes] : rss) {
    if (share <= 0.5) mid = bytes;
    peak = std::max(peak, bytes);
  }
  const uint64_t end_rss = server_->Rss();
  peak = std::max(peak, end_rss);
  std::printf(
      "import: %llu points in %.1f s = %.0f points/s; server RSS %.1f MiB at half, %.1f "
      "at the end (%.1f B/point over the second half), peak %.1f MiB\n",
      static_cast<unsigned long long>(*imported), secs, n_ / secs, mid / kMiB, end_rss / kMiB,
      (double(end_rss) - double(mid)) / (n_ / 2.0), peak / kMiB);
  Put("import_points_per_s", n_ / secs, true);
  Put("import_rss_half_bytes", static_cast<double>(mid), false);
  Put("import_rss_end_bytes", static_cast<double>(end_rss), false);
  Put("import_rss_peak_bytes", static_cast<double>(peak), false);
  Put("import_rss_growth_b_per_point", (double(end_rss) - double(mid)) / (n_ / 2.0), false);
  return absl::OkStatus();
}

// BuildIndex over every point: its phases (zoomd's log) and peak RSS.
absl::Status ScalePoint::Build() {
  server_->ResetPeak();
  const uint64_t before = server_->Rss();
  Stopwatch sw;
  ZOOM_ASSIGN_OR_RETURN(v1::CollectionInfo info, server_->client().BuildIndex(kCollection, true));
  const double secs = sw.ElapsedMicros() / 1e6;
  if (info.index_state() != v1::READY) {
    return absl::InternalError(absl::StrCat("build failed: ", info.index_error()));
  }
  const uint64_t peak = server_->PeakRss();
  const uint64_t after = server_->Rss();
  const std::map<std::string, double> phases = BuildPhases(server_->log_path());
  std::string phase_text;
  for (const char* p :
       {"sample", "train", "encode", "layout", "install", "writers_held", "calibration"}) {
    auto it = phases.find(p);
    const double v = it == phases.end() ? -1 : it->second;
    absl::StrAppend(&phase_text, phase_text.empty() ? "" : ", ", p, " ", Fmt(v, 1), " s");
    Put(absl::StrCat("build_", p, "_s"), v, false);
  }
  const double resident = static_cast<double>(info.resident_bytes());
  std::printf(
      "build: %.1f s (%s); server RSS %.1f MiB before, peak %.1f MiB (%.2fx the resident "
      "bytes), %.1f MiB after\n",
      secs, phase_text.c_str(), before / kMiB, peak / kMiB, peak / resident, after / kMiB);
  std::printf(
      "resident_bytes %.1f MiB = %.1f B/point (the preview, id maps, payload indexes); "
      "disk_bytes %.1f MiB\n",
      resident / kMiB, resident / n_, info.disk_bytes() / kMiB);
  Put("build_s", secs, true);
  Put("build_peak_rss_bytes", static_cast<double>(peak), true);
  Put("build_rss_before_bytes", static_cast<double>(before), false);
  Put("build_peak_over_resident", peak / resident, false);
  Put("resident_bytes", resident, true);
  Put("resident_bytes_per_point", resident / n_, false);
  Put("disk_bytes", static_cast<double>(info.disk_bytes()), false);
  return absl::OkStatus();
}

// The grid point with the most QPS at recall@10 >= 0.95 (at the most
// threads), and the rows of the query table: fixed, that point, default.
absl::StatusOr<QueryRows> ScalePoint::PickRecall95() {
  const int max_threads = *std::max_element(threads_.begin(), threads_.end());
  ZOOM_ASSIGN_OR_RETURN(std::vector<int> grid_np,
                        ParseIntList(absl::GetFlag(FLAGS_scale_grid_nprobe)));
  ZOOM_ASSIGN_OR_RETURN(std::vector<int> grid_k,
                        ParseIntList(absl::GetFlag(FLAGS_scale_grid_rerank)));
  Knobs best;
  double best_qps = -1;
  std::printf("recall-0.95 search over the grid (%d threads):", max_threads);
  for (int np : grid_np) {
    for (int kp : grid_k) {
      const Knobs knobs{static_cast<uint32_t>(np), static_cast<uint32_t>(kp)};
      const QueryRun r = RunQueries(server_->client(), qs_, knobs, max_threads);
      std::printf(" %s %.3f/%.0f", knobs.Label().c_str(), r.recall, r.qps);
      std::fflush(stdout);
      if (r.failed == 0 && r.recall >= 0.95 && r.qps > best_qps) {
        best = knobs;
        best_qps = r.qps;
      }
    }
  }
  std::printf("\n");
  if (best_qps < 0) std::printf("  no grid point reached recall@10 0.95\n");
  QueryRows rows = {
      {"fixed", Knobs{absl::GetFlag(FLAGS_scale_nprobe), absl::GetFlag(FLAGS_scale_rerank)}},
      {"default", Knobs{}}};
  if (best_qps >= 0) rows.insert(rows.begin() + 1, {"recall_0.95", best});
  return rows;
}

absl::Status ScalePoint::Queries(const QueryRows& rows, JsonLines& json) {
  const int max_threads = *std::max_element(threads_.begin(), threads_.end());
  Table table({"row", "knobs", "threads", "recall@10", "QPS", "reads/q", "p50_us", "p99_us",
               "failed"},
              12);
  for (const auto& [what, knobs] : rows) {
    for (int t : threads_) {
      const QueryRun r = RunQueries(server_->client(), qs_, knobs, t);
      table.Row({what, knobs.Label(), absl::StrCat(t), Fmt(r.recall, 4), Fmt(r.qps, 0),
                 Fmt(r.reads, 1), Fmt(r.p50_us, 0), Fmt(r.p99_us, 0), absl::StrCat(r.failed)});
      json.Line({{"scale", std::string("queries")},
                 {"n", static_cast<int64_t>(n_)},
                 {"knobs", what},
                 {"nprobe", static_cast<int64_t>(knobs.nprobe)},
                 {"rerank", static_cast<int64_t>(knobs.rerank)},
                 {"threads", static_cast<int64_t>(t)},
                 {"recall_at_10", r.recall},
                 {"qps", r.qps},
                 {"reads_per_query", r.reads},
                 {"p50_us", r.p50_us},
                 {"p99_us", r.p99_us},
                 {"failed", static_cast<int64_t>(r.failed)}});
      if (t == max_threads && what != "default") {
        const std::string prefix = what == "fixed" ? "fixed" : "r95";
        Put(prefix + "_qps", r.qps, true);
        Put(prefix + "_p99_us", r.p99_us, true);
        Put(prefix + "_recall_at_10", r.recall, false);
        Put(prefix + "_reads_per_query", r.reads, false);
      }
    }
  }
  return absl::OkStatus();
}

// SIGTERM, start again, until SERVING; the RSS after the same queries is
// the steady state (a build's freed staging can stay mapped by malloc).
absl::Status ScalePoint::Restart(const Knobs& warm_knobs) {
  const int max_threads = *std::max_element(threads_.begin(), threads_.end());
  Stopwatch sw;
  ZOOM_RETURN_IF_ERROR(server_->Stop());
  const double stop_s = sw.ElapsedMicros() / 1e6;
  ZOOM_ASSIGN_OR_RETURN(const double start_s, server_->Start());
  (void)RunQueries(server_->client(), qs_, warm_knobs, max_threads);  // warm
  const uint64_t rss = server_->Rss();
  std::printf(
      "restart: stop %.2f s, start to SERVING %.2f s; server RSS after it and the queries "
      "%.1f MiB = %.1f B/point (%.1f B/point over an empty zoomd's %.1f MiB)\n",
      stop_s, start_s, rss / kMiB, double(rss) / n_, (double(rss) - empty_rss_) / n_,
      empty_rss_ / kMiB);
  Put("stop_s", stop_s, false);
  Put("restart_s", start_s, true);
  Put("rss_bytes", static_cast<double>(rss), false);
  Put("rss_growth_bytes", double(rss) - double(empty_rss_), true);
  Put("rss_bytes_per_point", double(rss) / n_, false);
  Put("rss_growth_bytes_per_point", (double(rss) - empty_rss_) / n_, false);
  return absl::OkStatus();
}

// --scale_delete of the points deleted, then Compact with a searcher running.
absl::Status ScalePoint::Compact(const Knobs& knobs) {
  const double share = absl::GetFlag(FLAGS_scale_delete);
  const uint64_t every = share > 0 ? std::max<uint64_t>(1, std::llround(1.0 / share)) : 0;
  Stopwatch del_sw;
  uint64_t deleted = 0;
  std::vector<uint64_t> ids;
  for (uint64_t i = 0; every != 0 && i < n_; i += every) {
    ids.push_back(i);
    if (ids.size() == 10000 || i + every >= n_) {
      ZOOM_ASSIGN_OR_RETURN(uint64_t k, server_->client().Delete(kCollection, ids));
      deleted += k;
      ids.clear();
    }
  }
  const double del_s = del_sw.ElapsedMicros() / 1e6;
  server_->ResetPeak();
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> served{0}, failed{0};
  std::thread searcher([&] {
    for (size_t q = 0; !stop.load(); q = (q + 1) % qs_.queries.rows) {
      auto r = server_->client().Search(MakeRequest(qs_, q, knobs), absl::Seconds(30));
      ++(r.ok() ? served : failed);
    }
  });
  Stopwatch sw;
  auto info = server_->client().Compact(kCollection);
  const double secs = sw.ElapsedMicros() / 1e6;
  stop = true;
  searcher.join();
  ZOOM_RETURN_IF_ERROR(info.status());
  const uint64_t peak = server_->PeakRss();
  std::printf(
      "compaction: %llu points deleted in %.1f s; Compact %.1f s, peak RSS %.1f MiB; %llu "
      "searches served meanwhile (%.0f/s), %llu failed; %llu points after\n",
      static_cast<unsigned long long>(deleted), del_s, secs, peak / kMiB,
      static_cast<unsigned long long>(served.load()), served.load() / secs,
      static_cast<unsigned long long>(failed.load()),
      static_cast<unsigned long long>(info->points()));
  Put("deleted_points", static_cast<double>(deleted), false);
  Put("delete_s", del_s, false);
  Put("compact_s", secs, true);
  Put("compact_peak_rss_bytes", static_cast<double>(peak), true);
  Put("searches_during_compaction", static_cast<double>(served.load()), false);
  Put("failed_during_compaction", static_cast<double>(failed.load()), false);
  return absl::OkStatus();
}

absl::StatusOr<ScaleResult> ScalePoint::Run(const DatasetFolder& folder, JsonLines& json) {
  ZOOM_RETURN_IF_ERROR(Create(folder));
  ZOOM_RETURN_IF_ERROR(Import(folder));
  ZOOM_RETURN_IF_ERROR(Build());
  ZOOM_ASSIGN_OR_RETURN(const QueryRows rows, PickRecall95());
  ZOOM_RETURN_IF_ERROR(Queries(rows, json));
  ZOOM_RETURN_IF_ERROR(Restart(rows.front().second));
  ZOOM_RETURN_IF_ERROR(Compact(rows.front().second));
  ZOOM_RETURN_IF_ERROR(server_->Stop());
  if (!absl::GetFlag(FLAGS_scale_keep)) {
    ZOOM_RETURN_IF_ERROR(RunCommand(absl::StrCat("rm -rf ", data_dir_)).status());
  }
  json.Line(json_);
  return result_;
}

// The least-squares slope of log(cost) against log(N).
double LogLogSlope(const std::vector<std::pair<double, double>>& pts) {
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  const double m = static_cast<double>(pts.size());
  for (const auto& [x, y] : pts) {
    const double lx = std::log(x), ly = std::log(y);
    sx += lx;
    sy += ly;
    sxx += lx * lx;
    sxy += lx * ly;
  }
  const double den = m * sxx - sx * sx;
  return den == 0 ? std::nan("") : (m * sxy - sx * sy) / den;
}

// Each cost relative to its value at the smallest N, on log-log axes.
absl::Status WriteSvg(const std::string& path, const std::vector<ScaleResult>& results) {
  const double w = 720, h = 480, left = 60, right = 220, top = 20, bottom = 50;
  double xmin = 1e300, xmax = 0, ymin = 1, ymax = 1;
  std::map<std::string, std::vector<std::pair<double, double>>> lines;
  for (const ScaleResult& r : results) {
    xmin = std::min(xmin, double(r.n));
    xmax = std::max(xmax, double(r.n));
    for (const auto& [name, v] : r.cost) {
      const double base = results.front().cost.count(name) ? results.front().cost.at(name) : 0;
      if (base <= 0 || v <= 0) continue;
      lines[name].emplace_back(double(r.n), v / base);
      ymin = std::min(ymin, v / base);
      ymax = std::max(ymax, v / base);
    }
  }
  ymin /= 1.5;
  ymax *= 1.5;
  if (xmax <= xmin) xmax = xmin * 10;
  auto X = [&](double x) {
    return left + (w - left - right) * std::log(x / xmin) / std::log(xmax / xmin);
  };
  auto Y = [&](double y) {
    return h - bottom - (h - top - bottom) * std::log(y / ymin) / std::log(ymax / ymin);
  };
  std::ofstream out(path);
  out << "<svg xmlns='http://www.w3.org/2000/svg' width='" << w << "' height='" << h
      << "' font-family='sans-serif' font-size='11'>\n<rect width='100%' "
         "height='100%' fill='white'/>\n";
  out << "<text x='" << left << "' y='14'>zoomd costs / their value at N = " << xmin
      << " (log-log; a slope of 1 is linear in N)</text>\n";
  for (const ScaleResult& r : results) {
    out << "<line x1='" << X(r.n) << "' y1='" << top << "' x2='" << X(r.n) << "' y2='"
        << h - bottom << "' stroke='#ddd'/><text x='" << X(r.n) - 20 << "' y='"
        << h - bottom + 15 << "'>N=" << r.n << "</text>\n";
  }
  for (double y = 0.01; y <= ymax; y *= 10) {
    if (y < ymin) continue;
    out << "<line x1='" << left << "' y1='" << Y(y) << "' x2='" << w - right << "' y2='" << Y(y)
        << "' stroke='#ddd'/><text x='5' y='" << Y(y) + 4 << "'>" << y << "x</text>\n";
  }
  const char* colours[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                           "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#000000", "#aa4400"};
  int i = 0;
  for (const auto& [name, pts] : lines) {
    const char* c = colours[i % 12];
    out << "<polyline fill='none' stroke='" << c << "' stroke-width='2' points='";
    for (const auto& [x, y] : pts) out << X(x) << "," << Y(y) << " ";
    out << "'/>\n<text x='" << w - right + 10 << "' y='" << top + 14 * (i + 1) << "' fill='"
        << c << "'>" << name << " (slope " << Fmt(LogLogSlope(pts), 2) << ")</text>\n";
    ++i;
  }
  out << "</svg>\n";
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

class ScaleWorkload : public ServerWorkload {
 public:
  absl::Status ReadFlags() override;
  absl::Status Setup() override;
  absl::Status Run(JsonLines& json) override;
  absl::Status Report(JsonLines& json) override;

 private:
  // The set for N: made by zoomdatagen unless there already.
  absl::StatusOr<DatasetFolder> EnsureSet(uint64_t n) const;

  std::vector<uint64_t> ns_;
  std::vector<int> threads_;
  std::string zoomd_, datagen_;
  uint64_t empty_rss_ = 0;
  std::vector<ScaleResult> results_;
};

absl::Status ScaleWorkload::ReadFlags() {
  auto ns = ParseIntList(absl::GetFlag(FLAGS_scale_n));
  if (!ns.ok()) return absl::InvalidArgumentError(absl::StrCat("--scale_n: ", ns.status().message()));
  ns_.assign(ns->begin(), ns->end());
  std::sort(ns_.begin(), ns_.end());
  auto threads = ParseIntList(absl::GetFlag(FLAGS_scale_threads));
  if (!threads.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--scale_threads: ", threads.status().message()));
  }
  threads_ = *threads;
  datagen_ = absl::GetFlag(FLAGS_scale_datagen);
  if (datagen_.empty()) datagen_ = SelfDir() + "/../bench/zoomdatagen";
  return absl::OkStatus();
}

absl::StatusOr<DatasetFolder> ScaleWorkload::EnsureSet(uint64_t n) const {
  const std::string dir = absl::StrCat(absl::GetFlag(FLAGS_scale_dir), "/sift-like-", n);
  const uint32_t nq = absl::GetFlag(FLAGS_scale_queries);
  auto folder = OpenDatasetFolder(dir, /*need_base=*/true);
  if (folder.ok() && folder->base_rows == n && folder->query_rows == nq &&
      folder->HasGroundTruth(Metric::kL2) && ::access((dir + "/spec.txt").c_str(), R_OK) == 0) {
    return folder;
  }
  const std::string cmd = absl::StrCat(datagen_, " --out ", dir, " --kind sift --n ", n,
                                       " --queries ", nq, " --threads 2 2>&1");
  std::printf("generating %s (once): %s\n", dir.c_str(), cmd.c_str());
  std::fflush(stdout);
  Stopwatch sw;
  ZOOM_RETURN_IF_ERROR(RunCommand(cmd).status());
  std::printf("  generated in %.1f s\n", sw.ElapsedMicros() / 1e6);
  return OpenDatasetFolder(dir, /*need_base=*/true);
}

absl::Status ScaleWorkload::Setup() {
  ZOOM_ASSIGN_OR_RETURN(zoomd_, ZoomdFlag());
  if (::access(datagen_.c_str(), X_OK) != 0) {
    return absl::NotFoundError(
        absl::StrCat("no zoomdatagen binary at ", datagen_, ": pass --scale_datagen"));
  }
  const std::string scale_dir = absl::GetFlag(FLAGS_scale_dir);
  ZOOM_RETURN_IF_ERROR(RunCommand(absl::StrCat("mkdir -p ", scale_dir)).status());
  // An empty zoomd's RSS, the floor the per-point growth is counted over
  // (and its log names the SIMD kernels the server runs).
  ZOOM_ASSIGN_OR_RETURN(const std::unique_ptr<ZoomdChild> empty,
                        StartZoomd(scale_dir + "/zoomd-empty", DataDir::kWipe, ZoomdFlags()));
  absl::SleepFor(absl::Seconds(1));
  empty_rss_ = empty->Rss();
  ZOOM_RETURN_IF_ERROR(empty->Stop());
  std::printf(
      "scale: N = %s, SIFT-like 128-d uint8 (zoomdatagen), ivf_hnsw_pq pq_m %u%s, zoomd %s "
      "(--sync always, no DRAM cache), SIMD %s, load %.1f\n",
      absl::GetFlag(FLAGS_scale_n).c_str(), absl::GetFlag(FLAGS_scale_pq_m),
      absl::GetFlag(FLAGS_scale_opq) ? " opq" : "", zoomd_.c_str(),
      KernelsFromLog(empty->log_path()).c_str(), LoadAverage1m());
  std::printf("an empty zoomd: RSS %.1f MiB\n", empty_rss_ / kMiB);
  return absl::OkStatus();
}

absl::Status ScaleWorkload::Run(JsonLines& json) {
  for (uint64_t n : ns_) {
    ZOOM_ASSIGN_OR_RETURN(const DatasetFolder folder, EnsureSet(n));
    ScalePoint point(n, empty_rss_, threads_);
    ZOOM_ASSIGN_OR_RETURN(ScaleResult r, point.Run(folder, json));
    results_.push_back(std::move(r));
  }
  return absl::OkStatus();
}

absl::Status ScaleWorkload::Report(JsonLines& json) {
  if (results_.size() < 2) return absl::OkStatus();
  std::printf("\nlog-log slope of each cost against N (1: linear; least squares over %zu N's)\n",
              results_.size());
  for (const auto& [name, v0] : results_.front().cost) {
    std::vector<std::pair<double, double>> pts;
    std::string values;
    for (const ScaleResult& r : results_) {
      auto it = r.cost.find(name);
      if (it == r.cost.end() || it->second <= 0) continue;
      pts.emplace_back(double(r.n), it->second);
      absl::StrAppend(&values, values.empty() ? "" : " ", Fmt(it->second, 1));
    }
    if (pts.size() < 2) continue;
    const double slope = LogLogSlope(pts);
    std::printf("  %-28s %6.2f   (%s)\n", name.c_str(), slope, values.c_str());
    json.Line({{"scale", std::string("slope")}, {"cost", name}, {"slope", slope}});
  }
  if (!absl::GetFlag(FLAGS_scale_svg).empty()) {
    ZOOM_RETURN_IF_ERROR(WriteSvg(absl::GetFlag(FLAGS_scale_svg), results_));
    std::printf("plot: %s\n", absl::GetFlag(FLAGS_scale_svg).c_str());
  }
  return absl::OkStatus();
}

const RegisterServerWorkload kRegisterScale(
    "scale",
    {"how a zoomd's costs grow with N (import, build, memory, queries, restart, compaction), "
     "on zoomdatagen's SIFT-like sets",
     {"zoomd", "scale_n", "scale_dir", "scale_datagen", "scale_threads", "scale_queries",
      "scale_pq_m", "scale_opq", "scale_nprobe", "scale_rerank", "scale_grid_nprobe",
      "scale_grid_rerank", "scale_delete", "scale_keep", "scale_svg"},
     [] { return std::make_unique<ScaleWorkload>(); }});

}  // namespace
}  // namespace zoom::load
