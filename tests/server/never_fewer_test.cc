// A search that answers OK returns min(k, live points) hits (trust, case 3):
// the layouts an index's knobs do not reach - points alternating between
// two values (the lists the calibrated knobs probe hold none of them), all
// points equal, two antipodal clusters, one distinct point among
// duplicates, a collection deleted down to a few points - on every index
// kind and code (rabitq: ivf_hnsw_pq only), with the default (calibrated) knobs, through Search and
// SearchBatch. Where the layout has at most two distinct vectors the hits'
// scores must also be the exact ones (any tie order).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/engine/collection.h"
#include "server/engine/database.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_env.h"

namespace zoom::server {
namespace {

using ::zoom::testing::TempDir;

struct Layout {
  std::string name;
  uint32_t dim;
  std::vector<float> points;   // n * dim
  std::vector<float> queries;  // nq * dim
  bool few_distinct;           // <= 2 distinct vectors: scores exact
  size_t keep = SIZE_MAX;      // delete all but the first `keep` points
};

std::vector<Layout> Layouts() {
  std::vector<Layout> out;
  std::mt19937 rng(45);
  std::normal_distribution<float> g(0, 1);
  const auto gaussian = [&](size_t n, uint32_t d) {
    std::vector<float> v(n * d);
    for (float& x : v) x = g(rng);
    return v;
  };
  {
    // The case: 4,000 points alternating [1,1,1,1] / [-1,-1,-1,-1].
    Layout l{"alternating", 4, {}, {1, -1, 1, -1, 1, 1, 1, 1, -1, -1, -1, -1}, true};
    for (int i = 0; i < 4000; ++i) {
      for (int j = 0; j < 4; ++j) l.points.push_back(i % 2 == 0 ? 1.0f : -1.0f);
    }
    const auto more = gaussian(20, 4);
    l.queries.insert(l.queries.end(), more.begin(), more.end());
    out.push_back(std::move(l));
  }
  {
    Layout l{"all_equal", 8, std::vector<float>(600 * 8, 0.5f), gaussian(20, 8), true};
    out.push_back(std::move(l));
  }
  {
    // 999 copies of one vector and one other, the query at the other.
    Layout l{"one_distinct", 8, {}, {}, true};
    for (int i = 0; i < 999; ++i) {
      for (int j = 0; j < 8; ++j) l.points.push_back(j % 2 == 0 ? 1.0f : 0.25f);
    }
    for (int j = 0; j < 8; ++j) l.points.push_back(-2.0f + j);
    for (int j = 0; j < 8; ++j) l.queries.push_back(-2.0f + j + 0.01f);
    const auto more = gaussian(10, 8);
    l.queries.insert(l.queries.end(), more.begin(), more.end());
    out.push_back(std::move(l));
  }
  {
    // Two tight clusters at +c and -c; queries between and around them.
    Layout l{"antipodal", 16, {}, gaussian(20, 16), false};
    const auto c = gaussian(1, 16);
    std::normal_distribution<float> noise(0, 0.01f);
    for (int i = 0; i < 2000; ++i) {
      for (int j = 0; j < 16; ++j) l.points.push_back((i % 2 == 0 ? 1 : -1) * c[j] + noise(rng));
    }
    out.push_back(std::move(l));
  }
  {
    // Deleted down to 3 live points: k = 10 owes 3.
    Layout l{"deleted_down", 16, gaussian(1200, 16), gaussian(20, 16), false, 3};
    out.push_back(std::move(l));
  }
  return out;
}

double TrueScore(Metric metric, const float* q, const float* x, uint32_t d) {
  double s = 0, qq = 0, xx = 0;
  for (uint32_t j = 0; j < d; ++j) {
    if (metric == Metric::kL2) {
      s += (double(q[j]) - x[j]) * (double(q[j]) - x[j]);
    } else {
      s += double(q[j]) * x[j];
      qq += double(q[j]) * q[j];
      xx += double(x[j]) * x[j];
    }
  }
  if (metric == Metric::kCosine) s /= std::sqrt(qq) * std::sqrt(xx);
  return s;
}

struct Kind {
  std::string name;
  index::IndexKind kind;
  index::CodeKind code;
};

class NeverFewerTest : public ::testing::TestWithParam<Kind> {};

TEST_P(NeverFewerTest, EverySearchReturnsMinOfKAndTheLivePoints) {
  const Kind kind = GetParam();
  TempDir tmp;
  DatabaseOptions options;
  options.data_dir = tmp.File("data");
  options.collection.auto_build_min_points = 0;
  options.collection.build_threads = 1;
  options.collection.calibration_queries = 100;
  ASSERT_OK_AND_ASSIGN(auto db, Database::Open(options));
  int made = 0;
  for (const Layout& layout : Layouts()) {
    for (Metric metric : {Metric::kL2, Metric::kCosine}) {
      SCOPED_TRACE(absl::StrCat(layout.name, " ", MetricName(metric)));
      const uint32_t d = layout.dim;
      const size_t n = layout.points.size() / d;
      CollectionConfig config;
      config.name = absl::StrCat("c", made++);
      config.dim = d;
      config.metric = metric;
      config.index.kind = kind.kind;
      config.index.pq.code = kind.code;
      if (kind.code == index::CodeKind::kRabitq) config.index.pq.nbits = 0;
      ASSERT_OK_AND_ASSIGN(auto c, db->CreateCollection(config));
      std::vector<PointRef> refs;
      for (size_t i = 0; i < n; ++i) refs.push_back({i, layout.points.data() + i * d, "", nullptr});
      ASSERT_OK(c->Upsert(refs));
      ASSERT_OK(c->maintenance().StartBuild());
      ASSERT_OK(c->maintenance().WaitForBuild());
      ASSERT_EQ(c->Info().index_state, IndexState::kReady);
      size_t live = n;
      if (layout.keep < n) {
        std::vector<uint64_t> doomed;
        for (size_t i = layout.keep; i < n; ++i) doomed.push_back(i);
        ASSERT_OK(c->Delete(doomed).status());
        live = layout.keep;
      }
      const size_t nq = layout.queries.size() / d;
      for (uint32_t k : {1u, 5u, 10u, 100u}) {
        CollectionSearchParams p;
        p.engine.k = k;
        p.engine.ef = p.engine.nprobe = p.engine.rerank_candidates = 0;  // the defaults
        std::vector<QueryResult> batch;
        ASSERT_OK(c->SearchBatch(layout.queries, nq, p, &batch));
        for (size_t q = 0; q < nq; ++q) {
          const float* query = layout.queries.data() + q * d;
          QueryResult r;
          ASSERT_OK(c->Search(absl::MakeConstSpan(query, d), p, &r));
          const size_t want = std::min<size_t>(k, live);
          ASSERT_EQ(r.hits.size(), want) << "query " << q << " k " << k;
          ASSERT_EQ(batch[q].hits.size(), want) << "batch query " << q << " k " << k;
          std::vector<uint64_t> ids;
          for (const Hit& h : r.hits) ids.push_back(h.id);
          std::sort(ids.begin(), ids.end());
          EXPECT_EQ(std::unique(ids.begin(), ids.end()), ids.end()) << "a point twice";
          if (!layout.few_distinct) continue;
          // The exact scores, best first, against the hits'.
          std::vector<double> exact;
          for (size_t i = 0; i < n; ++i) {
            exact.push_back(TrueScore(metric, query, layout.points.data() + i * d, d));
          }
          if (metric == Metric::kL2) {
            std::sort(exact.begin(), exact.end());
          } else {
            std::sort(exact.rbegin(), exact.rend());
          }
          for (size_t i = 0; i < want; ++i) {
            EXPECT_NEAR(r.hits[i].score, exact[i], 1e-3 * std::max(1.0, std::abs(exact[i])))
                << "query " << q << " k " << k << " hit " << i;
          }
        }
      }
      ASSERT_OK(db->DropCollection(config.name));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    EveryIndexKindAndCode, NeverFewerTest,
    ::testing::Values(Kind{"hnsw_pq", index::IndexKind::kHnswPq, index::CodeKind::kPq},
                      Kind{"ivf_hnsw_pq", index::IndexKind::kIvfHnswPq, index::CodeKind::kPq},
                      Kind{"ivf_hnsw_rabitq", index::IndexKind::kIvfHnswPq,
                           index::CodeKind::kRabitq}),
    [](const ::testing::TestParamInfo<Kind>& info) { return info.param.name; });

}  // namespace
}  // namespace zoom::server
