// The router's board of the entries replicas made durable (write
// concerns), and when a concern's wait ends, without NATS: reports recorded by hand, waits bounded by
// deadlines in the past or met by reports made before the wait.
#include "server/cluster/router/ack_board.h"

#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/cluster/router/write_publisher.h"

namespace zoom::server::router {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

cluster::ReplicaAck Ack(const std::string& node, uint64_t durable,
                        std::vector<cluster::AppliedEntry> applied = {}) {
  cluster::ReplicaAck a;
  a.node = node;
  a.uid = 7;
  a.shard = 1;
  a.durable = durable;
  a.applied = std::move(applied);
  return a;
}

const absl::Time kPast = absl::InfinitePast();

TEST(AckBoardTest, AWriteIsAcknowledgedByTheReplicasThatReportedItsOwnEntry) {
  AckBoard b;
  const std::vector<std::string> replicas = {"n1", "n2", "n3"};
  EXPECT_THAT(b.Await(7, 1, 10, "w10", replicas, 2, kPast), IsEmpty());
  b.Record(Ack("n2", 12, {{10, "w10", std::nullopt}, {12, "w12", std::nullopt}}));
  b.Record(Ack("n9", 50, {{10, "w10", std::nullopt}}));  // not a replica of the shard
  EXPECT_THAT(b.Await(7, 1, 10, "w10", replicas, 2, kPast), ElementsAre("n2"));
  b.Record(Ack("n3", 10, {{10, "w10", std::nullopt}}));
  EXPECT_THAT(b.Await(7, 1, 10, "w10", replicas, 2, kPast), ElementsAre("n2", "n3"));
  EXPECT_THAT(b.Await(7, 1, 12, "w12", replicas, 2, kPast), ElementsAre("n2"));
  // A position alone acknowledges nothing: n1 is past 10 but never
  // reported entry 10 (its idle notices carry no entries).
  b.Record(Ack("n1", 40));
  EXPECT_EQ(b.Position(7, 1, "n1"), 40u);
  EXPECT_THAT(b.Await(7, 1, 10, "w10", replicas, 3, kPast), ElementsAre("n2", "n3"));
  // Another shard or collection: its own entries.
  EXPECT_THAT(b.Await(7, 2, 10, "w10", replicas, 1, kPast), IsEmpty());
  EXPECT_THAT(b.Await(8, 1, 10, "w10", replicas, 1, kPast), IsEmpty());
  EXPECT_EQ(b.divergences(), 0u);
}

// A log that lost its tail gives its sequences to new entries: a replica
// that applied the old entry at 20 never acknowledges the new one, and the
// divergence is counted.
TEST(AckBoardTest, AnotherEntryAtTheSameSequenceNeverAcknowledges) {
  AckBoard b;
  const std::vector<std::string> replicas = {"n1", "n2", "n3"};
  b.Record(Ack("n1", 20, {{20, "old", std::nullopt}}));
  b.Record(Ack("n2", 20, {{20, "old", std::nullopt}}));
  b.Record(Ack("n3", 20, {{20, "new", std::nullopt}}));
  EXPECT_THAT(b.Await(7, 1, 20, "new", replicas, 2, kPast), ElementsAre("n3"));
  EXPECT_THAT(b.Await(7, 1, 20, "old", replicas, 2, kPast), ElementsAre("n1", "n2"));
  EXPECT_EQ(b.divergences(), 1u);
}

TEST(AckBoardTest, AWaitEndsWhenTheReportComes) {
  AckBoard b;
  std::vector<std::string> got;
  std::thread waiter([&] {
    got = b.Await(7, 1, 20, "w", {"n1", "n2"}, 2, absl::Now() + absl::Seconds(60));
  });
  b.Record(Ack("n1", 20, {{20, "w", std::nullopt}}));
  b.Record(Ack("n2", 21, {{20, "w", std::nullopt}, {21, "x", std::nullopt}}));
  waiter.join();
  EXPECT_THAT(got, ElementsAre("n1", "n2"));
}

TEST(AckBoardTest, CountsAreTheFirstReportsAndBounded) {
  AckBoard b;
  EXPECT_EQ(b.Changed(7, 1, 3, "d"), std::nullopt);
  b.Record(Ack("n1", 4, {{3, "d", 2}, {4, "e", 0}}));
  b.Record(Ack("n2", 4, {{3, "d", 9}}));  // a replica applying it again later
  EXPECT_EQ(b.Changed(7, 1, 3, "d"), 2u);
  EXPECT_EQ(b.Changed(7, 1, 3, "other"), std::nullopt);
  EXPECT_EQ(b.Changed(7, 1, 4, "e"), 0u);
  EXPECT_EQ(b.Changed(7, 1, 5, "f"), std::nullopt);
  std::vector<cluster::AppliedEntry> many;
  for (uint64_t s = 10; s < 10 + AckBoard::kKeptEntries; ++s) many.push_back({s, "m", 1});
  b.Record(Ack("n1", 10 + AckBoard::kKeptEntries, many));
  EXPECT_EQ(b.Changed(7, 1, 3, "d"), std::nullopt);  // the oldest went
  EXPECT_EQ(b.Changed(7, 1, 10, "m"), 1u);
}

// A replica that began as a copy of n0's snapshot at position 7 has what
// n0 reported up to 7 (not after, and not where the board saw two entries
// at one sequence: the copy may hold either); once it reports without a
// base (restarted, or rewound by a repair) it has only its own.
TEST(AckBoardTest, ACopyOfAPeersSnapshotHasWhatThePeerReportedUpToItsPosition) {
  AckBoard b;
  b.Record(Ack("n0", 8, {{5, "a", std::nullopt}, {7, "b", std::nullopt},
                         {8, "c", std::nullopt}}));
  cluster::ReplicaAck copy = Ack("n1", 8, {{8, "c", std::nullopt}});
  copy.base_node = "n0";
  copy.base = 7;
  b.Record(copy);
  const absl::Time past = absl::InfinitePast();
  EXPECT_THAT(b.Await(7, 1, 5, "a", {"n0", "n1"}, 2, past), ElementsAre("n0", "n1"));
  EXPECT_THAT(b.Await(7, 1, 7, "b", {"n0", "n1"}, 2, past), ElementsAre("n0", "n1"));
  EXPECT_THAT(b.Await(7, 1, 8, "c", {"n0", "n1"}, 2, past), ElementsAre("n0", "n1"));
  EXPECT_THAT(b.Await(7, 1, 7, "other", {"n0", "n1"}, 1, past), ElementsAre());
  // n2 reports another entry at 5: n1's copy may hold either.
  b.Record(Ack("n2", 5, {{5, "z", std::nullopt}}));
  EXPECT_THAT(b.Await(7, 1, 5, "a", {"n0", "n1"}, 2, past), ElementsAre("n0"));
  // Without a base n1 has only what it reported itself.
  b.Record(Ack("n1", 8, {}));
  EXPECT_THAT(b.Await(7, 1, 7, "b", {"n0", "n1"}, 2, past), ElementsAre("n0"));
  EXPECT_THAT(b.Await(7, 1, 8, "c", {"n0", "n1"}, 2, past), ElementsAre("n0", "n1"));
}

// Replicas repeat what they reported (a notice can be lost): a repeat is
// the same entry, never a divergence.
TEST(AckBoardTest, ARepeatedReportIsNoDivergence) {
  AckBoard b;
  b.Record(Ack("n1", 20, {{20, "w", std::nullopt}}));
  b.Record(Ack("n1", 21, {{20, "w", std::nullopt}, {21, "x", std::nullopt}}));
  b.Record(Ack("n2", 21, {{20, "w", std::nullopt}, {21, "x", std::nullopt}}));
  EXPECT_EQ(b.divergences(), 0u);
  EXPECT_THAT(b.Await(7, 1, 20, "w", {"n1", "n2"}, 2, absl::InfinitePast()),
              ElementsAre("n1", "n2"));
}

// A write concern stops waiting before the client's deadline, so that the
// client gets the router's answer (naming the replicas), not its own.
TEST(ConcernWaitUntilTest, ATenthOfWhatIsLeftAtMostHalfASecond) {
  const absl::Time now = absl::FromUnixSeconds(1000);
  EXPECT_EQ(ConcernWaitUntil(now, now + absl::Seconds(60)),
            now + absl::Seconds(60) - kConcernAnswerMargin);
  EXPECT_EQ(ConcernWaitUntil(now, now + absl::Seconds(3)), now + absl::Milliseconds(2700));
  EXPECT_EQ(ConcernWaitUntil(now, now - absl::Seconds(1)), now - absl::Seconds(1));
  EXPECT_EQ(ConcernWaitUntil(now, now), now);
}

}  // namespace
}  // namespace zoom::server::router
