// Integration tests: a real zoomd on a free loopback port (a child process)
// and an in-process ZoomServer, driven through client::ZoomClient.
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/client_unary_call.h>
#include <grpcpp/support/sync_stream.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "client/zoom_client.h"
#include "common/status_macros.h"
#include "common/texmex.h"
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/descriptor.pb.h"
#include "google/protobuf/util/json_util.h"
#include "grpc/reflection/v1/reflection.pb.h"
#include "gtest/gtest.h"
#include "server/grpc/zoom_server.h"
#include "storage/block_reader.h"
#include "tests/testing/http_get.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_env.h"

namespace zoom {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::zoom::testing::StatusIs;
using ::zoom::testing::TempDir;
using ::zoom::testing::TestDataPath;

// ---- Helpers -----------------------------------------------------------------

v1::CollectionSpec Spec(const std::string& name, uint32_t dim, v1::Metric metric,
                        v1::IndexKind kind = v1::IVF_HNSW_PQ) {
  v1::CollectionSpec spec;
  spec.set_name(name);
  spec.set_dim(dim);
  spec.set_metric(metric);
  spec.mutable_index()->set_kind(kind);
  return spec;
}

std::vector<float> RandomVectors(size_t n, size_t dim, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist;
  std::vector<float> v(n * dim);
  for (float& x : v) x = dist(rng);
  return v;
}

void AddPoint(v1::UpsertRequest* req, uint64_t id, const float* v, size_t dim,
              const std::string& payload = "") {
  v1::Point* p = req->add_points();
  p->set_id(id);
  p->mutable_vector()->Assign(v, v + dim);
  p->set_payload(payload);
}

v1::SearchRequest Query(const std::string& collection, const float* v, size_t dim, uint32_t k) {
  v1::SearchRequest req;
  req.set_collection(collection);
  req.mutable_vector()->Assign(v, v + dim);
  req.set_k(k);
  return req;
}

std::vector<uint64_t> Ids(const v1::SearchResponse& resp) {
  std::vector<uint64_t> ids;
  for (const auto& h : resp.hits()) ids.push_back(h.id());
  return ids;
}

// Calls that wait for a build or an import get minutes, not the client's
// default 60 s: a loaded CI machine must not turn a slow build into a red test.
client::ClientOptions SlowMachineOptions() {
  client::ClientOptions o;
  o.timeout = absl::Minutes(5);
  return o;
}

// The in-process server on free ports with a fresh data dir.
struct InProcess {
  explicit InProcess(server::ServerOptions options = {}) {
    options.database.data_dir = dir.path();
    options.grpc_address = "127.0.0.1:0";
    options.metrics_address = "127.0.0.1:0";
    if (options.threads == server::ServerOptions().threads) options.threads = 4;
    options.database.collection.auto_build_min_points = 0;
    server = std::make_unique<server::ZoomServer>(options);
    status = server->Start();
    client = client::ZoomClient::Connect(absl::StrCat("127.0.0.1:", server->grpc_port()),
                                         SlowMachineOptions());
  }
  TempDir dir;
  std::unique_ptr<server::ZoomServer> server;
  absl::Status status;
  std::unique_ptr<client::ZoomClient> client;
};

// zoomd as a child process.
class ZoomdProcess {
 public:
  // `fsize_limit` > 0: RLIMIT_FSIZE of the child (a disk that fills up).
  ZoomdProcess(const std::string& data_dir, rlim_t fsize_limit = 0) : data_dir_(data_dir) {
    port_file_ = data_dir + ".port";
    unlink(port_file_.c_str());
    // Everything the child needs is made before fork (no allocation after
    // fork in a threaded process).
    const std::string dd = "--data_dir=" + data_dir;
    const std::string pf = "--port_file=" + port_file_;
    pid_ = fork();
    if (pid_ == 0) {
      if (fsize_limit > 0) {
        signal(SIGXFSZ, SIG_IGN);  // write() then fails with EFBIG
        rlimit rl{fsize_limit, fsize_limit};
        setrlimit(RLIMIT_FSIZE, &rl);
      }
      execl(ZOOMD_BINARY, ZOOMD_BINARY, dd.c_str(), "--grpc_address=127.0.0.1:0",
            "--metrics_address=", pf.c_str(), "--auto_build_points=0", "--threads=4",
            static_cast<char*>(nullptr));
      _exit(127);
    }
  }
  ~ZoomdProcess() {
    if (pid_ > 0) Kill(SIGKILL);
  }
  // Waits for the port file and SERVING; false on timeout or child exit.
  bool WaitServing(absl::Duration timeout = absl::Seconds(60)) {
    const absl::Time end = absl::Now() + timeout;
    while (absl::Now() < end) {
      int status;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return false;
      }
      std::ifstream in(port_file_);
      int port = 0;
      if (in >> port && port > 0) {
        port_ = port;
        client_ = client::ZoomClient::Connect(target(), SlowMachineOptions());
        auto health = client_->Health();
        if (health.ok() && *health == "SERVING") return true;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    return false;
  }
  // Sends `sig` and reaps; returns the exit status (or -signal). A child
  // that has not exited 120 s later is killed (a test failure, not a hang).
  int Kill(int sig) {
    if (pid_ <= 0) return -1;
    kill(pid_, sig);
    int status = 0;
    const absl::Time end = absl::Now() + absl::Seconds(120);
    while (waitpid(pid_, &status, WNOHANG) != pid_) {
      if (absl::Now() > end) {
        ADD_FAILURE() << "zoomd did not exit within 120 s of signal " << sig;
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        break;
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  }
  std::string target() const { return absl::StrCat("127.0.0.1:", port_); }
  client::ZoomClient& client() { return *client_; }

 private:
  std::string data_dir_, port_file_;
  pid_t pid_ = -1;
  int port_ = 0;
  std::unique_ptr<client::ZoomClient> client_;
};

// Parses the Prometheus text format into "name{labels}" -> value.
std::map<std::string, double> ParseMetrics(const std::string& text) {
  std::map<std::string, double> out;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (line.empty() || line[0] == '#') continue;
    const size_t sp = line.rfind(' ');
    double v;
    if (sp == absl::string_view::npos || !absl::SimpleAtod(line.substr(sp + 1), &v)) continue;
    out[std::string(line.substr(0, sp))] = v;
  }
  return out;
}

// ---- The full API round trip -------------------------------------------------

TEST(ServerTest, ApiRoundTrip) {
  InProcess s;
  ASSERT_OK(s.status);
  client::ZoomClient& c = *s.client;
  constexpr size_t kDim = 16, kN = 600;
  ASSERT_OK_AND_ASSIGN(v1::CollectionInfo created, c.CreateCollection(Spec("docs", kDim, v1::L2)));
  EXPECT_EQ(created.spec().dim(), kDim);
  EXPECT_EQ(created.index_state(), v1::NONE);
  ASSERT_OK_AND_ASSIGN(auto list, c.ListCollections());
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].spec().name(), "docs");

  const std::vector<float> data = RandomVectors(kN, kDim, 1);
  // Upsert half, Import (streaming) the other half.
  v1::UpsertRequest up;
  up.set_collection("docs");
  for (size_t i = 0; i < kN / 2; ++i) AddPoint(&up, 1000 + i, &data[i * kDim], kDim, absl::StrCat("p", i));
  ASSERT_OK_AND_ASSIGN(uint64_t upserted, c.Upsert(up));
  EXPECT_EQ(upserted, kN / 2);
  uint64_t last_progress = 0;
  ASSERT_OK_AND_ASSIGN(
      uint64_t imported,
      c.Import("docs", kN / 2,
               [&](uint64_t i, v1::Point* p) {
                 const size_t row = kN / 2 + i;
                 p->set_id(1000 + row);
                 p->mutable_vector()->Assign(&data[row * kDim], &data[(row + 1) * kDim]);
                 p->set_payload(absl::StrCat("p", row));
               },
               /*batch=*/64, [&](uint64_t done, uint64_t) { last_progress = done; }));
  EXPECT_EQ(imported, kN / 2);
  EXPECT_EQ(last_progress, kN / 2);
  ASSERT_OK_AND_ASSIGN(v1::CollectionInfo info, c.GetCollection("docs"));
  EXPECT_EQ(info.points(), kN);

  // Get with vectors and payloads; a missing id is left out.
  v1::GetRequest get;
  get.set_collection("docs");
  get.add_ids(1007);
  get.add_ids(999999);
  get.add_ids(1500);
  get.set_with_vectors(true);
  get.set_with_payload(true);
  ASSERT_OK_AND_ASSIGN(v1::GetResponse got, c.Get(get));
  ASSERT_EQ(got.points_size(), 2);
  EXPECT_EQ(got.points(0).id(), 1007u);
  EXPECT_EQ(got.points(0).payload(), "p7");
  EXPECT_THAT(got.points(0).vector(), ElementsAreArray(&data[7 * kDim], kDim));
  EXPECT_EQ(got.points(1).payload(), "p500");

  // Exact before an index: the query's own point first with score 0.
  v1::SearchRequest q = Query("docs", &data[42 * kDim], kDim, 5);
  q.set_with_payload(true);
  ASSERT_OK_AND_ASSIGN(v1::SearchResponse r, c.Search(q));
  ASSERT_EQ(r.hits_size(), 5);
  EXPECT_EQ(r.hits(0).id(), 1042u);
  EXPECT_EQ(r.hits(0).score(), 0.0f);
  EXPECT_EQ(r.hits(0).payload(), "p42");
  EXPECT_TRUE(r.stats().exact());

  // Build (wait), then the preview + fullview path answers.
  ASSERT_OK_AND_ASSIGN(v1::CollectionInfo built, c.BuildIndex("docs", /*wait=*/true));
  EXPECT_EQ(built.index_state(), v1::READY);
  EXPECT_EQ(built.indexed_points(), kN);
  EXPECT_GT(built.resident_bytes(), 0u);
  ASSERT_OK_AND_ASSIGN(r, c.Search(q));
  EXPECT_FALSE(r.stats().exact());
  EXPECT_EQ(r.hits(0).id(), 1042u);
  // Read, or certainly in the top k (the calibration may pick the band:
  // those come back unread, estimated).
  EXPECT_GT(r.stats().ssd_reads() + r.stats().certain_in(), 0u);
  EXPECT_GE(r.stats().candidates(), 5u);

  // Delete: never returned again; a new point is found at once.
  ASSERT_OK_AND_ASSIGN(uint64_t deleted, c.Delete("docs", {1042, 123456}));
  EXPECT_EQ(deleted, 1u);
  ASSERT_OK_AND_ASSIGN(r, c.Search(q));
  for (const auto& h : r.hits()) EXPECT_NE(h.id(), 1042u);
  v1::UpsertRequest one;
  one.set_collection("docs");
  AddPoint(&one, 7, &data[42 * kDim], kDim);
  ASSERT_OK(c.Upsert(one).status());
  ASSERT_OK_AND_ASSIGN(r, c.Search(q));
  EXPECT_EQ(r.hits(0).id(), 7u);

  // SearchBatch answers like Search.
  v1::SearchBatchRequest batch;
  batch.set_collection("docs");
  for (int i = 0; i < 3; ++i) *batch.add_queries() = Query("", &data[i * kDim], kDim, 4);
  ASSERT_OK_AND_ASSIGN(v1::SearchBatchResponse br, c.SearchBatch(batch));
  ASSERT_EQ(br.results_size(), 3);
  for (int i = 0; i < 3; ++i) {
    ASSERT_OK_AND_ASSIGN(v1::SearchResponse one_r, c.Search(Query("docs", &data[i * kDim], kDim, 4)));
    EXPECT_EQ(Ids(br.results(i)), Ids(one_r));
  }

  // Compact drops the dead records and keeps the answers.
  ASSERT_OK_AND_ASSIGN(v1::SearchResponse before, c.Search(q));
  ASSERT_OK_AND_ASSIGN(v1::CollectionInfo compacted, c.Compact("docs"));
  EXPECT_EQ(compacted.deleted_points(), 0u);
  EXPECT_EQ(compacted.stored_records(), compacted.points());
  EXPECT_EQ(compacted.index_state(), v1::READY);
  ASSERT_OK_AND_ASSIGN(v1::SearchResponse after, c.Search(q));
  EXPECT_EQ(Ids(after)[0], 7u);

  ASSERT_OK(c.DropCollection("docs"));
  EXPECT_THAT(c.GetCollection("docs").status(), StatusIs(absl::StatusCode::kNotFound));
  ASSERT_OK_AND_ASSIGN(list, c.ListCollections());
  EXPECT_TRUE(list.empty());
}

// ---- Recall through gRPC equals the engine's ---------------------------------

// A build already running (here: started by another call; in practice often
// the automatic one during an import) is joined, not refused.
TEST(ServerTest, BuildIndexJoinsARunningBuild) {
  InProcess s;
  ASSERT_OK(s.status);
  client::ZoomClient& c = *s.client;
  constexpr size_t kDim = 32, kN = 20000;
  ASSERT_OK(c.CreateCollection(Spec("b", kDim, v1::L2)).status());
  const std::vector<float> data = RandomVectors(kN, kDim, 7);
  ASSERT_OK(c.Import("b", kN,
                     [&](uint64_t i, v1::Point* p) {
                       p->set_id(i);
                       p->mutable_vector()->Assign(&data[i * kDim], &data[(i + 1) * kDim]);
                     },
                     /*batch=*/1000, nullptr)
                .status());
  ASSERT_OK_AND_ASSIGN(v1::CollectionInfo started, c.BuildIndex("b", /*wait=*/false));
  ASSERT_OK_AND_ASSIGN(v1::CollectionInfo again, c.BuildIndex("b", /*wait=*/false));
  EXPECT_NE(again.index_state(), v1::FAILED);
  ASSERT_OK_AND_ASSIGN(v1::CollectionInfo joined, c.BuildIndex("b", /*wait=*/true));
  EXPECT_EQ(joined.index_state(), v1::READY);
  EXPECT_EQ(joined.indexed_points(), kN);
}

TEST(ServerTest, RecallThroughGrpcEqualsEngine) {
  InProcess s;
  ASSERT_OK(s.status);
  client::ZoomClient& c = *s.client;
  ASSERT_OK_AND_ASSIGN(auto base, LoadVecsAsFloat(TestDataPath("sift-ngt-5k/base.bvecs")));
  ASSERT_OK_AND_ASSIGN(auto queries, LoadVecsAsFloat(TestDataPath("sift-ngt-5k/query.bvecs")));
  ASSERT_OK_AND_ASSIGN(auto gt, LoadIvecs(TestDataPath("sift-ngt-5k/groundtruth_l2.ivecs")));
  v1::CollectionSpec spec = Spec("sift", base.dim, v1::L2);
  spec.set_dtype(v1::UINT8);
  ASSERT_OK(c.CreateCollection(spec).status());
  ASSERT_OK(c.Import("sift", base.rows, [&](uint64_t i, v1::Point* p) {
               p->set_id(i);
               p->mutable_vector()->Assign(base.row(i), base.row(i) + base.dim);
             }).status());
  ASSERT_OK(c.BuildIndex("sift", true).status());
  ASSERT_OK_AND_ASSIGN(auto collection, s.server->database()->GetCollection("sift"));

  constexpr size_t kQueries = 200, kK = 10;
  double hits = 0;
  for (size_t qi = 0; qi < kQueries; ++qi) {
    ASSERT_OK_AND_ASSIGN(v1::SearchResponse r, c.Search(Query("sift", queries.row(qi), base.dim, kK)));
    server::CollectionSearchParams p;
    p.engine.k = kK;
    // The request's knobs as gRPC passes them: left 0 (the collection's
    // choice: its calibrated knobs for the server's default target).
    p.engine.ef = p.engine.nprobe = p.engine.rerank_candidates = 0;
    server::QueryResult result;
    ASSERT_OK(collection->Search(absl::MakeConstSpan(queries.row(qi), base.dim), p, &result));
    EXPECT_TRUE(result.stats.knobs_calibrated);
    EXPECT_EQ(r.stats().knobs().nprobe(), result.stats.knob_nprobe);
    EXPECT_EQ(r.stats().knobs().rerank_candidates(), result.stats.knob_rerank);
    const std::vector<server::Hit>& direct = result.hits;
    ASSERT_EQ(r.hits_size(), static_cast<int>(direct.size()));
    for (size_t i = 0; i < direct.size(); ++i) {
      EXPECT_EQ(r.hits(i).id(), direct[i].id) << "query " << qi << " rank " << i;
      EXPECT_EQ(r.hits(i).score(), direct[i].score);
    }
    std::set<uint64_t> truth(gt.row(qi), gt.row(qi) + kK);
    for (const auto& h : r.hits()) hits += truth.count(h.id());
  }
  const double recall = hits / (kQueries * kK);
  std::printf("sift-ngt-5k recall@10 through gRPC (defaults: target 0.95): %.3f\n", recall);
  EXPECT_GE(recall, 0.9);
}

// ---- Concurrent searches while another client writes -------------------------

TEST(ServerTest, ConcurrentClientsSearchWhileAnotherUpsertsAndDeletes) {
  InProcess s;
  ASSERT_OK(s.status);
  constexpr size_t kDim = 8, kN = 2000;
  ASSERT_OK(s.client->CreateCollection(Spec("live", kDim, v1::L2)).status());
  const std::vector<float> data = RandomVectors(kN * 2, kDim, 7);
  v1::UpsertRequest up;
  up.set_collection("live");
  for (size_t i = 0; i < kN; ++i) AddPoint(&up, i, &data[i * kDim], kDim);
  ASSERT_OK(s.client->Upsert(up).status());
  ASSERT_OK(s.client->BuildIndex("live", true).status());

  absl::Mutex mu;
  std::set<uint64_t> deleted;  // acknowledged deletes
  std::atomic<bool> stop{false};
  std::atomic<int> errors{0}, violations{0}, searches{0};
  std::thread writer([&] {
    auto client = client::ZoomClient::Connect(absl::StrCat("127.0.0.1:", s.server->grpc_port()));
    for (size_t i = 0; i < 150 && !stop; ++i) {
      v1::UpsertRequest u;
      u.set_collection("live");
      AddPoint(&u, kN + i, &data[(kN + i) * kDim], kDim);
      if (!client->Upsert(u).ok()) ++errors;
      const uint64_t victim = (i * 13) % kN;
      if (!client->Delete("live", {victim}).ok()) {
        ++errors;
      } else {
        absl::MutexLock l(&mu);
        deleted.insert(victim);
      }
    }
    stop = true;
  });
  std::vector<std::thread> readers;
  for (int t = 0; t < 3; ++t) {
    readers.emplace_back([&, t] {
      auto client = client::ZoomClient::Connect(absl::StrCat("127.0.0.1:", s.server->grpc_port()));
      std::mt19937 rng(t);
      // At least 10 searches each, then until the writer is done (no
      // assumption about which thread gets the CPU first).
      for (int n = 0; n < 10 || !stop; ++n) {
        std::set<uint64_t> gone;
        {
          absl::MutexLock l(&mu);
          gone = deleted;
        }
        const size_t row = rng() % kN;
        v1::SearchRequest q = Query("live", &data[row * kDim], kDim, 10);
        q.set_exact(t == 0);
        auto r = client->Search(q);
        ++searches;
        if (!r.ok()) {
          ++errors;
          continue;
        }
        for (const auto& h : r->hits()) violations += gone.count(h.id());
      }
    });
  }
  writer.join();
  for (auto& t : readers) t.join();
  EXPECT_EQ(errors, 0);
  EXPECT_EQ(violations, 0);
  EXPECT_GE(searches, 30);
}

// ---- kill -9 during acknowledged upserts ------------------------------------

TEST(ServerTest, KillNineLosesNoAcknowledgedPoint) {
  TempDir dir;
  const std::string data_dir = dir.File("data");
  constexpr size_t kDim = 32;
  // Point i's vector, made again at will.
  auto vec = [](uint64_t i) { return RandomVectors(1, kDim, static_cast<uint32_t>(i) + 1); };
  std::vector<uint64_t> acked;
  absl::Mutex mu;
  {
    ZoomdProcess zoomd(data_dir);
    ASSERT_TRUE(zoomd.WaitServing());
    ASSERT_OK(zoomd.client().CreateCollection(Spec("crash", kDim, v1::L2)).status());
    std::atomic<bool> stop{false};
    std::thread writer([&] {
      auto client = client::ZoomClient::Connect(zoomd.target());
      for (uint64_t batch = 0; !stop; ++batch) {
        v1::UpsertRequest u;
        u.set_collection("crash");
        for (uint64_t i = batch * 50; i < (batch + 1) * 50; ++i) {
          AddPoint(&u, i, vec(i).data(), kDim, absl::StrCat("v", i));
        }
        if (!client->Upsert(u).ok()) break;  // the server died mid-call
        absl::MutexLock l(&mu);
        for (uint64_t i = batch * 50; i < (batch + 1) * 50; ++i) acked.push_back(i);
      }
    });
    // Kill while the writes stream: once a few thousand are acknowledged
    // (or, on a slow machine, after 20 s, but never before 100 are).
    const absl::Time soon = absl::Now() + absl::Seconds(20);
    const absl::Time latest = absl::Now() + absl::Seconds(180);
    for (;;) {
      {
        absl::MutexLock l(&mu);
        const absl::Time now = absl::Now();
        if (acked.size() >= 3000 || (acked.size() > 100 && now > soon) || now > latest) break;
      }
      absl::SleepFor(absl::Milliseconds(5));
    }
    EXPECT_EQ(zoomd.Kill(SIGKILL), -SIGKILL);
    stop = true;
    writer.join();
  }
  ASSERT_GT(acked.size(), 100u) << "too few writes were acknowledged to test anything";
  std::printf("kill -9 after %zu acknowledged points\n", acked.size());
  ZoomdProcess zoomd(data_dir);
  ASSERT_TRUE(zoomd.WaitServing());
  ASSERT_OK_AND_ASSIGN(v1::CollectionInfo info, zoomd.client().GetCollection("crash"));
  EXPECT_GE(info.points(), acked.size());
  EXPECT_LE(info.points(), acked.size() + 50);  // at most the batch in flight
  // Every acknowledged point: present with its payload, and searchable.
  for (size_t start = 0; start < acked.size(); start += 1000) {
    v1::GetRequest get;
    get.set_collection("crash");
    get.set_with_payload(true);
    for (size_t i = start; i < std::min(acked.size(), start + 1000); ++i) get.add_ids(acked[i]);
    ASSERT_OK_AND_ASSIGN(v1::GetResponse got, zoomd.client().Get(get));
    ASSERT_EQ(got.points_size(), get.ids_size());
    for (const auto& p : got.points()) EXPECT_EQ(p.payload(), absl::StrCat("v", p.id()));
  }
  for (size_t i = 0; i < acked.size(); i += acked.size() / 20 + 1) {
    ASSERT_OK_AND_ASSIGN(v1::SearchResponse r,
                         zoomd.client().Search(Query("crash", vec(acked[i]).data(), kDim, 1)));
    ASSERT_EQ(r.hits_size(), 1);
    EXPECT_EQ(r.hits(0).id(), acked[i]);
  }
  // And the server keeps taking writes after the recovery.
  v1::UpsertRequest u;
  u.set_collection("crash");
  AddPoint(&u, 999999999, vec(0).data(), kDim);
  EXPECT_OK(zoomd.client().Upsert(u).status());
  EXPECT_EQ(zoomd.Kill(SIGTERM), 0);
}

// ---- Bad input ---------------------------------------------------------------

TEST(ServerTest, BadInputGetsTheRightStatus) {
  server::ServerOptions options;
  options.max_message_bytes = 1 << 20;
  options.limits.max_k = 100;
  options.limits.max_ef = 500;
  InProcess s(options);
  ASSERT_OK(s.status);
  client::ZoomClient& c = *s.client;
  using absl::StatusCode;
  ASSERT_OK(c.CreateCollection(Spec("ok", 4, v1::L2)).status());
  const float v4[4] = {1, 2, 3, 4};
  const float v3[3] = {1, 2, 3};

  // Collections.
  EXPECT_THAT(c.CreateCollection(Spec("ok", 4, v1::L2)).status(),
              StatusIs(StatusCode::kAlreadyExists));
  EXPECT_THAT(c.CreateCollection(Spec("bad name!", 4, v1::L2)).status(),
              StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(c.CreateCollection(Spec("", 4, v1::L2)).status(),
              StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(c.CreateCollection(Spec("nodim", 0, v1::L2)).status(),
              StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(c.CreateCollection(Spec("nometric", 4, v1::METRIC_UNSPECIFIED)).status(),
              StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(c.CreateCollection(Spec("huge", 1 << 20, v1::L2)).status(),
              StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(c.CreateCollection(Spec("kind", 4, v1::L2, static_cast<v1::IndexKind>(7))).status(),
              StatusIs(StatusCode::kInvalidArgument));
  v1::CollectionSpec nbits = Spec("nbits", 4, v1::L2);
  nbits.mutable_index()->set_pq_nbits(5);
  EXPECT_THAT(c.CreateCollection(nbits).status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("use 8 or 4")));
  nbits = Spec("nbits", 4, v1::L2, v1::HNSW_PQ);
  nbits.mutable_index()->set_pq_nbits(4);
  EXPECT_THAT(c.CreateCollection(nbits).status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("ivf_hnsw_pq")));
  v1::CollectionSpec rabitq = Spec("rabitq", 4, v1::L2, v1::HNSW_PQ);
  rabitq.mutable_index()->set_quantizer(v1::QUANTIZER_RABITQ);
  EXPECT_THAT(c.CreateCollection(rabitq).status(),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("rabitq code needs index kind ivf_hnsw_pq")));
  rabitq = Spec("rabitq", 1100, v1::L2);
  rabitq.mutable_index()->set_quantizer(v1::QUANTIZER_RABITQ);
  EXPECT_THAT(c.CreateCollection(rabitq).status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("dim <= 1024")));
  rabitq = Spec("rabitq", 4, v1::L2);
  rabitq.mutable_index()->set_quantizer(v1::QUANTIZER_RABITQ);
  rabitq.mutable_index()->set_pq_m(2);
  EXPECT_THAT(c.CreateCollection(rabitq).status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("pq_m must be 4")));
  rabitq.mutable_index()->set_pq_m(0);
  rabitq.mutable_index()->set_quantizer(static_cast<v1::Quantizer>(9));
  EXPECT_THAT(c.CreateCollection(rabitq).status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("unknown quantizer value 9")));
  v1::CollectionSpec compact = Spec("compact", 4, v1::L2, v1::IVF_HNSW_PQ);
  compact.mutable_index()->set_compact_links(true);
  EXPECT_THAT(c.CreateCollection(compact).status(),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("compact_links needs index kind hnsw_pq")));
  EXPECT_THAT(c.GetCollection("missing").status(), StatusIs(StatusCode::kNotFound));
  EXPECT_THAT(c.DropCollection("missing"), StatusIs(StatusCode::kNotFound));

  // Points.
  v1::UpsertRequest up;
  up.set_collection("ok");
  EXPECT_THAT(c.Upsert(up).status(), StatusIs(StatusCode::kInvalidArgument));  // empty
  AddPoint(&up, 1, v3, 3);
  EXPECT_THAT(c.Upsert(up).status(), StatusIs(StatusCode::kInvalidArgument));  // wrong dim
  up.clear_points();
  const float nan4[4] = {1, NAN, 3, 4};
  AddPoint(&up, 1, nan4, 4);
  EXPECT_THAT(c.Upsert(up).status(), StatusIs(StatusCode::kInvalidArgument));
  up.clear_points();
  const float inf4[4] = {1, INFINITY, 3, 4};
  AddPoint(&up, 1, inf4, 4);
  EXPECT_THAT(c.Upsert(up).status(), StatusIs(StatusCode::kInvalidArgument));
  up.clear_points();
  up.set_collection("missing");
  AddPoint(&up, 1, v4, 4);
  EXPECT_THAT(c.Upsert(up).status(), StatusIs(StatusCode::kNotFound));
  EXPECT_THAT(c.Delete("ok", {}).status(), StatusIs(StatusCode::kInvalidArgument));
  v1::GetRequest get;
  get.set_collection("ok");
  EXPECT_THAT(c.Get(get).status(), StatusIs(StatusCode::kInvalidArgument));
  // Over the message limit: RESOURCE_EXHAUSTED, nothing applied.
  v1::UpsertRequest big;
  big.set_collection("ok");
  std::vector<float> zeros(4, 1.0f);
  for (int i = 0; i < 20000; ++i) AddPoint(&big, i, zeros.data(), 4, std::string(64, 'x'));
  EXPECT_THAT(c.Upsert(big).status(), StatusIs(StatusCode::kResourceExhausted));
  ASSERT_OK_AND_ASSIGN(v1::CollectionInfo info, c.GetCollection("ok"));
  EXPECT_EQ(info.points(), 0u);

  // Search.
  EXPECT_THAT(c.Search(Query("ok", v4, 4, 0)).status(), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(c.Search(Query("ok", v4, 4, 101)).status(), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(c.Search(Query("ok", v3, 3, 5)).status(), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(c.Search(Query("ok", nan4, 4, 5)).status(), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(c.Search(Query("ok", v4, 0, 5)).status(), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(c.Search(Query("missing", v4, 4, 5)).status(), StatusIs(StatusCode::kNotFound));
  v1::SearchRequest knobs = Query("ok", v4, 4, 5);
  knobs.mutable_knobs()->set_ef(501);
  EXPECT_THAT(c.Search(knobs).status(), StatusIs(StatusCode::kInvalidArgument));
  for (const float sd : {-1.0f, 101.0f, NAN, INFINITY}) {
    v1::SearchRequest stop = Query("ok", v4, 4, 5);
    stop.mutable_knobs()->set_rerank_stop_sd(sd);
    EXPECT_THAT(c.Search(stop).status(),
                StatusIs(StatusCode::kInvalidArgument, ::testing::HasSubstr("rerank_stop_sd")));
  }
  v1::CollectionSpec stop_default;
  stop_default.set_name("stop_default");
  stop_default.set_dim(4);
  stop_default.set_metric(v1::L2);
  stop_default.mutable_default_knobs()->set_rerank_stop_sd(2);
  EXPECT_THAT(c.CreateCollection(stop_default).status(),
              StatusIs(StatusCode::kInvalidArgument, ::testing::HasSubstr("rerank_stop_sd")));
  v1::SearchBatchRequest empty_batch;
  empty_batch.set_collection("ok");
  EXPECT_THAT(c.SearchBatch(empty_batch).status(), StatusIs(StatusCode::kInvalidArgument));
  // Too few points to build an index.
  EXPECT_THAT(c.BuildIndex("ok", true).status(), StatusIs(StatusCode::kFailedPrecondition));
  // The message names what to fix.
  // The message names what to fix, and is the engine's (validated once,
  // passed through unchanged; a batch says which query).
  absl::Status wrong_dim = c.Search(Query("ok", v3, 3, 5)).status();
  EXPECT_EQ(wrong_dim.message(), "query has 3 dimensions; the collection has 4");
  EXPECT_EQ(c.Search(Query("ok", v4, 4, 101)).status().message(),
            "k 101 is above this server's limit of 100");
  v1::SearchBatchRequest mixed;
  mixed.set_collection("ok");
  *mixed.add_queries() = Query("ok", v4, 4, 5);
  *mixed.add_queries() = Query("ok", v3, 3, 5);
  EXPECT_THAT(c.SearchBatch(mixed).status(),
              StatusIs(StatusCode::kInvalidArgument,
                       "query #1: query has 3 dimensions; the collection has 4"));
  v1::SearchBatchRequest same;  // same knobs: one pipelined engine batch
  same.set_collection("ok");
  *same.add_queries() = Query("ok", v4, 4, 5);
  *same.add_queries() = Query("ok", v4, 4, 5);
  for (int i = 0; i < 2; ++i) same.mutable_queries(i)->mutable_knobs()->set_ef(501);
  EXPECT_THAT(c.SearchBatch(same).status(),
              StatusIs(StatusCode::kInvalidArgument,
                       "query #0: ef 501 is above this server's limit of 500"));
  for (int i = 0; i < 2; ++i) same.mutable_queries(i)->mutable_knobs()->set_ef(0);
  same.mutable_queries(1)->set_vector(2, NAN);
  EXPECT_THAT(c.SearchBatch(same).status(),
              StatusIs(StatusCode::kInvalidArgument, ::testing::HasSubstr("query #1: query: ")));
  // The server still works.
  EXPECT_OK(c.Search(Query("ok", v4, 4, 5)).status());
}

// The typed payload over the wire: every kind round-trips through Upsert,
// Get and Search; SetPayload and DeletePayload edit it; bad values are
// INVALID_ARGUMENT naming the point and the field.
TEST(ServerTest, TypedPayloadFieldsOverGrpc) {
  InProcess s;
  ASSERT_OK(s.status);
  client::ZoomClient& c = *s.client;
  ASSERT_OK(c.CreateCollection(Spec("p", 4, v1::L2)).status());
  const float v[4] = {1, 2, 3, 4};
  v1::UpsertRequest up;
  up.set_collection("p");
  AddPoint(&up, 7, v, 4, "opaque");
  auto& f = *up.mutable_points(0)->mutable_fields();
  f["name"].set_string_value("lamp");
  f["count"].set_integer_value(-3);
  f["price"].set_double_value(19.5);
  f["lit"].set_bool_value(true);
  f["at"].mutable_geo_value()->set_lat(40.7);
  f["at"].mutable_geo_value()->set_lon(-74.0);
  f["none"].set_null_value(v1::NULL_VALUE);
  f["tags"].mutable_list_value()->add_values()->set_string_value("a");
  f["tags"].mutable_list_value()->add_values()->set_integer_value(2);
  f["empty"].mutable_list_value();
  ASSERT_OK(c.Upsert(up).status());
  const auto same = [](const google::protobuf::Map<std::string, v1::Value>& a,
                       const google::protobuf::Map<std::string, v1::Value>& b) {
    if (a.size() != b.size()) return false;
    for (const auto& [k, val] : a) {
      auto it = b.find(k);
      if (it == b.end() || it->second.SerializeAsString() != val.SerializeAsString()) return false;
    }
    return true;
  };
  v1::GetRequest get;
  get.set_collection("p");
  get.add_ids(7);
  get.set_with_payload(true);
  ASSERT_OK_AND_ASSIGN(v1::GetResponse g, c.Get(get));
  ASSERT_EQ(g.points_size(), 1);
  EXPECT_TRUE(same(g.points(0).fields(), f));
  EXPECT_EQ(g.points(0).payload(), "opaque");
  v1::SearchRequest q = Query("p", v, 4, 1);
  q.set_with_payload(true);
  ASSERT_OK_AND_ASSIGN(v1::SearchResponse r, c.Search(q));
  ASSERT_EQ(r.hits_size(), 1);
  EXPECT_TRUE(same(r.hits(0).fields(), f));
  q.set_with_payload(false);
  ASSERT_OK_AND_ASSIGN(r, c.Search(q));
  EXPECT_TRUE(r.hits(0).fields().empty());

  v1::SetPayloadRequest set;
  set.set_collection("p");
  set.add_ids(7);
  set.add_ids(8);  // not there: skipped
  (*set.mutable_fields())["count"].set_integer_value(4);
  ASSERT_OK_AND_ASSIGN(uint64_t n, c.SetPayload(set));
  EXPECT_EQ(n, 1u);
  v1::DeletePayloadRequest del;
  del.set_collection("p");
  del.add_ids(7);
  del.add_keys("tags");
  ASSERT_OK_AND_ASSIGN(n, c.DeletePayload(del));
  EXPECT_EQ(n, 1u);
  ASSERT_OK_AND_ASSIGN(g, c.Get(get));
  EXPECT_EQ(g.points(0).fields().at("count").integer_value(), 4);
  EXPECT_EQ(g.points(0).fields().count("tags"), 0u);
  EXPECT_EQ(g.points(0).fields().size(), f.size() - 1);

  // Bad values.
  const auto refused = [&](const std::function<void(v1::Value*)>& fill) {
    v1::UpsertRequest bad;
    bad.set_collection("p");
    AddPoint(&bad, 9, v, 4);
    fill(&(*bad.mutable_points(0)->mutable_fields())["x"]);
    return c.Upsert(bad).status();
  };
  EXPECT_THAT(refused([](v1::Value* x) { x->set_double_value(NAN); }),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "point 9 (#0): field 'x': nan is not a finite number"));
  EXPECT_THAT(refused([](v1::Value* x) { x->mutable_geo_value()->set_lat(100); }),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("off the globe")));
  EXPECT_THAT(refused([](v1::Value* x) {
                x->mutable_list_value()->add_values()->mutable_list_value();
              }),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("list inside a list")));
  EXPECT_THAT(refused([](v1::Value*) {}),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("no kind set")));
  EXPECT_THAT(refused([](v1::Value* x) { x->set_string_value(std::string(2 << 20, 's')); }),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::HasSubstr("(payload and fields); the limit is")));
  v1::SetPayloadRequest bad_set = set;
  (*bad_set.mutable_fields())[""].set_bool_value(true);
  EXPECT_THAT(c.SetPayload(bad_set).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("empty name")));
  v1::DeletePayloadRequest many_keys = del;
  for (int i = 0; i < 1025; ++i) many_keys.add_keys("k" + std::to_string(i));
  EXPECT_THAT(c.DeletePayload(many_keys).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "number of keys 1026 is above this server's limit of 1024"));
  v1::SetPayloadRequest no_ids;
  no_ids.set_collection("p");
  EXPECT_THAT(c.SetPayload(no_ids).status(), StatusIs(absl::StatusCode::kInvalidArgument));
  set.set_collection("missing");
  EXPECT_THAT(c.SetPayload(set).status(), StatusIs(absl::StatusCode::kNotFound));
  ASSERT_OK_AND_ASSIGN(v1::CollectionInfo info, c.GetCollection("p"));
  EXPECT_EQ(info.points(), 1u);  // nothing refused was stored
}

// Trust, case 4: {"must":[{"filter":{}}]} deleted every point although an
// empty filter was refused. Filters are normalised first; a delete that
// would take every live point runs only with `all`.
TEST(ServerTest, DeleteByFilterCannotWipeACollectionByAccident) {
  InProcess s;
  ASSERT_OK(s.status);
  client::ZoomClient& c = *s.client;
  ASSERT_OK(c.CreateCollection(Spec("w", 4, v1::L2)).status());
  v1::UpsertRequest up;
  up.set_collection("w");
  for (uint64_t id = 1; id <= 6; ++id) {
    const float v[4] = {float(id), 0, 0, 1};
    AddPoint(&up, id, v, 4);
    (*up.mutable_points(static_cast<int>(id - 1))->mutable_fields())["cat"].set_string_value(
        id <= 3 ? "lamp" : "desk");
  }
  ASSERT_OK(c.Upsert(up).status());
  const auto filter_of = [](const std::string& json) {
    v1::Filter f;
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(json, &f).ok()) << json;
    return f;
  };
  for (const char* json : {R"({"must":[{"filter":{}}]})",
                           R"({"should":[{"filter":{}},{"key":"cat","match":{"value":"x"}}]})",
                           R"({"must":[{"filter":{"must":[{"filter":{}}]}}]})", "{}"}) {
    EXPECT_THAT(c.DeleteByFilter("w", filter_of(json)),
                StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("all: true")))
        << json;
  }
  const v1::Filter both =
      filter_of(R"({"must":[{"key":"cat","match":{"any":["lamp","desk"]}}]})");
  EXPECT_THAT(c.DeleteByFilter("w", both),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       ::testing::HasSubstr("matches all 6 live points of 'w'")));
  ASSERT_OK_AND_ASSIGN(v1::CollectionInfo info, c.GetCollection("w"));
  EXPECT_EQ(info.points(), 6u);
  // must_not of a match-all: nothing matches, nothing goes.
  ASSERT_OK_AND_ASSIGN(uint64_t n, c.DeleteByFilter("w", filter_of(R"({"must_not":[{"filter":{}}]})")));
  EXPECT_EQ(n, 0u);
  ASSERT_OK_AND_ASSIGN(n, c.DeleteByFilter("w", filter_of(R"({"must":[{"filter":{}},{"key":"cat","match":{"value":"lamp"}}]})")));
  EXPECT_EQ(n, 3u);
  ASSERT_OK_AND_ASSIGN(n, c.DeleteByFilter("w", v1::Filter(), /*all=*/true));
  EXPECT_EQ(n, 3u);
  ASSERT_OK_AND_ASSIGN(info, c.GetCollection("w"));
  EXPECT_EQ(info.points(), 0u);
}

TEST(ServerTest, FullDiskIsResourceExhaustedAndNothingHalfWritten) {
  TempDir dir;
  const std::string data_dir = dir.File("data");
  constexpr size_t kDim = 256;  // 1 KiB records
  std::vector<float> data = RandomVectors(4000, kDim, 5);
  ZoomdProcess zoomd(data_dir, /*fsize_limit=*/2 << 20);
  ASSERT_TRUE(zoomd.WaitServing());
  ASSERT_OK(zoomd.client().CreateCollection(Spec("full", kDim, v1::L2)).status());
  uint64_t acked = 0;
  absl::Status failure;
  for (uint64_t batch = 0; batch < 8; ++batch) {
    v1::UpsertRequest u;
    u.set_collection("full");
    for (uint64_t i = batch * 500; i < (batch + 1) * 500; ++i) AddPoint(&u, i, &data[i * kDim], kDim);
    auto r = zoomd.client().Upsert(u);
    if (!r.ok()) {
      failure = r.status();
      break;
    }
    acked += 500;
  }
  EXPECT_THAT(failure, StatusIs(absl::StatusCode::kResourceExhausted));
  ASSERT_GT(acked, 0u);
  ASSERT_LT(acked, 4000u);
  // The failed batch left nothing behind; the acknowledged ones are intact.
  ASSERT_OK_AND_ASSIGN(v1::CollectionInfo info, zoomd.client().GetCollection("full"));
  EXPECT_EQ(info.points(), acked);
  v1::GetRequest get;
  get.set_collection("full");
  get.add_ids(acked);  // the first id of the failed batch
  get.add_ids(acked - 1);
  ASSERT_OK_AND_ASSIGN(v1::GetResponse got, zoomd.client().Get(get));
  ASSERT_EQ(got.points_size(), 1);
  EXPECT_EQ(got.points(0).id(), acked - 1);
  ASSERT_OK_AND_ASSIGN(v1::SearchResponse r,
                       zoomd.client().Search(Query("full", &data[(acked - 1) * kDim], kDim, 1)));
  ASSERT_EQ(r.hits_size(), 1);
  EXPECT_EQ(r.hits(0).id(), acked - 1);
}

// ---- Health, metrics, shutdown -----------------------------------------------

TEST(ServerTest, HealthServingAndMetricsScraped) {
  InProcess s;
  ASSERT_OK(s.status);
  ASSERT_OK_AND_ASSIGN(std::string health, s.client->Health());
  EXPECT_EQ(health, "SERVING");
  ASSERT_OK_AND_ASSIGN(health, s.client->Health("zoom.v1.VectorSearch"));
  EXPECT_EQ(health, "SERVING");
  ASSERT_OK(s.client->CreateCollection(Spec("m", 4, v1::L2)).status());
  const float v4[4] = {1, 2, 3, 4};
  v1::UpsertRequest up;
  up.set_collection("m");
  AddPoint(&up, 1, v4, 4);
  AddPoint(&up, 2, v4, 4);
  ASSERT_OK(s.client->Upsert(up).status());
  for (int i = 0; i < 5; ++i) ASSERT_OK(s.client->Search(Query("m", v4, 4, 1)).status());
  EXPECT_FALSE(s.client->Search(Query("m", v4, 4, 0)).ok());
  // The collection gauges refresh about every second: poll (bounded) until
  // the scrape shows the two points, instead of sleeping a fixed time.
  std::map<std::string, double> m;
  const absl::Time end = absl::Now() + absl::Seconds(60);
  for (;;) {
    ASSERT_OK_AND_ASSIGN(std::string body, testing::HttpGet("127.0.0.1", s.server->metrics_port(),
                                                            "/metrics", 30000));
    m = ParseMetrics(body);
    auto it = m.find("zoomd_collection_points{collection=\"m\"}");
    if ((it != m.end() && it->second == 2) || absl::Now() > end) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  auto value = [&](const std::string& key) {
    auto it = m.find(key);
    return it == m.end() ? -1.0 : it->second;
  };
  EXPECT_EQ(value("zoomd_rpc_requests_total{code=\"OK\",rpc=\"Search\"}"), 5);
  EXPECT_EQ(value("zoomd_rpc_errors_total{code=\"INVALID_ARGUMENT\",rpc=\"Search\"}"), 1);
  EXPECT_EQ(value("zoomd_collection_points{collection=\"m\"}"), 2);
  EXPECT_EQ(value("zoomd_searches_total{collection=\"m\"}"), 5);
  EXPECT_GT(value("zoomd_process_resident_memory_bytes"), 0);
  EXPECT_EQ(value(absl::StrCat("zoomd_io_backend{backend=\"", s.server->io_backend(), "\"}")), 1);
  EXPECT_GT(value("zoomd_rpc_latency_seconds_count{rpc=\"Search\"}"), 0);
}

TEST(ServerTest, SigtermDrainsAndExitsZeroThenRestartRecovers) {
  TempDir dir;
  const std::string data_dir = dir.File("data");
  constexpr size_t kDim = 8;
  std::vector<float> data = RandomVectors(1000, kDim, 9);
  {
    ZoomdProcess zoomd(data_dir);
    ASSERT_TRUE(zoomd.WaitServing());
    ASSERT_OK(zoomd.client().CreateCollection(Spec("t", kDim, v1::COSINE)).status());
    v1::UpsertRequest u;
    u.set_collection("t");
    for (size_t i = 0; i < 1000; ++i) AddPoint(&u, i, &data[i * kDim], kDim);
    ASSERT_OK(zoomd.client().Upsert(u).status());
    ASSERT_OK(zoomd.client().BuildIndex("t", true).status());
    std::atomic<bool> stop{false};
    std::atomic<int> ok{0}, bad{0};
    std::thread searcher([&] {
      auto client = client::ZoomClient::Connect(zoomd.target());
      while (!stop) {
        auto r = client->Search(Query("t", &data[0], kDim, 5));
        if (r.ok()) {
          ++ok;
        } else if (r.status().code() != absl::StatusCode::kUnavailable) {
          // Anything but "the server is going away, retry" is a bug: a
          // CANCELLED (gRPC's answer to a call that reaches a server
          // shutting down) is not retried by clients. The drain answers
          // UNAVAILABLE and cuts the connections before gRPC shuts down.
          ++bad;
          ADD_FAILURE() << r.status();
        }
      }
    });
    // SIGTERM once searches are flowing (a bounded wait for progress, not a
    // fixed sleep).
    const absl::Time end = absl::Now() + absl::Seconds(60);
    while (ok.load() < 5 && absl::Now() < end) absl::SleepFor(absl::Milliseconds(10));
    EXPECT_GE(ok.load(), 5) << "no searches completed before SIGTERM";
    EXPECT_EQ(zoomd.Kill(SIGTERM), 0);
    stop = true;
    searcher.join();
    EXPECT_EQ(bad, 0);
  }
  ZoomdProcess zoomd(data_dir);
  ASSERT_TRUE(zoomd.WaitServing());
  ASSERT_OK_AND_ASSIGN(v1::CollectionInfo info, zoomd.client().GetCollection("t"));
  EXPECT_EQ(info.points(), 1000u);
  EXPECT_EQ(info.index_state(), v1::READY);
  v1::SearchRequest again = Query("t", &data[5 * kDim], kDim, 1);
  again.set_exact_scores(true);  // not the band's estimate
  ASSERT_OK_AND_ASSIGN(v1::SearchResponse r, zoomd.client().Search(again));
  ASSERT_EQ(r.hits_size(), 1);
  EXPECT_EQ(r.hits(0).id(), 5u);
  EXPECT_FALSE(r.hits(0).estimated());
  EXPECT_NEAR(r.hits(0).score(), 1.0, 1e-5);  // cosine similarity with itself
}

// ---- Hardening: huge finite components ----------------------------------------

// Issue 14 #1: [1e20] * 8 in a dim-8 L2 collection used to abort the server
// in FAISS k-means (BuildIndex, or the automatic build during an Import).
// Now refused at the write with the point and component named; the server
// keeps serving and builds.
TEST(ServerTest, HugeFiniteComponentsAreRefusedNotFatal) {
  server::ServerOptions o;
  o.database.collection.auto_build_min_points = 20000;
  InProcess s(o);
  ASSERT_OK(s.status);
  constexpr size_t kDim = 8;
  for (v1::Metric metric : {v1::L2, v1::INNER_PRODUCT}) {
    const std::string name = metric == v1::L2 ? "l2" : "ip";
    ASSERT_OK(s.client->CreateCollection(Spec(name, kDim, metric)).status());
    const std::vector<float> data = RandomVectors(300, kDim, 3);
    v1::UpsertRequest u;
    u.set_collection(name);
    for (size_t i = 0; i < 300; ++i) AddPoint(&u, i, &data[i * kDim], kDim);
    ASSERT_OK(s.client->Upsert(u).status());
    const float huge = metric == v1::L2 ? 1e20f : 3e38f;
    const std::vector<float> bad(kDim, huge);
    v1::UpsertRequest b;
    b.set_collection(name);
    AddPoint(&b, 4242, bad.data(), kDim);
    EXPECT_THAT(s.client->Upsert(b).status(),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         ::testing::AllOf(HasSubstr("point 4242"), HasSubstr("component 0"))));
    ASSERT_OK_AND_ASSIGN(v1::CollectionInfo built, s.client->BuildIndex(name, /*wait=*/true));
    EXPECT_EQ(built.index_state(), v1::READY);
    EXPECT_EQ(built.points(), 300u);
  }
  // An Import of 20,000 points (the automatic build's threshold) with one
  // such vector: refused at its message; what came before is stored.
  ASSERT_OK(s.client->CreateCollection(Spec("imp", kDim, v1::L2)).status());
  const std::vector<float> data = RandomVectors(20000, kDim, 4);
  const std::vector<float> bad(kDim, 1e20f);
  auto imported = s.client->Import("imp", 20000, [&](uint64_t i, v1::Point* p) {
    p->set_id(i);
    const float* v = i == 15000 ? bad.data() : &data[i * kDim];
    p->mutable_vector()->Assign(v, v + kDim);
  });
  EXPECT_THAT(imported.status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("point 15000")));
  ASSERT_OK_AND_ASSIGN(v1::CollectionInfo info, s.client->GetCollection("imp"));
  EXPECT_EQ(info.points(), 15000u);
  ASSERT_OK_AND_ASSIGN(std::string health, s.client->Health());
  EXPECT_EQ(health, "SERVING");
}

// ---- Hardening: what does not parse, and status codes (issue 14 #6, #7) --------

grpc::ByteBuffer Bytes(const std::string& s) {
  grpc::Slice slice(s);
  return grpc::ByteBuffer(&slice, 1);
}
template <typename M>
std::string Serialized(const M& m) {
  std::string out;
  m.SerializeToString(&out);
  return out;
}
// Bytes that no protobuf parser accepts (a truncated varint), and a message
// whose string field 1 (the collection) is not UTF-8.
const std::string kJunk("\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", 11);
const std::string kBadUtf8("\x0a\x02\xc3\x28", 4);

// A unary call with raw request bytes, as a client with other protos would
// send them.
grpc::Status RawUnary(const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
                      const std::string& request) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  grpc::ByteBuffer resp;
  return grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
      channel.get(), grpc::internal::RpcMethod(method.c_str(), grpc::internal::RpcMethod::NORMAL_RPC),
      &ctx, Bytes(request), &resp);
}

TEST(ServerTest, RequestsThatDoNotParseAreInvalidArgumentNeverSilentlyDropped) {
  InProcess s;
  ASSERT_OK(s.status);
  auto channel = s.client->channel();
  for (const std::string& bytes : {kJunk, kBadUtf8}) {
    grpc::Status st = RawUnary(channel, "/zoom.v1.VectorSearch/Search", bytes);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
    EXPECT_THAT(st.error_message(), HasSubstr("could not parse"));
    EXPECT_THAT(st.error_message(), HasSubstr("zoom.v1.SearchRequest"));
    st = RawUnary(channel, "/zoom.v1.Decoder/TopK", bytes);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  // A server-streaming request too (DownloadSnapshot).
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    auto reader = grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(
        channel.get(),
        grpc::internal::RpcMethod("/zoom.v1.VectorSearch/DownloadSnapshot",
                                  grpc::internal::RpcMethod::SERVER_STREAMING),
        &ctx, Bytes(kJunk));
    grpc::ByteBuffer chunk;
    EXPECT_FALSE(reader->Read(&chunk));
    const grpc::Status st = reader->Finish();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
    EXPECT_THAT(st.error_message(), HasSubstr("zoom.v1.DownloadSnapshotRequest"));
  }
  // An unknown method stays UNIMPLEMENTED.
  EXPECT_EQ(RawUnary(channel, "/zoom.v1.VectorSearch/Nope", "").error_code(),
            grpc::StatusCode::UNIMPLEMENTED);

  // Import: the third message does not parse. It used to end OK,
  // "imported: 100", dropping what followed.
  constexpr size_t kDim = 4;
  ASSERT_OK(s.client->CreateCollection(Spec("imp", kDim, v1::L2)).status());
  for (const std::string& bad : {kJunk, kBadUtf8}) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    grpc::ByteBuffer resp;
    auto writer = grpc::internal::ClientWriterFactory<grpc::ByteBuffer>::Create(
        channel.get(),
        grpc::internal::RpcMethod("/zoom.v1.VectorSearch/Import",
                                  grpc::internal::RpcMethod::CLIENT_STREAMING),
        &ctx, &resp);
    for (int m = 0; m < 4; ++m) {
      v1::ImportRequest req;
      req.set_collection("imp");
      for (int i = 0; i < 50; ++i) {
        const float v[kDim] = {float(m), float(i), 1, 2};
        v1::Point* p = req.add_points();
        p->set_id(m * 50 + i);
        p->mutable_vector()->Assign(v, v + kDim);
      }
      if (!writer->Write(Bytes(m == 2 ? bad : Serialized(req)))) break;
    }
    writer->WritesDone();
    const grpc::Status st = writer->Finish();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
    EXPECT_THAT(st.error_message(), HasSubstr("message #2"));
    EXPECT_THAT(st.error_message(), HasSubstr("100 points were imported"));
    ASSERT_OK_AND_ASSIGN(v1::CollectionInfo info, s.client->GetCollection("imp"));
    EXPECT_EQ(info.points(), 100u);
  }
}

TEST(ServerTest, StatusCodesAndMessagesSayWhatToFix) {
  InProcess s;
  ASSERT_OK(s.status);
  client::ZoomClient& c = *s.client;
  // A 10 KB name: INVALID_ARGUMENT with a short message (it used to come
  // back as RESOURCE_EXHAUSTED: the echoed name overflowed the trailers).
  const std::string long_name(10000, 'x');
  for (const auto& st : {c.GetCollection(long_name).status(),
                         c.CreateCollection(Spec(long_name, 4, v1::L2)).status(),
                         c.DropCollection(long_name)}) {
    EXPECT_THAT(st, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("10000 bytes")));
    EXPECT_LT(st.message().size(), 400u);
  }
  // Empty names: INVALID_ARGUMENT (were NOT_FOUND).
  EXPECT_THAT(c.GetCollection("").status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(c.DropCollection(""), StatusIs(absl::StatusCode::kInvalidArgument));
  const float q[4] = {1, 2, 3, 4};
  EXPECT_THAT(c.Search(Query("", q, 4, 1)).status(), StatusIs(absl::StatusCode::kInvalidArgument));
  // A non-ASCII character is named whole, with its code point.
  EXPECT_THAT(c.CreateCollection(Spec("caf\xc3\xa9", 4, v1::L2)).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'\xc3\xa9' (U+00E9)")));
  // A zero query on a cosine collection is refused as the zero point is.
  ASSERT_OK(c.CreateCollection(Spec("cos", 4, v1::COSINE)).status());
  v1::UpsertRequest u;
  u.set_collection("cos");
  AddPoint(&u, 1, q, 4);
  ASSERT_OK(c.Upsert(u).status());
  const float zero[4] = {0, 0, 0, 0};
  EXPECT_THAT(c.Search(Query("cos", zero, 4, 1)).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("zero")));
  // Too few points for the collection's nlist: FAILED_PRECONDITION (was
  // INTERNAL), saying why.
  v1::CollectionSpec spec = Spec("few", 8, v1::L2);
  spec.mutable_index()->set_nlist(1024);
  ASSERT_OK(c.CreateCollection(spec).status());
  const std::vector<float> data = RandomVectors(300, 8, 5);
  v1::UpsertRequest f;
  f.set_collection("few");
  for (size_t i = 0; i < 300; ++i) AddPoint(&f, i, &data[i * 8], 8);
  ASSERT_OK(c.Upsert(f).status());
  EXPECT_THAT(c.BuildIndex("few", true).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("1024")));
}

// Reflection as a generic client walks it (buf curl --list-methods,
// grpcurl describe): list the services over grpc.reflection.v1, then
// describe each from the file descriptors it sends, through a descriptor
// pool of the client's own. v1alpha (zoomd's too) describes them as well.
TEST(ServerTest, EveryListedServiceIsDescribableOverReflectionV1AndV1alpha) {
  InProcess s;
  ASSERT_OK(s.status);
  auto channel = s.client->channel();
  for (const char* version : {"v1", "v1alpha"}) {
    SCOPED_TRACE(version);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    const std::string method =
        absl::StrCat("/grpc.reflection.", version, ".ServerReflection/ServerReflectionInfo");
    auto stream = grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer, grpc::ByteBuffer>::
        Create(channel.get(),
               grpc::internal::RpcMethod(method.c_str(), grpc::internal::RpcMethod::BIDI_STREAMING),
               &ctx);
    // v1 and v1alpha have the same messages on the wire.
    auto ask = [&](const grpc::reflection::v1::ServerReflectionRequest& req) {
      grpc::reflection::v1::ServerReflectionResponse resp;
      EXPECT_TRUE(stream->Write(Bytes(Serialized(req))));
      grpc::ByteBuffer buf;
      EXPECT_TRUE(stream->Read(&buf));
      std::vector<grpc::Slice> slices;
      (void)buf.Dump(&slices);
      std::string bytes;
      for (const auto& sl : slices) bytes.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
      EXPECT_TRUE(resp.ParseFromString(bytes));
      return resp;
    };
    grpc::reflection::v1::ServerReflectionRequest list;
    list.set_list_services("");
    const auto listed = ask(list);
    std::set<std::string> services;
    for (const auto& sv : listed.list_services_response().service()) services.insert(sv.name());
    for (const char* want : {"zoom.v1.VectorSearch", "zoom.v1.Decoder", "grpc.health.v1.Health",
                             "grpc.reflection.v1.ServerReflection"}) {
      EXPECT_TRUE(services.count(want)) << want;
    }
    google::protobuf::DescriptorPool pool;
    for (const std::string& name : services) {
      SCOPED_TRACE(name);
      grpc::reflection::v1::ServerReflectionRequest req;
      req.set_file_containing_symbol(name);
      const auto resp = ask(req);
      ASSERT_TRUE(resp.has_file_descriptor_response())
          << resp.error_response().error_message();
      // A file already sent on this stream is not sent again, so the pool
      // accumulates. Dependencies may come before or after the file that
      // imports them (zoomd sends them before; other servers after), as for any
      // client: each file is built once everything it imports is.
      std::vector<google::protobuf::FileDescriptorProto> pending;
      for (const std::string& bytes : resp.file_descriptor_response().file_descriptor_proto()) {
        ASSERT_TRUE(pending.emplace_back().ParseFromString(bytes));
      }
      for (bool progress = true; progress && !pending.empty();) {
        progress = false;
        for (auto it = pending.begin(); it != pending.end();) {
          bool ready = true;
          for (const std::string& dep : it->dependency()) {
            ready = ready && pool.FindFileByName(dep) != nullptr;
          }
          if (!ready) {
            ++it;
            continue;
          }
          if (pool.FindFileByName(it->name()) == nullptr) {
            ASSERT_NE(pool.BuildFile(*it), nullptr);
          }
          it = pending.erase(it);
          progress = true;
        }
      }
      ASSERT_TRUE(pending.empty()) << pending[0].name() << " imports a file never sent";
      const google::protobuf::ServiceDescriptor* sd = pool.FindServiceByName(name);
      ASSERT_NE(sd, nullptr) << "listed but not describable";
      EXPECT_GT(sd->method_count(), 0);
      for (int m = 0; m < sd->method_count(); ++m) {
        EXPECT_NE(sd->method(m)->input_type(), nullptr);
      }
    }
    // A symbol that does not exist: an error response, the stream goes on.
    grpc::reflection::v1::ServerReflectionRequest missing;
    missing.set_file_containing_symbol("zoom.v1.Nope");
    EXPECT_EQ(ask(missing).error_response().error_code(),
              static_cast<int>(grpc::StatusCode::NOT_FOUND));
    stream->WritesDone();
    EXPECT_TRUE(stream->Finish().ok());
  }
}

// ---- Hardening: load shedding and amplification (issue 14 #8, #9) ---------------

// Holds the next read of any collection file (once armed) until released: a
// worker is made busy deterministically, without timing.
struct HoldNextRead {
  absl::Mutex mu;
  bool armed ABSL_GUARDED_BY(mu) = false;
  bool entered ABSL_GUARDED_BY(mu) = false;
  bool released ABSL_GUARDED_BY(mu) = false;
  void Arm() {
    absl::MutexLock l(&mu);
    armed = true;
    entered = released = false;
  }
  bool AwaitEntered() {
    absl::MutexLock l(&mu);
    return mu.AwaitWithTimeout(absl::Condition(&entered), absl::Seconds(120));
  }
  void Release() {
    absl::MutexLock l(&mu);
    released = true;
  }
};

class HeldReader final : public storage::BlockReader {
 public:
  HeldReader(std::unique_ptr<storage::BlockReader> inner, std::shared_ptr<HoldNextRead> hold)
      : inner_(std::move(inner)), hold_(std::move(hold)) {}
  absl::Status ReadBatch(absl::Span<storage::ReadRequest> requests) const override {
    Wait();
    return inner_->ReadBatch(requests);
  }
  std::unique_ptr<storage::PendingReads> Submit(
      absl::Span<storage::ReadRequest> requests) const override {
    Wait();
    return inner_->Submit(requests);
  }
  absl::StatusOr<uint8_t*> Scratch(size_t bytes) const override { return inner_->Scratch(bytes); }
  size_t alignment() const override { return inner_->alignment(); }
  storage::IoBackend backend() const override { return inner_->backend(); }
  bool direct_io() const override { return inner_->direct_io(); }
  const std::string& path() const override { return inner_->path(); }
  std::string Describe() const override { return "held " + inner_->Describe(); }

 private:
  void Wait() const {
    absl::MutexLock l(&hold_->mu);
    if (!hold_->armed) return;
    hold_->armed = false;
    hold_->entered = true;
    hold_->mu.Await(absl::Condition(&hold_->released));
  }
  std::unique_ptr<storage::BlockReader> inner_;
  std::shared_ptr<HoldNextRead> hold_;
};

server::ServerOptions HeldOptions(const std::shared_ptr<HoldNextRead>& hold) {
  server::ServerOptions o;
  o.database.collection.store.reader_factory = [hold](const std::string& path,
                                                      const storage::BlockReaderOptions& ro)
      -> absl::StatusOr<std::unique_ptr<storage::BlockReader>> {
    ZOOM_ASSIGN_OR_RETURN(auto inner, storage::MakeBlockReader(path, ro));
    return std::unique_ptr<storage::BlockReader>(new HeldReader(std::move(inner), hold));
  };
  return o;
}

// Waits (bounded) until the pool holds `n` queued tasks.
bool AwaitQueued(server::WorkerPool* pool, size_t n) {
  const absl::Time end = absl::Now() + absl::Seconds(120);
  while (pool->queued() < n && absl::Now() < end) absl::SleepFor(absl::Milliseconds(2));
  return pool->queued() >= n;
}

void FillCollection(client::ZoomClient& c, const std::string& name, size_t n, size_t dim,
                    bool build, const std::string& payload = "") {
  ASSERT_OK(c.CreateCollection(Spec(name, static_cast<uint32_t>(dim), v1::L2)).status());
  const std::vector<float> data = RandomVectors(n, dim, 21);
  for (size_t first = 0; first < n; first += 200) {
    v1::UpsertRequest u;
    u.set_collection(name);
    for (size_t i = first; i < std::min(n, first + 200); ++i) {
      AddPoint(&u, i, &data[i * dim], dim, payload);
    }
    ASSERT_OK(c.Upsert(u).status());
  }
  if (build) {
    ASSERT_OK(c.BuildIndex(name, true).status());
  }
}

// An idle server answers a preview-only Search on gRPC's thread; one that
// reads the SSD (the fullview) or scans (exact) goes to the pool. Both
// paths rank the same.
TEST(ServerTest, AnIdleServerAnswersPreviewOnlySearchesInline) {
  InProcess s;
  ASSERT_OK(s.status);
  constexpr size_t kDim = 8;
  FillCollection(*s.client, "i", 300, kDim, /*build=*/true);
  const std::vector<float> q = RandomVectors(1, kDim, 3);
  const uint64_t before = s.server->pool()->inline_runs();
  v1::SearchRequest preview = Query("i", q.data(), kDim, 5);
  preview.set_preview_only(true);
  ASSERT_OK_AND_ASSIGN(v1::SearchResponse inline_answer, s.client->Search(preview));
  EXPECT_EQ(inline_answer.hits_size(), 5);
  EXPECT_EQ(s.server->pool()->inline_runs(), before + 1);
  for (bool exact : {false, true}) {
    v1::SearchRequest full = Query("i", q.data(), kDim, 5);
    full.set_exact(exact);
    ASSERT_OK_AND_ASSIGN(v1::SearchResponse r, s.client->Search(full));
    EXPECT_EQ(r.hits_size(), 5);
  }
  EXPECT_EQ(s.server->pool()->inline_runs(), before + 1);
  // The same preview through the pool (its queue held by nothing, but the
  // inline slot taken) ranks the same.
  ASSERT_TRUE(s.server->pool()->TryBeginInline(server::WorkClass::kRead));
  ASSERT_OK_AND_ASSIGN(v1::SearchResponse pooled, s.client->Search(preview));
  s.server->pool()->EndInline(server::WorkClass::kRead);
  ASSERT_EQ(pooled.hits_size(), inline_answer.hits_size());
  for (int i = 0; i < pooled.hits_size(); ++i) {
    EXPECT_EQ(pooled.hits(i).id(), inline_answer.hits(i).id());
  }
  // A deadline already past is DEADLINE_EXCEEDED inline too.
  EXPECT_THAT(s.client->Search(preview, absl::Milliseconds(-1)).status(),
              StatusIs(absl::StatusCode::kDeadlineExceeded));
}

// Issue 14 #8: reads queue in a bounded queue (beyond: RESOURCE_EXHAUSTED at
// once), a request whose deadline the queue ahead would outlast is refused
// at once, and allow_partial then gets the preview, degraded.
TEST(ServerTest, OverloadIsShedAtOnceAndAllowPartialGetsThePreview) {
  auto hold = std::make_shared<HoldNextRead>();
  server::ServerOptions o = HeldOptions(hold);
  o.threads = 4;  // reads may take 3 of them; the 4th is for writes and admin work
  o.max_queued_reads = 4;
  o.initial_unit_time = absl::Seconds(1);  // until a read has been measured
  InProcess s(o);
  ASSERT_OK(s.status);
  constexpr size_t kDim = 8;
  FillCollection(*s.client, "q", 600, kDim, /*build=*/true);
  const std::vector<float> q = RandomVectors(1, kDim, 3);
  // Three searches hold the three read workers, each in its fullview read
  // (the hold is re-armed for the next one; Release frees them all).
  std::vector<std::thread> busy;
  std::atomic<int> busy_ok{0};
  for (int i = 0; i < 3; ++i) {
    hold->Arm();
    busy.emplace_back([&] { busy_ok += s.client->Search(Query("q", q.data(), kDim, 5)).ok(); });
    ASSERT_TRUE(hold->AwaitEntered());
  }
  std::vector<std::thread> queued;
  absl::Cleanup release = [&] {
    hold->Release();
    for (auto& t : busy) t.join();
    for (auto& t : queued) t.join();
  };
  // Four searches fill the read queue (4 units).
  std::atomic<int> queued_ok{0};
  for (int i = 0; i < 4; ++i) {
    queued.emplace_back([&] { queued_ok += s.client->Search(Query("q", q.data(), kDim, 5)).ok(); });
    ASSERT_TRUE(AwaitQueued(s.server->pool(), i + 1));
  }
  // The queue is full: RESOURCE_EXHAUSTED at once; a batch is as many units
  // as queries.
  EXPECT_THAT(s.client->Search(Query("q", q.data(), kDim, 5)).status(),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("overloaded")));
  v1::SearchBatchRequest batch;
  batch.set_collection("q");
  *batch.add_queries() = Query("q", q.data(), kDim, 5);
  EXPECT_THAT(s.client->SearchBatch(batch).status(),
              StatusIs(absl::StatusCode::kResourceExhausted));
  // allow_partial with a deadline the queue ahead (4 units x 1 s over 3
  // workers) would outlast: the preview, at once, flagged degraded.
  v1::SearchRequest partial = Query("q", q.data(), kDim, 5);
  partial.set_allow_partial(true);
  ASSERT_OK_AND_ASSIGN(v1::SearchResponse degraded,
                       s.client->Search(partial, absl::Milliseconds(900)));
  EXPECT_TRUE(degraded.stats().degraded());
  EXPECT_EQ(degraded.stats().ssd_reads(), 0u);
  EXPECT_EQ(degraded.hits_size(), 5);
  // The same for a batch of allow_partial queries (it was refused:
  // DEADLINE_EXCEEDED and no previews): each query's preview, degraded.
  v1::SearchBatchRequest partial_batch;
  partial_batch.set_collection("q");
  for (int i = 0; i < 50; ++i) *partial_batch.add_queries() = partial;
  ASSERT_OK_AND_ASSIGN(v1::SearchBatchResponse degraded_batch,
                       s.client->SearchBatch(partial_batch, absl::Milliseconds(900)));
  ASSERT_EQ(degraded_batch.results_size(), 50);
  for (const v1::SearchResponse& r : degraded_batch.results()) {
    EXPECT_TRUE(r.stats().degraded());
    EXPECT_EQ(r.stats().ssd_reads(), 0u);
    EXPECT_EQ(r.hits_size(), 5);
  }
  // Writes have their own queue and a worker the reads cannot take.
  v1::UpsertRequest u;
  u.set_collection("q");
  AddPoint(&u, 9999, q.data(), kDim);
  ASSERT_OK(s.client->Upsert(u).status());
  std::move(release).Invoke();
  EXPECT_EQ(busy_ok.load(), 3);
  EXPECT_EQ(queued_ok.load(), 4);
}

// A request whose deadline the queue ahead would outlast is refused at
// once (not after waiting).
TEST(ServerTest, DeadlineTheQueueWouldOutlastIsRefusedAtOnce) {
  auto hold = std::make_shared<HoldNextRead>();
  server::ServerOptions o = HeldOptions(hold);
  o.threads = 1;
  o.initial_unit_time = absl::Seconds(10);
  InProcess s(o);
  ASSERT_OK(s.status);
  constexpr size_t kDim = 8;
  FillCollection(*s.client, "d", 300, kDim, /*build=*/false);
  const std::vector<float> q = RandomVectors(1, kDim, 3);
  hold->Arm();
  std::thread busy([&] { (void)s.client->Search(Query("d", q.data(), kDim, 5)); });
  ASSERT_TRUE(hold->AwaitEntered());
  std::thread queued([&] { (void)s.client->Search(Query("d", q.data(), kDim, 5)); });
  ASSERT_TRUE(AwaitQueued(s.server->pool(), 1));
  // 1 unit x 10 s ahead; a 5 s deadline cannot be met.
  EXPECT_THAT(s.client->Search(Query("d", q.data(), kDim, 5), absl::Seconds(5)).status(),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("refused at once")));
  hold->Release();
  busy.join();
  queued.join();
}

// A call whose deadline passes while it is queued is DEADLINE_EXCEEDED, and
// counted so in /metrics (gRPC also marks such a call cancelled, and it used
// to be counted as CANCELLED).
TEST(ServerTest, CallsThatExpireInTheQueueAreCountedAsDeadlineExceeded) {
  auto hold = std::make_shared<HoldNextRead>();
  server::ServerOptions o = HeldOptions(hold);
  o.threads = 1;
  o.initial_unit_time = absl::Microseconds(1);  // admitted: the queue looks short
  InProcess s(o);
  ASSERT_OK(s.status);
  constexpr size_t kDim = 8;
  FillCollection(*s.client, "e", 300, kDim, /*build=*/false);
  const std::vector<float> q = RandomVectors(1, kDim, 3);
  hold->Arm();
  std::thread busy([&] { (void)s.client->Search(Query("e", q.data(), kDim, 5)); });
  ASSERT_TRUE(hold->AwaitEntered());
  absl::Status expired;
  std::thread queued([&] {
    // 5 s: time enough to reach the queue on a loaded machine (a call that
    // expires before it arrives never reaches the handler).
    expired = s.client->Search(Query("e", q.data(), kDim, 5), absl::Seconds(5)).status();
  });
  ASSERT_TRUE(AwaitQueued(s.server->pool(), 1));
  queued.join();  // the client gives up at its deadline
  EXPECT_THAT(expired, StatusIs(absl::StatusCode::kDeadlineExceeded));
  // The server's deadline is the client's plus the network's latency: 1.5 s
  // later it has surely passed there too (a lower bound, not a race).
  absl::SleepFor(absl::Milliseconds(1500));
  hold->Release();  // the worker reaches the expired call only now
  busy.join();
  // The server counts it once the worker has seen it (a bounded wait).
  const std::string key = "zoomd_rpc_requests_total{code=\"DEADLINE_EXCEEDED\",rpc=\"Search\"}";
  double counted = 0;
  for (absl::Time end = absl::Now() + absl::Seconds(60); absl::Now() < end;) {
    ASSERT_OK_AND_ASSIGN(std::string body,
                         testing::HttpGet("127.0.0.1", s.server->metrics_port(), "/metrics"));
    const auto m = ParseMetrics(body);
    auto it = m.find(key);
    counted = it == m.end() ? 0 : it->second;
    if (counted >= 1) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(counted, 1);
  const auto m = ParseMetrics(*testing::HttpGet("127.0.0.1", s.server->metrics_port(), "/metrics"));
  EXPECT_EQ(m.count("zoomd_rpc_requests_total{code=\"CANCELLED\",rpc=\"Search\"}"), 0u);
}

// Waiting BuildIndex calls hold no worker: eight of them (the default
// worker count) used to hold every worker for the whole build, so searches
// timed out.
TEST(ServerTest, WaitingBuildsHoldNoWorker) {
  auto hold = std::make_shared<HoldNextRead>();
  server::ServerOptions o = HeldOptions(hold);
  o.threads = 2;
  InProcess s(o);
  ASSERT_OK(s.status);
  constexpr size_t kDim = 8;
  FillCollection(*s.client, "b", 600, kDim, /*build=*/false);
  hold->Arm();  // the build's first read of the vectors
  ASSERT_OK(s.client->BuildIndex("b", /*wait=*/false).status());
  ASSERT_TRUE(hold->AwaitEntered());
  std::vector<std::thread> waiters;
  std::atomic<int> ready{0};
  for (int i = 0; i < 8; ++i) {
    waiters.emplace_back([&] {
      auto r = s.client->BuildIndex("b", /*wait=*/true);
      ready += r.ok() && r->index_state() == v1::READY;
    });
  }
  absl::Cleanup release = [&] {
    hold->Release();
    for (auto& t : waiters) t.join();
  };
  // The build is held; the eight calls wait for it. Searches still run (on
  // the two workers) and health says so.
  const std::vector<float> q = RandomVectors(1, kDim, 3);
  for (int i = 0; i < 20; ++i) {
    ASSERT_OK(s.client->Search(Query("b", q.data(), kDim, 5), absl::Seconds(60)).status()) << i;
  }
  std::move(release).Invoke();
  EXPECT_EQ(ready.load(), 8);
}

// Issue 14 #9: a 3 KB Get of one id (a 1 MiB payload) repeated 600 times
// made the server build 1.2 GB before the 64 MiB send limit refused it; a
// SearchBatch of 400 queries, k 1000, with vectors cost +359 MB.
TEST(ServerTest, AnswersThatCannotBeSentAreRefusedBeforeTheyAreBuilt) {
  server::ServerOptions o;
  o.max_message_bytes = 8 << 20;  // the send limit the answers are held to
  InProcess s(o);
  ASSERT_OK(s.status);
  constexpr size_t kDim = 100;
  FillCollection(*s.client, "amp", 2000, kDim, /*build=*/false, std::string(16 << 10, 'p'));
  {
    v1::UpsertRequest u;
    u.set_collection("amp");
    const std::vector<float> v = RandomVectors(1, kDim, 8);
    AddPoint(&u, 7, v.data(), kDim, std::string(1 << 20, 'q'));
    ASSERT_OK(s.client->Upsert(u).status());
  }
  auto peak_rss_kb = [] {
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6));
    }
    return 0L;
  };
  const long before = peak_rss_kb();
  v1::GetRequest get;
  get.set_collection("amp");
  get.set_with_payload(true);
  for (int i = 0; i < 600; ++i) get.add_ids(7);
  EXPECT_THAT(s.client->Get(get).status(),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("each id once")));
  // Six of them fit: each answered (the payload read once).
  get.clear_ids();
  for (int i = 0; i < 6; ++i) get.add_ids(7);
  ASSERT_OK_AND_ASSIGN(v1::GetResponse got, s.client->Get(get));
  EXPECT_EQ(got.points_size(), 6);
  v1::SearchBatchRequest batch;
  batch.set_collection("amp");
  const std::vector<float> q = RandomVectors(1, kDim, 3);
  for (int i = 0; i < 400; ++i) {
    v1::SearchRequest r = Query("amp", q.data(), kDim, 1000);
    r.set_with_vectors(true);
    *batch.add_queries() = r;
  }
  EXPECT_THAT(s.client->SearchBatch(batch).status(),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("split the batch")));
  // k 1000 with 16 KiB payloads (16 MiB): refused as the payloads are read.
  v1::SearchRequest big = Query("amp", q.data(), kDim, 1000);
  big.set_with_payload(true);
  EXPECT_THAT(s.client->Search(big).status(), StatusIs(absl::StatusCode::kResourceExhausted));
  // The peak memory grew by about one send limit at most, not by the
  // answers' sizes (600 MiB and 160 MiB).
  EXPECT_LT(peak_rss_kb() - before, 100 * 1024);
}

// ---- Snapshots over gRPC (issue 14, "Snapshots and backup") --------------------

TEST(ServerTest, SnapshotsCreateListDownloadRestoreDelete) {
  InProcess s;
  ASSERT_OK(s.status);
  client::ZoomClient& c = *s.client;
  constexpr size_t kDim = 8;
  FillCollection(c, "snap", 800, kDim, /*build=*/true, "pay");
  ASSERT_OK_AND_ASSIGN(v1::SnapshotInfo info, c.CreateSnapshot("snap"));
  EXPECT_EQ(info.points(), 800u);
  ASSERT_OK_AND_ASSIGN(auto list, c.ListSnapshots("snap"));
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].name(), info.name());
  // Download (streamed, renamed when whole), upload into a new collection.
  TempDir local;
  const std::string file = local.File("backup.zsnap");
  ASSERT_OK_AND_ASSIGN(v1::SnapshotInfo got, c.DownloadSnapshot("snap", info.name(), file));
  EXPECT_EQ(got.sha256(), info.sha256());
  EXPECT_EQ(std::filesystem::file_size(file), info.size_bytes());
  ASSERT_OK_AND_ASSIGN(v1::CollectionInfo copy, c.RestoreSnapshotFromFile("copy", file, false));
  EXPECT_EQ(copy.points(), 800u);
  EXPECT_EQ(copy.index_state(), v1::READY);
  // The same answers as the original.
  const std::vector<float> q = RandomVectors(5, kDim, 77);
  for (int i = 0; i < 5; ++i) {
    v1::SearchRequest a = Query("snap", &q[i * kDim], kDim, 10), b = a;
    b.set_collection("copy");
    ASSERT_OK_AND_ASSIGN(v1::SearchResponse ra, c.Search(a));
    ASSERT_OK_AND_ASSIGN(v1::SearchResponse rb, c.Search(b));
    ASSERT_EQ(Ids(ra), Ids(rb));
    for (int h = 0; h < ra.hits_size(); ++h) EXPECT_EQ(ra.hits(h).score(), rb.hits(h).score());
  }
  // From the server's own copy, replacing the copy.
  const std::string source = "snap/" + info.name() + ".zsnap";
  EXPECT_THAT(c.RestoreSnapshotFromServer("copy", source, false).status(),
              StatusIs(absl::StatusCode::kAlreadyExists));
  ASSERT_OK(c.RestoreSnapshotFromServer("copy", source, true).status());
  // A source then data: refused, not restored with the data ignored.
  {
    auto stub = v1::VectorSearch::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", s.server->grpc_port()), grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    v1::RestoreSnapshotResponse resp;
    auto writer = stub->RestoreSnapshot(&ctx, &resp);
    v1::RestoreSnapshotRequest first;
    first.set_collection("mixed");
    first.set_source(source);
    writer->Write(first);
    v1::RestoreSnapshotRequest data;
    data.set_data("junk that would be ignored");
    writer->Write(data);
    writer->WritesDone();
    const grpc::Status st = writer->Finish();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
    EXPECT_THAT(st.error_message(), HasSubstr("takes one message"));
    EXPECT_THAT(c.GetCollection("mixed").status(), StatusIs(absl::StatusCode::kNotFound));
  }
  // Sources outside the snapshots directory are refused.
  for (const std::string& bad : {std::string("../meta/CURRENT"), std::string("/etc/passwd"),
                                 std::string("snap/../../x")}) {
    EXPECT_THAT(c.RestoreSnapshotFromServer("other", bad, false).status(),
                StatusIs(absl::StatusCode::kInvalidArgument)) << bad;
  }
  // A corrupt upload: DATA_LOSS, nothing created.
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(info.size_bytes() / 2));
    f.put('\x7f');
  }
  EXPECT_THAT(c.RestoreSnapshotFromFile("broken", file, false).status(),
              StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(c.GetCollection("broken").status(), StatusIs(absl::StatusCode::kNotFound));
  ASSERT_OK(c.DeleteSnapshot("snap", info.name()));
  EXPECT_THAT(c.DownloadSnapshot("snap", info.name(), local.File("x")).status(),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(c.DeleteSnapshot("snap", "../x"), StatusIs(absl::StatusCode::kInvalidArgument));
  // zoomctl: the same through the CLI.
  const std::string ctl =
      absl::StrCat(ZOOMCTL_BINARY, " --target 127.0.0.1:", s.server->grpc_port(), " ");
  auto shell = [](const std::string& cmd) {
    const int st = std::system((cmd + " >/dev/null 2>&1").c_str());
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  };
  EXPECT_EQ(shell(ctl + "snapshot create snap"), 0);
  ASSERT_OK_AND_ASSIGN(list, c.ListSnapshots("snap"));
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(shell(ctl + "snapshot list snap --json"), 0);
  const std::string file2 = local.File("cli.zsnap");
  EXPECT_EQ(shell(ctl + "snapshot download snap " + list[0].name() + " " + file2), 0);
  EXPECT_EQ(shell(ctl + "snapshot restore cli " + file2), 0);
  EXPECT_EQ(shell(ctl + "snapshot restore cli " + file2), 1);  // exists
  EXPECT_EQ(shell(ctl + "snapshot restore cli " + file2 + " --overwrite"), 0);
  EXPECT_EQ(shell(ctl + "snapshot delete snap " + list[0].name()), 0);
  EXPECT_EQ(shell(ctl + "snapshot frobnicate snap"), 2);
  ASSERT_OK_AND_ASSIGN(v1::CollectionInfo cli, c.GetCollection("cli"));
  EXPECT_EQ(cli.points(), 800u);
}

// DownloadSnapshot into a sink (what a cluster node's bootstrap writes
// through its own FileSystem): the chunks in order and whole; a sink's
// error ends the download with that error. The path overload writes the
// same bytes and reports the file system's errors.
TEST(ServerTest, DownloadSnapshotStreamsIntoASinkAndASinkErrorEndsIt) {
  InProcess s;
  ASSERT_OK(s.status);
  client::ZoomClient& c = *s.client;
  FillCollection(c, "snap", 800, 8, /*build=*/false, "pay");
  ASSERT_OK_AND_ASSIGN(v1::SnapshotInfo info, c.CreateSnapshot("snap"));
  std::string got;
  ASSERT_OK_AND_ASSIGN(
      v1::SnapshotInfo streamed,
      c.DownloadSnapshot("snap", info.name(),
                         [&got](absl::string_view chunk, uint64_t offset) {
                           EXPECT_EQ(offset, got.size());
                           got.append(chunk.data(), chunk.size());
                           return absl::OkStatus();
                         }));
  EXPECT_EQ(streamed.sha256(), info.sha256());
  EXPECT_EQ(got.size(), info.size_bytes());
  TempDir local;
  const std::string file = local.File("backup.zsnap");
  ASSERT_OK(c.DownloadSnapshot("snap", info.name(), file).status());
  {
    std::ifstream in(file, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_TRUE(bytes == got) << "the file and the sink's bytes differ";
  }
  EXPECT_FALSE(std::filesystem::exists(file + ".part"));

  int calls = 0;
  EXPECT_THAT(c.DownloadSnapshot("snap", info.name(),
                                 [&calls](absl::string_view, uint64_t) {
                                   ++calls;
                                   return absl::ResourceExhaustedError("the sink is full");
                                 }),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("the sink is full")));
  EXPECT_EQ(calls, 1);
  EXPECT_OK(c.ListSnapshots("snap").status());  // the channel serves on
  const std::string nowhere = local.File("no/such/dir/x.zsnap");
  EXPECT_THAT(c.DownloadSnapshot("snap", info.name(), nowhere).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("x.zsnap.part")));
}

// --port_file is written through the file layer; one that cannot be
// written stops zoomd (status 1, the reason logged) rather than leaving
// whoever waits for it waiting.
TEST(ServerTest, APortFileThatCannotBeWrittenStopsZoomd) {
  TempDir dir;
  const std::string port_file = dir.File("no/such/dir/port");
  // `timeout`: a zoomd that went on serving ends the test in 120 s.
  const std::string cmd =
      absl::StrCat("timeout 120 ", ZOOMD_BINARY, " --data_dir=", dir.File("data"),
                   " --grpc_address=127.0.0.1:0 --metrics_address= --port_file=", port_file,
                   " 2>&1");
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  const int st = pclose(p);
  ASSERT_TRUE(WIFEXITED(st)) << out;
  EXPECT_EQ(WEXITSTATUS(st), 1) << out;
  EXPECT_THAT(out, HasSubstr("--port_file: cannot write " + port_file + ": NOT_FOUND: open " +
                             port_file + ".tmp"));
  EXPECT_FALSE(std::filesystem::exists(port_file));
}

// ---- Deadlines -----------------------------------------------------------------

TEST(ServerTest, DeadlinesAndAllowPartial) {
  InProcess s;
  ASSERT_OK(s.status);
  constexpr size_t kDim = 16, kN = 2000;
  ASSERT_OK(s.client->CreateCollection(Spec("d", kDim, v1::L2)).status());
  std::vector<float> data = RandomVectors(kN, kDim, 11);
  v1::UpsertRequest u;
  u.set_collection("d");
  for (size_t i = 0; i < kN; ++i) AddPoint(&u, i, &data[i * kDim], kDim);
  ASSERT_OK(s.client->Upsert(u).status());
  ASSERT_OK(s.client->BuildIndex("d", true).status());
  // A deadline already in the past: DEADLINE_EXCEEDED, no hang. (Not a
  // "short" deadline: a 1 us one sometimes let the search finish first.)
  EXPECT_THAT(s.client->Search(Query("d", &data[0], kDim, 5), -absl::Seconds(1)).status(),
              StatusIs(absl::StatusCode::kDeadlineExceeded));
  // The engine: a deadline that passes after the preview gives the preview
  // ranking, flagged degraded, when allow_partial; else DEADLINE_EXCEEDED.
  ASSERT_OK_AND_ASSIGN(auto col, s.server->database()->GetCollection("d"));
  server::CollectionSearchParams p;
  p.engine.k = 5;
  p.context.deadline = absl::Now() - absl::Seconds(1);
  server::QueryResult r;
  EXPECT_THAT(col->Search(absl::MakeConstSpan(&data[0], kDim), p, &r),
              StatusIs(absl::StatusCode::kDeadlineExceeded));
  p.context.allow_partial = true;
  r = {};
  ASSERT_OK(col->Search(absl::MakeConstSpan(&data[0], kDim), p, &r));
  EXPECT_TRUE(r.stats.degraded);
  EXPECT_EQ(r.stats.reads, 0u);  // no fullview
  ASSERT_FALSE(r.hits.empty());
  EXPECT_EQ(r.hits[0].id, 0u);
}

}  // namespace
}  // namespace zoom

namespace zoom {
namespace {

// Runs a shell command; returns (exit code, stdout).
std::pair<int, std::string> Shell(const std::string& command) {
  std::string out;
  FILE* p = popen((command + " 2>/dev/null").c_str(), "r");
  if (p == nullptr) return {-1, ""};
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

TEST(ZoomctlTest, EveryCommandAgainstARealServer) {
  TempDir dir;
  ZoomdProcess zoomd(dir.File("data"));
  ASSERT_TRUE(zoomd.WaitServing());
  const std::string ctl = absl::StrCat(ZOOMCTL_BINARY, " --target ", zoomd.target(), " ");
  const std::string base = TestDataPath("sift-ngt-5k/base.bvecs");
  const std::string query = TestDataPath("sift-ngt-5k/query.bvecs");

  EXPECT_EQ(Shell(ctl + "health").first, 0);
  EXPECT_EQ(Shell(ctl + "create sift --dim 128 --metric l2 --dtype uint8").first, 0);
  EXPECT_EQ(Shell(ctl + "create sift --dim 128 --metric l2").first, 1);  // ALREADY_EXISTS
  EXPECT_EQ(Shell(ctl + "create x --dim 128 --metric hamming").first, 2);  // usage
  auto [rc, out] = Shell(ctl + "import sift " + base + " --limit 3000");
  EXPECT_EQ(rc, 0);
  std::tie(rc, out) = Shell(ctl + "build sift --wait --json");
  EXPECT_EQ(rc, 0);
  EXPECT_THAT(out, ::testing::HasSubstr("\"index_state\":\"READY\""));
  std::tie(rc, out) = Shell(ctl + "info sift --json");
  EXPECT_EQ(rc, 0);
  EXPECT_THAT(out, ::testing::HasSubstr("\"points\":\"3000\""));
  // Search by a query row: the exact ground truth's first id comes first.
  std::tie(rc, out) = Shell(ctl + "search sift --query_file " + query + " --row 3 --k 5 --exact --json");
  EXPECT_EQ(rc, 0);
  v1::SearchResponse exact;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(out, &exact).ok()) << out;
  ASSERT_EQ(exact.hits_size(), 5);
  // Only the first 3000 rows were imported: compare with a brute force
  // through the API instead of the file's ground truth.
  std::tie(rc, out) = Shell(ctl + "search sift --query_file " + query +
                            " --row 3 --k 5 --nprobe 64 --rerank 200 --json");
  EXPECT_EQ(rc, 0);
  v1::SearchResponse approx;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(out, &approx).ok()) << out;
  ASSERT_GE(approx.hits_size(), 1);
  // The graph is built on 2 threads (not deterministic): the approximate
  // best must be among the exact top 5, not necessarily first.
  std::vector<uint64_t> exact_ids;
  for (const auto& h : exact.hits()) exact_ids.push_back(h.id());
  EXPECT_THAT(exact_ids, ::testing::Contains(approx.hits(0).id()));
  std::tie(rc, out) = Shell(ctl + "get sift 5 6 --json");
  EXPECT_EQ(rc, 0);
  EXPECT_THAT(out, ::testing::HasSubstr("\"id\":\"5\""));
  EXPECT_EQ(Shell(ctl + "delete sift 5").first, 0);
  std::tie(rc, out) = Shell(ctl + "get sift 5 --json");
  EXPECT_THAT(out, ::testing::Not(::testing::HasSubstr("\"id\":\"5\"")));
  // Typed payload fields: upsert --fields, get shows them as JSON,
  // set-payload merges, delete-payload removes; bad JSON is a usage error.
  std::string v128 = "1";
  for (int i = 1; i < 128; ++i) v128 += ",1";
  EXPECT_EQ(Shell(ctl + "upsert sift 9000 --vector " + v128 +
                  " --fields '{\"cat\":\"lamp\",\"price\":12,\"r\":4.5,\"tags\":[\"a\",\"b\"],"
                  "\"at\":{\"lat\":1.5,\"lon\":2},\"none\":null}'")
                .first,
            0);
  std::tie(rc, out) = Shell(ctl + "get sift 9000 --with_payload");
  EXPECT_EQ(rc, 0);
  EXPECT_THAT(out, ::testing::HasSubstr(
                       "fields:  {\"at\":{\"lat\":1.5,\"lon\":2.0},\"cat\":\"lamp\",\"none\":null,"
                       "\"price\":12,\"r\":4.5,\"tags\":[\"a\",\"b\"]}"));
  std::tie(rc, out) = Shell(ctl + "set-payload sift 9000 9001 --fields '{\"price\":13}'");
  EXPECT_EQ(rc, 0);
  EXPECT_THAT(out, ::testing::HasSubstr("updated 1 of 2 points"));
  EXPECT_EQ(Shell(ctl + "delete-payload sift 9000 --keys tags,none").first, 0);
  std::tie(rc, out) = Shell(ctl + "get sift 9000 --with_payload");
  EXPECT_THAT(out, ::testing::HasSubstr(
                       "fields:  {\"at\":{\"lat\":1.5,\"lon\":2.0},\"cat\":\"lamp\",\"price\":13,"
                       "\"r\":4.5}"));
  EXPECT_EQ(Shell(ctl + "set-payload sift 9000 --fields '{\"x\":'").first, 2);
  EXPECT_EQ(Shell(ctl + "set-payload sift 9000 --fields '{\"x\":{\"a\":1}}'").first, 2);
  EXPECT_EQ(Shell(ctl + "set-payload sift 9000").first, 2);
  EXPECT_EQ(Shell(ctl + "set-payload sift 9000 --fields '{\"at\":{\"lat\":91,\"lon\":0}}'").first,
            1);  // INVALID_ARGUMENT from the server
  // Filters: index-field, count and search --filter (docs/filters.md's JSON
  // form); a filter on an unindexed field still answers (a scan, warned);
  // a range on a keyword index and JSON that is not a Filter are refused.
  EXPECT_EQ(Shell(ctl + "upsert sift 9001 --vector " + v128 +
                  " --fields '{\"cat\":\"lamp\",\"price\":900}'")
                .first,
            0);
  EXPECT_EQ(Shell(ctl + "upsert sift 9002 --vector " + v128 +
                  " --fields '{\"cat\":\"desk\",\"price\":10}'")
                .first,
            0);
  std::tie(rc, out) = Shell(ctl + "index-field sift cat --type keyword --wait --json");
  EXPECT_EQ(rc, 0);
  EXPECT_THAT(out, ::testing::HasSubstr("\"field\":\"cat\",\"type\":\"KEYWORD\",\"ready\":true"));
  EXPECT_EQ(Shell(ctl + "index-field sift price --type integer --wait").first, 0);
  EXPECT_EQ(Shell(ctl + "index-field sift price --type text").first, 2);
  const std::string lamps =
      "'{\"must\":[{\"key\":\"cat\",\"match\":{\"value\":\"lamp\"}},"
      "{\"key\":\"price\",\"range\":{\"lte\":1000}}]}'";
  std::tie(rc, out) = Shell(ctl + "count sift --filter " + lamps);
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(out, "2\n");
  std::tie(rc, out) = Shell(ctl + "search sift --vector " + v128 + " --k 5 --filter " + lamps +
                            " --json");
  EXPECT_EQ(rc, 0);
  v1::SearchResponse filtered;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(out, &filtered).ok()) << out;
  ASSERT_EQ(filtered.hits_size(), 2);
  EXPECT_EQ(filtered.stats().filter_matches(), 2u);
  EXPECT_EQ(filtered.stats().filter_strategy(), "exact");
  std::tie(rc, out) =
      Shell(ctl + "count sift --json --filter '{\"must\":[{\"key\":\"r\",\"range\":{\"gt\":4}}]}'");
  EXPECT_EQ(rc, 0);
  EXPECT_THAT(out, ::testing::HasSubstr("\"filter_scan\":true"));
  EXPECT_EQ(Shell(ctl + "count sift --filter '{\"must\":[{\"key\":\"cat\",\"range\":{\"gt\":4}}]}'")
                .first,
            1);  // INVALID_ARGUMENT: a range on a keyword index
  EXPECT_EQ(Shell(ctl + "count sift --filter '{\"must\":[{\"kee\":\"cat\"}]}'").first, 2);
  std::tie(rc, out) = Shell(ctl + "scroll sift --limit 2 --filter " + lamps);
  EXPECT_EQ(rc, 0);
  EXPECT_THAT(out, ::testing::HasSubstr("id 9000\nid 9001\n(last page)"));
  std::tie(rc, out) = Shell(ctl + "scroll sift --limit 1 --filter " + lamps + " --json");
  EXPECT_THAT(out, ::testing::HasSubstr("\"next_offset\":\"9001\""));
  std::tie(rc, out) = Shell(ctl + "delete sift --filter '{\"must\":[{\"key\":\"cat\",\"match\":"
                            "{\"value\":\"desk\"}}]}'");
  EXPECT_EQ(rc, 0);
  EXPECT_THAT(out, ::testing::HasSubstr("deleted 1 points"));
  EXPECT_EQ(Shell(ctl + "delete sift 9000 --filter " + lamps).first, 2);  // both
  EXPECT_EQ(Shell(ctl + "delete sift").first, 2);                          // neither
  EXPECT_EQ(Shell(ctl + "delete sift --filter '{}'").first, 1);            // empty: refused
  EXPECT_EQ(Shell(ctl + "delete-index-field sift price").first, 0);
  EXPECT_EQ(Shell(ctl + "delete-index-field sift price").first, 1);  // NOT_FOUND
  EXPECT_EQ(Shell(ctl + "search sift --vector 1,2,3 --k 5").first, 1);  // wrong dim
  EXPECT_EQ(Shell(ctl + "search nope --vector 1,2,3 --k 5").first, 1);  // NOT_FOUND
  EXPECT_EQ(Shell(ctl + "compact sift").first, 0);
  EXPECT_EQ(Shell(ctl + "list").first, 0);
  EXPECT_EQ(Shell(ctl + "drop sift").first, 0);
  EXPECT_EQ(Shell(ctl + "info sift").first, 1);
  const testing::RefusedPort refused;
  EXPECT_EQ(Shell(std::string(ZOOMCTL_BINARY) + " --target " + refused.target() + " list").first,
            1);
}

}  // namespace
}  // namespace zoom

