// The cluster's names and records: the golden shard map and node record of
// format 1, malformed ones refused with a status, local names that parse
// back, shard placement, and the shard hash spreading ids evenly.
#include "server/cluster/cluster_map.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/binary_io.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_env.h"

namespace zoom::cluster {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::zoom::testing::StatusIs;
using ::zoom::testing::TestDataPath;

ShardMap GoldenMap() {
  ShardMap m;
  m.collection = "docs";
  m.uid = 0x0123456789abcdefULL;
  m.shards = 2;
  m.replicas = 2;
  m.config.name = "docs";
  m.config.dim = 16;
  m.config.ApplyDefaults();
  m.assignment = {{"n0", "n1"}, {"n2", "n0"}};
  m.created_unix_ms = 1796000000000;
  return m;
}

NodeInfo GoldenNode() {
  NodeInfo n;
  n.node = "n1";
  n.address = "10.0.0.7:7000";
  n.heartbeat_unix_ms = 1796000000123;
  n.hosted = {{"docs", 0, 0x0123456789abcdefULL, 42, 0, ReplicaState::kServing},
              {"docs", 1, 0x0123456789abcdefULL, 7, 35, ReplicaState::kCatchingUp}};
  return n;
}

// Written by the encoder once (ZOOM_WRITE_GOLDEN=1); later encoders must
// read them to the same records.
std::string Golden(const std::string& name, const std::string& fresh) {
  const std::string path = TestDataPath("golden/" + name);
  if (std::getenv("ZOOM_WRITE_GOLDEN") != nullptr) std::ofstream(path) << fresh;
  auto text = ReadFileToString(path);
  EXPECT_OK(text.status());
  return text.ok() ? *text : "";
}

TEST(ClusterMapTest, GoldenRecordsOfFormat1) {
  const ShardMap m = GoldenMap();
  const std::string map_text = Golden("shard_map_v1.txt", m.Encode());
  EXPECT_EQ(m.Encode(), map_text);
  ASSERT_OK_AND_ASSIGN(ShardMap back, ShardMap::Decode(map_text));
  EXPECT_EQ(back.collection, "docs");
  EXPECT_EQ(back.uid, m.uid);
  EXPECT_EQ(back.config.Encode(), m.config.Encode());
  EXPECT_EQ(back.assignment, m.assignment);
  EXPECT_EQ(back.created_unix_ms, m.created_unix_ms);
  EXPECT_EQ(back.LocalName(1), "docs_s1_89abcdef");

  const NodeInfo n = GoldenNode();
  const std::string node_text = Golden("node_info_v1.txt", n.Encode());
  EXPECT_EQ(n.Encode(), node_text);
  ASSERT_OK_AND_ASSIGN(NodeInfo nb, NodeInfo::Decode(node_text));
  EXPECT_EQ(nb, n);
  EXPECT_EQ(nb.Find(m.uid, 1)->pending, 35u);
  EXPECT_EQ(nb.Find(m.uid, 2), nullptr);
  EXPECT_FALSE(nb.Find(m.uid, 0)->has_digest);

  // A caught-up replica's digest: a key of its own (records without it,
  // as above, read with none).
  NodeInfo d = n;
  d.hosted[0].has_digest = true;
  d.hosted[0].digest = 0xfedcba9876543210ULL;
  const std::string digest_text = d.Encode();
  EXPECT_THAT(digest_text, HasSubstr("\ndigest.0=fedcba9876543210\n"));
  ASSERT_OK_AND_ASSIGN(NodeInfo db, NodeInfo::Decode(digest_text));
  EXPECT_EQ(db, d);
  EXPECT_THAT(NodeInfo::Decode(absl::StrReplaceAll(digest_text, {{"=fedcba98", "=xyz"}})),
              StatusIs(absl::StatusCode::kDataLoss));
}

// Decoder models: the models bucket's record, and a node record saying
// which it serves (the same format 1: a reader of records without models
// lines, as above, reads them with none).
TEST(ClusterMapTest, GoldenModelRecordsOfFormat1) {
  ModelSpec spec;
  spec.name = "ptb";
  spec.dir = "lm-ptb";
  spec.m = 16;
  spec.ef_construction = 200;
  spec.default_ef = 48;
  spec.created_unix_ms = 1796000000456;
  const std::string spec_text = Golden("model_spec_v1.txt", spec.Encode());
  EXPECT_EQ(spec.Encode(), spec_text);
  ASSERT_OK_AND_ASSIGN(ModelSpec back, ModelSpec::Decode(spec_text));
  EXPECT_EQ(back, spec);
  EXPECT_TRUE(back.SameModel(spec));
  ModelSpec other = spec;
  other.dir = "lm-ptb-2";
  EXPECT_FALSE(other.SameModel(spec));
  EXPECT_THAT(ModelSpec::Decode(absl::StrReplaceAll(spec_text, {{"name=ptb", "name=a b"}})),
              StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(ModelSpec::Decode(absl::StrReplaceAll(spec_text, {{"format=1", "format=2"}})),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("upgrade")));
  EXPECT_THAT(ValidateModelSpec({"ptb", "", 0, 0, 0, 0}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--models_dir")));
  EXPECT_THAT(ValidateModelSpec({"ptb", "a\nb", 0, 0, 0, 0}),
              StatusIs(absl::StatusCode::kInvalidArgument));

  NodeInfo n = GoldenNode();
  n.models = {{"ptb", ModelLoadState::kServing}, {"big", ModelLoadState::kLoading},
              {"bad", ModelLoadState::kFailed}};
  const std::string node_text = Golden("node_info_v1_models.txt", n.Encode());
  EXPECT_EQ(n.Encode(), node_text);
  ASSERT_OK_AND_ASSIGN(NodeInfo nb, NodeInfo::Decode(node_text));
  EXPECT_EQ(nb, n);
  EXPECT_TRUE(nb.Serves("ptb"));
  EXPECT_FALSE(nb.Serves("big"));
  EXPECT_FALSE(nb.Serves("bad"));
  EXPECT_THAT(NodeInfo::Decode(absl::StrReplaceAll(node_text, {{"big,loading", "big,asleep"}})),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("asleep")));
  EXPECT_THAT(NodeInfo::Decode(absl::StrReplaceAll(node_text, {{"big,loading", "big"}})),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("model.1")));
}

// A replica's report of the entries it made durable (core NATS,
// AcksSubject).
TEST(ClusterMapTest, GoldenReplicaAckOfFormat1) {
  ReplicaAck a;
  a.node = "n2";
  a.uid = 0x0123456789abcdefULL;
  a.shard = 3;
  a.durable = 1234;
  a.applied = {{1230, "9f1c00aa77d2e4b3", 7}, {1233, "c0ffee", std::nullopt}, {1234, "", 0}};
  const std::string text = Golden("replica_ack_v1.txt", a.Encode());
  EXPECT_EQ(a.Encode(), text);
  ASSERT_OK_AND_ASSIGN(ReplicaAck back, ReplicaAck::Decode(text));
  EXPECT_EQ(back, a);
  ReplicaAck idle = a;
  idle.applied.clear();
  ASSERT_OK_AND_ASSIGN(ReplicaAck idle_back, ReplicaAck::Decode(idle.Encode()));
  EXPECT_EQ(idle_back, idle);
  EXPECT_EQ(AcksSubject("prod"), "zoomd_acks.prod");
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"1234::0", "1234"},
           {"1230:9f1c00aa77d2e4b3:7", "1230:9f1c00aa77d2e4b3:x"},
           {"1230:9f1c00aa77d2e4b3:7", "1230:9f1c00aa77d2e4b3:7:8"},
           {"1233:c0ffee", "1233:c0 ffee"},
           {"1233:c0ffee", "x:c0ffee"},
           {"shard=3", "shard=99999"},
           {"durable=1234", "durable=-1"},
           {"node=n2", "node=a b"},
           {"uid=0123456789abcdef", "uid=xyz"}}) {
    EXPECT_THAT(ReplicaAck::Decode(absl::StrReplaceAll(text, {{from, to}})),
                StatusIs(absl::StatusCode::kDataLoss))
        << to;
  }
  EXPECT_THAT(ReplicaAck::Decode(absl::StrReplaceAll(text, {{"format=1", "format=2"}})),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

// A replica that began as a copy of a peer's snapshot says so (base_node,
// base): the same format, keys an older router ignores.
TEST(ClusterMapTest, GoldenReplicaAckWithABase) {
  ReplicaAck a;
  a.node = "n1";
  a.uid = 0x0123456789abcdefULL;
  a.shard = 0;
  a.durable = 9;
  a.applied = {{9, "w9", std::nullopt}};
  a.base_node = "n0";
  a.base = 7;
  const std::string text = Golden("replica_ack_v1_base.txt", a.Encode());
  EXPECT_EQ(a.Encode(), text);
  ASSERT_OK_AND_ASSIGN(ReplicaAck back, ReplicaAck::Decode(text));
  EXPECT_EQ(back, a);
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"base=7", "base=0"},
           {"base=7", "base=x"},
           {"base_node=n0", "base_node=a b"},
           {"base_node=n0\n", ""}}) {
    EXPECT_THAT(ReplicaAck::Decode(absl::StrReplaceAll(text, {{from, to}})),
                StatusIs(absl::StatusCode::kDataLoss))
        << to;
  }
}

TEST(ClusterMapTest, MalformedRecordsAreRefused) {
  const std::string text = GoldenMap().Encode();
  auto with = [&](const std::string& from, const std::string& to) {
    return absl::StrReplaceAll(text, {{from, to}});
  };
  EXPECT_THAT(ShardMap::Decode(with("format=1", "format=2")),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("upgrade")));
  EXPECT_THAT(ShardMap::Decode(with("shard.1=n2,n0", "shard.1=n2")),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("shard.1")));
  EXPECT_THAT(ShardMap::Decode(with("shard.1=n2,n0\n", "")),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("no shard.1")));
  EXPECT_THAT(ShardMap::Decode(with("uid=0123456789abcdef", "uid=12")),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("uid")));
  EXPECT_THAT(ShardMap::Decode(with("shards=2", "shards=0")),
              StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(ShardMap::Decode(with("config=", "config=zz")),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("hex")));
  EXPECT_THAT(ShardMap::Decode(with("n2,n0", "n2,bad node")),
              StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(ShardMap::Decode("no equals sign"), StatusIs(absl::StatusCode::kDataLoss));
  const std::string node = GoldenNode().Encode();
  EXPECT_THAT(NodeInfo::Decode(absl::StrReplaceAll(node, {{"serving", "sleeping"}})),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("sleeping")));
  EXPECT_THAT(NodeInfo::Decode(absl::StrReplaceAll(node, {{",42,", ",x,"}})),
              StatusIs(absl::StatusCode::kDataLoss));
}

TEST(ClusterMapTest, NamesValidationAndPlacement) {
  EXPECT_OK(ValidateClustered("docs", 2, 3));
  EXPECT_THAT(ValidateClustered(std::string(49, 'a'), 2, 2),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("48")));
  EXPECT_THAT(ValidateClustered("docs", 0, 1),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("shards")));
  EXPECT_THAT(ValidateClustered("docs", 1, 17),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("replicas")));
  EXPECT_THAT(ValidateClustered("a.b", 1, 1), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ValidateNodeId(""), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ValidateClusterName("a b"), StatusIs(absl::StatusCode::kInvalidArgument));

  EXPECT_EQ(StreamName("prod", "docs"), "zoomd_prod_docs");
  EXPECT_EQ(ShardSubject("prod", "docs", 3), "zoomd.prod.docs.3");
  auto parsed = ParseLocalName("my_docs_s12_0000beef");
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(parsed->collection, "my_docs");
  EXPECT_EQ(parsed->shard, 12u);
  EXPECT_EQ(parsed->uid8, 0xbeefu);
  for (const char* not_local : {"docs", "docs_s1", "docs_s_0000beef", "_s1_0000beef",
                                "docs_s1_0000BEEF", "docs_s12345_0000beef", "docs_x1_0000beef"}) {
    EXPECT_FALSE(ParseLocalName(not_local).has_value()) << not_local;
  }

  ASSERT_OK_AND_ASSIGN(auto a, AssignShards({"a", "b", "c"}, 4, 2));
  EXPECT_THAT(a, ElementsAre(ElementsAre("a", "b"), ElementsAre("c", "a"), ElementsAre("b", "c"),
                             ElementsAre("a", "b")));
  for (const auto& replicas : a) EXPECT_NE(replicas[0], replicas[1]);
  EXPECT_THAT(AssignShards({"a", "b"}, 2, 3),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("2 are present")));
}

// Re-replication: a gone node's replicas go to live nodes without one of
// the shard, the least loaded first; never two of a shard on one node; a
// replica with nowhere to go stays.
TEST(ClusterMapTest, ReplaceGoneSpreadsTheReplicasOfAGoneNode) {
  ASSERT_OK_AND_ASSIGN(auto a, AssignShards({"a", "b", "c", "d"}, 4, 2));
  // a: shards 0 and 2 (a,b) (c,d) (a,b) (c,d).
  std::map<std::string, int> load;
  for (const auto& r : a) {
    for (const std::string& n : r) ++load[n];
  }
  EXPECT_EQ(ReplaceGone(&a, {"b", "c", "d", "e"}, {"a"}, &load), 2);
  for (const auto& replicas : a) {
    EXPECT_EQ(std::count(replicas.begin(), replicas.end(), "a"), 0);
    EXPECT_NE(replicas[0], replicas[1]);
  }
  // The new node e (no replica) takes both: it stays the least loaded.
  EXPECT_EQ(a[0][0], "e");
  EXPECT_EQ(a[2][0], "e");
  EXPECT_EQ(load["a"], 0);
  EXPECT_EQ(load["e"], 2);
  EXPECT_EQ(load["c"] + load["d"] + load["e"] + load["b"], 8);
  // Nowhere to go: both other nodes already hold the shard.
  std::vector<std::vector<std::string>> two = {{"x", "y"}};
  std::map<std::string, int> l2 = {{"x", 1}, {"y", 1}};
  EXPECT_EQ(ReplaceGone(&two, {"y"}, {"x"}, &l2), 0);
  EXPECT_THAT(two, ElementsAre(ElementsAre("x", "y")));
  // Nothing gone: unchanged.
  EXPECT_EQ(ReplaceGone(&two, {"x", "y", "z"}, {}, &l2), 0);
}

TEST(ClusterMapTest, ShardOfSpreadsIdsEvenly) {
  for (uint32_t shards : {2u, 3u, 16u}) {
    std::vector<int> count(shards);
    for (uint64_t id = 0; id < 160000; ++id) ++count[ShardOf(id, shards)];
    for (int c : count) {
      EXPECT_NEAR(c, 160000.0 / shards, 0.03 * 160000.0 / shards) << shards;
    }
  }
  EXPECT_EQ(ShardOf(12345, 1), 0u);
  // Fixed forever: a collection's points must stay on their shards.
  std::vector<uint32_t> pinned;
  for (uint64_t id : {0ull, 1ull, 2ull, 1000ull, 1ull << 40, ~0ull}) pinned.push_back(ShardOf(id, 16));
  EXPECT_THAT(pinned, ElementsAre(15, 1, 14, 8, 9, 0));
}

}  // namespace
}  // namespace zoom::cluster
