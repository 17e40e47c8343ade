// A cluster in one process: a nats-server (a child process), zoomd nodes
// and a router as in-process ZoomServers, a client talking to the router
// over gRPC. Writes through the router reach every replica and answer with
// write tokens; searches fan out and merge to the single node's answer;
// nodes leaving are routed around (coverage 1 while a replica of every
// shard remains; otherwise UNAVAILABLE, or a partial answer when allowed);
// what a node or a router refuses says what to do instead. A router's
// delete by filter against fake replicas whose states the test sets
// (RouterDeleteGuardTest): its guard never passes on replicas that
// disagree, nor on one that has not applied an acknowledged write.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/decoder_client.h"
#include "client/zoom_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/api/convert.h"
#include "server/cluster/cluster_map.h"
#include "server/cluster/router/cluster_backend.h"
#include "server/cluster/router/router_core.h"
#include "server/grpc/zoom_server.h"
#include "tests/testing/http_get.h"
#include "tests/testing/nats_server.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_env.h"

namespace zoom {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::zoom::testing::NatsServer;
using ::zoom::testing::StatusIs;
using ::zoom::testing::TempDir;

constexpr uint32_t kDim = 8;

std::vector<float> Vectors(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g;
  std::vector<float> v(n * kDim);
  for (float& x : v) x = g(rng);
  return v;
}

class RouterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (testing::NatsServerBinary().empty()) GTEST_SKIP() << "nats-server not installed";
    nats_ = std::make_unique<NatsServer>("solo", dir_.File("nats"));
    ASSERT_TRUE(nats_->Start()) << nats_->Log();
  }
  void TearDown() override {
    router_.reset();
    nodes_.clear();
  }
  server::ServerOptions Base(const std::string& role) {
    server::ServerOptions o;
    o.grpc_address = "127.0.0.1:0";
    o.metrics_address = "127.0.0.1:0";
    o.threads = 4;
    o.database.collection.auto_build_min_points = 0;
    o.cluster.role = *server::ParseServerRole(role);
    o.cluster.name = "rt";
    o.cluster.nats = {nats_->url()};
    o.cluster.node_ttl = absl::Seconds(10);
    o.cluster.heartbeat = absl::Milliseconds(200);
    o.models_dir = dir_.File("models");
    return o;
  }
  server::ZoomServer* StartNode(const std::string& id) {
    server::ServerOptions o = Base("node");
    o.database.data_dir = dir_.File("data-" + id);
    o.cluster.node_id = id;
    auto s = std::make_unique<server::ZoomServer>(o);
    absl::Status st = s->Start();
    EXPECT_OK(st);
    if (!st.ok()) return nullptr;
    nodes_[id] = std::move(s);
    return nodes_[id].get();
  }
  void StartRouter() {
    server::ServerOptions o = Base("router");
    o.cluster.router.refresh = absl::Milliseconds(100);
    router_ = std::make_unique<server::ZoomServer>(o);
    ASSERT_OK(router_->Start());
    client_ = client::ZoomClient::Connect(absl::StrCat("127.0.0.1:", router_->grpc_port()));
    stub_ = v1::VectorSearch::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", router_->grpc_port()), grpc::InsecureChannelCredentials()));
  }
  v1::CollectionSpec Spec(const std::string& name, uint32_t shards, uint32_t replicas) {
    v1::CollectionSpec spec;
    spec.set_name(name);
    spec.set_dim(kDim);
    spec.set_metric(v1::L2);
    spec.set_shards(shards);
    spec.set_replicas(replicas);
    return spec;
  }
  // Upserts ids [first, first + n) through the router: its tokens.
  std::vector<v1::WriteToken> Upsert(const std::string& c, uint64_t first, size_t n,
                                     const std::vector<float>& data) {
    v1::UpsertRequest req;
    req.set_collection(c);
    for (size_t i = 0; i < n; ++i) {
      v1::Point* p = req.add_points();
      p->set_id(first + i);
      p->mutable_vector()->Assign(data.begin() + i * kDim, data.begin() + (i + 1) * kDim);
      p->set_payload(absl::StrCat("p", first + i));
    }
    grpc::ClientContext ctx;
    v1::UpsertResponse resp;
    grpc::Status st = stub_->Upsert(&ctx, req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(resp.upserted(), n);
    return {resp.tokens().begin(), resp.tokens().end()};
  }
  v1::SearchRequest Query(const std::string& c, const float* q, uint32_t k) {
    v1::SearchRequest r;
    r.set_collection(c);
    r.mutable_vector()->Assign(q, q + kDim);
    r.set_k(k);
    return r;
  }

  TempDir dir_;
  std::unique_ptr<NatsServer> nats_;
  std::map<std::string, std::unique_ptr<server::ZoomServer>> nodes_;
  std::unique_ptr<server::ZoomServer> router_;
  std::unique_ptr<client::ZoomClient> client_;
  std::unique_ptr<v1::VectorSearch::Stub> stub_;
};

TEST_F(RouterTest, WritesReachEveryReplicaAndSearchesMergeToTheSingleNodesAnswer) {
  ASSERT_NE(StartNode("a"), nullptr);
  ASSERT_NE(StartNode("b"), nullptr);
  StartRouter();
  ASSERT_OK_AND_ASSIGN(v1::CollectionInfo info, client_->CreateCollection(Spec("docs", 2, 2)));
  EXPECT_EQ(info.spec().shards(), 2u);
  EXPECT_EQ(info.spec().replicas(), 2u);
  constexpr size_t kN = 1500;
  const std::vector<float> data = Vectors(kN, 7);
  std::vector<v1::WriteToken> tokens;
  for (size_t b = 0; b < kN; b += 500) {
    auto t = Upsert("docs", b, 500, std::vector<float>(data.begin() + b * kDim,
                                                       data.begin() + (b + 500) * kDim));
    ASSERT_EQ(t.size(), 2u);  // both shards touched
    tokens = t;
  }
  // A single node with the same points: the oracle.
  server::ServerOptions solo;
  solo.grpc_address = "127.0.0.1:0";
  solo.metrics_address = "";
  solo.database.data_dir = dir_.File("solo");
  solo.database.collection.auto_build_min_points = 0;
  server::ZoomServer single(solo);
  ASSERT_OK(single.Start());
  auto sc = client::ZoomClient::Connect(absl::StrCat("127.0.0.1:", single.grpc_port()));
  ASSERT_OK(sc->CreateCollection(Spec("docs", 0, 0)).status());
  v1::UpsertRequest all;
  all.set_collection("docs");
  for (size_t i = 0; i < kN; ++i) {
    v1::Point* p = all.add_points();
    p->set_id(i);
    p->mutable_vector()->Assign(data.begin() + i * kDim, data.begin() + (i + 1) * kDim);
    p->set_payload(absl::StrCat("p", i));
  }
  ASSERT_OK(sc->Upsert(all).status());

  // Session reads see every acknowledged write; exact answers equal the
  // single node's, id for id.
  const std::vector<float> queries = Vectors(20, 8);
  for (size_t q = 0; q < 20; ++q) {
    v1::SearchRequest r = Query("docs", &queries[q * kDim], 10);
    r.set_exact(true);
    r.set_with_payload(true);
    r.set_consistency(v1::SESSION);
    for (const auto& t : tokens) *r.add_after() = t;
    ASSERT_OK_AND_ASSIGN(v1::SearchResponse got, client_->Search(r));
    r.clear_after();
    r.set_consistency(v1::EVENTUAL);
    ASSERT_OK_AND_ASSIGN(v1::SearchResponse want, sc->Search(r));
    EXPECT_EQ(got.coverage(), 1.0f);
    EXPECT_FALSE(got.degraded());
    EXPECT_EQ(want.coverage(), 1.0f);
    ASSERT_EQ(got.hits_size(), want.hits_size());
    for (int i = 0; i < got.hits_size(); ++i) {
      EXPECT_EQ(got.hits(i).id(), want.hits(i).id()) << q << " " << i;
      EXPECT_FLOAT_EQ(got.hits(i).score(), want.hits(i).score());
      EXPECT_EQ(got.hits(i).payload(), absl::StrCat("p", got.hits(i).id()));
    }
  }
  // Every acknowledged write is visible: Count and Get. They are eventual
  // reads (any replica; Count and Get take no write tokens): a replica still
  // applying is asked again, bounded, as Scroll is below (the Count once
  // answered 1,251 of 1,500 from the replica behind).
  v1::CountRequest count;
  count.set_collection("docs");
  v1::GetRequest get;
  get.set_collection("docs");
  for (uint64_t id : {1499ull, 3ull, 99999ull, 3ull}) get.add_ids(id);
  absl::StatusOr<v1::CountResponse> counted;
  absl::StatusOr<v1::GetResponse> got_points;
  absl::StatusOr<v1::CollectionInfo> aggregated;
  const absl::Time visible_end = absl::Now() + absl::Seconds(30);
  do {
    counted = client_->Count(count);
    got_points = client_->Get(get);
    aggregated = client_->GetCollection("docs");
    if (counted.ok() && counted->count() == kN && got_points.ok() &&
        got_points->points_size() == 3 && aggregated.ok() && aggregated->points() == kN) {
      break;
    }
    absl::SleepFor(absl::Milliseconds(50));
  } while (absl::Now() < visible_end);
  EXPECT_THAT(counted, testing::IsOkAndHolds(::testing::Property(
                           &v1::CountResponse::count, kN)));
  ASSERT_OK_AND_ASSIGN(v1::GetResponse g, std::move(got_points));
  ASSERT_EQ(g.points_size(), 3);
  EXPECT_EQ(g.points(0).id(), 1499u);
  EXPECT_EQ(g.points(1).id(), 3u);
  EXPECT_EQ(g.points(2).id(), 3u);
  ASSERT_OK_AND_ASSIGN(v1::CollectionInfo agg, std::move(aggregated));
  EXPECT_EQ(agg.points(), kN);
  // Scroll pages through both shards in id order (eventual reads: a page
  // from a replica still applying is paged again, bounded).
  std::vector<uint64_t> paged;
  const absl::Time scroll_end = absl::Now() + absl::Seconds(30);
  while (paged.size() != kN && absl::Now() < scroll_end) {
    paged.clear();
    v1::ScrollRequest scroll;
    scroll.set_collection("docs");
    scroll.set_limit(97);
    scroll.set_with_payload(true);
    for (int pages = 0; pages < 100; ++pages) {
      ASSERT_OK_AND_ASSIGN(v1::ScrollResponse page, client_->Scroll(scroll));
      EXPECT_LE(page.points_size(), 97);
      for (const v1::Point& p : page.points()) {
        EXPECT_EQ(p.payload(), absl::StrCat("p", p.id()));
        paged.push_back(p.id());
      }
      if (!page.has_next_offset()) break;
      scroll.set_offset(page.next_offset());
    }
  }
  ASSERT_EQ(paged.size(), kN);
  for (uint64_t i = 0; i < kN; ++i) ASSERT_EQ(paged[i], i);
  // Compact runs on every replica.
  ASSERT_OK_AND_ASSIGN(v1::CollectionInfo compacted, client_->Compact("docs"));
  EXPECT_EQ(compacted.points(), kN);
  // Delete by filter: what matches when the router reads it, on both shards.
  {
    v1::DeleteRequest del;
    del.set_collection("docs");
    v1::Condition* has = del.mutable_filter()->add_must();
    for (uint64_t id = 10; id < 20; ++id) has->add_has_id(id);
    for (uint64_t id = 1000; id < 1010; ++id) has->add_has_id(id);
    grpc::ClientContext ctx;
    v1::DeleteResponse out;
    grpc::Status st = stub_->Delete(&ctx, del, &out);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(out.deleted(), 20u);
    EXPECT_EQ(out.tokens_size(), 2);
    v1::DeleteRequest empty;
    empty.set_collection("docs");
    empty.mutable_filter();
    grpc::ClientContext ctx2;
    EXPECT_EQ(stub_->Delete(&ctx2, empty, &out).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    // A nested empty filter is a match-all filter, refused the same way;
    // one that matches every live point deletes nothing without `all`.
    empty.mutable_filter()->add_must()->mutable_filter();
    grpc::ClientContext ctx3;
    EXPECT_EQ(stub_->Delete(&ctx3, empty, &out).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    v1::DeleteRequest every;
    every.set_collection("docs");
    every.mutable_filter()->add_must_not()->add_has_id(kN + 7);  // no such point
    grpc::ClientContext ctx4;
    grpc::Status refused = stub_->Delete(&ctx4, every, &out);
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_THAT(refused.error_message(), ::testing::HasSubstr("all: true"));
    uint64_t left = 0;
    const absl::Time end = absl::Now() + absl::Seconds(30);
    while (absl::Now() < end) {
      auto c = client_->Count(count);
      left = c.ok() ? c->count() : 0;
      if (left == kN - 20) break;
      absl::SleepFor(absl::Milliseconds(20));
    }
    EXPECT_EQ(left, kN - 20);
  }

  // A replica leaves: the other serves every shard, coverage 1.
  nodes_.at("b")->Shutdown(absl::Seconds(1));
  nodes_.erase("b");
  for (size_t q = 0; q < 20; ++q) {
    v1::SearchRequest r = Query("docs", &queries[q * kDim], 10);
    ASSERT_OK_AND_ASSIGN(v1::SearchResponse got, client_->Search(r));
    EXPECT_EQ(got.coverage(), 1.0f);
    EXPECT_EQ(got.hits_size(), 10);
  }
  // Deletes through the router. Under MAJORITY (the default) a write needs
  // both replicas of its shard at R = 2: with b gone it is not
  // acknowledged (no deadline: the router's 10 s), and the answer names
  // the replica that had it. Under LOG the log's acknowledgement is enough.
  v1::DeleteRequest del;
  del.set_collection("docs");
  for (uint64_t id : {0, 1, 2}) del.add_ids(id);
  EXPECT_THAT(client_->Delete(del, absl::InfiniteDuration()),
              StatusIs(absl::StatusCode::kUnavailable,
                       AllOf(HasSubstr("write concern majority needs 2"),
                             HasSubstr("a of its replicas"), HasSubstr("may or may not be kept"),
                             HasSubstr("retrying the same request is safe"))));
  del.set_write_concern(v1::WRITE_CONCERN_LOG);
  ASSERT_OK_AND_ASSIGN(v1::DeleteResponse d, client_->Delete(del, absl::Seconds(60)));
  EXPECT_EQ(d.write_concern(), v1::WRITE_CONCERN_LOG);
  EXPECT_EQ(d.deleted(), 3u);  // under LOG: the ids sent
  for (const v1::WriteToken& t : d.tokens()) EXPECT_EQ(t.acknowledged_by_size(), 0);
  // Gone from the answers.
  EXPECT_THAT(client_->Count(count), testing::IsOkAndHolds(::testing::Property(
                                         &v1::CountResponse::count, ::testing::Le(kN - 20))));
}

// With more shards than two each is asked for about twice its share of a
// page: pages may come out shorter than the limit, never with a point
// missing, twice, or out of order.
TEST_F(RouterTest, ScrollPagesEveryShardInIdOrder) {
  ASSERT_NE(StartNode("a"), nullptr);
  ASSERT_NE(StartNode("b"), nullptr);
  StartRouter();
  ASSERT_OK(client_->CreateCollection(Spec("many", 4, 1)).status());
  constexpr size_t kN = 1200;
  const std::vector<float> data = Vectors(kN, 12);
  for (size_t b = 0; b < kN; b += 400) {
    Upsert("many", b, 400, std::vector<float>(data.begin() + b * kDim,
                                              data.begin() + (b + 400) * kDim));
  }
  for (uint32_t limit : {1u, 7u, 200u, 5000u}) {
    std::vector<uint64_t> paged;
    const absl::Time end = absl::Now() + absl::Seconds(30);
    while (paged.size() != kN && absl::Now() < end) {  // eventual reads: again, bounded
      paged.clear();
      v1::ScrollRequest scroll;
      scroll.set_collection("many");
      scroll.set_limit(limit);
      for (size_t pages = 0; pages < 2 * kN + 2; ++pages) {
        ASSERT_OK_AND_ASSIGN(v1::ScrollResponse page, client_->Scroll(scroll));
        EXPECT_LE(page.points_size(), static_cast<int>(limit));
        for (const v1::Point& p : page.points()) paged.push_back(p.id());
        if (!page.has_next_offset()) break;
        ASSERT_GT(page.next_offset(), scroll.offset());  // always progress
        scroll.set_offset(page.next_offset());
      }
    }
    ASSERT_EQ(paged.size(), kN) << limit;
    for (uint64_t i = 0; i < kN; ++i) ASSERT_EQ(paged[i], i) << limit;
  }
}

TEST_F(RouterTest, AShardWithoutReplicasIsUnavailableOrPartialWhenAllowed) {
  ASSERT_NE(StartNode("a"), nullptr);
  ASSERT_NE(StartNode("b"), nullptr);
  StartRouter();
  // One replica a shard on two nodes: a's shard and b's.
  ASSERT_OK(client_->CreateCollection(Spec("thin", 2, 1)).status());
  const std::vector<float> data = Vectors(400, 9);
  auto tokens = Upsert("thin", 0, 400, data);
  v1::SearchRequest r = Query("thin", data.data(), 10);
  r.set_consistency(v1::SESSION);
  for (const auto& t : tokens) *r.add_after() = t;
  ASSERT_OK_AND_ASSIGN(v1::SearchResponse full, client_->Search(r));
  EXPECT_EQ(full.coverage(), 1.0f);
  nodes_.at("b")->Shutdown(absl::Seconds(1));
  nodes_.erase("b");
  r.set_consistency(v1::EVENTUAL);
  const absl::Time t0 = absl::Now();
  EXPECT_THAT(client_->Search(r, absl::Seconds(5)),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("allow_partial")));
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5));
  r.set_allow_partial(true);
  ASSERT_OK_AND_ASSIGN(v1::SearchResponse half, client_->Search(r));
  EXPECT_EQ(half.coverage(), 0.5f);
  EXPECT_TRUE(half.degraded());
  EXPECT_GT(half.hits_size(), 0);
  r.set_allow_partial(false);
  r.set_min_coverage(0.5f);
  EXPECT_OK(client_->Search(r).status());
  r.set_min_coverage(0.75f);
  EXPECT_THAT(client_->Search(r), StatusIs(absl::StatusCode::kUnavailable));
}

TEST_F(RouterTest, WhatNodesAndRoutersRefuseSaysWhatToDo) {
  server::ZoomServer* a = StartNode("a");
  ASSERT_NE(a, nullptr);
  StartRouter();
  EXPECT_THAT(client_->CreateCollection(Spec("docs", 1, 2)),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("1 are present")));
  EXPECT_THAT(client_->CreateCollection(Spec(std::string(49, 'x'), 1, 1)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("48")));
  ASSERT_OK(client_->CreateCollection(Spec("docs", 0, 0)).status());
  EXPECT_THAT(client_->CreateCollection(Spec("docs", 1, 1)),
              StatusIs(absl::StatusCode::kAlreadyExists));
  v1::SearchRequest r = Query("nope", Vectors(1, 1).data(), 10);
  EXPECT_THAT(client_->Search(r), StatusIs(absl::StatusCode::kNotFound, HasSubstr("nope")));
  r.set_collection("docs");
  r.set_min_coverage(2.0f);
  EXPECT_THAT(client_->Search(r),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("min_coverage")));
  v1::UpsertRequest bad;
  bad.set_collection("docs");
  bad.add_points()->set_id(1);  // no vector
  EXPECT_THAT(client_->Upsert(bad),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dimensions")));
  v1::Point* nan = bad.mutable_points(0);
  for (uint32_t i = 0; i < kDim; ++i) nan->add_vector(i == 3 ? NAN : 1.0f);
  EXPECT_THAT(client_->Upsert(bad), StatusIs(absl::StatusCode::kInvalidArgument));
  // Snapshots are routed (ClusterSnapshots): one archive of every shard,
  // kept by the router.
  absl::StatusOr<v1::SnapshotInfo> snap = client_->CreateSnapshot("docs");
  ASSERT_OK(snap.status());
  EXPECT_EQ(snap->collection(), "docs");
  EXPECT_THAT(client_->CreateSnapshot("nope"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("nope")));
  // Import through the router: each message a logged upsert; visible once
  // applied (eventual reads: waited for, bounded).
  const std::vector<float> data = Vectors(250, 3);
  EXPECT_THAT(client_->Import(
                  "docs", 250,
                  [&](uint64_t i, v1::Point* p) {
                    p->set_id(i);
                    p->mutable_vector()->Assign(data.begin() + i * kDim,
                                                data.begin() + (i + 1) * kDim);
                  },
                  100),
              testing::IsOkAndHolds(250u));
  v1::CountRequest count;
  count.set_collection("docs");
  uint64_t seen = 0;
  const absl::Time end = absl::Now() + absl::Seconds(30);
  while (seen != 250 && absl::Now() < end) {
    auto c = client_->Count(count);
    seen = c.ok() ? c->count() : 0;
    if (seen != 250) absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(seen, 250u);
  // A node takes no writes but from its log.
  auto direct = client::ZoomClient::Connect(absl::StrCat("127.0.0.1:", a->grpc_port()));
  // A write token past the end of its shard's log is refused at once, not
  // waited for until the call's deadline.
  auto local = direct->ListCollections();
  ASSERT_OK(local.status());
  ASSERT_EQ(local->size(), 1u);
  auto node_stub = v1::VectorSearch::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", a->grpc_port()), grpc::InsecureChannelCredentials()));
  for (bool build : {true, false}) {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
    v1::WriteToken far;
    far.set_shard(0);
    far.set_sequence(1000000000);
    grpc::Status st;
    if (build) {
      v1::BuildIndexRequest req;
      req.set_collection((*local)[0].spec().name());
      *req.add_after() = far;
      v1::BuildIndexResponse resp;
      st = node_stub->BuildIndex(&ctx, req, &resp);
    } else {
      v1::SearchRequest req = Query((*local)[0].spec().name(), data.data(), 5);
      req.set_consistency(v1::SESSION);
      *req.add_after() = far;
      v1::SearchResponse resp;
      st = node_stub->Search(&ctx, req, &resp);
    }
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << build;
    EXPECT_THAT(st.error_message(), HasSubstr("past the end")) << build;
  }
  EXPECT_THAT(direct->CreateCollection(Spec("mine", 0, 0)),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("router")));
  // A standalone zoomd takes no shards.
  server::ServerOptions solo;
  solo.grpc_address = "127.0.0.1:0";
  solo.metrics_address = "";
  solo.database.data_dir = dir_.File("solo");
  server::ZoomServer single(solo);
  ASSERT_OK(single.Start());
  auto sc = client::ZoomClient::Connect(absl::StrCat("127.0.0.1:", single.grpc_port()));
  EXPECT_THAT(sc->CreateCollection(Spec("docs", 2, 1)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("router")));
  // Roles and flags that cannot work are refused: a role by its parse (zoomd
  // exits 2 saying so), a router without NATS at start.
  EXPECT_THAT(server::ParseServerRole("primary"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--role")));
  server::ServerOptions o = Base("router");
  o.cluster.nats.clear();
  EXPECT_THAT(server::ZoomServer(o).Start(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--nats")));
  // A data directory of another node is not taken.
  o = Base("node");
  o.database.data_dir = dir_.File("data-a");
  o.cluster.node_id = "z";
  a->Shutdown(absl::Seconds(1));
  EXPECT_THAT(server::ZoomServer(o).Start(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("node 'a'")));
}

// A softmax layer of kWords words in kDim dimensions, as an LM export
// (W.f32, b.f32, vocab.txt, meta.json); the exact top-k of a context.
struct TinyModel {
  static constexpr uint32_t kWords = 300;
  std::vector<float> W, b;
  explicit TinyModel(const std::string& dir) : W(Vectors(kWords, 11)), b(kWords) {
    std::mt19937 rng(5);
    std::normal_distribution<float> g(0, 0.1f);
    for (float& x : b) x = g(rng);
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/W.f32", std::ios::binary)
        .write(reinterpret_cast<const char*>(W.data()), W.size() * 4);
    std::ofstream(dir + "/b.f32", std::ios::binary)
        .write(reinterpret_cast<const char*>(b.data()), b.size() * 4);
    std::ofstream vocab(dir + "/vocab.txt");
    for (uint32_t i = 0; i < kWords; ++i) vocab << "w" << i << "\n";
    std::ofstream(dir + "/meta.json") << "{\"vocab_size\": " << kWords << ", \"dim\": " << kDim
                                      << "}\n";
  }
  std::vector<uint32_t> Top(const float* h, uint32_t k) const {
    std::vector<std::pair<double, uint32_t>> z(kWords);
    for (uint32_t i = 0; i < kWords; ++i) {
      double s = b[i];
      for (uint32_t j = 0; j < kDim; ++j) s += double{W[i * kDim + j]} * h[j];
      z[i] = {-s, i};
    }
    std::partial_sort(z.begin(), z.begin() + k, z.end());
    std::vector<uint32_t> ids;
    for (uint32_t i = 0; i < k; ++i) ids.push_back(z[i].second);
    return ids;
  }
};

// TopK calls node `n` has answered (its /metrics).
double TopKCalls(server::ZoomServer* n) {
  auto body = testing::HttpGet("127.0.0.1", n->metrics_port(), "/metrics");
  if (!body.ok()) return -1;
  double total = 0;
  for (absl::string_view line : absl::StrSplit(*body, '\n')) {
    if (absl::StartsWith(line, "zoomd_rpc_requests_total{") &&
        absl::StrContains(line, "rpc=\"TopK\"")) {
      double v = 0;
      if (absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &v)) total += v;
    }
  }
  return total;
}

// A NATS server with a small max_payload on purpose (zoomd's deployments
// give it 8 MB): a point or fields that cannot fit one log entry are
// refused, saying the cap and the max_payload every write needs; a batch
// larger than the cap is split into entries.
TEST_F(RouterTest, WhatDoesNotFitTheNatsMaxPayloadIsRefusedSayingWhatItNeeds) {
  nats_->Signal(SIGKILL);
  nats_->set_max_payload(64 << 10);
  ASSERT_TRUE(nats_->Start()) << nats_->Log();
  ASSERT_NE(StartNode("a"), nullptr);
  StartRouter();
  ASSERT_OK(client_->CreateCollection(Spec("docs", 1, 1)).status());
  const std::vector<float> data = Vectors(5, 4);
  auto point = [&](v1::UpsertRequest* req, uint64_t id, size_t payload) {
    v1::Point* p = req->add_points();
    p->set_id(id);
    p->mutable_vector()->Assign(data.begin() + id * kDim, data.begin() + (id + 1) * kDim);
    p->set_payload(std::string(payload, 'x'));
  };
  v1::UpsertRequest big;
  big.set_collection("docs");
  point(&big, 0, 100000);
  // 1 MiB as the request counts it, up to 2.25x in the log; 8-d vectors.
  const std::string needs = absl::StrCat("a max_payload of at least ",
                                         (uint64_t{1} << 20) / 4 * 9 + 4 * kDim + (64 << 10));
  EXPECT_THAT(client_->Upsert(big),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("point 0 (#0) is 100"),
                             HasSubstr("a log entry is at most 64512 bytes (the NATS servers' "
                                       "max_payload of 65536 less 1024)"),
                             HasSubstr(needs))));
  v1::SetPayloadRequest fields;
  fields.set_collection("docs");
  fields.add_ids(0);
  (*fields.mutable_fields())["big"].set_string_value(std::string(100000, 'y'));
  EXPECT_THAT(client_->SetPayload(fields),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("the request's fields are 100"), HasSubstr(needs))));
  // Five points of 30,000 bytes: three entries, one write.
  v1::UpsertRequest batch;
  batch.set_collection("docs");
  for (uint64_t id = 0; id < 5; ++id) point(&batch, id, 30000);
  EXPECT_THAT(client_->Upsert(batch), testing::IsOkAndHolds(5u));
}

TEST_F(RouterTest, DecoderModelsAreServedByEveryNodeInTurn) {
  const TinyModel model(dir_.File("models/tiny"));
  server::ZoomServer* a = StartNode("a");
  server::ZoomServer* b = StartNode("b");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  StartRouter();
  client::ClientOptions copts;
  copts.timeout = absl::Seconds(60);
  auto dec = client::DecoderClient::Connect(absl::StrCat("127.0.0.1:", router_->grpc_port()),
                                            copts);
  // A node loads only what the cluster says.
  auto direct = client::DecoderClient::Connect(absl::StrCat("127.0.0.1:", a->grpc_port()), copts);
  EXPECT_THAT(direct->LoadModel("tiny", "tiny", true),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("router")));
  EXPECT_THAT(direct->UnloadModel("tiny"), StatusIs(absl::StatusCode::kFailedPrecondition));

  // Loaded through the router: every node serves it once the call returns.
  ASSERT_OK_AND_ASSIGN(v1::ModelInfo info, dec->LoadModel("tiny", "tiny", true, 8, 40));
  EXPECT_EQ(info.state(), v1::SERVING);
  EXPECT_EQ(info.vocab_size(), TinyModel::kWords);
  for (server::ZoomServer* n : {a, b}) {
    auto on = client::DecoderClient::Connect(absl::StrCat("127.0.0.1:", n->grpc_port()), copts);
    ASSERT_OK_AND_ASSIGN(auto models, on->ListModels());
    ASSERT_EQ(models.size(), 1u);
    EXPECT_EQ(models[0].state(), v1::SERVING);
  }
  // The same again: ALREADY_EXISTS, as on a standalone (one answer on both
  // backends; the conformance suite's LoadModel.same_again).
  EXPECT_THAT(dec->LoadModel("tiny", "tiny", true, 8, 40),
              StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr("unload it first")));
  EXPECT_THAT(dec->LoadModel("tiny", "other", false),
              StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr("unload it first")));
  EXPECT_THAT(dec->LoadModel("bad name", "tiny", false),
              StatusIs(absl::StatusCode::kInvalidArgument));

  // TopK goes to the nodes in turn and answers as the exact softmax does.
  const std::vector<float> contexts = Vectors(20, 21);
  const double a0 = TopKCalls(a), b0 = TopKCalls(b);
  for (size_t i = 0; i < 20; ++i) {
    v1::TopKRequest req;
    req.set_model("tiny");
    req.set_k(5);
    req.set_exact(true);
    req.add_contexts()->mutable_h()->Assign(contexts.begin() + i * kDim,
                                            contexts.begin() + (i + 1) * kDim);
    ASSERT_OK_AND_ASSIGN(v1::TopKResponse r, dec->TopK(req));
    ASSERT_EQ(r.results_size(), 1);
    const std::vector<uint32_t> want = model.Top(contexts.data() + i * kDim, 5);
    EXPECT_EQ(std::vector<uint32_t>(r.results(0).ids().begin(), r.results(0).ids().end()), want);
  }
  EXPECT_EQ(TopKCalls(a) - a0, 10);
  EXPECT_EQ(TopKCalls(b) - b0, 10);
  // A stream's steps too.
  {
    auto stream = dec->OpenStream();
    for (size_t i = 0; i < 3; ++i) {
      v1::TopKRequest step;
      step.set_model("tiny");
      step.set_k(3);
      step.set_exact(true);
      step.add_contexts()->mutable_h()->Assign(contexts.begin() + i * kDim,
                                               contexts.begin() + (i + 1) * kDim);
      ASSERT_OK_AND_ASSIGN(v1::TopKResponse r, stream->Step(step));
      EXPECT_EQ(r.results(0).ids(0), model.Top(contexts.data() + i * kDim, 1)[0]);
    }
    EXPECT_OK(stream->Finish());
  }
  // Bad input is the node's answer, not a failover.
  v1::TopKRequest bad;
  bad.set_model("tiny");
  bad.set_k(5);
  bad.add_contexts()->add_h(1.0f);  // 1 float, not kDim
  EXPECT_THAT(dec->TopK(bad), StatusIs(absl::StatusCode::kInvalidArgument));
  v1::TopKRequest none = bad;
  none.set_model("nope");
  EXPECT_THAT(dec->TopK(none), StatusIs(absl::StatusCode::kNotFound, HasSubstr("nope")));

  // A model the nodes cannot read fails the load with the node's own answer
  // (a standalone's: the load's code, "model 'x' cannot be loaded: ...")
  // and is not left behind.
  std::filesystem::create_directories(dir_.File("models/empty"));
  EXPECT_THAT(dec->LoadModel("broken", "empty", true),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("model 'broken' cannot be loaded: ")));
  ASSERT_OK_AND_ASSIGN(auto listed, dec->ListModels());
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].name(), "tiny");

  // A node gone: the other answers every call.
  a->Shutdown(absl::Seconds(1));
  for (size_t i = 0; i < 6; ++i) {
    v1::TopKRequest req;
    req.set_model("tiny");
    req.set_k(5);
    req.add_contexts()->mutable_h()->Assign(contexts.begin(), contexts.begin() + kDim);
    EXPECT_OK(dec->TopK(req).status()) << i;
  }
  // Unloaded through the router: the nodes unload it.
  ASSERT_OK(dec->UnloadModel("tiny"));
  EXPECT_THAT(dec->UnloadModel("tiny"), StatusIs(absl::StatusCode::kNotFound));
  auto on_b = client::DecoderClient::Connect(absl::StrCat("127.0.0.1:", b->grpc_port()), copts);
  const absl::Time end = absl::Now() + absl::Seconds(30);
  size_t left = 1;
  while (left != 0 && absl::Now() < end) {
    auto models = on_b->ListModels();
    left = models.ok() ? models->size() : 1;
    if (left != 0) absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(left, 0u);
  v1::TopKRequest req;
  req.set_model("tiny");
  req.set_k(5);
  req.add_contexts()->mutable_h()->Assign(contexts.begin(), contexts.begin() + kDim);
  EXPECT_THAT(dec->TopK(req), StatusIs(absl::StatusCode::kNotFound));
}


// ---- A delete by filter's guard, against fake replicas ----------------------------
//
// A router's ClusterBackend over a real NATS (the catalog, the shard's log)
// and two fake replicas of a one-shard collection: in-process
// zoom.v1.VectorSearch servers whose Count and Scroll answer from a state
// the test sets (the live ids, the log position applied), so that the two
// replicas disagree exactly as the test says, with no timing involved.

// Passes a filter of has_id conditions (must: one of these ids; must_not:
// none of them), the only ones these tests send.
bool PassesIds(const v1::Filter* f, uint64_t id) {
  if (f == nullptr) return true;
  const auto in = [id](const v1::Condition& c) {
    return std::find(c.has_id().begin(), c.has_id().end(), id) != c.has_id().end();
  };
  for (const v1::Condition& c : f->must()) {
    if (!in(c)) return false;
  }
  for (const v1::Condition& c : f->must_not()) {
    if (in(c)) return false;
  }
  return true;
}

class FakeReplica final : public v1::VectorSearch::CallbackService {
 public:
  FakeReplica() {
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.RegisterService(this);
    server_ = b.BuildAndStart();
    address_ = absl::StrCat("127.0.0.1:", port);
  }
  ~FakeReplica() override {
    server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
    server_->Wait();
  }
  const std::string& address() const { return address_; }

  // The replica's state: its live ids, and the last log sequence applied.
  void Set(std::set<uint64_t> live, uint64_t applied) {
    absl::MutexLock l(&mu_);
    live_ = std::move(live);
    applied_ = applied;
  }
  // Every call fails UNAVAILABLE (a replica down).
  void SetDown(bool down) {
    absl::MutexLock l(&mu_);
    down_ = down;
  }
  // A Count without a filter fails UNAVAILABLE: a count with one and a
  // count without one are then answered by different replicas.
  void SetFailUnfilteredCounts(bool fail) {
    absl::MutexLock l(&mu_);
    fail_unfiltered_ = fail;
  }
  int scrolls() {
    absl::MutexLock l(&mu_);
    return scrolls_;
  }

  grpc::ServerUnaryReactor* Count(grpc::CallbackServerContext* ctx, const v1::CountRequest* req,
                                  v1::CountResponse* resp) override {
    grpc::Status st = grpc::Status::OK;
    {
      absl::MutexLock l(&mu_);
      if (down_ || (fail_unfiltered_ && !req->has_filter())) {
        st = grpc::Status(grpc::StatusCode::UNAVAILABLE, "down");
      } else {
        uint64_t matched = 0;
        for (uint64_t id : live_) {
          matched += PassesIds(req->has_filter() ? &req->filter() : nullptr, id) ? 1 : 0;
        }
        resp->set_count(matched);
        resp->set_live(live_.size());
        resp->set_applied(applied_);
      }
    }
    grpc::ServerUnaryReactor* r = ctx->DefaultReactor();
    r->Finish(st);
    return r;
  }

  grpc::ServerUnaryReactor* Scroll(grpc::CallbackServerContext* ctx,
                                   const v1::ScrollRequest* req,
                                   v1::ScrollResponse* resp) override {
    grpc::Status st = grpc::Status::OK;
    {
      absl::MutexLock l(&mu_);
      ++scrolls_;
      if (down_) {
        st = grpc::Status(grpc::StatusCode::UNAVAILABLE, "down");
      } else {
        const v1::Filter* f = req->has_filter() ? &req->filter() : nullptr;
        for (auto it = live_.lower_bound(req->offset()); it != live_.end(); ++it) {
          if (!PassesIds(f, *it)) continue;
          if (resp->points_size() == static_cast<int>(req->limit())) {
            resp->set_next_offset(*it);
            break;
          }
          resp->add_points()->set_id(*it);
        }
      }
    }
    grpc::ServerUnaryReactor* r = ctx->DefaultReactor();
    r->Finish(st);
    return r;
  }

 private:
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  absl::Mutex mu_;
  std::set<uint64_t> live_ ABSL_GUARDED_BY(mu_);
  uint64_t applied_ ABSL_GUARDED_BY(mu_) = 0;
  bool down_ ABSL_GUARDED_BY(mu_) = false;
  bool fail_unfiltered_ ABSL_GUARDED_BY(mu_) = false;
  int scrolls_ ABSL_GUARDED_BY(mu_) = 0;
};

class RouterDeleteGuardTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kN = 1500;

  void SetUp() override {
    if (testing::NatsServerBinary().empty()) GTEST_SKIP() << "nats-server not installed";
    nats_ = std::make_unique<NatsServer>("solo", dir_.File("nats"));
    ASSERT_TRUE(nats_->Start()) << nats_->Log();
    server::router::RouterOptions o;
    o.catalog.cluster = "dg";
    o.catalog.node_ttl = absl::Minutes(10);  // no heartbeats: the records stay
    o.nats.servers = {nats_->url()};
    ASSERT_OK_AND_ASSIGN(core_, server::router::RouterCore::Create(o, {}));
    for (const char* id : {"a", "b"}) {
      replicas_[id] = std::make_unique<FakeReplica>();
      ASSERT_OK(Heartbeat(id));
    }
    server::CollectionConfig config;
    config.name = "docs";
    config.dim = kDim;
    ASSERT_OK_AND_ASSIGN(map_, core_->catalog().CreateCollection(config, 1, 2));
    ASSERT_EQ(map_.assignment.at(0).size(), 2u);
    for (const char* id : {"a", "b"}) ASSERT_OK(Heartbeat(id));  // now hosting the shard
    ASSERT_OK(core_->Refresh());
    backend_ = std::make_unique<server::router::ClusterBackend>(
        core_.get(), server::ServiceLimits{}, server::router::ClusterBackend::Defaults{});
  }
  void TearDown() override {
    backend_.reset();
    core_.reset();
    replicas_.clear();
  }

  // The node's record: a serving replica of the shard once the map exists.
  absl::Status Heartbeat(const std::string& id) {
    cluster::NodeInfo n;
    n.node = id;
    n.address = replicas_.at(id)->address();
    n.heartbeat_unix_ms = absl::ToUnixMillis(absl::Now());
    if (map_.uid != 0) {
      cluster::HostedShard h;
      h.collection = map_.LocalName(0);
      h.uid = map_.uid;
      h.shard = 0;
      h.state = cluster::ReplicaState::kServing;
      n.hosted.push_back(h);
    }
    return core_->catalog().PutNode(n);
  }
  // The last sequence of the shard's log: what the router has published.
  uint64_t Head() {
    absl::StatusOr<uint64_t> h = core_->js().LastSequence(cluster::StreamName("dg", "docs"),
                                                         cluster::ShardSubject("dg", "docs", 0));
    EXPECT_OK(h.status());
    return h.value_or(0);
  }
  // The fake replicas apply nothing and report no durable position: the
  // writes here are acknowledged by the log (LOG); the guard is the test.
  absl::StatusOr<server::api::WriteAnswer> DeleteIds(const std::vector<uint64_t>& ids) {
    server::api::DeleteRequest r;
    r.collection = "docs";
    r.ids = ids;
    r.concern = server::api::WriteConcern::kLog;
    server::api::Call call;
    call.deadline = absl::Now() + absl::Seconds(10);
    return backend_->Delete(call, r);
  }
  // A delete by filter as the adapter runs it (converted, then the backend).
  absl::StatusOr<server::api::WriteAnswer> DeleteWhere(const v1::Filter& f, bool all = false,
                                                       absl::Duration within = absl::Seconds(10)) {
    v1::DeleteRequest req;
    req.set_collection("docs");
    *req.mutable_filter() = f;
    req.set_all(all);
    req.set_write_concern(v1::WRITE_CONCERN_LOG);
    absl::StatusOr<server::api::DeleteRequest> r =
        server::api::FromProto(req, server::ServiceLimits{});
    if (!r.ok()) return r.status();
    server::api::Call call;
    call.deadline = absl::Now() + within;
    return backend_->Delete(call, *r);
  }
  static std::set<uint64_t> Ids(uint64_t from, uint64_t to) {
    std::set<uint64_t> s;
    for (uint64_t i = from; i < to; ++i) s.insert(i);
    return s;
  }
  // kN points, 20 of them (ids 10..29) deleted by id through the router:
  // replica a has applied that delete, replica b has not. Returns the
  // delete's sequence. A filter excluding those 20 ids then matches every
  // point a holds, and 1,480 of b's 1,500.
  uint64_t DeleteTwentyAppliedByAOnly(v1::Filter* every_left) {
    std::vector<uint64_t> twenty;
    for (uint64_t id = 10; id < 30; ++id) twenty.push_back(id);
    absl::StatusOr<server::api::WriteAnswer> del = DeleteIds(twenty);
    EXPECT_OK(del.status());
    const uint64_t h = Head();
    EXPECT_GT(h, 0u);
    std::set<uint64_t> left = Ids(0, kN);
    for (uint64_t id : twenty) left.erase(id);
    replicas_.at("a")->Set(left, h);
    replicas_.at("b")->Set(Ids(0, kN), h - 1);
    every_left->Clear();
    v1::Condition* c = every_left->add_must_not();
    for (uint64_t id : twenty) c->add_has_id(id);
    return h;
  }

  TempDir dir_;
  std::unique_ptr<NatsServer> nats_;
  std::unique_ptr<server::router::RouterCore> core_;
  std::map<std::string, std::unique_ptr<FakeReplica>> replicas_;
  cluster::ShardMap map_;
  std::unique_ptr<server::router::ClusterBackend> backend_;
};

// The replicas disagree (a applied the delete of 20 points, b not yet);
// the filter matches all 1,480 points left. Replica a answers no count
// without a filter, so that a guard made of two counts takes the matches
// from one replica and the live points from the other (1,480 < 1,500) and
// passes: it then deleted every point. The router must refuse, and
// publish nothing.
TEST_F(RouterDeleteGuardTest, ReplicasThatDisagreeNeverLetAFilterMatchingEverythingPass) {
  v1::Filter every_left;
  const uint64_t h = DeleteTwentyAppliedByAOnly(&every_left);
  replicas_.at("a")->SetFailUnfilteredCounts(true);
  EXPECT_THAT(DeleteWhere(every_left),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("matches all 1480 live points of 'docs'"),
                             HasSubstr("nothing was deleted"), HasSubstr("all: true"))));
  EXPECT_EQ(Head(), h);  // no delete published
  EXPECT_EQ(replicas_.at("a")->scrolls() + replicas_.at("b")->scrolls(), 0);
}

// Only the replica that has not applied the acknowledged delete answers:
// its own count and live points (1,480 < 1,500) say the filter is narrow,
// but they are not the collection as acknowledged. Nothing is deleted.
TEST_F(RouterDeleteGuardTest, AReplicaBehindTheLogIsNotTrustedForTheGuard) {
  v1::Filter every_left;
  const uint64_t h = DeleteTwentyAppliedByAOnly(&every_left);
  replicas_.at("a")->SetDown(true);
  // b answers from behind until the deadline (a round the deadline cuts
  // short still counts it as behind: the message does not depend on where
  // the deadline falls).
  EXPECT_THAT(DeleteWhere(every_left, false, absl::Seconds(3)),
              StatusIs(absl::StatusCode::kUnavailable,
                       AllOf(HasSubstr("no replica has applied the writes acknowledged"),
                             HasSubstr(absl::StrCat("its log is at ", h)),
                             HasSubstr("0 points passing the filter were deleted"))));
  EXPECT_EQ(Head(), h);
  EXPECT_EQ(replicas_.at("b")->scrolls(), 0);
}

// No replica of the shard answers: the guard cannot be read, and the call
// fails rather than passes.
TEST_F(RouterDeleteGuardTest, AShardWithNoReplicaAnsweringDeletesNothing) {
  v1::Filter every_left;
  const uint64_t h = DeleteTwentyAppliedByAOnly(&every_left);
  replicas_.at("a")->SetDown(true);
  replicas_.at("b")->SetDown(true);
  v1::Filter narrow;
  narrow.add_must()->add_has_id(100);
  for (const v1::Filter* f : {&every_left, &narrow}) {
    EXPECT_THAT(DeleteWhere(*f),
                StatusIs(absl::StatusCode::kUnavailable,
                         AllOf(HasSubstr("shard 0"),
                               HasSubstr("0 points passing the filter were deleted"))));
  }
  EXPECT_EQ(Head(), h);
}

// A narrow filter passes the guard on the replica that has applied the
// log, and its pages are read there (b, behind, would add ids 10 and 11,
// deleted already): exactly the 10 points that match are deleted. With
// `all` a filter matching every point deletes them, read there too.
TEST_F(RouterDeleteGuardTest, PagesAreReadFromAReplicaThatHasAppliedTheLog) {
  v1::Filter every_left;
  uint64_t h = DeleteTwentyAppliedByAOnly(&every_left);
  v1::Filter narrow;
  v1::Condition* c = narrow.add_must();
  for (uint64_t id : {10, 11}) c->add_has_id(id);
  for (uint64_t id = 100; id < 110; ++id) c->add_has_id(id);
  ASSERT_OK_AND_ASSIGN(server::api::WriteAnswer out, DeleteWhere(narrow));
  EXPECT_EQ(out.count, 10u);
  ASSERT_EQ(out.tokens.size(), 1u);
  EXPECT_GT(out.tokens[0].sequence, h);
  EXPECT_EQ(Head(), out.tokens[0].sequence);
  EXPECT_EQ(replicas_.at("b")->scrolls(), 0);
  h = Head();
  std::set<uint64_t> left = Ids(0, kN);
  for (uint64_t id = 10; id < 30; ++id) left.erase(id);
  for (uint64_t id = 100; id < 110; ++id) left.erase(id);
  replicas_.at("a")->Set(left, h);  // a applied that one too
  ASSERT_OK_AND_ASSIGN(out, DeleteWhere(every_left, true));
  EXPECT_EQ(out.count, kN - 30);
  EXPECT_GT(Head(), h);
  EXPECT_EQ(replicas_.at("b")->scrolls(), 0);
}

// An empty collection (nothing in its log): nothing matches, nothing to
// delete, no refusal (as a standalone's).
TEST_F(RouterDeleteGuardTest, AnEmptyCollectionDeletesNothing) {
  EXPECT_EQ(Head(), 0u);
  v1::Filter f;
  f.add_must_not()->add_has_id(7);
  ASSERT_OK_AND_ASSIGN(server::api::WriteAnswer out, DeleteWhere(f));
  EXPECT_EQ(out.count, 0u);
  EXPECT_TRUE(out.tokens.empty());
  EXPECT_EQ(Head(), 0u);
}

}  // namespace
}  // namespace zoom
