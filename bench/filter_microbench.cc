// Micro-benchmarks of a filter's evaluation by the payload indexes
// (PayloadIndex::Evaluate into a MatchSet): a keyword (Roaring bitmaps), an
// integer and a float range, and an AND of the two, at the shares of the
// filter benchmark's buckets, over 200,000 records (GloVe's size) with
// uniform random values. The cost every filtered search pays before its
// strategy runs.
//
//   build/bench/zoom_filter_bench [--benchmark_filter=Range]
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <string>

#include "server/engine/filter.h"
#include "server/engine/id_tracker.h"
#include "server/engine/match_set.h"
#include "server/engine/payload_index.h"

namespace zoom::server {
namespace {

constexpr uint32_t kN = 200000;
constexpr int64_t kPriceRange = 1000000;

struct Fixture {
  IdTracker ids;
  PayloadIndex index;
  Fixture() {
    index.AddField("tag", FieldIndexType::kKeyword, true);
    index.AddField("price", FieldIndexType::kInteger, true);
    index.AddField("score", FieldIndexType::kFloat, true);
    ids.Reserve(kN);
    std::mt19937_64 rng(7);
    for (uint32_t i = 0; i < kN; ++i) {
      ids.Set(i, i);
      PayloadFields f;
      // tag tN holds 1/2^(N+1) of the points (t0 50%, t3 6.25%, ...).
      const int tag = std::min(30, __builtin_ctzll(rng() | (uint64_t{1} << 30)));
      f["tag"] = FieldValue::Of(std::string("t") + std::to_string(tag));
      f["price"] = FieldValue::Of(static_cast<int64_t>(rng() % kPriceRange));
      f["score"] = FieldValue::Of(static_cast<double>(rng() % kPriceRange) / kPriceRange);
      index.Update(i, nullptr, &f);
    }
    ids.Publish(kN);
  }
};

Fixture& F() {
  static Fixture* f = new Fixture();
  return *f;
}

Condition Range(const char* key, double lt) {
  Condition c;
  c.key = key;
  c.type = Condition::Type::kRange;
  c.range.lt = lt;
  return c;
}

void Run(benchmark::State& state, const Filter& filter) {
  Fixture& fx = F();
  MatchSet out;
  uint64_t matches = 0;
  for (auto _ : state) {
    if (!fx.index.Evaluate(filter, fx.ids, kN, &out).ok()) {
      state.SkipWithError("Evaluate failed");
      return;
    }
    matches = out.Count();
    benchmark::DoNotOptimize(out.words().data());
  }
  state.counters["share_pct"] = 100.0 * static_cast<double>(matches) / kN;
  state.counters["ns_per_match"] = benchmark::Counter(
      static_cast<double>(matches), benchmark::Counter::kIsIterationInvariantRate |
                                        benchmark::Counter::kInvert);
}

// Arg: the share in 1/10,000 (5000 = 50%).
void BM_IntegerRange(benchmark::State& state) {
  Filter f;
  f.must.push_back(Range("price", static_cast<double>(kPriceRange / 10000 * state.range(0))));
  Run(state, f);
}
BENCHMARK(BM_IntegerRange)->Arg(5000)->Arg(1000)->Arg(100)->Arg(10)->Arg(1);

void BM_FloatRange(benchmark::State& state) {
  Filter f;
  f.must.push_back(Range("score", static_cast<double>(state.range(0)) / 10000));
  Run(state, f);
}
BENCHMARK(BM_FloatRange)->Arg(5000)->Arg(1000)->Arg(100)->Arg(10)->Arg(1);

// Arg: the tag (t0 ~50%, t3 ~6%, t6 ~0.8%, t9 ~0.1%, t13 ~0.006%).
void BM_Keyword(benchmark::State& state) {
  Filter f;
  Condition c;
  c.key = "tag";
  c.type = Condition::Type::kMatch;
  c.value = std::string("t") + std::to_string(state.range(0));
  f.must.push_back(c);
  Run(state, f);
}
BENCHMARK(BM_Keyword)->Arg(0)->Arg(3)->Arg(6)->Arg(9)->Arg(13);

// A keyword AND an integer range (50% x the range's share).
void BM_KeywordAndRange(benchmark::State& state) {
  Filter f;
  Condition c;
  c.key = "tag";
  c.type = Condition::Type::kMatch;
  c.value = std::string("t0");
  f.must.push_back(c);
  f.must.push_back(Range("price", static_cast<double>(kPriceRange / 10000 * state.range(0))));
  Run(state, f);
}
BENCHMARK(BM_KeywordAndRange)->Arg(5000)->Arg(1000)->Arg(100);

}  // namespace
}  // namespace zoom::server

BENCHMARK_MAIN();
