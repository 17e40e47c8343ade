// Recall as a knob (server/engine/calibration.h): the curve's text codec
// (golden, malformed input), the choice of knobs for a target, and the
// measurement itself: the recall it reports for each knob setting is what
// real searches (preview, fullview reads, exact re-rank) at those knobs get
// on the same queries, against the brute-force oracle.
#include "server/engine/calibration.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/oracle.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_env.h"

namespace zoom::server {
namespace {

using ::zoom::testing::RecallOf;
using ::zoom::testing::StatusIs;
using ::zoom::testing::TempDir;

// ---- The codec ------------------------------------------------------------------

TEST(CalibrationCodecTest, RoundTrips) {
  Calibration c;
  c.k = 10;
  c.queries = 200;
  c.indexed_points = 199800;
  c.created_unix_ms = 1796356800123;
  c.points.push_back({64, 12, 15, 0.963, 0.9541, 183.953, 14.4, 9001.25});
  c.points.push_back({512, 0, 160, 1.0, 1.0, 2048.5, 160, 120000});
  c.points.push_back({64, 12, 15, 0.958, 0.95, 120.5, 9.25, 6001.5, 1.5, 4.75});
  absl::StatusOr<Calibration> back = Calibration::Decode(c.Encode());
  ASSERT_OK(back.status());
  EXPECT_EQ(*back, c);
}

// The text as a zoomd of version 1 writes it into a collection's manifest:
// read the same forever.
TEST(CalibrationCodecTest, GoldenVersion1) {
  absl::StatusOr<Calibration> c = Calibration::Decode(
      "1 10 200 4500 1796356800123;64 12 15 0.963 0.9541 183.953 14.4;"
      "128 64 160 1 1 2048.5 160");
  ASSERT_OK(c.status());
  EXPECT_EQ(c->k, 10u);
  EXPECT_EQ(c->queries, 200u);
  EXPECT_EQ(c->indexed_points, 4500u);
  EXPECT_EQ(c->created_unix_ms, 1796356800123);
  ASSERT_EQ(c->points.size(), 2u);
  EXPECT_EQ(c->points[0], (CalibrationPoint{64, 12, 15, 0.963, 0.9541, 183.953, 14.4}));
  EXPECT_EQ(c->points[1], (CalibrationPoint{128, 64, 160, 1.0, 1.0, 2048.5, 160}));
}

// Version 2 (a point's counted work after its reads): read the same
// forever.
TEST(CalibrationCodecTest, GoldenVersion2) {
  absl::StatusOr<Calibration> c = Calibration::Decode(
      "2 10 200 4500 1796356800123;64 12 15 0.963 0.9541 183.953 14.4 12345.5;"
      "128 64 160 1 1 2048.5 160 99000");
  ASSERT_OK(c.status());
  ASSERT_EQ(c->points.size(), 2u);
  EXPECT_EQ(c->points[0], (CalibrationPoint{64, 12, 15, 0.963, 0.9541, 183.953, 14.4, 12345.5}));
  EXPECT_EQ(c->points[1], (CalibrationPoint{128, 64, 160, 1.0, 1.0, 2048.5, 160, 99000}));
}

// Version 3 (a point's band confidence and certain-in): read the same
// forever.
TEST(CalibrationCodecTest, GoldenVersion3) {
  absl::StatusOr<Calibration> c = Calibration::Decode(
      "3 10 200 4500 1796356800123;64 12 15 0.963 0.9541 183.953 14.4 12345.5 0 0;"
      "64 12 15 0.958 0.95 120.5 9.25 6001.5 1.5 4.75");
  ASSERT_OK(c.status());
  ASSERT_EQ(c->points.size(), 2u);
  EXPECT_EQ(c->points[0],
            (CalibrationPoint{64, 12, 15, 0.963, 0.9541, 183.953, 14.4, 12345.5, 0, 0}));
  EXPECT_EQ(c->points[1],
            (CalibrationPoint{64, 12, 15, 0.958, 0.95, 120.5, 9.25, 6001.5, 1.5, 4.75}));
  // The band's point is cheaper at the same lower bound: chosen.
  EXPECT_EQ(c->Choose(0.95).point.band_confidence, 1.5);
}

TEST(CalibrationCodecTest, MalformedTextIsDataLoss) {
  for (const char* text : {
           "",
           "x",
           "1 10 200 4500",                                  // short header
           "1 10 200 4500 0",                                // no points
           "1 0 200 4500 0;64 12 15 0.9 0.9 1 1",            // k 0
           "1 10 200 4500 0;64 12 15 0.9 0.9 1",             // six fields
           "1 10 200 4500 0;64 12 15 1.5 0.9 1 1",           // recall above 1
           "1 10 200 4500 0;64 12 15 nan 0.9 1 1",           // NaN
           "1 10 200 4500 0;64 12 15 0.8 0.9 1 1",           // lower bound above the mean
           "1 10 200 4500 0;0 12 15 0.9 0.9 1 1",            // ef 0
           "1 10 200 4500 0;64 12 0 0.9 0.9 1 1",            // K' 0
           "1 10 200 4500 0;64 12 15 0.9 0.9 -1 1",          // negative time
           "1 10 200 4500 0;64 12 15 0.9 0.9 1 1;",          // trailing empty point
           "1 10 200 4500 0;64 12 15 0.9 0.9 1 inf",         // infinite reads
           "1 10 200 4500 0;64 12 15 0.9 0.9 nan 1",         // NaN time
           "1 10 200 4500 0;64 99999999999 15 0.9 0.9 1 1",  // beyond uint32
       }) {
    EXPECT_THAT(Calibration::Decode(text).status(), StatusIs(absl::StatusCode::kDataLoss))
        << text;
  }
  for (const char* text : {
           "2 10 200 4500 0;64 12 15 0.9 0.9 1 1",         // version 2 without work
           "2 10 200 4500 0;64 12 15 0.9 0.9 1 1 -5",      // negative work
           "2 10 200 4500 0;64 12 15 0.9 0.9 1 1 nan",     // NaN work
           "1 10 200 4500 0;64 12 15 0.9 0.9 1 1 7",       // version 1 with work
           "0 10 200 4500 0;64 12 15 0.9 0.9 1 1",         // version 0
           "3 10 200 4500 0;64 12 15 0.9 0.9 1 1 1",       // version 3 without the band
           "3 10 200 4500 0;64 12 15 0.9 0.9 1 1 1 -1 0",  // negative confidence
           "3 10 200 4500 0;64 12 15 0.9 0.9 1 1 1 1 16",  // more certain-in than K'
           "3 10 200 4500 0;64 12 15 0.9 0.9 1 1 1 nan 0", // NaN confidence
       }) {
    EXPECT_THAT(Calibration::Decode(text).status(), StatusIs(absl::StatusCode::kDataLoss))
        << text;
  }
  EXPECT_THAT(Calibration::Decode("4 10 200 4500 0;64 12 15 0.9 0.9 1 1 1 0 0").status(),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

// ---- The choice ----------------------------------------------------------------

TEST(CalibrationChooseTest, CheapestPointWhoseLowerBoundReachesTheTarget) {
  Calibration c;
  c.points = {
      {64, 4, 10, 0.80, 0.78, 100, 10},   {64, 8, 10, 0.91, 0.90, 150, 10},
      {64, 8, 20, 0.95, 0.94, 250, 20},   {64, 16, 10, 0.955, 0.951, 200, 10},
      {64, 32, 40, 0.99, 0.985, 600, 40}, {64, 64, 40, 0.995, 0.992, 900, 40},
  };
  Calibration::Choice a = c.Choose(0.95);
  EXPECT_TRUE(a.reached);
  EXPECT_EQ(a.point.nprobe, 16u);  // 0.951 >= 0.95 at 200 us; 0.94 is below
  EXPECT_EQ(c.Choose(0.90).point.nprobe, 8u);
  EXPECT_EQ(c.Choose(0.5).point.nprobe, 4u);
  // Unreachable: the highest recall, flagged.
  Calibration::Choice b = c.Choose(0.999);
  EXPECT_FALSE(b.reached);
  EXPECT_EQ(b.point.nprobe, 64u);
  EXPECT_TRUE(c.Choose(0.992).reached);
}

// Version 2 curves choose by counted work, whatever the times say; ties go
// to the higher lower bound, then the smaller knobs, in any order.
TEST(CalibrationChooseTest, CountedWorkDecidesNotTime) {
  Calibration c;
  c.points = {
      {64, 8, 30, 0.96, 0.955, 100, 30, 20000},  // fastest measured, more work
      {64, 16, 15, 0.96, 0.952, 900, 15, 13000},
      {64, 12, 20, 0.96, 0.953, 500, 20, 13000},  // same work, higher bound
  };
  EXPECT_EQ(c.Choose(0.95).point.nprobe, 12u);
  std::reverse(c.points.begin(), c.points.end());
  EXPECT_EQ(c.Choose(0.95).point.nprobe, 12u);
  c.points[0].recall_lower = c.points[1].recall_lower;  // a full tie: the smaller knobs
  EXPECT_EQ(c.Choose(0.95).point.nprobe, 12u);
}

// ---- The measurement -------------------------------------------------------------

// Every 7th id dead (the collection's liveness), else live.
class EverySeventhDead : public index::IdFilter {
 public:
  bool IsExcluded(InternalId id) const override { return id % 7 == 3; }
};

// The liveness, less the query point itself.
class AllBut : public index::IdFilter {
 public:
  AllBut(const index::IdFilter& live, InternalId self) : live_(live), self_(self) {}
  bool IsExcluded(InternalId id) const override { return id == self_ || live_.IsExcluded(id); }

 private:
  const index::IdFilter& live_;
  InternalId self_;
};

constexpr uint32_t kDim = 32;
constexpr size_t kPoints = 3000;

// Gaussian clusters of floats: distances without ties (the oracle and a
// re-rank must not break ties differently).
std::vector<float> Clustered(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> centres(16 * kDim);
  for (float& c : centres) c = 3 * g(rng);
  std::vector<float> out(n * kDim);
  for (size_t i = 0; i < n; ++i) {
    const size_t c = rng() % 16;
    for (uint32_t j = 0; j < kDim; ++j) out[i * kDim + j] = centres[c * kDim + j] + g(rng);
  }
  return out;
}

std::unique_ptr<SearchEngine> MakeEngine(const TempDir& dir, index::IndexKind kind,
                                         uint32_t nbits = 8, uint64_t cache_bytes = 0) {
  auto store = storage::VectorStore::Create(dir.File("v.zvec"), kDim, storage::DType::kFloat32);
  EXPECT_OK(store.status());
  EngineOptions eo;
  eo.cache_bytes = cache_bytes;
  auto engine = std::make_unique<SearchEngine>(Metric::kL2, std::move(store).value(), nullptr, eo);
  const std::vector<float> x = Clustered(kPoints, 5);
  EXPECT_OK(engine->Add(x.data(), kPoints));
  index::IndexSpec spec;
  spec.kind = kind;
  spec.metric = Metric::kL2;
  spec.dim = kDim;
  spec.pq.m = nbits == 4 ? 16 : 8;
  spec.pq.nbits = nbits;
  spec.hnsw.M = 12;
  spec.hnsw.ef_construction = 80;
  spec.nlist = 32;
  spec.build_threads = 1;
  auto idx = index::BuildIndex(spec, x.data(), kPoints);
  EXPECT_OK(idx.status());
  if (idx.ok()) {
    EXPECT_OK(engine->SetIndex(std::move(idx).value()));
  }
  return engine;
}

// A kind and its PQ bits (4: ivf_hnsw_pq's fast scan, whose longer lists
// are not prefixes of shorter ones: measured one K' at a time).
struct KindBits {
  index::IndexKind kind;
  uint32_t nbits;
};
class CalibrateTest : public ::testing::TestWithParam<KindBits> {};

TEST_P(CalibrateTest, ReportsTheRecallOfRealSearchesAtEachPoint) {
  TempDir dir;
  const index::IndexKind kind = GetParam().kind;
  std::unique_ptr<SearchEngine> engine = MakeEngine(dir, kind, GetParam().nbits);
  const EverySeventhDead live;
  std::vector<InternalId> sample;
  CalibrationOptions options;
  options.queries = 40;
  options.nprobe = {1, 2, 4, 32};
  options.ef = {10, 20, 80};
  options.rerank = {10, 20, 40};
  options.sample_out = &sample;
  absl::StatusOr<Calibration> cal = Calibrate(*engine, live, options);
  ASSERT_OK(cal.status());
  EXPECT_EQ(cal->k, 10u);
  EXPECT_EQ(cal->queries, 40u);
  EXPECT_EQ(cal->indexed_points, kPoints);
  ASSERT_EQ(sample.size(), 40u);
  for (InternalId id : sample) EXPECT_FALSE(live.IsExcluded(id)) << id;
  ASSERT_FALSE(cal->points.empty());

  const bool ivf = kind == index::IndexKind::kIvfHnswPq;
  int band_points = 0;
  std::vector<float> q(kDim);
  for (const CalibrationPoint& p : cal->points) {
    SCOPED_TRACE(::testing::Message() << "ef " << p.ef << " nprobe " << p.nprobe << " K' "
                                    << p.rerank_candidates << " band " << p.band_confidence);
    if (ivf) {
      EXPECT_EQ(p.ef, std::max<uint32_t>(64, 2 * p.nprobe));
    } else {
      EXPECT_EQ(p.nprobe, 0u);
      EXPECT_LE(p.rerank_candidates, p.ef);  // an ef's list holds K' <= ef only
    }
    EXPECT_LE(p.recall_lower, p.recall);
    EXPECT_GT(p.mean_us, 0);
    if (p.band_confidence == 0) {
      EXPECT_GT(p.ssd_reads, 0);  // no cache: every candidate's block is read
      EXPECT_EQ(p.certain_in, 0);
    } else {
      EXPECT_LE(p.ssd_reads + p.certain_in, p.rerank_candidates);
      ++band_points;
    }
    double sum = 0, reads = 0;
    for (InternalId self : sample) {
      ASSERT_OK(engine->store().ReadVectors({&self, 1}, q.data()));
      const AllBut filter(live, self);
      SearchParams sp;
      sp.k = 10;
      sp.ef = p.ef;
      sp.nprobe = ivf ? p.nprobe : 16;
      sp.rerank_candidates = p.rerank_candidates;
      sp.band_confidence = p.band_confidence;
      QueryContext ctx;
      ctx.deleted = &filter;
      ctx.hidden = self;
      QueryResult got, exact;
      ASSERT_OK(engine->Search(q, sp, &got, ctx));
      ASSERT_OK(engine->ExactSearch(q, sp, &exact, ctx));
      ASSERT_EQ(exact.hits.size(), 10u);
      for (const Hit& h : got.hits) ASSERT_FALSE(filter.IsExcluded(h.id)) << h.id;
      sum += RecallOf(got.hits, exact.hits, 10);
      reads += got.stats.reads;
    }
    EXPECT_NEAR(p.recall, sum / sample.size(), 1e-9);
    // The band's reads are counted, not sampled: the engine's own.
    if (p.band_confidence > 0) EXPECT_NEAR(p.ssd_reads, reads / sample.size(), 1e-9);
  }
  // ivf_hnsw_pq keeps intervals: the band read fewer somewhere on the
  // curve (a band point that never did would be beaten and dropped).
  if (ivf) {
    EXPECT_GT(band_points, 0);
  } else {
    EXPECT_EQ(band_points, 0);  // hnsw_pq keeps none
  }
  // The whole index scanned with the largest K' finds nearly everything.
  EXPECT_GE(cal->Choose(1.0).point.recall, 0.9);
}

INSTANTIATE_TEST_SUITE_P(Kinds, CalibrateTest,
                         ::testing::Values(KindBits{index::IndexKind::kIvfHnswPq, 8},
                                           KindBits{index::IndexKind::kIvfHnswPq, 4},
                                           KindBits{index::IndexKind::kHnswPq, 8}),
                         [](const ::testing::TestParamInfo<KindBits>& info) {
                           return absl::StrCat(index::IndexKindName(info.param.kind), "_",
                                               info.param.nbits, "bit");
                         });

// Trust, case 2: the same data and flags choose the same knobs under any
// load. Two indexes built from the same points (one build thread), the
// second calibrated while other threads keep both cores busy: the same
// curve point for point (recall, reads, counted work), the same choice at
// every target. Measured times differ; nothing chosen depends on them.
TEST_P(CalibrateTest, TheSameDataChoosesTheSameKnobsUnderLoad) {
  const index::IndexKind kind = GetParam().kind;
  CalibrationOptions options;
  options.queries = 60;
  options.nprobe = {2, 4, 8, 16, 32};
  options.ef = {10, 20, 40, 80};
  options.rerank = {10, 15, 20, 40};
  const EverySeventhDead live;
  TempDir dir1, dir2;
  std::unique_ptr<SearchEngine> quiet = MakeEngine(dir1, kind, GetParam().nbits);
  absl::StatusOr<Calibration> a = Calibrate(*quiet, live, options);
  ASSERT_OK(a.status());
  std::unique_ptr<SearchEngine> loaded = MakeEngine(dir2, kind, GetParam().nbits);
  std::atomic<bool> stop{false};
  std::vector<std::thread> burners;
  for (int t = 0; t < 3; ++t) {
    burners.emplace_back([&stop] {
      volatile double x = 1;
      while (!stop.load(std::memory_order_relaxed)) {
        for (int i = 0; i < 10000; ++i) x = x * 1.0000001 + 1e-9;
      }
    });
  }
  absl::StatusOr<Calibration> b = Calibrate(*loaded, live, options);
  stop = true;
  for (std::thread& t : burners) t.join();
  ASSERT_OK(b.status());
  ASSERT_EQ(a->points.size(), b->points.size());
  for (size_t i = 0; i < a->points.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(a->points[i].recall, b->points[i].recall);
    EXPECT_EQ(a->points[i].ssd_reads, b->points[i].ssd_reads);
    EXPECT_EQ(a->points[i].work, b->points[i].work);
    EXPECT_GT(a->points[i].work, 0);
  }
  for (double target : {0.5, 0.8, 0.9, 0.95, 0.97, 0.99, 1.0}) {
    const Calibration::Choice ca = a->Choose(target), cb = b->Choose(target);
    EXPECT_EQ(std::tie(ca.point.ef, ca.point.nprobe, ca.point.rerank_candidates),
              std::tie(cb.point.ef, cb.point.nprobe, cb.point.rerank_candidates))
        << "target " << target;
  }
}

// The calibration's searches bypass the DRAM cache: their cost is the
// SSD's, and a client's first search after a build finds the cache as
// cold as the calibration found it (its sample evicted nothing).
TEST(CalibrateTest, NeitherUsesNorFillsTheCache) {
  TempDir dir;
  std::unique_ptr<SearchEngine> engine =
      MakeEngine(dir, index::IndexKind::kIvfHnswPq, 8, /*cache_bytes=*/uint64_t{1} << 22);
  const EverySeventhDead live;
  std::vector<InternalId> sample;
  CalibrationOptions options;
  options.queries = 20;
  options.nprobe = {4, 8};
  options.rerank = {10, 20};
  options.sample_out = &sample;
  absl::StatusOr<Calibration> cal = Calibrate(*engine, live,
                                              options);
  ASSERT_OK(cal.status());
  // The same reads and recall as on the same engine without a cache.
  TempDir dir2;
  std::unique_ptr<SearchEngine> uncached = MakeEngine(dir2, index::IndexKind::kIvfHnswPq, 8);
  std::vector<InternalId> sample2;
  options.sample_out = &sample2;
  absl::StatusOr<Calibration> cal2 = Calibrate(*uncached, live,
                                               options);
  ASSERT_OK(cal2.status());
  ASSERT_EQ(sample, sample2);
  ASSERT_EQ(cal->points.size(), cal2->points.size());
  for (size_t i = 0; i < cal->points.size(); ++i) {
    EXPECT_EQ(cal->points[i].ssd_reads, cal2->points[i].ssd_reads) << i;
    EXPECT_EQ(cal->points[i].recall, cal2->points[i].recall) << i;
  }
  // The same query as the calibration's first, with the same knobs: all
  // misses (a cache the calibration had filled would hit on every one).
  std::vector<float> q(kDim);
  ASSERT_OK(engine->store().ReadVectors({&sample[0], 1}, q.data()));
  const AllBut filter(live, sample[0]);
  SearchParams sp;
  sp.nprobe = 8;
  sp.ef = 64;
  sp.rerank_candidates = 20;
  QueryContext sctx;
  sctx.deleted = &filter;
  sctx.hidden = sample[0];
  QueryResult first, second;
  ASSERT_OK(engine->Search(q, sp, &first, sctx));
  EXPECT_EQ(first.stats.cache_hits, 0u);
  EXPECT_EQ(first.stats.cache_misses, 20u);
  ASSERT_OK(engine->Search(q, sp, &second, sctx));  // a client's search does fill it
  EXPECT_EQ(second.stats.cache_hits, 20u);
}

TEST(CalibrateErrorsTest, NoIndexNoPointsAndCancellation) {
  TempDir dir;
  const EverySeventhDead live;
  {
    auto store =
        storage::VectorStore::Create(dir.File("e.zvec"), kDim, storage::DType::kFloat32);
    ASSERT_OK(store.status());
    SearchEngine empty(Metric::kL2, std::move(store).value(), nullptr);
    EXPECT_THAT(Calibrate(empty, live).status(),
                StatusIs(absl::StatusCode::kFailedPrecondition));
  }
  std::unique_ptr<SearchEngine> engine = MakeEngine(dir, index::IndexKind::kIvfHnswPq);
  // Every point dead: nothing to sample.
  class AllDead : public index::IdFilter {
   public:
    bool IsExcluded(InternalId) const override { return true; }
  } dead;
  EXPECT_THAT(Calibrate(*engine, dead).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  // Asked to stop before it starts: stops at the first check.
  std::atomic<bool> stop{true};
  CalibrationOptions options;
  options.cancelled = &stop;
  EXPECT_THAT(Calibrate(*engine, live, options).status(),
              StatusIs(absl::StatusCode::kCancelled));
}

}  // namespace
}  // namespace zoom::server
