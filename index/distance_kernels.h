// File: index/distance_kernels.h
//
// The hot-path kernels of the preview and the re-rank: exact L2 / inner
// product, PQ distance tables and PQ code scans (asymmetric distance
// computation, ADC). Debian's FAISS is built without AVX2, so these are our
// own, dispatched at run time to AVX-512F, AVX2+FMA or scalar code (the
// first call picks the best level the CPU has, and at AVX-512 times each
// kernel family against its AVX2 version once: KernelChoices();
// SetSimdLevelForTesting forces a level's own table). Every kernel is checked against the scalar reference in
// tests/index/distance_kernels_test.cc.
//
// All functions are thread-safe and allocate nothing. Pointers need no
// particular alignment. Sizes are counts of elements.
//
// Overflow: for vectors inside zoomd's magnitude rule (norm <= 1e18, see
// common/vector_limits.h) every result is finite. Beyond it the result is
// IEEE arithmetic's, the same at every SIMD level: L2Sqr (and the tables)
// saturate to +Inf; an inner product whose terms overflow to both signs is
// NaN. Callers validate input; the engine ranks a NaN score last.
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
// The kernels in use, for logs and benchmark headers: the level's name, and
// at AVX-512 the kernel families that use AVX2 code instead because their
// AVX-512 version ran over 1.25x slower on this CPU at the first call
// (e.g. "avx512 (avx2 for pq_tables, pq_adc: faster here)"; see
// distance_kernels.cc). ZOOM_KERNEL_CALIBRATION=0 in the environment keeps
// every AVX-512 kernel.
const char* KernelChoices();
const char* SimdLevelName(SimdLevel level);
// Uses `level` (capped at DetectedSimdLevel()) from now on. Tests only; not
// thread-safe against concurrent kernel calls.
void SetSimdLevelForTesting(SimdLevel level);
// Back to the default table (as at the first call, calibration included).
void UseDefaultKernelsForTesting();

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

// PQ with 4-bit codes scanned in blocks of 32 ("fast scan", after Andre,
// Kermarrec and Le Scouarnec, VLDB 2015): 16 centroids per sub-quantiser, so
// a query's table for one sub-quantiser is 16 bytes and fits one SIMD
// register; a shuffle looks up 16 (AVX2: 32) codes at once.
inline constexpr size_t kPq4Centroids = 16;
inline constexpr size_t kPq4BlockSize = 32;
// Sub-quantisers are processed in pairs; an odd m gets a padding
// sub-quantiser whose codes and table entries are 0.
inline constexpr size_t Pq4PaddedM(size_t m) { return (m + 1) & ~size_t{1}; }
// Bytes of one block of 32 codes: Pq4PaddedM(m) * 16 (m / 2 per code).
inline constexpr size_t Pq4BlockBytes(size_t m) { return Pq4PaddedM(m) * 16; }

// Block layout: byte j * 16 + (s % 16) holds sub-quantiser j's code of slot
// s in its low nibble for s < 16, in its high nibble for 16 <= s < 32.
// Writes slot `slot` (< 32) of `block` from code[0, m) (values < 16).
void Pq4SetCode(uint8_t* block, size_t m, size_t slot, const uint8_t* code);
// Reads slot `slot` of `block` into code[0, m).
void Pq4GetCode(const uint8_t* block, size_t m, size_t slot, uint8_t* code);

// Quantises a float table (m * 16 floats, sub-quantiser-major) to bytes:
// lut (Pq4PaddedM(m) * 16 bytes) = round((table - min_j) / scale) with one
// scale for all j, so that sum_j table[j][c_j] ~= bias + scale * sum_j
// lut[j][c_j] (error at most m * scale / 2). Entries are at most
// Pq4LutMax(m) (255 up to m = 257, then 65535 / m), so that every sum fits
// the uint16 results of Pq4ScanBlocks: more sub-quantisers get a coarser
// table (m = 784: 83 levels), not an overflow.
void Pq4QuantizeTable(const float* table, size_t m, uint8_t* lut, float* bias,
                      float* scale);
inline constexpr size_t kPq4MaxM = 1024;
inline constexpr uint32_t Pq4LutMax(size_t m) {
  return m <= 257 ? 255u : static_cast<uint32_t>(65535 / m);
}
// out[b * 32 + s] = sum_j lut[j * 16 + code_j(block b, slot s)] for
// b < nblocks, s < 32. `blocks` is nblocks * Pq4BlockBytes(m) bytes;
// REQUIRES m <= kPq4MaxM and every lut entry <= Pq4LutMax(m) (the sums
// wrap otherwise).
void Pq4ScanBlocks(const uint8_t* lut, const uint8_t* blocks, size_t nblocks,
                   size_t m, uint16_t* out);
// The scalar reference of Pq4ScanBlocks (tests and benchmarks).
void Pq4ScanBlocksScalar(const uint8_t* lut, const uint8_t* blocks,
                         size_t nblocks, size_t m, uint16_t* out);

}  // namespace zoom::index

#endif  // ZOOM_INDEX_DISTANCE_KERNELS_H_
