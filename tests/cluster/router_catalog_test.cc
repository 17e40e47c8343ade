// RouterCore::MapOf's answer for a collection it cannot find: NOT_FOUND when
// the catalog says so (never created, or dropped: a drop leaves a delete
// marker), UNAVAILABLE when a collection the router served vanished from
// the catalog with no drop recorded (NATS lost the bucket: the nodes put
// the map back from their copies; a client must retry, not create it), and
// also when a router that never served it sees a live node holding a
// replica of it (a router restarted after NATS lost the map).
#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/cluster/cluster_map.h"
#include "server/cluster/router/router_core.h"
#include "tests/testing/nats_server.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_env.h"

namespace zoom {
namespace {

using ::testing::HasSubstr;
using ::zoom::testing::NatsServer;
using ::zoom::testing::StatusIs;

TEST(RouterCatalogTest, ALostCollectionIsUnavailableADroppedOneNotFound) {
  if (testing::NatsServerBinary().empty()) GTEST_SKIP() << "nats-server not installed";
  testing::TempDir dir;
  NatsServer nats("solo", dir.File("nats"));
  ASSERT_TRUE(nats.Start()) << nats.Log();
  server::router::RouterOptions o;
  o.catalog.cluster = "rc";
  o.nats.servers = {nats.url()};
  ASSERT_OK_AND_ASSIGN(auto core, server::router::RouterCore::Create(o, {}));
  cluster::ShardMap m;
  m.collection = "docs";
  m.uid = 77;
  m.shards = 1;
  m.replicas = 1;
  m.config.name = "docs";
  m.config.dim = 4;
  m.assignment = {{"n0"}};
  ASSERT_OK(core->catalog().RestoreMap(m));
  ASSERT_OK(core->Refresh());
  ASSERT_OK(core->MapOf("docs").status());
  EXPECT_THAT(core->MapOf("never").status(), StatusIs(absl::StatusCode::kNotFound));

  // NATS loses the shards bucket: the map and any record of it.
  ASSERT_OK(core->js().DeleteStream(absl::StrCat("KV_", cluster::ShardsBucket("rc"))));
  ASSERT_OK(core->catalog().EnsureBuckets());
  ASSERT_OK(core->Refresh());  // the refresh thread's next read
  EXPECT_THAT(core->MapOf("docs").status(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("no drop recorded")));
  EXPECT_THAT(core->MapOf("never").status(), StatusIs(absl::StatusCode::kNotFound));

  // Put back (as a node does), then dropped: NOT_FOUND.
  ASSERT_OK(core->catalog().RestoreMap(m));
  ASSERT_OK(core->MapOf("docs").status());
  ASSERT_OK(core->catalog().DropCollection("docs"));
  ASSERT_OK(core->Refresh());
  EXPECT_THAT(core->MapOf("docs").status(), StatusIs(absl::StatusCode::kNotFound));
}

TEST(RouterCatalogTest, ARouterThatNeverServedALostCollectionAsksItsNodes) {
  if (testing::NatsServerBinary().empty()) GTEST_SKIP() << "nats-server not installed";
  testing::TempDir dir;
  NatsServer nats("solo", dir.File("nats"));
  ASSERT_TRUE(nats.Start()) << nats.Log();
  server::router::RouterOptions o;
  o.catalog.cluster = "rn";
  o.nats.servers = {nats.url()};
  ASSERT_OK_AND_ASSIGN(auto core, server::router::RouterCore::Create(o, {}));
  // A node holds a replica of "docs"; the catalog has no map and no record
  // of it (NATS lost them before this router started).
  cluster::NodeInfo n;
  n.node = "n0";
  n.address = "127.0.0.1:1";
  n.heartbeat_unix_ms = absl::ToUnixMillis(absl::Now());
  cluster::HostedShard h;
  h.collection = "docs";
  h.uid = 77;
  n.hosted.push_back(h);
  ASSERT_OK(core->catalog().PutNode(n));
  ASSERT_OK(core->Refresh());
  EXPECT_THAT(core->MapOf("docs").status(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("no drop recorded")));
  EXPECT_THAT(core->MapOf("never").status(), StatusIs(absl::StatusCode::kNotFound));
}

}  // namespace
}  // namespace zoom
