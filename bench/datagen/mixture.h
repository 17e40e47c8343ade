// File: bench/datagen/mixture.h
//
// Synthetic vector sets for measuring how zoomd's costs grow with N (issue
// 16), where no real 1M+ set is at hand: a hierarchical anisotropic Gaussian
// mixture.
//
//   global   a decaying spectrum sigma_i = (i + 1)^-decay (i < dim) under a
//            random rotation R: cluster centres are R diag(sigma) g, g ~ N(0, I)
//   clusters `clusters` of them, sizes by a Zipf law (exponent zipf_s)
//   inside   low rank plus noise: x = mu_c + within * R diag(sigma) G_c z +
//            noise * eps, G_c a dim x rank Gaussian (per cluster), z ~ N(0,
//            I_rank), eps ~ N(0, I_dim)
//   kinds    kSiftLike: max(x, 0) scaled to a mean norm of ~512, rounded and
//            clipped to uint8 (SIFT's range and norm); kEmbedding: x / |x|
//            (float, unit norm: cosine = inner product)
//
// Row i is a function of (seed, i) alone: any range of rows can be
// generated again, on any thread, in any order (the ground truth re-reads
// none of the file), and the same spec writes the same bytes. Recall claims
// stay on the real sets; this is for cost growth (see bench/datagen/README).
//
// Thread safety: Rows() is const and may run on many threads at once.
#ifndef ZOOM_BENCH_DATAGEN_MIXTURE_H_
#define ZOOM_BENCH_DATAGEN_MIXTURE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace zoom::datagen {

enum class Kind { kSiftLike, kEmbedding };

struct MixtureSpec {
  Kind kind = Kind::kSiftLike;
  uint32_t dim = 128;
  uint64_t seed = 1;
  uint32_t clusters = 1000;
  double zipf_s = 1.0;       // cluster sizes ~ (c + 1)^-zipf_s
  double decay = 0.5;        // the global spectrum's exponent
  uint32_t rank = 16;        // each cluster's principal directions
  double within = 0.6;       // their scale, relative to the centres'
  double noise = 0.15;       // isotropic noise, relative to sigma_0
  // Rows for the SIFT-like scale's estimate of the mean norm.
  uint32_t calibration_rows = 2000;

  std::string Describe() const;  // "sift-like dim 128, 1000 clusters (zipf 1), ..."
};

class Mixture {
 public:
  // InvalidArgument for a spec out of range (dim 1..4096, clusters
  // 1..65536, rank 1..dim, scales >= 0, finite).
  static absl::StatusOr<Mixture> Create(const MixtureSpec& spec);

  const MixtureSpec& spec() const { return spec_; }
  uint32_t dim() const { return spec_.dim; }
  bool is_uint8() const { return spec_.kind == Kind::kSiftLike; }

  // Rows [first, first + n) as float (uint8 kinds: the integer values),
  // n * dim() floats into out. `stream` 0 is the base set, 1 the queries
  // (independent draws of the same distribution).
  void Rows(uint64_t first, uint64_t n, float* out, uint32_t stream = 0) const;
  // The cluster row i of `stream` is drawn from.
  uint32_t ClusterOf(uint64_t i, uint32_t stream = 0) const;

 private:
  explicit Mixture(const MixtureSpec& spec) : spec_(spec) {}
  void Raw(uint64_t i, uint32_t stream, float* x, std::vector<double>* z) const;

  MixtureSpec spec_;
  std::vector<double> cdf_;      // clusters, cumulative Zipf weights
  std::vector<float> centres_;   // clusters x dim
  std::vector<float> bases_;     // clusters x dim x rank (R diag(sigma) G_c, scaled)
  float sift_scale_ = 1.0f;
};

}  // namespace zoom::datagen

#endif  // ZOOM_BENCH_DATAGEN_MIXTURE_H_
