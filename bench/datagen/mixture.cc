#include "bench/datagen/mixture.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "common/orthonormal.h"

namespace zoom::datagen {
namespace {

// A counter-based generator: splitmix64 over a per-row state, so that row i
// needs no other row's draws. Normals by Box-Muller (our own, so that the
// bytes do not depend on a library's distribution code).
class Rng {
 public:
  explicit Rng(uint64_t state) : s_(state) {}
  uint64_t Next() {
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double Uniform() { return (Next() >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)
  double Normal() {
    if (have_) {
      have_ = false;
      return spare_;
    }
    double u = Uniform(), v = Uniform();
    if (u < 1e-300) u = 1e-300;
    const double r = std::sqrt(-2.0 * std::log(u)), t = 6.283185307179586 * v;
    spare_ = r * std::sin(t);
    have_ = true;
    return r * std::cos(t);
  }

 private:
  uint64_t s_;
  double spare_ = 0;
  bool have_ = false;
};

uint64_t Mix(uint64_t a, uint64_t b) {
  Rng r(a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull));
  return r.Next();
}

// A random rotation (dim x dim, row-major, double): Gram-Schmidt (twice, for
// orthogonality in floating point) on Gaussian rows.
std::vector<double> Rotation(uint32_t d, Rng* rng) {
  std::vector<double> q(size_t{d} * d);
  do {
    for (double& x : q) x = rng->Normal();
  } while (!OrthonormalizeRows(q.data(), d));
  return q;
}

}  // namespace

std::string MixtureSpec::Describe() const {
  return absl::StrFormat(
      "%s dim %u, %u clusters (zipf %.2f), spectrum decay %.2f, rank %u, within %.2f, "
      "noise %.2f, seed %u",
      kind == Kind::kSiftLike ? "sift-like (uint8)" : "embedding-like (float, unit norm)", dim,
      clusters, zipf_s, decay, rank, within, noise, seed);
}

absl::StatusOr<Mixture> Mixture::Create(const MixtureSpec& spec) {
  const auto bad = [](const std::string& m) { return absl::InvalidArgumentError(m); };
  if (spec.dim < 1 || spec.dim > 4096) return bad("dim must be 1..4096");
  if (spec.clusters < 1 || spec.clusters > 65536) return bad("clusters must be 1..65536");
  if (spec.rank < 1 || spec.rank > spec.dim) return bad("rank must be 1..dim");
  for (double v : {spec.zipf_s, spec.decay, spec.within, spec.noise}) {
    if (!std::isfinite(v) || v < 0 || v > 100) return bad("zipf, decay, within, noise: 0..100");
  }
  if (uint64_t{spec.clusters} * spec.dim * spec.rank > (uint64_t{1} << 28)) {
    return bad("clusters x dim x rank is over 2^28 floats: fewer clusters or a lower rank");
  }
  Mixture m(spec);
  const uint32_t d = spec.dim, r = spec.rank;
  Rng rng(Mix(spec.seed, 0xC0FFEE));
  const std::vector<double> rot = Rotation(d, &rng);
  std::vector<double> sigma(d);
  for (uint32_t i = 0; i < d; ++i) sigma[i] = std::pow(i + 1.0, -spec.decay);
  // R diag(sigma) v, for a v of dim components.
  std::vector<double> tmp(d);
  const auto shape = [&](const double* v, float scale, float* out, size_t stride) {
    for (uint32_t t = 0; t < d; ++t) tmp[t] = sigma[t] * v[t];
    for (uint32_t row = 0; row < d; ++row) {
      // out = R^T-applied: sum_t rot[t][row] * tmp[t] (R's rows as the basis).
      double acc = 0;
      for (uint32_t t = 0; t < d; ++t) acc += rot[size_t{t} * d + row] * tmp[t];
      out[size_t{row} * stride] = static_cast<float>(scale * acc);
    }
  };
  m.cdf_.resize(spec.clusters);
  double total = 0;
  for (uint32_t c = 0; c < spec.clusters; ++c) {
    total += std::pow(c + 1.0, -spec.zipf_s);
    m.cdf_[c] = total;
  }
  for (double& x : m.cdf_) x /= total;
  m.centres_.resize(size_t{spec.clusters} * d);
  m.bases_.resize(size_t{spec.clusters} * d * r);
  std::vector<double> g(d);
  const float within = static_cast<float>(spec.within / std::sqrt(static_cast<double>(r)));
  for (uint32_t c = 0; c < spec.clusters; ++c) {
    for (double& x : g) x = rng.Normal();
    shape(g.data(), 1.0f, &m.centres_[size_t{c} * d], 1);
    for (uint32_t k = 0; k < r; ++k) {
      for (double& x : g) x = rng.Normal();
      // Column k of the cluster's dim x rank basis (stored row-major: [t][k]).
      shape(g.data(), within, &m.bases_[(size_t{c} * d) * r + k], r);
    }
  }
  if (spec.kind == Kind::kSiftLike) {
    // The scale that brings max(x, 0)'s mean norm to 512 (SIFT's).
    std::vector<float> x(d);
    std::vector<double> z;
    double norms = 0;
    const uint32_t n = std::max<uint32_t>(spec.calibration_rows, 1);
    for (uint32_t i = 0; i < n; ++i) {
      m.Raw(i, /*stream=*/2, x.data(), &z);
      double s = 0;
      for (float v : x) s += v > 0 ? double{v} * v : 0.0;
      norms += std::sqrt(s);
    }
    m.sift_scale_ = norms > 0 ? static_cast<float>(512.0 * n / norms) : 1.0f;
  }
  return m;
}

void Mixture::Raw(uint64_t i, uint32_t stream, float* x, std::vector<double>* z) const {
  const uint32_t d = spec_.dim, r = spec_.rank;
  Rng rng(Mix(spec_.seed * 4 + stream, i));
  const double u = rng.Uniform();
  const uint32_t c = static_cast<uint32_t>(
      std::min<size_t>(std::upper_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin(),
                       cdf_.size() - 1));
  z->resize(r);
  for (double& v : *z) v = rng.Normal();
  const float* mu = &centres_[size_t{c} * d];
  const float* b = &bases_[size_t{c} * d * r];
  const double noise = spec_.noise;
  for (uint32_t t = 0; t < d; ++t) {
    double acc = mu[t];
    const float* bt = b + size_t{t} * r;
    for (uint32_t k = 0; k < r; ++k) acc += double{bt[k]} * (*z)[k];
    x[t] = static_cast<float>(acc + noise * rng.Normal());
  }
}

uint32_t Mixture::ClusterOf(uint64_t i, uint32_t stream) const {
  Rng rng(Mix(spec_.seed * 4 + stream, i));
  const double u = rng.Uniform();
  return static_cast<uint32_t>(std::min<size_t>(
      std::upper_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin(), cdf_.size() - 1));
}

void Mixture::Rows(uint64_t first, uint64_t n, float* out, uint32_t stream) const {
  const uint32_t d = spec_.dim;
  std::vector<double> z;
  for (uint64_t j = 0; j < n; ++j) {
    float* x = out + j * d;
    Raw(first + j, stream, x, &z);
    if (spec_.kind == Kind::kSiftLike) {
      for (uint32_t t = 0; t < d; ++t) {
        const float v = std::round(std::max(x[t], 0.0f) * sift_scale_);
        x[t] = std::min(v, 255.0f);
      }
    } else {
      double s = 0;
      for (uint32_t t = 0; t < d; ++t) s += double{x[t]} * x[t];
      const float inv = s > 0 ? static_cast<float>(1.0 / std::sqrt(s)) : 0.0f;
      for (uint32_t t = 0; t < d; ++t) x[t] *= inv;
    }
  }
}

}  // namespace zoom::datagen
