#include "index/distance_kernels.h"

#include <atomic>

namespace zoom::index {
namespace {

// Scalar reference versions (also the fallback level).
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

float PqAdcScalar(const float* table, const uint8_t* code, size_t m) {
  float s = 0;
  for (size_t j = 0; j < m; ++j) s += table[j * kPqCentroids + code[j]];
  return s;
}

std::atomic<int> g_level{-1};

}  // namespace

SimdLevel DetectedSimdLevel() { return SimdLevel::kScalar; }

SimdLevel ActiveSimdLevel() {
  int l = g_level.load(std::memory_order_relaxed);
  if (l < 0) {
    l = static_cast<int>(DetectedSimdLevel());
    g_level.store(l, std::memory_order_relaxed);
  }
  return static_cast<SimdLevel>(l);
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
  const int cap = static_cast<int>(DetectedSimdLevel());
  const int want = static_cast<int>(level);
  g_level.store(want < cap ? want : cap, std::memory_order_relaxed);
}

float L2Sqr(const float* a, const float* b, size_t d) { return L2SqrScalar(a, b, d); }
float InnerProduct(const float* a, const float* b, size_t d) {
  return InnerProductScalar(a, b, d);
}

void L2SqrBatch(const float* q, const float* x, size_t n, size_t d, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = L2Sqr(q, x + i * d, d);
}
void InnerProductBatch(const float* q, const float* x, size_t n, size_t d,
                       float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = InnerProduct(q, x + i * d, d);
}

void PqL2Table(const float* q, const float* centroids, size_t m, size_t dsub,
               float* table) {
  for (size_t j = 0; j < m; ++j) {
    for (size_t c = 0; c < kPqCentroids; ++c) {
      table[j * kPqCentroids + c] =
          L2Sqr(q + j * dsub, centroids + (j * kPqCentroids + c) * dsub, dsub);
    }
  }
}

void PqIpTable(const float* q, const float* centroids, size_t m, size_t dsub,
               float* table) {
  for (size_t j = 0; j < m; ++j) {
    for (size_t c = 0; c < kPqCentroids; ++c) {
      table[j * kPqCentroids + c] = InnerProduct(
          q + j * dsub, centroids + (j * kPqCentroids + c) * dsub, dsub);
    }
  }
}

float PqAdc(const float* table, const uint8_t* code, size_t m) {
  return PqAdcScalar(table, code, m);
}

void PqAdcScan(const float* table, const uint8_t* codes, size_t n, size_t m,
               float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = PqAdc(table, codes + i * m, m);
}

void PqAdcGather(const float* table, const uint8_t* codes, const uint32_t* ids,
                 size_t n, size_t m, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = PqAdc(table, codes + size_t{ids[i]} * m, m);
}

}  // namespace zoom::index
