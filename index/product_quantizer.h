// File: index/product_quantizer.h
//
// ProductQuantizer: 8-bit (256 centroids per sub-quantiser) or 4-bit (16,
// for the fast scan of ivf_hnsw_pq) product quantisation of vectors of any
// dimension. Codebooks are trained with FAISS k-means (optionally after an
// OPQ rotation); encoding and query tables use our own kernels. Codes are
// one byte per sub-quantiser in this API whatever nbits is; a 4-bit index
// packs them (distance_kernels.h, Pq4SetCode).
//
// A dimension that m does not divide is zero-padded to padded_dim() =
// ceil(dim / m) * m (padding changes no distance); with OPQ the trained
// rotation maps dim -> padded_dim directly (rotate-and-project).
//
// Thread safety: const methods are safe from many threads.
#ifndef ZOOM_INDEX_PRODUCT_QUANTIZER_H_
#define ZOOM_INDEX_PRODUCT_QUANTIZER_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/binary_io.h"

namespace zoom::index {

struct PqOptions {
  // Sub-quantisers (code bytes per vector). REQUIRES: 1 <= m <= dim.
  uint32_t m = 16;
  // Bits per sub-quantiser: 8 or 4 (4: ivf_hnsw_pq only, m <= 256).
  uint32_t nbits = 8;
  // Learn an OPQ rotation first. Default: false.
  bool opq = false;
  // OPQ outer iterations (each trains a PQ and solves a Procrustes step).
  uint32_t opq_iterations = 20;
  // k-means iterations per sub-quantiser.
  uint32_t train_iterations = 20;
  // Training points used at most (a sample when more are given).
  uint32_t max_train_points = 32768;  // 128 per centroid
  uint64_t seed = 1234;

  absl::Status Validate(uint32_t dim) const;
};

class ProductQuantizer {
 public:
  ProductQuantizer() = default;

  // Trains on x (n * dim floats). Errors: InvalidArgument for bad options
  // or n < ksub (too few points to train the centroids); Internal when
  // FAISS throws.
  // `rows` (when not empty) restricts training to those rows of x (e.g.
  // the live points); the rule above then counts rows.size().
  static absl::StatusOr<ProductQuantizer> Train(const float* x, size_t n,
                                                uint32_t dim,
                                                const PqOptions& options,
                                                absl::Span<const uint32_t> rows = {});

  uint32_t dim() const { return dim_; }
  uint32_t padded_dim() const { return padded_dim_; }
  uint32_t m() const { return m_; }
  uint32_t dsub() const { return padded_dim_ / m_; }
  size_t code_size() const { return m_; }
  uint32_t nbits() const { return nbits_; }
  // Centroids per sub-quantiser: 1 << nbits.
  uint32_t ksub() const { return 1u << nbits_; }
  bool has_rotation() const { return !rotation_.empty(); }
  // Bytes kept in memory (centroids + rotation).
  uint64_t ResidentBytes() const;

  // Maps x (dim floats) into the quantiser's space (padded_dim floats):
  // rotation when OPQ, else a copy with zero padding.
  void Transform(const float* x, float* out) const;
  // Encodes n vectors (n * dim floats) to n * code_size() bytes.
  void Encode(const float* x, size_t n, uint8_t* codes) const;
  // Encodes one already-transformed vector (padded_dim floats).
  void EncodeTransformed(const float* xt, uint8_t* code) const;
  // Reconstructs a code in the quantiser's space (padded_dim floats).
  void DecodeTransformed(const uint8_t* code, float* out) const;

  // ADC tables (m * ksub() floats) for a transformed query (padded_dim
  // floats).
  void L2Table(const float* qt, float* table) const;
  void IpTable(const float* qt, float* table) const;

  void Save(BinaryWriter& w) const;
  absl::Status Load(BinaryReader& r);

 private:
  // table[0, ksub) = L2 of the sub-vector qj (dsub floats) to sub-quantiser
  // j's centroids (the 4-bit path).
  void SmallL2Table(const float* qj, uint32_t j, float* table) const;

  uint32_t dim_ = 0;
  uint32_t padded_dim_ = 0;
  uint32_t m_ = 0;
  uint32_t nbits_ = 8;
  std::vector<float> centroids_;  // m * ksub * dsub, FAISS layout
  std::vector<float> rotation_;   // padded_dim * dim, row-major; empty = none
};

}  // namespace zoom::index

#endif  // ZOOM_INDEX_PRODUCT_QUANTIZER_H_
