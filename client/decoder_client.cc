#include "client/decoder_client.h"

#include <utility>

#include "grpcpp/channel.h"

namespace zoom::client {

absl::StatusOr<std::unique_ptr<DecoderClient>> DecoderClient::Open(const std::string& target,
                                                                   const ClientOptions& options) {
  auto channel = MakeChannel(target, options);
  if (!channel.ok()) return channel.status();
  return std::make_unique<DecoderClient>(std::move(*channel), options);
}

std::unique_ptr<DecoderClient> DecoderClient::Connect(const std::string& target,
                                                      const ClientOptions& options) {
  return std::make_unique<DecoderClient>(MakeChannelOrFailing(target, options), options);
}

DecoderClient::DecoderClient(std::shared_ptr<grpc::Channel> channel, const ClientOptions& options)
    : channel_(std::move(channel)), stub_(v1::Decoder::NewStub(channel_)), options_(options) {}

void DecoderClient::Prepare(grpc::ClientContext* context, absl::Duration timeout) const {
  PrepareContext(context, timeout, options_);
}

absl::StatusOr<v1::ModelInfo> DecoderClient::LoadModel(const std::string& name,
                                                       const std::string& dir, bool wait,
                                                       uint32_t m, uint32_t ef_construction,
                                                       uint32_t default_ef) {
  grpc::ClientContext context;
  Prepare(&context, options_.timeout);
  v1::LoadModelRequest request;
  request.set_name(name);
  request.set_dir(dir);
  request.set_wait(wait);
  request.set_m(m);
  request.set_ef_construction(ef_construction);
  request.set_default_ef(default_ef);
  v1::LoadModelResponse response;
  absl::Status status = FromGrpc(stub_->LoadModel(&context, request, &response));
  if (!status.ok()) return status;
  return std::move(*response.mutable_info());
}

absl::Status DecoderClient::UnloadModel(const std::string& name) {
  grpc::ClientContext context;
  Prepare(&context, options_.timeout);
  v1::UnloadModelRequest request;
  request.set_name(name);
  v1::UnloadModelResponse response;
  return FromGrpc(stub_->UnloadModel(&context, request, &response));
}

absl::StatusOr<std::vector<v1::ModelInfo>> DecoderClient::ListModels() {
  grpc::ClientContext context;
  Prepare(&context, options_.timeout);
  v1::ListModelsResponse response;
  absl::Status status = FromGrpc(stub_->ListModels(&context, v1::ListModelsRequest(), &response));
  if (!status.ok()) return status;
  std::vector<v1::ModelInfo> models;
  for (v1::ModelInfo& m : *response.mutable_models()) models.push_back(std::move(m));
  return models;
}

absl::StatusOr<v1::TopKResponse> DecoderClient::TopK(const v1::TopKRequest& request) {
  return TopK(request, options_.timeout);
}

absl::StatusOr<v1::TopKResponse> DecoderClient::TopK(const v1::TopKRequest& request,
                                                     absl::Duration timeout) {
  grpc::ClientContext context;
  Prepare(&context, timeout);
  v1::TopKResponse response;
  absl::Status status = FromGrpc(stub_->TopK(&context, request, &response));
  if (!status.ok()) return status;
  return response;
}

std::unique_ptr<DecoderClient::Stream> DecoderClient::OpenStream() {
  std::unique_ptr<Stream> s(new Stream());
  Prepare(&s->context_, options_.timeout);
  s->rw_ = stub_->StreamTopK(&s->context_);
  return s;
}

absl::StatusOr<v1::TopKResponse> DecoderClient::Stream::Step(const v1::TopKRequest& step) {
  v1::TopKResponse response;
  if (!done_ && rw_->Write(step) && rw_->Read(&response)) return response;
  absl::Status st = Finish();
  return st.ok() ? absl::InternalError("the stream ended without an answer") : st;
}

absl::Status DecoderClient::Stream::Finish() {
  if (!done_) {
    done_ = true;
    rw_->WritesDone();
    v1::TopKResponse drain;
    while (rw_->Read(&drain)) {
    }
    last_ = FromGrpc(rw_->Finish());
  }
  return last_;
}

}  // namespace zoom::client
