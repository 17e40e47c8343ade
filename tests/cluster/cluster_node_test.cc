// ClusterCatalog and ClusterNode against a real nats-server, nodes in
// process (each with its own Database): collection admin through the
// catalog, nodes converging on the shard maps, heartbeated records, a
// replaced node bootstrapping from a peer's snapshot, drops, and the data
// directory's ownership.
#include "server/cluster/cluster_node.h"

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/cluster/log_entry.h"
#include "tests/testing/nats_server.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_env.h"

namespace zoom::cluster {
namespace {

using server::CollectionConfig;
using server::Database;
using server::DatabaseOptions;
using ::testing::HasSubstr;
using ::zoom::testing::NatsServer;
using ::zoom::testing::StatusIs;
using ::zoom::testing::TempDir;

constexpr uint32_t kDim = 4;

class ClusterNodeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (testing::NatsServerBinary().empty()) GTEST_SKIP() << "nats-server not installed";
    nats_ = std::make_unique<NatsServer>("solo", dir_.File("nats"));
    ASSERT_TRUE(nats_->Start()) << nats_->Log();
    JetStreamOptions o;
    o.servers = {nats_->url()};
    ASSERT_OK_AND_ASSIGN(js_, JetStream::Connect(o));
    ASSERT_OK_AND_ASSIGN(catalog_, ClusterCatalog::Open(js_.get(), CatalogOptions()));
  }
  void TearDown() override {
    nodes_.clear();
    dbs_.clear();
  }
  static ClusterCatalogOptions CatalogOptions() {
    ClusterCatalogOptions c;
    c.cluster = "test";
    c.node_ttl = absl::Seconds(10);
    return c;
  }
  Database* Db(const std::string& id) {
    if (dbs_.count(id) == 0) {
      DatabaseOptions d;
      d.data_dir = dir_.File("data-" + id);
      d.collection.auto_build_min_points = 0;
      auto db = Database::Open(d);
      EXPECT_OK(db.status());
      if (!db.ok()) return nullptr;
      dbs_[id] = std::move(*db);
    }
    return dbs_[id].get();
  }
  ClusterNodeOptions NodeOptions(const std::string& id) {
    ClusterNodeOptions o;
    o.catalog = CatalogOptions();
    o.nats.servers = {nats_->url()};
    o.node_id = id;
    o.advertise_address = "addr-" + id;
    o.heartbeat = absl::Milliseconds(200);
    o.reconcile = absl::Milliseconds(200);
    // Peers' snapshots, as DownloadSnapshot would bring them: written by
    // the peer's Database and copied.
    o.fetch_snapshot = [this](const std::string& address, const std::string& local,
                              const std::string& dest) -> absl::Status {
      Database* peer = dbs_.at(address.substr(5)).get();
      auto info = peer->CreateSnapshot(local);
      if (!info.ok()) return info.status();
      auto file = peer->SnapshotFile(local, info->name);
      if (!file.ok()) return file.status();
      std::error_code ec;
      std::filesystem::copy_file(file->first, dest, ec);
      ++fetched_;
      return ec ? absl::InternalError(ec.message()) : absl::OkStatus();
    };
    return o;
  }
  ClusterNode* StartNode(const std::string& id) {
    auto n = ClusterNode::Start(Db(id), NodeOptions(id));
    EXPECT_OK(n.status());
    if (!n.ok()) return nullptr;
    nodes_[id] = std::move(*n);
    return nodes_[id].get();
  }
  // Publishes an upsert of ids [first, first + n) to their shards; returns
  // the last sequence of each shard.
  std::map<uint32_t, uint64_t> Write(const ShardMap& m, uint64_t first, int n) {
    std::map<uint32_t, LogEntry> by_shard;
    for (uint64_t id = first; id < first + n; ++id) {
      LogEntry& e = by_shard[ShardOf(id, m.shards)];
      e.op = LogOp::kUpsert;
      e.dim = kDim;
      const float x = static_cast<float>(id);
      e.points.push_back({id, {x, 1.0f, -x, 0.5f}, absl::StrCat("p", id), {}});
    }
    std::map<uint32_t, uint64_t> seq;
    for (auto& [k, e] : by_shard) {
      auto ack = js_->Publish(ShardSubject("test", m.collection, k), EncodeLogEntry(e));
      EXPECT_OK(ack.status());
      if (ack.ok()) seq[k] = ack->sequence;
    }
    return seq;
  }
  // Waits until every replica of every shard in `seq` on `nodes` has
  // applied it.
  void WaitAll(const ShardMap& m, const std::map<uint32_t, uint64_t>& seq,
               const std::vector<std::string>& nodes) {
    for (const std::string& id : nodes) {
      for (const auto& [k, s] : seq) {
        if (std::find(m.assignment[k].begin(), m.assignment[k].end(), id) ==
            m.assignment[k].end()) {
          continue;
        }
        const absl::Time end = absl::Now() + absl::Seconds(60);
        while (nodes_.at(id)->ReplicaOf(m.LocalName(k)) == nullptr && absl::Now() < end) {
          absl::SleepFor(absl::Milliseconds(20));
        }
        ASSERT_TRUE(nodes_.at(id)->WaitApplied(m.LocalName(k), s, end))
            << id << " shard " << k;
        ASSERT_NE(nodes_.at(id)->ReplicaOf(m.LocalName(k)), nullptr);
      }
    }
  }
  uint64_t Points(const std::string& node, const std::string& local) {
    auto c = Db(node)->GetCollection(local);
    return c.ok() ? (*c)->Info().points : 0;
  }
  CollectionConfig Config(const std::string& name) {
    CollectionConfig c;
    c.name = name;
    c.dim = kDim;
    return c;
  }

  TempDir dir_;
  std::unique_ptr<NatsServer> nats_;
  std::unique_ptr<JetStream> js_;
  std::unique_ptr<ClusterCatalog> catalog_;
  std::map<std::string, std::unique_ptr<Database>> dbs_;
  std::map<std::string, std::unique_ptr<ClusterNode>> nodes_;
  int fetched_ = 0;
};

TEST_F(ClusterNodeTest, NodesConvergeOnTheShardMapsAndBootstrapFromPeers) {
  ASSERT_NE(StartNode("n0"), nullptr);
  ASSERT_NE(StartNode("n1"), nullptr);
  ASSERT_OK_AND_ASSIGN(auto live, catalog_->LiveNodes());
  ASSERT_EQ(live.size(), 2u);
  EXPECT_EQ(live[0].address, "addr-n0");

  // Admin: bad input and too few nodes say what to fix.
  EXPECT_THAT(catalog_->CreateCollection(Config("docs"), 2, 3),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("2 are present")));
  EXPECT_THAT(catalog_->CreateCollection(Config("docs"), 0, 1),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("shards")));
  CollectionConfig no_dim = Config("docs");
  no_dim.dim = 0;
  EXPECT_THAT(catalog_->CreateCollection(no_dim, 2, 2),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dim")));
  ASSERT_OK_AND_ASSIGN(ShardMap m, catalog_->CreateCollection(Config("docs"), 2, 2));
  EXPECT_THAT(catalog_->CreateCollection(Config("docs"), 2, 2),
              StatusIs(absl::StatusCode::kAlreadyExists));
  ASSERT_OK_AND_ASSIGN(auto got, catalog_->GetMap("docs"));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->map.uid, m.uid);

  // Both nodes host both shards (R = 2 on 2 nodes) and apply the writes.
  auto seq = Write(m, 0, 300);
  WaitAll(m, seq, {"n0", "n1"});
  for (const char* id : {"n0", "n1"}) {
    EXPECT_EQ(Points(id, m.LocalName(0)) + Points(id, m.LocalName(1)), 300u) << id;
  }
  // Their records say so, serving, once heartbeated.
  const absl::Time end = absl::Now() + absl::Seconds(30);
  bool serving = false;
  while (!serving && absl::Now() < end) {
    ASSERT_OK_AND_ASSIGN(live, catalog_->LiveNodes());
    serving = live.size() == 2;
    for (const NodeInfo& n : live) {
      for (uint32_t k = 0; k < 2; ++k) {
        const HostedShard* h = n.Find(m.uid, k);
        serving = serving && h != nullptr && h->applied == seq[k] &&
                  h->state == ReplicaState::kServing;
      }
    }
    if (!serving) absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_TRUE(serving);

  // n1 is replaced by a machine with an empty disk: it bootstraps from n0's
  // snapshots, then applies only what came after them.
  nodes_.erase("n1");
  dbs_.erase("n1");
  std::filesystem::remove_all(dir_.File("data-n1"));
  fetched_ = 0;  // (n1 may have bootstrapped from n0 already: a peer had data)
  auto more = Write(m, 300, 50);
  ASSERT_NE(StartNode("n1"), nullptr);
  WaitAll(m, more, {"n0", "n1"});
  EXPECT_EQ(fetched_, 2);
  for (uint32_t k = 0; k < 2; ++k) {
    EXPECT_EQ(Points("n1", m.LocalName(k)), Points("n0", m.LocalName(k))) << k;
    EXPECT_LE(nodes_.at("n1")->ReplicaOf(m.LocalName(k))->status().entries, 1u);
  }

  // Drop: every node stops its replicas and drops its local collections.
  ASSERT_OK(catalog_->DropCollection("docs"));
  EXPECT_THAT(catalog_->DropCollection("docs"), StatusIs(absl::StatusCode::kNotFound));
  const absl::Time end2 = absl::Now() + absl::Seconds(30);
  while ((!Db("n0")->ListCollections().empty() || !Db("n1")->ListCollections().empty()) &&
         absl::Now() < end2) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_TRUE(Db("n0")->ListCollections().empty());
  EXPECT_TRUE(Db("n1")->ListCollections().empty());
  // A clean leave removes the node's record at once.
  nodes_.erase("n0");
  ASSERT_OK_AND_ASSIGN(live, catalog_->LiveNodes());
  ASSERT_EQ(live.size(), 1u);
  EXPECT_EQ(live[0].node, "n1");
}

TEST_F(ClusterNodeTest, TheLogIsTrimmedBelowItsReplicasAndOneLeftBehindRestoresASnapshot) {
  auto start = [&](const std::string& id, absl::Duration hold) {
    ClusterNodeOptions o = NodeOptions(id);
    o.log_trim = absl::ZeroDuration();  // trimmed by the test's calls
    o.log_hold = hold;
    auto n = ClusterNode::Start(Db(id), o);
    EXPECT_OK(n.status());
    if (n.ok()) nodes_[id] = std::move(*n);
    return n.ok();
  };
  // Until `id`'s record says it applied `seq` of shard 0 (the trim reads
  // the records).
  auto reported = [&](const std::string& id, uint64_t uid, uint64_t seq) {
    const absl::Time end = absl::Now() + absl::Seconds(30);
    while (absl::Now() < end) {
      auto live = catalog_->LiveNodes();
      if (live.ok()) {
        for (const NodeInfo& n : *live) {
          const HostedShard* h = n.Find(uid, 0);
          if (n.node == id && h != nullptr && h->applied == seq) return true;
        }
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    return false;
  };
  const std::string stream = StreamName("test", "docs");
  // Ids [first, first + 10 * entries) in `entries` log entries.
  auto write = [&](const ShardMap& m, uint64_t first, int entries) {
    std::map<uint32_t, uint64_t> last;
    for (int i = 0; i < entries; ++i) last = Write(m, first + 10 * i, 10);
    return last;
  };
  ASSERT_TRUE(start("n0", absl::Hours(1)));
  ASSERT_TRUE(start("n1", absl::Hours(1)));
  ASSERT_OK_AND_ASSIGN(ShardMap m, catalog_->CreateCollection(Config("docs"), 1, 2));
  auto s1 = write(m, 0, 10);
  WaitAll(m, s1, {"n0", "n1"});
  ASSERT_TRUE(reported("n0", m.uid, s1[0]));
  ASSERT_TRUE(reported("n1", m.uid, s1[0]));
  EXPECT_THAT(catalog_->LogFloor(m.uid, 0), testing::IsOkAndHolds(1u));
  // n0 (the first live replica) purges below both replicas' position; n1
  // does not; a second pass has nothing to do.
  EXPECT_THAT(nodes_.at("n1")->TrimLogs(), testing::IsOkAndHolds(0));
  EXPECT_THAT(nodes_.at("n0")->TrimLogs(), testing::IsOkAndHolds(1));
  EXPECT_THAT(nodes_.at("n0")->TrimLogs(), testing::IsOkAndHolds(0));
  EXPECT_THAT(catalog_->LogFloor(m.uid, 0), testing::IsOkAndHolds(s1[0]));
  ASSERT_OK_AND_ASSIGN(StreamState st, js_->GetStreamState(stream));
  EXPECT_EQ(st.first_sequence, s1[0]);
  // n1 goes down: it holds the log for log_hold (an hour here).
  nodes_.erase("n1");
  auto s2 = write(m, 100, 5);
  WaitAll(m, s2, {"n0"});
  ASSERT_TRUE(reported("n0", m.uid, s2[0]));
  EXPECT_THAT(nodes_.at("n0")->TrimLogs(), testing::IsOkAndHolds(0));
  EXPECT_THAT(catalog_->LogFloor(m.uid, 0), testing::IsOkAndHolds(s1[0]));
  // With no hold it is left out: the log goes below n0's position.
  nodes_.erase("n0");
  ASSERT_TRUE(start("n0", absl::ZeroDuration()));
  ASSERT_TRUE(reported("n0", m.uid, s2[0]));
  EXPECT_THAT(nodes_.at("n0")->TrimLogs(), testing::IsOkAndHolds(1));
  EXPECT_THAT(catalog_->LogFloor(m.uid, 0), testing::IsOkAndHolds(s2[0]));
  // n1 comes back below the floor: it cannot replay what is gone, so it
  // restores n0's snapshot (its own copy replaced) and goes on from there.
  fetched_ = 0;
  ASSERT_TRUE(start("n1", absl::Hours(1)));
  auto s3 = write(m, 150, 1);
  WaitAll(m, s3, {"n0", "n1"});
  EXPECT_EQ(fetched_, 1);
  EXPECT_EQ(Points("n1", m.LocalName(0)), 160u);
  EXPECT_EQ(Points("n0", m.LocalName(0)), 160u);
}

TEST_F(ClusterNodeTest, ADataDirectoryBelongsToOneClusterNode) {
  ASSERT_NE(StartNode("n0"), nullptr);
  nodes_.erase("n0");
  ClusterNodeOptions other = NodeOptions("n9");
  EXPECT_THAT(ClusterNode::Start(Db("n0"), other),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("node 'n0'")));
  other = NodeOptions("n0");
  other.catalog.cluster = "prod";
  EXPECT_THAT(ClusterNode::Start(Db("n0"), other),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("cluster 'test'")));
  // A standalone zoomd's data directory is not taken over.
  ASSERT_OK(Db("solo")->CreateCollection(Config("mine")).status());
  EXPECT_THAT(ClusterNode::Start(Db("solo"), NodeOptions("solo")),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("mine")));
  ClusterNodeOptions bad = NodeOptions("n1");
  bad.advertise_address = "";
  EXPECT_THAT(ClusterNode::Start(Db("n1"), bad),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--advertise_address")));
  bad = NodeOptions("bad id");
  EXPECT_THAT(ClusterNode::Start(Db("n1"), bad), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace zoom::cluster
