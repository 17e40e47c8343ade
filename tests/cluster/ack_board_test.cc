// The router's board of replicas' durable positions (write concerns),
// without NATS: reports recorded by hand, waits bounded by deadlines in the
// past or met by reports made before the wait.
#include "server/cluster/router/ack_board.h"

#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace zoom::server::router {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

cluster::ReplicaAck Ack(const std::string& node, uint64_t durable,
                        std::vector<std::pair<uint64_t, uint64_t>> changed = {}) {
  cluster::ReplicaAck a;
  a.node = node;
  a.uid = 7;
  a.shard = 1;
  a.durable = durable;
  a.changed = std::move(changed);
  return a;
}

TEST(AckBoardTest, AWriteIsAcknowledgedOnceEnoughOfItsReplicasReportedItDurable) {
  AckBoard b;
  const std::vector<std::string> replicas = {"n1", "n2", "n3"};
  const absl::Time past = absl::Now() - absl::Seconds(1);
  EXPECT_THAT(b.Await(7, 1, 10, replicas, 2, past), IsEmpty());
  b.Record(Ack("n2", 12));
  b.Record(Ack("n9", 50));  // not a replica of the shard: never counts
  EXPECT_THAT(b.Await(7, 1, 10, replicas, 2, past), ElementsAre("n2"));
  b.Record(Ack("n3", 10));
  EXPECT_THAT(b.Await(7, 1, 10, replicas, 2, past), ElementsAre("n2", "n3"));
  EXPECT_THAT(b.Await(7, 1, 11, replicas, 2, past), ElementsAre("n2"));
  // Another shard or collection: its own positions.
  EXPECT_THAT(b.Await(7, 2, 10, replicas, 1, past), IsEmpty());
  EXPECT_THAT(b.Await(8, 1, 10, replicas, 1, past), IsEmpty());
  // The latest report counts, not the largest: a replica restored from an
  // older snapshot counts for less.
  b.Record(Ack("n2", 5));
  EXPECT_THAT(b.Await(7, 1, 10, replicas, 1, past), ElementsAre("n3"));
  EXPECT_EQ(b.Position(7, 1, "n2"), 5u);
  EXPECT_EQ(b.Position(7, 1, "n1"), 0u);
}

TEST(AckBoardTest, AWaitEndsWhenTheReportComes) {
  AckBoard b;
  std::vector<std::string> got;
  std::thread waiter([&] {
    got = b.Await(7, 1, 20, {"n1", "n2"}, 2, absl::Now() + absl::Seconds(60));
  });
  b.Record(Ack("n1", 20));
  b.Record(Ack("n2", 21));
  waiter.join();
  EXPECT_THAT(got, ElementsAre("n1", "n2"));
}

TEST(AckBoardTest, CountsAreTheFirstReportsAndBounded) {
  AckBoard b;
  EXPECT_EQ(b.Changed(7, 1, 3), std::nullopt);
  b.Record(Ack("n1", 4, {{3, 2}, {4, 0}}));
  b.Record(Ack("n2", 4, {{3, 9}}));  // a replica applying it again later
  EXPECT_EQ(b.Changed(7, 1, 3), 2u);
  EXPECT_EQ(b.Changed(7, 1, 4), 0u);
  EXPECT_EQ(b.Changed(7, 1, 5), std::nullopt);
  std::vector<std::pair<uint64_t, uint64_t>> many;
  for (uint64_t s = 10; s < 10 + AckBoard::kKeptCounts; ++s) many.emplace_back(s, 1);
  b.Record(Ack("n1", 10 + AckBoard::kKeptCounts, many));
  EXPECT_EQ(b.Changed(7, 1, 3), std::nullopt);  // the oldest went
  EXPECT_EQ(b.Changed(7, 1, 10), 1u);
}

}  // namespace
}  // namespace zoom::server::router
