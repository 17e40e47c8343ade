// Write versions (versioned_apply.h): an entry older than what a point
// holds changes nothing; a delete leaves a tombstone that an older upsert
// does not bring back; an entry applied again at its own version (after a
// crash) is applied; a payload edit of an absent point records nothing;
// version 0 applies as it is; the versions and the log version go with the
// collection's snapshot and are dropped with the collection.
#include "server/cluster/versioned_apply.h"

#include <string>
#include <variant>
#include <vector>

#include "gtest/gtest.h"
#include "server/engine/database.h"
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

  // Payload edits: an older one is ignored; one of an absent point
  // records no version (an older upsert of it may still come).
  ASSERT_OK(ApplyVersioned(SetTag({2}, "old"), 39, c_.get()).status());
  EXPECT_EQ(State(2), "v40");
  ASSERT_OK_AND_ASSIGN(uint64_t changed, ApplyVersioned(SetTag({2, 7}, "new"), 41, c_.get()));
  EXPECT_EQ(changed, 1u);
  EXPECT_EQ(State(2), "v40/new");
  EXPECT_EQ(Version(2), 41u);
  EXPECT_EQ(Version(7), 0u);
  ASSERT_OK(ApplyVersioned(Upsert({2}, "v40"), 40, c_.get()).status());
  EXPECT_EQ(State(2), "v40/new");

  // Version 0: as ApplyLogEntry, no versions read or written.
  ASSERT_OK(ApplyVersioned(Upsert({1}, "plain"), 0, c_.get()).status());
  EXPECT_EQ(State(1), "plain");
  EXPECT_EQ(Version(1), 30u);
}

TEST_F(VersionedApplyTest, SnapshotsCarryTheVersionsAndTheLogVersion) {
  ASSERT_OK(ApplyVersioned(Upsert({1, 2, 3}, "a"), 100, c_.get()).status());
  ASSERT_OK(ApplyVersioned(Delete({2}), 200, c_.get()).status());
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

}  // namespace
}  // namespace zoom::cluster
