// A closing collection (the server stops, or it is dropped) stops its
// background work at once (trust, case 6: SIGTERM 0.2-0.5 s into a build
// did not exit within 30 s). Deterministic parts only: what may not start
// once it closes, and the states a build racing the close may end in (the
// index-level cancellation points are tested in tests/index).
#include <cstdint>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/engine/collection.h"
#include "server/engine/database.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_env.h"

namespace zoom::server {
namespace {

using ::testing::HasSubstr;
using ::zoom::testing::StatusIs;
using ::zoom::testing::TempDir;

std::shared_ptr<Collection> Filled(Database* db, const std::string& name, size_t n) {
  CollectionConfig config;
  config.name = name;
  config.dim = 16;
  config.index.kind = index::IndexKind::kHnswPq;
  auto c = db->CreateCollection(config);
  EXPECT_TRUE(c.ok()) << c.status();
  std::mt19937 rng(7);
  std::normal_distribution<float> g(0, 1);
  std::vector<float> x(n * 16);
  for (float& v : x) v = g(rng);
  std::vector<PointRef> refs;
  for (size_t i = 0; i < n; ++i) refs.push_back({i, x.data() + i * 16, "", nullptr});
  EXPECT_OK((*c)->Upsert(refs));
  return *c;
}

DatabaseOptions Options(const TempDir& tmp) {
  DatabaseOptions options;
  options.data_dir = tmp.File("data");
  options.collection.auto_build_min_points = 0;
  options.collection.build_threads = 1;
  options.collection.calibration_queries = 0;
  return options;
}

TEST(StopBackgroundWorkTest, NothingStartsOnceTheServerStops) {
  TempDir tmp;
  ASSERT_OK_AND_ASSIGN(auto db, Database::Open(Options(tmp)));
  auto c = Filled(db.get(), "c", 1000);
  db->StopBackgroundWork();
  EXPECT_THAT(c->maintenance().StartBuild(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("closing")));
  EXPECT_THAT(c->maintenance().StartOrJoinBuild(), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(c->maintenance().Compact(), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(c->Info().index_state, IndexState::kNone);
  // Searches still answer (exactly: no index) while requests drain.
  std::vector<float> q(16, 0.1f);
  CollectionSearchParams p;
  p.engine.k = 5;
  QueryResult r;
  ASSERT_OK(c->Search(q, p, &r));
  EXPECT_EQ(r.hits.size(), 5u);
}

// A build racing the close ends finished (OK, ready) or stopped
// (Unavailable, the state it had: none), never failed; the database then
// closes and reopens with every point.
TEST(StopBackgroundWorkTest, ABuildStoppedByTheCloseIsNotAFailure) {
  TempDir tmp;
  {
    ASSERT_OK_AND_ASSIGN(auto db, Database::Open(Options(tmp)));
    auto c = Filled(db.get(), "c", 20000);
    ASSERT_OK(c->maintenance().StartBuild());
    db->StopBackgroundWork();
    const absl::Status st = c->maintenance().WaitForBuild();
    if (st.ok()) {
      EXPECT_EQ(c->Info().index_state, IndexState::kReady);
    } else {
      EXPECT_THAT(st, StatusIs(absl::StatusCode::kUnavailable, HasSubstr("automatic builds")));
      EXPECT_EQ(c->Info().index_state, IndexState::kNone);
    }
  }
  ASSERT_OK_AND_ASSIGN(auto db, Database::Open(Options(tmp)));
  ASSERT_OK_AND_ASSIGN(auto c, db->GetCollection("c"));
  EXPECT_EQ(c->Info().points, 20000u);
}

}  // namespace
}  // namespace zoom::server
