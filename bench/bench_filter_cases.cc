#include "bench/bench_filter_cases.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/engine/filter.h"

namespace zoom::bench::filter_bench {
namespace {

constexpr int kTags = 1000;
constexpr double kZipfS = 2.0;
constexpr int kRegions = 64;
constexpr int64_t kPriceRange = 1000000;

// The query's nearest (correlated) or farthest (anti) region seed.
int QueryRegion(const Space& s, const Attributes& a, size_t q, bool nearest) {
  int best = 0;
  float bd = nearest ? std::numeric_limits<float>::infinity() : -std::numeric_limits<float>::infinity();
  for (int r = 0; r < kRegions; ++r) {
    const float dd = s.Dist(s.Query(q), s.Base(a.seeds[r]));
    if (nearest ? dd < bd : dd > bd) bd = dd, best = r;
  }
  return best;
}

server::Condition PriceBelow(int64_t x) {
  server::Condition c;
  c.type = server::Condition::Type::kRange;
  c.key = "price";
  c.range.lt = static_cast<double>(x);
  return c;
}

}  // namespace

Attributes MakeAttributes(const Space& s, size_t n) {
  Attributes a;
  std::mt19937_64 rng(20261201);
  std::vector<double> w(kTags);
  for (int i = 0; i < kTags; ++i) w[i] = std::pow(i + 1, -kZipfS);
  std::discrete_distribution<int> zipf(w.begin(), w.end());
  std::uniform_int_distribution<int64_t> price(0, kPriceRange - 1);
  a.tag.resize(n);
  a.price.resize(n);
  a.tag_count.assign(kTags, 0);
  for (size_t i = 0; i < n; ++i) {
    a.tag[i] = zipf(rng);
    ++a.tag_count[a.tag[i]];
    a.price[i] = price(rng);
  }
  for (int r = 0; r < kRegions; ++r) a.seeds.push_back(static_cast<uint32_t>(rng() % n));
  a.region.resize(n);
  ParallelFor(n, [&](size_t i) {
    int best = 0;
    float bd = std::numeric_limits<float>::infinity();
    for (int r = 0; r < kRegions; ++r) {
      const float dd = s.Dist(s.Base(i), s.Base(a.seeds[r]));
      if (dd < bd) bd = dd, best = r;
    }
    a.region[i] = best;
  });
  return a;
}

std::vector<Case> MakeCases(const Space& s, const Attributes& a, size_t n,
                            const std::vector<double>& buckets) {
  std::vector<Case> cases;
  for (double b : buckets) {
    int best = 0;
    for (int t = 0; t < kTags; ++t) {
      if (std::abs(std::log(std::max<double>(a.tag_count[t], 0.5) / n) - std::log(b)) <
          std::abs(std::log(std::max<double>(a.tag_count[best], 0.5) / n) - std::log(b))) {
        best = t;
      }
    }
    Case c;
    c.kind = "tag";
    c.target = b;
    c.name = absl::StrFormat("tag=t%d (%.3g%%)", best, 100.0 * a.tag_count[best] / n);
    c.filter = [best](size_t) {
      server::Filter f;
      f.must.push_back(Match("tag", absl::StrCat("t", best)));
      return f;
    };
    c.pass = [&a, best](uint32_t id, size_t) { return a.tag[id] == best; };
    cases.push_back(std::move(c));
  }
  for (double b : buckets) {
    const int64_t x = std::max<int64_t>(1, std::llround(b * kPriceRange));
    Case c;
    c.kind = "range";
    c.target = b;
    c.name = absl::StrFormat("price<%d (%.3g%%)", x, 100.0 * x / kPriceRange);
    c.filter = [x](size_t) {
      server::Filter f;
      f.must.push_back(PriceBelow(x));
      return f;
    };
    c.pass = [&a, x](uint32_t id, size_t) { return a.price[id] < x; };
    cases.push_back(std::move(c));
  }
  const size_t nq = s.queries.size() / s.d;
  for (bool nearest : {true, false}) {
    for (bool with_range : {false, true}) {
      auto regions = std::make_shared<std::vector<int>>(nq);
      for (size_t q = 0; q < nq; ++q) (*regions)[q] = QueryRegion(s, a, q, nearest);
      const int64_t x = kPriceRange / 10;
      Case c;
      c.kind = nearest ? "correlated" : "anti_correlated";
      c.per_query = true;
      c.name = absl::StrCat(nearest ? "region=nearest" : "region=farthest",
                            with_range ? " AND price<10%" : "");
      c.filter = [regions, with_range, x](size_t q) {
        server::Filter f;
        f.must.push_back(Match("region", int64_t{(*regions)[q]}));
        if (with_range) f.must.push_back(PriceBelow(x));
        return f;
      };
      c.pass = [&a, regions, with_range, x](uint32_t id, size_t q) {
        return a.region[id] == (*regions)[q] && (!with_range || a.price[id] < x);
      };
      cases.push_back(std::move(c));
    }
  }
  return cases;
}

}  // namespace zoom::bench::filter_bench
