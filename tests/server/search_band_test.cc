// The band (SearchParams::band_confidence; server/engine/search_band.h):
// the fullview reads only the candidates whose rank the index's distance
// intervals leave in doubt. On a small real set (tests/data/sift-ngt-5k)
// with ivf_hnsw_pq: where the intervals are hard bounds (a confidence past
// sqrt(dim)) the answer is exactly what reading every candidate gives; at
// 2 it is nearly so with fewer reads; certain-in hits come back unread and
// flagged estimated unless exact scores or vectors are asked for.
#include <cmath>
#include <cstdio>
#include <memory>
#include <set>
#include <vector>

#include "common/texmex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/engine/search_engine.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_data.h"
#include "tests/testing/test_env.h"

namespace zoom::server {
namespace {

using ::testing::HasSubstr;
using ::zoom::testing::StatusIs;
using ::zoom::testing::TempDir;
using ::zoom::testing::TestDataPath;

constexpr size_t kBase = 4500, kQueries = 50;

const VecsMatrix<float>& Base() { return ::zoom::testing::SiftBase(); }
const VecsMatrix<float>& Queries() { return ::zoom::testing::SiftQueries(kQueries); }

std::unique_ptr<SearchEngine> MakeEngine(const TempDir& dir, Metric metric,
                                         index::IndexKind kind, uint32_t nbits = 8) {
  auto store = storage::VectorStore::Create(dir.File("v.zvec"), 128, storage::DType::kFloat32);
  EXPECT_OK(store.status());
  auto engine = std::make_unique<SearchEngine>(metric, std::move(store).value(), nullptr);
  EXPECT_OK(engine->Add(Base().data.data(), kBase));
  index::IndexSpec spec;
  spec.kind = kind;
  spec.metric = metric;
  spec.dim = 128;
  spec.pq.nbits = nbits;
  spec.pq.m = nbits == 4 ? 128 : 64;  // codes precise enough for a band
  spec.pq.train_iterations = 10;
  spec.hnsw.M = 12;
  spec.hnsw.ef_construction = 80;
  spec.nlist = 64;
  spec.build_threads = 1;
  auto idx = index::BuildIndex(spec, Base().data.data(), kBase);
  EXPECT_OK(idx.status());
  if (idx.ok()) {
    EXPECT_OK(engine->SetIndex(std::move(idx).value()));
  }
  return engine;
}

SearchParams Knobs(double confidence, bool exact_scores = false) {
  SearchParams p;
  p.k = 10;
  p.nprobe = 16;
  p.ef = 64;
  p.rerank_candidates = 40;
  p.band_confidence = confidence;
  p.exact_scores = exact_scores;
  return p;
}

QueryResult RunQuery(const SearchEngine& e, size_t q, const SearchParams& p) {
  QueryResult r;
  EXPECT_OK(e.Search(absl::MakeConstSpan(Queries().row(q), 128), p, &r));
  return r;
}

class SearchBandTest : public ::testing::TestWithParam<Metric> {};

TEST_P(SearchBandTest, HardIntervalsWithExactScoresAnswerAsReadingEveryCandidate) {
  TempDir tmp;
  auto e = MakeEngine(tmp, GetParam(), index::IndexKind::kIvfHnswPq);
  uint64_t reads = 0, all_reads = 0, out = 0;
  for (size_t q = 0; q < kQueries; ++q) {
    const QueryResult all = RunQuery(*e, q, Knobs(0));
    const QueryResult band = RunQuery(*e, q, Knobs(100, /*exact_scores=*/true));
    ASSERT_EQ(band.hits.size(), all.hits.size()) << "query " << q;
    for (size_t i = 0; i < all.hits.size(); ++i) {
      EXPECT_EQ(band.hits[i].id, all.hits[i].id) << "query " << q << " hit " << i;
      EXPECT_EQ(band.hits[i].score, all.hits[i].score);
      EXPECT_FALSE(band.hits[i].estimated);
    }
    // (Reads count distinct blocks: two candidates may share one.)
    EXPECT_LE(band.stats.reads, all.stats.reads);
    EXPECT_LE(band.stats.certain_in + band.stats.certain_out, 40u);
    reads += band.stats.reads;
    all_reads += all.stats.reads;
    out += band.stats.certain_out;
  }
  EXPECT_LE(reads, all_reads);
  if (out > 0) {
    EXPECT_LT(reads, all_reads);
  }
}

TEST_P(SearchBandTest, AtTwoDeviationsTheCertainInComeBackUnreadAndEstimated) {
  TempDir tmp;
  auto e = MakeEngine(tmp, GetParam(), index::IndexKind::kIvfHnswPq);
  uint64_t reads = 0, all_reads = 0, same = 0, total = 0, estimated = 0;
  for (size_t q = 0; q < kQueries; ++q) {
    const QueryResult all = RunQuery(*e, q, Knobs(0));
    const QueryResult band = RunQuery(*e, q, Knobs(2.0));
    ASSERT_EQ(band.hits.size(), all.hits.size()) << "query " << q;
    std::set<uint64_t> want;
    for (const Hit& h : all.hits) want.insert(h.id);
    size_t flagged = 0;
    for (const Hit& h : band.hits) {
      same += want.count(h.id);
      flagged += h.estimated;
    }
    total += all.hits.size();
    // Every certain-in is a hit, unread; the rest of the band is read.
    EXPECT_EQ(flagged, band.stats.certain_in) << "query " << q;
    EXPECT_LE(band.stats.reads, all.stats.reads) << "query " << q;
    EXPECT_LE(band.stats.certain_in, 10u);
    estimated += flagged;
    reads += band.stats.reads;
    all_reads += all.stats.reads;
    // Best first, whichever scores were estimated.
    for (size_t i = 1; i < band.hits.size(); ++i) {
      EXPECT_TRUE(Scorer(GetParam()).Before(band.hits[i - 1].score, band.hits[i - 1].id,
                                            band.hits[i].score, band.hits[i].id));
    }
  }
  std::printf("%s: %zu of %zu hits as reading all, reads %zu vs %zu, %zu estimated\n",
              MetricName(GetParam()), size_t(same), size_t(total), size_t(reads),
              size_t(all_reads), size_t(estimated));
  EXPECT_GE(double(same), 0.99 * double(total));
  EXPECT_LT(reads, all_reads);
  EXPECT_GT(estimated, 0u);
  // Vectors asked for: every hit read, none estimated.
  SearchParams p = Knobs(2.0);
  p.with_vectors = true;
  const QueryResult v = RunQuery(*e, 0, p);
  for (const Hit& h : v.hits) {
    EXPECT_FALSE(h.estimated);
    EXPECT_EQ(h.vector.size(), 128u);
  }
}

INSTANTIATE_TEST_SUITE_P(Metrics, SearchBandTest,
                         ::testing::Values(Metric::kL2, Metric::kCosine,
                                           Metric::kInnerProduct),
                         [](const ::testing::TestParamInfo<Metric>& info) {
                           return std::string(MetricName(info.param));
                         });

TEST(SearchBandKindsTest, AnIndexWithoutIntervalsReadsEveryCandidate) {
  TempDir tmp;
  auto e = MakeEngine(tmp, Metric::kL2, index::IndexKind::kHnswPq);
  const QueryResult all = RunQuery(*e, 0, Knobs(0));
  const QueryResult band = RunQuery(*e, 0, Knobs(2.0));
  EXPECT_EQ(band.stats.reads, all.stats.reads);
  EXPECT_EQ(band.stats.certain_in + band.stats.certain_out, 0u);
  ASSERT_EQ(band.hits.size(), all.hits.size());
  for (size_t i = 0; i < all.hits.size(); ++i) EXPECT_EQ(band.hits[i].id, all.hits[i].id);
}

TEST(SearchBandKindsTest, BadKnobsAreRefused) {
  const std::vector<float> q(128, 1.0f);
  SearchParams p = Knobs(2.0);
  p.rerank_stop_sd = 2;
  EXPECT_THAT(ValidateQuery(Metric::kL2, 128, q, p, SearchLimits{}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("set one")));
  for (double bad : {-1.0, 101.0, std::nan("")}) {
    p = Knobs(bad);
    EXPECT_THAT(ValidateQuery(Metric::kL2, 128, q, p, SearchLimits{}),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("band_confidence")));
  }
}

}  // namespace
}  // namespace zoom::server
