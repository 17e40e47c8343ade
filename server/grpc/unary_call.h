// The unary-RPC pattern of zoomd's callback services: the gRPC thread hands
// the work to the WorkerPool and returns at once; a worker runs it and
// finishes the call (RunUnaryOnPool), or starts what finishes it later,
// holding no worker meanwhile (RunDeferredOnPool: a build, a model load;
// RunAsyncOnPool: a router's search, finished from its fan-out's `done`).
//
//   return RunUnaryOnPool(pool_, ctx, [this](absl::Status st, double s) { Record(...); },
//                         [=](const std::atomic<bool>* cancelled) -> absl::Status { ... });
//
// A request still queued when its client cancelled or its deadline passed is
// not run (CANCELLED / DEADLINE_EXCEEDED). `cancelled` turns true when the
// client cancels while the work runs (long work should poll it). An
// exception escaping the work becomes INTERNAL. `record(status, seconds)` is
// called once, on the worker, before the call finishes (metrics).
#ifndef ZOOM_SERVER_GRPC_UNARY_CALL_H_
#define ZOOM_SERVER_GRPC_UNARY_CALL_H_

#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <utility>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/grpc/auth.h"
#include "server/grpc/worker_pool.h"

namespace zoom::server {

// absl::Status -> grpc::Status: the same code and message (the canonical
// codes are shared). Defined in vector_search_service.cc.
grpc::Status ToGrpc(const absl::Status& status);

// The call's deadline; InfiniteFuture when the client set none.
inline absl::Time DeadlineOf(const grpc::CallbackServerContext* ctx) {
  const auto d = ctx->deadline();
  if (d == std::chrono::system_clock::time_point::max()) return absl::InfiniteFuture();
  return absl::FromChrono(d);
}

// A unary reactor whose cancellation the work can see. Deletes itself when
// gRPC is done with it.
class UnaryCall final : public grpc::ServerUnaryReactor {
 public:
  std::atomic<bool> cancelled{false};
  OpenedCall open;  // in its pool's open calls until gRPC is done with it
  void OnCancel() override { cancelled.store(true); }
  void OnDone() override { delete this; }
};

// A cancellation that comes this close to the call's deadline is the
// deadline's: the client's timer fires first (the server's deadline is the
// client's plus the network's latency) and cancels the call.
inline constexpr absl::Duration kDeadlineSlack = absl::Seconds(1);

// True when `deadline` has passed, or a cancellation now is its doing.
inline bool DeadlineReached(absl::Time deadline, bool cancelled) {
  const absl::Time now = absl::Now();
  return now >= deadline ||
         (cancelled && deadline != absl::InfiniteFuture() && now + kDeadlineSlack >= deadline);
}

// Why a call ended before its work could run, or OK: the deadline first
// (gRPC also marks an expired call cancelled, which must not be counted as
// the client's cancellation), then the client's cancellation.
inline absl::Status QueuedCallStatus(grpc::CallbackServerContext* ctx, bool cancelled) {
  cancelled = cancelled || ctx->IsCancelled();
  if (DeadlineReached(DeadlineOf(ctx), cancelled)) {
    return absl::DeadlineExceededError("the deadline passed while the request was queued");
  }
  if (cancelled) return absl::CancelledError("the call was cancelled before it started");
  return absl::OkStatus();
}

// `cls` and `units` are the request's class and cost for the pool's
// admission control (worker_pool.h): a refused request is finished at once,
// on the calling thread, with the pool's status (RESOURCE_EXHAUSTED when the
// class's queue is full, DEADLINE_EXCEEDED when the queue ahead would
// outlast its deadline).
template <typename Record, typename Work>
grpc::ServerUnaryReactor* RunUnaryOnPool(WorkerPool* pool, grpc::CallbackServerContext* ctx,
                                         WorkClass cls, uint64_t units, Record record,
                                         Work work) {
  auto* call = new UnaryCall();
  if (absl::Status st = call->open.Open(pool); !st.ok()) {  // the server is draining
    record(st, 0.0);
    call->Finish(ToGrpc(st));
    return call;
  }
  auto shared_record = std::make_shared<Record>(std::move(record));
  absl::Status admitted = pool->TrySubmit(cls, units, DeadlineOf(ctx), [ctx, call, shared_record, work = std::move(work),
                start = absl::Now()]() mutable {
    Record& record = *shared_record;
    absl::Status st = QueuedCallStatus(ctx, call->cancelled.load());
    if (st.ok()) {
      try {
        st = work(&call->cancelled);
      } catch (const std::exception& e) {
        st = absl::InternalError(absl::StrCat("internal error: ", e.what()));
      }
    }
    record(st, absl::ToDoubleSeconds(absl::Now() - start));
    call->Finish(ToGrpc(st));
  });
  if (!admitted.ok()) {
    (*shared_record)(admitted, 0.0);
    call->Finish(ToGrpc(admitted));
  }
  return call;
}

// A call answered at once with `status` (refused before any work: no key,
// ...); `record` is called first.
template <typename Record>
grpc::ServerUnaryReactor* FinishNow(const absl::Status& status, Record record) {
  auto* call = new UnaryCall();
  record(status, 0.0);
  call->Finish(ToGrpc(status));
  return call;
}

// OK when `auth` is null (no keys) or the call carries a key of `role`.
inline absl::Status AuthorizeCall(const Authenticator* auth, const grpc::ServerContextBase& ctx,
                                  Role role) {
  return auth == nullptr ? absl::OkStatus() : auth->Authorize(ctx, role);
}

// `message` serialized into `out` (a raw method's response); false if it
// cannot be.
template <typename Message>
bool SerializeToByteBuffer(const Message& message, grpc::ByteBuffer* out) {
  grpc::ByteBuffer buf;
  bool own = false;
  if (!grpc::SerializationTraits<Message>::Serialize(message, &buf, &own).ok()) return false;
  out->Swap(&buf);
  return true;
}

// The role a call of class `cls` needs: reads a read key, the rest admin.
inline Role RoleFor(WorkClass cls) {
  return cls == WorkClass::kRead ? Role::kRead : Role::kAdmin;
}

// Runs `work` right here, on gRPC's thread, and finishes the call: only for
// work known to be short and never blocking on I/O (a degraded preview).
template <typename Record, typename Work>
grpc::ServerUnaryReactor* RunUnaryInline(grpc::CallbackServerContext* ctx, Record record,
                                         Work work) {
  auto* call = new UnaryCall();
  const absl::Time start = absl::Now();
  absl::Status st;
  try {
    st = work(&call->cancelled);
  } catch (const std::exception& e) {
    st = absl::InternalError(absl::StrCat("internal error: ", e.what()));
  }
  (void)ctx;
  record(st, absl::ToDoubleSeconds(absl::Now() - start));
  call->Finish(ToGrpc(st));
  return call;
}

// ---- Replies that come later -------------------------------------------------
//
// A call that waits (BuildIndex or LoadModel with wait) must not hold a
// worker for the whole wait: its work starts the wait and returns; whoever
// ends the wait (a build thread, a loader thread) completes the reply.
//
//   return RunDeferredOnPool(pool_, ctx, record,
//                            [name = req->name(), resp](std::shared_ptr<PendingReply> reply) {
//     ... reply->Complete(status, [=] { fill *resp }) now or later ...
//   });
//
// The work must copy what it needs from the request (by value): a cancelled
// call is finished at once, after which gRPC frees the request, response and
// context; the response may be written only inside `fill`.
//
// The call is finished exactly once: by the first Complete, or at once when
// the client cancels or the deadline passes (DEADLINE_EXCEEDED /
// CANCELLED); a later Complete does nothing (and does not run `fill`).
class PendingReply {
 public:
  explicit PendingReply(std::function<void(const absl::Status&, double)> record)
      : record_(std::move(record)) {}
  // Finishes the call with `status` unless it is finished already; runs
  // fill() first when the status is OK (the response may be written only
  // there). Safe from any thread.
  void Complete(const absl::Status& status, const std::function<void()>& fill = nullptr) {
    grpc::ServerUnaryReactor* call;
    {
      absl::MutexLock l(&mu_);
      if (call_ == nullptr) return;
      call = call_;
      call_ = nullptr;
    }
    absl::Status st = status;
    if (st.ok() && fill) {
      try {
        fill();
      } catch (const std::exception& e) {
        st = absl::InternalError(absl::StrCat("internal error: ", e.what()));
      }
    }
    record_(st, absl::ToDoubleSeconds(absl::Now() - start_));
    call->Finish(ToGrpc(st));
  }
  bool finished() const {
    absl::MutexLock l(&mu_);
    return call_ == nullptr;
  }

 private:
  template <typename R, typename W>
  friend grpc::ServerUnaryReactor* RunDeferredOnPool(WorkerPool*, grpc::CallbackServerContext*,
                                                     WorkClass, uint64_t, R, W);
  template <typename R, typename W>
  friend grpc::ServerUnaryReactor* RunAsyncOnPool(WorkerPool*, grpc::CallbackServerContext*,
                                                  WorkClass, uint64_t, R, W);
  mutable absl::Mutex mu_;
  grpc::ServerUnaryReactor* call_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::function<void(const absl::Status&, double)> record_;
  absl::Time start_ = absl::Now();
};

// The reactor of a deferred call: finishes on cancellation, and deletes
// itself when gRPC is done (the PendingReply outlives it safely).
class DeferredCall final : public grpc::ServerUnaryReactor {
 public:
  DeferredCall(std::shared_ptr<PendingReply> reply, absl::Time deadline)
      : reply_(std::move(reply)), deadline_(deadline) {}
  OpenedCall open;  // in its pool's open calls until gRPC is done with it
  void OnCancel() override {
    reply_->Complete(DeadlineReached(deadline_, /*cancelled=*/true)
                         ? absl::DeadlineExceededError("the deadline passed while waiting")
                         : absl::CancelledError("the call was cancelled"));
  }
  void OnDone() override { delete this; }

 private:
  std::shared_ptr<PendingReply> reply_;
  absl::Time deadline_;
};

template <typename Record, typename Work>
grpc::ServerUnaryReactor* RunDeferredOnPool(WorkerPool* pool, grpc::CallbackServerContext* ctx,
                                            WorkClass cls, uint64_t units, Record record,
                                            Work work) {
  auto reply = std::make_shared<PendingReply>(
      [record = std::move(record)](const absl::Status& st, double s) mutable { record(st, s); });
  auto* call = new DeferredCall(reply, DeadlineOf(ctx));
  {
    absl::MutexLock l(&reply->mu_);
    reply->call_ = call;
  }
  if (absl::Status st = call->open.Open(pool); !st.ok()) {  // the server is draining
    reply->Complete(st);
    return call;
  }
  // The task never touches ctx (or the request and response, except in a
  // Complete's fill): once the call is finished by a cancellation, gRPC may
  // free them while the task still runs. The work gets what it needs from
  // the request by value.
  const absl::Time deadline = DeadlineOf(ctx);
  absl::Status admitted = pool->TrySubmit(cls, units, deadline, [deadline, reply, work = std::move(work)]() mutable {
    if (reply->finished()) return;  // cancelled while queued
    if (absl::Now() >= deadline) {
      reply->Complete(absl::DeadlineExceededError("the deadline passed while the request was queued"));
      return;
    }
    try {
      work(reply);
    } catch (const std::exception& e) {
      reply->Complete(absl::InternalError(absl::StrCat("internal error: ", e.what())));
    }
  });
  if (!admitted.ok()) reply->Complete(admitted);
  return call;
}

// ---- Replies from a continuation ------------------------------------------
//
// A call whose work starts something that answers on another thread (a
// router's search: its fan-out's `done` runs on a gRPC callback thread):
// the worker starts it and returns, and the continuation completes the
// reply.
//
//   return RunAsyncOnPool(pool_, ctx, cls, units, record,
//                         [=](const std::atomic<bool>* cancelled,
//                             std::shared_ptr<PendingReply> reply) {
//     backend->SearchAsync(..., [=](auto answer) {
//       reply->Complete(status, [&] { fill *resp from *req and answer });
//     });
//   });
//
// Unlike RunDeferredOnPool, neither a cancellation nor the deadline finishes
// the call: only the reply's first Complete does, which the work promises
// (its continuation always comes: the fan-out ends by its deadline). So
// ctx, the request and the response stay valid until then, as on a worker
// of RunUnaryOnPool: the continuation may read the request, and write the
// response inside `fill`. The rest is RunUnaryOnPool's: a call still
// queued when cancelled or past its deadline is not run (QueuedCallStatus),
// an exception escaping the work becomes INTERNAL (a Complete after that
// does nothing), `record` is called once, before the call finishes. A call
// still waiting for its continuation when the work returns keeps its units
// held in the pool (WorkerPool::Hold): routed searches are shed at the
// read queue's limit.
template <typename Record, typename Work>
grpc::ServerUnaryReactor* RunAsyncOnPool(WorkerPool* pool, grpc::CallbackServerContext* ctx,
                                         WorkClass cls, uint64_t units, Record record,
                                         Work work) {
  // Once the work has returned to the worker without a reply (it waits
  // for its continuation), the call's units are held in the pool until the
  // reply (WorkerPool::Hold): admission sheds a flood as it would queued
  // work. A reply on the worker's own thread holds nothing.
  struct Held {
    absl::Mutex mu;
    bool replied ABSL_GUARDED_BY(mu) = false;
    bool held ABSL_GUARDED_BY(mu) = false;
  };
  auto held = std::make_shared<Held>();
  auto reply = std::make_shared<PendingReply>(
      [record = std::move(record), pool, cls, units, held](const absl::Status& st,
                                                             double s) mutable {
        record(st, s);
        absl::MutexLock l(&held->mu);
        held->replied = true;
        if (held->held) pool->Release(cls, units);
        held->held = false;
      });
  auto* call = new UnaryCall();
  {
    absl::MutexLock l(&reply->mu_);
    reply->call_ = call;
  }
  if (absl::Status st = call->open.Open(pool); !st.ok()) {  // the server is draining
    reply->Complete(st);
    return call;
  }
  absl::Status admitted = pool->TrySubmit(
      cls, units, DeadlineOf(ctx),
      [ctx, call, reply, pool, cls, units, held, work = std::move(work)]() mutable {
        if (absl::Status st = QueuedCallStatus(ctx, call->cancelled.load()); !st.ok()) {
          reply->Complete(st);
          return;
        }
        try {
          work(&call->cancelled, reply);
        } catch (const std::exception& e) {
          reply->Complete(absl::InternalError(absl::StrCat("internal error: ", e.what())));
        }
        absl::MutexLock l(&held->mu);
        if (!held->replied) {
          pool->Hold(cls, units);
          held->held = true;
        }
      });
  if (!admitted.ok()) reply->Complete(admitted);
  return call;
}

}  // namespace zoom::server

#endif  // ZOOM_SERVER_GRPC_UNARY_CALL_H_
