// Collection snapshots (Database::CreateSnapshot / RestoreSnapshot): a
// restored collection answers as the original did, a snapshot during writes
// holds a prefix of the acknowledged, corrupt or truncated archives are
// refused, and the golden archive of format 1.0 restores.
#include "tests/server/collection_test_util.h"

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/engine/collection.h"
#include "server/engine/database.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_env.h"

namespace zoom::server {
namespace {

// The shared fixture and helpers (collection_test_util.h).
using namespace collection_testing;  // NOLINT(build/namespaces)
using ::zoom::testing::StatusIs;

// ---- Snapshots --------------------------------------------------------------

std::vector<Hit> IndexedSearch(const Collection& c, const float* q, uint32_t k) {
  CollectionSearchParams p;
  p.engine.k = k;
  p.with_payload = true;
  std::vector<Hit> hits;
  EXPECT_OK(SearchInto(c, q, c.config().dim, p, &hits));
  return hits;
}

// A restored collection answers as the original did at the snapshot's
// point: same ids, same scores, same payloads (indexed and exact), also
// after a restart; the original is unchanged.
TEST_F(CollectionTest, SnapshotRestoresToTheSameAnswers) {
  constexpr uint32_t kDim = 8;
  OpenDb();
  auto c = Create("src", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  Model model;
  UpsertRange(*c, 0, 1200, ClusteredVectors(1200, kDim, 401), &model);
  ASSERT_OK(c->maintenance().StartBuild());
  ASSERT_OK(c->maintenance().WaitForBuild());
  std::vector<uint64_t> del;
  for (size_t i = 0; i < 1200; i += 7) del.push_back(ExtId(i));
  ASSERT_OK(Delete(*c, del, &model));
  // Some written after the index snapshot (replayed after a restore).
  UpsertRange(*c, 5000, 40, ClusteredVectors(40, kDim, 402), &model);
  ASSERT_OK_AND_ASSIGN(SnapshotInfo info, db_->CreateSnapshot("src"));
  EXPECT_EQ(info.points, model.size());
  EXPECT_EQ(info.sha256.size(), 64u);
  ASSERT_OK_AND_ASSIGN(auto file, db_->SnapshotFile("src", info.name));
  ASSERT_OK_AND_ASSIGN(auto dst, db_->RestoreSnapshot(file.first, "dst", false));
  EXPECT_EQ(dst->Info().points, model.size());
  EXPECT_EQ(dst->Info().index_state, IndexState::kReady);
  // What the index was trained on travels with it.
  EXPECT_EQ(c->Info().trained_points, 1200u);
  EXPECT_EQ(dst->Info().trained_points, 1200u);
  ExpectGetMatchesModel(*dst, model);
  const auto queries = ClusteredVectors(30, kDim, 403);
  auto same = [&](const Collection& a, const Collection& b) {
    for (size_t q = 0; q < 30; ++q) {
      const auto ha = IndexedSearch(a, queries.data() + q * kDim, 10);
      const auto hb = IndexedSearch(b, queries.data() + q * kDim, 10);
      ASSERT_EQ(ha.size(), hb.size()) << q;
      for (size_t i = 0; i < ha.size(); ++i) {
        EXPECT_EQ(ha[i].id, hb[i].id) << q << " " << i;
        EXPECT_EQ(ha[i].score, hb[i].score) << q << " " << i;
        EXPECT_EQ(ha[i].payload, hb[i].payload);
      }
    }
  };
  same(*c, *dst);
  ExpectExactSearchesMatchOracle(*dst, model, queries, 30);
  // Listed, and kept across a restart with the restored collection.
  ASSERT_OK_AND_ASSIGN(auto list, db_->ListSnapshots("src"));
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].name, info.name);
  c.reset();
  dst.reset();
  ReopenDb();
  c = Get("src");
  dst = Get("dst");
  ASSERT_NE(dst, nullptr);
  same(*c, *dst);
  // Not into an existing name unless asked; then it replaces it.
  EXPECT_THAT(db_->RestoreSnapshot(file.first, "dst", false).status(),
              StatusIs(absl::StatusCode::kAlreadyExists));
  UpsertRange(*dst, 9000, 10, ClusteredVectors(10, kDim, 404), nullptr);
  dst.reset();
  ASSERT_OK_AND_ASSIGN(dst, db_->RestoreSnapshot(file.first, "dst", true));
  EXPECT_EQ(dst->Info().points, model.size());
  ExpectGetMatchesModel(*dst, model);
  ASSERT_OK(db_->DeleteSnapshot("src", info.name));
  EXPECT_THAT(db_->SnapshotFile("src", info.name).status(), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(db_->ListCollections().size(), 2u);
}

// A snapshot taken during a stream of acknowledged upserts restores to a
// prefix of them: every write acknowledged before it began is in it, and
// what it holds of the others is an unbroken run.
TEST_F(CollectionTest, SnapshotDuringWritesRestoresAPrefixOfTheAcknowledged) {
  constexpr uint32_t kDim = 8;
  OpenDb();
  auto c = Create("busy", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  Model model;
  UpsertRange(*c, 0, 600, ClusteredVectors(600, kDim, 411), &model);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> acked{0};
  const auto fresh = ClusteredVectors(20000, kDim, 412);
  std::thread writer([&] {
    for (uint64_t i = 0; i < 20000 && !stop; ++i) {
      const std::vector<float> v(fresh.begin() + i * kDim, fresh.begin() + (i + 1) * kDim);
      if (!Upsert(*c, {100000 + i}, v, {absl::StrCat("w", i)}, nullptr).ok()) break;
      acked = i + 1;
    }
  });
  absl::Cleanup join = [&] {
    stop = true;
    writer.join();
  };
  for (absl::Time end = absl::Now() + absl::Seconds(120); acked < 20 && absl::Now() < end;) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_GE(acked.load(), 20u);
  const uint64_t before = acked.load();
  ASSERT_OK_AND_ASSIGN(SnapshotInfo info, db_->CreateSnapshot("busy"));
  std::move(join).Invoke();
  const uint64_t total = acked.load();
  ASSERT_OK_AND_ASSIGN(auto file, db_->SnapshotFile("busy", info.name));
  ASSERT_OK_AND_ASSIGN(auto restored, db_->RestoreSnapshot(file.first, "busy_copy", false));
  std::vector<uint64_t> ids;
  for (uint64_t i = 0; i < total; ++i) ids.push_back(100000 + i);
  std::vector<PointData> got;
  ASSERT_OK(restored->Get(ids, true, true, &got));
  ASSERT_GE(got.size(), before);
  ASSERT_LE(got.size(), total);
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].id, 100000 + i) << "not a prefix";
    EXPECT_EQ(got[i].payload, absl::StrCat("w", i));
    EXPECT_EQ(got[i].vector,
              std::vector<float>(fresh.begin() + i * kDim, fresh.begin() + (i + 1) * kDim));
  }
  EXPECT_EQ(restored->Info().points, 600 + got.size());
  ExpectGetMatchesModel(*restored, model);
}

// A corrupt or truncated archive is refused with DATA_LOSS before anything
// is created.
TEST_F(CollectionTest, CorruptOrTruncatedSnapshotsAreRefused) {
  constexpr uint32_t kDim = 8;
  OpenDb();
  auto c = Create("orig", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  UpsertRange(*c, 0, 300, ClusteredVectors(300, kDim, 421), nullptr);
  ASSERT_OK(c->maintenance().StartBuild());
  ASSERT_OK(c->maintenance().WaitForBuild());
  ASSERT_OK_AND_ASSIGN(SnapshotInfo info, db_->CreateSnapshot("orig"));
  ASSERT_OK_AND_ASSIGN(auto file, db_->SnapshotFile("orig", info.name));
  const uint64_t size = fs::file_size(file.first);
  const std::string bad = tmp_.File("bad.zsnap");
  for (uint64_t at : {uint64_t{3}, uint64_t{20}, size / 3, size / 2, size - 40, size - 1}) {
    SCOPED_TRACE(at);
    fs::copy_file(file.first, bad, fs::copy_options::overwrite_existing);
    {
      FILE* f = std::fopen(bad.c_str(), "r+b");
      ASSERT_NE(f, nullptr);
      std::fseek(f, static_cast<long>(at), SEEK_SET);
      const int b = std::fgetc(f);
      std::fseek(f, static_cast<long>(at), SEEK_SET);
      std::fputc(b ^ 0x5a, f);
      std::fclose(f);
    }
    EXPECT_THAT(db_->RestoreSnapshot(bad, "copy", false).status(),
                StatusIs(absl::StatusCode::kDataLoss));
    fs::copy_file(file.first, bad, fs::copy_options::overwrite_existing);
    fs::resize_file(bad, at);
    EXPECT_THAT(db_->RestoreSnapshot(bad, "copy", false).status(),
                StatusIs(absl::StatusCode::kDataLoss));
  }
  EXPECT_EQ(db_->ListCollections().size(), 1u);
  c.reset();
  ReopenDb();  // no half-restored collection comes back
  EXPECT_EQ(db_->ListCollections().size(), 1u);
}

// tests/data/golden/snapshot_v1_0.zsnap was written by format 1.0 (run with
// ZOOM_WRITE_GOLDEN=1 to write it, only for a new format version): every
// later version must restore it.
TEST_F(CollectionTest, RestoresTheGoldenSnapshotOfFormat1_0) {
  constexpr uint32_t kDim = 8;
  const std::string golden = zoom::testing::TestDataPath("golden/snapshot_v1_0.zsnap");
  OpenDb();
  const auto v = ClusteredVectors(300, kDim, 431);
  Model model;
  if (std::getenv("ZOOM_WRITE_GOLDEN") != nullptr) {
    CollectionConfig config;
    config.name = "golden";
    config.dim = kDim;
    config.index.nlist = 16;
    ASSERT_OK_AND_ASSIGN(auto c, db_->CreateCollection(config));
    UpsertRange(*c, 0, 300, v, &model);
    ASSERT_OK(c->maintenance().StartBuild());
    ASSERT_OK(c->maintenance().WaitForBuild());
    ASSERT_OK_AND_ASSIGN(SnapshotInfo info, db_->CreateSnapshot("golden"));
    ASSERT_OK_AND_ASSIGN(auto file, db_->SnapshotFile("golden", info.name));
    fs::copy_file(file.first, golden, fs::copy_options::overwrite_existing);
  }
  model.clear();
  for (size_t i = 0; i < 300; ++i) {
    model[ExtId(i)] = {std::vector<float>(v.begin() + i * kDim, v.begin() + (i + 1) * kDim),
                       absl::StrCat("p", i)};
  }
  ASSERT_OK_AND_ASSIGN(auto c, db_->RestoreSnapshot(golden, "restored", false));
  EXPECT_EQ(c->Info().points, 300u);
  EXPECT_EQ(c->Info().index_state, IndexState::kReady);
  EXPECT_EQ(c->config().index.nlist, 16u);
  // The stored vectors as written, against the generator's vectors made
  // again here: equal up to the last bits (the generator's arithmetic is
  // compiled into this test, and -march=native contracts it to FMA: exact
  // equality failed there).
  std::vector<uint64_t> ids;
  for (const auto& [id, p] : model) ids.push_back(id);
  std::vector<PointData> got;
  ASSERT_OK(c->Get(ids, true, true, &got));
  ASSERT_EQ(got.size(), ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const Point& p = model.at(ids[i]);
    ASSERT_EQ(got[i].id, ids[i]);
    ASSERT_EQ(got[i].payload, p.payload) << ids[i];
    ASSERT_EQ(got[i].vector.size(), p.vector.size());
    for (size_t j = 0; j < p.vector.size(); ++j) {
      ASSERT_NEAR(got[i].vector[j], p.vector[j], 1e-5f * (1 + std::abs(p.vector[j]))) << ids[i];
    }
  }
  EXPECT_GT(IndexedRecall(*c, model, ClusteredVectors(20, kDim, 432), 20), 0.9);
}

}  // namespace
}  // namespace zoom::server
