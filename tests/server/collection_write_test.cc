// Collection writes: upserts and gets against an in-memory model (cosine
// normalisation, uint8, non-finite, zero and oversized vectors, duplicates in
// a batch), overwrites and deletes, writes through a dropped collection, typed
// payload fields and their edits (SetPayload / DeletePayload), the log
// position, and every write path under injected disk faults.
#include "tests/server/collection_test_util.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/engine/collection.h"
#include "server/engine/database.h"
#include "tests/testing/fault_injecting_file_system.h"
#include "tests/testing/status_matchers.h"

namespace zoom::server {
namespace {

// The shared fixture and helpers (collection_test_util.h).
using namespace collection_testing;  // NOLINT(build/namespaces)
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::zoom::testing::StatusIs;

// ---- Upsert / Get -----------------------------------------------------------

TEST_F(CollectionTest, UpsertThenGetReturnsVectorsAndPayloads) {
  OpenDb();
  auto c = Create("points", 16, Metric::kL2);
  ASSERT_NE(c, nullptr);
  Model model;
  const auto v = ClusteredVectors(100, 16, 1);
  std::vector<uint64_t> ids;
  std::vector<std::string> payloads;
  for (size_t i = 0; i < 100; ++i) {
    ids.push_back(ExtId(i));
    // Some without payload, one binary, one large.
    payloads.push_back(i % 3 == 0 ? ""
                       : i == 1   ? std::string("\0bin\xff", 5)
                       : i == 2   ? std::string(50000, 'z')
                                  : absl::StrCat("payload of ", i));
  }
  ASSERT_OK(Upsert(*c, ids, v, payloads, &model));
  ExpectGetMatchesModel(*c, model);

  // Request order, missing ids skipped, nothing asked -> nothing returned.
  std::vector<PointData> got;
  const std::vector<uint64_t> ask = {ExtId(7), 42, ExtId(3), ExtId(7)};
  ASSERT_OK(c->Get(ask, /*with_vectors=*/false, /*with_payload=*/false, &got));
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].id, ExtId(7));
  EXPECT_EQ(got[1].id, ExtId(3));
  EXPECT_EQ(got[2].id, ExtId(7));
  for (const PointData& p : got) {
    EXPECT_THAT(p.vector, IsEmpty());
    EXPECT_THAT(p.payload, IsEmpty());
  }
  ASSERT_OK(c->Get(ask, /*with_vectors=*/false, /*with_payload=*/true, &got));
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].payload, "payload of 7");
  EXPECT_EQ(got[1].payload, "");
  EXPECT_THAT(got[0].vector, IsEmpty());

  const CollectionInfo info = c->Info();
  EXPECT_EQ(info.points, 100u);
  EXPECT_EQ(info.stored_records, 100u);
  EXPECT_EQ(info.deleted_records, 0u);
  EXPECT_EQ(info.index_state, IndexState::kNone);
}

TEST_F(CollectionTest, CosineVectorsComeBackNormalised) {
  OpenDb();
  auto c = Create("cos", 8, Metric::kCosine);
  ASSERT_NE(c, nullptr);
  const std::vector<float> v = {3, 4, 0, 0, 0, 0, 0, 0,  //
                                1, 1, 1, 1, 1, 1, 1, 1,  //
                                0, 0, 0, 0, 0, 0, 0, -1e-3f};
  ASSERT_OK(Upsert(*c, {1, 2, 3}, v, {}, nullptr));
  std::vector<PointData> got;
  ASSERT_OK(c->Get(std::vector<uint64_t>{1, 2, 3}, true, false, &got));
  ASSERT_EQ(got.size(), 3u);
  const float r = 1 / std::sqrt(8.0f);
  const std::vector<float> want = {0.6f, 0.8f, 0, 0, 0, 0, 0, 0,  //
                                   r,    r,    r, r, r, r, r, r,  //
                                   0,    0,    0, 0, 0, 0, 0, -1};
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_EQ(got[i].vector.size(), 8u);
    for (size_t j = 0; j < 8; ++j) {
      EXPECT_NEAR(got[i].vector[j], want[i * 8 + j], 1e-6) << i << "," << j;
    }
  }
  // The score of a cosine search is the cosine, whatever the query's norm.
  const float q[8] = {30, 40, 0, 0, 0, 0, 0, 0};
  auto hits = Search(*c, q, 3, /*exact=*/true);
  ASSERT_EQ(hits.size(), 3u);
  EXPECT_EQ(hits[0].id, 1u);
  EXPECT_NEAR(hits[0].score, 1.0, 1e-6);
  EXPECT_EQ(hits[1].id, 2u);
  EXPECT_NEAR(hits[1].score, 7 / (5 * std::sqrt(8.0)), 1e-6);
  EXPECT_EQ(hits[2].id, 3u);
  EXPECT_NEAR(hits[2].score, 0.0, 1e-6);
}

TEST_F(CollectionTest, Uint8CollectionStoresIntegersAndRejectsOthers) {
  OpenDb();
  auto c = Create("bytes", 4, Metric::kL2, storage::DType::kUint8);
  ASSERT_NE(c, nullptr);
  Model model;
  ASSERT_OK(Upsert(*c, {10, 11}, {0, 1, 254, 255, 17, 0, 128, 3}, {"a", "b"},
                   &model));
  ExpectGetMatchesModel(*c, model);

  // Out of range or fractional: InvalidArgument, and the whole batch is
  // refused (the good point of it is not stored either).
  for (float bad : {1.5f, 256.0f, -1.0f, 0.5f}) {
    SCOPED_TRACE(bad);
    EXPECT_THAT(
        Upsert(*c, {20, 21}, {1, 2, 3, 4, 1, 2, bad, 4}, {}, nullptr),
        StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("uint8")));
  }
  const CollectionInfo info = c->Info();
  EXPECT_EQ(info.points, 2u);
  EXPECT_EQ(info.stored_records, 2u);
  std::vector<PointData> got;
  ASSERT_OK(c->Get(std::vector<uint64_t>{20, 21}, true, true, &got));
  EXPECT_THAT(got, IsEmpty());
  ExpectGetMatchesModel(*c, model);
  const float q[4] = {0, 1, 254, 255};
  auto hits = Search(*c, q, 2, true);
  ASSERT_EQ(hits.size(), 2u);
  EXPECT_EQ(hits[0].id, 10u);
  EXPECT_EQ(hits[0].score, 0.0f);
}

TEST_F(CollectionTest, NonFiniteVectorsAreRejectedAllOrNothing) {
  OpenDb();
  auto c = Create("finite", 4, Metric::kL2);
  ASSERT_NE(c, nullptr);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (float bad : {nan, inf, -inf}) {
    SCOPED_TRACE(bad);
    EXPECT_THAT(
        Upsert(*c, {1, 2}, {1, 2, 3, 4, 1, bad, 3, 4}, {}, nullptr),
        StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("finite")));
  }
  EXPECT_EQ(c->Info().points, 0u);
  EXPECT_EQ(c->Info().stored_records, 0u);
  // Queries too.
  ASSERT_OK(Upsert(*c, {1}, {1, 2, 3, 4}, {}, nullptr));
  const float q[4] = {0, nan, 0, 0};
  CollectionSearchParams p;
  std::vector<Hit> hits;
  EXPECT_THAT(
      SearchInto(*c, q, 4, p, &hits),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("finite")));
}

TEST_F(CollectionTest, ZeroVectorIsRejectedForCosineOnly) {
  OpenDb();
  auto cos = Create("cos", 4, Metric::kCosine);
  auto l2 = Create("l2", 4, Metric::kL2);
  auto ip = Create("ip", 4, Metric::kInnerProduct);
  ASSERT_NE(cos, nullptr);
  ASSERT_NE(l2, nullptr);
  ASSERT_NE(ip, nullptr);
  const std::vector<float> v = {1, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_THAT(Upsert(*cos, {1, 2}, v, {}, nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("zero")));
  EXPECT_EQ(cos->Info().points, 0u);
  EXPECT_OK(Upsert(*l2, {1, 2}, v, {}, nullptr));
  EXPECT_OK(Upsert(*ip, {1, 2}, v, {}, nullptr));
  EXPECT_EQ(l2->Info().points, 2u);
  EXPECT_EQ(ip->Info().points, 2u);
}

TEST_F(CollectionTest, LaterDuplicateInOneBatchWins) {
  OpenDb();
  auto c = Create("dups", 4, Metric::kL2);
  ASSERT_NE(c, nullptr);
  ASSERT_OK(Upsert(*c, {7, 8, 7, 7},
                   {1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4},
                   {"first", "eight", "second", "third"}, nullptr));
  std::vector<PointData> got;
  ASSERT_OK(c->Get(std::vector<uint64_t>{7, 8}, true, true, &got));
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].vector, (std::vector<float>{4, 4, 4, 4}));
  EXPECT_EQ(got[0].payload, "third");
  EXPECT_EQ(got[1].vector, (std::vector<float>{2, 2, 2, 2}));
  EXPECT_EQ(got[1].payload, "eight");
  EXPECT_EQ(c->Info().points, 2u);
  // An exact search sees id 7 once, with its last vector.
  const float q[4] = {1, 1, 1, 1};
  auto hits = Search(*c, q, 10, true);
  ASSERT_EQ(hits.size(), 2u);
  EXPECT_EQ(hits[0].id, 8u);
  EXPECT_FLOAT_EQ(hits[0].score, 4.0f);
  EXPECT_EQ(hits[1].id, 7u);
  EXPECT_FLOAT_EQ(hits[1].score, 36.0f);
}

// Components at and beyond the rule (common/vector_limits.h): refused with
// the point and component named; accepted vectors near the bound build an
// index (FAISS k-means and PQ training abort on overflowing distances: this
// test process would die) and score finitely.
TEST_F(CollectionTest, MagnitudeRuleRefusesOverflowAndBuildsAtTheBound) {
  constexpr uint32_t kDim = 8;
  OpenDb();
  const std::vector<float> huge(kDim, 1e20f);
  for (Metric metric : {Metric::kL2, Metric::kInnerProduct}) {
    for (index::IndexKind kind : {index::IndexKind::kIvfHnswPq, index::IndexKind::kHnswPq}) {
      SCOPED_TRACE(absl::StrCat(MetricName(metric), " ", index::IndexKindName(kind)));
      CollectionConfig config;
      config.name = absl::StrCat("m", static_cast<int>(metric), "_", static_cast<int>(kind));
      config.dim = kDim;
      config.metric = metric;
      config.index.kind = kind;
      config.index.nlist = 16;
      auto created = db_->CreateCollection(config);
      ASSERT_OK(created.status());
      Collection& c = **created;
      std::vector<float> v = ClusteredVectors(300, kDim, 5);
      Model model;
      std::vector<uint64_t> ids(300);
      for (size_t i = 0; i < 300; ++i) ids[i] = i;
      ASSERT_OK(Upsert(c, ids, v, {}, &model));
      // 1e20 and 3e38 (whose square overflows) are refused, naming the point
      // and the component; nothing of the batch is stored.
      std::vector<float> bad = {1, 1, 1, 1, 1, 1, 1, 1};
      bad.insert(bad.end(), huge.begin(), huge.end());
      EXPECT_THAT(Upsert(c, {500, 501}, bad, {}, nullptr),
                  StatusIs(absl::StatusCode::kInvalidArgument,
                           ::testing::AllOf(HasSubstr("point 501 (#1)"), HasSubstr("component 0"),
                                 HasSubstr("1e18"))));
      std::vector<float> max_float(kDim, 3e38f);
      EXPECT_THAT(Upsert(c, {502}, max_float, {}, nullptr),
                  StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("point 502")));
      EXPECT_EQ(c.Info().points, 300u);
      EXPECT_EQ(c.Info().stored_records, 300u);
      // Just inside the bound (norm 8.5e17) is accepted and indexed.
      std::vector<float> big(kDim, 3e17f);
      ASSERT_OK(Upsert(c, {600}, big, {}, &model));
      ASSERT_OK(c.maintenance().StartBuild());
      ASSERT_OK(c.maintenance().WaitForBuild());
      EXPECT_EQ(c.Info().index_state, IndexState::kReady);
      // Queries follow the same rule; an accepted one scores finitely.
      CollectionSearchParams p;
      p.engine.k = 5;
      std::vector<Hit> hits;
      EXPECT_THAT(SearchInto(c, huge.data(), kDim, p, &hits),
                  StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("query")));
      for (bool exact : {false, true}) {
        p.engine.exact = exact;
        ASSERT_OK(SearchInto(c, big.data(), kDim, p, &hits));
        ASSERT_FALSE(hits.empty());
        for (const Hit& h : hits) EXPECT_TRUE(std::isfinite(h.score)) << h.id;
        if (metric == Metric::kL2) EXPECT_EQ(hits[0].id, 600u);
      }
    }
  }
  // Cosine takes any finite non-zero vector (normalised in double), and
  // refuses the zero query as it refuses the zero point.
  auto cos = Create("cos", kDim, Metric::kCosine);
  ASSERT_NE(cos, nullptr);
  std::vector<float> max_float(kDim, 3e38f);
  max_float[1] = -3e38f;
  ASSERT_OK(Upsert(*cos, {1}, max_float, {}, nullptr));
  std::vector<PointData> got;
  ASSERT_OK(cos->Get(std::vector<uint64_t>{1}, true, false, &got));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_NEAR(got[0].vector[0], 1 / std::sqrt(8.0), 1e-6);
  auto hits = Search(*cos, max_float.data(), 1, true);
  ASSERT_EQ(hits.size(), 1u);
  EXPECT_NEAR(hits[0].score, 1.0, 1e-5);
  const std::vector<float> zero(kDim, 0.0f);
  CollectionSearchParams p;
  std::vector<Hit> out;
  EXPECT_THAT(SearchInto(*cos, zero.data(), kDim, p, &out),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("zero")));
}

// ---- Overwrite and delete ---------------------------------------------------

TEST_F(CollectionTest, OverwriteReturnsThePointOnceWithItsNewVector) {
  constexpr uint32_t kDim = 16;
  OpenDb();
  auto c = Create("over", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  Model model;
  const auto base = ClusteredVectors(1000, kDim, 21);
  UpsertRange(*c, 0, 1000, base, &model);

  auto check = [&](bool exact) {
    // Move point 5 onto point 600's old place... and 600 far away.
    for (int round = 0; round < 2; ++round) {
      SCOPED_TRACE(absl::StrCat(exact ? "exact" : "indexed", " round ", round));
      const uint64_t id = ExtId(5 + round);
      std::vector<float> target(base.begin() + (600 + round) * kDim,
                                base.begin() + (601 + round) * kDim);
      for (float& x : target) x += 0.001f;  // not a tie with 600
      const std::vector<float> old = model.at(id).vector;
      const uint64_t stored = c->Info().stored_records;
      ASSERT_OK(Upsert(*c, {id}, target, {"moved"}, &model));
      const CollectionInfo info = c->Info();
      EXPECT_EQ(info.points, model.size());
      EXPECT_EQ(info.stored_records, stored + 1);
      EXPECT_EQ(info.deleted_records, info.stored_records - model.size());

      auto hits = Search(*c, target.data(), 10, exact, nullptr, true, true);
      ASSERT_FALSE(hits.empty());
      EXPECT_EQ(hits[0].id, id);
      EXPECT_NEAR(hits[0].score, 0.0, 1e-3);
      EXPECT_EQ(hits[0].payload, "moved");
      EXPECT_EQ(hits[0].vector, target);
      int seen = 0;
      for (const auto& h : hits) seen += h.id == id;
      EXPECT_EQ(seen, 1);
      // Searching the old place does not find it there any more.
      hits = Search(*c, old.data(), 10, exact);
      for (const auto& h : hits) {
        if (h.id == id) {
          EXPECT_NEAR(h.score, TrueScore(Metric::kL2, old.data(), target),
                      1e-2);
        }
      }
      if (exact) ExpectMatchesOracle(hits, model, Metric::kL2, old.data(), 10);
    }
  };
  check(/*exact=*/true);
  ASSERT_OK(c->maintenance().StartBuild());
  ASSERT_OK(c->maintenance().WaitForBuild());
  ASSERT_EQ(c->Info().index_state, IndexState::kReady);
  // Round 2 moves the same ids again, now through the index.
  check(/*exact=*/false);
}

TEST_F(CollectionTest, DeletedPointsAreNeverReturnedAndAreCounted) {
  constexpr uint32_t kDim = 16;
  OpenDb();
  auto c = Create("del", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  Model model;
  const auto base = ClusteredVectors(1000, kDim, 31);
  UpsertRange(*c, 0, 1000, base, &model);
  std::vector<uint64_t> del;
  for (size_t i = 0; i < 1000; i += 4) del.push_back(ExtId(i));
  // Duplicates and unknown ids are not counted.
  std::vector<uint64_t> request = del;
  request.push_back(del[0]);
  request.push_back(123456789);
  uint64_t n = 0;
  ASSERT_OK(Delete(*c, request, &model, &n));
  EXPECT_EQ(n, del.size());
  CollectionInfo info = c->Info();
  EXPECT_EQ(info.points, 750u);
  EXPECT_EQ(info.deleted_records, 250u);
  EXPECT_EQ(info.stored_records, 1000u);
  // Again: nothing left to delete.
  ASSERT_OK(Delete(*c, del, &model, &n));
  EXPECT_EQ(n, 0u);
  EXPECT_EQ(c->Info().deleted_records, 250u);

  std::vector<PointData> got;
  ASSERT_OK(c->Get(del, true, true, &got));
  EXPECT_THAT(got, IsEmpty());

  // A query sitting on each deleted point never returns it.
  const absl::flat_hash_set<uint64_t> gone(del.begin(), del.end());
  auto check = [&](bool exact) {
    for (size_t i = 0; i < 1000; i += 4) {
      auto hits = Search(*c, base.data() + i * kDim, 10, exact);
      ASSERT_EQ(hits.size(), 10u);
      for (const auto& h : hits) ASSERT_FALSE(gone.contains(h.id)) << h.id;
    }
  };
  check(true);
  ExpectExactSearchesMatchOracle(*c, model, ClusteredVectors(20, kDim, 32), 20);
  ASSERT_OK(c->maintenance().StartBuild());
  ASSERT_OK(c->maintenance().WaitForBuild());
  check(false);
  // Deleting after the build works the same.
  std::vector<uint64_t> del2;
  for (size_t i = 1; i < 1000; i += 4) del2.push_back(ExtId(i));
  ASSERT_OK(Delete(*c, del2, &model, &n));
  EXPECT_EQ(n, 250u);
  for (size_t i = 1; i < 1000; i += 4) {
    auto hits = Search(*c, base.data() + i * kDim, 10, false);
    for (const auto& h : hits) {
      ASSERT_TRUE(model.count(h.id)) << h.id;
    }
  }
  info = c->Info();
  EXPECT_EQ(info.points, 500u);
  EXPECT_EQ(info.deleted_records, 500u);
}

TEST_F(CollectionTest, WritesThroughADroppedCollectionAreRefused) {
  constexpr uint32_t kDim = 4;
  OpenDb();
  auto c = Create("gone", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  ASSERT_OK(db_->DropCollection("gone"));
  const float v[kDim] = {1, 2, 3, 4};
  PointRef p{1, v, {}};
  EXPECT_THAT(c->Upsert({&p, 1}), StatusIs(absl::StatusCode::kNotFound));
  const uint64_t id = 1;
  EXPECT_THAT(c->Delete({&id, 1}).status(), StatusIs(absl::StatusCode::kNotFound));
}

// ---- Typed payload fields ---------------------------------------------------

PayloadFields Shop(const std::string& category, int64_t price) {
  PayloadFields f;
  f["category"] = FieldValue::Of(category);
  f["price"] = FieldValue::Of(price);
  f["tags"] = FieldValue::List({std::string("new"), std::string("sale")});
  f["at"] = FieldValue::Of(GeoPoint{48.85, 2.35});
  return f;
}

// The fields of `id` as Get returns them (with_payload).
PayloadFields FieldsOf(const Collection& c, uint64_t id) {
  std::vector<PointData> got;
  EXPECT_OK(c.Get(std::vector<uint64_t>{id}, false, /*with_payload=*/true, &got));
  return got.size() == 1 ? got[0].fields : PayloadFields{{"<missing>", FieldValue::Null()}};
}

// Typed fields are stored with the point, returned by Get and Search (with
// payloads), replaced by an Upsert, edited by SetPayload / DeletePayload
// without touching the vector, erased by Delete, and survive restart,
// compaction and a snapshot's restore.
TEST_F(CollectionTest, TypedFieldsLiveWithThePointThroughEveryPath) {
  OpenDb();
  constexpr uint32_t kDim = 8;
  auto c = Create("shop", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  const std::vector<float> base = ClusteredVectors(600, kDim, 901);
  std::vector<PayloadFields> fields(600);
  std::vector<PointRef> refs;
  for (uint64_t i = 0; i < 600; ++i) {
    fields[i] = Shop(i % 3 == 0 ? "laptop" : "phone", static_cast<int64_t>(i));
    refs.push_back({i, base.data() + i * kDim, i % 2 == 0 ? "opaque" : "", &fields[i]});
  }
  refs[599].fields = nullptr;  // no fields at all
  ASSERT_OK(c->Upsert(refs));
  EXPECT_EQ(FieldsOf(*c, 3), Shop("laptop", 3));
  EXPECT_TRUE(FieldsOf(*c, 599).empty());
  std::vector<PointData> got;
  ASSERT_OK(c->Get(std::vector<uint64_t>{4}, false, /*with_payload=*/false, &got));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(got[0].fields.empty());  // not asked for
  // Search answers carry them with payloads (exact, then indexed).
  for (bool exact : {true, false}) {
    if (!exact) {
      ASSERT_OK(c->maintenance().StartBuild());
      ASSERT_OK(c->maintenance().WaitForBuild());
    }
    CollectionSearchParams p;
    p.engine.k = 3;
    p.engine.exact = exact;
    p.with_payload = true;
    std::vector<Hit> hits;
    ASSERT_OK(SearchInto(*c, base.data() + 6 * kDim, kDim, p, &hits));
    ASSERT_FALSE(hits.empty());
    EXPECT_EQ(hits[0].id, 6u);
    EXPECT_EQ(hits[0].fields, Shop("laptop", 6));
    EXPECT_EQ(hits[0].payload, "opaque");
    p.with_payload = false;
    ASSERT_OK(SearchInto(*c, base.data() + 6 * kDim, kDim, p, &hits));
    EXPECT_TRUE(hits[0].fields.empty());
  }
  // SetPayload merges (or overwrites); unknown ids are skipped; a change
  // to nothing counts nothing.
  PayloadFields discount;
  discount["price"] = FieldValue::Of(int64_t{1});
  discount["sold"] = FieldValue::Of(true);
  ASSERT_OK_AND_ASSIGN(uint64_t n, c->SetPayload(std::vector<uint64_t>{3, 3, 5, 10000}, discount,
                                                 /*overwrite=*/false));
  EXPECT_EQ(n, 2u);
  PayloadFields want = Shop("laptop", 3);
  want["price"] = FieldValue::Of(int64_t{1});
  want["sold"] = FieldValue::Of(true);
  EXPECT_EQ(FieldsOf(*c, 3), want);
  ASSERT_OK_AND_ASSIGN(n, c->SetPayload(std::vector<uint64_t>{3}, discount, false));
  EXPECT_EQ(n, 0u);
  ASSERT_OK_AND_ASSIGN(n, c->SetPayload(std::vector<uint64_t>{5}, discount, /*overwrite=*/true));
  EXPECT_EQ(n, 1u);
  EXPECT_EQ(FieldsOf(*c, 5), discount);
  PayloadFields bad;
  bad["x"] = FieldValue::Of(std::nan(""));
  EXPECT_THAT(c->SetPayload(std::vector<uint64_t>{5}, bad, false).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("field 'x'")));
  // DeletePayload: named keys, or every field.
  ASSERT_OK_AND_ASSIGN(n, c->DeletePayload(std::vector<uint64_t>{3}, std::vector<std::string>{
                                                                        "sold", "nope"}));
  EXPECT_EQ(n, 1u);
  EXPECT_EQ(FieldsOf(*c, 3).count("sold"), 0u);
  ASSERT_OK_AND_ASSIGN(n, c->DeletePayload(std::vector<uint64_t>{9}, {}));
  EXPECT_EQ(n, 1u);
  EXPECT_TRUE(FieldsOf(*c, 9).empty());
  // The vector did not move: the point still finds itself first.
  {
    CollectionSearchParams p;
    p.engine.k = 1;
    p.engine.exact = true;
    std::vector<Hit> hits;
    ASSERT_OK(SearchInto(*c, base.data() + 3 * kDim, kDim, p, &hits));
    EXPECT_EQ(hits[0].id, 3u);
  }
  // An Upsert replaces the fields (none given: none kept); a Delete erases
  // them, and the id upserted again starts without.
  ASSERT_OK(c->Upsert(std::vector<PointRef>{{12, base.data() + 12 * kDim, "", nullptr}}));
  EXPECT_TRUE(FieldsOf(*c, 12).empty());
  ASSERT_OK(c->Delete(std::vector<uint64_t>{15}).status());
  ASSERT_OK(c->Upsert(std::vector<PointRef>{{15, base.data() + 15 * kDim, "", nullptr}}));
  EXPECT_TRUE(FieldsOf(*c, 15).empty());
  ASSERT_OK(c->Delete(std::vector<uint64_t>{18}).status());
  EXPECT_TRUE(c->SetPayload(std::vector<uint64_t>{18}, discount, false).value() == 0);
  // Restart, compaction, snapshot and restore keep every point's fields.
  const auto expected = [&](uint64_t id) -> PayloadFields {
    if (id == 3) {
      PayloadFields f = Shop("laptop", 3);
      f["price"] = FieldValue::Of(int64_t{1});
      return f;
    }
    if (id == 5) return discount;
    if (id == 9 || id == 12 || id == 15 || id == 599) return {};
    return fields[id];
  };
  const auto check_all = [&](const Collection& col, const char* when) {
    for (uint64_t id = 0; id < 600; ++id) {
      if (id == 18) continue;
      ASSERT_EQ(FieldsOf(col, id), expected(id)) << when << ": point " << id;
    }
  };
  c.reset();
  ReopenDb();
  c = Get("shop");
  ASSERT_NE(c, nullptr);
  check_all(*c, "after reopen");
  ASSERT_OK(c->maintenance().Compact());
  check_all(*c, "after compaction");
  ASSERT_OK_AND_ASSIGN(SnapshotInfo snap, db_->CreateSnapshot("shop"));
  ASSERT_OK_AND_ASSIGN(auto file, db_->SnapshotFile("shop", snap.name));
  ASSERT_OK_AND_ASSIGN(auto restored, db_->RestoreSnapshot(file.first, "shop2", false));
  check_all(*restored, "restored");
  // Fields are per collection: the restored copy changes alone; dropping
  // the original leaves the copy's.
  ASSERT_OK(restored->SetPayload(std::vector<uint64_t>{1}, discount, true).status());
  EXPECT_EQ(FieldsOf(*c, 1), fields[1]);
  c.reset();
  ASSERT_OK(db_->DropCollection("shop"));
  EXPECT_EQ(FieldsOf(*restored, 1), discount);
  EXPECT_EQ(FieldsOf(*restored, 2), fields[2]);
}

TEST_F(CollectionTest, UpsertRefusesBadFieldsWhole) {
  OpenDb();
  auto c = Create("bad", 4, Metric::kL2);
  ASSERT_NE(c, nullptr);
  const float v[4] = {1, 2, 3, 4};
  PayloadFields ok = Shop("x", 1), off;
  off["where"] = FieldValue::Of(GeoPoint{0, 200});
  EXPECT_THAT(c->Upsert(std::vector<PointRef>{{1, v, "", &ok}, {2, v, "", &off}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("point 2 (#1): field 'where': geo point")));
  EXPECT_EQ(c->Info().points, 0u);  // all or nothing
}

// ---- Log position -----------------------------------------------------------

// A cluster replica's applied log position: kept across a restart, carried
// by a snapshot to the collection restored from it, gone with a drop.
TEST_F(CollectionTest, LogPositionSurvivesRestartAndTravelsWithSnapshots) {
  constexpr uint32_t kDim = 8;
  OpenDb();
  auto c = Create("replica", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->log_position(), 0u);
  UpsertRange(*c, 0, 50, ClusteredVectors(50, kDim, 411), nullptr);
  ASSERT_OK(c->SetLogPosition(41));
  EXPECT_EQ(c->log_position(), 41u);
  c.reset();
  ReopenDb();
  c = Get("replica");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->log_position(), 41u);
  ASSERT_OK_AND_ASSIGN(SnapshotInfo info, db_->CreateSnapshot("replica"));
  ASSERT_OK(c->SetLogPosition(99));  // after the snapshot: not in it
  ASSERT_OK_AND_ASSIGN(auto file, db_->SnapshotFile("replica", info.name));
  ASSERT_OK_AND_ASSIGN(auto restored, db_->RestoreSnapshot(file.first, "peer", false));
  EXPECT_EQ(restored->log_position(), 41u);
  EXPECT_EQ(restored->Info().points, 50u);
  restored.reset();
  c.reset();
  ReopenDb();
  EXPECT_EQ(Get("peer")->log_position(), 41u);
  EXPECT_EQ(Get("replica")->log_position(), 99u);
  // A restore over an existing collection takes the archive's position.
  ASSERT_OK_AND_ASSIGN(restored, db_->RestoreSnapshot(file.first, "replica", true));
  EXPECT_EQ(restored->log_position(), 41u);
  restored.reset();
  ASSERT_OK(db_->DropCollection("peer"));
  auto again = Create("peer", kDim, Metric::kL2);
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->log_position(), 0u);
}

// ---- Write faults -----------------------------------------------------------

// Every write path of a collection under injected disk faults (EIO, a full
// disk, a write cut short, failed syncs): each failing call reports the
// right code, the collection keeps serving what was acknowledged, and a
// restart finds exactly that: nothing acknowledged is lost, nothing
// half-written is served.
TEST_F(CollectionTest, WriteFaultsOnEveryPathLoseNothingAcknowledged) {
  using ::zoom::FaultInjectingFileSystem;
  using Op = FaultInjectingFileSystem::Op;
  constexpr uint32_t kDim = 8;
  FaultInjectingFileSystem faulty;
  options_.collection.store.file_system = &faulty;
  options_.snapshots_dir = tmp_.File("snapshots");
  OpenDb();
  auto c = Create("faults", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  Model model;
  UpsertRange(*c, 0, 600, ClusteredVectors(600, kDim, 501), &model);
  const auto fresh = ClusteredVectors(200, kDim, 502);
  auto upsert_some = [&](size_t first, Model* m) {
    std::vector<uint64_t> ids;
    for (size_t i = 0; i < 20; ++i) ids.push_back(ExtId(1000 + first + i));
    return Upsert(*c, ids,
                  std::vector<float>(fresh.begin() + first * kDim,
                                     fresh.begin() + (first + 20) * kDim),
                  {}, m);
  };

  // Upserts: each write and sync of the vector file.
  const std::pair<FaultInjectingFileSystem::Fault, absl::StatusCode> upsert_faults[] = {
      {{Op::kWrite, ".zvec", 0, EIO}, absl::StatusCode::kDataLoss},
      {{Op::kWrite, ".zvec", 0, ENOSPC, /*short_write=*/true},
       absl::StatusCode::kResourceExhausted},
      {{Op::kSync, ".zvec", 0, EIO}, absl::StatusCode::kDataLoss},
      {{Op::kWrite, ".zvec", /*skip=*/1, EIO}, absl::StatusCode::kDataLoss},
      {{Op::kSync, ".zvec", /*skip=*/1, ENOSPC}, absl::StatusCode::kResourceExhausted},
  };
  size_t next = 0;
  for (const auto& [fault, code] : upsert_faults) {
    SCOPED_TRACE(absl::StrCat("op ", static_cast<int>(fault.op), " skip ", fault.skip));
    faulty.Inject(fault);
    EXPECT_THAT(upsert_some(next, nullptr), StatusIs(code, HasSubstr("injected")));
    faulty.Clear();
    EXPECT_EQ(c->Info().points, model.size());
    ASSERT_OK(upsert_some(next, &model));  // the same points, now acknowledged
    next += 20;
  }
  ExpectGetMatchesModel(*c, model);

  // The index snapshot at the end of a build: the build fails, the
  // collection serves (exactly), and the next build succeeds.
  faulty.Inject({Op::kWrite, ".zidx", 0, ENOSPC});
  ASSERT_OK(c->maintenance().StartBuild());
  EXPECT_THAT(c->maintenance().WaitForBuild(), StatusIs(absl::StatusCode::kResourceExhausted));
  faulty.Clear();
  const auto queries = ClusteredVectors(10, kDim, 503);
  ExpectExactSearchesMatchOracle(*c, model, queries, 10);
  ASSERT_OK(c->maintenance().StartBuild());
  ASSERT_OK(c->maintenance().WaitForBuild());

  // Compaction: its new vector file, its index file, and the switch.
  std::vector<uint64_t> del;
  for (size_t i = 0; i < 600; i += 2) del.push_back(ExtId(i));
  ASSERT_OK(Delete(*c, del, &model));
  for (const auto& fault : {FaultInjectingFileSystem::Fault{Op::kWrite, "vectors-", 0, EIO},
                            FaultInjectingFileSystem::Fault{Op::kSync, "vectors-", 1, EIO},
                            FaultInjectingFileSystem::Fault{Op::kWrite, "index-", 0, ENOSPC,
                                                            /*short_write=*/true}}) {
    SCOPED_TRACE(fault.path_contains);
    const uint32_t space = c->core().record_space();
    faulty.Inject(fault);
    EXPECT_FALSE(c->maintenance().Compact().ok());
    faulty.Clear();
    EXPECT_EQ(c->core().record_space(), space);  // still the old segment
    ExpectGetMatchesModel(*c, model);
    EXPECT_GT(IndexedRecall(*c, model, queries, 10), kRecallFloor);
  }

  // A snapshot archive: refused, none listed, no file left behind.
  faulty.Inject({Op::kWrite, ".zsnap", 0, ENOSPC, /*short_write=*/true});
  EXPECT_THAT(db_->CreateSnapshot("faults"), StatusIs(absl::StatusCode::kResourceExhausted));
  faulty.Inject({Op::kRename, ".info", 0, EIO});
  EXPECT_THAT(db_->CreateSnapshot("faults"), StatusIs(absl::StatusCode::kDataLoss));
  faulty.Clear();
  ASSERT_OK_AND_ASSIGN(auto snaps, db_->ListSnapshots("faults"));
  EXPECT_TRUE(snaps.empty());
  size_t files = 0;
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(options_.snapshots_dir, ec)) {
    files += e.is_regular_file();
  }
  EXPECT_EQ(files, 0u);

  // After all of it, and a restart: exactly the acknowledged points.
  ASSERT_OK(c->maintenance().Compact());
  c.reset();
  options_.collection.store.file_system = nullptr;
  ReopenDb();
  c = Get("faults");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->Info().points, model.size());
  ExpectGetMatchesModel(*c, model);
  ExpectExactSearchesMatchOracle(*c, model, queries, 10);
}

}  // namespace
}  // namespace zoom::server
