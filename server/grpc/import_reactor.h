// File: server/grpc/import_reactor.h
//
// ImportReactor: the client-streaming Import of zoom.v1.VectorSearch, shared
// by the standalone service and a cluster's router. Messages arrive raw and
// are parsed here, so that one that does not parse ends the import with
// INVALID_ARGUMENT naming it (gRPC's typed reader would report it as the end
// of the stream). Each message is applied on the WorkerPool (admission by
// its size) before the next is read: flow control, and an acknowledged
// message is durable. An error ends the import saying how many points were
// imported before it.
#ifndef ZOOM_SERVER_GRPC_IMPORT_REACTOR_H_
#define ZOOM_SERVER_GRPC_IMPORT_REACTOR_H_

#include <cstdint>
#include <functional>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/grpc/auth.h"
#include "server/grpc/unary_call.h"
#include "server/grpc/worker_pool.h"
#include "zoom/v1/zoom.pb.h"

namespace zoom::server {

struct ImportHooks {
  WorkerPool* pool = nullptr;
  const Authenticator* auth = nullptr;  // may be null: every call allowed
  // Refuses the whole import before anything is read (OK: go on).
  std::function<absl::Status()> precheck;
  // Applies one message's points to `collection`, adding to *imported.
  std::function<absl::Status(const std::string& collection, v1::ImportRequest* req,
                             uint64_t* imported)>
      apply;
  // Completes the response (may be empty).
  std::function<void(v1::ImportResponse* out)> finish;
  std::function<void(const absl::Status& status, double seconds)> record;
};

class ImportReactor final : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  ImportReactor(ImportHooks hooks, grpc::CallbackServerContext* ctx, grpc::ByteBuffer* resp)
      : hooks_(std::move(hooks)), ctx_(ctx), resp_(resp) {
    absl::Status st = open_.Open(hooks_.pool);  // refused while the server drains
    if (st.ok()) st = AuthorizeCall(hooks_.auth, *ctx, Role::kAdmin);
    if (st.ok() && hooks_.precheck) st = hooks_.precheck();
    if (!st.ok()) {
      Done(st);
      return;
    }
    StartRead(&raw_);
  }
  void OnReadDone(bool ok) override {
    if (!ok) {  // the client half-closed (or the call broke)
      Done(ctx_->IsCancelled() ? absl::CancelledError("the import was cancelled")
                               : absl::OkStatus());
      return;
    }
    // A write's cost for admission: about a unit per 40 KB (100 points of
    // 100 floats).
    const uint64_t units = 1 + raw_.Length() / 40000;
    absl::Status admitted =
        hooks_.pool->TrySubmit(WorkClass::kWrite, units, DeadlineOf(ctx_), [this] {
          absl::Status st;
          req_.Clear();
          const grpc::Status parsed =
              grpc::SerializationTraits<v1::ImportRequest>::Deserialize(&raw_, &req_);
          raw_.Clear();
          if (!parsed.ok()) {
            st = absl::InvalidArgumentError(absl::StrCat(
                "Import message #", messages_, " could not be parsed as a zoom.v1.ImportRequest"));
          } else {
            if (!req_.collection().empty()) collection_ = req_.collection();
            if (collection_.empty()) {
              st = absl::InvalidArgumentError("the first Import message must name the collection");
            } else if (ctx_->IsCancelled()) {
              st = absl::CancelledError("the import was cancelled");
            } else {
              st = hooks_.apply(collection_, &req_, &imported_);
              if (!st.ok()) {
                st = absl::Status(st.code(),
                                  absl::StrCat("Import message #", messages_, ": ", st.message()));
              }
            }
          }
          if (!st.ok()) {
            Done(absl::Status(st.code(), absl::StrCat(st.message(), " (", imported_,
                                                      " points were imported before it)")));
            return;
          }
          ++messages_;
          StartRead(&raw_);
        });
    if (!admitted.ok()) {
      Done(absl::Status(admitted.code(),
                        absl::StrCat("Import message #", messages_, ": ", admitted.message(),
                                     " (", imported_, " points were imported before it)")));
    }
  }
  void OnDone() override { delete this; }

 private:
  void Done(const absl::Status& st) {
    v1::ImportResponse out;
    out.set_imported(imported_);
    if (hooks_.finish) hooks_.finish(&out);
    SerializeToByteBuffer(out, resp_);
    if (hooks_.record) hooks_.record(st, absl::ToDoubleSeconds(absl::Now() - start_));
    Finish(ToGrpc(st));
  }

  OpenedCall open_;  // in the pool's open calls until gRPC is done with the call
  ImportHooks hooks_;
  grpc::CallbackServerContext* ctx_;
  grpc::ByteBuffer* resp_;
  grpc::ByteBuffer raw_;
  v1::ImportRequest req_;
  std::string collection_;
  uint64_t imported_ = 0;
  uint64_t messages_ = 0;
  absl::Time start_ = absl::Now();
};

}  // namespace zoom::server

#endif  // ZOOM_SERVER_GRPC_IMPORT_REACTOR_H_
