// File: server/grpc/decoder_service.h
//
// DecoderService: zoom.v1.Decoder (callback API), a thin adapter over a
// DecoderEngine: model loading, unary TopK over a batch of contexts, and
// StreamTopK (one decoding step per message, answered in order, without
// per-call overhead). The engine validates and decodes
// (DecoderEngine::TopK); the call's deadline and cancellation reach it.
// Work runs on the shared WorkerPool; errors are gRPC codes with messages
// that say what to fix.
//
// Thread safety: as VectorSearchService; the engine, metrics (may be null)
// and pool outlive the service.
#ifndef ZOOM_SERVER_GRPC_DECODER_SERVICE_H_
#define ZOOM_SERVER_GRPC_DECODER_SERVICE_H_

#include <string>

#include "server/engine/decoder_engine.h"
#include "server/grpc/auth.h"
#include "server/grpc/worker_pool.h"
#include "server/metrics/metrics.h"
#include "zoom/v1/decoder.grpc.pb.h"

namespace zoom::server {

// The server's limits of a TopK call (enforced by the engine).
using DecoderLimits = DecodeLimits;

// StreamTopK is a raw method (grpc::ByteBuffer messages, parsed here), so a
// step that does not parse ends the stream with INVALID_ARGUMENT instead of
// looking like the end of the stream.
using DecoderCallbackBase = v1::Decoder::WithCallbackMethod_LoadModel<
    v1::Decoder::WithCallbackMethod_UnloadModel<v1::Decoder::WithCallbackMethod_ListModels<
        v1::Decoder::WithCallbackMethod_TopK<
            v1::Decoder::WithRawCallbackMethod_StreamTopK<v1::Decoder::Service>>>>>;

// What StreamTopK runs each step on: a zoomd's engine (DecoderService) or a
// cluster's nodes (RouterDecoderService).
class TopKBackend {
 public:
  virtual ~TopKBackend() = default;
  // One step; `ctx` is the stream's (its deadline is in `call`).
  virtual absl::Status Decode(const v1::TopKRequest& req, const CallContext& call,
                              const grpc::ServerContextBase& ctx,
                              v1::TopKResponse* resp) const = 0;
  virtual WorkerPool* pool() const = 0;
  virtual const Authenticator* auth() const = 0;
  virtual void Record(const char* rpc, const absl::Status& status, double seconds) const = 0;
};

// StreamTopK over `backend` (which outlives the stream): reads a step,
// decodes it on the backend's pool, writes the answer, then reads the next
// (in order, one write in flight). A step that does not parse, or the first
// error, ends the stream with its status, naming the step.
grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* NewStreamTopK(
    const TopKBackend* backend, grpc::CallbackServerContext* ctx);

class DecoderService final : public DecoderCallbackBase, public TopKBackend {
 public:
  DecoderService(DecoderEngine* engine, Metrics* metrics, WorkerPool* pool,
                 const Authenticator* auth = nullptr);

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

  // A node of cluster `cluster`: LoadModel and UnloadModel are refused
  // (FailedPrecondition: the cluster's models go through a router; this
  // node loads what the models bucket says).
  void SetClusterNode(std::string cluster) { cluster_ = std::move(cluster); }

  // One TopK request: proto -> DecoderEngine::TopK -> proto (shared by
  // TopK and StreamTopK).
  absl::Status Decode(const v1::TopKRequest& req, const CallContext& call,
                      const grpc::ServerContextBase& ctx, v1::TopKResponse* resp) const override;
  WorkerPool* pool() const override { return pool_; }
  const Authenticator* auth() const override { return auth_; }
  void Record(const char* rpc, const absl::Status& status, double seconds) const override;

 private:
  DecoderEngine* engine_;
  Metrics* metrics_;
  WorkerPool* pool_;
  const Authenticator* auth_;
  std::string cluster_;  // "" unless a cluster's node
  absl::Status NodeRefuses(const char* rpc) const;
};

}  // namespace zoom::server

#endif  // ZOOM_SERVER_GRPC_DECODER_SERVICE_H_
