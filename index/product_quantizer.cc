#include "index/product_quantizer.h"

#include <faiss/VectorTransform.h>
#include <faiss/impl/FaissException.h>
#include <faiss/impl/ProductQuantizer.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <numeric>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/orthonormal.h"
#include "common/status_macros.h"
#include "index/distance_kernels.h"
#include "index/index_internal.h"

namespace zoom::index {
namespace {

// A random orthonormal d x d matrix (row-major): Gaussian rows from the
// seed, orthonormalised in double.
std::vector<float> RandomRotation(uint32_t d, uint64_t seed) {
  std::mt19937_64 rng(seed ^ 0x52614269745175ull);  // "RaBitQu"
  std::normal_distribution<double> gauss(0.0, 1.0);
  std::vector<double> a(size_t{d} * d);
  do {  // a degenerate draw (never in practice): draw again
    for (double& v : a) v = gauss(rng);
  } while (!OrthonormalizeRows(a.data(), d));
  return std::vector<float>(a.begin(), a.end());
}

// The rabitq code's centroids: every sub-quantiser's 16 levels u - 7.5.
std::vector<float> RabitqLevels(uint32_t m) {
  std::vector<float> c(size_t{m} * kPq4Centroids);
  for (size_t i = 0; i < c.size(); ++i) {
    c[i] = static_cast<float>(i % kPq4Centroids) - 7.5f;
  }
  return c;
}

}  // namespace

const char* CodeKindName(CodeKind code) {
  return code == CodeKind::kRabitq ? "rabitq" : "pq";
}

absl::StatusOr<CodeKind> ParseCodeKind(std::string_view name) {
  if (name == "pq") return CodeKind::kPq;
  if (name == "rabitq") return CodeKind::kRabitq;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown code '", std::string(name.substr(0, 32)), "'; use pq or rabitq"));
}

absl::Status PqOptions::Validate(uint32_t dim) const {
  if (code != CodeKind::kPq && code != CodeKind::kRabitq) {
    return absl::InvalidArgumentError("unknown code kind; use pq or rabitq");
  }
  if (code == CodeKind::kRabitq) {
    if (dim > kPq4MaxM) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the rabitq code is for dim <= ", kPq4MaxM, " (one 4-bit sub-code a dimension, at most ",
          kPq4MaxM, " in the fast scan); dim is ", dim, ": use the pq code"));
    }
    if (m != dim || nbits != 4) {
      return absl::InvalidArgumentError(
          absl::StrCat("the rabitq code has one 4-bit sub-code a dimension: pq_m must be ", dim,
                       " (or 0) and pq_nbits 4 (or 0); got pq_m ", m, ", pq_nbits ", nbits));
    }
    if (opq) {
      return absl::InvalidArgumentError(
          "the rabitq code has its own random rotation: opq must be off");
    }
  }
  if (m == 0 || m > dim) {
    return absl::InvalidArgumentError(
        absl::StrCat("pq_m ", m, " out of range 1..", dim, " (the dimension)"));
  }
  if (nbits != 8 && nbits != 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("pq_nbits ", nbits, " is not supported; use 8 or 4"));
  }
  if (nbits == 4 && m > kPq4MaxM) {
    return absl::InvalidArgumentError(
        absl::StrCat("pq_m ", m, " with pq_nbits 4: at most ", kPq4MaxM, " sub-quantisers"));
  }
  if (train_iterations == 0 || train_iterations > 1000) {
    return absl::InvalidArgumentError("train_iterations out of range 1..1000");
  }
  return absl::OkStatus();
}

absl::StatusOr<ProductQuantizer> ProductQuantizer::Train(
    const float* x, size_t n, uint32_t dim, const PqOptions& options,
    absl::Span<const uint32_t> rows) {
  ZOOM_RETURN_IF_ERROR(options.Validate(dim));
  const size_t ksub = size_t{1} << options.nbits;
  if (!rows.empty()) n = rows.size();
  if (n < ksub) {
    return absl::InvalidArgumentError(absl::StrCat(
        "PQ training needs at least ", ksub, " vectors, got ", n));
  }
  ProductQuantizer pq;
  pq.nbits_ = options.nbits;
  pq.dim_ = dim;
  pq.m_ = options.m;
  pq.padded_dim_ = (dim + options.m - 1) / options.m * options.m;
  pq.code_ = options.code;
  if (options.code == CodeKind::kRabitq) {
    // Nothing to learn from x: a random rotation and the fixed levels.
    pq.rotation_ = RandomRotation(dim, options.seed);
    pq.centroids_ = RabitqLevels(dim);
    return pq;
  }
  // Sample the training set.
  std::vector<size_t> pick(n);
  if (rows.empty()) {
    std::iota(pick.begin(), pick.end(), 0);
  } else {
    std::copy(rows.begin(), rows.end(), pick.begin());
  }
  const size_t nt = std::min<size_t>(n, std::max<size_t>(options.max_train_points, ksub));
  if (nt < n) {
    std::mt19937_64 rng(options.seed);
    std::shuffle(pick.begin(), pick.end(), rng);
    pick.resize(nt);
  }
  std::vector<float> train(nt * size_t{dim});
  for (size_t i = 0; i < nt; ++i) {
    std::memcpy(train.data() + i * dim, x + pick[i] * dim, dim * sizeof(float));
  }
  internal::LibraryThreadsGuard threads(1);  // see BuildIndex
  try {
    std::vector<float> xt(nt * size_t{pq.padded_dim_}, 0.0f);
    if (options.opq) {
      faiss::OPQMatrix opq(static_cast<int>(dim), static_cast<int>(options.m),
                           static_cast<int>(pq.padded_dim_));
      opq.niter = static_cast<int>(options.opq_iterations);
      opq.niter_pq = 4;
      opq.verbose = false;
      opq.max_train_points = nt;
      opq.train(static_cast<faiss::Index::idx_t>(nt), train.data());
      pq.rotation_ = opq.A;  // padded_dim x dim
      if (pq.rotation_.size() != size_t{pq.padded_dim_} * dim) {
        return absl::InternalError("OPQ returned a matrix of unexpected size");
      }
    }
    for (size_t i = 0; i < nt; ++i) pq.Transform(train.data() + i * dim, xt.data() + i * pq.padded_dim_);
    faiss::ProductQuantizer fpq(pq.padded_dim_, options.m, options.nbits);
    fpq.cp.niter = static_cast<int>(options.train_iterations);
    fpq.cp.seed = static_cast<int>(options.seed);
    fpq.cp.max_points_per_centroid = static_cast<int>(nt);  // no resampling
    fpq.cp.min_points_per_centroid = 1;  // small sets are fine; no warning
    fpq.verbose = false;
    fpq.train(static_cast<faiss::Index::idx_t>(nt), xt.data());
    pq.centroids_ = fpq.centroids;
  } catch (const faiss::FaissException& e) {
    if (internal::BuildCancelled()) return internal::BuildCancelledError();  // the hook
    return absl::InternalError(absl::StrCat("FAISS PQ training failed: ", e.what()));
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("out of memory during PQ training");
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("PQ training failed: ", e.what()));
  }
  return pq;
}

uint64_t ProductQuantizer::ResidentBytes() const {
  return (centroids_.size() + rotation_.size()) * sizeof(float);
}

void ProductQuantizer::Transform(const float* x, float* out) const {
  if (rotation_.empty()) {
    std::memcpy(out, x, dim_ * sizeof(float));
    std::fill(out + dim_, out + padded_dim_, 0.0f);
    return;
  }
  for (uint32_t i = 0; i < padded_dim_; ++i) {
    out[i] = InnerProduct(rotation_.data() + size_t{i} * dim_, x, dim_);
  }
}

float ProductQuantizer::EncodeRabitq(const float* xt, uint8_t* code) const {
  const uint32_t d = m_;  // = padded_dim_ = dim_
  double norm2 = 0, amax = 0;
  for (uint32_t j = 0; j < d; ++j) {
    norm2 += double{xt[j]} * xt[j];
    amax = std::max(amax, std::fabs(double{xt[j]}));
  }
  if (!(norm2 > 0) || !std::isfinite(norm2)) {
    std::fill(code, code + d, uint8_t{8});
    return 0.0f;
  }
  // Scales from 0.45 to 1 of the one that puts the largest coordinate at
  // the edge of the outer level: below 0.45 the levels are mostly unused.
  constexpr double kHalf = 7.5;
  double best_cos = -2, best_t = 0;
  for (int step = 0; step < kRabitqScaleSteps; ++step) {
    const double f = 0.45 + 0.55 * step / (kRabitqScaleSteps - 1);
    const double t = (kHalf + 0.5) * f / amax;
    double dot = 0, yy = 0;
    for (uint32_t j = 0; j < d; ++j) {
      const double u = std::clamp(std::floor(xt[j] * t + kHalf + 0.5), 0.0, 15.0);
      const double y = u - kHalf;
      dot += y * xt[j];
      yy += y * y;
    }
    const double cos = dot / std::sqrt(yy * norm2);
    if (cos > best_cos) {
      best_cos = cos;
      best_t = t;
    }
  }
  double dot = 0;
  for (uint32_t j = 0; j < d; ++j) {
    const double u = std::clamp(std::floor(xt[j] * best_t + kHalf + 0.5), 0.0, 15.0);
    code[j] = static_cast<uint8_t>(u);
    dot += (u - kHalf) * xt[j];
  }
  return dot > 0 ? static_cast<float>(norm2 / dot) : 0.0f;
}

float ProductQuantizer::EncodeTransformed(const float* xt, uint8_t* code) const {
  if (code_ == CodeKind::kRabitq) return EncodeRabitq(xt, code);
  const uint32_t ds = dsub();
  if (nbits_ != 8) {
    float table[kPq4Centroids];
    for (uint32_t j = 0; j < m_; ++j) {
      SmallL2Table(xt + size_t{j} * ds, j, table);
      code[j] = static_cast<uint8_t>(std::min_element(table, table + ksub()) - table);
    }
    return 1.0f;
  }
  // Nearest centroid per sub-space, from the L2 table of xt itself.
  float table[kPqCentroids * 64];
  for (uint32_t j0 = 0; j0 < m_; j0 += 64) {
    const uint32_t mm = std::min<uint32_t>(64, m_ - j0);
    PqL2Table(xt + size_t{j0} * ds, centroids_.data() + size_t{j0} * kPqCentroids * ds,
              mm, ds, table);
    for (uint32_t j = 0; j < mm; ++j) {
      const float* t = table + size_t{j} * kPqCentroids;
      code[j0 + j] = static_cast<uint8_t>(std::min_element(t, t + kPqCentroids) - t);
    }
  }
  return 1.0f;
}

void ProductQuantizer::Encode(const float* x, size_t n, uint8_t* codes) const {
  std::vector<float> xt(padded_dim_);
  for (size_t i = 0; i < n; ++i) {
    Transform(x + i * dim_, xt.data());
    EncodeTransformed(xt.data(), codes + i * m_);
  }
}

void ProductQuantizer::DecodeTransformed(const uint8_t* code, float* out) const {
  const uint32_t ds = dsub();
  for (uint32_t j = 0; j < m_; ++j) {
    std::memcpy(out + size_t{j} * ds,
                centroids_.data() + (size_t{j} * ksub() + code[j]) * ds,
                ds * sizeof(float));
  }
}

void ProductQuantizer::SmallL2Table(const float* qj, uint32_t j, float* table) const {
  const uint32_t ds = dsub(), k = ksub();
  const float* c = centroids_.data() + size_t{j} * k * ds;
  for (uint32_t i = 0; i < k; ++i) table[i] = L2Sqr(qj, c + size_t{i} * ds, ds);
}

void ProductQuantizer::L2Table(const float* qt, float* table) const {
  if (nbits_ == 8) {
    PqL2Table(qt, centroids_.data(), m_, dsub(), table);
    return;
  }
  for (uint32_t j = 0; j < m_; ++j) {
    SmallL2Table(qt + size_t{j} * dsub(), j, table + size_t{j} * ksub());
  }
}

void ProductQuantizer::IpTable(const float* qt, float* table) const {
  if (nbits_ == 8) {
    PqIpTable(qt, centroids_.data(), m_, dsub(), table);
    return;
  }
  const uint32_t ds = dsub(), k = ksub();
  for (uint32_t j = 0; j < m_; ++j) {
    const float* c = centroids_.data() + size_t{j} * k * ds;
    for (uint32_t i = 0; i < k; ++i) {
      table[size_t{j} * k + i] = InnerProduct(qt + size_t{j} * ds, c + size_t{i} * ds, ds);
    }
  }
}

void ProductQuantizer::Save(BinaryWriter& w) const {
  w.Put<uint32_t>(dim_);
  w.Put<uint32_t>(padded_dim_);
  w.Put<uint32_t>(m_);
  w.Put<uint32_t>(nbits_);
  w.PutVector(centroids_);
  w.PutVector(rotation_);
}

absl::Status ProductQuantizer::Load(BinaryReader& r, CodeKind code) {
  uint32_t nbits = 0;
  ZOOM_RETURN_IF_ERROR(r.Get(&dim_));
  ZOOM_RETURN_IF_ERROR(r.Get(&padded_dim_));
  ZOOM_RETURN_IF_ERROR(r.Get(&m_));
  ZOOM_RETURN_IF_ERROR(r.Get(&nbits));
  ZOOM_RETURN_IF_ERROR(r.GetVector(&centroids_));
  ZOOM_RETURN_IF_ERROR(r.GetVector(&rotation_));
  if ((nbits != 8 && nbits != 4) || m_ == 0 || dim_ == 0 || padded_dim_ < dim_ ||
      padded_dim_ % m_ != 0 ||
      centroids_.size() != size_t{m_} * (size_t{1} << nbits) * (padded_dim_ / m_) ||
      (!rotation_.empty() && rotation_.size() != size_t{padded_dim_} * dim_)) {
    return r.Corrupt("inconsistent product quantizer");
  }
  nbits_ = nbits;
  code_ = code;
  if (code == CodeKind::kRabitq) {
    // The fixed levels and a rotation (rows of unit length: a corrupt one
    // could make every estimate wrong, or overflow).
    if (nbits != 4 || m_ != dim_ || padded_dim_ != dim_ || m_ > kPq4MaxM ||
        rotation_.size() != size_t{dim_} * dim_ || centroids_ != RabitqLevels(m_)) {
      return r.Corrupt("inconsistent rabitq code");
    }
    for (uint32_t i = 0; i < dim_; ++i) {
      const float n2 = InnerProduct(rotation_.data() + size_t{i} * dim_,
                                    rotation_.data() + size_t{i} * dim_, dim_);
      if (!(std::fabs(n2 - 1.0f) < 1e-3f)) return r.Corrupt("rabitq rotation not orthonormal");
    }
  }
  return absl::OkStatus();
}

}  // namespace zoom::index
