// The cluster's JetStream layer against real nats-server processes (started
// by the test on reserved loopback ports): streams with a subject per shard,
// publish acknowledgements and deduplication, pull consumers from a
// sequence, key-value buckets with compare-and-set and expiry, and what a
// caller sees when servers die (one of three: writes go on; two: writes
// fail Unavailable, fast).
#include "server/cluster/jetstream.h"

#include <signal.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/nats_server.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_env.h"

namespace zoom::cluster {
namespace {

using ::testing::HasSubstr;
using ::zoom::testing::IsOkAndHolds;
using ::zoom::testing::NatsCluster;
using ::zoom::testing::NatsServer;
using ::zoom::testing::StatusIs;
using ::zoom::testing::TempDir;

std::unique_ptr<JetStream> MustConnect(const std::vector<std::string>& urls) {
  JetStreamOptions o;
  o.servers = urls;
  o.name = "jetstream_test";
  auto js = JetStream::Connect(o);
  EXPECT_TRUE(js.ok()) << js.status();
  return js.ok() ? std::move(*js) : nullptr;
}

// Retries `fn` (a JetStream call returning a Status) until OK or `timeout`:
// a cluster elects its meta leader and stream leaders after it listens.
template <typename Fn>
absl::Status Eventually(Fn fn, absl::Duration timeout = absl::Seconds(60)) {
  const absl::Time end = absl::Now() + timeout;
  absl::Status s;
  while (absl::Now() < end) {
    s = fn();
    if (s.ok()) return s;
    absl::SleepFor(absl::Milliseconds(100));
  }
  return s;
}

class JetStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (testing::NatsServerBinary().empty()) GTEST_SKIP() << "nats-server not installed";
    server_ = std::make_unique<NatsServer>("solo", dir_.File("nats"));
    ASSERT_TRUE(server_->Start()) << server_->Log();
    js_ = MustConnect({server_->url()});
    ASSERT_NE(js_, nullptr);
  }
  TempDir dir_;
  std::unique_ptr<NatsServer> server_;
  std::unique_ptr<JetStream> js_;
};

TEST_F(JetStreamTest, StreamPerCollectionSubjectPerShard) {
  StreamSpec spec{"c_docs", {"zoomd.docs.0", "zoomd.docs.1"}};
  ASSERT_OK(js_->EnsureStream(spec));
  ASSERT_OK(js_->EnsureStream(spec));  // idempotent
  StreamSpec other = spec;
  other.subjects = {"zoomd.docs.0", "zoomd.docs.1", "zoomd.docs.2"};
  EXPECT_THAT(js_->EnsureStream(other), StatusIs(absl::StatusCode::kFailedPrecondition,
                                                 HasSubstr("zoomd.docs.2")));

  // Interleaved publishes: sequences are the stream's, increasing.
  std::vector<uint64_t> seq0, seq1;
  for (int i = 0; i < 10; ++i) {
    const std::string subject = absl::StrCat("zoomd.docs.", i % 2);
    ASSERT_OK_AND_ASSIGN(PubAck ack, js_->Publish(subject, absl::StrCat("m", i)));
    EXPECT_FALSE(ack.duplicate);
    (i % 2 == 0 ? seq0 : seq1).push_back(ack.sequence);
  }
  EXPECT_EQ(seq0.front(), 1u);
  EXPECT_EQ(seq1.back(), 10u);
  ASSERT_OK_AND_ASSIGN(StreamState state, js_->GetStreamState("c_docs"));
  EXPECT_EQ(state.messages, 10u);
  EXPECT_EQ(state.last_sequence, 10u);
  EXPECT_THAT(js_->LastSequence("c_docs", "zoomd.docs.0"), IsOkAndHolds(seq0.back()));

  // A retried publish (same message id) is stored once.
  ASSERT_OK_AND_ASSIGN(PubAck first, js_->Publish("zoomd.docs.1", "x", "write-42"));
  ASSERT_OK_AND_ASSIGN(PubAck again, js_->Publish("zoomd.docs.1", "x", "write-42"));
  EXPECT_TRUE(again.duplicate);
  EXPECT_EQ(again.sequence, first.sequence);

  // Shard 1's consumer sees shard 1's messages only, in order, from where
  // it is told to start.
  ASSERT_OK_AND_ASSIGN(auto c, js_->Consume("c_docs", "zoomd.docs.1", "node_a_docs_1", 1));
  std::vector<LogMessage> got;
  const absl::Time end = absl::Now() + absl::Seconds(10);
  while (got.size() < 6 && absl::Now() < end) {
    ASSERT_OK_AND_ASSIGN(auto batch, c->Fetch(4, absl::Seconds(1)));
    for (auto& m : batch) got.push_back(std::move(m));
  }
  ASSERT_EQ(got.size(), 6u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(got[i].sequence, seq1[i]);
    EXPECT_EQ(got[i].data, absl::StrCat("m", 2 * i + 1));
    EXPECT_EQ(got[i].subject, "zoomd.docs.1");
  }
  EXPECT_EQ(got[5].sequence, first.sequence);
  EXPECT_EQ(got[5].pending, 0u);
  ASSERT_OK(c->AckThrough(got.back().sequence));
  ASSERT_OK_AND_ASSIGN(auto none, c->Fetch(4, absl::Milliseconds(50)));
  EXPECT_TRUE(none.empty());
  EXPECT_THAT(c->Pending(), IsOkAndHolds(0u));

  // Replaced from a later sequence (a replica restarting from its applied
  // sequence + 1): only what follows.
  c.reset();
  ASSERT_OK_AND_ASSIGN(c, js_->Consume("c_docs", "zoomd.docs.1", "node_a_docs_1", seq1[3] + 1));
  EXPECT_THAT(c->Pending(), IsOkAndHolds(2u));
  ASSERT_OK_AND_ASSIGN(auto rest, c->Fetch(10, absl::Seconds(5)));
  ASSERT_FALSE(rest.empty());
  EXPECT_EQ(rest.front().sequence, seq1[4]);

  // Purge below a sequence: the messages before it are gone for a new
  // consumer.
  ASSERT_OK(js_->PurgeBefore("c_docs", "zoomd.docs.0", seq0[3]));
  ASSERT_OK_AND_ASSIGN(auto c0, js_->Consume("c_docs", "zoomd.docs.0", "node_b_docs_0", 1));
  ASSERT_OK_AND_ASSIGN(auto after, c0->Fetch(10, absl::Seconds(5)));
  ASSERT_FALSE(after.empty());
  EXPECT_EQ(after.front().sequence, seq0[3]);

  ASSERT_OK(js_->DeleteStream("c_docs"));
  EXPECT_THAT(js_->GetStreamState("c_docs"), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(JetStreamTest, KeyValueCompareAndSetAndExpiry) {
  ASSERT_OK_AND_ASSIGN(auto kv, js_->EnsureBucket({"zoomd_shards"}));
  EXPECT_THAT(kv->Get("docs"), IsOkAndHolds(std::optional<KvEntry>()));
  ASSERT_OK_AND_ASSIGN(uint64_t r1, kv->Create("docs", "v1"));
  EXPECT_THAT(kv->Create("docs", "v1b"), StatusIs(absl::StatusCode::kAlreadyExists));
  ASSERT_OK_AND_ASSIGN(uint64_t r2, kv->Update("docs", "v2", r1));
  EXPECT_GT(r2, r1);
  // A writer that read r1 loses the race.
  EXPECT_THAT(kv->Update("docs", "v3", r1),
              StatusIs(absl::StatusCode::kAborted, HasSubstr("revision moved")));
  ASSERT_OK_AND_ASSIGN(auto e, kv->Get("docs"));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->value, "v2");
  EXPECT_EQ(e->revision, r2);
  ASSERT_OK(kv->Put("other.key", ""));
  EXPECT_THAT(kv->Keys(), IsOkAndHolds(std::vector<std::string>{"docs", "other.key"}));
  ASSERT_OK(kv->Delete("docs"));
  EXPECT_THAT(kv->Get("docs"), IsOkAndHolds(std::optional<KvEntry>()));
  // Created again after a delete.
  ASSERT_OK(kv->Create("docs", "v4").status());
  EXPECT_THAT(kv->Get("bad key"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(kv->Put("a..b", "x"), StatusIs(absl::StatusCode::kInvalidArgument));

  // The node bucket: an entry not refreshed is gone after the max age.
  BucketSpec nodes{"zoomd_nodes"};
  nodes.max_age = absl::Seconds(1);
  ASSERT_OK_AND_ASSIGN(auto nb, js_->EnsureBucket(nodes));
  ASSERT_OK(nb->Put("node-a", "127.0.0.1:1").status());
  const absl::Time end = absl::Now() + absl::Seconds(30);
  std::optional<KvEntry> still;
  do {
    absl::SleepFor(absl::Milliseconds(200));
    ASSERT_OK_AND_ASSIGN(still, nb->Get("node-a"));
  } while (still.has_value() && absl::Now() < end);
  EXPECT_FALSE(still.has_value()) << "the entry outlived the bucket's max age by 29 s";
}

// Notices: core NATS, no stream; in order to a subscriber, none after its
// end.
TEST_F(JetStreamTest, NoticesReachSubscribersInOrderAndStopWithTheSubscription) {
  absl::Mutex mu;
  std::vector<std::string> got;
  ASSERT_OK_AND_ASSIGN(auto sub, js_->Subscribe("zoomd_acks.t", [&](std::string_view d) {
    absl::MutexLock l(&mu);
    got.emplace_back(d);
  }));
  // A subscription is live once the server has it: a round trip through
  // the server (a JetStream request on the same connection) orders it.
  ASSERT_OK(js_->EnsureStream({"order", {"order.x"}}));
  for (int i = 0; i < 100; ++i) ASSERT_OK(js_->PublishNotice("zoomd_acks.t", absl::StrCat(i)));
  ASSERT_OK(js_->PublishNotice("zoomd_acks.other", "not for it"));
  {
    absl::MutexLock l(&mu);
    auto all = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu) { return got.size() >= 100; };
    ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(&all), absl::Seconds(30)));
    for (int i = 0; i < 100; ++i) EXPECT_EQ(got[i], absl::StrCat(i));
  }
  sub.reset();
  const size_t before = [&] {
    absl::MutexLock l(&mu);
    return got.size();
  }();
  ASSERT_OK(js_->PublishNotice("zoomd_acks.t", "after"));
  ASSERT_OK(js_->EnsureStream({"order", {"order.x"}}));  // a round trip after it
  absl::MutexLock l(&mu);
  EXPECT_EQ(got.size(), before);
  EXPECT_THAT(js_->Subscribe("bad subject", [](std::string_view) {}),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(JetStreamTest, BadInputAndNoStream) {
  EXPECT_THAT(js_->EnsureStream({"bad name", {"a.b"}}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(js_->EnsureStream({"ok", {"a..b"}}), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(js_->EnsureStream({"ok", {}}), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(js_->EnsureStream({"ok", {"a.b"}, 9}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  // Nothing stores this subject: Unavailable, naming it.
  EXPECT_THAT(js_->Publish("zoomd.nostream.0", "x"),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("zoomd.nostream.0")));
  EXPECT_THAT(js_->Consume("nostream", "zoomd.nostream.0", "d", 1),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(js_->GetStreamState("nostream"), StatusIs(absl::StatusCode::kNotFound));

  JetStreamOptions o;
  EXPECT_THAT(JetStream::Connect(o), StatusIs(absl::StatusCode::kInvalidArgument));
  o.servers = {"127.0.0.1:4222"};
  EXPECT_THAT(JetStream::Connect(o), StatusIs(absl::StatusCode::kInvalidArgument,
                                              HasSubstr("nats://")));
  testing::RefusedPort refused;
  o.servers = {absl::StrCat("nats://127.0.0.1:", refused.port())};
  EXPECT_THAT(JetStream::Connect(o), StatusIs(absl::StatusCode::kUnavailable,
                                              HasSubstr(o.servers[0])));
}

TEST_F(JetStreamTest, ServerDeathIsUnavailableAndReconnectionResumes) {
  ASSERT_OK(js_->EnsureStream({"c_x", {"zoomd.x.0"}}));
  ASSERT_OK(js_->Publish("zoomd.x.0", "a").status());
  server_->Signal(SIGKILL);
  const absl::Time t0 = absl::Now();
  EXPECT_THAT(js_->Publish("zoomd.x.0", "b"), StatusIs(absl::StatusCode::kUnavailable));
  // Within the request timeout (2 s) and some slack for a loaded machine.
  EXPECT_LT(absl::Now() - t0, absl::Seconds(10));
  ASSERT_TRUE(server_->Start()) << server_->Log();
  // The same client reconnects by itself; the stream survived on disk.
  ASSERT_OK(Eventually([&] { return js_->Publish("zoomd.x.0", "c").status(); }));
  ASSERT_OK_AND_ASSIGN(StreamState state, js_->GetStreamState("c_x"));
  EXPECT_GE(state.messages, 2u);
}

// Three servers, an R=3 stream: one down, writes go on; two down, writes
// fail Unavailable (no quorum) within the request timeout; reads of what
// was written come back with the quorum.
TEST(JetStreamClusterTest, QuorumDecidesWrites) {
  if (testing::NatsServerBinary().empty()) GTEST_SKIP() << "nats-server not installed";
  TempDir dir;
  NatsCluster cluster(dir.path());
  ASSERT_TRUE(cluster.Start()) << cluster.server(0).Log();
  auto js = MustConnect(cluster.urls());
  ASSERT_NE(js, nullptr);
  StreamSpec spec{"c_r3", {"zoomd.r3.0"}, 3};
  ASSERT_OK(Eventually([&] { return js->EnsureStream(spec); }));
  ASSERT_OK(Eventually([&] { return js->Publish("zoomd.r3.0", "before").status(); }));

  // Kill a server that is not the one this client is on.
  const std::string on = js->connected_url();
  int victim = 0;
  while (cluster.server(victim).url() == on) ++victim;
  cluster.server(victim).Signal(SIGKILL);
  // A new stream leader may be elected if the victim led: bounded retries.
  ASSERT_OK(Eventually([&] { return js->Publish("zoomd.r3.0", "one down").status(); }));

  int second = 0;
  while (second == victim || cluster.server(second).url() == on) ++second;
  cluster.server(second).Signal(SIGKILL);
  const absl::Time t0 = absl::Now();
  auto lost = js->Publish("zoomd.r3.0", "two down");
  EXPECT_THAT(lost, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_LT(absl::Now() - t0, absl::Seconds(10));

  ASSERT_TRUE(cluster.server(victim).Start()) << cluster.server(victim).Log();
  // The restarted server rejoins the stream's Raft group and a leader is
  // elected: seconds, longer on a loaded machine (bounded).
  ASSERT_OK(Eventually([&] { return js->Publish("zoomd.r3.0", "quorum again").status(); },
                       absl::Seconds(120)));
  std::unique_ptr<PullConsumer> c;
  ASSERT_OK(Eventually([&] {
    auto made = js->Consume("c_r3", "zoomd.r3.0", "reader", 1);
    if (made.ok()) c = std::move(*made);
    return made.status();
  }));
  std::vector<std::string> data;
  const absl::Time end = absl::Now() + absl::Seconds(20);
  while (absl::Now() < end && (data.empty() || data.back() != "quorum again")) {
    auto batch = c->Fetch(10, absl::Seconds(1));
    if (!batch.ok()) continue;  // a leader moving
    for (auto& m : *batch) data.push_back(m.data);
  }
  ASSERT_GE(data.size(), 3u);
  EXPECT_EQ(data.front(), "before");
  EXPECT_EQ(data[1], "one down");
  EXPECT_EQ(data.back(), "quorum again");
}

}  // namespace
}  // namespace zoom::cluster
