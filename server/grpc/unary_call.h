// The unary-RPC pattern of zoomd's callback services: the gRPC thread hands
// the work to the WorkerPool and returns at once; a worker runs it and
// finishes the call.
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
#include <utility>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
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
  void OnCancel() override { cancelled.store(true); }
  void OnDone() override { delete this; }
};

template <typename Record, typename Work>
grpc::ServerUnaryReactor* RunUnaryOnPool(WorkerPool* pool, grpc::CallbackServerContext* ctx,
                                         Record record, Work work) {
  auto* call = new UnaryCall();
  pool->Submit([ctx, call, record = std::move(record), work = std::move(work),
                start = absl::Now()]() mutable {
    absl::Status st;
    if (call->cancelled.load() || ctx->IsCancelled()) {
      st = absl::CancelledError("the call was cancelled before it started");
    } else if (absl::Now() >= DeadlineOf(ctx)) {
      st = absl::DeadlineExceededError("the deadline passed while the request was queued");
    } else {
      try {
        st = work(&call->cancelled);
      } catch (const std::exception& e) {
        st = absl::InternalError(absl::StrCat("internal error: ", e.what()));
      }
    }
    record(st, absl::ToDoubleSeconds(absl::Now() - start));
    call->Finish(ToGrpc(st));
  });
  return call;
}

}  // namespace zoom::server

#endif  // ZOOM_SERVER_GRPC_UNARY_CALL_H_
