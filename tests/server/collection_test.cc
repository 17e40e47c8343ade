// Collection and Database without gRPC: creation and the catalog (names,
// configs and their defaults, cache budgets, limits, one database per data
// dir), recovery (a restart, replay of the vector log past the index
// snapshot, a torn vector-file tail, a crash during create, a corrupt or
// foreign index snapshot, left-over files), drop, and the retired segments
// a compaction leaves. The fixture and helpers: collection_test_util.h;
// writes, reads, maintenance, compaction and snapshots: collection_*_test.cc.
#include "tests/server/collection_test_util.h"

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

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
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::zoom::testing::StatusIs;

// ---- Creation and the catalog -----------------------------------------------

// A collection's own DRAM cache budget (CollectionConfig::cache_bytes):
// allocated with its engine and counted in its resident bytes, kept across
// a restart, capped by the server's limit (rejected at creation, clamped
// for a stored config once the limit is lowered).
TEST_F(CollectionTest, ACollectionHasItsOwnCacheBudget) {
  OpenDb();
  CollectionConfig config;
  config.name = "cached";
  config.dim = 8;
  config.cache_bytes = 1 << 20;
  ASSERT_OK(db_->CreateCollection(config).status());
  auto plain = Create("plain", 8, Metric::kL2);
  ASSERT_NE(plain, nullptr);
  const uint64_t plain_bytes = plain->Info().resident_bytes;
  auto cached = Get("cached");
  ASSERT_NE(cached, nullptr);
  EXPECT_GT(cached->Info().resident_bytes, plain_bytes + (900 << 10));
  EXPECT_LE(cached->Info().resident_bytes, plain_bytes + (1 << 20));
  config.name = "huge";
  config.cache_bytes = options_.collection.max_cache_bytes + 1;
  EXPECT_THAT(db_->CreateCollection(config).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--max_cache_bytes")));
  cached.reset();
  plain.reset();
  ReopenDb();
  cached = Get("cached");
  ASSERT_NE(cached, nullptr);
  EXPECT_EQ(cached->config().cache_bytes, uint64_t{1} << 20);
  EXPECT_GT(cached->Info().resident_bytes, plain_bytes + (900 << 10));
  cached.reset();
  options_.collection.max_cache_bytes = 256 << 10;
  ReopenDb();
  cached = Get("cached");
  ASSERT_NE(cached, nullptr);
  EXPECT_EQ(cached->config().cache_bytes, uint64_t{1} << 20);  // as stored
  EXPECT_LE(cached->Info().resident_bytes, plain_bytes + (256 << 10));
}

// One budget for every collection's cache (--max_total_cache_bytes): a
// creation past it is ResourceExhausted and says what is left; a drop gives
// its share back; a collection without cache_bytes counts the server's
// default; after the budget is lowered, an open gives each collection at
// most what is left.
TEST_F(CollectionTest, TheServerHasOneCacheBudgetForAllCollections) {
  constexpr uint64_t kMiB = 1 << 20;
  options_.max_total_cache_bytes = 5 * kMiB / 2;
  OpenDb();
  CollectionConfig config;
  config.dim = 8;
  config.cache_bytes = kMiB;
  for (const char* name : {"a", "b"}) {
    config.name = name;
    ASSERT_OK(db_->CreateCollection(config).status());
  }
  EXPECT_EQ(db_->CacheBytesInUse(), 2 * kMiB);
  config.name = "c";
  EXPECT_THAT(db_->CreateCollection(config).status(),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       AllOf(HasSubstr("524288 of 2621440 bytes left"),
                             HasSubstr("--max_total_cache_bytes"))));
  EXPECT_THAT(db_->GetCollection("c").status(), StatusIs(absl::StatusCode::kNotFound));
  config.cache_bytes = kMiB / 2;
  ASSERT_OK(db_->CreateCollection(config).status());
  EXPECT_EQ(db_->CacheBytesLeft(), 0u);
  ASSERT_NE(Create("plain", 8, Metric::kL2), nullptr);  // no cache: no share
  ASSERT_OK(db_->DropCollection("a"));
  EXPECT_EQ(db_->CacheBytesLeft(), kMiB);
  config.name = "d";
  config.cache_bytes = kMiB;
  ASSERT_OK(db_->CreateCollection(config).status());
  // The server's default cache counts for a collection that sets none.
  options_.collection.engine.cache_bytes = kMiB / 4;
  options_.max_total_cache_bytes = 23 * kMiB / 8;  // an eighth left after the four
  ReopenDb();
  EXPECT_EQ(db_->CacheBytesInUse(), 5 * kMiB / 2 + kMiB / 4);  // b, c, d and plain
  CollectionConfig plain2;
  plain2.name = "plain2";
  plain2.dim = 8;  // a quarter more does not fit
  EXPECT_THAT(db_->CreateCollection(plain2).status(),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("--cache_bytes")));
  // Lowered: the collections opened first keep theirs, the rest get what
  // is left.
  options_.collection.engine.cache_bytes = 0;
  options_.max_total_cache_bytes = 3 * kMiB / 2;
  ReopenDb();
  EXPECT_EQ(db_->CacheBytesInUse(), 3 * kMiB / 2);
  for (const char* name : {"b", "c", "d"}) {
    auto c = Get(name);
    ASSERT_NE(c, nullptr) << name;
    EXPECT_LE(c->core().cache_bytes(), c->config().cache_bytes) << name;
  }
}

TEST_F(CollectionTest, BadRequestsAreInvalidArgument) {
  OpenDb();
  auto c = Create("bad", 4, Metric::kL2);
  ASSERT_NE(c, nullptr);
  EXPECT_THAT(c->Upsert({}), StatusIs(absl::StatusCode::kInvalidArgument,
                                      HasSubstr("no points")));
  EXPECT_THAT(c->Delete({}), StatusIs(absl::StatusCode::kInvalidArgument,
                                      HasSubstr("no ids")));
  const float q[5] = {0, 0, 0, 0, 0};
  CollectionSearchParams p;
  std::vector<Hit> hits;
  EXPECT_THAT(
      SearchInto(*c, q, 5, p, &hits),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("5 dimensions")));
  p.engine.k = 0;
  EXPECT_THAT(SearchInto(*c, q, 4, p, &hits),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("k")));
  // An empty collection answers with nothing.
  p.engine.k = 3;
  ASSERT_OK(SearchInto(*c, q, 4, p, &hits));
  EXPECT_THAT(hits, IsEmpty());
  // Names and configs.
  CollectionConfig config;
  config.name = "bad name";
  config.dim = 4;
  EXPECT_THAT(db_->CreateCollection(config),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("name")));
  config.name = "bad";
  EXPECT_THAT(db_->CreateCollection(config),
              StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr("bad")));
  config.name = "zero_dim";
  config.dim = 0;
  EXPECT_THAT(db_->CreateCollection(config),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dim")));
  EXPECT_THAT(db_->GetCollection("nope"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("nope")));
  EXPECT_THAT(db_->DropCollection("nope"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("nope")));
}

TEST_F(CollectionTest, ASecondDatabaseOnTheSameDataDirIsRefused) {
  OpenDb();
  auto second = Database::Open(options_);
  EXPECT_THAT(second, StatusIs(absl::StatusCode::kFailedPrecondition,
                               HasSubstr("in use")));
}

TEST_F(CollectionTest, ConfigDefaultsKeepExplicitChoicesAndSurviveReopen) {
  OpenDb();
  CollectionConfig config;
  config.name = "auto_m";
  config.dim = 64;
  ASSERT_OK_AND_ASSIGN(auto a, db_->CreateCollection(config));
  EXPECT_EQ(a->config().index.pq.m, 32u);  // automatic: about dim / 2
  config.name = "explicit_m";
  config.index.pq.m = 16;
  config.index.hnsw.M = 12;
  config.default_rerank = 40;
  config.metric = Metric::kInnerProduct;
  config.dtype = storage::DType::kUint8;
  ASSERT_OK_AND_ASSIGN(auto b, db_->CreateCollection(config));
  EXPECT_EQ(b->config().index.pq.m, 16u);
  config.name = "too_big_m";
  config.index.pq.m = 65;
  EXPECT_THAT(db_->CreateCollection(config),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("pq_m")));
  a.reset();
  b.reset();
  ReopenDb();
  b = Get("explicit_m");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->config().dim, 64u);
  EXPECT_EQ(b->config().index.pq.m, 16u);
  EXPECT_EQ(b->config().index.hnsw.M, 12u);
  EXPECT_EQ(b->config().default_rerank, 40u);
  EXPECT_EQ(b->config().metric, Metric::kInnerProduct);
  EXPECT_EQ(b->config().dtype, storage::DType::kUint8);
  EXPECT_EQ(Get("auto_m")->config().index.pq.m, 32u);
}

TEST_F(CollectionTest, MaxCollectionsIsEnforced) {
  options_.max_collections = 2;
  OpenDb();
  ASSERT_NE(Create("a", 4, Metric::kL2), nullptr);
  ASSERT_NE(Create("b", 4, Metric::kL2), nullptr);
  CollectionConfig config;
  config.name = "c";
  config.dim = 4;
  EXPECT_THAT(db_->CreateCollection(config),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("2")));
  ASSERT_OK(db_->DropCollection("a"));
  EXPECT_OK(db_->CreateCollection(config).status());
}

// A cosine collection of uint8 vectors could not store anything (vectors
// are normalised at insert, which makes them fractional): it is refused when
// created, instead of failing every upsert.
TEST_F(CollectionTest, CosineOverUint8IsRefusedAtCreation) {
  OpenDb();
  CollectionConfig config;
  config.name = "cos8";
  config.dim = 4;
  config.metric = Metric::kCosine;
  config.dtype = storage::DType::kUint8;
  EXPECT_THAT(
      db_->CreateCollection(config),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cosine")));
  EXPECT_THAT(db_->GetCollection("cos8"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("cos8")));
  // The other metrics take uint8 vectors.
  config.metric = Metric::kInnerProduct;
  ASSERT_OK_AND_ASSIGN(auto c, db_->CreateCollection(config));
  EXPECT_OK(Upsert(*c, {1}, {3, 4, 0, 0}, {}, nullptr));
}

// ---- Recovery ---------------------------------------------------------------

TEST_F(CollectionTest, ReopenRecoversPointsPayloadsDeletesAndTheIndex) {
  constexpr uint32_t kDim = 24;
  OpenDb();
  auto c = Create("durable", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  Model model;
  UpsertRange(*c, 0, 2000, ClusteredVectors(2000, kDim, 71), &model);
  ASSERT_OK(c->maintenance().StartBuild());
  ASSERT_OK(c->maintenance().WaitForBuild());
  std::vector<uint64_t> del;
  for (size_t i = 0; i < 2000; i += 3) del.push_back(ExtId(i));
  ASSERT_OK(Delete(*c, del, &model));
  std::vector<uint64_t> over = {ExtId(1), ExtId(2), ExtId(4)};
  ASSERT_OK(Upsert(*c, over, ClusteredVectors(3, kDim, 72), {"o1", "", "o4"},
                   &model));
  // A second collection must come back too, untouched.
  auto other = Create("other", 4, Metric::kInnerProduct);
  ASSERT_NE(other, nullptr);
  Model other_model;
  ASSERT_OK(Upsert(*other, {1, 2}, {1, 2, 3, 4, 5, 6, 7, 8}, {"x", "y"},
                   &other_model));

  const auto queries = ClusteredVectors(50, kDim, 73);
  std::vector<std::vector<Hit>> exact_before, indexed_before;
  for (size_t q = 0; q < 50; ++q) {
    exact_before.push_back(Search(*c, queries.data() + q * kDim, 10, true));
    indexed_before.push_back(Search(*c, queries.data() + q * kDim, 10, false));
  }
  const CollectionInfo before = c->Info();
  const uint32_t id = c->core().id();
  c.reset();
  other.reset();
  ReopenDb();

  ASSERT_EQ(db_->ListCollections().size(), 2u);
  c = Get("durable");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->core().id(), id);
  EXPECT_EQ(c->config().dim, kDim);
  EXPECT_EQ(c->config().metric, Metric::kL2);
  const CollectionInfo after = c->Info();
  EXPECT_EQ(after.points, before.points);
  EXPECT_EQ(after.points, model.size());
  EXPECT_EQ(after.deleted_records, before.deleted_records);
  EXPECT_EQ(after.stored_records, before.stored_records);
  EXPECT_EQ(after.index_state, IndexState::kReady);
  EXPECT_EQ(after.indexed_points, before.indexed_points);
  ExpectGetMatchesModel(*c, model);
  std::vector<PointData> got;
  ASSERT_OK(c->Get(del, false, false, &got));
  EXPECT_THAT(got, IsEmpty());
  for (size_t q = 0; q < 50; ++q) {
    SCOPED_TRACE(q);
    bool exact_used = true;
    auto exact = Search(*c, queries.data() + q * kDim, 10, true);
    auto indexed =
        Search(*c, queries.data() + q * kDim, 10, false, &exact_used);
    EXPECT_FALSE(exact_used);
    ASSERT_EQ(exact.size(), exact_before[q].size());
    ASSERT_EQ(indexed.size(), indexed_before[q].size());
    for (size_t i = 0; i < exact.size(); ++i) {
      EXPECT_EQ(exact[i].id, exact_before[q][i].id);
      EXPECT_EQ(exact[i].score, exact_before[q][i].score);
    }
    for (size_t i = 0; i < indexed.size(); ++i) {
      EXPECT_EQ(indexed[i].id, indexed_before[q][i].id);
      EXPECT_EQ(indexed[i].score, indexed_before[q][i].score);
    }
  }
  ExpectExactSearchesMatchOracle(*c, model, queries, 10);
  other = Get("other");
  ASSERT_NE(other, nullptr);
  ExpectGetMatchesModel(*other, other_model);
  // Writes continue after the reopen, and survive the next one.
  UpsertRange(*c, 5000, 100, ClusteredVectors(100, kDim, 74), &model);
  c.reset();
  other.reset();
  ReopenDb();
  c = Get("durable");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->Info().points, model.size());
  ExpectGetMatchesModel(*c, model);
  ExpectExactSearchesMatchOracle(*c, model, queries, 10);
}

// Points stored after the last snapshot are replayed into the index on
// open. MarkDropped() keeps the collection from saving a snapshot when it
// closes, which leaves the files as a crash right after the last
// acknowledged write would (the catalog entry is untouched).
TEST_F(CollectionTest, PointsAfterTheLastSnapshotAreReplayedIntoTheIndex) {
  constexpr uint32_t kDim = 16;
  OpenDb();
  auto c = Create("replay", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  Model model;
  UpsertRange(*c, 0, 1000, ClusteredVectors(1000, kDim, 81), &model);
  ASSERT_OK(c->maintenance().StartBuild());
  ASSERT_OK(c->maintenance().WaitForBuild());
  const std::string dir = c->core().dir();
  const auto files_after_build = FilesIn(dir);
  const auto later = ClusteredVectors(300, kDim, 82);
  UpsertRange(*c, 1000, 300, later, &model, 100);
  std::vector<uint64_t> del = {ExtId(1000), ExtId(1001), ExtId(10)};
  ASSERT_OK(Delete(*c, del, &model));
  c->MarkDropped();
  c.reset();
  CloseDb();
  // No newer snapshot was written: the open has to replay.
  ASSERT_EQ(FilesIn(dir), files_after_build);
  OpenDb();
  c = Get("replay");
  ASSERT_NE(c, nullptr);
  CollectionInfo info = c->Info();
  EXPECT_EQ(info.index_state, IndexState::kReady);
  EXPECT_EQ(info.indexed_points, 1300u);
  EXPECT_EQ(info.points, model.size());
  ExpectGetMatchesModel(*c, model);
  size_t found = 0;
  for (size_t i = 2; i < 300; ++i) {
    bool exact_used = true;
    auto hits = Search(*c, later.data() + i * kDim, 10, false, &exact_used);
    ASSERT_FALSE(exact_used);
    for (const auto& h : hits) {
      found += h.id == ExtId(1000 + i);
      ASSERT_TRUE(model.count(h.id)) << h.id;
    }
  }
  std::printf("[ replayed points found by the index ] %zu of 298\n", found);
  EXPECT_GE(found, 290u);
  // The normal close saves a snapshot covering everything; the next open
  // needs no replay and still finds the points.
  c.reset();
  ReopenDb();
  EXPECT_NE(FilesIn(dir), files_after_build);
  c = Get("replay");
  ASSERT_NE(c, nullptr);
  info = c->Info();
  EXPECT_EQ(info.index_state, IndexState::kReady);
  EXPECT_EQ(info.indexed_points, 1300u);
  for (size_t i = 2; i < 300; i += 10) {
    auto hits = Search(*c, later.data() + i * kDim, 1, true);
    ASSERT_EQ(hits.size(), 1u);
    EXPECT_EQ(hits[0].id, ExtId(1000 + i));
  }
}

// Vectors in the file that the record map never acknowledged (a crash
// between the vector append and the commit) are never served.
TEST_F(CollectionTest, TornTailOfTheVectorFileIsNeverServed) {
  constexpr uint32_t kDim = 16;
  constexpr size_t kTorn = 40;
  OpenDb();
  auto c = Create("torn", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  Model model;
  UpsertRange(*c, 0, 1000, ClusteredVectors(1000, kDim, 91), &model);
  ASSERT_OK(c->maintenance().StartBuild());
  ASSERT_OK(c->maintenance().WaitForBuild());
  const std::string vectors = (fs::path(c->core().dir()) / "vectors-1.zvec").string();
  c.reset();
  CloseDb();

  // The torn records sit exactly on the queries: if served, they would win.
  const auto queries = ClusteredVectors(kTorn, kDim, 92);
  {
    ASSERT_OK_AND_ASSIGN(auto store, storage::VectorStore::Open(vectors));
    ASSERT_EQ(store->count(), 1000u);
    ASSERT_OK(store->Append(queries.data(), kTorn));
  }
  OpenDb();
  c = Get("torn");
  ASSERT_NE(c, nullptr);
  CollectionInfo info = c->Info();
  EXPECT_EQ(info.points, 1000u);
  EXPECT_EQ(info.stored_records, 1000u + kTorn);
  EXPECT_EQ(info.deleted_records, kTorn);
  EXPECT_EQ(info.index_state, IndexState::kReady);
  auto check = [&] {
    ExpectExactSearchesMatchOracle(*c, model, queries, kTorn);
    for (size_t q = 0; q < kTorn; ++q) {
      auto hits = Search(*c, queries.data() + q * kDim, 10, false);
      ASSERT_EQ(hits.size(), 10u);
      for (const auto& h : hits) {
        ASSERT_TRUE(model.count(h.id)) << "query " << q << ": id " << h.id;
        EXPECT_GT(h.score, 1e-3) << "query " << q << " found a torn record";
      }
    }
  };
  check();
  // New points go after the torn records and are served; the torn ones
  // stay dead across another reopen.
  const auto more = ClusteredVectors(50, kDim, 93);
  UpsertRange(*c, 2000, 50, more, &model);
  for (size_t i = 0; i < 50; ++i) {
    auto hits = Search(*c, more.data() + i * kDim, 1, true);
    ASSERT_EQ(hits.size(), 1u);
    EXPECT_EQ(hits[0].id, ExtId(2000 + i));
  }
  c.reset();
  ReopenDb();
  c = Get("torn");
  ASSERT_NE(c, nullptr);
  info = c->Info();
  EXPECT_EQ(info.points, 1050u);
  EXPECT_EQ(info.deleted_records, kTorn);
  ExpectGetMatchesModel(*c, model);
  check();
}

// A crash after the catalog entry of a new collection was written but
// before the collection saved its state (Database::CreateCollection never
// returned) must not keep the database from opening.
TEST_F(CollectionTest, CrashDuringCreateDoesNotBlockTheNextOpen) {
  OpenDb();
  ASSERT_NE(Create("fine", 4, Metric::kL2), nullptr);
  CloseDb();
  CollectionConfig config;
  config.name = "half";
  config.dim = 4;
  config.ApplyDefaults();
  {
    ASSERT_OK_AND_ASSIGN(auto meta,
                         storage::MetadataStore::Open(
                             (fs::path(options_.data_dir) / "meta").string(),
                             storage::MetadataOptions()));
    ASSERT_OK(meta->CreateCollection("half", config.Encode()).status());
  }
  OpenDb();
  ASSERT_NE(db_, nullptr);
  auto fine = Get("fine");
  ASSERT_NE(fine, nullptr);
  // Whatever became of "half", its name is usable again.
  std::shared_ptr<Collection> half;
  if (auto got = db_->GetCollection("half"); got.ok()) {
    half = *got;
  } else {
    half = Create("half", 4, Metric::kL2);
  }
  ASSERT_NE(half, nullptr);
  EXPECT_EQ(half->Info().points, 0u);
  ASSERT_OK(Upsert(*half, {1}, {1, 2, 3, 4}, {"p"}, nullptr));
  half.reset();
  fine.reset();
  ReopenDb();
  ASSERT_OK_AND_ASSIGN(half, db_->GetCollection("half"));
  EXPECT_EQ(half->Info().points, 1u);
}

// A rabitq collection whose index snapshot holds another code (written by a
// zoomd that ignored the config's pq_code: a downgrade and back) does not
// serve it: FAILED with the reason, exact searches, and the next build
// makes the collection's own code again.
TEST_F(CollectionTest, ASnapshotOfAnotherCodeIsNotServed) {
  constexpr uint32_t kDim = 16, kN = 800;
  OpenDb();
  CollectionConfig config;
  config.name = "rq";
  config.dim = kDim;
  config.index.pq.code = index::CodeKind::kRabitq;
  config.index.pq.nbits = 0;
  ASSERT_OK(db_->CreateCollection(config).status());
  auto c = Get("rq");
  ASSERT_NE(c, nullptr);
  Model model;
  const std::vector<float> x = ClusteredVectors(kN, kDim, 161);
  UpsertRange(*c, 0, kN, x, &model);
  ASSERT_OK(c->maintenance().StartBuild());
  ASSERT_OK(c->maintenance().WaitForBuild());
  EXPECT_EQ(c->core().engine()->index()->spec().pq.code, index::CodeKind::kRabitq);
  index::IndexSpec pq_spec = c->core().engine()->index()->spec();
  pq_spec.pq.code = index::CodeKind::kPq;  // what an older zoomd builds from this config
  const std::string dir = c->core().dir();
  c.reset();
  CloseDb();
  const std::string snapshot = IndexSnapshotIn(dir);
  ASSERT_FALSE(snapshot.empty());
  ASSERT_OK_AND_ASSIGN(auto pq_index, index::BuildIndex(pq_spec, x.data(), kN));
  ASSERT_OK(pq_index->Save((fs::path(dir) / snapshot).string()));
  OpenDb();
  c = Get("rq");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->Info().index_state, IndexState::kFailed);
  EXPECT_THAT(c->Info().index_error, HasSubstr("its code is pq, the collection's rabitq"));
  ASSERT_OK(c->maintenance().StartBuild());
  ASSERT_OK(c->maintenance().WaitForBuild());
  EXPECT_EQ(c->Info().index_state, IndexState::kReady);
  EXPECT_EQ(c->core().engine()->index()->spec().pq.code, index::CodeKind::kRabitq);
}

// A snapshot that cannot be loaded leaves the collection searchable
// (exactly) with the index FAILED, until a build replaces it.
TEST_F(CollectionTest, CorruptSnapshotFallsBackToExactSearchUntilRebuilt) {
  constexpr uint32_t kDim = 16;
  OpenDb();
  auto c = Create("snap", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  Model model;
  UpsertRange(*c, 0, 800, ClusteredVectors(800, kDim, 151), &model);
  ASSERT_OK(c->maintenance().StartBuild());
  ASSERT_OK(c->maintenance().WaitForBuild());
  const std::string dir = c->core().dir();
  c.reset();
  CloseDb();
  const std::string snapshot = IndexSnapshotIn(dir);
  ASSERT_FALSE(snapshot.empty());
  {
    // Keep the size, break the content.
    const std::string path = (fs::path(dir) / snapshot).string();
    const auto size = fs::file_size(path);
    FILE* f = std::fopen(path.c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    std::fseek(f, static_cast<long>(size / 2), SEEK_SET);
    const char junk[64] = {1, 2, 3};
    std::fwrite(junk, 1, sizeof(junk), f);
    std::fclose(f);
  }
  OpenDb();
  c = Get("snap");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->Info().index_state, IndexState::kFailed);
  EXPECT_THAT(c->Info().index_error, Not(IsEmpty()));
  const auto queries = ClusteredVectors(20, kDim, 152);
  bool exact_used = false;
  Search(*c, queries.data(), 10, false, &exact_used);
  EXPECT_TRUE(exact_used);
  ExpectExactSearchesMatchOracle(*c, model, queries, 20);
  ASSERT_OK(c->maintenance().StartBuild());
  ASSERT_OK(c->maintenance().WaitForBuild());
  EXPECT_EQ(c->Info().index_state, IndexState::kReady);
  EXPECT_THAT(c->Info().index_error, IsEmpty());
  c.reset();
  ReopenDb();
  c = Get("snap");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->Info().index_state, IndexState::kReady);
  Search(*c, queries.data(), 10, false, &exact_used);
  EXPECT_FALSE(exact_used);
}

// Files the collection's state does not name (left by a crash during a
// snapshot or a compaction) are removed on open and do not disturb it.
TEST_F(CollectionTest, LeftoverFilesAreRemovedOnOpen) {
  constexpr uint32_t kDim = 8;
  OpenDb();
  auto c = Create("tidy", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  Model model;
  UpsertRange(*c, 0, 300, ClusteredVectors(300, kDim, 161), &model);
  ASSERT_OK(c->maintenance().StartBuild());
  ASSERT_OK(c->maintenance().WaitForBuild());
  const std::string dir = c->core().dir();
  c.reset();
  CloseDb();
  const auto files = FilesIn(dir);
  for (const char* name :
       {"index-99.zidx", "vectors-98.zvec", "index-7.zidx.tmp"}) {
    FILE* f = std::fopen((fs::path(dir) / name).c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::fputs("left over", f);
    std::fclose(f);
  }
  OpenDb();
  EXPECT_EQ(FilesIn(dir), files);
  c = Get("tidy");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->Info().index_state, IndexState::kReady);
  ExpectGetMatchesModel(*c, model);
}

// ---- Drop -------------------------------------------------------------------

TEST_F(CollectionTest, DropCollectionRemovesItsFilesAndRecords) {
  constexpr uint32_t kDim = 16;
  OpenDb();
  auto c = Create("doomed", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  auto keep = Create("keep", kDim, Metric::kL2);
  ASSERT_NE(keep, nullptr);
  Model model, keep_model;
  UpsertRange(*c, 0, 600, ClusteredVectors(600, kDim, 121), &model);
  UpsertRange(*keep, 0, 100, ClusteredVectors(100, kDim, 122), &keep_model);
  ASSERT_OK(c->maintenance().StartBuild());
  ASSERT_OK(c->maintenance().WaitForBuild());
  std::vector<uint64_t> del;
  for (size_t i = 0; i < 300; ++i) del.push_back(ExtId(i));
  ASSERT_OK(Delete(*c, del, &model));
  ASSERT_OK(c->maintenance().Compact());  // the records now live in another space
  const uint32_t old_id = c->core().id();
  const uint32_t old_space = c->core().record_space();
  ASSERT_NE(old_space, old_id);
  const std::string old_dir = c->core().dir();
  ASSERT_TRUE(fs::exists(old_dir));
  c.reset();

  ASSERT_OK(db_->DropCollection("doomed"));
  EXPECT_FALSE(fs::exists(old_dir));
  EXPECT_THAT(db_->GetCollection("doomed"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("doomed")));
  ASSERT_EQ(db_->ListCollections().size(), 1u);
  EXPECT_EQ(db_->ListCollections()[0]->config().name, "keep");
  EXPECT_THAT(db_->DropCollection("doomed"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("doomed")));

  // The same name starts empty.
  c = Create("doomed", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  EXPECT_NE(c->core().id(), old_id);
  EXPECT_EQ(c->Info().points, 0u);
  EXPECT_EQ(c->Info().stored_records, 0u);
  EXPECT_EQ(c->Info().index_state, IndexState::kNone);
  std::vector<PointData> got;
  ASSERT_OK(
      c->Get(std::vector<uint64_t>{ExtId(400), ExtId(500)}, true, true, &got));
  EXPECT_THAT(got, IsEmpty());
  const auto q = ClusteredVectors(1, kDim, 123);
  EXPECT_THAT(Search(*c, q.data(), 10, false), IsEmpty());
  const uint32_t new_id = c->core().id();
  c.reset();
  keep.reset();
  ReopenDb();
  c = Get("doomed");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->core().id(), new_id);
  EXPECT_EQ(c->Info().points, 0u);
  keep = Get("keep");
  ASSERT_NE(keep, nullptr);
  ExpectGetMatchesModel(*keep, keep_model);
  c.reset();
  keep.reset();
  CloseDb();

  // No records of the dropped collection are left in the metadata store,
  // neither in its first space nor in the one compaction moved them to.
  ASSERT_OK_AND_ASSIGN(auto meta,
                       storage::MetadataStore::Open(
                           (fs::path(options_.data_dir) / "meta").string(),
                           storage::MetadataOptions()));
  for (uint32_t space : {old_id, old_space}) {
    int records = 0;
    ASSERT_OK(meta->ScanRecords(space, [&](InternalId, uint64_t) {
      ++records;
      return absl::OkStatus();
    }));
    EXPECT_EQ(records, 0) << "space " << space;
  }
}

// ---- Retired segments -------------------------------------------------------

// A segment replaced by compaction is retired, not destroyed by its last
// reader: its records stay while a reader holds it, are dropped by the
// maintenance once none does, and a restart drops the records of a
// segment that was still held at close.
TEST_F(CollectionTest, RetiredSegmentsAreReleasedByMaintenanceNotByReaders) {
  constexpr uint32_t kDim = 8;
  OpenDb();
  auto c = Create("retire", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  Model model;
  UpsertRange(*c, 0, 600, ClusteredVectors(600, kDim, 411), &model);
  std::vector<uint64_t> del;
  for (size_t i = 0; i < 600; i += 3) del.push_back(ExtId(i));
  ASSERT_OK(Delete(*c, del, &model));
  const uint32_t first_space = c->core().record_space();

  // A reader holds the serving segment across the compaction.
  std::shared_ptr<const SearchEngine> reader = c->core().engine();
  ASSERT_OK(c->maintenance().Compact());
  const uint32_t second_space = c->core().record_space();
  ASSERT_NE(second_space, first_space);
  EXPECT_THAT(c->core().record_spaces(),
              ::testing::UnorderedElementsAre(first_space, second_space));
  // The old segment still answers its reader (its file was unlinked, the
  // descriptor stays).
  EXPECT_EQ(reader->size(), 600u);
  ExpectGetMatchesModel(*c, model);
  db_->RunMaintenance();  // held: stays
  EXPECT_EQ(c->core().record_spaces().size(), 2u);
  reader.reset();  // the last reader lets go: no I/O here
  EXPECT_EQ(c->core().record_spaces().size(), 2u);
  db_->RunMaintenance();
  EXPECT_THAT(c->core().record_spaces(), ::testing::ElementsAre(second_space));

  // Held at close: the manifest lists the space, the next open drops it.
  for (size_t i = 1; i < 600; i += 3) del.push_back(ExtId(i));
  ASSERT_OK(Delete(*c, del, &model));
  reader = c->core().engine();
  ASSERT_OK(c->maintenance().Compact());
  const uint32_t third_space = c->core().record_space();
  EXPECT_EQ(c->core().record_spaces().size(), 2u);
  c.reset();
  ReopenDb();
  reader.reset();
  c = Get("retire");
  ASSERT_NE(c, nullptr);
  EXPECT_THAT(c->core().record_spaces(), ::testing::ElementsAre(third_space));
  ExpectGetMatchesModel(*c, model);
  c.reset();
  CloseDb();
  auto count = RecordCounter();
  EXPECT_EQ(count(first_space), 0u);
  EXPECT_EQ(count(second_space), 0u);
  EXPECT_EQ(count(third_space), model.size());
}

}  // namespace
}  // namespace zoom::server
