#include "bench/bench_filter_harness.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bench/bench_util.h"
#include "common/metric.h"
#include "common/status_macros.h"
#include "common/timer.h"

namespace zoom::bench::filter_bench {

Space Prepare(const Dataset& ds, size_t nq) {
  Space s;
  s.d = ds.dim();
  s.ip = ds.metric != Metric::kL2;
  s.base = ds.base.data;
  s.queries.assign(ds.queries.data.begin(), ds.queries.data.begin() + nq * s.d);
  if (ds.metric == Metric::kCosine) {
    for (size_t i = 0; i < ds.base.rows; ++i) NormalizeL2(s.base.data() + i * s.d, s.d);
    for (size_t q = 0; q < nq; ++q) NormalizeL2(s.queries.data() + q * s.d, s.d);
  }
  return s;
}

Space Prepare(const Dataset& ds, const std::vector<size_t>& rows) {
  Space s;
  s.d = ds.dim();
  s.ip = ds.metric != Metric::kL2;
  s.base = ds.base.data;
  s.queries.resize(rows.size() * s.d);
  for (size_t q = 0; q < rows.size(); ++q) {
    std::copy_n(ds.queries.row(rows[q]), s.d, s.queries.data() + q * s.d);
  }
  if (ds.metric == Metric::kCosine) {
    for (size_t i = 0; i < ds.base.rows; ++i) NormalizeL2(s.base.data() + i * s.d, s.d);
    for (size_t q = 0; q < rows.size(); ++q) NormalizeL2(s.queries.data() + q * s.d, s.d);
  }
  return s;
}

void ParallelFor(size_t n, const std::function<void(size_t)>& fn) {
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < n;) fn(i);
  };
  std::thread t(work);
  work();
  t.join();
}

server::Condition Match(const std::string& key, server::FieldScalar v) {
  server::Condition c;
  c.type = server::Condition::Type::kMatch;
  c.key = key;
  c.value = std::move(v);
  return c;
}

Truth Oracle(const Space& s, const Case& c, size_t n, size_t nq) {
  Truth t;
  t.matches.resize(nq);
  t.ids.resize(nq);
  t.kth.resize(nq);
  ParallelFor(nq, [&](size_t q) {
    std::vector<std::pair<float, uint32_t>> heap;  // max-heap of the best k
    uint64_t m = 0;
    for (uint32_t i = 0; i < n; ++i) {
      if (!c.pass(i, q)) continue;
      ++m;
      const float dd = s.Dist(s.Query(q), s.Base(i));
      if (heap.size() < kK) {
        heap.emplace_back(dd, i);
        std::push_heap(heap.begin(), heap.end());
      } else if (dd < heap.front().first) {
        std::pop_heap(heap.begin(), heap.end());
        heap.back() = {dd, i};
        std::push_heap(heap.begin(), heap.end());
      }
    }
    std::sort_heap(heap.begin(), heap.end());
    t.matches[q] = m;
    for (const auto& [dd, id] : heap) t.ids[q].push_back(id);
    t.kth[q] = heap.size() == kK ? heap.back().first : std::numeric_limits<float>::infinity();
  });
  return t;
}

absl::StatusOr<Outcome> RunCase(const Space& s, const Case& c, const Truth& t, size_t nq,
                                int threads, double budget_s, const QueryFn& fn) {
  std::vector<std::vector<int64_t>> got(nq, std::vector<int64_t>(kK, -1));
  std::vector<QueryStats> stats(nq);
  std::vector<double> us(nq, -1);
  std::atomic<size_t> next{0};
  std::atomic<bool> stop{false};
  std::mutex mu;
  absl::Status first;
  Stopwatch wall;
  auto work = [&] {
    for (size_t q; !stop.load() && (q = next.fetch_add(1)) < nq;) {
      Stopwatch sw;
      absl::Status st = fn(q, got[q].data(), &stats[q]);
      us[q] = sw.ElapsedMicros();
      if (!st.ok()) {
        std::lock_guard<std::mutex> l(mu);
        if (first.ok()) first = st;
        stop = true;
      }
      if (wall.ElapsedSeconds() > budget_s) stop = true;
    }
  };
  std::vector<std::thread> pool;
  for (int i = 1; i < threads; ++i) pool.emplace_back(work);
  work();
  for (auto& th : pool) th.join();
  const double elapsed = wall.ElapsedSeconds();
  ZOOM_RETURN_IF_ERROR(first);
  Outcome o;
  std::vector<double> lat;
  for (size_t q = 0; q < nq; ++q) {
    if (us[q] < 0) continue;
    ++o.queries;
    lat.push_back(us[q]);
    size_t hits = 0, good = 0;
    std::vector<int64_t> seen;
    for (int64_t id : got[q]) {
      if (id < 0) continue;
      ++hits;
      if (std::find(seen.begin(), seen.end(), id) != seen.end()) continue;
      seen.push_back(id);
      if (!c.pass(static_cast<uint32_t>(id), q)) {
        ++o.violations;
        continue;
      }
      const float dd = s.Dist(s.Query(q), s.Base(static_cast<size_t>(id)));
      if (dd <= t.kth[q] + 1e-5f * std::abs(t.kth[q]) + 1e-6f) ++good;
    }
    const size_t want = std::min<uint64_t>(kK, t.matches[q]);
    const double recall = want == 0 ? 1.0 : static_cast<double>(std::min(good, want)) / want;
    o.recall += recall;
    o.min_recall = std::min(o.min_recall, recall);
    if (recall < 0.9) ++o.below_0_9;
    if (recall < 0.5) ++o.below_0_5;
    if (hits < want) ++o.short_answers;
    o.reads += static_cast<double>(stats[q].reads);
    o.preview_us += stats[q].preview_us;
    o.fullview_us += stats[q].fullview_us;
    o.rerank_us += stats[q].rerank_us;
    o.distance_evals += static_cast<double>(stats[q].distance_evals);
    if (stats[q].filter_strategy != FilterStrategy::kNone) {
      ++o.strategies[FilterStrategyName(stats[q].filter_strategy)];
    }
  }
  if (o.queries == 0) return o;
  o.recall /= o.queries;
  o.reads /= o.queries;
  o.preview_us /= o.queries;
  o.fullview_us /= o.queries;
  o.rerank_us /= o.queries;
  o.distance_evals /= o.queries;
  o.qps = o.queries / std::max(elapsed, 1e-9);
  std::sort(lat.begin(), lat.end());
  o.p50_us = Percentile(lat, 50);
  o.p99_us = Percentile(lat, 99);
  return o;
}

std::string Strategies(const Outcome& o) {
  std::vector<std::string> parts;
  for (const auto& [name, n] : o.strategies) parts.push_back(absl::StrCat(name, ":", n));
  return absl::StrJoin(parts, ",");
}

std::string ZoomKnobs::Label() const {
  return absl::StrCat("ef=", ef, ",np=", nprobe, ",K'=", rerank);
}

std::vector<ZoomKnobs> ZoomSweep(bool ivf) {
  std::vector<ZoomKnobs> zoom_sweep;
  for (uint32_t rerank : {20u, 50u, 100u, 200u}) {
    for (uint32_t v : {16u, 32u, 64u, 128u}) {
      zoom_sweep.push_back(ivf ? ZoomKnobs{64, v, rerank} : ZoomKnobs{4 * v, 16, rerank});
    }
  }
  return zoom_sweep;
}

const Row* Best(const std::vector<Row>& rows) {
  const Row* best = nullptr;
  for (const Row& r : rows) {
    if (r.o.recall >= 0.95 && (best == nullptr || best->o.recall < 0.95 || r.o.qps > best->o.qps)) {
      best = &r;
    }
  }
  if (best != nullptr) return best;
  for (const Row& r : rows) {
    if (best == nullptr || r.o.recall > best->o.recall) best = &r;
  }
  return best;
}

}  // namespace zoom::bench::filter_bench
