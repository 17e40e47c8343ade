// Write versions (versioned_apply.h): an entry older than what a point
// holds changes nothing; a delete leaves a tombstone that an older upsert
// does not bring back; an entry applied again at its own version (after a
// crash) is applied; a payload edit of an absent point records nothing;
// version 0 applies as it is; the versions and the log version go with the
// collection's snapshot and are dropped with the collection.
#include "server/cluster/versioned_apply.h"

#include <algorithm>
#include <random>
#include <string>
#include <variant>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

#include "gtest/gtest.h"
#include "server/engine/database.h"
#include "server/engine/field_edits.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_env.h"

namespace zoom::cluster {
namespace {

using server::Collection;
using server::CollectionConfig;
using server::Database;
using server::DatabaseOptions;
using server::FieldValue;
using server::PointData;
using ::zoom::testing::TempDir;

constexpr uint32_t kDim = 2;

LogEntry Upsert(std::vector<uint64_t> ids, const std::string& payload) {
  LogEntry e;
  e.op = LogOp::kUpsert;
  e.dim = kDim;
  for (uint64_t id : ids) {
    e.points.push_back({id, {static_cast<float>(id), 1.0f}, payload, {}});
  }
  return e;
}
LogEntry Delete(std::vector<uint64_t> ids) {
  LogEntry e;
  e.op = LogOp::kDelete;
  e.ids = std::move(ids);
  return e;
}
LogEntry SetTag(std::vector<uint64_t> ids, const std::string& tag) {
  LogEntry e;
  e.op = LogOp::kSetPayload;
  e.ids = std::move(ids);
  e.fields["tag"] = FieldValue::Of(server::FieldScalar(tag));
  return e;
}

class VersionedApplyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DatabaseOptions d;
    d.data_dir = dir_.File("data");
    d.collection.auto_build_min_points = 0;
    ASSERT_OK_AND_ASSIGN(db_, Database::Open(d));
    CollectionConfig cfg;
    cfg.name = "docs";
    cfg.dim = kDim;
    ASSERT_OK_AND_ASSIGN(c_, db_->CreateCollection(cfg));
  }
  // The payload of point `id` ("absent" when it does not exist), and its
  // "tag" field if any after a '/'.
  std::string State(uint64_t id) {
    std::vector<PointData> got;
    EXPECT_OK(c_->Get({id}, false, true, &got));
    if (got.empty()) return "absent";
    auto tag = got[0].fields.find("tag");
    return tag == got[0].fields.end()
               ? got[0].payload
               : got[0].payload + "/" + std::get<std::string>(tag->second.values[0]);
  }
  uint64_t Version(uint64_t id) {
    auto v = WriteVersionsOf(*c_, {id});
    EXPECT_OK(v.status());
    return v.ok() ? (*v)[0] : 0;
  }

  TempDir dir_;
  std::unique_ptr<Database> db_;
  std::shared_ptr<Collection> c_;
};

TEST_F(VersionedApplyTest, OlderEntriesChangeNothingNewerOnesWrote) {
  ASSERT_OK(ApplyVersioned(Upsert({1, 2}, "v10"), 10, c_.get()).status());
  EXPECT_EQ(Version(1), 10u);
  // An older upsert of 1 and 3 (a copy a repair published again): 3 is
  // written, 1 keeps what version 10 wrote.
  ASSERT_OK_AND_ASSIGN(uint64_t taken, ApplyVersioned(Upsert({1, 3}, "v5"), 5, c_.get()));
  EXPECT_EQ(taken, 1u);
  EXPECT_EQ(State(1), "v10");
  EXPECT_EQ(State(3), "v5");
  EXPECT_EQ(Version(3), 5u);
  // The same entry again at its own version (a crash before the position
  // moved on): applied.
  ASSERT_OK(ApplyVersioned(Upsert({1}, "v10"), 10, c_.get()).status());
  EXPECT_EQ(State(1), "v10");
  ASSERT_OK(ApplyVersioned(Upsert({1}, "v20"), 20, c_.get()).status());
  EXPECT_EQ(State(1), "v20");

  // A delete leaves a tombstone: an older upsert does not bring the point
  // back, an older delete does not remove a newer upsert.
  ASSERT_OK_AND_ASSIGN(uint64_t deleted, ApplyVersioned(Delete({1, 9}), 30, c_.get()));
  EXPECT_EQ(deleted, 1u);
  EXPECT_EQ(Version(1), 30u);
  EXPECT_EQ(Version(9), 30u);  // absent, yet its tombstone is kept
  ASSERT_OK(ApplyVersioned(Upsert({1, 9}, "v25"), 25, c_.get()).status());
  EXPECT_EQ(State(1), "absent");
  EXPECT_EQ(State(9), "absent");
  ASSERT_OK(ApplyVersioned(Upsert({2}, "v40"), 40, c_.get()).status());
  ASSERT_OK_AND_ASSIGN(deleted, ApplyVersioned(Delete({2}), 35, c_.get()));
  EXPECT_EQ(deleted, 0u);
  EXPECT_EQ(State(2), "v40");

  // Payload edits: one older than the point's full write is ignored; a
  // newer one is kept as a field edit (the point's version stays its full
  // write's), also for an absent point (an older upsert of it may still
  // come, and takes it).
  ASSERT_OK(ApplyVersioned(SetTag({2}, "old"), 39, c_.get()).status());
  EXPECT_EQ(State(2), "v40");
  ASSERT_OK_AND_ASSIGN(uint64_t changed, ApplyVersioned(SetTag({2, 7}, "new"), 41, c_.get()));
  EXPECT_EQ(changed, 1u);
  EXPECT_EQ(State(2), "v40/new");
  EXPECT_EQ(Version(2), 40u);
  EXPECT_EQ(Version(7), 0u);
  ASSERT_OK(ApplyVersioned(Upsert({2}, "v40"), 40, c_.get()).status());
  EXPECT_EQ(State(2), "v40/new");
  ASSERT_OK(ApplyVersioned(Upsert({7}, "v38"), 38, c_.get()).status());
  EXPECT_EQ(State(7), "v38/new");
  // An upsert newer than the edit replaces it.
  ASSERT_OK(ApplyVersioned(Upsert({7}, "v50"), 50, c_.get()).status());
  EXPECT_EQ(State(7), "v50");

  // Version 0: as ApplyLogEntry, no versions read or written.
  ASSERT_OK(ApplyVersioned(Upsert({1}, "plain"), 0, c_.get()).status());
  EXPECT_EQ(State(1), "plain");
  EXPECT_EQ(Version(1), 30u);
}

TEST_F(VersionedApplyTest, SnapshotsCarryTheVersionsAndTheLogVersion) {
  ASSERT_OK(ApplyVersioned(Upsert({1, 2, 3}, "a"), 100, c_.get()).status());
  ASSERT_OK(ApplyVersioned(Delete({2}), 200, c_.get()).status());
  // Field edits: of a point, and of one absent here (9).
  ASSERT_OK(ApplyVersioned(SetTag({3, 9}, "t"), 300, c_.get()).status());
  ASSERT_OK(c_->SetLogPosition(7, 200));
  EXPECT_EQ(c_->log_version(), 200u);
  ASSERT_OK_AND_ASSIGN(server::SnapshotInfo snap, db_->CreateSnapshot("docs"));
  ASSERT_OK_AND_ASSIGN(auto file, db_->SnapshotFile("docs", snap.name));
  ASSERT_OK_AND_ASSIGN(auto restored, db_->RestoreSnapshot(file.first, "copy", false));
  EXPECT_EQ(restored->log_position(), 7u);
  EXPECT_EQ(restored->log_version(), 200u);
  ASSERT_OK_AND_ASSIGN(std::vector<uint64_t> v, WriteVersionsOf(*restored, {1, 2, 3, 4}));
  EXPECT_EQ(v, (std::vector<uint64_t>{100, 200, 100, 0}));
  // The tombstone works in the copy.
  ASSERT_OK(ApplyVersioned(Upsert({2}, "old"), 150, restored.get()).status());
  std::vector<PointData> got;
  ASSERT_OK(restored->Get({2}, false, false, &got));
  EXPECT_TRUE(got.empty());
  // So do the field edits: an older upsert of 3 keeps its tag, and one of
  // 9 takes the tag it was given while absent.
  ASSERT_OK(ApplyVersioned(Upsert({3, 9}, "late"), 250, restored.get()).status());
  ASSERT_OK(restored->Get({3, 9}, false, true, &got));
  ASSERT_EQ(got.size(), 2u);
  for (const PointData& p : got) {
    EXPECT_EQ(p.payload, "late");
    ASSERT_TRUE(p.fields.contains("tag")) << p.id;
    EXPECT_EQ(std::get<std::string>(p.fields.at("tag").values[0]), "t");
  }

  // Reopened: the log version is read back with the position.
  restored.reset();
  c_.reset();
  db_.reset();
  DatabaseOptions d;
  d.data_dir = dir_.File("data");
  d.collection.auto_build_min_points = 0;
  ASSERT_OK_AND_ASSIGN(db_, Database::Open(d));
  ASSERT_OK_AND_ASSIGN(auto copy, db_->GetCollection("copy"));
  EXPECT_EQ(copy->log_version(), 200u);
  EXPECT_EQ(copy->log_position(), 7u);

  // Dropped with the collection: a new one of the same name starts with none.
  ASSERT_OK(db_->DropCollection("copy"));
  CollectionConfig cfg;
  cfg.name = "copy";
  cfg.dim = kDim;
  ASSERT_OK_AND_ASSIGN(auto fresh, db_->CreateCollection(cfg));
  ASSERT_OK_AND_ASSIGN(v, WriteVersionsOf(*fresh, {1, 2, 3}));
  EXPECT_EQ(v, (std::vector<uint64_t>{0, 0, 0}));
  EXPECT_EQ(fresh->log_version(), 0u);
}

// Random writes to a few points (upserts with fields, deletes, payload
// edits: merges, overwrites, removals, removal of every field), each at
// its own version: applied in any order, with repeats (a crash applying
// an entry again), every replica holds what applying them in version
// order holds. So does a replica that applied only some of them and then
// the whole state another published (a log repair's whole-state copy).
TEST_F(VersionedApplyTest, AnyOrderOfTheSameWritesGivesTheSamePoints) {
  auto state = [](Collection& c) {
    std::vector<PointData> got;
    EXPECT_OK(c.Get({1, 2, 3, 4}, true, true, &got));
    std::string out;
    for (const PointData& p : got) {
      absl::StrAppend(&out, p.id, ":", p.vector.empty() ? -1.0f : p.vector[0], ":", p.payload,
                      ":", absl::BytesToHexString(server::EncodeFields(p.fields)), ";");
    }
    return out;
  };
  auto scalar = [](int64_t v) { return FieldValue::Of(server::FieldScalar(v)); };
  int made = 0;
  for (int trial = 0; trial < 60; ++trial) {
    std::mt19937_64 rng(trial);
    std::vector<std::pair<uint64_t, LogEntry>> ops;  // (version, entry)
    const int n = 4 + static_cast<int>(rng() % 10);
    for (int i = 0; i < n; ++i) {
      const uint64_t version = 100 + 10 * i;
      std::vector<uint64_t> ids = {1 + rng() % 4};
      if (rng() % 3 == 0) ids.push_back(1 + (ids[0] % 4));
      LogEntry e;
      const std::string k = std::string(1, static_cast<char>('a' + rng() % 3));
      switch (rng() % 6) {
        case 0:
        case 1:
          e = Upsert(ids, absl::StrCat("u", version));
          for (LogPoint& p : e.points) {
            p.vector[0] = static_cast<float>(version);
            if (rng() % 2) p.fields[k] = scalar(static_cast<int64_t>(version));
          }
          break;
        case 2:
          e = Delete(ids);
          break;
        case 3:
          e.op = LogOp::kSetPayload;
          e.ids = ids;
          e.fields[k] = scalar(static_cast<int64_t>(version));
          e.overwrite = rng() % 3 == 0;
          break;
        default:
          e.op = LogOp::kDeletePayload;
          e.ids = ids;
          if (rng() % 3 != 0) e.keys.push_back(k);
          break;
      }
      ops.push_back({version, e});
    }
    auto fresh = [&](const std::string& prefix) {
      CollectionConfig cfg;
      cfg.name = absl::StrCat(prefix, ++made);
      cfg.dim = kDim;
      auto c = db_->CreateCollection(cfg);
      EXPECT_OK(c.status());
      return *c;
    };
    std::shared_ptr<Collection> in_order = fresh("x");
    for (const auto& [v, e] : ops) ASSERT_OK(ApplyVersioned(e, v, in_order.get()).status());
    const std::string want = state(*in_order);
    for (int shuffle = 0; shuffle < 6; ++shuffle) {
      std::vector<std::pair<uint64_t, LogEntry>> order = ops;
      for (size_t i = 0; i < ops.size(); ++i) {
        if (rng() % 4 == 0) order.push_back(ops[i]);  // applied again
      }
      std::shuffle(order.begin(), order.end(), rng);
      std::shared_ptr<Collection> other = fresh("y");
      for (const auto& [v, e] : order) ASSERT_OK(ApplyVersioned(e, v, other.get()).status());
      ASSERT_EQ(state(*other), want) << "trial " << trial << " shuffle " << shuffle;

      // A replica with only some of the writes, then this one's whole state.
      std::shared_ptr<Collection> partial = fresh("z");
      for (size_t i = 0; i < order.size(); ++i) {
        if (rng() % 2 == 0) {
          ASSERT_OK(ApplyVersioned(order[i].second, order[i].first, partial.get()).status());
        }
      }
      ASSERT_OK_AND_ASSIGN(std::vector<std::string> whole, WholeStateEntries(*other));
      for (const std::string& bytes : whole) {
        ASSERT_OK_AND_ASSIGN(LogEntry e, DecodeLogEntry(bytes));
        ASSERT_NE(e.version, 0u);
        ASSERT_OK(ApplyVersioned(e, e.version, partial.get()).status());
      }
      ASSERT_EQ(state(*partial), want) << "trial " << trial << " shuffle " << shuffle;
      ASSERT_OK(db_->DropCollection(other->config().name));
      ASSERT_OK(db_->DropCollection(partial->config().name));
    }
    ASSERT_OK(db_->DropCollection(in_order->config().name));
  }
}

// The edits' encoding, version 1, as field_edits.h lays it out (the bytes
// written here by hand from the layout, not by the encoder).
TEST(FieldEditsTest, GoldenVersion1) {
  server::FieldEdits e;
  e.reset = 0x10;
  e.keys["a"] = {0x20, std::nullopt};
  e.keys["b"] = {0x30, FieldValue::Of(server::FieldScalar(int64_t{7}))};
  const std::string golden = absl::HexStringToBytes(
      "5a4501"                  // "ZE", version 1
      "1000000000000000"        // reset
      "02000000"                // 2 names
      "0100" "61" "2000000000000000" "00"   // "a" at 0x20, removed
      "0100" "62" "3000000000000000" "01"   // "b" at 0x30, set
      "14000000"                // the set values: 20 bytes of EncodeFields
      "5a4601" "01000000" "0100" "62" "01" "02" "0700000000000000");
  EXPECT_EQ(absl::BytesToHexString(server::EncodeFieldEdits(e)),
            absl::BytesToHexString(golden));
  ASSERT_OK_AND_ASSIGN(server::FieldEdits back, server::DecodeFieldEdits(golden));
  EXPECT_EQ(back, e);
  EXPECT_EQ(server::EncodeFieldEdits({}), "");
  // Damage is DataLoss, never a crash: every cut, a wrong version.
  for (size_t n = 1; n < golden.size(); ++n) {
    EXPECT_EQ(server::DecodeFieldEdits(golden.substr(0, n)).status().code(),
              absl::StatusCode::kDataLoss) << n;
  }
  std::string v2 = golden;
  v2[2] = 2;
  EXPECT_EQ(server::DecodeFieldEdits(v2).status().code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace zoom::cluster
