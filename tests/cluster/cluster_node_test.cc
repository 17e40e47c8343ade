// ClusterCatalog and ClusterNode against a real nats-server, nodes in
// process (each with its own Database): collection admin through the
// catalog, nodes converging on the shard maps, heartbeated records, a
// replaced node bootstrapping from a peer's snapshot, drops, and the data
// directory's ownership. A bootstrap's download writes through the node's
// FileSystem: FetchSnapshotToFile alone and a node's bootstrap under
// injected write faults (FaultInjectingFileSystem).
#include "server/cluster/cluster_node.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/cluster/log_entry.h"
#include "server/cluster/versioned_apply.h"
#include "tests/testing/fault_injecting_file_system.h"
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
using Op = FaultInjectingFileSystem::Op;

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Streams `archive` into `sink` in `chunk`-byte pieces, as DownloadSnapshot
// does: stops at the sink's first error and returns it. *offered counts the
// chunks handed to the sink.
absl::Status StreamChunks(const std::string& archive, size_t chunk, const SnapshotSink& sink,
                          int* offered = nullptr) {
  for (size_t at = 0; at < archive.size(); at += chunk) {
    if (offered != nullptr) ++*offered;
    const size_t n = std::min(chunk, archive.size() - at);
    if (absl::Status st = sink(absl::string_view(archive).substr(at, n), at); !st.ok()) return st;
  }
  return absl::OkStatus();
}

// The files under `dir` (recursively; none if it is absent).
std::vector<std::string> FilesUnder(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file()) out.push_back(it->path().string());
  }
  return out;
}

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
  // `files`: what the database (and the node over it) writes through when
  // it is opened here (null: POSIX).
  Database* Db(const std::string& id, FileSystem* files = nullptr) {
    if (dbs_.count(id) == 0) {
      DatabaseOptions d;
      d.data_dir = dir_.File("data-" + id);
      d.collection.auto_build_min_points = 0;
      d.collection.store.file_system = files;
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
    // the peer's Database, streamed in chunks into the node's sink.
    o.fetch_snapshot = [this](const std::string& address, const std::string& local,
                              const SnapshotSink& sink) -> absl::Status {
      ++fetch_attempts_;
      Database* peer = dbs_.at(address.substr(5)).get();
      auto info = peer->CreateSnapshot(local);
      if (!info.ok()) return info.status();
      auto file = peer->SnapshotFile(local, info->name);
      if (!file.ok()) return file.status();
      absl::Status st = StreamChunks(Slurp(file->first), kFetchChunk, sink);
      if (st.ok()) ++fetched_;
      return st;
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
  // Until `id`'s record says it applied `seq` of shard `k` (a bootstrap
  // picks its peer by the records); false after 30 s.
  bool Reported(const std::string& id, uint64_t uid, uint32_t k, uint64_t seq) {
    const absl::Time end = absl::Now() + absl::Seconds(30);
    while (absl::Now() < end) {
      auto live = catalog_->LiveNodes();
      if (live.ok()) {
        for (const NodeInfo& n : *live) {
          const HostedShard* h = n.Find(uid, k);
          if (n.node == id && h != nullptr && h->applied == seq) return true;
        }
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    return false;
  }
  // The bootstrap's staging files left in `id`'s snapshots directory.
  std::vector<std::string> Staged(const std::string& id) {
    return FilesUnder(dir_.File("data-" + id) + "/snapshots/.incoming");
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

  // Small chunks: a snapshot of a few points still comes in many.
  static constexpr size_t kFetchChunk = 256;

  TempDir dir_;
  std::unique_ptr<NatsServer> nats_;
  std::unique_ptr<JetStream> js_;
  std::unique_ptr<ClusterCatalog> catalog_;
  FaultInjectingFileSystem faulty_;  // outlives the databases that write through it
  std::map<std::string, std::unique_ptr<Database>> dbs_;
  std::map<std::string, std::unique_ptr<ClusterNode>> nodes_;
  // Counted on the nodes' reconcile threads: fetches begun, and those
  // whose every chunk the node's sink took.
  std::atomic<int> fetch_attempts_{0}, fetched_{0};
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
  EXPECT_EQ(fetched_.load(), 2);
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

// Anti-entropy (ClusterNode::CheckDigests): two replicas caught up at one
// log position that hold different points (NATS can serve replicas
// different entries at one sequence after its Raft groups diverge; here
// a point written into one replica's store while its node was down)
// report different digests, publish their whole states, and end equal.
TEST_F(ClusterNodeTest, ReplicasThatDifferAtOnePositionExchangeTheirStates) {
  ASSERT_NE(StartNode("n0"), nullptr);
  ASSERT_NE(StartNode("n1"), nullptr);
  ASSERT_OK_AND_ASSIGN(ShardMap m, catalog_->CreateCollection(Config("docs"), 1, 2));
  auto seq = Write(m, 0, 20);
  WaitAll(m, seq, {"n0", "n1"});
  nodes_.erase("n1");
  {
    ASSERT_OK_AND_ASSIGN(auto c, Db("n1")->GetCollection(m.LocalName(0)));
    LogEntry e;
    e.op = LogOp::kUpsert;
    e.dim = kDim;
    e.points.push_back({9999, {1, 2, 3, 4}, "only on n1", {}});
    ASSERT_OK(ApplyVersioned(e, c->log_version(), c.get()).status());
  }
  ASSERT_NE(StartNode("n1"), nullptr);
  const absl::Time end = absl::Now() + absl::Seconds(60);
  auto has = [&](const std::string& node) {
    auto c = Db(node)->GetCollection(m.LocalName(0));
    std::vector<server::PointData> got;
    return c.ok() && (*c)->Get({9999}, false, true, &got).ok() && got.size() == 1 &&
           got[0].payload == "only on n1";
  };
  while (!has("n0") && absl::Now() < end) absl::SleepFor(absl::Milliseconds(50));
  ASSERT_TRUE(has("n0"));
  // Then equal: the same digest at the same position.
  bool equal = false;
  while (!equal && absl::Now() < end) {
    const ReplicaStatus a = nodes_.at("n0")->ReplicaOf(m.LocalName(0))->status();
    const ReplicaStatus b = nodes_.at("n1")->ReplicaOf(m.LocalName(0))->status();
    equal = a.caught_up && b.caught_up && a.applied == b.applied && a.digest == b.digest;
    if (!equal) absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_TRUE(equal);
  EXPECT_EQ(Points("n0", m.LocalName(0)), 21u);
  EXPECT_EQ(Points("n1", m.LocalName(0)), 21u);
}

// What a power failure of NATS before it synced anything takes: the shard
// map's bucket and the collection's stream. The nodes create the buckets
// again, put the map back from their copies (never dropping a replica
// whose collection's drop is not recorded), create the stream again, and
// the replicas publish again what they applied.
TEST_F(ClusterNodeTest, ACatalogAndALogThatNatsLostAreRebuiltFromTheNodes) {
  ASSERT_NE(StartNode("n0"), nullptr);
  ASSERT_NE(StartNode("n1"), nullptr);
  ASSERT_OK_AND_ASSIGN(ShardMap m, catalog_->CreateCollection(Config("docs"), 1, 2));
  const std::string subject = ShardSubject("test", "docs", 0);
  std::map<uint32_t, uint64_t> seq;
  for (int i = 0; i < 3; ++i) {
    LogEntry e;
    e.op = LogOp::kUpsert;
    e.dim = kDim;
    for (uint64_t id = i * 10; id < i * 10 + 10; ++id) {
      e.points.push_back({id, {1.0f, 2.0f, 3.0f, static_cast<float>(id)}, "", {}});
    }
    ASSERT_OK_AND_ASSIGN(PubAck ack, js_->Publish(subject, EncodeLogEntry(e),
                                                  absl::StrCat("w", i)));
    seq[0] = ack.sequence;
  }
  WaitAll(m, seq, {"n0", "n1"});
  // NATS losing them (a request the loaded server answers late is asked
  // again: one such timeout failed a run; a stream already gone is gone).
  for (const std::string& stream :
       {absl::StrCat("KV_", ShardsBucket("test")), StreamName("test", "docs")}) {
    absl::Status st;
    const absl::Time until = absl::Now() + absl::Seconds(30);
    do {
      st = js_->DeleteStream(stream);
    } while (absl::IsUnavailable(st) && absl::Now() < until);
    if (!absl::IsNotFound(st)) ASSERT_OK(st) << stream;
  }
  // Back: the map (the same uid), the stream with the three entries again,
  // both replicas with every point.
  const absl::Time end = absl::Now() + absl::Seconds(60);
  auto rebuilt = [&] {
    auto got = catalog_->GetMap("docs");
    auto last = js_->LastSequence(StreamName("test", "docs"), subject);
    return got.ok() && got->has_value() && (*got)->map.uid == m.uid && last.ok() &&
           *last >= 3 && Points("n0", m.LocalName(0)) == 30 &&
           Points("n1", m.LocalName(0)) == 30;
  };
  while (!rebuilt() && absl::Now() < end) absl::SleepFor(absl::Milliseconds(50));
  // What is missing when it is not (a run in about 120 timed out here).
  auto state = [&] {
    auto got = catalog_->GetMap("docs");
    auto last = js_->LastSequence(StreamName("test", "docs"), subject);
    std::string out = absl::StrCat(
        "map: ", got.ok() ? (got->has_value() ? absl::StrCat("uid ", (*got)->map.uid) : "absent")
                          : got.status().ToString(),
        " (want uid ", m.uid, "); log end: ", last.ok() ? absl::StrCat(*last) : last.status().ToString(),
        "; points n0 ", Points("n0", m.LocalName(0)), ", n1 ", Points("n1", m.LocalName(0)));
    for (const char* id : {"n0", "n1"}) {
      auto r = nodes_.at(id)->ReplicaOf(m.LocalName(0));
      if (r == nullptr) {
        absl::StrAppend(&out, "; ", id, ": no replica");
        continue;
      }
      const ReplicaStatus st = r->status();
      absl::StrAppend(&out, "; ", id, ": applied ", st.applied, " failed ", st.failed,
                      " repairs ", st.repairs, " last_fork '", st.last_fork, "' last_error '",
                      st.last_error, "'");
    }
    return out;
  };
  ASSERT_TRUE(rebuilt()) << state();
  uint64_t repairs = 0, republished = 0;
  for (const char* id : {"n0", "n1"}) {
    ASSERT_NE(nodes_.at(id)->ReplicaOf(m.LocalName(0)), nullptr) << id;
    const ReplicaStatus st = nodes_.at(id)->ReplicaOf(m.LocalName(0))->status();
    repairs += st.repairs;
    republished += st.republished;
  }
  EXPECT_GE(repairs, 1u);
  EXPECT_EQ(republished, 3u);
  // Writes go on.
  LogEntry more;
  more.op = LogOp::kUpsert;
  more.dim = kDim;
  more.points.push_back({100, {1.0f, 1.0f, 1.0f, 1.0f}, "", {}});
  ASSERT_OK_AND_ASSIGN(PubAck ack, js_->Publish(subject, EncodeLogEntry(more), "w3"));
  WaitAll(m, {{0, ack.sequence}}, {"n0", "n1"});
  EXPECT_EQ(Points("n0", m.LocalName(0)), 31u);
  EXPECT_EQ(Points("n1", m.LocalName(0)), 31u);
}

// A node gone for good: past rereplicate_after its replica is placed on a
// live node, which bootstraps it from a peer's snapshot; the replication
// factor is back without an operator. The old node, back, drops it.
TEST_F(ClusterNodeTest, AGoneNodesReplicasArePlacedOnLiveNodes) {
  auto start = [&](const std::string& id) {
    ClusterNodeOptions o = NodeOptions(id);
    o.rereplicate_after = absl::Milliseconds(500);
    auto n = ClusterNode::Start(Db(id), o);
    EXPECT_OK(n.status());
    if (n.ok()) nodes_[id] = std::move(*n);
    return n.ok();
  };
  ASSERT_TRUE(start("n0"));
  ASSERT_TRUE(start("n1"));
  ASSERT_OK_AND_ASSIGN(ShardMap m, catalog_->CreateCollection(Config("docs"), 1, 2));
  ASSERT_THAT(m.assignment[0], ::testing::UnorderedElementsAre("n0", "n1"));
  auto seq = Write(m, 0, 100);
  WaitAll(m, seq, {"n0", "n1"});
  ASSERT_TRUE(start("n2"));
  // n1 leaves (its record goes); n2 takes its replica from n0's snapshot.
  nodes_.erase("n1");
  const absl::Time end = absl::Now() + absl::Seconds(60);
  std::optional<VersionedShardMap> now;
  do {
    ASSERT_OK_AND_ASSIGN(now, catalog_->GetMap("docs"));
    if (now.has_value() && now->map.assignment[0] != m.assignment[0]) break;
    absl::SleepFor(absl::Milliseconds(50));
  } while (absl::Now() < end);
  ASSERT_TRUE(now.has_value());
  EXPECT_THAT(now->map.assignment[0], ::testing::UnorderedElementsAre("n0", "n2"));
  EXPECT_EQ(now->map.uid, m.uid);
  auto more = Write(m, 100, 10);
  WaitAll(now->map, more, {"n0", "n2"});
  EXPECT_EQ(Points("n2", m.LocalName(0)), 110u);
  EXPECT_EQ(Points("n0", m.LocalName(0)), 110u);
  // n1 comes back: its replica is no longer its own, and goes.
  ASSERT_TRUE(start("n1"));
  const absl::Time end2 = absl::Now() + absl::Seconds(30);
  while (Db("n1")->GetCollection(m.LocalName(0)).ok() && absl::Now() < end2) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_FALSE(Db("n1")->GetCollection(m.LocalName(0)).ok());
  EXPECT_EQ(nodes_.at("n1")->ReplicaOf(m.LocalName(0)), nullptr);
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
  EXPECT_EQ(fetched_.load(), 1);
  EXPECT_EQ(Points("n1", m.LocalName(0)), 160u);
  EXPECT_EQ(Points("n0", m.LocalName(0)), 160u);
}

// A replica whose position is past the log's end (the log lost its tail
// to a power failure of its servers; the replica has not rewound yet, or
// its record still shows the old position) holds the trim: that number
// says nothing of the new log, whose entries it may not have applied.
TEST_F(ClusterNodeTest, ATrimWaitsWhileAReplicaIsPastTheLogsEnd) {
  ClusterNodeOptions o = NodeOptions("n0");
  o.log_trim = absl::ZeroDuration();
  o.replica.verify_every = absl::Hours(1);  // the fork is not found during the test
  ASSERT_OK_AND_ASSIGN(nodes_["n0"], ClusterNode::Start(Db("n0"), o));
  ASSERT_OK_AND_ASSIGN(ShardMap m, catalog_->CreateCollection(Config("docs"), 1, 1));
  std::map<uint32_t, uint64_t> s1, s2;
  for (int i = 0; i < 3; ++i) s1 = Write(m, 10 * i, 10);
  WaitAll(m, s1, {"n0"});
  auto reported = [&](uint64_t seq) {
    const absl::Time end = absl::Now() + absl::Seconds(30);
    while (absl::Now() < end) {
      auto live = catalog_->LiveNodes();
      if (live.ok() && !live->empty()) {
        const HostedShard* h = (*live)[0].Find(m.uid, 0);
        if (h != nullptr && h->applied == seq) return true;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    return false;
  };
  ASSERT_TRUE(reported(s1[0]));
  EXPECT_THAT(nodes_.at("n0")->TrimLogs(), testing::IsOkAndHolds(1));
  for (int i = 0; i < 3; ++i) s2 = Write(m, 100 + 10 * i, 10);
  WaitAll(m, s2, {"n0"});
  ASSERT_TRUE(reported(s2[0]));
  // The log loses everything; n0 still says s2.
  ASSERT_OK(js_->DeleteStream(StreamName("test", "docs")));
  ASSERT_OK(catalog_->EnsureStreamOf(m));
  EXPECT_THAT(nodes_.at("n0")->TrimLogs(), testing::IsOkAndHolds(0));
  EXPECT_THAT(catalog_->LogFloor(m.uid, 0), testing::IsOkAndHolds(s1[0]));
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

// FetchSnapshotToFile alone (no NATS): the archive is written through the
// given FileSystem as it streams in; every failure, the file system's or
// the fetch's, leaves nothing at `dest`.
TEST(FetchSnapshotToFileTest, WritesTheArchiveAndLeavesNothingOnAnyFailure) {
  TempDir dir;
  std::string archive(10000, '\0');
  for (size_t i = 0; i < archive.size(); ++i) archive[i] = static_cast<char>(i * 131 + 7);
  constexpr size_t kChunk = 1000;  // 10 chunks
  const std::string local = "docs_s0_00000001";
  int offered = 0;
  const SnapshotFetcher fetch = [&](const std::string& address, const std::string& name,
                                    const SnapshotSink& sink) {
    EXPECT_EQ(address, "peer:1");
    EXPECT_EQ(name, local);
    return StreamChunks(archive, kChunk, sink, &offered);
  };
  {
    FaultInjectingFileSystem files;
    const std::string dest = dir.File("whole.zsnap");
    ASSERT_OK(FetchSnapshotToFile(fetch, "peer:1", local, files, dest));
    EXPECT_EQ(offered, 10);
    EXPECT_EQ(Slurp(dest), archive);
    // A staging path is new: an existing file is refused and left alone.
    EXPECT_THAT(FetchSnapshotToFile(fetch, "peer:1", local, files, dest),
                StatusIs(absl::StatusCode::kAlreadyExists));
    EXPECT_EQ(Slurp(dest), archive);
  }
  // Each fault: its code, the download stopped where it struck, nothing
  // left behind.
  struct Case {
    const char* what;
    FaultInjectingFileSystem::Fault fault;
    absl::StatusCode code;
    int offered;  // chunks handed to the sink before it stopped the download
  };
  const Case cases[] = {
      {"ENOSPC at the 4th write", {Op::kWrite, "partial", 3, ENOSPC},
       absl::StatusCode::kResourceExhausted, 4},
      {"EIO half-way through the 2nd write", {Op::kWrite, "partial", 1, EIO, /*short_write=*/true},
       absl::StatusCode::kDataLoss, 2},
      {"EIO at the sync", {Op::kSync, "partial", 0, EIO}, absl::StatusCode::kDataLoss, 10},
      {"EACCES at the open", {Op::kOpen, "partial", 0, EACCES},
       absl::StatusCode::kPermissionDenied, 0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    FaultInjectingFileSystem files;
    files.Inject(c.fault);
    const std::string dest = dir.File("partial.zsnap");
    offered = 0;
    EXPECT_THAT(FetchSnapshotToFile(fetch, "peer:1", local, files, dest),
                StatusIs(c.code, HasSubstr("partial.zsnap (injected)")));
    EXPECT_EQ(files.fired(), 1);
    EXPECT_EQ(offered, c.offered);
    EXPECT_FALSE(std::filesystem::exists(dest));
  }
  // The fetch failing part-way (the peer went away) and chunks out of
  // order: the same.
  const std::string dest = dir.File("cut.zsnap");
  const SnapshotFetcher cut = [&](const std::string&, const std::string&,
                                  const SnapshotSink& sink) -> absl::Status {
    absl::Status st = sink(absl::string_view(archive).substr(0, kChunk), 0);
    return st.ok() ? absl::UnavailableError("the peer went away") : st;
  };
  EXPECT_THAT(FetchSnapshotToFile(cut, "peer:1", local, *FileSystem::Posix(), dest),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("went away")));
  EXPECT_FALSE(std::filesystem::exists(dest));
  const SnapshotFetcher gap = [&](const std::string&, const std::string&,
                                  const SnapshotSink& sink) -> absl::Status {
    absl::Status st = sink(absl::string_view(archive).substr(0, kChunk), 0);
    if (st.ok()) st = sink(absl::string_view(archive).substr(2 * kChunk, kChunk), 2 * kChunk);
    return st;
  };
  EXPECT_THAT(FetchSnapshotToFile(gap, "peer:1", local, *FileSystem::Posix(), dest),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("offset 2000 after 1000 bytes")));
  EXPECT_FALSE(std::filesystem::exists(dest));
}

// A replaced node's bootstrap whose download fails to write (ENOSPC, half
// of a chunk landed): the staged archive is removed, nothing is restored
// from it, and the shard starts as it does without a peer: empty,
// replaying the log, which still holds every entry.
TEST_F(ClusterNodeTest, ABootstrapWhoseDownloadFailsToWriteReplaysTheLogInstead) {
  auto start = [&](const std::string& id, FileSystem* files) {
    ClusterNodeOptions o = NodeOptions(id);
    o.log_trim = absl::ZeroDuration();  // the log keeps every entry
    auto n = ClusterNode::Start(Db(id, files), o);
    EXPECT_OK(n.status());
    if (n.ok()) nodes_[id] = std::move(*n);
    return n.ok();
  };
  ASSERT_TRUE(start("n0", nullptr));
  ASSERT_TRUE(start("n1", &faulty_));
  ASSERT_OK_AND_ASSIGN(ShardMap m, catalog_->CreateCollection(Config("docs"), 1, 2));
  const std::string local = m.LocalName(0);
  std::map<uint32_t, uint64_t> seq;
  for (int i = 0; i < 5; ++i) seq = Write(m, 20 * i, 20);  // 5 entries, 100 points
  WaitAll(m, seq, {"n0", "n1"});
  // n1's bootstrap picks its peer by the records: n0's must show its data.
  ASSERT_TRUE(Reported("n0", m.uid, 0, seq[0]));

  // n1 comes back on an empty disk whose writes of the download fail.
  nodes_.erase("n1");
  dbs_.erase("n1");
  std::filesystem::remove_all(dir_.File("data-n1"));
  faulty_.Inject({Op::kWrite, "upload-", 1, ENOSPC, /*short_write=*/true});
  fetch_attempts_ = 0;
  fetched_ = 0;
  ASSERT_TRUE(start("n1", &faulty_));
  WaitAll(m, seq, {"n1"});
  EXPECT_EQ(fetch_attempts_.load(), 1);
  EXPECT_EQ(fetched_.load(), 0);  // the sink refused the second chunk
  EXPECT_EQ(faulty_.fired(), 1);
  EXPECT_THAT(Staged("n1"), ::testing::IsEmpty());
  EXPECT_EQ(Points("n1", local), 100u);
  // Replayed from the log's start (a restored snapshot would have left
  // nothing to apply).
  EXPECT_EQ(nodes_.at("n1")->ReplicaOf(local)->status().entries, 5u);
}

// The same below a purged log, the fault at the staged archive's sync
// (EIO): the pass fails, Unavailable and saying it waits for a peer, with
// nothing staged, restored or hosted; once the disk is healthy the next
// pass fetches again and restores.
TEST_F(ClusterNodeTest, ABootstrapWhoseArchiveFailsToSyncBelowAPurgedLogWaitsAndRetries) {
  auto start = [&](const std::string& id, FileSystem* files, absl::Duration reconcile) {
    ClusterNodeOptions o = NodeOptions(id);
    o.log_trim = absl::ZeroDuration();  // trimmed by the test's call
    o.reconcile = reconcile;
    auto n = ClusterNode::Start(Db(id, files), o);
    EXPECT_OK(n.status());
    if (n.ok()) nodes_[id] = std::move(*n);
    return n.ok();
  };
  ASSERT_TRUE(start("n0", nullptr, absl::Milliseconds(200)));
  ASSERT_TRUE(start("n1", &faulty_, absl::Milliseconds(200)));
  ASSERT_OK_AND_ASSIGN(ShardMap m, catalog_->CreateCollection(Config("docs"), 1, 2));
  const std::string local = m.LocalName(0);
  std::map<uint32_t, uint64_t> seq;
  for (int i = 0; i < 5; ++i) seq = Write(m, 20 * i, 20);
  WaitAll(m, seq, {"n0", "n1"});
  ASSERT_TRUE(Reported("n0", m.uid, 0, seq[0]));
  ASSERT_TRUE(Reported("n1", m.uid, 0, seq[0]));
  // The log goes below both: an empty replica cannot replay it.
  ASSERT_THAT(nodes_.at("n0")->TrimLogs(), testing::IsOkAndHolds(1));
  ASSERT_THAT(catalog_->LogFloor(m.uid, 0), testing::IsOkAndHolds(seq[0]));

  nodes_.erase("n1");
  dbs_.erase("n1");
  std::filesystem::remove_all(dir_.File("data-n1"));
  FaultInjectingFileSystem::Fault sync_fails{Op::kSync, "upload-", 0, EIO};
  sync_fails.sticky = true;
  faulty_.Inject(sync_fails);
  fetch_attempts_ = 0;
  // Its passes are the test's: Start's own, then the two below (the
  // thread's first would come in an hour).
  ASSERT_TRUE(start("n1", &faulty_, absl::Hours(1)));
  auto nothing_left = [&] {
    EXPECT_EQ(nodes_.at("n1")->ReplicaOf(local), nullptr);
    EXPECT_THAT(Db("n1")->GetCollection(local).status(), StatusIs(absl::StatusCode::kNotFound));
    EXPECT_THAT(Staged("n1"), ::testing::IsEmpty());
  };
  EXPECT_EQ(fetch_attempts_.load(), 1);
  EXPECT_EQ(faulty_.fired(), 1);
  nothing_left();
  EXPECT_THAT(nodes_.at("n1")->Reconcile(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("waiting for a peer")));
  EXPECT_EQ(fetch_attempts_.load(), 2);
  EXPECT_EQ(faulty_.fired(), 2);
  nothing_left();

  faulty_.Clear();
  ASSERT_OK(nodes_.at("n1")->Reconcile());
  EXPECT_EQ(fetch_attempts_.load(), 3);
  WaitAll(m, seq, {"n1"});
  EXPECT_EQ(Points("n1", local), 100u);
  EXPECT_EQ(nodes_.at("n1")->ReplicaOf(local)->status().entries, 0u);  // restored at seq
  EXPECT_THAT(Staged("n1"), ::testing::IsEmpty());
}

}  // namespace
}  // namespace zoom::cluster
