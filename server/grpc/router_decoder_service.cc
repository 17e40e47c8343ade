#include "server/grpc/router_decoder_service.h"

#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "server/grpc/unary_call.h"
#include "server/grpc/vector_search_service.h"

namespace zoom::server {
void RouterDecoderService::Record(const char* rpc, const absl::Status& status,
                                  double seconds) const {
  if (metrics_ != nullptr) metrics_->RecordRpc(rpc, status.code(), seconds);
}

absl::Time RouterDecoderService::ReadDeadline(const grpc::CallbackServerContext* ctx) const {
  absl::Time d = DeadlineOf(ctx);
  return d == absl::InfiniteFuture() ? absl::Now() + default_deadline_ : d;
}

template <typename Work>
grpc::ServerUnaryReactor* RouterDecoderService::Run(grpc::CallbackServerContext* ctx,
                                                    const char* rpc, WorkClass cls, Work work) {
  auto record = [this, rpc](const absl::Status& st, double s) { Record(rpc, st, s); };
  if (absl::Status st = AuthorizeCall(auth_, *ctx, RoleFor(cls)); !st.ok()) {
    return FinishNow(st, record);
  }
  return RunUnaryOnPool(pool_, ctx, cls, 1, std::move(record),
                        [work = std::move(work)](const std::atomic<bool>*) { return work(); });
}

absl::Status RouterDecoderService::Decode(const v1::TopKRequest& req, const CallContext& call,
                                          const grpc::ServerContextBase& ctx,
                                          v1::TopKResponse* resp) const {
  absl::Time deadline = call.deadline;
  if (deadline == absl::InfiniteFuture()) deadline = absl::Now() + default_deadline_;
  return models_->TopK(req, deadline, CallOf(ctx, deadline, nullptr), resp);
}

grpc::ServerUnaryReactor* RouterDecoderService::LoadModel(grpc::CallbackServerContext* ctx,
                                                          const v1::LoadModelRequest* req,
                                                          v1::LoadModelResponse* resp) {
  // A load takes minutes for a large vocabulary: without a client deadline
  // the wait is bounded at an hour.
  absl::Time deadline = DeadlineOf(ctx);
  if (deadline == absl::InfiniteFuture()) deadline = absl::Now() + absl::Hours(1);
  return Run(ctx, "LoadModel", WorkClass::kAdmin, [this, ctx, req, resp, deadline] {
    ZOOM_ASSIGN_OR_RETURN(v1::ModelInfo info,
                          models_->Load(*req, deadline, CallOf(*ctx, deadline, nullptr)));
    *resp->mutable_info() = std::move(info);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* RouterDecoderService::UnloadModel(grpc::CallbackServerContext* ctx,
                                                            const v1::UnloadModelRequest* req,
                                                            v1::UnloadModelResponse*) {
  const absl::Time deadline = ReadDeadline(ctx);
  return Run(ctx, "UnloadModel", WorkClass::kAdmin,
             [this, req, deadline] { return models_->Unload(req->name(), deadline); });
}

grpc::ServerUnaryReactor* RouterDecoderService::ListModels(grpc::CallbackServerContext* ctx,
                                                           const v1::ListModelsRequest*,
                                                           v1::ListModelsResponse* resp) {
  const absl::Time deadline = ReadDeadline(ctx);
  return Run(ctx, "ListModels", WorkClass::kRead, [this, ctx, resp, deadline] {
    ZOOM_ASSIGN_OR_RETURN(std::vector<v1::ModelInfo> all,
                          models_->List(deadline, CallOf(*ctx, deadline, nullptr)));
    for (v1::ModelInfo& m : all) *resp->add_models() = std::move(m);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* RouterDecoderService::TopK(grpc::CallbackServerContext* ctx,
                                                     const v1::TopKRequest* req,
                                                     v1::TopKResponse* resp) {
  const absl::Time deadline = ReadDeadline(ctx);
  return Run(ctx, "TopK", WorkClass::kRead, [this, ctx, req, resp, deadline] {
    return models_->TopK(*req, deadline, CallOf(*ctx, deadline, nullptr), resp);
  });
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* RouterDecoderService::StreamTopK(
    grpc::CallbackServerContext* ctx) {
  return NewStreamTopK(this, ctx);
}

}  // namespace zoom::server
