// Collection maintenance: index builds (their options, the 256-point floor,
// automatic builds at the threshold, writes during a build), failing builds
// and compactions (a legacy point breaking the magnitude rule, training on
// live points only, the retry backoff), replaced indexes freed under
// searches, and automatic retrains on growth and on drift.
#include "tests/server/collection_test_util.h"

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/engine/collection.h"
#include "server/engine/database.h"
#include "storage/metadata_store.h"
#include "storage/vector_store.h"
#include "tests/testing/status_matchers.h"

namespace zoom::server {
namespace {

// The shared fixture and helpers (collection_test_util.h).
using namespace collection_testing;  // NOLINT(build/namespaces)
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::zoom::testing::StatusIs;

// ---- Index builds -----------------------------------------------------------

// Non-default index options end to end: pq_nbits 4 (ivf_hnsw_pq's fast
// scan) and compact_links (hnsw_pq's bit-packed graph). The config is kept,
// the build reaches the recall floor, and a reopened database serves the
// same answers from the saved index.
TEST_F(CollectionTest, NonDefaultIndexOptionsBuildAndSurviveReopen) {
  constexpr uint32_t kDim = 24;
  constexpr size_t kN = 3000;
  OpenDb();
  std::vector<CollectionConfig> configs(2);
  configs[0].name = "pq4";
  configs[0].index.kind = index::IndexKind::kIvfHnswPq;
  configs[0].index.pq.m = 24;
  configs[0].index.pq.nbits = 4;
  configs[1].name = "compact";
  configs[1].index.kind = index::IndexKind::kHnswPq;
  configs[1].index.pq.m = 12;
  configs[1].index.hnsw.compact_links = true;
  const auto queries = ClusteredVectors(100, kDim, 52);
  std::vector<std::vector<std::vector<uint64_t>>> before(configs.size());
  for (size_t k = 0; k < configs.size(); ++k) {
    CollectionConfig& config = configs[k];
    SCOPED_TRACE(config.name);
    config.dim = kDim;
    config.metric = Metric::kL2;
    ASSERT_OK_AND_ASSIGN(auto c, db_->CreateCollection(config));
    Model model;
    const auto base = ClusteredVectors(kN, kDim, 51);
    UpsertRange(*c, 0, kN, base, &model);
    ASSERT_OK(c->maintenance().StartBuild());
    ASSERT_OK(c->maintenance().WaitForBuild());
    EXPECT_EQ(c->Info().index_state, IndexState::kReady);
    EXPECT_EQ(c->config().index.pq.nbits, config.index.pq.nbits);
    EXPECT_EQ(c->config().index.hnsw.compact_links,
              config.index.hnsw.compact_links);
    const double recall = IndexedRecall(*c, model, queries, 100);
    std::printf("[ recall@10 %s ] %.4f\n", config.name.c_str(), recall);
    EXPECT_GE(recall, kRecallFloor);
    for (size_t q = 0; q < 20; ++q) {
      std::vector<uint64_t> ids;
      for (const auto& h : Search(*c, queries.data() + q * kDim, 10, false))
        ids.push_back(h.id);
      before[k].push_back(ids);
    }
  }
  ReopenDb();
  for (size_t k = 0; k < configs.size(); ++k) {
    const CollectionConfig& config = configs[k];
    SCOPED_TRACE(config.name);
    auto again = Get(config.name);
    ASSERT_NE(again, nullptr);
    EXPECT_EQ(again->config().index.pq.nbits, config.index.pq.nbits);
    EXPECT_EQ(again->config().index.hnsw.compact_links,
              config.index.hnsw.compact_links);
    EXPECT_EQ(again->Info().index_state, IndexState::kReady);
    for (size_t q = 0; q < 20; ++q) {
      std::vector<uint64_t> ids;
      for (const auto& h :
           Search(*again, queries.data() + q * kDim, 10, false)) {
        ids.push_back(h.id);
      }
      EXPECT_EQ(ids, before[k][q]) << "query " << q;
    }
  }
}

TEST_F(CollectionTest, StartBuildNeedsAtLeast256LivePoints) {
  constexpr uint32_t kDim = 8;
  OpenDb();
  auto c = Create("small", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  EXPECT_THAT(c->maintenance().StartBuild(), StatusIs(absl::StatusCode::kFailedPrecondition,
                                        HasSubstr("0 points")));
  Model model;
  UpsertRange(*c, 0, 255, ClusteredVectors(255, kDim, 51), &model);
  EXPECT_THAT(c->maintenance().StartBuild(), StatusIs(absl::StatusCode::kFailedPrecondition,
                                        HasSubstr("255 points")));
  // Stored records count only while live.
  UpsertRange(*c, 255, 45, ClusteredVectors(45, kDim, 52), &model);
  std::vector<uint64_t> del;
  for (size_t i = 0; i < 100; ++i) del.push_back(ExtId(i));
  ASSERT_OK(Delete(*c, del, &model));
  EXPECT_THAT(c->maintenance().StartBuild(), StatusIs(absl::StatusCode::kFailedPrecondition,
                                        HasSubstr("200 points")));
  EXPECT_EQ(c->Info().index_state, IndexState::kNone);
  UpsertRange(*c, 300, 56, ClusteredVectors(56, kDim, 53), &model);
  ASSERT_EQ(model.size(), 256u);
  ASSERT_OK(c->maintenance().StartBuild());
  ASSERT_OK(c->maintenance().WaitForBuild());
  EXPECT_EQ(c->Info().index_state, IndexState::kReady);
}

TEST_F(CollectionTest, AutoBuildStartsAtTheThreshold) {
  constexpr uint32_t kDim = 16;
  options_.collection.auto_build_min_points = 500;
  OpenDb();
  auto c = Create("auto", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  Model model;
  const auto v = ClusteredVectors(600, kDim, 61);
  UpsertRange(*c, 0, 400, v, &model, 100);
  // Below the threshold nothing starts.
  EXPECT_OK(c->maintenance().WaitForBuild());
  EXPECT_EQ(c->Info().index_state, IndexState::kNone);
  EXPECT_EQ(c->Info().indexed_points, 0u);
  UpsertRange(*c, 400, 200, std::vector<float>(v.begin() + 400 * kDim, v.end()),
              &model, 100);
  ASSERT_OK(c->maintenance().WaitForBuild());
  const CollectionInfo info = c->Info();
  EXPECT_EQ(info.index_state, IndexState::kReady);
  EXPECT_EQ(info.indexed_points, 600u);
  bool exact_used = true;
  Search(*c, v.data(), 10, false, &exact_used);
  EXPECT_FALSE(exact_used);
}

// Points written while a build runs are indexed when it is installed,
// whether they land before, during or after the build reads the file.
TEST_F(CollectionTest, WritesDuringABuildAreInTheInstalledIndex) {
  constexpr uint32_t kDim = 16;
  OpenDb();
  auto c = Create("busy", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  Model model;
  UpsertRange(*c, 0, 1000, ClusteredVectors(1000, kDim, 171), &model);
  ASSERT_OK(c->maintenance().StartBuild());
  const auto later = ClusteredVectors(400, kDim, 172);
  UpsertRange(*c, 1000, 400, later, &model, 50);
  std::vector<uint64_t> del;
  for (size_t i = 0; i < 1000; i += 10) del.push_back(ExtId(i));
  ASSERT_OK(Delete(*c, del, &model));
  ASSERT_OK(c->maintenance().WaitForBuild());
  const CollectionInfo info = c->Info();
  EXPECT_EQ(info.index_state, IndexState::kReady);
  EXPECT_EQ(info.indexed_points, info.stored_records);
  EXPECT_EQ(info.stored_records, 1400u);
  EXPECT_EQ(info.points, model.size());
  size_t found = 0;
  for (size_t i = 0; i < 400; ++i) {
    bool exact_used = true;
    auto hits = Search(*c, later.data() + i * kDim, 10, false, &exact_used);
    ASSERT_FALSE(exact_used);
    for (const auto& h : hits) {
      ASSERT_TRUE(model.count(h.id)) << h.id;
      found += h.id == ExtId(1000 + i);
    }
  }
  std::printf("[ written during the build, found ] %zu of 400\n", found);
  EXPECT_GE(found, 380u);
  ExpectExactSearchesMatchOracle(*c, model, ClusteredVectors(20, kDim, 173),
                                 20);
}

// ---- Failing maintenance and its backoff ------------------------------------

// What an older zoomd (before the magnitude rule) could leave in a data
// dir: a committed point of [1e20] * 8, written past the collection's
// vector file end as Upsert would have.
void InjectLegacyPoint(const std::string& data_dir, uint32_t collection_id, uint64_t external_id,
                       float value) {
  auto meta = storage::MetadataStore::Open((fs::path(data_dir) / "meta").string(), {});
  ASSERT_OK(meta.status());
  const std::string file =
      (fs::path(data_dir) / "collections" / std::to_string(collection_id) / "vectors-1.zvec")
          .string();
  auto store = storage::VectorStore::Open(file);
  ASSERT_OK(store.status());
  const InternalId id = static_cast<InternalId>((*store)->count());
  const std::vector<float> v((*store)->dim(), value);
  ASSERT_OK((*store)->Append(v.data(), 1));
  const storage::RecordWrite w{id, external_id, {}};
  ASSERT_OK((*meta)->Commit(collection_id, {&w, 1}, {}));
}

// The crash loop of issue 14: a data dir holding a point that trips FAISS.
// After a restart it serves; builds and compactions fail with a Status that
// names the point (FAILED / compaction_error, retried with backoff, never a
// process exit); deleting the point lets compaction train on the live
// points only and succeed.
TEST_F(CollectionTest, LegacyPointBreakingTheRuleNeverStopsTheCollection) {
  constexpr uint32_t kDim = 8;
  options_.collection.auto_compact_dead_ratio = 0.3;
  options_.collection.auto_compact_min_dead = 100;
  options_.collection.maintenance_retry_base = absl::Hours(1);
  OpenDb();
  auto c = Create("legacy", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  const uint32_t id = c->core().id();
  Model model;
  const auto v = ClusteredVectors(600, kDim, 81);
  UpsertRange(*c, 0, 600, v, &model);
  ASSERT_OK(c->maintenance().StartBuild());
  ASSERT_OK(c->maintenance().WaitForBuild());
  c.reset();
  CloseDb();
  InjectLegacyPoint(options_.data_dir, id, 9999, 1e20f);
  if (HasFatalFailure()) return;

  OpenDb();  // replays the point into the index: no crash
  c = Get("legacy");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->Info().points, 601u);
  EXPECT_EQ(c->Info().index_state, IndexState::kReady);
  const auto queries = ClusteredVectors(10, kDim, 82);
  ExpectExactSearchesMatchOracle(*c, model, queries, 10);  // 9999 scores +Inf: never in a top 10
  (void)Search(*c, queries.data(), 10, false);
  std::vector<PointData> got;
  ASSERT_OK(c->Get(std::vector<uint64_t>{9999}, true, false, &got));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].vector[0], 1e20f);

  // A build fails with the point named; the old index keeps serving.
  ASSERT_OK(c->maintenance().StartBuild());
  EXPECT_THAT(c->maintenance().WaitForBuild(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("point 9999")));
  CollectionInfo info = c->Info();
  EXPECT_EQ(info.index_state, IndexState::kReady);
  EXPECT_THAT(info.index_error, HasSubstr("9999"));
  EXPECT_EQ(info.maintenance_failures, 1u);
  EXPECT_GT(info.maintenance_retry_at, absl::Now());

  // Deletes that pass the compaction threshold: the compaction fails the
  // same way and the automatic one waits for its backoff.
  std::vector<uint64_t> del;
  for (size_t i = 0; i < 300; ++i) del.push_back(ExtId(i));
  ASSERT_OK(Delete(*c, del, &model));
  EXPECT_FALSE(c->maintenance().NeedsCompaction());  // backing off
  EXPECT_EQ(db_->RunMaintenance(), 0);
  EXPECT_THAT(c->maintenance().Compact(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("point 9999")));
  info = c->Info();
  EXPECT_THAT(info.compaction_error, HasSubstr("9999"));
  EXPECT_EQ(info.maintenance_failures, 2u);
  EXPECT_EQ(info.stored_records, 601u);
  ExpectExactSearchesMatchOracle(*c, model, queries, 10);
  EXPECT_GT(IndexedRecall(*c, model, queries, 10), 0.8);

  // Deleting the point: the compaction trains on live points only.
  ASSERT_OK(c->Delete(std::vector<uint64_t>{9999}).status());
  ASSERT_OK(c->maintenance().Compact());
  info = c->Info();
  EXPECT_EQ(info.points, 300u);
  EXPECT_EQ(info.stored_records, 300u);
  EXPECT_EQ(info.index_state, IndexState::kReady);
  EXPECT_THAT(info.compaction_error, IsEmpty());
  EXPECT_EQ(info.maintenance_failures, 0u);
  ExpectGetMatchesModel(*c, model);
  ExpectExactSearchesMatchOracle(*c, model, queries, 10);
  c.reset();
  ReopenDb();
  c = Get("legacy");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->Info().points, 300u);
  ExpectGetMatchesModel(*c, model);
}

// Dead records do not train: a build over a collection whose only
// rule-breaking record is deleted succeeds (the record is indexed as a
// placeholder and never returned).
TEST_F(CollectionTest, BuildTrainsOnLivePointsOnly) {
  constexpr uint32_t kDim = 8;
  OpenDb();
  auto c = Create("dead_bad", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  const uint32_t id = c->core().id();
  Model model;
  UpsertRange(*c, 0, 400, ClusteredVectors(400, kDim, 91), &model);
  c.reset();
  CloseDb();
  InjectLegacyPoint(options_.data_dir, id, 7777, 1e20f);
  if (HasFatalFailure()) return;
  OpenDb();
  c = Get("dead_bad");
  ASSERT_NE(c, nullptr);
  ASSERT_OK(c->Delete(std::vector<uint64_t>{7777}).status());
  ASSERT_OK(c->maintenance().StartBuild());
  ASSERT_OK(c->maintenance().WaitForBuild());
  EXPECT_EQ(c->Info().index_state, IndexState::kReady);
  const auto queries = ClusteredVectors(10, kDim, 92);
  EXPECT_GT(IndexedRecall(*c, model, queries, 10), 0.8);
}

// An unindexed collection whose automatic build fails is FAILED with the
// reason, keeps answering exactly, and does not start the build again on
// every write (it waits for the backoff).
TEST_F(CollectionTest, FailedAutomaticBuildBacksOffAndKeepsServing) {
  constexpr uint32_t kDim = 8;
  options_.collection.auto_build_min_points = 400;
  options_.collection.maintenance_retry_base = absl::Hours(1);
  OpenDb();
  auto c = Create("auto_bad", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  const uint32_t id = c->core().id();
  Model model;
  const auto v = ClusteredVectors(500, kDim, 95);
  UpsertRange(*c, 0, 300, v, &model);
  c.reset();
  CloseDb();
  InjectLegacyPoint(options_.data_dir, id, 5555, 1e20f);
  if (HasFatalFailure()) return;
  OpenDb();
  c = Get("auto_bad");
  ASSERT_NE(c, nullptr);
  UpsertRange(*c, 300, 100, std::vector<float>(v.begin() + 300 * kDim, v.begin() + 400 * kDim),
              &model);  // 401 live: the automatic build starts and fails
  EXPECT_THAT(c->maintenance().WaitForBuild(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("point 5555")));
  CollectionInfo info = c->Info();
  EXPECT_EQ(info.index_state, IndexState::kFailed);
  EXPECT_THAT(info.index_error, HasSubstr("5555"));
  EXPECT_EQ(info.maintenance_failures, 1u);
  UpsertRange(*c, 400, 100, std::vector<float>(v.begin() + 400 * kDim, v.end()), &model);
  EXPECT_THAT(c->maintenance().WaitForBuild(), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(c->Info().maintenance_failures, 1u);  // not started again
  bool exact_used = false;
  const auto queries = ClusteredVectors(5, kDim, 96);
  Search(*c, queries.data(), 10, false, &exact_used);
  EXPECT_TRUE(exact_used);
  ExpectExactSearchesMatchOracle(*c, model, queries, 5);
}

// ---- Lifetimes of replaced indexes, retrains --------------------------------

// A replaced index is freed once no search holds it: ten rebuilds under
// concurrent searches leave one index alive (the resident bytes stay those
// of one index), and an index a caller held is freed when it lets go.
TEST_F(CollectionTest, RebuildsUnderSearchesDoNotAccumulateIndexes) {
  constexpr uint32_t kDim = 16;
  OpenDb();
  auto c = Create("rebuilds", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  Model model;
  UpsertRange(*c, 0, 2000, ClusteredVectors(2000, kDim, 401), &model);
  ASSERT_OK(c->maintenance().StartBuild());
  ASSERT_OK(c->maintenance().WaitForBuild());
  const uint64_t resident = c->Info().resident_bytes;
  const uint64_t one_index = c->core().engine()->IndexBytes();
  ASSERT_GT(one_index, 0u);
  std::weak_ptr<const index::VectorIndex> first = c->core().engine()->index();
  ASSERT_FALSE(first.expired());

  std::atomic<bool> stop{false};
  std::atomic<uint64_t> searches{0};
  const auto queries = ClusteredVectors(16, kDim, 402);
  std::vector<std::thread> searchers;
  for (int t = 0; t < 2; ++t) {
    searchers.emplace_back([&, t] {
      for (size_t q = t; !stop.load(); q = (q + 1) % 16) {
        CollectionSearchParams p;
        p.engine.k = 10;
        std::vector<Hit> hits;
        EXPECT_OK(SearchInto(*c, queries.data() + q * kDim, kDim, p, &hits));
        EXPECT_EQ(hits.size(), 10u);
        searches.fetch_add(1);
      }
    });
  }
  for (int i = 0; i < 10; ++i) {
    ASSERT_OK(c->maintenance().StartBuild());
    ASSERT_OK(c->maintenance().WaitForBuild());
  }
  stop = true;
  for (auto& t : searchers) t.join();
  EXPECT_GT(searches.load(), 0u);
  // No search runs now: only the serving index is alive.
  EXPECT_TRUE(first.expired()) << "the first index outlived its last search";
  // (The same data and one build thread: each rebuild is the same size.)
  EXPECT_LE(c->core().engine()->IndexBytes(), one_index + one_index / 4);
  const uint64_t after = c->Info().resident_bytes;
  EXPECT_LE(after, resident + one_index / 4)
      << "resident bytes grew from " << resident << " to " << after << " over 10 rebuilds";

  // A caller holding the serving index keeps it (and its bytes) alive past
  // the next rebuild, and frees it by letting go.
  std::shared_ptr<const index::VectorIndex> held = c->core().engine()->index();
  std::weak_ptr<const index::VectorIndex> held_weak = held;
  ASSERT_OK(c->maintenance().StartBuild());
  ASSERT_OK(c->maintenance().WaitForBuild());
  EXPECT_FALSE(held_weak.expired());
  EXPECT_GE(c->core().engine()->IndexBytes(), one_index + one_index * 3 / 4);  // two alive
  EXPECT_GE(c->Info().resident_bytes, after + one_index * 3 / 4);
  held.reset();
  EXPECT_TRUE(held_weak.expired());
  EXPECT_LE(c->core().engine()->IndexBytes(), one_index + one_index / 4);
  EXPECT_LE(c->Info().resident_bytes, resident + one_index / 4);
}

// Retraining as a collection grows: an index trained on N live points is
// rebuilt in the background once the collection holds auto_retrain_growth
// (here 4) times N. The data drifts (later points come from a shifted
// distribution the first index never trained on), searches from two
// threads never fail while each retrain runs, the switch frees the old
// index, recall at fixed knobs is at least the old index's, and what the
// index was trained on survives a restart (no retrain at reopen).
TEST_F(CollectionTest, GrowthRetrainsInTheBackgroundWhileSearchesGoOn) {
  constexpr uint32_t kDim = 16;
  options_.collection.auto_build_min_points = 400;
  options_.collection.auto_retrain_growth = 4.0;
  options_.collection.auto_retrain_drift = 0;  // growth alone (drift: the next test)
  OpenDb();
  auto c = Create("grows", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  Model model;
  // Point i: a clustered vector, shifted by +3 on every axis for i >= 400.
  constexpr size_t kMax = 6400;
  std::vector<float> all = ClusteredVectors(kMax, kDim, 501);
  for (size_t i = 400; i < kMax; ++i) {
    for (uint32_t j = 0; j < kDim; ++j) all[i * kDim + j] += 3.0f;
  }
  auto upsert = [&](size_t first, size_t n) {
    UpsertRange(*c, first, n,
                std::vector<float>(all.begin() + first * kDim, all.begin() + (first + n) * kDim),
                &model, 100);
  };
  // Queries from both distributions, low knobs (so the preview's quality
  // shows through the re-rank) at equal work: a quarter of the lists, so
  // the same share of the codes is scanned whatever nlist the index chose
  // (a retrain on more points picks more lists).
  std::vector<float> queries = ClusteredVectors(60, kDim, 502);
  for (size_t q = 30; q < 60; ++q) {
    for (uint32_t j = 0; j < kDim; ++j) queries[q * kDim + j] += 3.0f;
  }
  uint32_t nprobe = 0;
  auto recall = [&] { return RecallAtAQuarterOfTheLists(*c, queries, model, &nprobe); };
  // While `build` runs, two threads search; every search succeeds with k
  // hits (each thread searches at least once).
  auto searched_through = [&](const std::function<void()>& build) {
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> searches{0}, failures{0};
    std::vector<std::thread> searchers;
    for (int t = 0; t < 2; ++t) {
      searchers.emplace_back([&, t] {
        size_t q = t;
        do {
          CollectionSearchParams p;
          p.engine.k = 10;
          std::vector<Hit> hits;
          absl::Status st = SearchInto(*c, queries.data() + q * kDim, kDim, p, &hits);
          if (!st.ok() || hits.size() != 10) failures.fetch_add(1);
          searches.fetch_add(1);
          q = (q + 1) % 60;
        } while (!stop.load());
      });
    }
    build();
    stop = true;
    for (auto& t : searchers) t.join();
    EXPECT_GE(searches.load(), 2u);
    EXPECT_EQ(failures.load(), 0u) << "of " << searches.load() << " searches";
  };

  // A point far from every query (never in an oracle's top 10): recall is
  // measured before it is written and after, over the same top 10s.
  auto upsert_far = [&](size_t id) {
    std::vector<float> v(kDim, 1000.0f + float(id));
    UpsertRange(*c, id, 1, v, &model);
  };

  upsert(0, 400);  // the first automatic build, on 400 points
  ASSERT_OK(c->maintenance().WaitForBuild());
  CollectionInfo info = c->Info();
  ASSERT_EQ(info.index_state, IndexState::kReady);
  EXPECT_EQ(info.trained_points, 400u);
  EXPECT_EQ(info.auto_retrains, 0u);

  upsert(400, 1199);  // 1,599 points: under 4x, no retrain
  ASSERT_OK(c->maintenance().WaitForBuild());
  info = c->Info();
  EXPECT_EQ(info.trained_points, 400u);
  EXPECT_EQ(info.indexed_points, 1599u);
  EXPECT_EQ(info.auto_retrains, 0u);
  const double recall_400 = recall();
  const uint32_t nprobe_400 = nprobe;
  std::weak_ptr<const index::VectorIndex> old_index = c->core().engine()->index();
  searched_through([&] {
    upsert_far(1599);  // the 1,600th point: 4x, the retrain starts
    ASSERT_OK(c->maintenance().WaitForBuild());
  });
  info = c->Info();
  EXPECT_EQ(info.index_state, IndexState::kReady);
  EXPECT_EQ(info.trained_points, 1600u);
  EXPECT_EQ(info.indexed_points, 1600u);
  EXPECT_EQ(info.auto_retrains, 1u);
  EXPECT_THAT(info.index_error, IsEmpty());
  // Only the serving index is alive: the switch freed the old one.
  EXPECT_TRUE(old_index.expired()) << "the replaced index outlived its last search";
  EXPECT_EQ(c->core().engine()->IndexBytes(), c->core().engine()->index()->ResidentBytes());
  const double recall_1600 = recall();
  std::printf("[ recall@10, K' 12, a quarter of the lists, 1,600 points ] trained on 400: "
              "%.4f (nprobe %u), retrained on 1,600: %.4f (nprobe %u)\n",
              recall_400, nprobe_400, recall_1600, nprobe);
  EXPECT_GE(recall_1600, recall_400);

  // Once more at 6,400 (4 x 1,600), with writes during the retrain: they
  // are in the new index at the switch.
  upsert(1600, 4799);  // 6,399
  ASSERT_OK(c->maintenance().WaitForBuild());
  EXPECT_EQ(c->Info().auto_retrains, 1u);
  const uint64_t resident_before = c->Info().resident_bytes;
  const double recall_old = recall();
  const uint32_t nprobe_old = nprobe;
  old_index = c->core().engine()->index();
  searched_through([&] {
    upsert_far(6399);  // the retrain starts
    for (size_t id = kMax; id < kMax + 50; ++id) upsert_far(id);
    ASSERT_OK(c->maintenance().WaitForBuild());
  });
  info = c->Info();
  // (It trains on the live points when it starts: 6,400 plus those of the
  // 50 writes that came before.)
  EXPECT_GE(info.trained_points, 6400u);
  EXPECT_LE(info.trained_points, 6450u);
  EXPECT_EQ(info.indexed_points, 6450u);
  EXPECT_EQ(info.auto_retrains, 2u);
  EXPECT_TRUE(old_index.expired()) << "the replaced index outlived its last search";
  EXPECT_EQ(c->core().engine()->IndexBytes(), c->core().engine()->index()->ResidentBytes());
  // Resident bytes after the switch: one index (more lists now), not two.
  std::printf("[ resident bytes ] before the retrain %llu, after %llu\n",
              static_cast<unsigned long long>(resident_before),
              static_cast<unsigned long long>(info.resident_bytes));
  EXPECT_LE(info.resident_bytes, resident_before + resident_before / 4);
  const double recall_new = recall();
  std::printf("[ recall@10, K' 12, a quarter of the lists, 6,400 points ] trained on 1,600: "
              "%.4f (nprobe %u), retrained on 6,400: %.4f (nprobe %u)\n",
              recall_old, nprobe_old, recall_new, nprobe);
  EXPECT_GE(recall_new, recall_old);
  const uint64_t trained = info.trained_points;

  // A restart keeps what the index was trained on: no retrain at reopen,
  // nor at the next write.
  c.reset();
  ReopenDb();
  c = Get("grows");
  ASSERT_NE(c, nullptr);
  info = c->Info();
  EXPECT_EQ(info.trained_points, trained);
  EXPECT_EQ(info.auto_retrains, 0u);
  upsert_far(kMax + 50);
  ASSERT_OK(c->maintenance().WaitForBuild());
  EXPECT_EQ(c->Info().auto_retrains, 0u);
  EXPECT_EQ(c->Info().trained_points, trained);

  // A compaction with no retrain due keeps the quantiser: what the index
  // was trained on stays, and the points that stay keep their codes, so
  // the recall holds.
  std::vector<uint64_t> gone;
  for (size_t i = 0; i < kMax; i += 5) gone.push_back(ExtId(i));
  ASSERT_OK(c->Delete(gone).status());
  for (uint64_t ext : gone) model.erase(ext);
  const double recall_before = recall();
  ASSERT_OK(c->maintenance().Compact());
  info = c->Info();
  EXPECT_EQ(info.trained_points, trained);
  EXPECT_EQ(info.auto_retrains, 0u);
  EXPECT_EQ(info.indexed_points, kMax + 51 - gone.size());
  EXPECT_GE(recall(), recall_before - 0.01);
}

// A collection whose new points come from elsewhere than those its index
// was trained on retrains once the codes fit the latest window of them
// twice as badly as the first window after the build, long before it has
// grown 4x; points from the trained distribution never trigger it, and the
// baseline survives a restart.
TEST_F(CollectionTest, DriftRetrainsBeforeGrowthWould) {
  constexpr uint32_t kDim = 16;
  constexpr size_t kWindow = index::CodeErrorStats::kCodeErrorWindow;
  options_.collection.auto_build_min_points = 2000;
  options_.collection.auto_retrain_growth = 0;  // drift alone
  options_.collection.auto_retrain_drift = 2.0;
  OpenDb();
  auto c = Create("drifts", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  Model model;
  // Points [0, 2000 + 2 windows): one distribution; then points shifted by
  // +4 on every axis (away from every trained centroid).
  constexpr size_t kBuilt = 2000;
  const size_t kSame = kBuilt + 2 * kWindow;
  const size_t kMax = kSame + 3 * kWindow;
  std::vector<float> all = ClusteredVectors(kMax, kDim, 601);
  for (size_t i = kSame; i < kMax; ++i) {
    for (uint32_t j = 0; j < kDim; ++j) all[i * kDim + j] += 4.0f;
  }
  auto upsert = [&](size_t first, size_t n) {
    UpsertRange(*c, first, n,
                std::vector<float>(all.begin() + first * kDim, all.begin() + (first + n) * kDim),
                &model, 64);
  };
  // Queries near the shifted points; recall at a quarter of the lists.
  std::vector<float> queries = ClusteredVectors(40, kDim, 602);
  for (float& x : queries) x += 4.0f;
  auto recall = [&] { return RecallAtAQuarterOfTheLists(*c, queries, model); };

  upsert(0, kBuilt);
  ASSERT_OK(c->maintenance().WaitForBuild());
  CollectionInfo info = c->Info();
  ASSERT_EQ(info.index_state, IndexState::kReady);
  EXPECT_EQ(info.trained_points, kBuilt);
  EXPECT_EQ(info.code_error_ratio, 0.0);  // no window yet
  // Two windows from the trained distribution: the first is the baseline,
  // the second fits about as well. No retrain.
  upsert(kBuilt, kWindow);
  ASSERT_OK(c->maintenance().WaitForBuild());
  EXPECT_EQ(c->Info().code_error_ratio, 1.0);
  upsert(kBuilt + kWindow, kWindow);
  ASSERT_OK(c->maintenance().WaitForBuild());
  info = c->Info();
  std::printf("[ code error, latest window / first ] same distribution: %.3f\n",
              info.code_error_ratio);
  EXPECT_GT(info.code_error_ratio, 0.5);
  EXPECT_LT(info.code_error_ratio, 1.5);
  EXPECT_EQ(info.auto_retrains, 0u);
  EXPECT_EQ(info.trained_points, kBuilt);

  // The shifted points, all but the last batch of a window: still the old
  // index (the window is not complete).
  upsert(kSame, kWindow - 64);
  ASSERT_OK(c->maintenance().WaitForBuild());
  EXPECT_EQ(c->Info().auto_retrains, 0u);
  const double recall_old = recall();
  std::weak_ptr<const index::VectorIndex> old_index = c->core().engine()->index();
  upsert(kSame + kWindow - 64, 64);  // the window completes: the retrain starts
  ASSERT_OK(c->maintenance().WaitForBuild());
  info = c->Info();
  EXPECT_EQ(info.auto_retrains, 1u);
  EXPECT_EQ(info.drift_retrains, 1u);
  EXPECT_EQ(info.trained_points, kSame + kWindow);
  EXPECT_LT(info.trained_points, 4 * kBuilt);  // drift: growth at 4x would not have yet
  EXPECT_EQ(info.indexed_points, kSame + kWindow);
  EXPECT_EQ(info.code_error_ratio, 0.0);  // the new index has no window yet
  EXPECT_TRUE(old_index.expired());
  const double recall_new = recall();
  std::printf("[ recall@10 near the shifted points, K' 12, a quarter of the lists ] "
              "index trained before the drift: %.4f, retrained: %.4f\n",
              recall_old, recall_new);
  EXPECT_GE(recall_new, recall_old);

  // The new index's first window (both distributions now) is its baseline;
  // it is kept in the manifest: after a restart (which replays that window
  // into the loaded index) the next windows are judged against it, and
  // nothing retrains.
  upsert(kSame + kWindow, kWindow);
  ASSERT_OK(c->maintenance().WaitForBuild());
  info = c->Info();
  EXPECT_EQ(info.code_error_ratio, 1.0);
  const double baseline = info.code_error_baseline;
  EXPECT_GT(baseline, 0.0);
  c.reset();
  ReopenDb();
  c = Get("drifts");
  ASSERT_NE(c, nullptr);
  EXPECT_NEAR(c->Info().code_error_baseline, baseline, baseline * 1e-5);
  upsert(kSame + 2 * kWindow, kWindow);
  ASSERT_OK(c->maintenance().WaitForBuild());
  info = c->Info();
  EXPECT_NEAR(info.code_error_baseline, baseline, baseline * 1e-5);
  EXPECT_GT(info.code_error_ratio, 0.5);
  EXPECT_LT(info.code_error_ratio, 1.5);
  EXPECT_EQ(info.auto_retrains, 0u);
}

}  // namespace
}  // namespace zoom::server
