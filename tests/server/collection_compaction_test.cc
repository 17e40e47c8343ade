// Collection compaction: dead records dropped with points and results kept
// (with and without an index), the automatic compaction at the dead
// threshold, a compaction after a drop, and compactions racing searches,
// held reads and writes (which go on during it and land in the new
// generation).
#include "tests/server/collection_test_util.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <future>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/engine/collection.h"
#include "server/engine/database.h"
#include "tests/testing/status_matchers.h"

namespace zoom::server {
namespace {

// The shared fixture and helpers (collection_test_util.h).
using namespace collection_testing;  // NOLINT(build/namespaces)
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::zoom::testing::StatusIs;

// ---- Compaction -------------------------------------------------------------

TEST_F(CollectionTest, CompactDropsDeadRecordsAndKeepsPointsAndResults) {
  constexpr uint32_t kDim = 24;
  OpenDb();
  auto c = Create("compact", kDim, Metric::kCosine);
  ASSERT_NE(c, nullptr);
  Model model;
  UpsertRange(*c, 0, 2000, ClusteredVectors(2000, kDim, 101), &model);
  ASSERT_OK(c->maintenance().StartBuild());
  ASSERT_OK(c->maintenance().WaitForBuild());
  std::mt19937 rng(102);
  std::vector<uint64_t> del;
  for (size_t i = 0; i < 2000; ++i) {
    if (rng() % 2 == 0) del.push_back(ExtId(i));
  }
  ASSERT_OK(Delete(*c, del, &model));
  // Overwrites leave dead records too.
  std::vector<uint64_t> over;
  for (const auto& [id, p] : model) {
    if (over.size() < 100) over.push_back(id);
  }
  ASSERT_OK(Upsert(*c, over, ClusteredVectors(100, kDim, 103), {}, &model));
  const uint32_t space_before = c->core().record_space();

  const auto queries = ClusteredVectors(50, kDim, 104);
  std::vector<std::vector<Hit>> before;
  for (size_t q = 0; q < 50; ++q) {
    before.push_back(
        Search(*c, queries.data() + q * kDim, 10, true, nullptr, true));
  }
  const std::vector<std::string> files_before = FilesIn(c->core().dir());

  ASSERT_OK(c->maintenance().Compact());
  CollectionInfo info = c->Info();
  EXPECT_EQ(info.points, model.size());
  EXPECT_EQ(info.stored_records, model.size());
  EXPECT_EQ(info.deleted_records, 0u);
  EXPECT_EQ(info.index_state, IndexState::kReady);
  EXPECT_EQ(info.indexed_points, model.size());
  EXPECT_NE(c->core().record_space(), space_before);
  // The old vector file and snapshot are gone; one of each is left.
  const std::vector<std::string> files_after = FilesIn(c->core().dir());
  ASSERT_EQ(files_after.size(), 2u) << ::testing::PrintToString(files_after);
  for (const std::string& f : files_after) {
    EXPECT_EQ(std::count(files_before.begin(), files_before.end(), f), 0) << f;
  }

  auto same_as_before = [&] {
    for (size_t q = 0; q < 50; ++q) {
      SCOPED_TRACE(q);
      auto hits =
          Search(*c, queries.data() + q * kDim, 10, true, nullptr, true);
      ASSERT_EQ(hits.size(), before[q].size());
      for (size_t i = 0; i < hits.size(); ++i) {
        EXPECT_EQ(hits[i].id, before[q][i].id) << i;
        EXPECT_EQ(hits[i].score, before[q][i].score) << i;
        EXPECT_EQ(hits[i].payload, before[q][i].payload) << i;
      }
    }
  };
  same_as_before();
  ExpectGetMatchesModel(*c, model);
  std::vector<PointData> got;
  ASSERT_OK(c->Get(del, false, false, &got));
  EXPECT_THAT(got, IsEmpty());
  const double recall = IndexedRecall(*c, model, queries, 50);
  std::printf("[ recall@10 after compaction ] %.4f\n", recall);
  EXPECT_GE(recall, kRecallFloor);
  // Nothing dead: a second compaction is a no-op.
  ASSERT_OK(c->maintenance().Compact());
  EXPECT_EQ(FilesIn(c->core().dir()), files_after);

  c.reset();
  ReopenDb();
  c = Get("compact");
  ASSERT_NE(c, nullptr);
  info = c->Info();
  EXPECT_EQ(info.points, model.size());
  EXPECT_EQ(info.stored_records, model.size());
  EXPECT_EQ(info.index_state, IndexState::kReady);
  EXPECT_EQ(FilesIn(c->core().dir()), files_after);
  same_as_before();
  ExpectGetMatchesModel(*c, model);
  // And writes go on in the new generation.
  ASSERT_OK(Upsert(*c, {ExtId(5000)}, ClusteredVectors(1, kDim, 105), {"new"},
                   &model));
  ASSERT_OK(Delete(*c, {over[0]}, &model));
  ExpectGetMatchesModel(*c, model);
  ExpectExactSearchesMatchOracle(*c, model, queries, 20);
  c.reset();
  ReopenDb();
  c = Get("compact");
  ASSERT_NE(c, nullptr);
  ExpectGetMatchesModel(*c, model);
  EXPECT_EQ(c->Info().points, model.size());
  const uint32_t space_after = c->core().record_space();
  c.reset();
  CloseDb();

  // The old record space was erased, the new one holds the live points.
  auto count = RecordCounter();
  EXPECT_EQ(count(space_before), 0u);
  EXPECT_EQ(count(space_after), model.size());
}

TEST_F(CollectionTest, CompactWithoutAnIndexStaysExact) {
  constexpr uint32_t kDim = 16;
  OpenDb();
  auto c = Create("compact_exact", kDim, Metric::kInnerProduct);
  ASSERT_NE(c, nullptr);
  Model model;
  UpsertRange(*c, 0, 600, ClusteredVectors(600, kDim, 111), &model);
  std::vector<uint64_t> del;
  for (size_t i = 0; i < 600; i += 2) del.push_back(ExtId(i));
  ASSERT_OK(Delete(*c, del, &model));
  ASSERT_OK(c->maintenance().Compact());
  const CollectionInfo info = c->Info();
  EXPECT_EQ(info.points, 300u);
  EXPECT_EQ(info.stored_records, 300u);
  EXPECT_EQ(info.index_state, IndexState::kNone);
  ExpectGetMatchesModel(*c, model);
  ExpectExactSearchesMatchOracle(*c, model, ClusteredVectors(20, kDim, 112),
                                 20);
  c.reset();
  ReopenDb();
  c = Get("compact_exact");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->Info().points, 300u);
  ExpectGetMatchesModel(*c, model);
}

TEST_F(CollectionTest, AutomaticCompactionAtTheDeadThreshold) {
  constexpr uint32_t kDim = 8;
  options_.collection.auto_compact_dead_ratio = 0.4;
  options_.collection.auto_compact_min_dead = 100;
  OpenDb();
  auto c = Create("auto_compact", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  Model model;
  UpsertRange(*c, 0, 500, ClusteredVectors(500, kDim, 7), &model);
  std::vector<uint64_t> del;
  for (size_t i = 0; i < 150; ++i) del.push_back(ExtId(i));
  ASSERT_OK(Delete(*c, del, &model));
  // 150 of 500 dead: below the 0.4 ratio.
  EXPECT_FALSE(c->maintenance().NeedsCompaction());
  EXPECT_EQ(db_->RunMaintenance(), 0);
  del.clear();
  for (size_t i = 150; i < 250; ++i) del.push_back(ExtId(i));
  ASSERT_OK(Delete(*c, del, &model));
  EXPECT_TRUE(c->maintenance().NeedsCompaction());  // 250 of 500
  EXPECT_EQ(db_->RunMaintenance(), 1);
  const CollectionInfo info = c->Info();
  EXPECT_EQ(info.points, 250u);
  EXPECT_EQ(info.stored_records, 250u);
  EXPECT_FALSE(c->maintenance().NeedsCompaction());
  ExpectGetMatchesModel(*c, model);
}

// A Compact racing a Drop answered NOT_FOUND with an internal path: the
// drop waits for a running compaction, and a compaction after it answers
// that the collection was dropped.
TEST_F(CollectionTest, CompactAfterADropSaysSoWithoutPaths) {
  constexpr uint32_t kDim = 8;
  OpenDb();
  auto c = Create("gone", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  Model model;
  UpsertRange(*c, 0, 300, ClusteredVectors(300, kDim, 3), &model);
  std::vector<uint64_t> del;
  for (size_t i = 0; i < 100; ++i) del.push_back(ExtId(i));
  ASSERT_OK(Delete(*c, del, &model));
  ASSERT_OK(db_->DropCollection("gone"));
  const absl::Status st = c->maintenance().Compact();
  EXPECT_THAT(st, StatusIs(absl::StatusCode::kNotFound, HasSubstr("was dropped")));
  EXPECT_THAT(std::string(st.message()), Not(HasSubstr(tmp_.path())));
  EXPECT_THAT(Upsert(*c, {1}, std::vector<float>(kDim, 1.0f), {}, nullptr),
              StatusIs(absl::StatusCode::kNotFound));
}

// ---- Compaction under searches and writes -----------------------------------

// Compaction swaps the generation under running searches and queued
// writes: searches never fail, never see a point deleted before they
// started, never see one twice; writes queued behind it land in the new
// generation.
TEST_F(CollectionTest, CompactDuringSearchesAndWrites) {
  constexpr uint32_t kDim = 16;
  constexpr size_t kInitial = 1200;
  constexpr size_t kRounds = 20;
  constexpr size_t kPerRound = 10;
  OpenDb();
  auto c = Create("swap", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  Model model;
  const auto base = ClusteredVectors(kInitial, kDim, 181);
  UpsertRange(*c, 0, kInitial, base, &model);
  ASSERT_OK(c->maintenance().StartBuild());
  ASSERT_OK(c->maintenance().WaitForBuild());
  std::vector<uint64_t> dead;
  for (size_t i = 0; i < kInitial; i += 2) dead.push_back(ExtId(i));
  ASSERT_OK(Delete(*c, dead, &model));

  // The writer deletes odd ids in this order and inserts fresh ones.
  std::vector<uint64_t> plan;
  for (size_t i = 0; i < kRounds * kPerRound; ++i)
    plan.push_back(ExtId(2 * i + 1));
  absl::flat_hash_map<uint64_t, size_t> plan_pos;
  for (size_t i = 0; i < plan.size(); ++i) plan_pos[plan[i]] = i;
  const absl::flat_hash_set<uint64_t> dead_set(dead.begin(), dead.end());
  const auto fresh = ClusteredVectors(kRounds * kPerRound, kDim, 182);

  std::atomic<size_t> deleted{0};
  std::atomic<int> writers_left{2};
  std::atomic<int> violations{0};
  std::atomic<int> errors{0};
  std::atomic<uint64_t> searches{0};
  Model writer_model = model;  // the writer's view; joined before reading
  std::atomic<int> payload_violations{0};
  absl::Mutex first_bad_mu;
  std::string first_bad;  // the first payload violation, for the message
  // UpsertRange gave point i the payload "p<i>"; fresh points have none.
  auto payload_of = [&](uint64_t id) -> std::string {
    const uint64_t i = (id - ExtId(0)) / (ExtId(1) - ExtId(0));
    return i < kInitial ? absl::StrCat("p", i) : "";
  };

  std::thread compactor([&] {
    if (!c->maintenance().Compact().ok()) ++errors;
    --writers_left;
  });
  std::thread writer([&] {
    for (size_t r = 0; r < kRounds; ++r) {
      std::vector<uint64_t> ids;
      std::vector<float> v;
      for (size_t i = r * kPerRound; i < (r + 1) * kPerRound; ++i) {
        ids.push_back(ExtId(100000 + i));
        v.insert(v.end(), fresh.begin() + i * kDim,
                 fresh.begin() + (i + 1) * kDim);
      }
      if (!Upsert(*c, ids, v, {}, &writer_model).ok()) ++errors;
      std::vector<uint64_t> del(plan.begin() + r * kPerRound,
                                plan.begin() + (r + 1) * kPerRound);
      if (!Delete(*c, del, &writer_model).ok()) ++errors;
      deleted.store((r + 1) * kPerRound, std::memory_order_release);
    }
    --writers_left;
  });
  auto reader = [&](int t) {
    std::mt19937 rng(190 + t);
    bool last_round = false;
    while (!last_round) {
      last_round = writers_left.load() == 0;
      const size_t gone = deleted.load(std::memory_order_acquire);
      const float* q = base.data() + (rng() % kInitial) * kDim;
      CollectionSearchParams p;
      p.engine.k = 10;
      p.engine.exact = rng() % 2 == 0;
      p.with_payload = true;
      std::vector<Hit> hits;
      if (!SearchInto(*c, q, kDim, p, &hits).ok()) {
        ++errors;
        continue;
      }
      ++searches;
      if (hits.size() != 10) ++violations;
      absl::flat_hash_set<uint64_t> seen;
      for (const Hit& h : hits) {
        auto it = plan_pos.find(h.id);
        if (dead_set.contains(h.id) ||
            (it != plan_pos.end() && it->second < gone) ||
            !seen.insert(h.id).second) {
          ++violations;
        }
        // (A point deleted while the search runs may come back without its
        // payload; the others must always have theirs.)
        if (!plan_pos.contains(h.id) && h.payload != payload_of(h.id)) {
          if (payload_violations++ == 0) {
            absl::MutexLock lock(&first_bad_mu);
            first_bad =
                absl::StrCat("search hit ", h.id, ": payload '", h.payload,
                             "', want '", payload_of(h.id), "'");
          }
        }
      }
      // Get of a point that stays live returns its payload.
      const uint64_t keep = ExtId(2 * (kRounds * kPerRound + rng() % 100) + 1);
      std::vector<PointData> got;
      if (!c->Get({keep}, false, true, &got).ok()) {
        ++errors;
      } else if (got.size() != 1 || got[0].payload != payload_of(keep)) {
        if (payload_violations++ == 0) {
          absl::MutexLock lock(&first_bad_mu);
          first_bad =
              absl::StrCat("get ", keep, ": ", got.size(), " points, payload '",
                           got.empty() ? "" : got[0].payload, "', want '",
                           payload_of(keep), "'");
        }
      }
    }
  };
  std::vector<std::thread> readers;
  for (int t = 0; t < 2; ++t) readers.emplace_back(reader, t);
  compactor.join();
  writer.join();
  for (auto& th : readers) th.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(violations.load(), 0);
  EXPECT_EQ(payload_violations.load(), 0)
      << "payloads went missing while the compaction switched generations; "
      << "the first: " << first_bad;
  EXPECT_GT(searches.load(), 0u);

  model = writer_model;
  const CollectionInfo info = c->Info();
  EXPECT_EQ(info.points, model.size());
  EXPECT_EQ(info.index_state, IndexState::kReady);
  // The dead records of before the compaction are gone; at most the
  // writer's deletes made after it remain.
  EXPECT_LE(info.deleted_records, kRounds * kPerRound);
  ExpectGetMatchesModel(*c, model);
  const auto queries = ClusteredVectors(20, kDim, 183);
  ExpectExactSearchesMatchOracle(*c, model, queries, 20);
  c.reset();
  ReopenDb();
  c = Get("swap");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->Info().points, model.size());
  ExpectGetMatchesModel(*c, model);
  ExpectExactSearchesMatchOracle(*c, model, queries, 20);
}

// A search or get that started on the generation a compaction retires
// still returns the payloads of its points (the retired record space is
// erased only after its last reader).
TEST_F(CollectionTest, ReadsHeldAcrossACompactionKeepTheirPayloads) {
  constexpr uint32_t kDim = 8;
  auto gate = std::make_shared<ReadGate>();
  UseGatedReads(gate);
  OpenDb();
  auto c = Create("held", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  Model model;
  const auto base = ClusteredVectors(400, kDim, 201);
  UpsertRange(*c, 0, 400, base, &model);
  std::vector<uint64_t> del;
  for (size_t i = 0; i < 400; i += 2) del.push_back(ExtId(i));
  ASSERT_OK(Delete(*c, del, &model));

  for (const bool use_get : {false, true}) {
    SCOPED_TRACE(use_get ? "get" : "search");
    {
      absl::MutexLock l(&gate->mu);
      gate->entered = gate->released = false;
    }
    std::vector<Hit> hits;
    std::vector<PointData> got;
    absl::Status st;
    std::thread reader([&] {
      gate->ArmForThisThread();
      if (use_get) {
        std::vector<uint64_t> ids;
        for (size_t i = 1; i < 400; i += 20) ids.push_back(ExtId(i));
        st = c->Get(ids, /*with_vectors=*/true, /*with_payload=*/true, &got);
      } else {
        CollectionSearchParams p;
        p.engine.k = 10;
        p.engine.exact = true;
        p.with_payload = true;
        st = SearchInto(*c, base.data() + kDim, kDim, p, &hits);
      }
    });
    // Whatever fails below, the reader is released and joined (a joinable
    // thread at scope exit would terminate and hide the failure).
    absl::Cleanup release_reader = [&] {
      gate->Release();
      if (reader.joinable()) reader.join();
    };
    // The reader now holds the current generation, its points found.
    if (!gate->AwaitEntered()) {
      gate->Release();
      reader.join();
      FAIL() << "the reader never read a vector";
    }
    // Make something dead for the second compaction to drop.
    ASSERT_OK(Delete(*c, {ExtId(use_get ? 5 : 3)}, &model));
    ASSERT_OK(c->maintenance().Compact());
    gate->Release();
    reader.join();
    ASSERT_OK(st);
    if (use_get) {
      ASSERT_EQ(got.size(), 20u);
      for (const PointData& p : got) {
        EXPECT_EQ(p.payload, absl::StrCat("p", (p.id - 17) / 1000003)) << p.id;
      }
    } else {
      ASSERT_EQ(hits.size(), 10u);
      for (const Hit& h : hits) {
        EXPECT_EQ(h.payload, absl::StrCat("p", (h.id - 17) / 1000003)) << h.id;
      }
    }
  }
  EXPECT_EQ(c->Info().deleted_records, 0u);
  ExpectGetMatchesModel(*c, model);
}

// Issue 14 #11: Compact blocked every write to the collection for its whole
// run (17.9 s at ~90K points). Now the copy and the index build run without
// the write lock: with the compaction held in its first read, upserts,
// overwrites and deletes go through, and they are all in the new generation
// after the switch (and after a restart).
TEST_F(CollectionTest, WritesGoOnDuringACompactionAndLandInTheNewGeneration) {
  constexpr uint32_t kDim = 8;
  auto gate = std::make_shared<ReadGate>();
  UseGatedReads(gate);
  OpenDb();
  auto c = Create("live_compact", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  Model model;
  const auto base = ClusteredVectors(1000, kDim, 301);
  UpsertRange(*c, 0, 1000, base, &model);
  ASSERT_OK(c->maintenance().StartBuild());
  ASSERT_OK(c->maintenance().WaitForBuild());
  std::vector<uint64_t> del;
  for (size_t i = 0; i < 1000; i += 2) del.push_back(ExtId(i));
  ASSERT_OK(Delete(*c, del, &model));

  absl::Status compacted;
  std::thread compactor([&] {
    gate->ArmForThisThread();
    compacted = c->maintenance().Compact();
  });
  absl::Cleanup release = [&] {
    gate->Release();
    if (compactor.joinable()) compactor.join();
  };
  ASSERT_TRUE(gate->AwaitEntered()) << "the compaction never read";
  // The compaction is held in its copy; the writes must not wait for it
  // (a bounded wait: a blocked write would hang here until the bound).
  auto writes = std::async(std::launch::async, [&] {
    const auto fresh = ClusteredVectors(100, kDim, 302);
    std::vector<uint64_t> ids;
    for (size_t i = 0; i < 50; ++i) ids.push_back(ExtId(5000 + i));
    EXPECT_OK(Upsert(*c, ids, std::vector<float>(fresh.begin(), fresh.begin() + 50 * kDim), {},
                     &model));
    // Overwrite 20 copied points, delete 30 others and 5 of the new ones.
    std::vector<uint64_t> over;
    for (size_t i = 1; i < 40; i += 2) over.push_back(ExtId(i));
    std::vector<std::string> payloads(over.size(), "overwritten");
    EXPECT_OK(Upsert(*c, over,
                     std::vector<float>(fresh.begin() + 50 * kDim,
                                        fresh.begin() + (50 + over.size()) * kDim),
                     payloads, &model));
    std::vector<uint64_t> gone;
    for (size_t i = 41; i < 101; i += 2) gone.push_back(ExtId(i));
    for (size_t i = 0; i < 5; ++i) gone.push_back(ExtId(5000 + i));
    EXPECT_OK(Delete(*c, gone, &model));
  });
  ASSERT_EQ(writes.wait_for(std::chrono::seconds(120)), std::future_status::ready)
      << "writes waited for the compaction";
  writes.get();
  // A build cannot start on the generation being replaced.
  EXPECT_THAT(c->maintenance().StartBuild(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("compaction")));
  std::move(release).Invoke();
  ASSERT_OK(compacted);
  const CollectionInfo info = c->Info();
  EXPECT_EQ(info.points, model.size());
  // The 500 dead of before are gone; copied records that died during the
  // compaction (20 overwritten, 30 deleted) are dead in the new file until
  // the next one; of the 50 + 20 records added meanwhile, the 5 deleted
  // again before the switch were never copied.
  EXPECT_EQ(info.stored_records, 500u + 45u + 20u);
  EXPECT_EQ(info.deleted_records, 20u + 30u);
  EXPECT_EQ(info.index_state, IndexState::kReady);
  ExpectGetMatchesModel(*c, model);
  const auto queries = ClusteredVectors(20, kDim, 303);
  ExpectExactSearchesMatchOracle(*c, model, queries, 20);
  EXPECT_GT(IndexedRecall(*c, model, queries, 20), kRecallFloor);
  c.reset();
  ReopenDb();
  c = Get("live_compact");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->Info().points, model.size());
  ExpectGetMatchesModel(*c, model);
  ExpectExactSearchesMatchOracle(*c, model, queries, 20);
  EXPECT_GT(IndexedRecall(*c, model, queries, 20), kRecallFloor);
}

}  // namespace
}  // namespace zoom::server
