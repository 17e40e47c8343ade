#include "server/grpc/snapshot_reactors.h"

#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/api/convert.h"
#include "server/grpc/unary_call.h"

namespace zoom::server {
namespace {

class DownloadReactor final : public grpc::ServerWriteReactor<v1::SnapshotChunk> {
 public:
  DownloadReactor(const VectorSearchService* service, grpc::CallbackServerContext* ctx,
                  const v1::DownloadSnapshotRequest& req)
      : service_(service) {
    absl::Status st = open_.Open(service_->pool());  // refused while the server drains
    if (st.ok()) st = AuthorizeCall(service_->auth(), *ctx, Role::kAdmin);
    if (st.ok()) {
      auto reader = service_->backend()->OpenSnapshot(CallOf(ctx, nullptr), req.collection(),
                                                      req.name());
      if (reader.ok()) {
        reader_ = std::move(*reader);
        info_ = ToProto(reader_->info());
      } else {
        st = reader.status();
      }
    }
    if (!st.ok()) {
      Done(st);
      return;
    }
    Next();
  }
  void OnWriteDone(bool ok) override {
    if (!ok) {
      Done(absl::CancelledError("the client went away"));
      return;
    }
    Next();
  }
  void OnDone() override { delete this; }

 private:
  void Next() {
    // Chunks are read work (a long snapshot or restore holding the admin
    // workers does not stall a download).
    absl::Status admitted =
        service_->pool()->TrySubmit(WorkClass::kRead, 1, absl::InfiniteFuture(), [this] {
          chunk_.Clear();
          std::string* data = chunk_.mutable_data();
          if (absl::Status st = reader_->Read(1 << 20, data); !st.ok()) return Done(st);
          if (data->empty()) return Done(absl::OkStatus());
          chunk_.set_offset(offset_);
          if (offset_ == 0) *chunk_.mutable_info() = info_;
          offset_ += data->size();
          StartWrite(&chunk_);
        });
    if (!admitted.ok()) Done(admitted);
  }
  void Done(const absl::Status& st) {
    service_->Record("DownloadSnapshot", st, absl::ToDoubleSeconds(absl::Now() - start_));
    Finish(ToGrpc(st));
  }
  OpenedCall open_;  // in the pool's open calls until gRPC is done with the call
  const VectorSearchService* service_;
  std::unique_ptr<api::SnapshotReader> reader_;
  v1::SnapshotInfo info_;
  v1::SnapshotChunk chunk_;
  uint64_t offset_ = 0;
  absl::Time start_ = absl::Now();
};

class RestoreReactor final : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  RestoreReactor(const VectorSearchService* service, grpc::CallbackServerContext* ctx,
                 grpc::ByteBuffer* resp)
      : service_(service), ctx_(ctx), resp_(resp), call_(CallOf(ctx, nullptr)) {
    if (absl::Status st = open_.Open(service_->pool()); !st.ok()) {  // the server drains
      Done(st);
      return;
    }
    if (absl::Status st = AuthorizeCall(service_->auth(), *ctx, Role::kAdmin); !st.ok()) {
      Done(st);
      return;
    }
    if (absl::Status st = service_->backend()->AcceptsWrites("RestoreSnapshot"); !st.ok()) {
      Done(st);
      return;
    }
    StartRead(&raw_);
  }
  void OnReadDone(bool ok) override {
    if (!ok) {
      if (ctx_->IsCancelled()) return Done(absl::CancelledError("the restore was cancelled"));
      if (messages_ == 0) return Done(absl::InvalidArgumentError("no RestoreSnapshot message"));
      return Restore();
    }
    // Upload chunks are write work, admitted like Import messages.
    absl::Status admitted = service_->pool()->TrySubmit(
        WorkClass::kWrite, 1 + raw_.Length() / 40000, absl::InfiniteFuture(), [this] {
      v1::RestoreSnapshotRequest req;
      const grpc::Status parsed =
          grpc::SerializationTraits<v1::RestoreSnapshotRequest>::Deserialize(&raw_, &req);
      raw_.Clear();
      if (!parsed.ok()) {
        return Done(absl::InvalidArgumentError(absl::StrCat(
            "RestoreSnapshot message #", messages_,
            " could not be parsed as a zoom.v1.RestoreSnapshotRequest")));
      }
      if (messages_++ == 0) {
        if (!req.source().empty() && !req.data().empty()) {
          return Done(absl::InvalidArgumentError("give a source or data, not both"));
        }
        auto restore = service_->backend()->BeginRestore(call_, req.collection(),
                                                         req.overwrite(), req.source());
        if (!restore.ok()) return Done(restore.status());
        restore_ = std::move(*restore);
        // A restore from a source runs when the stream ends: a message
        // after it is refused (by Append), not ignored.
        if (!req.source().empty()) {
          StartRead(&raw_);
          return;
        }
      } else if (!req.collection().empty() || !req.source().empty()) {
        return Done(absl::InvalidArgumentError(
            "only the first RestoreSnapshot message names the collection and source"));
      }
      if (absl::Status st = restore_->Append(req.data()); !st.ok()) return Done(st);
      StartRead(&raw_);
    });
    if (!admitted.ok()) Done(admitted);
  }
  void OnDone() override { delete this; }

 private:
  void Restore() {
    service_->pool()->Submit([this] {
      auto d = restore_->Finish(call_);
      restore_.reset();  // the staged upload goes now
      if (!d.ok()) return Done(d.status());
      v1::RestoreSnapshotResponse out;
      *out.mutable_info() = api::ToProto(*d);
      SerializeToByteBuffer(out, resp_);
      service_->RefreshCollectionMetrics();
      Done(absl::OkStatus());
    });
  }
  void Done(const absl::Status& st) {
    restore_.reset();
    service_->Record("RestoreSnapshot", st, absl::ToDoubleSeconds(absl::Now() - start_));
    Finish(ToGrpc(st));
  }

  OpenedCall open_;  // in the pool's open calls until gRPC is done with the call
  const VectorSearchService* service_;
  grpc::CallbackServerContext* ctx_;
  grpc::ByteBuffer* resp_;
  api::Call call_;
  grpc::ByteBuffer raw_;
  uint64_t messages_ = 0;
  std::unique_ptr<api::SnapshotRestore> restore_;
  absl::Time start_ = absl::Now();
};

}  // namespace

grpc::ServerWriteReactor<v1::SnapshotChunk>* NewDownloadReactor(
    const VectorSearchService* service, grpc::CallbackServerContext* ctx,
    const v1::DownloadSnapshotRequest& req) {
  return new DownloadReactor(service, ctx, req);
}

grpc::ServerReadReactor<grpc::ByteBuffer>* NewRestoreReactor(const VectorSearchService* service,
                                                             grpc::CallbackServerContext* ctx,
                                                             grpc::ByteBuffer* resp) {
  return new RestoreReactor(service, ctx, resp);
}

}  // namespace zoom::server
