// An index build's install never holds the writers for long (issue 48: a
// 3.2M-point retrain's install stalled an import for three minutes). The
// build adds the points stored meanwhile and writes its index file outside
// the writers' lock: a write made while the file's write is held open (a
// gate, not a timing) completes, and every point, from before, during and
// after, is in the installed index and survives a restart.
#include "tests/server/collection_test_util.h"

#include <chrono>
#include <future>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/engine/collection.h"
#include "tests/testing/fault_injecting_file_system.h"
#include "tests/testing/status_matchers.h"

namespace zoom::server {
namespace {

using namespace collection_testing;  // NOLINT(build/namespaces)

TEST_F(CollectionTest, WritesGoOnWhileABuildWritesItsIndexFile) {
  constexpr uint32_t kDim = 16;
  FaultInjectingFileSystem gate;
  options_.collection.store.file_system = &gate;
  OpenDb();
  auto c = Create("install", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  Model model;
  UpsertRange(*c, 0, 1000, ClusteredVectors(1000, kDim, 181), &model);
  gate.HoldOpens(".zidx");
  ASSERT_OK(c->maintenance().StartBuild());
  // The build is at its index file (trained, caught up): writes go on.
  ASSERT_TRUE(gate.AwaitHeld(absl::Seconds(120))) << "the build never wrote its index file";
  const auto during = ClusteredVectors(300, kDim, 182);
  std::future<void> writes = std::async(std::launch::async, [&] {
    UpsertRange(*c, 1000, 300, during, &model, 50);
  });
  const bool done = writes.wait_for(std::chrono::seconds(120)) == std::future_status::ready;
  gate.ReleaseAll();  // (also when the writes waited: the build lets them go)
  writes.wait();
  EXPECT_TRUE(done) << "a write waited for the build's index file";
  ASSERT_OK(c->maintenance().WaitForBuild());
  const CollectionInfo info = c->Info();
  EXPECT_EQ(info.index_state, IndexState::kReady);
  EXPECT_EQ(info.stored_records, 1300u);
  EXPECT_EQ(info.indexed_points, info.stored_records);  // the last ones under the lock
  const auto found = [&](Collection& coll) {
    size_t n = 0;
    for (size_t i = 0; i < 300; ++i) {
      bool exact_used = true;
      for (const auto& h : Search(coll, during.data() + i * kDim, 10, false, &exact_used)) {
        n += h.id == ExtId(1000 + i);
      }
      EXPECT_FALSE(exact_used);
    }
    return n;
  };
  EXPECT_GE(found(*c), 285u);
  // The file holds the points it was written with; a restart adds the rest.
  c.reset();
  ReopenDb();
  auto again = Get("install");
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->Info().index_state, IndexState::kReady);
  EXPECT_EQ(again->Info().indexed_points, 1300u);
  EXPECT_GE(found(*again), 285u);
  options_.collection.store.file_system = nullptr;
}

}  // namespace
}  // namespace zoom::server
