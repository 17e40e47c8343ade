// File: bench/kernels_microbench.cc
//
// zoom_kernels_bench: Google Benchmark micro-benchmarks of the hot-path
// kernels (index/distance_kernels.h), each at every SIMD level this CPU runs,
// at the sizes the preview (PQ tables and ADC scans) and the re-rank (exact
// L2 / IP) use.
//
//   build/bench/zoom_kernels_bench --benchmark_filter=PqAdc
//
// Benchmark names are Kernel/level/sizes. items_per_second counts distances
// (L2Sqr, InnerProduct, the batches, PqAdc*) or table entries (PqL2Table,
// PqIpTable: m * 256 per call). All inputs are cache-resident except
// PqAdcGather's 200000 codes (10 MB), read at random rows as a graph search
// does.
//
// PqAdcScan/avx2_gather and PqAdcGather/avx2_gather time the 8-wide
// vgatherdps formulation of ADC that the library does not use (it lost to
// four-accumulator scalar lookups on AMD Zen 3); they stay here so the
// choice can be re-measured on other CPUs.
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "benchmark/benchmark.h"
#include "index/distance_kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define ZOOM_BENCH_GATHER 1
#else
#define ZOOM_BENCH_GATHER 0
#endif

namespace zoom::index {
namespace {

std::vector<float> RandomFloats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (uint8_t& x : v) x = static_cast<uint8_t>(rng());
  return v;
}

void BM_L2Sqr(benchmark::State& state, SimdLevel level, size_t d, bool ip) {
  SetSimdLevelForTesting(level);
  const std::vector<float> q = RandomFloats(d, 1);
  const std::vector<float> x = RandomFloats(d, 2);
  for (auto _ : state) {
    benchmark::DoNotOptimize(ip ? InnerProduct(q.data(), x.data(), d)
                                : L2Sqr(q.data(), x.data(), d));
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}

void BM_Batch(benchmark::State& state, SimdLevel level, size_t n, size_t d,
              bool ip) {
  SetSimdLevelForTesting(level);
  const std::vector<float> q = RandomFloats(d, 1);
  const std::vector<float> x = RandomFloats(n * d, 2);
  std::vector<float> out(n);
  for (auto _ : state) {
    if (ip) {
      InnerProductBatch(q.data(), x.data(), n, d, out.data());
    } else {
      L2SqrBatch(q.data(), x.data(), n, d, out.data());
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * n));
}

void BM_PqTable(benchmark::State& state, SimdLevel level, size_t m, size_t dsub,
                bool ip) {
  SetSimdLevelForTesting(level);
  const std::vector<float> q = RandomFloats(m * dsub, 1);
  const std::vector<float> centroids = RandomFloats(m * kPqCentroids * dsub, 2);
  std::vector<float> table(m * kPqCentroids);
  for (auto _ : state) {
    if (ip) {
      PqIpTable(q.data(), centroids.data(), m, dsub, table.data());
    } else {
      PqL2Table(q.data(), centroids.data(), m, dsub, table.data());
    }
    benchmark::DoNotOptimize(table.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(
      static_cast<int64_t>(state.iterations() * m * kPqCentroids));
}

using ScanFn = void (*)(const float*, const uint8_t*, size_t, size_t, float*);
using GatherFn = void (*)(const float*, const uint8_t*, const uint32_t*, size_t,
                          size_t, float*);

void BM_PqAdc(benchmark::State& state, SimdLevel level, size_t m) {
  SetSimdLevelForTesting(level);
  const std::vector<float> table = RandomFloats(m * kPqCentroids, 1);
  const std::vector<uint8_t> code = RandomBytes(m, 2);
  for (auto _ : state) {
    benchmark::DoNotOptimize(PqAdc(table.data(), code.data(), m));
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}

void BM_PqAdcScan(benchmark::State& state, SimdLevel level, ScanFn scan,
                  size_t n, size_t m) {
  SetSimdLevelForTesting(level);
  const std::vector<float> table = RandomFloats(m * kPqCentroids, 1);
  const std::vector<uint8_t> codes = RandomBytes(n * m, 2);
  std::vector<float> out(n);
  for (auto _ : state) {
    scan(table.data(), codes.data(), n, m, out.data());
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * n));
}

// n random rows of `rows` codes per call, a fresh id list each call (1 << 14
// lists cycled) so the same rows are not re-read from L1.
void BM_PqAdcGather(benchmark::State& state, SimdLevel level, GatherFn gather,
                    size_t n, size_t m, size_t rows) {
  SetSimdLevelForTesting(level);
  constexpr size_t kLists = size_t{1} << 14;
  const std::vector<float> table = RandomFloats(m * kPqCentroids, 1);
  const std::vector<uint8_t> codes = RandomBytes(rows * m, 2);
  std::vector<uint32_t> ids(kLists * n);
  std::mt19937 rng(3);
  for (uint32_t& id : ids) id = static_cast<uint32_t>(rng() % rows);
  std::vector<float> out(n);
  size_t list = 0;
  for (auto _ : state) {
    gather(table.data(), codes.data(), ids.data() + list * n, n, m, out.data());
    list = (list + 1) % kLists;
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * n));
}

#if ZOOM_BENCH_GATHER
// The rejected formulation: 8 sub-quantisers per vgatherdps, scalar tail.
__attribute__((target("avx2,fma"))) inline float AdcGatherAvx2(
    const float* table, const uint8_t* code, size_t m) {
  const __m256i rows =
      _mm256_setr_epi32(0, 256, 512, 768, 1024, 1280, 1536, 1792);
  __m256 acc = _mm256_setzero_ps();
  size_t j = 0;
  for (; j + 8 <= m; j += 8) {
    const __m256i idx = _mm256_add_epi32(
        _mm256_cvtepu8_epi32(
            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(code + j))),
        rows);
    acc = _mm256_add_ps(acc,
                        _mm256_i32gather_ps(table + j * kPqCentroids, idx, 4));
  }
  __m128 s =
      _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  float sum = _mm_cvtss_f32(s);
  for (; j < m; ++j) sum += table[j * kPqCentroids + code[j]];
  return sum;
}

__attribute__((target("avx2,fma"))) void PqAdcScanGatherAvx2(
    const float* table, const uint8_t* codes, size_t n, size_t m, float* out) {
  for (size_t i = 0; i < n; ++i)
    out[i] = AdcGatherAvx2(table, codes + i * m, m);
}

__attribute__((target("avx2,fma"))) void PqAdcGatherGatherAvx2(
    const float* table, const uint8_t* codes, const uint32_t* ids, size_t n,
    size_t m, float* out) {
  for (size_t i = 0; i < n; ++i) {
    if (i + 4 < n) __builtin_prefetch(codes + size_t{ids[i + 4]} * m);
    out[i] = AdcGatherAvx2(table, codes + size_t{ids[i]} * m, m);
  }
}
#endif

template <typename Fn>
void Register(const std::string& name, Fn&& fn) {
  benchmark::RegisterBenchmark(name.c_str(), std::forward<Fn>(fn));
}

void RegisterLevel(SimdLevel level) {
  const std::string lv = SimdLevelName(level);
  for (bool ip : {false, true}) {
    const std::string kernel = ip ? "InnerProduct" : "L2Sqr";
    for (size_t d : {100, 128, 784, 960}) {
      Register(kernel + "/" + lv + "/d:" + std::to_string(d),
               [=](benchmark::State& s) { BM_L2Sqr(s, level, d, ip); });
    }
    // IVF routing at GloVe's shape; the kernels' own startup probe (64 x
    // 128); FGD's tail clusters (256 means of 256 floats).
    for (auto [n, d] : {std::pair<size_t, size_t>{100, 100}, {64, 128}, {256, 256}}) {
      Register(kernel + "Batch/" + lv + "/n:" + std::to_string(n) + "/d:" + std::to_string(d),
               [=](benchmark::State& s) { BM_Batch(s, level, n, d, ip); });
    }
  }
  struct TableSize {
    size_t m, dsub;
  };
  for (bool ip : {false, true}) {
    const std::string kernel = ip ? "PqIpTable" : "PqL2Table";
    for (TableSize t : {TableSize{25, 4}, TableSize{50, 2}, TableSize{16, 8},
                        TableSize{10, 10}, TableSize{32, 3}}) {
      Register(
          kernel + "/" + lv + "/m:" + std::to_string(t.m) +
              "/dsub:" + std::to_string(t.dsub),
          [=](benchmark::State& s) { BM_PqTable(s, level, t.m, t.dsub, ip); });
    }
  }
  Register("PqAdc/" + lv + "/m:50",
           [=](benchmark::State& s) { BM_PqAdc(s, level, 50); });
  for (size_t m : {25, 50}) {
    Register("PqAdcScan/" + lv + "/n:1000/m:" + std::to_string(m),
             [=](benchmark::State& s) {
               BM_PqAdcScan(s, level, PqAdcScan, 1000, m);
             });
  }
  Register("PqAdcGather/" + lv + "/n:32/m:50/rows:200000",
           [=](benchmark::State& s) {
             BM_PqAdcGather(s, level, PqAdcGather, 32, 50, 200000);
           });
}

void RegisterGatherExperiment() {
#if ZOOM_BENCH_GATHER
  if (static_cast<int>(DetectedSimdLevel()) <
      static_cast<int>(SimdLevel::kAvx2)) {
    return;
  }
  const SimdLevel level = SimdLevel::kAvx2;
  for (size_t m : {25, 50}) {
    Register("PqAdcScan/avx2_gather/n:1000/m:" + std::to_string(m),
             [=](benchmark::State& s) {
               BM_PqAdcScan(s, level, PqAdcScanGatherAvx2, 1000, m);
             });
  }
  Register("PqAdcGather/avx2_gather/n:32/m:50/rows:200000",
           [=](benchmark::State& s) {
             BM_PqAdcGather(s, level, PqAdcGatherGatherAvx2, 32, 50, 200000);
           });
#endif
}

}  // namespace
}  // namespace zoom::index

int main(int argc, char** argv) {
  using zoom::index::SimdLevel;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  const SimdLevel detected = zoom::index::DetectedSimdLevel();
  for (int l = 0; l <= static_cast<int>(detected); ++l) {
    zoom::index::RegisterLevel(static_cast<SimdLevel>(l));
  }
  zoom::index::RegisterGatherExperiment();
  benchmark::AddCustomContext("simd_detected",
                              zoom::index::SimdLevelName(detected));
  // What the library's default table runs (at AVX-512, calibrated per
  // kernel family); the rows above time each level's own kernels.
  benchmark::AddCustomContext("kernels_default", zoom::index::KernelChoices());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  zoom::index::SetSimdLevelForTesting(detected);
  return 0;
}
