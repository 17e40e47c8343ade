// File: index/distance_kernels.h
//
// The hot-path kernels of the preview and the re-rank: exact L2 / inner
// product, PQ distance tables and PQ code scans (asymmetric distance
// computation, ADC). Debian's FAISS is built without AVX2, so these are our
// own, dispatched at run time to AVX-512F, AVX2+FMA or scalar code (the
// first call picks the best level the CPU has; SetSimdLevelForTesting forces
// a lower one). Every kernel is checked against the scalar reference in
// tests/index/distance_kernels_test.cc.
//
// All functions are thread-safe and allocate nothing. Pointers need no
// particular alignment. Sizes are counts of elements.
#ifndef ZOOM_INDEX_DISTANCE_KERNELS_H_
#define ZOOM_INDEX_DISTANCE_KERNELS_H_

#include <cstddef>
#include <cstdint>

namespace zoom::index {

enum class SimdLevel { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

// The level in use (the best the CPU supports unless lowered for tests).
SimdLevel ActiveSimdLevel();
// The best level this CPU supports.
SimdLevel DetectedSimdLevel();
const char* SimdLevelName(SimdLevel level);
// Uses `level` (capped at DetectedSimdLevel()) from now on. Tests only; not
// thread-safe against concurrent kernel calls.
void SetSimdLevelForTesting(SimdLevel level);

// Squared Euclidean distance of a[0, d) and b[0, d).
float L2Sqr(const float* a, const float* b, size_t d);
// Inner product of a[0, d) and b[0, d).
float InnerProduct(const float* a, const float* b, size_t d);

// out[i] = L2Sqr(q, x + i * d, d) for i < n; x is n * d floats, row-major.
void L2SqrBatch(const float* q, const float* x, size_t n, size_t d, float* out);
// out[i] = InnerProduct(q, x + i * d, d) for i < n.
void InnerProductBatch(const float* q, const float* x, size_t n, size_t d,
                       float* out);

// PQ with 8-bit codes: m sub-quantisers of 256 centroids of dsub dims each.
inline constexpr size_t kPqCentroids = 256;

// Distance tables of query q (m * dsub floats) to every centroid:
// table[j * 256 + c] = L2Sqr(q_j, centroids[(j * 256 + c) * dsub ...], dsub)
// where q_j = q + j * dsub. `centroids` is m * 256 * dsub floats (FAISS's
// ProductQuantizer::centroids layout); `table` is m * 256 floats.
void PqL2Table(const float* q, const float* centroids, size_t m, size_t dsub,
               float* table);
// As PqL2Table with inner products.
void PqIpTable(const float* q, const float* centroids, size_t m, size_t dsub,
               float* table);

// ADC of one code (m bytes): sum over j of table[j * 256 + code[j]].
float PqAdc(const float* table, const uint8_t* code, size_t m);
// out[i] = PqAdc(table, codes + i * m, m) for i < n; codes is n * m bytes.
void PqAdcScan(const float* table, const uint8_t* codes, size_t n, size_t m,
               float* out);
// out[i] = PqAdc(table, codes + ids[i] * m, m) for i < n (gathered codes,
// e.g. the neighbours of a graph node).
void PqAdcGather(const float* table, const uint8_t* codes, const uint32_t* ids,
                 size_t n, size_t m, float* out);

}  // namespace zoom::index

#endif  // ZOOM_INDEX_DISTANCE_KERNELS_H_
