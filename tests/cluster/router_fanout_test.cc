// The router's fan-out (server/cluster/router/fan_out.h) against fake
// shards: in-process zoom.v1.VectorSearch servers on loopback whose Search
// answers at once, fails at once (UNAVAILABLE, NOT_FOUND), or holds the call
// until the test releases it (answered, or failed: INVALID_ARGUMENT) or it
// is cancelled (a replica that hangs). No NATS:
// the fan-out takes its stubs and bookkeeping from a FanOutEnv.
//
// Only what is guaranteed is asserted: a fake that holds its answer holds
// it until released or cancelled, so what the fan-out does meanwhile does
// not depend on timing; every wait is bounded.
#include "server/cluster/router/fan_out.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace zoom::server::router {
namespace {

using ::testing::HasSubstr;
using ::zoom::testing::StatusIs;
using Call = ShardCall<v1::SearchRequest, v1::SearchResponse>;

constexpr absl::Duration kBound = absl::Seconds(30);  // a hang detector, not a timing
constexpr absl::Duration kMargin = absl::Milliseconds(3);

enum class Mode { kAnswer, kHold, kUnavailable, kNotFound };

// A replica: a gRPC server whose Search answers per its mode with one hit,
// the replica's id. kHold keeps the call until Release() (answered then) or
// its cancellation; the tests never release a replica that "hangs".
class FakeShard final : public v1::VectorSearch::CallbackService {
 public:
  FakeShard(std::string node, uint64_t id, Mode mode)
      : node_(std::move(node)), id_(id), mode_(mode) {
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.RegisterService(this);
    server_ = b.BuildAndStart();
    address_ = absl::StrCat("127.0.0.1:", port);
  }
  ~FakeShard() override { Stop(); }

  void Stop() {
    if (server_ == nullptr) return;
    for (auto& p : TakeHeld()) p->Finish(grpc::Status::CANCELLED);
    server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
    server_->Wait();
    server_.reset();
  }

  const std::string& node() const { return node_; }
  const std::string& address() const { return address_; }
  uint64_t id() const { return id_; }

  // Finishes the calls held so far with `st` (OK: answered).
  void Release(const grpc::Status& st = grpc::Status::OK) {
    for (auto& p : TakeHeld()) p->Finish(st);
  }
  bool WaitRequests(int n) { return WaitFor(&requests_, n); }
  bool WaitCancels(int n) { return WaitFor(&cancels_, n); }
  int requests() {
    absl::MutexLock l(&mu_);
    return requests_;
  }

  grpc::ServerUnaryReactor* Search(grpc::CallbackServerContext*, const v1::SearchRequest*,
                                   v1::SearchResponse* resp) override {
    auto pending = std::make_shared<Pending>();
    auto* reactor = new Reactor(this, pending);
    {
      absl::MutexLock l(&pending->mu);
      pending->reactor = reactor;
    }
    v1::Hit* h = resp->add_hits();
    h->set_id(id_);
    h->set_score(1.0f);
    resp->set_coverage(1);
    {
      // Counted once held: a Release after WaitRequests(n) answers it.
      absl::MutexLock l(&mu_);
      if (mode_ == Mode::kHold) held_.push_back(pending);
      ++requests_;
    }
    switch (mode_) {
      case Mode::kAnswer:
        pending->Finish(grpc::Status::OK);
        break;
      case Mode::kHold:
        break;
      case Mode::kUnavailable:
        pending->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "down"));
        break;
      case Mode::kNotFound:
        pending->Finish(grpc::Status(grpc::StatusCode::NOT_FOUND, "no such replica"));
        break;
    }
    return reactor;
  }

 private:
  // A call finished once, by whichever comes first (an answer, a release,
  // its cancellation, the end of the test).
  struct Pending {
    absl::Mutex mu;
    grpc::ServerUnaryReactor* reactor ABSL_GUARDED_BY(mu) = nullptr;
    void Finish(const grpc::Status& st) {
      absl::MutexLock l(&mu);
      if (reactor == nullptr) return;
      reactor->Finish(st);
      reactor = nullptr;
    }
  };
  class Reactor final : public grpc::ServerUnaryReactor {
   public:
    Reactor(FakeShard* shard, std::shared_ptr<Pending> p) : shard_(shard), p_(std::move(p)) {}
    void OnCancel() override {
      {
        absl::MutexLock l(&shard_->mu_);
        ++shard_->cancels_;
      }
      p_->Finish(grpc::Status::CANCELLED);
    }
    void OnDone() override { delete this; }

   private:
    FakeShard* shard_;
    std::shared_ptr<Pending> p_;
  };

  std::vector<std::shared_ptr<Pending>> TakeHeld() {
    absl::MutexLock l(&mu_);
    return std::move(held_);
  }
  bool WaitFor(int* counter, int n) {
    absl::MutexLock l(&mu_);
    auto reached = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return *counter >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&reached), kBound);
  }

  const std::string node_;
  const uint64_t id_;
  const Mode mode_;
  std::string address_;
  std::unique_ptr<grpc::Server> server_;
  absl::Mutex mu_;
  std::vector<std::shared_ptr<Pending>> held_ ABSL_GUARDED_BY(mu_);
  int requests_ ABSL_GUARDED_BY(mu_) = 0;
  int cancels_ ABSL_GUARDED_BY(mu_) = 0;
};

// Stubs over one channel an address; the bookkeeping recorded.
class FakeEnv final : public FanOutEnv {
 public:
  struct Finish {
    std::string node;
    bool ok, counted, suspect;
  };
  std::shared_ptr<v1::VectorSearch::Stub> SearchStub(const std::string& address) override {
    absl::MutexLock l(&mu_);
    auto& s = stubs_[address];
    if (s == nullptr) {
      s = v1::VectorSearch::NewStub(
          grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
    }
    return s;
  }
  std::shared_ptr<v1::Decoder::Stub> DecoderStub(const std::string&) override { return nullptr; }
  void Started(const std::string&) override { started_++; }
  void Finished(const std::string& node, uint64_t, uint32_t, double, bool ok, bool counted,
                bool suspect) override {
    absl::MutexLock l(&mu_);
    finished_.push_back({node, ok, counted, suspect});
  }
  absl::Duration HedgeDelay(uint64_t, uint32_t) override { return hedge_delay; }
  void Event(RouterEvent e) override {
    absl::MutexLock l(&mu_);
    ++events_[e];
  }
  void MarkStale() override { stale_++; }

  int started() const { return started_.load(); }
  int stale() const { return stale_.load(); }
  int events(RouterEvent e) {
    absl::MutexLock l(&mu_);
    return events_[e];
  }
  std::vector<Finish> finished() {
    absl::MutexLock l(&mu_);
    return finished_;
  }
  std::vector<Finish> FinishedAt(const std::string& node) {
    std::vector<Finish> out;
    for (const Finish& f : finished()) {
      if (f.node == node) out.push_back(f);
    }
    return out;
  }

  absl::Duration hedge_delay = absl::Hours(1);

 private:
  absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<v1::VectorSearch::Stub>> stubs_ ABSL_GUARDED_BY(mu_);
  std::vector<Finish> finished_ ABSL_GUARDED_BY(mu_);
  std::map<RouterEvent, int> events_ ABSL_GUARDED_BY(mu_);
  std::atomic<int> started_{0};
  std::atomic<int> stale_{0};
};

// What a fan-out's `done` saw. Shared with the callback, so that a second
// (wrong) call finds it alive.
struct Outcome {
  absl::Mutex mu;
  int runs ABSL_GUARDED_BY(mu) = 0;
  absl::Status status;
  std::vector<Call> calls;
  absl::Time at;
  // At `done`: no attempt out (each finished, every Started matched by a
  // Finished), the number of attempts.
  bool all_finished = false;
  int attempts = 0;
  absl::Notification done;

  int Runs() {
    absl::MutexLock l(&mu);
    return runs;
  }
  bool Wait() { return done.WaitForNotificationWithTimeout(kBound); }
  static FanOut::Done<v1::SearchRequest, v1::SearchResponse> Callback(
      std::shared_ptr<Outcome> o, FakeEnv* env) {
    return [o, env](absl::Status st, std::vector<Call> calls) {
      absl::MutexLock l(&o->mu);
      if (++o->runs > 1) return;
      o->status = std::move(st);
      o->at = absl::Now();
      bool all = true;
      int attempts = 0;
      for (const Call& sc : calls) {
        all = all && sc.inflight == 0;
        for (const auto& at : sc.attempts) all = all && at->finished;
        attempts += static_cast<int>(sc.attempts.size());
      }
      o->all_finished = all && env->started() == static_cast<int>(env->finished().size());
      o->attempts = attempts;
      o->calls = std::move(calls);
      o->done.Notify();
    };
  }
  // The id of the replica that answered shard i (0: none).
  uint64_t AnsweredBy(size_t i) {
    const Call& sc = calls.at(i);
    if (!sc.answered || sc.answer.hits_size() != 1) return 0;
    return sc.answer.hits(0).id();
  }
};

FanOut::Invoke<v1::SearchRequest, v1::SearchResponse> SearchInvoke() {
  return [](v1::VectorSearch::Stub* s, grpc::ClientContext* c, const v1::SearchRequest* r,
            v1::SearchResponse* a, std::function<void(grpc::Status)> f) {
    s->async()->Search(c, r, a, std::move(f));
  };
}

class RouterFanOutTest : public ::testing::Test {
 protected:
  void TearDown() override {
    // The fakes first: what is still out ends, every `done` runs; then the
    // fan-out (its timer) goes.
    for (auto& s : shards_) s->Stop();
    fan_out_.reset();
  }

  FakeShard* Shard(const std::string& node, Mode mode) {
    shards_.push_back(std::make_unique<FakeShard>(node, shards_.size() + 1, mode));
    return shards_.back().get();
  }
  // A shard a list of replicas (asked in that order).
  static std::vector<Call> Calls(const std::vector<std::vector<FakeShard*>>& replicas) {
    std::vector<Call> calls(replicas.size());
    for (size_t k = 0; k < replicas.size(); ++k) {
      calls[k].shard = static_cast<uint32_t>(k);
      calls[k].req.set_collection(absl::StrCat("c_s", k));
      calls[k].req.set_k(1);
      for (FakeShard* r : replicas[k]) calls[k].candidates.push_back({r->node(), r->address(), 0});
    }
    return calls;
  }
  std::shared_ptr<Outcome> Start(std::vector<Call> calls, bool hedge,
                                 absl::Duration timeout = absl::Seconds(60)) {
    auto o = std::make_shared<Outcome>();
    fan_out_->Start<v1::SearchRequest, v1::SearchResponse>(
        7, std::move(calls), absl::Now() + timeout, api::Call(), hedge, SearchInvoke(),
        Outcome::Callback(o, &env_));
    return o;
  }

  std::vector<std::unique_ptr<FakeShard>> shards_;
  FakeEnv env_;
  std::unique_ptr<FanOut> fan_out_ = std::make_unique<FanOut>(&env_, kMargin);
};

TEST_F(RouterFanOutTest, EveryShardAnswers) {
  FakeShard* a = Shard("a", Mode::kAnswer);
  FakeShard* b = Shard("b", Mode::kAnswer);
  FakeShard* c = Shard("c", Mode::kAnswer);
  auto o = Start(Calls({{a}, {b}, {c}}), /*hedge=*/true);
  ASSERT_TRUE(o->Wait());
  absl::MutexLock l(&o->mu);
  EXPECT_OK(o->status);
  EXPECT_EQ(o->AnsweredBy(0), a->id());
  EXPECT_EQ(o->AnsweredBy(1), b->id());
  EXPECT_EQ(o->AnsweredBy(2), c->id());
  EXPECT_TRUE(o->all_finished);
  EXPECT_EQ(o->attempts, 3);
  EXPECT_EQ(env_.events(RouterEvent::kFailover), 0);
  for (const FakeEnv::Finish& f : env_.finished()) {
    EXPECT_TRUE(f.ok && f.counted && !f.suspect) << f.node;
  }
}

TEST_F(RouterFanOutTest, AFailedReplicaFailsOverToTheNext) {
  FakeShard* down = Shard("down", Mode::kUnavailable);
  FakeShard* up = Shard("up", Mode::kAnswer);
  FakeShard* gone = Shard("gone", Mode::kNotFound);
  FakeShard* up2 = Shard("up2", Mode::kAnswer);
  FakeShard* down2 = Shard("down2", Mode::kUnavailable);
  FakeShard* down3 = Shard("down3", Mode::kUnavailable);
  auto o = Start(Calls({{down, up}, {gone, up2}, {down2, down3}}), /*hedge=*/false);
  ASSERT_TRUE(o->Wait());
  absl::MutexLock l(&o->mu);
  EXPECT_OK(o->status);  // a replica's failure is no request error
  EXPECT_EQ(o->AnsweredBy(0), up->id());
  EXPECT_EQ(o->AnsweredBy(1), up2->id());
  EXPECT_FALSE(o->calls[2].answered);  // out of replicas: the last one's error
  EXPECT_THAT(o->calls[2].last_error, HasSubstr("down3: UNAVAILABLE down"));
  EXPECT_EQ(o->calls[2].last_code, grpc::StatusCode::UNAVAILABLE);
  EXPECT_TRUE(o->all_finished);
  EXPECT_EQ(o->attempts, 6);
  EXPECT_EQ(env_.events(RouterEvent::kFailover), 3);
  EXPECT_EQ(env_.stale(), 1);  // NOT_FOUND: the node's map may be newer
  ASSERT_EQ(env_.FinishedAt("down").size(), 1u);
  EXPECT_FALSE(env_.FinishedAt("down")[0].ok);
  EXPECT_TRUE(env_.FinishedAt("down")[0].suspect);
  EXPECT_TRUE(env_.FinishedAt("up")[0].ok);
}

TEST_F(RouterFanOutTest, ARequestErrorEndsTheCallOnceEveryAttemptFinished) {
  FakeShard* bad = Shard("bad", Mode::kHold);  // refuses the query once both calls are in
  FakeShard* spare = Shard("spare", Mode::kAnswer);
  FakeShard* hang = Shard("hang", Mode::kHold);  // never released
  auto o = Start(Calls({{bad, spare}, {hang}}), /*hedge=*/false);
  ASSERT_TRUE(bad->WaitRequests(1));
  ASSERT_TRUE(hang->WaitRequests(1));  // so its cancellation reaches it
  EXPECT_EQ(o->Runs(), 0);
  bad->Release(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "bad query"));
  ASSERT_TRUE(o->Wait());
  {
    absl::MutexLock l(&o->mu);
    EXPECT_THAT(o->status, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bad query")));
    EXPECT_TRUE(o->all_finished);  // the hanging call was cancelled and its callback ran
    EXPECT_EQ(o->attempts, 2);
    EXPECT_FALSE(o->calls[1].answered);
  }
  EXPECT_EQ(spare->requests(), 0);  // no failover from the request's own error
  EXPECT_TRUE(hang->WaitCancels(1));
  ASSERT_EQ(env_.FinishedAt("bad").size(), 1u);
  EXPECT_FALSE(env_.FinishedAt("bad")[0].suspect);  // the request's fault, not the node's
  EXPECT_EQ(o->Runs(), 1);
}

TEST_F(RouterFanOutTest, AHedgeAsksTheNextReplicaAndCancelsTheFirst) {
  env_.hedge_delay = absl::Milliseconds(1);
  FakeShard* hang = Shard("hang", Mode::kHold);  // never released
  FakeShard* up = Shard("up", Mode::kHold);      // answers once both calls are in
  auto o = Start(Calls({{hang, up}}), /*hedge=*/true);
  ASSERT_TRUE(hang->WaitRequests(1));
  ASSERT_TRUE(up->WaitRequests(1));  // the hedge: the first never answers
  EXPECT_EQ(o->Runs(), 0);
  up->Release();
  ASSERT_TRUE(o->Wait());
  {
    absl::MutexLock l(&o->mu);
    EXPECT_OK(o->status);
    EXPECT_EQ(o->AnsweredBy(0), up->id());
    EXPECT_TRUE(o->calls[0].hedged);
    EXPECT_TRUE(o->all_finished);
    EXPECT_EQ(o->attempts, 2);
  }
  EXPECT_EQ(env_.events(RouterEvent::kHedge), 1);
  EXPECT_EQ(env_.events(RouterEvent::kFailover), 0);
  EXPECT_TRUE(hang->WaitCancels(1));
  // The loser finished after the answer: slow, not suspect, its latency not
  // the shard's.
  ASSERT_EQ(env_.FinishedAt("hang").size(), 1u);
  EXPECT_FALSE(env_.FinishedAt("hang")[0].counted);
  EXPECT_FALSE(env_.FinishedAt("hang")[0].suspect);
  EXPECT_TRUE(env_.FinishedAt("up")[0].counted);
}

TEST_F(RouterFanOutTest, TheDeadlineEndsAFanOutWhoseShardsHang) {
  FakeShard* h1 = Shard("h1", Mode::kHold);
  FakeShard* h2 = Shard("h2", Mode::kHold);
  const absl::Duration timeout = absl::Milliseconds(300);
  const absl::Time start = absl::Now();
  auto o = Start(Calls({{h1}, {h2}}), /*hedge=*/true, timeout);
  ASSERT_TRUE(o->Wait());
  absl::MutexLock l(&o->mu);
  EXPECT_OK(o->status);
  EXPECT_FALSE(o->calls[0].answered);
  EXPECT_FALSE(o->calls[1].answered);
  EXPECT_FALSE(o->calls[0].last_error.empty());  // cancelled, or gRPC's own deadline
  EXPECT_TRUE(o->all_finished);
  // Not before the shards' deadline (the client's less the margin); gRPC
  // rounds a call's deadline up to its millisecond, the tolerance for that.
  EXPECT_GE(o->at, start + timeout - kMargin - absl::Milliseconds(2));
  EXPECT_LE(h1->requests(), 1);
  EXPECT_LE(h2->requests(), 1);
}

TEST_F(RouterFanOutTest, StartReturnsWhileTheShardsHoldTheirAnswers) {
  FakeShard* a = Shard("a", Mode::kHold);
  FakeShard* b = Shard("b", Mode::kHold);
  std::shared_ptr<Outcome> o;
  absl::Notification returned;
  std::thread caller([&] {
    o = Start(Calls({{a}, {b}}), /*hedge=*/false);
    returned.Notify();
  });
  // Start must return with both answers held: were it to wait for them, it
  // would wait here until kBound (and the fakes are released below anyway,
  // so that the thread ends).
  const bool returned_first = returned.WaitForNotificationWithTimeout(kBound);
  EXPECT_TRUE(returned_first) << "Start blocked while the shards held their answers";
  EXPECT_TRUE(a->WaitRequests(1));
  EXPECT_TRUE(b->WaitRequests(1));
  if (returned_first) {
    EXPECT_EQ(o->Runs(), 0);  // nothing answered yet: no `done`
  }
  a->Release();
  b->Release();
  caller.join();
  ASSERT_TRUE(o->Wait());
  absl::MutexLock l(&o->mu);
  EXPECT_OK(o->status);
  EXPECT_EQ(o->AnsweredBy(0), a->id());
  EXPECT_EQ(o->AnsweredBy(1), b->id());
  EXPECT_TRUE(o->all_finished);
}

TEST_F(RouterFanOutTest, RunWaitsForDoneAndReturnsTheCalls) {
  FakeShard* down = Shard("down", Mode::kUnavailable);
  FakeShard* up = Shard("up", Mode::kAnswer);
  std::vector<Call> calls = Calls({{down, up}, {}});
  absl::Status st = fan_out_->Run<v1::SearchRequest, v1::SearchResponse>(
      7, calls, absl::Now() + absl::Seconds(60), api::Call(), false, SearchInvoke());
  EXPECT_OK(st);
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_TRUE(calls[0].answered);
  EXPECT_EQ(calls[0].answer.hits(0).id(), up->id());
  EXPECT_FALSE(calls[1].answered);
  EXPECT_EQ(calls[1].last_error, "no serving replica");
}

TEST_F(RouterFanOutTest, NothingToAskIsDoneAtOnce) {
  auto o = Start(Calls({{}, {}}), /*hedge=*/true);
  ASSERT_TRUE(o->done.HasBeenNotified());  // on this thread, before Start returned
  absl::MutexLock l(&o->mu);
  EXPECT_OK(o->status);
  EXPECT_EQ(o->calls[0].last_error, "no serving replica");
  EXPECT_EQ(o->attempts, 0);
}

TEST_F(RouterFanOutTest, DoneRunsOnceEachUnderFiftyConcurrentFanOuts) {
  env_.hedge_delay = absl::Milliseconds(1);
  FakeShard* up0 = Shard("up0", Mode::kAnswer);
  FakeShard* down = Shard("down", Mode::kUnavailable);
  FakeShard* up1 = Shard("up1", Mode::kAnswer);
  FakeShard* hang = Shard("hang", Mode::kHold);  // never released: hedged around
  FakeShard* up2 = Shard("up2", Mode::kAnswer);
  constexpr int kThreads = 5, kEach = 10;
  std::vector<std::shared_ptr<Outcome>> outcomes(kThreads * kEach);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        outcomes[t * kEach + i] =
            Start(Calls({{up0}, {down, up1}, {hang, up2}}), /*hedge=*/true);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (auto& o : outcomes) ASSERT_TRUE(o->Wait());
  for (auto& o : outcomes) {
    absl::MutexLock l(&o->mu);
    EXPECT_OK(o->status);
    EXPECT_EQ(o->AnsweredBy(0), up0->id());
    EXPECT_EQ(o->AnsweredBy(1), up1->id());
    EXPECT_EQ(o->AnsweredBy(2), up2->id());
    EXPECT_EQ(o->attempts, 5);
  }
  EXPECT_LE(hang->requests(), kThreads * kEach);
  // Everything ended (the fakes stopped, the timer joined): a second `done`
  // would have come by now.
  for (auto& s : shards_) s->Stop();
  fan_out_.reset();
  for (auto& o : outcomes) EXPECT_EQ(o->Runs(), 1);
  EXPECT_EQ(env_.started(), static_cast<int>(env_.finished().size()));
}

}  // namespace
}  // namespace zoom::server::router
