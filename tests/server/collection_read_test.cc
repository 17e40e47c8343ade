// Collection reads: exact search against a brute-force oracle (double
// precision) over the live points, indexed search recall and later writes
// seen by the index, with_vectors and the batch path reading nothing twice,
// searches and gets racing a writer, and recall as a knob (a target recall
// picks the calibrated knobs; the collection's target or knobs, the server's).
#include "tests/server/collection_test_util.h"

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/engine/collection.h"
#include "server/engine/database.h"
#include "storage/block_reader.h"
#include "tests/testing/status_matchers.h"

namespace zoom::server {
namespace {

// The shared fixture and helpers (collection_test_util.h).
using namespace collection_testing;  // NOLINT(build/namespaces)
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::zoom::testing::StatusIs;

// ---- Exact search -----------------------------------------------------------

class ExactSearchTest : public CollectionTest,
                        public ::testing::WithParamInterface<Metric> {};

TEST_P(ExactSearchTest, BeforeAnyIndexEqualsTheOracleOverLivePoints) {
  const Metric metric = GetParam();
  constexpr uint32_t kDim = 24;
  OpenDb();
  auto c = Create("exact", kDim, metric);
  ASSERT_NE(c, nullptr);
  Model model;
  UpsertRange(*c, 0, 2000, ClusteredVectors(2000, kDim, 11), &model);
  // Some deleted, some overwritten with other vectors.
  std::vector<uint64_t> del;
  for (size_t i = 0; i < 2000; i += 7) del.push_back(ExtId(i));
  ASSERT_OK(Delete(*c, del, &model));
  std::vector<uint64_t> over;
  for (size_t i = 3; i < 2000; i += 11) {
    if (model.count(ExtId(i))) over.push_back(ExtId(i));
  }
  ASSERT_OK(
      Upsert(*c, over, ClusteredVectors(over.size(), kDim, 12), {}, &model));

  const auto queries = ClusteredVectors(50, kDim, 99);
  bool exact_used = false;
  Search(*c, queries.data(), 10, /*exact=*/false, &exact_used);
  EXPECT_TRUE(exact_used) << "no index yet: the search must be exact";
  ExpectExactSearchesMatchOracle(*c, model, queries, 50, 10);
  // k larger than the collection's live points is fine elsewhere; here a
  // deep k checks the ordering further down.
  ExpectExactSearchesMatchOracle(*c, model, queries, 5, 200);
}

INSTANTIATE_TEST_SUITE_P(Metrics, ExactSearchTest,
                         ::testing::Values(Metric::kL2, Metric::kInnerProduct,
                                           Metric::kCosine),
                         [](const auto& info) {
                           return std::string(MetricName(info.param));
                         });

// ---- Indexed search ---------------------------------------------------------

class IndexedSearchTest : public CollectionTest,
                          public ::testing::WithParamInterface<Metric> {};

TEST_P(IndexedSearchTest, BuildReachesReadyWithRecallAndSeesLaterWrites) {
  const Metric metric = GetParam();
  constexpr uint32_t kDim = 24;
  constexpr size_t kN = 3000;
  OpenDb();
  auto c = Create("indexed", kDim, metric);
  ASSERT_NE(c, nullptr);
  Model model;
  const auto base = ClusteredVectors(kN, kDim, 41);
  UpsertRange(*c, 0, kN, base, &model);
  std::vector<uint64_t> del;
  for (size_t i = 0; i < kN; i += 10) del.push_back(ExtId(i));
  ASSERT_OK(Delete(*c, del, &model));

  ASSERT_OK(c->maintenance().StartBuild());
  ASSERT_OK(c->maintenance().WaitForBuild());
  CollectionInfo info = c->Info();
  EXPECT_EQ(info.index_state, IndexState::kReady);
  EXPECT_EQ(info.indexed_points, kN);  // dead records are indexed, filtered
  EXPECT_THAT(info.index_error, IsEmpty());

  const auto queries = ClusteredVectors(100, kDim, 42);
  const double recall = IndexedRecall(*c, model, queries, 100);
  RecordProperty("recall_at_10", std::to_string(recall));
  std::printf("[ recall@10 %s ] %.4f\n", MetricName(metric), recall);
  EXPECT_GE(recall, kRecallFloor);

  // Points upserted after the build are found at once, by the index too;
  // points deleted after it never.
  const auto later = ClusteredVectors(200, kDim, 43);
  UpsertRange(*c, kN, 200, later, &model);
  std::vector<uint64_t> del2;
  for (size_t i = 5; i < kN; i += 10) del2.push_back(ExtId(i));
  ASSERT_OK(Delete(*c, del2, &model));
  info = c->Info();
  EXPECT_EQ(info.indexed_points, kN + 200);
  EXPECT_EQ(info.points, model.size());
  // Exact search equals the oracle over the new live set; the new points
  // the oracle ranks in a top 10 are found by the index too.
  size_t new_in_oracle = 0, new_found = 0;
  for (size_t i = 0; i < 200; ++i) {
    SCOPED_TRACE(i);
    const float* v = later.data() + i * kDim;
    auto hits = Search(*c, v, 10, /*exact=*/true);
    ExpectMatchesOracle(hits, model, metric, v, 10);
    // For L2 and cosine the point itself is the best match (for IP a
    // longer vector may beat it).
    if (metric != Metric::kInnerProduct) {
      ASSERT_FALSE(hits.empty());
      EXPECT_EQ(hits[0].id, ExtId(kN + i));
    }
    hits = Search(*c, v, 10, /*exact=*/false);
    for (const Scored& want : Oracle(model, metric, v, 10)) {
      if (want.id < ExtId(kN)) continue;
      ++new_in_oracle;
      for (const auto& h : hits) new_found += h.id == want.id;
    }
  }
  RecordProperty("later_points_found", std::to_string(new_found));
  std::printf("[ later points found %s ] %zu of %zu\n", MetricName(metric),
              new_found, new_in_oracle);
  EXPECT_GE(new_in_oracle, metric == Metric::kInnerProduct ? 20u : 200u);
  EXPECT_GE(double(new_found), 0.95 * double(new_in_oracle));
  // Queries on the points deleted after the build never return them.
  for (size_t i = 5; i < kN; i += 10) {
    const float* v = base.data() + i * kDim;
    for (const auto& h : Search(*c, v, 10, /*exact=*/false)) {
      ASSERT_TRUE(model.count(h.id)) << "deleted id " << h.id << " returned";
    }
  }
  const double recall_after = IndexedRecall(*c, model, queries, 100);
  std::printf("[ recall@10 after writes %s ] %.4f\n", MetricName(metric),
              recall_after);
  EXPECT_GE(recall_after, kRecallFloor);
}

INSTANTIATE_TEST_SUITE_P(Metrics, IndexedSearchTest,
                         ::testing::Values(Metric::kL2, Metric::kInnerProduct,
                                           Metric::kCosine),
                         [](const auto& info) {
                           return std::string(MetricName(info.param));
                         });

// with_vectors takes the hits' vectors from the fullview that just read
// them: the same vectors as Get, and no read beyond the fullview's.
// Counts the read batches of every vector file.
class CountingReader final : public storage::BlockReader {
 public:
  CountingReader(std::unique_ptr<storage::BlockReader> inner, std::atomic<int>* batches)
      : inner_(std::move(inner)), batches_(batches) {}
  absl::Status ReadBatch(absl::Span<storage::ReadRequest> requests) const override {
    batches_->fetch_add(1);
    return inner_->ReadBatch(requests);
  }
  absl::StatusOr<uint8_t*> Scratch(size_t bytes) const override { return inner_->Scratch(bytes); }
  size_t alignment() const override { return inner_->alignment(); }
  storage::IoBackend backend() const override { return inner_->backend(); }
  bool direct_io() const override { return inner_->direct_io(); }
  const std::string& path() const override { return inner_->path(); }
  std::string Describe() const override { return "counting " + inner_->Describe(); }

 private:
  std::unique_ptr<storage::BlockReader> inner_;
  std::atomic<int>* batches_;
};

TEST_F(CollectionTest, SearchWithVectorsReadsNothingTwice) {
  constexpr uint32_t kDim = 16;
  std::atomic<int> batches{0};
  options_.collection.store.reader_factory =
      [&batches](const std::string& path, const storage::BlockReaderOptions& o)
      -> absl::StatusOr<std::unique_ptr<storage::BlockReader>> {
    auto inner = storage::MakeBlockReader(path, o);
    if (!inner.ok()) return inner.status();
    return std::make_unique<CountingReader>(std::move(*inner), &batches);
  };
  OpenDb();
  auto c = Create("vectors", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  Model model;
  UpsertRange(*c, 0, 1000, ClusteredVectors(1000, kDim, 601), &model);
  ASSERT_OK(c->maintenance().StartBuild());
  ASSERT_OK(c->maintenance().WaitForBuild());
  const auto queries = ClusteredVectors(5, kDim, 602);
  for (size_t q = 0; q < 5; ++q) {
    CollectionSearchParams p;
    p.engine.k = 10;
    std::vector<Hit> plain, with;
    QueryStats plain_stats, with_stats;
    const int before = batches.load();
    ASSERT_OK(SearchInto(*c, queries.data() + q * kDim, kDim, p, &plain, &plain_stats));
    const int plain_batches = batches.load() - before;
    EXPECT_EQ(plain_batches, 1);  // the fullview
    p.engine.with_vectors = true;
    const int before_with = batches.load();
    ASSERT_OK(SearchInto(*c, queries.data() + q * kDim, kDim, p, &with, &with_stats));
    EXPECT_EQ(batches.load() - before_with, plain_batches);  // nothing read twice
    ASSERT_EQ(with.size(), plain.size());
    EXPECT_EQ(with_stats.reads, plain_stats.reads);
    for (size_t i = 0; i < with.size(); ++i) {
      EXPECT_EQ(with[i].id, plain[i].id);
      EXPECT_EQ(with[i].vector, model.at(with[i].id).vector) << "hit " << i;
    }
    // The batch path too.
    std::vector<QueryResult> batch;
    const int before_batch = batches.load();
    ASSERT_OK(c->SearchBatch(absl::MakeConstSpan(queries.data() + q * kDim, kDim), 1, p, &batch));
    EXPECT_EQ(batches.load() - before_batch, plain_batches);
    ASSERT_EQ(batch.size(), 1u);
    ASSERT_EQ(batch[0].hits.size(), with.size());
    EXPECT_EQ(batch[0].stats.reads, plain_stats.reads);
    for (size_t i = 0; i < with.size(); ++i) EXPECT_EQ(batch[0].hits[i].vector, with[i].vector);
  }
}

// ---- Concurrency ------------------------------------------------------------

// Searches (exact and indexed) and gets run while one writer upserts new
// ids, overwrites others and deletes a planned sequence of ids. A search
// must never return an id whose Delete returned before the search started,
// never return an id twice, and must find a new point whose Upsert
// returned before it started.
TEST_F(CollectionTest, ConcurrentSearchDuringUpsertAndDelete) {
  constexpr uint32_t kDim = 16;
  constexpr size_t kInitial = 1200;
  constexpr size_t kRounds = 30;
  constexpr size_t kPerRound = 10;
  OpenDb();
  auto c = Create("race", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  const auto base = ClusteredVectors(kInitial, kDim, 131);
  UpsertRange(*c, 0, kInitial, base, nullptr);
  ASSERT_OK(c->maintenance().StartBuild());
  ASSERT_OK(c->maintenance().WaitForBuild());

  // The writer's plan, fixed before any thread starts (read-only after).
  std::vector<uint64_t> delete_plan;  // ExtId(0), ExtId(2), ...
  for (size_t i = 0; i < kRounds * kPerRound; ++i)
    delete_plan.push_back(ExtId(2 * i));
  absl::flat_hash_map<uint64_t, size_t> delete_pos;
  for (size_t i = 0; i < delete_plan.size(); ++i)
    delete_pos[delete_plan[i]] = i;
  const auto fresh = ClusteredVectors(kRounds * kPerRound, kDim, 132);
  const auto moved = ClusteredVectors(kRounds * kPerRound, kDim, 133);
  auto fresh_id = [](size_t i) { return ExtId(100000 + i); };

  std::atomic<size_t> deleted{0};   // delete_plan[0, deleted) are gone
  std::atomic<size_t> inserted{0};  // fresh points [0, inserted) are in
  std::atomic<bool> done{false};
  std::atomic<int> violations{0};
  std::atomic<int> errors{0};
  std::atomic<uint64_t> searches{0};

  std::thread writer([&] {
    for (size_t r = 0; r < kRounds; ++r) {
      std::vector<PointRef> points;
      for (size_t i = r * kPerRound; i < (r + 1) * kPerRound; ++i) {
        points.push_back({fresh_id(i), fresh.data() + i * kDim, "fresh"});
      }
      if (!c->Upsert(points).ok()) ++errors;
      inserted.store((r + 1) * kPerRound, std::memory_order_release);
      // Overwrite odd ids (never deleted) with other vectors.
      points.clear();
      for (size_t i = r * kPerRound; i < (r + 1) * kPerRound; ++i) {
        points.push_back({ExtId(2 * i + 1), moved.data() + i * kDim, "moved"});
      }
      if (!c->Upsert(points).ok()) ++errors;
      std::vector<uint64_t> ids(delete_plan.begin() + r * kPerRound,
                                delete_plan.begin() + (r + 1) * kPerRound);
      auto n = c->Delete(ids);
      if (!n.ok() || *n != kPerRound) ++errors;
      deleted.store((r + 1) * kPerRound, std::memory_order_release);
    }
    done = true;
  });

  auto reader = [&](int t) {
    std::mt19937 rng(140 + t);
    bool last_round = false;
    while (!last_round) {
      last_round = done.load();
      const size_t gone = deleted.load(std::memory_order_acquire);
      const size_t in = inserted.load(std::memory_order_acquire);
      auto was_deleted = [&](uint64_t id) {
        auto it = delete_pos.find(id);
        return it != delete_pos.end() && it->second < gone;
      };
      // Query on a deleted point, a fresh one, or anywhere.
      const float* q;
      size_t fresh_i = 0;
      const int kind = rng() % 3;
      if (kind == 0 && gone > 0) {
        q = base.data() + (2 * (rng() % gone)) * kDim;
      } else if (kind == 1 && in > 0) {
        fresh_i = rng() % in;
        q = fresh.data() + fresh_i * kDim;
      } else {
        q = base.data() + (rng() % kInitial) * kDim;
      }
      const bool exact = rng() % 2 == 0;
      CollectionSearchParams p;
      p.engine.k = 10;
      p.engine.exact = exact;
      std::vector<Hit> hits;
      if (!SearchInto(*c, q, kDim, p, &hits).ok()) {
        ++errors;
        continue;
      }
      ++searches;
      absl::flat_hash_set<uint64_t> seen;
      for (const Hit& h : hits) {
        if (was_deleted(h.id) || !seen.insert(h.id).second) ++violations;
      }
      if (kind == 1 && in > 0 && exact &&
          (hits.empty() || hits[0].id != fresh_id(fresh_i))) {
        ++violations;
      }
      // Get agrees.
      std::vector<uint64_t> ask = {delete_plan[rng() % delete_plan.size()]};
      std::vector<PointData> got;
      if (!c->Get(ask, false, false, &got).ok()) {
        ++errors;
      } else if (was_deleted(ask[0]) && !got.empty()) {
        ++violations;
      }
    }
  };
  std::vector<std::thread> readers;
  for (int t = 0; t < 3; ++t) readers.emplace_back(reader, t);
  writer.join();
  for (auto& th : readers) th.join();

  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(violations.load(), 0);
  EXPECT_GT(searches.load(), 0u);
  const CollectionInfo info = c->Info();
  EXPECT_EQ(info.points, kInitial);  // + fresh - deleted
  EXPECT_EQ(info.deleted_records, 2 * kRounds * kPerRound);
  // After the writer: every planned id is gone, every fresh one is found.
  for (size_t i = 0; i < kRounds * kPerRound; i += 7) {
    auto hits = Search(*c, base.data() + 2 * i * kDim, 10, false);
    for (const auto& h : hits) EXPECT_FALSE(delete_pos.contains(h.id)) << h.id;
    hits = Search(*c, fresh.data() + i * kDim, 1, true);
    ASSERT_EQ(hits.size(), 1u);
    EXPECT_EQ(hits[0].id, fresh_id(i));
  }
}

// Gets and searches with payloads racing a writer that overwrites the same
// points again and again (and deletes and writes some back): every point
// answered carries the payload and fields of the same write as its vector,
// never an empty payload (a writer replaces a record and erases the old
// one's payload in one commit: a reader that found the old record used to
// read nothing; found by the fault runner as a replica "holding" b'').
TEST_F(CollectionTest, PayloadsReadWhileTheirPointsAreRewrittenMatchTheirVectors) {
  constexpr uint32_t kDim = 4;
  constexpr uint64_t kPoints = 40;
  constexpr int kGenerations = 300;
  OpenDb();
  auto c = Create("torn", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  auto write = [&](const std::vector<uint64_t>& ids, int gen) {
    std::vector<float> v(ids.size() * kDim, 0.0f);
    std::vector<std::string> payloads;
    std::vector<PayloadFields> fields(ids.size());
    std::vector<PointRef> refs;
    payloads.reserve(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      v[i * kDim] = static_cast<float>(ids[i]);
      v[i * kDim + 1] = static_cast<float>(gen);
      payloads.push_back(absl::StrCat("g", gen));
      fields[i]["gen"] = FieldValue::Of(FieldScalar(int64_t{gen}));
    }
    for (size_t i = 0; i < ids.size(); ++i) {
      refs.push_back({ids[i], v.data() + i * kDim, payloads[i], &fields[i]});
    }
    return c->Upsert(refs);
  };
  std::vector<uint64_t> all;
  for (uint64_t id = 0; id < kPoints; ++id) all.push_back(id);
  ASSERT_OK(write(all, 0));
  std::atomic<bool> done{false};
  std::atomic<int> torn{0}, errors{0};
  std::atomic<uint64_t> reads{0};
  auto check = [&](uint64_t id, const std::vector<float>& vec, const std::string& payload,
                   const PayloadFields& f) {
    auto it = f.find("gen");
    const int gen = static_cast<int>(vec.size() == kDim ? vec[1] : -1);
    if (vec.size() != kDim || vec[0] != static_cast<float>(id) ||
        payload != absl::StrCat("g", gen) || it == f.end() ||
        std::get<int64_t>(it->second.values[0]) != gen) {
      ++torn;
    }
  };
  std::thread writer([&] {
    std::mt19937 rng(7);
    for (int gen = 1; gen <= kGenerations; ++gen) {
      if (!write(all, gen).ok()) ++errors;
      if (gen % 10 == 0) {
        std::vector<uint64_t> some = {rng() % kPoints, rng() % kPoints};
        if (!c->Delete(some).ok()) ++errors;
        if (!write(some, gen).ok()) ++errors;
      }
    }
    done = true;
  });
  auto reader = [&](int t) {
    std::mt19937 rng(20 + t);
    while (!done.load()) {
      std::vector<PointData> got;
      if (!c->Get(all, true, true, &got).ok()) {
        ++errors;
        continue;
      }
      for (const PointData& p : got) check(p.id, p.vector, p.payload, p.fields);
      CollectionSearchParams sp;
      sp.engine.k = 5;
      sp.engine.exact = true;
      sp.engine.with_vectors = true;
      sp.with_payload = true;
      std::vector<float> q = {static_cast<float>(rng() % kPoints), 0.0f, 0.0f, 0.0f};
      QueryResult r;
      if (!c->Search(q, sp, &r).ok()) {
        ++errors;
        continue;
      }
      for (const Hit& h : r.hits) {
        // A hit rewritten after the search found it carries its payload
        // now: its own payload and fields agree, whatever the vector. One
        // deleted meanwhile (the writer deletes some) stays a hit with
        // neither.
        if (h.payload.empty() && h.fields.empty()) continue;
        auto it = h.fields.find("gen");
        if (h.payload.empty() || it == h.fields.end() ||
            h.payload != absl::StrCat("g", std::get<int64_t>(it->second.values[0]))) {
          ++torn;
        }
      }
      ++reads;
    }
  };
  std::vector<std::thread> readers;
  for (int t = 0; t < 2; ++t) readers.emplace_back(reader, t);
  writer.join();
  for (auto& th : readers) th.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(torn.load(), 0) << "over " << reads.load() << " reads";
  EXPECT_GT(reads.load(), 0u);
}

// ---- Recall as a knob (calibration.h) ---------------------------------------

// A search's stats with `target` (0: none) and the knobs given (0: none).
QueryStats StatsOf(const Collection& c, const float* q, double target, uint32_t k = 10,
                   uint32_t nprobe = 0) {
  CollectionSearchParams p;
  p.engine.k = k;
  p.engine.ef = 0;
  p.engine.nprobe = nprobe;
  p.engine.rerank_candidates = 0;
  p.target_recall = target;
  QueryResult r;
  EXPECT_OK(c.Search(absl::MakeConstSpan(q, c.config().dim), p, &r));
  return r.stats;
}

TEST_F(CollectionTest, ABuildCalibratesAndATargetPicksTheCheapestKnobsReachingIt) {
  constexpr uint32_t kDim = 16;
  OpenDb();
  auto c = Create("cal", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  Model model;
  const auto base = ClusteredVectors(3000, kDim, 41);
  UpsertRange(*c, 0, 3000, base, &model);
  // Without an index there is nothing to calibrate: the default knobs.
  const auto queries = ClusteredVectors(5, kDim, 42);
  QueryStats none = StatsOf(*c, queries.data(), 0.9);
  EXPECT_FALSE(none.knobs_calibrated);
  EXPECT_FLOAT_EQ(none.target_recall, 0.9f);
  EXPECT_THAT(c->maintenance().CalibrateNow(), StatusIs(absl::StatusCode::kFailedPrecondition));

  ASSERT_OK(c->maintenance().StartBuild());
  ASSERT_OK(c->maintenance().WaitForBuild());
  CollectionInfo info = c->Info();
  ASSERT_NE(info.calibration, nullptr);
  EXPECT_TRUE(info.calibration_current);
  EXPECT_EQ(info.calibration_error, "");
  EXPECT_EQ(info.calibration->queries, 200u);  // max(200, 3000 / 100)
  EXPECT_EQ(info.calibration->indexed_points, 3000u);
  EXPECT_DOUBLE_EQ(info.default_target_recall, 0.95);  // the server's
  const Calibration cal = *info.calibration;

  // A request's target: the chosen point's knobs, and its recall.
  for (double target : {0.5, 0.9, 0.95, 0.99, 1.0}) {
    SCOPED_TRACE(target);
    const Calibration::Choice want = cal.Choose(target);
    QueryStats s = StatsOf(*c, queries.data(), target);
    EXPECT_TRUE(s.knobs_calibrated);
    EXPECT_FLOAT_EQ(s.target_recall, static_cast<float>(target));
    EXPECT_EQ(s.target_reached, want.reached);
    EXPECT_EQ(s.knob_ef, want.point.ef);
    EXPECT_EQ(s.knob_nprobe, want.point.nprobe);
    EXPECT_EQ(s.knob_rerank, want.point.rerank_candidates);
    EXPECT_FLOAT_EQ(s.calibrated_recall, static_cast<float>(want.point.recall));
  }
  // No target, no knobs: the server's default target.
  const Calibration::Choice def = cal.Choose(0.95);
  QueryStats s = StatsOf(*c, queries.data(), 0);
  EXPECT_FLOAT_EQ(s.target_recall, 0.95f);
  EXPECT_EQ(s.knob_nprobe, def.point.nprobe);
  // A knob the request sets is kept; the curve's recall no longer applies.
  s = StatsOf(*c, queries.data(), 0.95, 10, /*nprobe=*/7);
  EXPECT_EQ(s.knob_nprobe, 7u);
  EXPECT_EQ(s.knob_rerank, def.point.rerank_candidates);
  EXPECT_EQ(s.calibrated_recall, 0.0f);
  // k above the curve's 10: K' grows with it.
  s = StatsOf(*c, queries.data(), 0.95, 25);
  EXPECT_EQ(s.knob_rerank, (def.point.rerank_candidates * 25 + 9) / 10);
  // Exact searches take no knobs.
  CollectionSearchParams exact;
  exact.engine.k = 10;
  exact.engine.exact = true;
  exact.target_recall = 0.99;
  QueryResult r;
  ASSERT_OK(c->Search(absl::MakeConstSpan(queries.data(), kDim), exact, &r));
  EXPECT_FALSE(r.stats.knobs_calibrated);
  // Targets outside (0, 1].
  for (double bad : {-0.1, 1.5, std::nan(""), std::numeric_limits<double>::infinity()}) {
    CollectionSearchParams p;
    p.engine.k = 10;
    p.target_recall = bad;
    EXPECT_THAT(c->Search(absl::MakeConstSpan(queries.data(), kDim), p, &r),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("target_recall")));
  }

  // The curve survives a restart with its index.
  c.reset();
  ReopenDb();
  c = Get("cal");
  ASSERT_NE(c, nullptr);
  info = c->Info();
  ASSERT_NE(info.calibration, nullptr);
  EXPECT_TRUE(info.calibration_current);
  EXPECT_EQ(info.calibration->Encode(), cal.Encode());
  EXPECT_FALSE(c->maintenance().MaybeStartCalibration());  // nothing to measure

  // A compaction makes a new index: the old curve serves until the new one
  // is measured (in the background, by maintenance).
  std::vector<uint64_t> del;
  for (size_t i = 0; i < 3000; i += 3) del.push_back(ExtId(i));
  ASSERT_OK(Delete(*c, del, &model, nullptr));
  ASSERT_OK(c->maintenance().Compact());
  info = c->Info();
  ASSERT_NE(info.calibration, nullptr);
  EXPECT_FALSE(info.calibration_current);
  EXPECT_TRUE(StatsOf(*c, queries.data(), 0.95).knobs_calibrated);
  EXPECT_TRUE(c->maintenance().MaybeStartCalibration());
  ASSERT_OK(c->maintenance().WaitForCalibration());
  info = c->Info();
  EXPECT_TRUE(info.calibration_current);
  EXPECT_EQ(info.calibration->indexed_points, 2000u);
  EXPECT_FALSE(c->maintenance().MaybeStartCalibration());
  // ... and is what a restart finds.
  const std::string measured = info.calibration->Encode();
  c.reset();
  ReopenDb();
  c = Get("cal");
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(c->Info().calibration_current);
  EXPECT_EQ(c->Info().calibration->Encode(), measured);
}

TEST_F(CollectionTest, TheCollectionsTargetOrKnobsBeatTheServersTarget) {
  constexpr uint32_t kDim = 16;
  OpenDb();
  const auto base = ClusteredVectors(1500, kDim, 43);
  const auto q = ClusteredVectors(1, kDim, 44);
  // Knobs of its own (not the built-in 64 / 16 / 100): no target applies
  // unless the request names one.
  CollectionConfig config;
  config.name = "knobs";
  config.dim = kDim;
  config.default_nprobe = 32;
  ASSERT_OK_AND_ASSIGN(auto c, db_->CreateCollection(config));
  Model model;
  UpsertRange(*c, 0, 1500, base, &model);
  ASSERT_OK(c->maintenance().StartBuild());
  ASSERT_OK(c->maintenance().WaitForBuild());
  EXPECT_EQ(c->Info().default_target_recall, 0.0);
  QueryStats s = StatsOf(*c, q.data(), 0);
  EXPECT_FALSE(s.knobs_calibrated);
  EXPECT_EQ(s.target_recall, 0.0f);
  EXPECT_EQ(s.knob_nprobe, 32u);
  EXPECT_EQ(s.knob_rerank, 100u);
  EXPECT_TRUE(StatsOf(*c, q.data(), 0.9).knobs_calibrated);
  // A target of its own beats its knobs.
  config.name = "target";
  config.default_target_recall = 0.9;
  ASSERT_OK_AND_ASSIGN(auto t, db_->CreateCollection(config));
  UpsertRange(*t, 0, 1500, base, &model);
  ASSERT_OK(t->maintenance().StartBuild());
  ASSERT_OK(t->maintenance().WaitForBuild());
  EXPECT_DOUBLE_EQ(t->Info().default_target_recall, 0.9);
  s = StatsOf(*t, q.data(), 0);
  EXPECT_TRUE(s.knobs_calibrated);
  EXPECT_FLOAT_EQ(s.target_recall, 0.9f);
  EXPECT_EQ(s.knob_nprobe, t->Info().calibration->Choose(0.9).point.nprobe);
  // A target outside [0, 1] is refused at creation.
  config.name = "bad";
  config.default_target_recall = 1.01;
  EXPECT_THAT(db_->CreateCollection(config).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("target_recall")));
}

TEST_F(CollectionTest, WithoutCalibrationATargetRunsTheDefaultKnobs) {
  options_.collection.calibration_queries = 0;
  constexpr uint32_t kDim = 8;
  OpenDb();
  auto c = Create("off", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  Model model;
  UpsertRange(*c, 0, 1000, ClusteredVectors(1000, kDim, 45), &model);
  ASSERT_OK(c->maintenance().StartBuild());
  ASSERT_OK(c->maintenance().WaitForBuild());
  EXPECT_EQ(c->Info().calibration, nullptr);
  EXPECT_FALSE(c->maintenance().MaybeStartCalibration());
  const auto q = ClusteredVectors(1, kDim, 46);
  QueryStats s = StatsOf(*c, q.data(), 0.95);
  EXPECT_FALSE(s.knobs_calibrated);
  EXPECT_FALSE(s.target_reached);
  EXPECT_EQ(s.knob_nprobe, 16u);
  EXPECT_EQ(s.knob_rerank, 100u);
}

}  // namespace
}  // namespace zoom::server
