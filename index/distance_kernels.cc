// File: index/distance_kernels.cc
//
// Three implementations of every kernel (scalar, AVX2+FMA, AVX-512F) in one
// file. The SIMD ones are compiled with per-function target attributes, never
// with global -m flags, so this file (and every inline function it pulls from
// headers) stays valid on any x86-64; only functions reached through the
// dispatch table after a CPU check execute AVX2 or AVX-512 instructions.
//
// Dispatch: one pointer to a constant table of function pointers, resolved
// on first use from DetectedSimdLevel() and replaced by
// SetSimdLevelForTesting(). A kernel call costs one load, one
// well-predicted branch and one indirect call.
//
// Design notes (measured on AMD EPYC Zen 3, see
// bench/kernels_microbench.cc):
// - L2 / IP: four 8-wide (AVX2) or 16-wide (AVX-512) accumulators to hide
//   the FMA latency, a one-vector loop, then one masked load for d % width,
//   so no element past the end is ever read.
// - PQ tables: the centroid layout is [j][c][dsub]. For dsub = 1, 2, 4 (and
//   on AVX-512 every dsub dividing 16) a block of consecutive centroids is
//   read with contiguous loads against q tiled to the same period and the
//   per-centroid sums are formed with horizontal adds / permutes. For other
//   dsub each centroid is accumulated in its own vector (the last chunk
//   masked) and 8 (16) such vectors are reduced to one vector of 8 (16)
//   table entries at once; on AVX2, dsub <= 32 gets straight-line code with
//   q_j in registers (one template instance per chunk count). Gathers across
//   centroids were measured 1.1-3x slower than this on Zen 3.
// - PQ ADC (8-bit codes): on Zen 3 `vgatherdps` is slower (~11 cycles per 8
//   lookups) than scalar lookups into four independent accumulators
//   (~0.8 cycles per lookup: a one-accumulator loop is bound by the add
//   latency, not by the loads). The AVX2 level therefore uses the
//   four-accumulator scalar loop with 8-byte code loads; the AVX-512 level
//   has 16-wide gathers, which on the first AVX-512 machine measured (a
//   virtualised Xeon) ran 10-25x slower than the scalar loop: the default
//   table at that level is calibrated per kernel family at the first call
//   (below, "Per-kernel calibration"). Scans prefetch codes ahead; gathered
//   scans prefetch the rows of ids a few positions ahead.
#include "index/distance_kernels.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define ZOOM_KERNELS_X86 1
#define ZOOM_TARGET_AVX2 __attribute__((target("avx2,fma")))
#define ZOOM_TARGET_AVX512 __attribute__((target("avx512f,avx2,fma")))
#else
#define ZOOM_KERNELS_X86 0
#endif

namespace zoom::index {
namespace {

constexpr size_t kK = kPqCentroids;

// How many code rows ahead PqAdcScan / PqAdcGather prefetch.
constexpr size_t kScanPrefetchRows = 8;
constexpr size_t kGatherPrefetchRows = 4;

// Prefetches the (at most two) cache lines of one m-byte code row.
inline void PrefetchCode(const uint8_t* code, size_t m) {
  __builtin_prefetch(code);
  __builtin_prefetch(code + m - 1);
}

// ---------------------------------------------------------------------------
// Scalar: the straightforward loops (the fallback level and the baseline).
// ---------------------------------------------------------------------------

float L2SqrScalar(const float* a, const float* b, size_t d) {
  float s = 0;
  for (size_t i = 0; i < d; ++i) {
    const float t = a[i] - b[i];
    s += t * t;
  }
  return s;
}

float InnerProductScalar(const float* a, const float* b, size_t d) {
  float s = 0;
  for (size_t i = 0; i < d; ++i) s += a[i] * b[i];
  return s;
}

void L2SqrBatchScalar(const float* q, const float* x, size_t n, size_t d,
                      float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = L2SqrScalar(q, x + i * d, d);
}

void InnerProductBatchScalar(const float* q, const float* x, size_t n, size_t d,
                             float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = InnerProductScalar(q, x + i * d, d);
}

void PqL2TableScalar(const float* q, const float* centroids, size_t m,
                     size_t dsub, float* table) {
  for (size_t j = 0; j < m; ++j) {
    for (size_t c = 0; c < kK; ++c) {
      table[j * kK + c] =
          L2SqrScalar(q + j * dsub, centroids + (j * kK + c) * dsub, dsub);
    }
  }
}

void PqIpTableScalar(const float* q, const float* centroids, size_t m,
                     size_t dsub, float* table) {
  for (size_t j = 0; j < m; ++j) {
    for (size_t c = 0; c < kK; ++c) {
      table[j * kK + c] = InnerProductScalar(
          q + j * dsub, centroids + (j * kK + c) * dsub, dsub);
    }
  }
}

float PqAdcScalar(const float* table, const uint8_t* code, size_t m) {
  float s = 0;
  for (size_t j = 0; j < m; ++j) s += table[j * kK + code[j]];
  return s;
}

void PqAdcScanScalar(const float* table, const uint8_t* codes, size_t n,
                     size_t m, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = PqAdcScalar(table, codes + i * m, m);
}

void PqAdcGatherScalar(const float* table, const uint8_t* codes,
                       const uint32_t* ids, size_t n, size_t m, float* out) {
  for (size_t i = 0; i < n; ++i) {
    out[i] = PqAdcScalar(table, codes + size_t{ids[i]} * m, m);
  }
}

#if ZOOM_KERNELS_X86

// ---------------------------------------------------------------------------
// ADC with instruction-level parallelism (x86 only: relies on little-endian
// 8-byte code loads). Used by the AVX2 level and for AVX-512 tails.
// ---------------------------------------------------------------------------

// sum over j < m of table[j * 256 + code[j]], in four independent chains.
inline float AdcIlp(const float* table, const uint8_t* code, size_t m) {
  float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  size_t j = 0;
  for (; j + 8 <= m; j += 8) {
    uint64_t w;
    std::memcpy(&w, code + j, sizeof(w));  // code[j] is the low byte
    const float* t = table + j * kK;
    s0 += t[w & 0xff];
    s1 += t[1 * kK + ((w >> 8) & 0xff)];
    s2 += t[2 * kK + ((w >> 16) & 0xff)];
    s3 += t[3 * kK + ((w >> 24) & 0xff)];
    s0 += t[4 * kK + ((w >> 32) & 0xff)];
    s1 += t[5 * kK + ((w >> 40) & 0xff)];
    s2 += t[6 * kK + ((w >> 48) & 0xff)];
    s3 += t[7 * kK + (w >> 56)];
  }
  for (; j + 2 <= m; j += 2) {
    s0 += table[j * kK + code[j]];
    s1 += table[(j + 1) * kK + code[j + 1]];
  }
  if (j < m) s2 += table[j * kK + code[j]];
  return (s0 + s1) + (s2 + s3);
}

float PqAdcIlp(const float* table, const uint8_t* code, size_t m) {
  return AdcIlp(table, code, m);
}

void PqAdcScanIlp(const float* table, const uint8_t* codes, size_t n, size_t m,
                  float* out) {
  for (size_t i = 0; i < n; ++i) {
    if (i + kScanPrefetchRows < n) {
      __builtin_prefetch(codes + (i + kScanPrefetchRows) * m);
    }
    out[i] = AdcIlp(table, codes + i * m, m);
  }
}

void PqAdcGatherIlp(const float* table, const uint8_t* codes,
                    const uint32_t* ids, size_t n, size_t m, float* out) {
  if (m == 0) {
    for (size_t i = 0; i < n; ++i) out[i] = 0;
    return;
  }
  for (size_t i = 0; i < n && i < kGatherPrefetchRows; ++i) {
    PrefetchCode(codes + size_t{ids[i]} * m, m);
  }
  for (size_t i = 0; i < n; ++i) {
    if (i + kGatherPrefetchRows < n) {
      PrefetchCode(codes + size_t{ids[i + kGatherPrefetchRows]} * m, m);
    }
    out[i] = AdcIlp(table, codes + size_t{ids[i]} * m, m);
  }
}

// ---------------------------------------------------------------------------
// AVX2 + FMA
// ---------------------------------------------------------------------------

// kTailMask + 8 - r, read as 8 ints, enables the first r lanes (0 <= r <= 8).
alignas(64) constexpr int32_t kTailMask[16] = {-1, -1, -1, -1, -1, -1, -1, -1,
                                               0,  0,  0,  0,  0,  0,  0,  0};

ZOOM_TARGET_AVX2 inline __m256i TailMask8(size_t r) {
  return _mm256_loadu_si256(
      reinterpret_cast<const __m256i*>(kTailMask + 8 - r));
}

ZOOM_TARGET_AVX2 inline float HorizontalSum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Lane i of the result is the sum of the 8 lanes of v_i.
ZOOM_TARGET_AVX2 inline __m256 Reduce8(__m256 v0, __m256 v1, __m256 v2,
                                       __m256 v3, __m256 v4, __m256 v5,
                                       __m256 v6, __m256 v7) {
  // hadd(a, b) = [a0+a1 a2+a3 b0+b1 b2+b3 | a4+a5 a6+a7 b4+b5 b6+b7].
  const __m256 h01 = _mm256_hadd_ps(v0, v1);
  const __m256 h23 = _mm256_hadd_ps(v2, v3);
  const __m256 h45 = _mm256_hadd_ps(v4, v5);
  const __m256 h67 = _mm256_hadd_ps(v6, v7);
  // [v0.lo v1.lo v2.lo v3.lo | v0.hi v1.hi v2.hi v3.hi], each a 4-lane sum.
  const __m256 h0123 = _mm256_hadd_ps(h01, h23);
  const __m256 h4567 = _mm256_hadd_ps(h45, h67);
  const __m256 lo = _mm256_permute2f128_ps(h0123, h4567, 0x20);
  const __m256 hi = _mm256_permute2f128_ps(h0123, h4567, 0x31);
  return _mm256_add_ps(lo, hi);
}

// Lane i of the result is the sum of the 8 lanes of v_i.
ZOOM_TARGET_AVX2 inline __m128 Reduce4(__m256 v0, __m256 v1, __m256 v2,
                                       __m256 v3) {
  // [v0.lo v1.lo v2.lo v3.lo | v0.hi v1.hi v2.hi v3.hi], each a 4-lane sum.
  const __m256 h =
      _mm256_hadd_ps(_mm256_hadd_ps(v0, v1), _mm256_hadd_ps(v2, v3));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

// acc + (x - y)^2 (kL2) or acc + x * y, lane-wise.
template <bool kL2>
ZOOM_TARGET_AVX2 inline __m256 Accumulate8(__m256 acc, __m256 x, __m256 y) {
  if constexpr (kL2) {
    const __m256 t = _mm256_sub_ps(x, y);
    return _mm256_fmadd_ps(t, t, acc);
  } else {
    return _mm256_fmadd_ps(x, y, acc);
  }
}

// (x - y)^2 (kL2) or x * y, lane-wise.
template <bool kL2>
ZOOM_TARGET_AVX2 inline __m256 Term8(__m256 x, __m256 y) {
  if constexpr (kL2) {
    const __m256 t = _mm256_sub_ps(x, y);
    return _mm256_mul_ps(t, t);
  } else {
    return _mm256_mul_ps(x, y);
  }
}

// Lane-wise partial sums of the kernel over a[0, d), b[0, d).
template <bool kL2>
ZOOM_TARGET_AVX2 inline __m256 PartialSums8(const float* a, const float* b,
                                            size_t d) {
  __m256 acc0 = _mm256_setzero_ps();
  __m256 acc1 = _mm256_setzero_ps();
  __m256 acc2 = _mm256_setzero_ps();
  __m256 acc3 = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 32 <= d; i += 32) {
    acc0 =
        Accumulate8<kL2>(acc0, _mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i));
    acc1 = Accumulate8<kL2>(acc1, _mm256_loadu_ps(a + i + 8),
                            _mm256_loadu_ps(b + i + 8));
    acc2 = Accumulate8<kL2>(acc2, _mm256_loadu_ps(a + i + 16),
                            _mm256_loadu_ps(b + i + 16));
    acc3 = Accumulate8<kL2>(acc3, _mm256_loadu_ps(a + i + 24),
                            _mm256_loadu_ps(b + i + 24));
  }
  for (; i + 8 <= d; i += 8) {
    acc0 =
        Accumulate8<kL2>(acc0, _mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i));
  }
  if (i < d) {
    // Masked-off lanes load as 0 in both operands and add nothing.
    const __m256i mask = TailMask8(d - i);
    acc1 = Accumulate8<kL2>(acc1, _mm256_maskload_ps(a + i, mask),
                            _mm256_maskload_ps(b + i, mask));
  }
  return _mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3));
}

ZOOM_TARGET_AVX2 float L2SqrAvx2(const float* a, const float* b, size_t d) {
  return HorizontalSum8(PartialSums8<true>(a, b, d));
}

ZOOM_TARGET_AVX2 float InnerProductAvx2(const float* a, const float* b,
                                        size_t d) {
  return HorizontalSum8(PartialSums8<false>(a, b, d));
}

// Four rows at a time share the loads of q and the final reduction.
template <bool kL2>
ZOOM_TARGET_AVX2 void BatchAvx2(const float* q, const float* x, size_t n,
                                size_t d, float* out) {
  const size_t full = d & ~size_t{7};
  const __m256i mask = TailMask8(d - full);
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const float* x0 = x + i * d;
    const float* x1 = x0 + d;
    const float* x2 = x1 + d;
    const float* x3 = x2 + d;
    __m256 acc0 = _mm256_setzero_ps();
    __m256 acc1 = _mm256_setzero_ps();
    __m256 acc2 = _mm256_setzero_ps();
    __m256 acc3 = _mm256_setzero_ps();
    for (size_t k = 0; k < full; k += 8) {
      const __m256 qv = _mm256_loadu_ps(q + k);
      acc0 = Accumulate8<kL2>(acc0, _mm256_loadu_ps(x0 + k), qv);
      acc1 = Accumulate8<kL2>(acc1, _mm256_loadu_ps(x1 + k), qv);
      acc2 = Accumulate8<kL2>(acc2, _mm256_loadu_ps(x2 + k), qv);
      acc3 = Accumulate8<kL2>(acc3, _mm256_loadu_ps(x3 + k), qv);
    }
    if (full < d) {
      const __m256 qv = _mm256_maskload_ps(q + full, mask);
      acc0 = Accumulate8<kL2>(acc0, _mm256_maskload_ps(x0 + full, mask), qv);
      acc1 = Accumulate8<kL2>(acc1, _mm256_maskload_ps(x1 + full, mask), qv);
      acc2 = Accumulate8<kL2>(acc2, _mm256_maskload_ps(x2 + full, mask), qv);
      acc3 = Accumulate8<kL2>(acc3, _mm256_maskload_ps(x3 + full, mask), qv);
    }
    _mm_storeu_ps(out + i, Reduce4(acc0, acc1, acc2, acc3));
  }
  for (; i < n; ++i) {
    out[i] = HorizontalSum8(PartialSums8<kL2>(q, x + i * d, d));
  }
}

ZOOM_TARGET_AVX2 void L2SqrBatchAvx2(const float* q, const float* x, size_t n,
                                     size_t d, float* out) {
  BatchAvx2<true>(q, x, n, d, out);
}

ZOOM_TARGET_AVX2 void InnerProductBatchAvx2(const float* q, const float* x,
                                            size_t n, size_t d, float* out) {
  BatchAvx2<false>(q, x, n, d, out);
}

// dsub == 1: eight centroids are eight consecutive floats.
template <bool kL2>
ZOOM_TARGET_AVX2 void PqTableAvx2Dsub1(const float* q, const float* centroids,
                                       size_t m, float* table) {
  for (size_t j = 0; j < m; ++j) {
    const __m256 qv = _mm256_set1_ps(q[j]);
    const float* base = centroids + j * kK;
    float* t = table + j * kK;
    for (size_t c = 0; c < kK; c += 8) {
      _mm256_storeu_ps(t + c, Term8<kL2>(_mm256_loadu_ps(base + c), qv));
    }
  }
}

// dsub == 2: two vectors hold centroids c..c+7.
template <bool kL2>
ZOOM_TARGET_AVX2 void PqTableAvx2Dsub2(const float* q, const float* centroids,
                                       size_t m, float* table) {
  // hadd yields [c0 c1 c4 c5 | c2 c3 c6 c7].
  const __m256i order = _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7);
  for (size_t j = 0; j < m; ++j) {
    double q01;  // q[2j], q[2j + 1] as one 8-byte lane, broadcast 4 times
    std::memcpy(&q01, q + 2 * j, sizeof(q01));
    const __m256 qv = _mm256_castpd_ps(_mm256_set1_pd(q01));
    const float* b = centroids + j * kK * 2;
    float* t = table + j * kK;
    for (size_t c = 0; c < kK; c += 8, b += 16) {
      const __m256 t0 = Term8<kL2>(_mm256_loadu_ps(b), qv);
      const __m256 t1 = Term8<kL2>(_mm256_loadu_ps(b + 8), qv);
      _mm256_storeu_ps(t + c,
                       _mm256_permutevar8x32_ps(_mm256_hadd_ps(t0, t1), order));
    }
  }
}

// dsub == 4: four vectors hold centroids c..c+7.
template <bool kL2>
ZOOM_TARGET_AVX2 void PqTableAvx2Dsub4(const float* q, const float* centroids,
                                       size_t m, float* table) {
  // Two levels of hadd yield [c0 c2 c4 c6 | c1 c3 c5 c7].
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (size_t j = 0; j < m; ++j) {
    const __m128 q4 = _mm_loadu_ps(q + 4 * j);
    const __m256 qv = _mm256_set_m128(q4, q4);
    const float* b = centroids + j * kK * 4;
    float* t = table + j * kK;
    for (size_t c = 0; c < kK; c += 8, b += 32) {
      const __m256 t0 = Term8<kL2>(_mm256_loadu_ps(b), qv);
      const __m256 t1 = Term8<kL2>(_mm256_loadu_ps(b + 8), qv);
      const __m256 t2 = Term8<kL2>(_mm256_loadu_ps(b + 16), qv);
      const __m256 t3 = Term8<kL2>(_mm256_loadu_ps(b + 24), qv);
      const __m256 h =
          _mm256_hadd_ps(_mm256_hadd_ps(t0, t1), _mm256_hadd_ps(t2, t3));
      _mm256_storeu_ps(t + c, _mm256_permutevar8x32_ps(h, order));
    }
  }
}

// Any dsub >= 8 (used above 32): each centroid accumulated over its 8-float
// chunks (the last one masked), eight centroids reduced at once.
template <bool kL2>
ZOOM_TARGET_AVX2 void PqTableAvx2Large(const float* q, const float* centroids,
                                       size_t m, size_t dsub, float* table) {
  const size_t full = dsub & ~size_t{7};
  const __m256i mask = TailMask8(dsub - full);
  for (size_t j = 0; j < m; ++j) {
    const float* qj = q + j * dsub;
    const float* b = centroids + j * kK * dsub;
    float* t = table + j * kK;
    for (size_t c = 0; c < kK; c += 8, b += 8 * dsub) {
      __m256 v[8];
#pragma GCC unroll 8  // keeps v[] in registers
      for (size_t i = 0; i < 8; ++i) {
        const float* x = b + i * dsub;
        __m256 acc = Term8<kL2>(_mm256_loadu_ps(x), _mm256_loadu_ps(qj));
        for (size_t k = 8; k < full; k += 8) {
          acc = Accumulate8<kL2>(acc, _mm256_loadu_ps(x + k),
                                 _mm256_loadu_ps(qj + k));
        }
        if (full < dsub) {
          acc = Accumulate8<kL2>(acc, _mm256_maskload_ps(x + full, mask),
                                 _mm256_maskload_ps(qj + full, mask));
        }
        v[i] = acc;
      }
      _mm256_storeu_ps(t + c,
                       Reduce8(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]));
    }
  }
}

// dsub = 8 * kFull + r, 0 <= r < 8, r > 0 iff kTail: q_j held in registers
// and straight-line code per centroid (the last chunk masked), eight
// centroids reduced at once. Covers dsub <= 32.
template <bool kL2, size_t kFull, bool kTail>
ZOOM_TARGET_AVX2 void PqTableAvx2Fixed(const float* q, const float* centroids,
                                       size_t m, size_t dsub, float* table) {
  static_assert(kFull > 0 || kTail);
  const __m256i tail = TailMask8(dsub - 8 * kFull);
  for (size_t j = 0; j < m; ++j) {
    const float* qj = q + j * dsub;
    __m256 qv[kFull + 1];
    for (size_t k = 0; k < kFull; ++k) qv[k] = _mm256_loadu_ps(qj + 8 * k);
    if constexpr (kTail) qv[kFull] = _mm256_maskload_ps(qj + 8 * kFull, tail);
    const float* b = centroids + j * kK * dsub;
    float* t = table + j * kK;
    for (size_t c = 0; c < kK; c += 8, b += 8 * dsub) {
      __m256 v[8];
#pragma GCC unroll 8  // keeps v[] in registers
      for (size_t i = 0; i < 8; ++i) {
        const float* x = b + i * dsub;
        if constexpr (kFull > 0) {
          v[i] = Term8<kL2>(_mm256_loadu_ps(x), qv[0]);
#pragma GCC unroll 4
          for (size_t k = 1; k < kFull; ++k) {
            v[i] = Accumulate8<kL2>(v[i], _mm256_loadu_ps(x + 8 * k), qv[k]);
          }
          if constexpr (kTail) {
            v[i] = Accumulate8<kL2>(
                v[i], _mm256_maskload_ps(x + 8 * kFull, tail), qv[kFull]);
          }
        } else {
          v[i] = Term8<kL2>(_mm256_maskload_ps(x, tail), qv[0]);
        }
      }
      _mm256_storeu_ps(t + c,
                       Reduce8(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]));
    }
  }
}

template <bool kL2>
ZOOM_TARGET_AVX2 void PqTableAvx2(const float* q, const float* centroids,
                                  size_t m, size_t dsub, float* table) {
  switch (dsub) {
    case 0:
      for (size_t i = 0; i < m * kK; ++i) table[i] = 0;
      return;
    case 1:
      return PqTableAvx2Dsub1<kL2>(q, centroids, m, table);
    case 2:
      return PqTableAvx2Dsub2<kL2>(q, centroids, m, table);
    case 4:
      return PqTableAvx2Dsub4<kL2>(q, centroids, m, table);
    default:
      break;
  }
  // (full 8-float chunks, partial last chunk) of one centroid.
  switch (dsub / 8 * 2 + (dsub % 8 != 0)) {
    case 1:  // 3, 5, 6, 7
      return PqTableAvx2Fixed<kL2, 0, true>(q, centroids, m, dsub, table);
    case 2:  // 8
      return PqTableAvx2Fixed<kL2, 1, false>(q, centroids, m, dsub, table);
    case 3:  // 9..15
      return PqTableAvx2Fixed<kL2, 1, true>(q, centroids, m, dsub, table);
    case 4:  // 16
      return PqTableAvx2Fixed<kL2, 2, false>(q, centroids, m, dsub, table);
    case 5:  // 17..23
      return PqTableAvx2Fixed<kL2, 2, true>(q, centroids, m, dsub, table);
    case 6:  // 24
      return PqTableAvx2Fixed<kL2, 3, false>(q, centroids, m, dsub, table);
    case 7:  // 25..31
      return PqTableAvx2Fixed<kL2, 3, true>(q, centroids, m, dsub, table);
    case 8:  // 32
      return PqTableAvx2Fixed<kL2, 4, false>(q, centroids, m, dsub, table);
    default:
      return PqTableAvx2Large<kL2>(q, centroids, m, dsub, table);
  }
}

ZOOM_TARGET_AVX2 void PqL2TableAvx2(const float* q, const float* centroids,
                                    size_t m, size_t dsub, float* table) {
  PqTableAvx2<true>(q, centroids, m, dsub, table);
}

ZOOM_TARGET_AVX2 void PqIpTableAvx2(const float* q, const float* centroids,
                                    size_t m, size_t dsub, float* table) {
  PqTableAvx2<false>(q, centroids, m, dsub, table);
}

// ---------------------------------------------------------------------------
// AVX-512F. Cannot be run on the development machine (Zen 3): kept to the
// simplest correct shape, mirroring the AVX2 code at width 16.
// ---------------------------------------------------------------------------

// GCC 12.2 warns (-Wuninitialized, PR105593) inside the unmasked forms of
// several AVX-512 intrinsics that start from _mm512_undefined_*; the code
// below uses their zero-masked / all-lanes-masked forms instead, which
// compile to the same instructions.
constexpr __mmask16 kAllLanes16 = 0xffff;

// The first r lanes (0 <= r <= 16).
inline __mmask16 TailMask16(size_t r) {
  return static_cast<__mmask16>((uint32_t{1} << r) - 1);
}

template <bool kL2>
ZOOM_TARGET_AVX512 inline __m512 Accumulate16(__m512 acc, __m512 x, __m512 y) {
  if constexpr (kL2) {
    const __m512 t = _mm512_sub_ps(x, y);
    return _mm512_fmadd_ps(t, t, acc);
  } else {
    return _mm512_fmadd_ps(x, y, acc);
  }
}

template <bool kL2>
ZOOM_TARGET_AVX512 inline __m512 Term16(__m512 x, __m512 y) {
  if constexpr (kL2) {
    const __m512 t = _mm512_sub_ps(x, y);
    return _mm512_mul_ps(t, t);
  } else {
    return _mm512_mul_ps(x, y);
  }
}

ZOOM_TARGET_AVX512 inline float HorizontalSum16(__m512 v) {
  const __m512d vd = _mm512_castps_pd(v);
  const __m256 lo = _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xf, vd, 0));
  const __m256 hi = _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xf, vd, 1));
  return HorizontalSum8(_mm256_add_ps(lo, hi));
}

template <bool kL2>
ZOOM_TARGET_AVX512 inline float Reduced16(const float* a, const float* b,
                                          size_t d) {
  __m512 acc0 = _mm512_setzero_ps();
  __m512 acc1 = _mm512_setzero_ps();
  __m512 acc2 = _mm512_setzero_ps();
  __m512 acc3 = _mm512_setzero_ps();
  size_t i = 0;
  for (; i + 64 <= d; i += 64) {
    acc0 =
        Accumulate16<kL2>(acc0, _mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i));
    acc1 = Accumulate16<kL2>(acc1, _mm512_loadu_ps(a + i + 16),
                             _mm512_loadu_ps(b + i + 16));
    acc2 = Accumulate16<kL2>(acc2, _mm512_loadu_ps(a + i + 32),
                             _mm512_loadu_ps(b + i + 32));
    acc3 = Accumulate16<kL2>(acc3, _mm512_loadu_ps(a + i + 48),
                             _mm512_loadu_ps(b + i + 48));
  }
  for (; i + 16 <= d; i += 16) {
    acc0 =
        Accumulate16<kL2>(acc0, _mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i));
  }
  if (i < d) {
    const __mmask16 mask = TailMask16(d - i);
    acc1 = Accumulate16<kL2>(acc1, _mm512_maskz_loadu_ps(mask, a + i),
                             _mm512_maskz_loadu_ps(mask, b + i));
  }
  return HorizontalSum16(
      _mm512_add_ps(_mm512_add_ps(acc0, acc1), _mm512_add_ps(acc2, acc3)));
}

ZOOM_TARGET_AVX512 float L2SqrAvx512(const float* a, const float* b, size_t d) {
  return Reduced16<true>(a, b, d);
}

ZOOM_TARGET_AVX512 float InnerProductAvx512(const float* a, const float* b,
                                            size_t d) {
  return Reduced16<false>(a, b, d);
}

ZOOM_TARGET_AVX512 void L2SqrBatchAvx512(const float* q, const float* x,
                                         size_t n, size_t d, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = Reduced16<true>(q, x + i * d, d);
}

ZOOM_TARGET_AVX512 void InnerProductBatchAvx512(const float* q, const float* x,
                                                size_t n, size_t d,
                                                float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = Reduced16<false>(q, x + i * d, d);
}

// Treating a ++ b as 32 floats: lane i is (a ++ b)[2i] + (a ++ b)[2i + 1].
ZOOM_TARGET_AVX512 inline __m512 PairSum16(__m512 a, __m512 b) {
  // Index bit 4 selects b, bits 0-3 the lane.
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20,
                                         22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21,
                                        23, 25, 27, 29, 31);
  return _mm512_add_ps(_mm512_permutex2var_ps(a, even, b),
                       _mm512_permutex2var_ps(a, odd, b));
}

// `count` (a power of two <= 16) vectors v[0, count) are 16 * count floats
// X; returns the vector whose lane i is the sum of X[i * count, (i + 1) *
// count). Each level halves the vectors and doubles the run summed per lane.
// Overwrites v.
ZOOM_TARGET_AVX512 inline __m512 SegmentSums16(__m512* v, size_t count) {
  for (size_t n = count; n > 1; n /= 2) {
    for (size_t i = 0; i < n / 2; ++i) v[i] = PairSum16(v[2 * i], v[2 * i + 1]);
  }
  return v[0];
}

// dsub divides 16: centroids c..c+15 are dsub consecutive vectors; q_j
// tiled 16 / dsub times matches them lane for lane.
template <bool kL2>
ZOOM_TARGET_AVX512 void PqTableAvx512Contiguous(const float* q,
                                                const float* centroids,
                                                size_t m, size_t dsub,
                                                float* table) {
  for (size_t j = 0; j < m; ++j) {
    const float* qj = q + j * dsub;
    float tiled[16];
    for (size_t i = 0; i < 16; ++i) tiled[i] = qj[i % dsub];
    const __m512 qv = _mm512_loadu_ps(tiled);
    const float* b = centroids + j * kK * dsub;
    float* t = table + j * kK;
    for (size_t c = 0; c < kK; c += 16, b += 16 * dsub) {
      __m512 v[16];
      for (size_t i = 0; i < dsub; ++i) {
        v[i] = Term16<kL2>(_mm512_loadu_ps(b + 16 * i), qv);
      }
      _mm512_storeu_ps(t + c, SegmentSums16(v, dsub));
    }
  }
}

// Any dsub: each centroid accumulated over 16-float chunks (the last one
// masked) into its own vector, sixteen centroids reduced at once.
template <bool kL2>
ZOOM_TARGET_AVX512 void PqTableAvx512Generic(const float* q,
                                             const float* centroids, size_t m,
                                             size_t dsub, float* table) {
  const size_t full = dsub & ~size_t{15};
  const __mmask16 mask = TailMask16(dsub - full);
  for (size_t j = 0; j < m; ++j) {
    const float* qj = q + j * dsub;
    const float* b = centroids + j * kK * dsub;
    float* t = table + j * kK;
    for (size_t c = 0; c < kK; c += 16, b += 16 * dsub) {
      __m512 v[16];
#pragma GCC unroll 16  // keeps v[] in registers
      for (size_t i = 0; i < 16; ++i) {
        const float* x = b + i * dsub;
        __m512 acc = _mm512_setzero_ps();
        for (size_t k = 0; k < full; k += 16) {
          acc = Accumulate16<kL2>(acc, _mm512_loadu_ps(x + k),
                                  _mm512_loadu_ps(qj + k));
        }
        if (full < dsub) {
          acc = Accumulate16<kL2>(acc, _mm512_maskz_loadu_ps(mask, x + full),
                                  _mm512_maskz_loadu_ps(mask, qj + full));
        }
        v[i] = acc;
      }
      _mm512_storeu_ps(t + c, SegmentSums16(v, 16));
    }
  }
}

template <bool kL2>
ZOOM_TARGET_AVX512 void PqTableAvx512(const float* q, const float* centroids,
                                      size_t m, size_t dsub, float* table) {
  if (dsub == 0) {
    for (size_t i = 0; i < m * kK; ++i) table[i] = 0;
  } else if (16 % dsub == 0) {
    PqTableAvx512Contiguous<kL2>(q, centroids, m, dsub, table);
  } else {
    PqTableAvx512Generic<kL2>(q, centroids, m, dsub, table);
  }
}

ZOOM_TARGET_AVX512 void PqL2TableAvx512(const float* q, const float* centroids,
                                        size_t m, size_t dsub, float* table) {
  PqTableAvx512<true>(q, centroids, m, dsub, table);
}

ZOOM_TARGET_AVX512 void PqIpTableAvx512(const float* q, const float* centroids,
                                        size_t m, size_t dsub, float* table) {
  PqTableAvx512<false>(q, centroids, m, dsub, table);
}

// 16 sub-quantisers per gather, the m % 16 rest with AdcIlp.
ZOOM_TARGET_AVX512 inline float AdcAvx512(const float* table,
                                          const uint8_t* code, size_t m) {
  // Lane l reads table row j + l: offset (j + l) * 256 + code[j + l].
  const __m512i rows = _mm512_setr_epi32(
      0 * kK, 1 * kK, 2 * kK, 3 * kK, 4 * kK, 5 * kK, 6 * kK, 7 * kK, 8 * kK,
      9 * kK, 10 * kK, 11 * kK, 12 * kK, 13 * kK, 14 * kK, 15 * kK);
  __m512 acc = _mm512_setzero_ps();
  size_t j = 0;
  for (; j + 16 <= m; j += 16) {
    const __m128i bytes =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(code + j));
    const __m512i idx =
        _mm512_add_epi32(_mm512_maskz_cvtepu8_epi32(kAllLanes16, bytes), rows);
    acc = _mm512_add_ps(
        acc, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), kAllLanes16, idx,
                                      table + j * kK, 4));
  }
  return HorizontalSum16(acc) + AdcIlp(table + j * kK, code + j, m - j);
}

ZOOM_TARGET_AVX512 float PqAdcAvx512(const float* table, const uint8_t* code,
                                     size_t m) {
  return AdcAvx512(table, code, m);
}

ZOOM_TARGET_AVX512 void PqAdcScanAvx512(const float* table,
                                        const uint8_t* codes, size_t n,
                                        size_t m, float* out) {
  for (size_t i = 0; i < n; ++i) {
    if (i + kScanPrefetchRows < n) {
      __builtin_prefetch(codes + (i + kScanPrefetchRows) * m);
    }
    out[i] = AdcAvx512(table, codes + i * m, m);
  }
}

ZOOM_TARGET_AVX512 void PqAdcGatherAvx512(const float* table,
                                          const uint8_t* codes,
                                          const uint32_t* ids, size_t n,
                                          size_t m, float* out) {
  if (m == 0) {
    for (size_t i = 0; i < n; ++i) out[i] = 0;
    return;
  }
  for (size_t i = 0; i < n && i < kGatherPrefetchRows; ++i) {
    PrefetchCode(codes + size_t{ids[i]} * m, m);
  }
  for (size_t i = 0; i < n; ++i) {
    if (i + kGatherPrefetchRows < n) {
      PrefetchCode(codes + size_t{ids[i + kGatherPrefetchRows]} * m, m);
    }
    out[i] = AdcAvx512(table, codes + size_t{ids[i]} * m, m);
  }
}

#endif  // ZOOM_KERNELS_X86

// ---------------------------------------------------------------------------
// PQ 4-bit fast scan
// ---------------------------------------------------------------------------

void Pq4ScanScalarImpl(const uint8_t* lut, const uint8_t* blocks, size_t nblocks,
                       size_t m, uint16_t* out) {
  const size_t mp = Pq4PaddedM(m), bb = Pq4BlockBytes(m);
  for (size_t b = 0; b < nblocks; ++b) {
    const uint8_t* block = blocks + b * bb;
    uint16_t* o = out + b * kPq4BlockSize;
    for (size_t s = 0; s < kPq4BlockSize; ++s) {
      uint32_t sum = 0;
      for (size_t j = 0; j < mp; ++j) {
        const uint8_t byte = block[j * 16 + (s & 15)];
        const uint8_t c = s < 16 ? (byte & 15) : (byte >> 4);
        sum += lut[j * 16 + c];
      }
      o[s] = static_cast<uint16_t>(sum);
    }
  }
}

#if ZOOM_KERNELS_X86
// Two sub-quantisers per step: the low 128-bit lane holds sub-quantiser j's
// 16 code bytes and table, the high lane j + 1's. One shuffle of the low
// nibbles looks up slots 0..15 of both, one of the high nibbles slots
// 16..31. The bytes are widened to 16 bits (unpack with zero) into four
// accumulators (slots 0-7, 8-15, 16-23, 24-31, per lane); the two lanes are
// added at the end. Each lane and then each slot sums at most m entries of
// at most Pq4LutMax(m) (255 up to m = 257, 65535 / m past it): no overflow
// of the uint16 sums.
// The low and the high 128-bit lane added as 8 uint16.
ZOOM_TARGET_AVX2 inline __m128i AddLanes16(__m256i v) {
  return _mm_add_epi16(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
}

ZOOM_TARGET_AVX2 void Pq4ScanAvx2(const uint8_t* lut, const uint8_t* blocks,
                                  size_t nblocks, size_t m, uint16_t* out) {
  const size_t mp = Pq4PaddedM(m), bb = Pq4BlockBytes(m);
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  const __m256i zero = _mm256_setzero_si256();
  for (size_t b = 0; b < nblocks; ++b) {
    const uint8_t* block = blocks + b * bb;
    if (b + 1 < nblocks) {
      __builtin_prefetch(block + bb);
      __builtin_prefetch(block + bb + 64);
    }
    __m256i a0 = zero, a1 = zero, a2 = zero, a3 = zero;
    for (size_t j = 0; j < mp; j += 2) {
      const __m256i c =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + j * 16));
      const __m256i t =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(lut + j * 16));
      const __m256i lo = _mm256_and_si256(c, low4);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(c, 4), low4);
      const __m256i rlo = _mm256_shuffle_epi8(t, lo);
      const __m256i rhi = _mm256_shuffle_epi8(t, hi);
      a0 = _mm256_add_epi16(a0, _mm256_unpacklo_epi8(rlo, zero));
      a1 = _mm256_add_epi16(a1, _mm256_unpackhi_epi8(rlo, zero));
      a2 = _mm256_add_epi16(a2, _mm256_unpacklo_epi8(rhi, zero));
      a3 = _mm256_add_epi16(a3, _mm256_unpackhi_epi8(rhi, zero));
    }
    uint16_t* o = out + b * kPq4BlockSize;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o), AddLanes16(a0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 8), AddLanes16(a1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 16), AddLanes16(a2));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 24), AddLanes16(a3));
  }
}
#endif  // ZOOM_KERNELS_X86

// ---------------------------------------------------------------------------
// Dispatch
// ---------------------------------------------------------------------------

struct KernelTable {
  SimdLevel level;
  float (*l2_sqr)(const float*, const float*, size_t);
  float (*inner_product)(const float*, const float*, size_t);
  void (*l2_sqr_batch)(const float*, const float*, size_t, size_t, float*);
  void (*inner_product_batch)(const float*, const float*, size_t, size_t,
                              float*);
  void (*pq_l2_table)(const float*, const float*, size_t, size_t, float*);
  void (*pq_ip_table)(const float*, const float*, size_t, size_t, float*);
  float (*pq_adc)(const float*, const uint8_t*, size_t);
  void (*pq_adc_scan)(const float*, const uint8_t*, size_t, size_t, float*);
  void (*pq_adc_gather)(const float*, const uint8_t*, const uint32_t*, size_t,
                        size_t, float*);
  void (*pq4_scan)(const uint8_t*, const uint8_t*, size_t, size_t, uint16_t*);
};

constexpr KernelTable kScalarKernels = {
    .level = SimdLevel::kScalar,
    .l2_sqr = L2SqrScalar,
    .inner_product = InnerProductScalar,
    .l2_sqr_batch = L2SqrBatchScalar,
    .inner_product_batch = InnerProductBatchScalar,
    .pq_l2_table = PqL2TableScalar,
    .pq_ip_table = PqIpTableScalar,
    .pq_adc = PqAdcScalar,
    .pq_adc_scan = PqAdcScanScalar,
    .pq_adc_gather = PqAdcGatherScalar,
    .pq4_scan = Pq4ScanScalarImpl,
};

#if ZOOM_KERNELS_X86
// ADC at this level is scalar code on purpose: see the design notes above.
constexpr KernelTable kAvx2Kernels = {
    .level = SimdLevel::kAvx2,
    .l2_sqr = L2SqrAvx2,
    .inner_product = InnerProductAvx2,
    .l2_sqr_batch = L2SqrBatchAvx2,
    .inner_product_batch = InnerProductBatchAvx2,
    .pq_l2_table = PqL2TableAvx2,
    .pq_ip_table = PqIpTableAvx2,
    .pq_adc = PqAdcIlp,
    .pq_adc_scan = PqAdcScanIlp,
    .pq_adc_gather = PqAdcGatherIlp,
    .pq4_scan = Pq4ScanAvx2,
};

constexpr KernelTable kAvx512Kernels = {
    .level = SimdLevel::kAvx512,
    .l2_sqr = L2SqrAvx512,
    .inner_product = InnerProductAvx512,
    .l2_sqr_batch = L2SqrBatchAvx512,
    .inner_product_batch = InnerProductBatchAvx512,
    .pq_l2_table = PqL2TableAvx512,
    .pq_ip_table = PqIpTableAvx512,
    .pq_adc = PqAdcAvx512,
    .pq_adc_scan = PqAdcScanAvx512,
    .pq_adc_gather = PqAdcGatherAvx512,
    .pq4_scan = Pq4ScanAvx2,  // AVX-512 implies AVX2; a 512-bit version is not written
};
#endif

const KernelTable* KernelsFor(SimdLevel level) {
#if ZOOM_KERNELS_X86
  switch (level) {
    case SimdLevel::kScalar:
      return &kScalarKernels;
    case SimdLevel::kAvx2:
      return &kAvx2Kernels;
    case SimdLevel::kAvx512:
      return &kAvx512Kernels;
  }
#else
  (void)level;
#endif
  return &kScalarKernels;
}

SimdLevel Detect() {
#if ZOOM_KERNELS_X86
  // __builtin_cpu_supports also checks that the OS saves the YMM / ZMM
  // state (XCR0). May run before libgcc's own constructor: init first.
  __builtin_cpu_init();
  const bool avx2 =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (avx2 && __builtin_cpu_supports("avx512f")) return SimdLevel::kAvx512;
  if (avx2) return SimdLevel::kAvx2;
#endif
  return SimdLevel::kScalar;
}

// ---------------------------------------------------------------------------
// Per-kernel calibration at the AVX-512 level
// ---------------------------------------------------------------------------
// An AVX-512 CPU does not make every 512-bit kernel faster: on the first
// AVX-512 machine measured here (a virtualised Intel Xeon, 2026-12) the
// 16-wide gathers of ADC ran 10-25x slower than AVX2's scalar lookups, the
// PQ tables 2-3x and the inner-product batch 1.9x (zoom_kernels_bench).
// So the default table at this level takes, per kernel family, the AVX-512
// kernel unless it is over kSlowerMargin slower than the AVX2 one on a
// short cache-resident run at the first kernel call (a few ms, once);
// KernelChoices() says what was chosen. SetSimdLevelForTesting(kAvx512)
// and ZOOM_KERNEL_CALIBRATION=0 use the pure AVX-512 table.

#if ZOOM_KERNELS_X86
constexpr double kSlowerMargin = 1.25;

// The best of 5 trials of `reps` calls, in seconds.
template <typename Fn>
double BestTime(int reps, Fn&& fn) {
  double best = 1e30;
  for (int trial = 0; trial < 5; ++trial) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r) fn();
    const double t =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count();
    best = std::min(best, t);
  }
  return best;
}

struct Calibrated {
  KernelTable table;
  char choices[160];
};

Calibrated Calibrate() {
  Calibrated c{kAvx512Kernels, {}};
  const KernelTable& wide = kAvx512Kernels;
  const KernelTable& narrow = kAvx2Kernels;
  // Fixed inputs, cache-resident: the shapes of a 128-d preview and re-rank.
  constexpr size_t kD = 128, kRows = 64, kM = 32, kDsub = 4, kCodes = 512;
  static float q[kD], x[kRows * kD], centroids[kM * kPqCentroids * kDsub];
  static float table[kM * kPqCentroids], out[kCodes];
  static uint8_t codes[kCodes * kM];
  static uint32_t ids[kCodes];
  uint32_t h = 12345;
  auto next = [&] { return h = h * 1664525u + 1013904223u; };
  for (float& v : q) v = static_cast<float>(next() >> 8) * 0x1p-24f;
  for (float& v : x) v = static_cast<float>(next() >> 8) * 0x1p-24f;
  for (float& v : centroids) v = static_cast<float>(next() >> 8) * 0x1p-24f;
  for (uint8_t& v : codes) v = static_cast<uint8_t>(next() >> 24);
  for (size_t i = 0; i < kCodes; ++i) ids[i] = (next() >> 8) % kCodes;
  std::string narrowed;
  auto pick = [&](const char* name, auto&& run_wide, auto&& run_narrow,
                  auto&& use_narrow) {
    run_wide();  // warm up both (page in, caches)
    run_narrow();
    const double tw = BestTime(4, run_wide), tn = BestTime(4, run_narrow);
    if (tw > kSlowerMargin * tn) {
      use_narrow();
      if (!narrowed.empty()) narrowed += ", ";
      narrowed += name;
    }
  };
  pick(
      "l2_batch", [&] { wide.l2_sqr_batch(q, x, kRows, kD, out); },
      [&] { narrow.l2_sqr_batch(q, x, kRows, kD, out); },
      [&] { c.table.l2_sqr_batch = narrow.l2_sqr_batch; });
  pick(
      "ip_batch", [&] { wide.inner_product_batch(q, x, kRows, kD, out); },
      [&] { narrow.inner_product_batch(q, x, kRows, kD, out); },
      [&] { c.table.inner_product_batch = narrow.inner_product_batch; });
  pick(
      "pq_tables", [&] { wide.pq_l2_table(q, centroids, kM, kDsub, table); },
      [&] { narrow.pq_l2_table(q, centroids, kM, kDsub, table); },
      [&] {
        c.table.pq_l2_table = narrow.pq_l2_table;
        c.table.pq_ip_table = narrow.pq_ip_table;
      });
  pick(
      "pq_adc", [&] { wide.pq_adc_scan(table, codes, kCodes, kM, out); },
      [&] { narrow.pq_adc_scan(table, codes, kCodes, kM, out); },
      [&] {
        c.table.pq_adc = narrow.pq_adc;
        c.table.pq_adc_scan = narrow.pq_adc_scan;
        c.table.pq_adc_gather = narrow.pq_adc_gather;
      });
  const std::string text =
      narrowed.empty() ? std::string("avx512")
                       : "avx512 (avx2 for " + narrowed + ": faster here)";
  std::snprintf(c.choices, sizeof(c.choices), "%s", text.c_str());
  return c;
}

bool CalibrationEnabled() {
  const char* env = std::getenv("ZOOM_KERNEL_CALIBRATION");
  return env == nullptr || std::strcmp(env, "0") != 0;
}

const Calibrated& CalibratedAvx512() {
  static const Calibrated c = Calibrate();
  return c;
}
#endif

// The default table: the detected level's, calibrated at AVX-512.
const KernelTable* DefaultKernels() {
#if ZOOM_KERNELS_X86
  if (DetectedSimdLevel() == SimdLevel::kAvx512 && CalibrationEnabled()) {
    return &CalibratedAvx512().table;
  }
#endif
  return KernelsFor(DetectedSimdLevel());
}

// nullptr until the first kernel call (or SetSimdLevelForTesting).
std::atomic<const KernelTable*> g_kernels{nullptr};

[[gnu::noinline, gnu::cold]] const KernelTable* ResolveKernels() {
  const KernelTable* detected = DefaultKernels();
  const KernelTable* expected = nullptr;
  // A concurrent SetSimdLevelForTesting wins over the default.
  if (g_kernels.compare_exchange_strong(expected, detected,
                                        std::memory_order_acq_rel)) {
    return detected;
  }
  return expected;
}

inline const KernelTable& Kernels() {
  const KernelTable* k = g_kernels.load(std::memory_order_acquire);
  if (__builtin_expect(k == nullptr, 0)) k = ResolveKernels();
  return *k;
}

}  // namespace

SimdLevel DetectedSimdLevel() {
  static const SimdLevel level = Detect();
  return level;
}

SimdLevel ActiveSimdLevel() { return Kernels().level; }

const char* KernelChoices() {
  const KernelTable* k = &Kernels();
#if ZOOM_KERNELS_X86
  if (DetectedSimdLevel() == SimdLevel::kAvx512 && CalibrationEnabled() &&
      k == &CalibratedAvx512().table) {
    return CalibratedAvx512().choices;
  }
#endif
  return SimdLevelName(k->level);
}

const char* SimdLevelName(SimdLevel level) {
  switch (level) {
    case SimdLevel::kScalar:
      return "scalar";
    case SimdLevel::kAvx2:
      return "avx2";
    case SimdLevel::kAvx512:
      return "avx512";
  }
  return "?";
}

void SetSimdLevelForTesting(SimdLevel level) {
  const SimdLevel cap = DetectedSimdLevel();
  const SimdLevel use =
      static_cast<int>(level) < static_cast<int>(cap) ? level : cap;
  g_kernels.store(KernelsFor(use), std::memory_order_release);
}

void UseDefaultKernelsForTesting() {
  g_kernels.store(DefaultKernels(), std::memory_order_release);
}

float L2Sqr(const float* a, const float* b, size_t d) {
  return Kernels().l2_sqr(a, b, d);
}

float InnerProduct(const float* a, const float* b, size_t d) {
  return Kernels().inner_product(a, b, d);
}

void L2SqrBatch(const float* q, const float* x, size_t n, size_t d,
                float* out) {
  Kernels().l2_sqr_batch(q, x, n, d, out);
}

void InnerProductBatch(const float* q, const float* x, size_t n, size_t d,
                       float* out) {
  Kernels().inner_product_batch(q, x, n, d, out);
}

void PqL2Table(const float* q, const float* centroids, size_t m, size_t dsub,
               float* table) {
  Kernels().pq_l2_table(q, centroids, m, dsub, table);
}

void PqIpTable(const float* q, const float* centroids, size_t m, size_t dsub,
               float* table) {
  Kernels().pq_ip_table(q, centroids, m, dsub, table);
}

float PqAdc(const float* table, const uint8_t* code, size_t m) {
  return Kernels().pq_adc(table, code, m);
}

void PqAdcScan(const float* table, const uint8_t* codes, size_t n, size_t m,
               float* out) {
  Kernels().pq_adc_scan(table, codes, n, m, out);
}

void PqAdcGather(const float* table, const uint8_t* codes, const uint32_t* ids,
                 size_t n, size_t m, float* out) {
  Kernels().pq_adc_gather(table, codes, ids, n, m, out);
}

void Pq4SetCode(uint8_t* block, size_t m, size_t slot, const uint8_t* code) {
  const size_t pos = slot & 15;
  const bool high = slot >= 16;
  for (size_t j = 0; j < Pq4PaddedM(m); ++j) {
    const uint8_t c = j < m ? (code[j] & 15) : 0;
    uint8_t& byte = block[j * 16 + pos];
    byte = high ? static_cast<uint8_t>((byte & 0x0f) | (c << 4))
                : static_cast<uint8_t>((byte & 0xf0) | c);
  }
}

void Pq4GetCode(const uint8_t* block, size_t m, size_t slot, uint8_t* code) {
  const size_t pos = slot & 15;
  for (size_t j = 0; j < m; ++j) {
    const uint8_t byte = block[j * 16 + pos];
    code[j] = slot < 16 ? (byte & 15) : (byte >> 4);
  }
}

void Pq4QuantizeTable(const float* table, size_t m, uint8_t* lut, float* bias,
                      float* scale) {
  float b = 0, range = 0;
  for (size_t j = 0; j < m; ++j) {
    const float* t = table + j * kPq4Centroids;
    float lo = t[0], hi = t[0];
    for (size_t c = 1; c < kPq4Centroids; ++c) {
      lo = t[c] < lo ? t[c] : lo;
      hi = t[c] > hi ? t[c] : hi;
    }
    b += lo;
    range = hi - lo > range ? hi - lo : range;
  }
  const float top = static_cast<float>(Pq4LutMax(m));
  const float s = range > 0 ? range / top : 1.0f;
  const float inv = 1.0f / s;
  for (size_t j = 0; j < m; ++j) {
    const float* t = table + j * kPq4Centroids;
    float lo = t[0];
    for (size_t c = 1; c < kPq4Centroids; ++c) lo = t[c] < lo ? t[c] : lo;
    for (size_t c = 0; c < kPq4Centroids; ++c) {
      const float v = (t[c] - lo) * inv + 0.5f;
      lut[j * kPq4Centroids + c] = static_cast<uint8_t>(v >= top ? top : v);
    }
  }
  if (m % 2 != 0) std::memset(lut + m * kPq4Centroids, 0, kPq4Centroids);
  *bias = b;
  *scale = s;
}

void Pq4ScanBlocks(const uint8_t* lut, const uint8_t* blocks, size_t nblocks,
                   size_t m, uint16_t* out) {
  Kernels().pq4_scan(lut, blocks, nblocks, m, out);
}

void Pq4ScanBlocksScalar(const uint8_t* lut, const uint8_t* blocks,
                         size_t nblocks, size_t m, uint16_t* out) {
  Pq4ScanScalarImpl(lut, blocks, nblocks, m, out);
}

}  // namespace zoom::index
