// File: server/cluster/router/fan_out.h
//
// FanOut: one call a shard (or a node) of a routed request, completion-
// driven: no thread waits while the nodes answer.
//
//   Start(...)  prepares the first attempt of every shard (its replicas in
//               `candidates`, best first), starts them (gRPC's callback
//               API) and returns. From then on the fan-out is moved on by
//               its events, each on the thread it comes on:
//     an attempt's callback (a gRPC thread): the answer, or the error; a
//               replica's error with no other attempt of the shard out
//               starts the shard's next replica from that callback
//               (failover, RouterEvent::kFailover); a request error
//               (RequestError: every replica would say the same) decides
//               the fan-out; NOT_FOUND marks the topology stale
//     the timer (FanOutTimer's thread): a shard not answered `HedgeDelay`
//               after its start, with a call out and a replica left, asks
//               that replica too (`hedge`, kHedge; once a shard); the
//               shards' deadline (the caller's less the merge margin)
//               decides the fan-out
//   The fan-out is decided by the first of: every shard answered or out of
//   replicas, a request error, the deadline. The attempts still out are
//   then cancelled (ClientContext::TryCancel) and `done(status, calls)`
//   runs once, after every attempt started has finished (its callback
//   ran): the status is the first request error, else OK; each ShardCall
//   says whether its shard answered (`answer`) or why not (`last_error`,
//   `last_code`). `done` runs on the thread of the last event: a gRPC
//   callback thread, the timer's thread, or the caller's own before Start
//   returns (nothing could be started, or gRPC failed a call at once). It
//   must not block for long (it holds that thread), and it may start
//   other fan-outs.
//   Run(...)    the same, waiting for `done` (the callers that have a
//               thread to spend: admin calls, Get, Count, Scroll).
//
// Ownership: each fan-out's state (its calls, requests, responses and
// ClientContexts) is one heap object, held by shared_ptr by every callback
// and the timer entry that may still run, so it lives until the last of
// them; `done` gets the calls moved out of it.
//
// Thread safety: Start and Run may be called from any thread, any number at
// once. The FanOutEnv outlives the FanOut; the FanOut outlives every
// fan-out started on it (its `done` ran): a server finishes its calls only
// from `done`, so a stopped gRPC server leaves none running.
#ifndef ZOOM_SERVER_CLUSTER_ROUTER_FAN_OUT_H_
#define ZOOM_SERVER_CLUSTER_ROUTER_FAN_OUT_H_

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/api/types.h"
#include "zoom/v1/decoder.grpc.pb.h"
#include "zoom/v1/zoom.grpc.pb.h"

namespace zoom::server::router {

// What a router counts (the adapter maps them to its metrics).
enum class RouterEvent {
  kHedge,
  kFailover,
  kPartial,
  kUnavailable,
  kMapRefresh,
  kConcernUnmet,   // a write whose write concern was not met by its deadline
  kLogDivergence,  // replicas reported different entries at one log sequence
};

// A replica (or a node) a call may go to.
struct Candidate {
  std::string node, address;
  uint64_t applied = 0;
};

// One call to one replica.
template <typename Resp>
struct Attempt {
  grpc::ClientContext ctx;
  Resp resp;
  std::string node;
  std::shared_ptr<void> stub;  // kept for the call's length
  absl::Time start;
  bool finished = false;
};

// One shard's part of a fan-out: the request, the replicas to try in
// order, and (answered) the answer, else the last error.
template <typename Req, typename Resp>
struct ShardCall {
  uint32_t shard = 0;
  Req req;
  std::vector<Candidate> candidates;
  size_t next = 0;
  int inflight = 0;
  bool answered = false;
  bool need_next = false;
  bool hedged = false;
  absl::Time hedge_at = absl::InfiniteFuture();
  Resp answer;
  std::string last_error;
  grpc::StatusCode last_code = grpc::StatusCode::UNAVAILABLE;
  std::vector<std::unique_ptr<Attempt<Resp>>> attempts;
  bool settled() const { return answered || (inflight == 0 && next >= candidates.size()); }
};

// Errors that are the request's, not the replica's: every replica would
// answer the same, so they end the call instead of a failover.
inline bool RequestError(grpc::StatusCode c) {
  return c == grpc::StatusCode::INVALID_ARGUMENT || c == grpc::StatusCode::OUT_OF_RANGE ||
         c == grpc::StatusCode::PERMISSION_DENIED || c == grpc::StatusCode::UNAUTHENTICATED;
}

template <typename Req, typename Resp>
bool AllAnswered(const std::vector<ShardCall<Req, Resp>>& calls) {
  return std::all_of(calls.begin(), calls.end(), [](const auto& sc) { return sc.answered; });
}

// UNAVAILABLE naming the shards in `calls` that did not answer, and why.
template <typename Req, typename Resp>
absl::Status Uncovered(const std::string& collection,
                       const std::vector<ShardCall<Req, Resp>>& calls, uint32_t shards) {
  std::vector<std::string> why;
  for (const auto& sc : calls) {
    if (sc.answered) continue;
    why.push_back(absl::StrCat(
        "shard ", sc.shard, " (",
        sc.last_error.empty() ? "no answer before the deadline" : sc.last_error, ")"));
  }
  return absl::UnavailableError(absl::StrCat(
      "collection ", collection, ": ", why.size(), " of ", shards,
      " shards did not answer: ", absl::StrJoin(why, "; "),
      ". Set allow_partial or min_coverage to accept an answer from the others"));
}

// What a fan-out needs from its owner (RouterCore; a test's fakes). Called
// from any thread, some under a fan-out's lock: none may block or start a
// fan-out.
class FanOutEnv {
 public:
  virtual ~FanOutEnv() = default;
  // The stub of the node at `address` (the owner keeps one channel a node).
  virtual std::shared_ptr<v1::VectorSearch::Stub> SearchStub(const std::string& address) = 0;
  virtual std::shared_ptr<v1::Decoder::Stub> DecoderStub(const std::string& address) = 0;
  // An attempt went to `node`; it finished after `us`: answered (`ok`, or a
  // hedge's loser), counted in the shard's latencies, to be suspected.
  virtual void Started(const std::string& node) = 0;
  virtual void Finished(const std::string& node, uint64_t uid, uint32_t shard, double us,
                        bool ok, bool counted_latency, bool suspect) = 0;
  // How long a shard's first attempt runs before a hedge.
  virtual absl::Duration HedgeDelay(uint64_t uid, uint32_t shard) = 0;
  virtual void Event(RouterEvent e) = 0;
  // A node answered NOT_FOUND: read the topology again soon.
  virtual void MarkStale() = 0;
};

// One thread running callbacks at their times: the fan-outs' hedges and
// deadlines. Not a grpc::Alarm a fan-out: an alarm's re-arming and its
// destruction from its own callback are loosely specified in gRPC 1.51,
// and a fan-out re-arms after each hedge; one thread over an ordered map
// is simple to reason about, and what runs on it is short (start a call,
// TryCancel, at most a `done`).
class FanOutTimer {
 public:
  struct Id {
    absl::Time when;
    uint64_t seq = 0;
  };
  FanOutTimer();
  // Joins the thread; callbacks not run yet are destroyed unrun.
  ~FanOutTimer();
  FanOutTimer(const FanOutTimer&) = delete;
  FanOutTimer& operator=(const FanOutTimer&) = delete;

  // Runs `fn` on the timer's thread at `when` (at once when past), unless
  // cancelled first.
  Id Schedule(absl::Time when, std::function<void()> fn);
  // Drops `id`'s callback unrun; nothing when it ran or is running.
  void Cancel(const Id& id);

 private:
  void Loop();

  absl::Mutex mu_;
  absl::CondVar wake_;
  std::map<std::pair<absl::Time, uint64_t>, std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

class FanOut {
 public:
  // A call to one replica: start it on `stub` and call the callback once.
  template <typename Req, typename Resp, typename Stub = v1::VectorSearch::Stub>
  using Invoke = std::function<void(Stub*, grpc::ClientContext*, const Req*, Resp*,
                                    std::function<void(grpc::Status)>)>;
  template <typename Req, typename Resp>
  using Done = std::function<void(absl::Status, std::vector<ShardCall<Req, Resp>>)>;

  // `env` outlives the FanOut. `merge_margin`: kept from each deadline for
  // the merge and the reply.
  FanOut(FanOutEnv* env, absl::Duration merge_margin) : env_(env), merge_margin_(merge_margin) {}

  // See the file comment. `calls`: their shards and candidates set (a call
  // without candidates is unanswered: "no serving replica"). `call`: the
  // client's credentials go with every attempt. `deadline`: the client's.
  template <typename Req, typename Resp, typename Stub = v1::VectorSearch::Stub>
  void Start(uint64_t uid, std::vector<ShardCall<Req, Resp>> calls, absl::Time deadline,
             const api::Call& call, bool hedge,
             std::type_identity_t<Invoke<Req, Resp, Stub>> invoke,
             std::type_identity_t<Done<Req, Resp>> done);

  // Start, then waits for `done`: the calls back in *calls, its status.
  template <typename Req, typename Resp, typename Stub = v1::VectorSearch::Stub>
  absl::Status Run(uint64_t uid, std::vector<ShardCall<Req, Resp>>& calls, absl::Time deadline,
                   const api::Call& call, bool hedge,
                   std::type_identity_t<Invoke<Req, Resp, Stub>> invoke);

 private:
  template <typename Req, typename Resp, typename Stub>
  class Op;

  FanOutEnv* env_;
  absl::Duration merge_margin_;
  FanOutTimer timer_;
};

// ---- implementation ---------------------------------------------------------

// One fan-out's state. Every change is under mu_; what it leads to (calls
// to start, contexts to cancel, `done`) is collected as Actions and done
// after mu_ is released, so that a callback gRPC runs at once (on the
// starting thread) finds the lock free.
template <typename Req, typename Resp, typename Stub>
class FanOut::Op : public std::enable_shared_from_this<Op<Req, Resp, Stub>> {
 public:
  using Call = ShardCall<Req, Resp>;
  Op(FanOut* owner, uint64_t uid, std::vector<Call> calls, absl::Time shard_deadline,
     const api::Call& call, bool hedge, Invoke<Req, Resp, Stub> invoke, Done<Req, Resp> done)
      : owner_(owner),
        uid_(uid),
        calls_(std::move(calls)),
        shard_deadline_(shard_deadline),
        credentials_(call.credentials),
        hedge_(hedge),
        invoke_(std::move(invoke)),
        done_(std::move(done)) {}

  void Begin() {
    Actions a;
    {
      absl::MutexLock l(&mu_);
      for (Call& sc : calls_) {
        if (sc.candidates.empty()) {
          if (sc.last_error.empty()) sc.last_error = "no serving replica";
          continue;
        }
        sc.hedge_at = absl::Now() + owner_->env_->HedgeDelay(uid_, sc.shard);
        Prepare(sc, &a);
      }
      Evaluate(&a);
    }
    Act(a);
  }

 private:
  struct Start {
    Call* sc;
    Attempt<Resp>* at;
    std::string address;
  };
  struct Actions {
    std::vector<Start> starts;
    std::vector<Attempt<Resp>*> cancels;  // holding a cancel hold (see Act)
    bool done = false;
  };

  // The next candidate of `sc` as an attempt to start. Its context is set
  // here, under mu_: a cancel is only ever collected after.
  void Prepare(Call& sc, Actions* a) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const Candidate& c = sc.candidates[sc.next++];
    auto at = std::make_unique<Attempt<Resp>>();
    at->node = c.node;
    at->ctx.set_deadline(absl::ToChronoTime(shard_deadline_));
    for (const auto& [key, value] : credentials_) at->ctx.AddMetadata(key, value);
    ++sc.inflight;
    ++outstanding_;
    a->starts.push_back({&sc, at.get(), c.address});
    sc.attempts.push_back(std::move(at));
  }

  // Decides the fan-out, or starts what is due (failovers, hedges) and
  // sets the timer for the next; `done` once decided and nothing is out.
  void Evaluate(Actions* a) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const absl::Time now = absl::Now();
    if (!decided_) {
      bool all = true;
      for (const Call& sc : calls_) all = all && sc.settled();
      if (!request_error_.ok() || now >= shard_deadline_ || all) {
        decided_ = true;
        if (timer_.has_value()) owner_->timer_.Cancel(*timer_);
        timer_.reset();
        for (Call& sc : calls_) {
          for (auto& at : sc.attempts) {
            if (!at->finished) a->cancels.push_back(at.get());
          }
        }
        // `done` waits for the cancels to be sent: they touch the attempts.
        if (!a->cancels.empty()) ++outstanding_;
      } else {
        absl::Time wake = shard_deadline_;
        for (Call& sc : calls_) {
          if (sc.answered) continue;
          if (sc.need_next) {
            sc.need_next = false;
            if (sc.next < sc.candidates.size()) {
              owner_->env_->Event(RouterEvent::kFailover);
              Prepare(sc, a);
            }
          }
          if (hedge_ && !sc.hedged && sc.next < sc.candidates.size()) {
            if (sc.inflight > 0 && now >= sc.hedge_at) {
              sc.hedged = true;
              owner_->env_->Event(RouterEvent::kHedge);
              Prepare(sc, a);
            } else if (sc.hedge_at > now) {
              wake = std::min(wake, sc.hedge_at);
            }
          }
        }
        if (wake != absl::InfiniteFuture() && (!timer_.has_value() || wake < timer_->when)) {
          if (timer_.has_value()) owner_->timer_.Cancel(*timer_);
          timer_ = owner_->timer_.Schedule(
              wake, [self = this->shared_from_this()] { self->OnTimer(); });
        }
      }
    }
    if (decided_ && outstanding_ == 0 && !done_sent_) {
      done_sent_ = true;
      a->done = true;
    }
  }

  // Outside mu_: starts, cancels, `done`.
  void Act(Actions& a) ABSL_LOCKS_EXCLUDED(mu_) {
    for (const Start& s : a.starts) {
      Attempt<Resp>* at = s.at;
      Call* sc = s.sc;
      auto stub = StubFor(s.address);
      at->stub = stub;
      at->start = absl::Now();
      owner_->env_->Started(at->node);
      invoke_(stub.get(), &at->ctx, &sc->req, &at->resp,
              [self = this->shared_from_this(), sc, at](grpc::Status st) {
                self->OnFinished(sc, at, st);
              });
    }
    if (!a.cancels.empty()) {  // never with a.done: the cancel hold is out
      for (Attempt<Resp>* at : a.cancels) at->ctx.TryCancel();
      Actions after;
      {
        absl::MutexLock l(&mu_);
        --outstanding_;  // the cancel hold
        Evaluate(&after);
      }
      Act(after);
    }
    if (a.done) {
      // Nothing else touches the state once `done` is due: every attempt
      // finished, the timer is cancelled (a timer callback already running
      // finds the fan-out decided).
      std::vector<Call> calls;
      absl::Status status;
      Done<Req, Resp> done;
      {
        absl::MutexLock l(&mu_);
        calls = std::move(calls_);
        status = request_error_;
        done = std::move(done_);
      }
      done(std::move(status), std::move(calls));
    }
  }

  void OnFinished(Call* sc, Attempt<Resp>* at, const grpc::Status& st) ABSL_LOCKS_EXCLUDED(mu_) {
    const double us = absl::ToDoubleMicroseconds(absl::Now() - at->start);
    FanOutEnv* env = owner_->env_;
    Actions a;
    {
      absl::MutexLock l(&mu_);
      at->finished = true;
      --sc->inflight;
      --outstanding_;
      if (st.ok()) {
        env->Finished(at->node, uid_, sc->shard, us, true, true, false);
        if (!sc->answered) {
          sc->answered = true;
          sc->answer = std::move(at->resp);
        }
      } else if (sc->answered) {  // a hedge's loser: slow, counted so
        env->Finished(at->node, uid_, sc->shard, us, true, false, false);
      } else {
        const bool cancelled = st.error_code() == grpc::StatusCode::CANCELLED;
        env->Finished(at->node, uid_, sc->shard, us, false, false,
                      !cancelled && !RequestError(st.error_code()));
        if (RequestError(st.error_code())) {
          if (request_error_.ok()) {
            request_error_ = absl::Status(static_cast<absl::StatusCode>(st.error_code()),
                                          st.error_message());
          }
        } else {
          sc->last_error = absl::StrCat(
              at->node, ": ",
              absl::StatusCodeToString(static_cast<absl::StatusCode>(st.error_code())), " ",
              st.error_message());
          sc->last_code = st.error_code();
          if (st.error_code() == grpc::StatusCode::NOT_FOUND) env->MarkStale();
          if (sc->inflight == 0) sc->need_next = true;
        }
      }
      Evaluate(&a);
    }
    Act(a);
  }

  void OnTimer() ABSL_LOCKS_EXCLUDED(mu_) {
    Actions a;
    {
      absl::MutexLock l(&mu_);
      timer_.reset();
      Evaluate(&a);
    }
    Act(a);
  }

  std::shared_ptr<Stub> StubFor(const std::string& address) {
    if constexpr (std::is_same_v<Stub, v1::Decoder::Stub>) {
      return owner_->env_->DecoderStub(address);
    } else {
      static_assert(std::is_same_v<Stub, v1::VectorSearch::Stub>);
      return owner_->env_->SearchStub(address);
    }
  }

  FanOut* const owner_;
  const uint64_t uid_;
  absl::Mutex mu_;
  std::vector<Call> calls_ ABSL_GUARDED_BY(mu_);
  const absl::Time shard_deadline_;
  const std::vector<std::pair<std::string, std::string>> credentials_;
  const bool hedge_;
  const Invoke<Req, Resp, Stub> invoke_;
  Done<Req, Resp> done_ ABSL_GUARDED_BY(mu_);
  absl::Status request_error_ ABSL_GUARDED_BY(mu_);
  // Attempts started and not finished, plus a hold while cancels are sent.
  int outstanding_ ABSL_GUARDED_BY(mu_) = 0;
  bool decided_ ABSL_GUARDED_BY(mu_) = false;
  bool done_sent_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<FanOutTimer::Id> timer_ ABSL_GUARDED_BY(mu_);
};

template <typename Req, typename Resp, typename Stub>
void FanOut::Start(uint64_t uid, std::vector<ShardCall<Req, Resp>> calls, absl::Time deadline,
                   const api::Call& call, bool hedge,
                   std::type_identity_t<Invoke<Req, Resp, Stub>> invoke,
                   std::type_identity_t<Done<Req, Resp>> done) {
  auto op = std::make_shared<Op<Req, Resp, Stub>>(this, uid, std::move(calls),
                                                  deadline - merge_margin_, call, hedge,
                                                  std::move(invoke), std::move(done));
  op->Begin();
}

template <typename Req, typename Resp, typename Stub>
absl::Status FanOut::Run(uint64_t uid, std::vector<ShardCall<Req, Resp>>& calls,
                         absl::Time deadline, const api::Call& call, bool hedge,
                         std::type_identity_t<Invoke<Req, Resp, Stub>> invoke) {
  absl::Notification finished;
  absl::Status result;
  Start<Req, Resp, Stub>(uid, std::move(calls), deadline, call, hedge, std::move(invoke),
                         [&](absl::Status st, std::vector<ShardCall<Req, Resp>> out) {
                           result = std::move(st);
                           calls = std::move(out);
                           finished.Notify();
                         });
  finished.WaitForNotification();
  return result;
}

}  // namespace zoom::server::router

#endif  // ZOOM_SERVER_CLUSTER_ROUTER_FAN_OUT_H_
