// File: index/fgd_index.h
//
// FgdIndex: the Fast Graph Decoder (Zhang et al., NeurIPS 2018): top-K of a
// softmax layer z = W·h + b without computing all |V| logits.
//
// The inner-product-preserving transform: with the rows r_i = [w_i ; b_i]
// (d + 1 floats) and U = max_i ||r_i||,
//     data  x_i = [w_i ; b_i ; sqrt(U² − ||r_i||²)]      (d + 2 floats)
//     query q   = [h ; 1 ; 0]
// gives ||q − x_i||² = ||h||² + 1 + U² − 2·(w_i·h + b_i), so the L2 order of
// the x_i is the logit order and each word's logit is recovered exactly from
// its distance: z_i = (||h||² + 1 + U² − ||q − x_i||²) / 2. An HNSW graph
// (L2, built once over the x_i) returns the K nearest, i.e. the top-K words.
// Logits are reported recomputed as w_i·h + b_i (exact in float32, not
// subject to the cancellation of the distance formula).
//
// Probabilities: the softmax over the K logits found (as the paper), plus an
// estimate of the mass outside them (`tail_mass`, beyond the paper):
// tail_mass = T / (Σ_topK exp(z − m) + T), m the best logit, T the tail's
// sum of exp(z − m) in two parts. The E words the graph search scored beyond
// the K (up to ef − K, the next-best words, which carry most of the tail)
// count exactly, with logits from their distances. The R = |V| − K − E
// others are estimated (FgdTail):
//  - kClusters (the default): from cluster summaries made at Build. The rows
//    r_i = [w_i ; b_i] are split by k-means into C ≤ 256 clusters (about 39
//    rows or more each); a cluster keeps its size n_c, its mean row
//    (μ_c, μ_c(b)), its bias variance σ²_c(b) and its weights' variance
//    averaged over the coordinates, σ̄²_c. A cluster's logits z (relative to
//    m) are modelled as Gaussian N(μ, s²), μ = μ_c·h + μ_c(b) − m,
//    s² = σ̄²_c·‖h‖² + σ²_c(b) (isotropic: on the PTB model as accurate as
//    a per-coordinate variance at half the bytes), truncated at τ, the
//    lowest logit counted exactly (the words not counted are those below
//    it, up to the graph's misses):
//    T_rest ≈ Σ_c n_c · E[exp(z) · 1(z < τ − m)]
//           = Σ_c n_c · exp(μ + s²/2) · Φ((τ − m − μ − s²) / s).
//    C · d multiply-adds over contiguous rows, no random row reads. The
//    truncation matters: an untruncated Gaussian moment is dominated by
//    logits far above any real word's when a cluster's spread is wide.
//    Measured mean absolute error of tail_mass on the PTB model: 0.012 at
//    ef 64, 0.017 at ef 16 (256 sampled words: 0.019, 0.047; zoombench
//    --benchmarks=fgd, docs/benchmarks.md).
//  - kSample: S = tail_samples words drawn uniformly with replacement among
//    the R, R/S · Σ_s exp(z_s − m) (unbiased, noisier, and S random row
//    reads). S ≥ R makes it exact.
//  - kNone: tail_mass = 0.
// The exact mode computes all |V| logits with OpenBLAS (cblas_sgemv for one
// context, cblas_sgemm for a batch), the reference and the fallback; its
// probabilities are then the full softmax's and tail_mass is exact.
//
// File format (Save/Load): common/binary_io.h container, magic "ZOOMFGD",
// version 1.1: V, d, U, the options, the transformed rows (V × (d + 2)
// floats), the HNSW graph, then the tail's cluster summaries (1.1; a 1.0
// file has none and Load computes them, deterministically). Load refuses a
// newer major (FailedPrecondition) and a corrupt file (DataLoss).
//
// Thread safety: Search is const and safe from many threads (per-thread
// scratch); it never parallelises one call (callers parallelise across
// requests). Build uses `build_threads` threads.
#ifndef ZOOM_INDEX_FGD_INDEX_H_
#define ZOOM_INDEX_FGD_INDEX_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/file_system.h"
#include "common/query_stats.h"
#include "index/hnsw_graph.h"

namespace zoom::index {

struct FgdOptions {
  HnswOptions hnsw;       // M 16, ef_construction 200 by default
  int build_threads = 2;  // graph insertion threads
  // Build only (not saved): Build stops with Cancelled soon after *cancel
  // turns true, and publishes the share of words inserted to *progress.
  const std::atomic<bool>* cancel = nullptr;
  std::atomic<double>* progress = nullptr;
};

// How the graph mode estimates tail_mass (see the file comment; the exact
// mode's tail is always exact).
enum class FgdTail : uint8_t { kNone, kClusters, kSample };

struct FgdSearchParams {
  uint32_t k = 10;       // words returned (1..|V|)
  uint32_t ef = 64;      // HNSW candidate list (raised to k)
  bool exact = false;    // full softmax with OpenBLAS
  FgdTail tail = FgdTail::kClusters;
  // kSample: words sampled (0: no tail; capped at the words left: exact).
  uint32_t tail_samples = 256;
  uint64_t seed = 0;     // of the tail sample (0: derived from the context)
};

// One context's answer.
struct FgdResult {
  std::vector<uint32_t> ids;  // k word ids, best logit first (ties: lower id)
  std::vector<float> logits;  // w_i·h + b_i of ids
  std::vector<float> probs;   // softmax over the k (exact mode: over all |V|)
  float tail_mass = 0;        // estimated (exact mode: exact) mass outside ids
  uint64_t distance_evals = 0;
};

class FgdIndex {
 public:
  // W: vocab × dim row-major, b: vocab. InvalidArgument for empty or
  // non-finite input.
  static absl::StatusOr<std::unique_ptr<FgdIndex>> Build(const float* W, const float* b,
                                                         uint32_t vocab, uint32_t dim,
                                                         const FgdOptions& options);
  static absl::StatusOr<std::unique_ptr<FgdIndex>> Load(const std::string& path);
  absl::Status Save(const std::string& path, FileSystem* fs = nullptr) const;
  ~FgdIndex();

  uint32_t vocab_size() const { return vocab_; }
  uint32_t dim() const { return dim_; }
  const FgdOptions& options() const { return options_; }
  // RAM of the graph, the transformed rows and the tail summaries.
  uint64_t ResidentBytes() const;
  // Clusters of the tail summaries (1..256).
  uint32_t tail_clusters() const { return tail_clusters_; }
  uint64_t GraphBytes() const;

  // Top-k for n contexts (n × dim floats); out is resized to n.
  // InvalidArgument for k = 0 or k > |V|, or non-finite contexts.
  absl::Status Search(const float* contexts, size_t n, const FgdSearchParams& params,
                      std::vector<FgdResult>* out, QueryStats* stats = nullptr) const;

 private:
  FgdIndex() = default;
  absl::Status SearchGraph(const float* h, const FgdSearchParams& params, FgdResult* out,
                           QueryStats* stats) const;
  absl::Status SearchExact(const float* contexts, size_t n, const FgdSearchParams& params,
                           std::vector<FgdResult>* out) const;
  // Logits, probabilities and the tail of r->ids; `head` (n_head, with
  // their logits) are the other words the graph search scored.
  void Finish(const float* h, const FgdSearchParams& params, FgdResult* r,
              const Neighbor* head = nullptr, const float* head_logit = nullptr,
              size_t n_head = 0) const;
  // The logit w_i·h + b_i, from row i of data_.
  float Logit(uint32_t i, const float* h) const;
  // k-means of the rows and the per-cluster summaries (tail_*), from data_.
  absl::Status BuildTailSummaries(int threads);
  // Each word's cluster among C (≥ 2), by k-means of the rows.
  absl::Status AssignTailClusters(size_t C, int threads,
                                  std::vector<uint8_t>* word_cluster) const;
  // T_rest of kClusters: the words below logit tau (the lowest the caller
  // summed exactly), relative to the best logit m.
  double ClusterTail(const float* h, float m, float tau) const;

  friend class FgdIndexTestPeer;  // tests/index/fgd_index_test.cc

  uint32_t vocab_ = 0, dim_ = 0;
  float max_norm_sq_ = 0;     // U²
  FgdOptions options_;
  // vocab × (dim + 2): the transformed rows [w_i ; b_i ; pad_i]. W is its
  // first dim columns (BLAS with lda = dim + 2), b its column dim.
  std::vector<float> data_;
  std::unique_ptr<HnswGraph> graph_;
  // The tail summaries: per cluster c its mean row μ_c(w) (dim floats),
  // [μ_c(b), σ²_c(b), σ̄²_c(w)] and its number of words.
  uint32_t tail_clusters_ = 0;
  std::vector<float> tail_rows_;
  std::vector<float> tail_stats_;
  std::vector<uint32_t> tail_size_;
};

}  // namespace zoom::index

#endif  // ZOOM_INDEX_FGD_INDEX_H_
