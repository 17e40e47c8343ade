// File: server/grpc/router_decoder_service.h
//
// RouterDecoderService: zoom.v1.Decoder on a router (zoomd --role=router),
// a thin adapter over router::ModelRouter (server/cluster/router/
// model_router.h says what each call does in a cluster).
//
// Thread safety: gRPC calls the handlers from many threads; the router,
// metrics (may be null) and pool outlive the service.
#ifndef ZOOM_SERVER_GRPC_ROUTER_DECODER_SERVICE_H_
#define ZOOM_SERVER_GRPC_ROUTER_DECODER_SERVICE_H_

#include "server/cluster/router/model_router.h"
#include "server/grpc/auth.h"
#include "server/grpc/decoder_service.h"
#include "server/grpc/worker_pool.h"
#include "server/metrics/metrics.h"

namespace zoom::server {

class RouterDecoderService final : public DecoderCallbackBase, public TopKBackend {
 public:
  RouterDecoderService(router::ModelRouter* models, absl::Duration default_deadline,
                       Metrics* metrics, WorkerPool* pool, const Authenticator* auth)
      : models_(models),
        default_deadline_(default_deadline),
        metrics_(metrics),
        pool_(pool),
        auth_(auth) {}

  grpc::ServerUnaryReactor* LoadModel(grpc::CallbackServerContext* ctx,
                                      const v1::LoadModelRequest* req,
                                      v1::LoadModelResponse* resp) override;
  grpc::ServerUnaryReactor* UnloadModel(grpc::CallbackServerContext* ctx,
                                        const v1::UnloadModelRequest* req,
                                        v1::UnloadModelResponse* resp) override;
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* ctx,
                                       const v1::ListModelsRequest* req,
                                       v1::ListModelsResponse* resp) override;
  grpc::ServerUnaryReactor* TopK(grpc::CallbackServerContext* ctx, const v1::TopKRequest* req,
                                 v1::TopKResponse* resp) override;
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* StreamTopK(
      grpc::CallbackServerContext* ctx) override;

  absl::Status Decode(const v1::TopKRequest& req, const CallContext& call,
                      const grpc::ServerContextBase& ctx, v1::TopKResponse* resp) const override;
  WorkerPool* pool() const override { return pool_; }
  const Authenticator* auth() const override { return auth_; }
  void Record(const char* rpc, const absl::Status& status, double seconds) const override;

 private:
  template <typename Work>
  grpc::ServerUnaryReactor* Run(grpc::CallbackServerContext* ctx, const char* rpc,
                                WorkClass cls, Work work);
  absl::Time ReadDeadline(const grpc::CallbackServerContext* ctx) const;

  router::ModelRouter* models_;
  absl::Duration default_deadline_;
  Metrics* metrics_;
  WorkerPool* pool_;
  const Authenticator* auth_;
};

}  // namespace zoom::server

#endif  // ZOOM_SERVER_GRPC_ROUTER_DECODER_SERVICE_H_
