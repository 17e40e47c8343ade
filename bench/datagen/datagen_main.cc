// zoomdatagen: synthetic vector sets for cost-growth measurements (issue 16),
// streamed to TEXMEX files with exact ground truth, and the hardness of a
// set (LID, relative contrast) to calibrate them against the real ones.
//
//   zoomdatagen --out DIR --kind sift --n 10000000 [--dim 128] [--queries 1000]
//   zoomdatagen --out DIR --kind embedding --n 1000000 --dim 100
//   zoomdatagen --stats DIR [--metric l2|cosine|ip]      (a real or generated folder)
//
// DIR gets base.bvecs (sift) or base.fvecs (embedding), query.*, the exact
// top-100 (groundtruth_l2.ivecs / groundtruth_cosine.ivecs with its _dist
// file) and spec.txt (the generator's parameters). See bench/datagen/README.md.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/datagen/ground_truth.h"
#include "bench/datagen/mixture.h"
#include "common/metric.h"
#include "common/status_macros.h"
#include "common/texmex.h"
#include "common/timer.h"
#include "common/vector_dataset.h"

ABSL_FLAG(std::string, out, "", "Write a generated set into this directory.");
ABSL_FLAG(std::string, stats, "", "Print the LID and relative contrast of this set folder.");
ABSL_FLAG(std::string, kind, "sift", "sift (uint8, L2) or embedding (float, unit norm, cosine).");
ABSL_FLAG(uint64_t, n, 200000, "Base rows.");
ABSL_FLAG(uint32_t, dim, 0, "Dimension (0: 128 for sift, 100 for embedding).");
ABSL_FLAG(uint32_t, queries, 1000, "Query rows (an independent draw of the same mixture).");
ABSL_FLAG(uint32_t, k, 100, "Ground-truth depth.");
ABSL_FLAG(uint64_t, seed, 1, "The set's seed (same seed and flags: the same bytes).");
ABSL_FLAG(uint32_t, clusters, 0, "Mixture clusters (0: the kind's default).");
ABSL_FLAG(double, zipf, -1, "Cluster sizes' Zipf exponent (<0: the kind's default).");
ABSL_FLAG(double, decay, -1, "Global spectrum decay (<0: the kind's default).");
ABSL_FLAG(uint32_t, rank, 0, "Rank of each cluster (0: the kind's default).");
ABSL_FLAG(double, within, -1, "Cluster spread relative to the centres' (<0: default).");
ABSL_FLAG(double, noise, -1, "Isotropic noise (<0: default).");
ABSL_FLAG(int, threads, 2, "Threads for generation and the ground truth.");
ABSL_FLAG(std::string, metric, "", "--stats: the ground truth's metric (default: the folder's).");
ABSL_FLAG(uint32_t, lid_k, 20, "--stats: neighbours of the LID estimate.");
ABSL_FLAG(uint64_t, stats_queries, 1000, "--stats: queries measured.");

namespace zoom::datagen {
namespace {

// The defaults of each kind, calibrated (bench/datagen/README.md) so that
// LID@20 and the relative contrast come within a few percent of the real
// sets of ../shared/data at their sizes: sift-like at 4,500 points against
// sift-ngt-5k, embedding-like at 200,000 against GloVe-100 (cosine).
MixtureSpec SpecFromFlags(Kind kind) {
  MixtureSpec s;
  s.kind = kind;
  if (kind == Kind::kSiftLike) {
    s.dim = 128, s.clusters = 1000, s.zipf_s = 0.8, s.decay = 0.8, s.rank = 12, s.within = 0.8,
    s.noise = 0.07;
  } else {
    s.dim = 100, s.clusters = 1000, s.zipf_s = 1.0, s.decay = 0.35, s.rank = 32, s.within = 1.0,
    s.noise = 0.27;
  }
  if (absl::GetFlag(FLAGS_dim) != 0) s.dim = absl::GetFlag(FLAGS_dim);
  if (absl::GetFlag(FLAGS_clusters) != 0) s.clusters = absl::GetFlag(FLAGS_clusters);
  if (absl::GetFlag(FLAGS_zipf) >= 0) s.zipf_s = absl::GetFlag(FLAGS_zipf);
  if (absl::GetFlag(FLAGS_decay) >= 0) s.decay = absl::GetFlag(FLAGS_decay);
  if (absl::GetFlag(FLAGS_rank) != 0) s.rank = std::min(absl::GetFlag(FLAGS_rank), s.dim);
  if (absl::GetFlag(FLAGS_within) >= 0) s.within = absl::GetFlag(FLAGS_within);
  if (absl::GetFlag(FLAGS_noise) >= 0) s.noise = absl::GetFlag(FLAGS_noise);
  s.seed = absl::GetFlag(FLAGS_seed);
  return s;
}

// Rows [0, n) of `stream` into `path`, generated a chunk per thread at a
// time and written in order.
absl::Status WriteRows(const Mixture& mix, uint64_t n, uint32_t stream, const std::string& path,
                       int threads) {
  const uint32_t d = mix.dim();
  const VecsType type = mix.is_uint8() ? VecsType::kUint8 : VecsType::kFloat32;
  ZOOM_ASSIGN_OR_RETURN(VecsWriter w, VecsWriter::Create(path, type, d));
  constexpr uint64_t kChunk = 16384;
  std::vector<std::vector<float>> bufs(threads, std::vector<float>(kChunk * d));
  std::vector<uint8_t> bytes(mix.is_uint8() ? kChunk * d : 0);
  Stopwatch sw;
  for (uint64_t first = 0; first < n; first += kChunk * threads) {
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      const uint64_t a = first + t * kChunk;
      if (a >= n) break;
      pool.emplace_back([&, t, a] { mix.Rows(a, std::min(kChunk, n - a), bufs[t].data(), stream); });
    }
    for (auto& th : pool) th.join();
    for (int t = 0; t < threads; ++t) {
      const uint64_t a = first + t * kChunk;
      if (a >= n) break;
      const uint64_t rows = std::min(kChunk, n - a);
      if (mix.is_uint8()) {
        for (uint64_t i = 0; i < rows * d; ++i) bytes[i] = static_cast<uint8_t>(bufs[t][i]);
        ZOOM_RETURN_IF_ERROR(w.Append(bytes.data(), rows));
      } else {
        ZOOM_RETURN_IF_ERROR(w.Append(bufs[t].data(), rows));
      }
    }
    if (n >= 1000000 && (first / (kChunk * threads)) % 32 == 0) {
      std::fprintf(stderr, "\r%s: %llu / %llu rows (%.0f rows/s)", path.c_str(),
                   static_cast<unsigned long long>(std::min(n, first + kChunk * threads)),
                   static_cast<unsigned long long>(n),
                   std::min(n, first + kChunk * threads) / std::max(sw.ElapsedSeconds(), 1e-9));
    }
  }
  if (n >= 1000000) std::fprintf(stderr, "\n");
  return w.Close();
}

absl::Status Generate(const std::string& dir) {
  const std::string kind_name = absl::GetFlag(FLAGS_kind);
  Kind kind;
  if (kind_name == "sift") {
    kind = Kind::kSiftLike;
  } else if (kind_name == "embedding") {
    kind = Kind::kEmbedding;
  } else {
    return absl::InvalidArgumentError("--kind must be sift or embedding");
  }
  const uint64_t n = absl::GetFlag(FLAGS_n);
  const uint32_t nq = absl::GetFlag(FLAGS_queries), k = absl::GetFlag(FLAGS_k);
  const int threads = std::max(1, absl::GetFlag(FLAGS_threads));
  if (n < k) return absl::InvalidArgumentError("--n must be at least --k");
  const MixtureSpec spec = SpecFromFlags(kind);
  ZOOM_ASSIGN_OR_RETURN(Mixture mix, Mixture::Create(spec));
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  const std::string ext = mix.is_uint8() ? ".bvecs" : ".fvecs";
  std::printf("%s: %llu base + %u queries, %s\n", dir.c_str(), static_cast<unsigned long long>(n),
              nq, spec.Describe().c_str());
  Stopwatch sw;
  ZOOM_RETURN_IF_ERROR(WriteRows(mix, n, 0, dir + "/base" + ext, threads));
  const double gen_s = sw.ElapsedSeconds();
  ZOOM_RETURN_IF_ERROR(WriteRows(mix, nq, 1, dir + "/query" + ext, 1));
  std::vector<float> q(size_t{nq} * mix.dim());
  mix.Rows(0, nq, q.data(), 1);
  sw.Reset();
  const Metric metric = mix.is_uint8() ? Metric::kL2 : Metric::kCosine;
  ZOOM_ASSIGN_OR_RETURN(GroundTruth gt, ExactTopK(mix, n, q.data(), nq, metric, k, threads));
  const double gt_s = sw.ElapsedSeconds();
  const std::string gname = dir + "/groundtruth_" + MetricName(metric);
  ZOOM_ASSIGN_OR_RETURN(VecsWriter gi, VecsWriter::Create(gname + ".ivecs", VecsType::kInt32, k));
  ZOOM_RETURN_IF_ERROR(gi.Append(gt.ids.data(), nq));
  ZOOM_RETURN_IF_ERROR(gi.Close());
  ZOOM_ASSIGN_OR_RETURN(VecsWriter gd,
                        VecsWriter::Create(gname + "_dist.fvecs", VecsType::kFloat32, k));
  ZOOM_RETURN_IF_ERROR(gd.Append(gt.dist.data(), nq));
  ZOOM_RETURN_IF_ERROR(gd.Close());
  std::ofstream(dir + "/spec.txt") << "zoomdatagen " << spec.Describe() << "\nbase " << n
                                   << "\nqueries " << nq << "\nk " << k << "\n";
  std::printf("  base written in %.1f s (%.0f rows/s on %d threads); exact top-%u of %u "
              "queries in %.1f s; queries near the cut: %llu\n",
              gen_s, n / std::max(gen_s, 1e-9), threads, k, nq, gt_s,
              static_cast<unsigned long long>(gt.near_cut));
  return absl::OkStatus();
}

absl::Status Stats(const std::string& dir) {
  Metric metric = Metric::kL2;
  if (const std::string m = absl::GetFlag(FLAGS_metric); !m.empty()) {
    ZOOM_ASSIGN_OR_RETURN(metric, ParseMetric(m));
  } else {
    ZOOM_ASSIGN_OR_RETURN(DatasetFolder f, OpenDatasetFolder(dir, true));
    metric = f.DefaultMetric();
  }
  ZOOM_ASSIGN_OR_RETURN(Hardness h, MeasureFolder(dir, metric, absl::GetFlag(FLAGS_lid_k),
                                                  absl::GetFlag(FLAGS_stats_queries), 200, 7));
  std::printf("%s (%s, %llu queries): LID@%u mean %.2f median %.2f; relative contrast mean "
              "%.3f median %.3f\n",
              dir.c_str(), MetricName(metric), static_cast<unsigned long long>(h.queries),
              h.lid_k, h.lid_mean, h.lid_median, h.rc_mean, h.rc_median);
  std::printf("{\"record\": \"hardness\", \"dir\": \"%s\", \"metric\": \"%s\", \"lid_k\": %u, "
              "\"lid_mean\": %.4f, \"lid_median\": %.4f, \"rc_mean\": %.4f, \"rc_median\": %.4f}\n",
              dir.c_str(), MetricName(metric), h.lid_k, h.lid_mean, h.lid_median, h.rc_mean,
              h.rc_median);
  return absl::OkStatus();
}

}  // namespace
}  // namespace zoom::datagen

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "zoomdatagen --out DIR --kind sift|embedding --n N [--dim D] [--queries Q] [--seed S]\n"
      "            | --stats DIR [--metric l2|cosine|ip]");
  absl::ParseCommandLine(argc, argv);
  absl::Status st;
  if (!absl::GetFlag(FLAGS_stats).empty()) {
    st = zoom::datagen::Stats(absl::GetFlag(FLAGS_stats));
  } else if (!absl::GetFlag(FLAGS_out).empty()) {
    st = zoom::datagen::Generate(absl::GetFlag(FLAGS_out));
  } else {
    std::fprintf(stderr, "zoomdatagen: give --out DIR or --stats DIR (--help)\n");
    return 2;
  }
  if (!st.ok()) {
    std::fprintf(stderr, "zoomdatagen: %s\n", st.ToString().c_str());
    return 1;
  }
  return 0;
}
