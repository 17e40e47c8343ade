// File: bench/bench_filter_cases.h
//
// The generated workload of zoombench --benchmarks=filter (bench_filter.cc):
// attributes of known selectivity on the base rows of a real vector set, and
// the filter cases over them (the file comment of bench_filter.cc lists
// them).
#ifndef ZOOM_BENCH_FILTER_CASES_H_
#define ZOOM_BENCH_FILTER_CASES_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "bench/bench_filter_harness.h"

namespace zoom::bench::filter_bench {

struct Attributes {
  std::vector<int32_t> tag, region;
  std::vector<int64_t> price;
  std::vector<uint64_t> tag_count;
  std::vector<uint32_t> seeds;  // base rows
};

// The attributes of the first `n` base rows of `s` (a fixed seed).
Attributes MakeAttributes(const Space& s, size_t n);

// The cases: a tag and a price range at each share of `buckets`, then the
// region cases (per query). The cases refer to `a`, which must outlive them.
std::vector<Case> MakeCases(const Space& s, const Attributes& a, size_t n,
                            const std::vector<double>& buckets);

}  // namespace zoom::bench::filter_bench

#endif  // ZOOM_BENCH_FILTER_CASES_H_
