#include "server/grpc/decoder_service.h"

#include <cmath>
#include <deque>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "common/timer.h"
#include "common/vector_limits.h"
#include "server/grpc/unary_call.h"

namespace zoom::server {
namespace {

v1::ModelInfo ToProto(const LoadedModel& m) {
  v1::ModelInfo info;
  info.set_name(m.name);
  info.set_dir(m.dir);
  const ModelState state = m.state.load();
  info.set_state(state == ModelState::kServing   ? v1::SERVING
                 : state == ModelState::kLoading ? v1::LOADING
                                                 : v1::MODEL_FAILED);
  info.set_progress(m.progress.load());
  info.set_m(m.options.hnsw.M);
  info.set_ef_construction(m.options.hnsw.ef_construction);
  if (state == ModelState::kServing) {
    info.set_vocab_size(m.vocab);
    info.set_dim(m.dim);
    info.set_graph_bytes(m.index->GraphBytes());
    info.set_resident_bytes(m.index->ResidentBytes());
    info.set_graph_from_cache(m.graph_from_cache);
    info.set_default_ef(m.default_ef);
    info.set_default_ef_source(m.default_ef_source == LoadedModel::EfSource::kRequest ? "request"
                               : m.default_ef_source == LoadedModel::EfSource::kCalibrated
                                   ? "calibrated"
                                   : "builtin");
    info.set_calibration_contexts(m.calibration.contexts);
    info.set_calibration_p1(m.calibration.p1);
    info.set_calibration_p5(m.calibration.p5);
    info.set_calibration_error(m.calibration_error);
  }
  if (state == ModelState::kFailed) {
    info.set_error(m.error);
    info.set_error_code(static_cast<int32_t>(m.error_code == absl::StatusCode::kOk
                                                 ? absl::StatusCode::kInternal
                                                 : m.error_code));
  }
  return info;
}

}  // namespace

absl::Status DecoderService::NodeRefuses(const char* rpc) const {
  return absl::FailedPreconditionError(absl::StrCat(
      "this zoomd is a node of cluster ", cluster_, ": send ", rpc,
      " to a router (--role=router); every node loads the cluster's models"));
}

DecoderService::DecoderService(DecoderEngine* engine, Metrics* metrics, WorkerPool* pool,
                               const Authenticator* auth)
    : engine_(engine), metrics_(metrics), pool_(pool), auth_(auth) {}

void DecoderService::Record(const char* rpc, const absl::Status& status, double seconds) const {
  if (metrics_ != nullptr) metrics_->RecordRpc(rpc, status.code(), seconds);
}

namespace {
template <typename Work>
grpc::ServerUnaryReactor* RunOnPool(const DecoderService* service,
                                    grpc::CallbackServerContext* ctx, const char* rpc,
                                    WorkClass cls, uint64_t units, Work work) {
  auto record = [service, rpc](const absl::Status& st, double seconds) {
    service->Record(rpc, st, seconds);
  };
  if (absl::Status st = AuthorizeCall(service->auth(), *ctx, RoleFor(cls)); !st.ok()) {
    return FinishNow(st, record);
  }
  return RunUnaryOnPool(
      service->pool(), ctx, cls, units, std::move(record),
      [work = std::move(work)](const std::atomic<bool>*) mutable { return work(); });
}
}  // namespace

grpc::ServerUnaryReactor* DecoderService::LoadModel(grpc::CallbackServerContext* ctx,
                                                    const v1::LoadModelRequest* req,
                                                    v1::LoadModelResponse* resp) {
  // Waiting for the load does not hold a worker: the loader thread
  // completes the reply (see RunDeferredOnPool).
  if (absl::Status st = AuthorizeCall(auth_, *ctx, Role::kAdmin); !st.ok()) {
    return FinishNow(st, [this](const absl::Status& s, double t) { Record("LoadModel", s, t); });
  }
  if (!cluster_.empty()) {
    return FinishNow(NodeRefuses("LoadModel"),
                     [this](const absl::Status& s, double t) { Record("LoadModel", s, t); });
  }
  return RunDeferredOnPool(
      pool_, ctx, WorkClass::kAdmin, 1,
      [this](const absl::Status& st, double seconds) { Record("LoadModel", st, seconds); },
      [this, request = *req, resp](std::shared_ptr<PendingReply> reply) {
        index::FgdOptions options;
        if (request.m() != 0) options.hnsw.M = request.m();
        if (request.ef_construction() != 0) options.hnsw.ef_construction = request.ef_construction();
        auto model = engine_->Load(request.name(), request.dir(), options, request.default_ef());
        if (!model.ok()) return reply->Complete(model.status());
        std::shared_ptr<LoadedModel> m = *model;
        if (!request.wait()) {
          return reply->Complete(absl::OkStatus(), [resp, m] { *resp->mutable_info() = ToProto(*m); });
        }
        DecoderEngine* engine = engine_;  // the callback may outlive this service's calls
        engine->WhenLoaded(m, [engine, reply, resp, m](absl::Status st) {
          if (!st.ok()) {
            // Leave nothing half-loaded behind a failed wait.
            engine->Unload(m->name, m.get()).IgnoreError();
            return reply->Complete(st);
          }
          reply->Complete(absl::OkStatus(), [resp, m] { *resp->mutable_info() = ToProto(*m); });
        });
      });
}

grpc::ServerUnaryReactor* DecoderService::UnloadModel(grpc::CallbackServerContext* ctx,
                                                      const v1::UnloadModelRequest* req,
                                                      v1::UnloadModelResponse*) {
  return RunOnPool(this, ctx, "UnloadModel", WorkClass::kAdmin, 1, [this, req] {
    if (!cluster_.empty()) return NodeRefuses("UnloadModel");
    return engine_->Unload(req->name());
  });
}

grpc::ServerUnaryReactor* DecoderService::ListModels(grpc::CallbackServerContext* ctx,
                                                     const v1::ListModelsRequest*,
                                                     v1::ListModelsResponse* resp) {
  return RunOnPool(this, ctx, "ListModels", WorkClass::kRead, 1, [this, resp] {
    for (const auto& m : engine_->List()) *resp->add_models() = ToProto(*m);
    return absl::OkStatus();
  });
}

absl::Status DecoderService::Decode(const v1::TopKRequest& req, const CallContext& call,
                                    const grpc::ServerContextBase&,
                                    v1::TopKResponse* resp) const {
  TopKRequest request;
  request.model = req.model();
  request.contexts.reserve(req.contexts_size());
  for (const v1::Context& c : req.contexts()) {
    request.contexts.emplace_back(c.h().data(), c.h().size());
  }
  request.k = req.k();
  request.ef = req.ef();
  request.exact = req.exact();
  request.tail_samples = req.tail_samples();
  switch (req.tail()) {
    case v1::TAIL_ESTIMATE_DEFAULT:
      request.tail = TopKRequest::Tail::kDefault;
      break;
    case v1::TAIL_ESTIMATE_CLUSTERS:
      request.tail = TopKRequest::Tail::kClusters;
      break;
    case v1::TAIL_ESTIMATE_SAMPLE:
      request.tail = TopKRequest::Tail::kSample;
      break;
    case v1::TAIL_ESTIMATE_NONE:
      request.tail = TopKRequest::Tail::kNone;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("tail ", static_cast<int>(req.tail()),
                       " is not a TailEstimate (0 default, 1 clusters, 2 sample, 3 none)"));
  }
  request.with_probs = req.return_probs();
  request.with_words = req.return_words();
  std::vector<TopKAnswer> answers;
  TopKStats stats;
  ZOOM_RETURN_IF_ERROR(engine_->TopK(request, call, &answers, &stats));
  for (TopKAnswer& a : answers) {
    v1::TopKResult* out = resp->add_results();
    out->mutable_ids()->Assign(a.ids.begin(), a.ids.end());
    out->mutable_logits()->Assign(a.logits.begin(), a.logits.end());
    out->mutable_probs()->Assign(a.probs.begin(), a.probs.end());
    for (std::string& w : a.words) out->add_words(std::move(w));
    out->set_tail_mass(a.tail_mass);
    out->mutable_stats()->set_micros(a.micros);
    out->mutable_stats()->set_distance_evals(a.distance_evals);
    out->mutable_stats()->set_ef(a.ef);
  }
  if (metrics_ != nullptr) {
    metrics_->RecordDecode(stats.contexts, stats.distance_evals, stats.exact, stats.seconds);
  }
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* DecoderService::TopK(grpc::CallbackServerContext* ctx,
                                               const v1::TopKRequest* req,
                                               v1::TopKResponse* resp) {
  auto record = [this](const absl::Status& st, double seconds) { Record("TopK", st, seconds); };
  if (absl::Status st = AuthorizeCall(auth_, *ctx, Role::kRead); !st.ok()) {
    return FinishNow(st, record);
  }
  const absl::Time deadline = DeadlineOf(ctx);
  return RunUnaryOnPool(pool_, ctx, WorkClass::kRead, std::max(1, req->contexts_size()),
                        std::move(record),
                        [this, ctx, req, resp, deadline](const std::atomic<bool>* cancelled) {
                          return Decode(*req, CallContext{deadline, cancelled}, *ctx, resp);
                        });
}

namespace {

// StreamTopK: reads one step, decodes it on the pool, writes the answer,
// then reads the next (in order; at most one write in flight). The first
// error, or a step that does not parse, ends the stream with its status.
class StreamReactor final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  StreamReactor(const TopKBackend* service, grpc::CallbackServerContext* ctx)
      : service_(service), ctx_(ctx) {
    if (absl::Status st = open_.Open(service_->pool()); !st.ok()) {  // the server drains
      Done(st);
      return;
    }
    if (absl::Status st = AuthorizeCall(service_->auth(), *ctx, Role::kRead); !st.ok()) {
      Done(st);
      return;
    }
    StartRead(&raw_in_);
  }
  void OnReadDone(bool ok) override {
    if (!ok) {
      Done(ctx_->IsCancelled() ? absl::CancelledError("the stream was cancelled")
                               : absl::OkStatus());
      return;
    }
    // About a unit per context (of up to 1 KiB of floats).
    const uint64_t units = 1 + raw_in_.Length() / 1024;
    absl::Status admitted = service_->pool()->TrySubmit(WorkClass::kRead, units, DeadlineOf(ctx_), [this] {
      Stopwatch sw;
      req_.Clear();
      resp_.Clear();
      const grpc::Status parsed =
          grpc::SerializationTraits<v1::TopKRequest>::Deserialize(&raw_in_, &req_);
      raw_in_.Clear();
      absl::Status st =
          parsed.ok()
              ? service_->Decode(req_, CallContext{DeadlineOf(ctx_), &cancelled_}, *ctx_, &resp_)
              : absl::InvalidArgumentError("could not be parsed as a zoom.v1.TopKRequest");
      service_->Record("StreamTopK.step", st, sw.ElapsedMicros() * 1e-6);
      if (st.ok()) {
        bool own = false;
        raw_out_.Clear();
        const grpc::Status out =
            grpc::SerializationTraits<v1::TopKResponse>::Serialize(resp_, &raw_out_, &own);
        if (!out.ok()) st = absl::InternalError("the answer could not be serialized");
      }
      if (!st.ok()) {
        Done(absl::Status(st.code(), absl::StrCat("step ", steps_, ": ", st.message())));
        return;
      }
      ++steps_;
      StartWrite(&raw_out_);
    });
    if (!admitted.ok()) {
      Done(absl::Status(admitted.code(), absl::StrCat("step ", steps_, ": ", admitted.message())));
    }
  }
  void OnWriteDone(bool ok) override {
    if (!ok) {
      Done(absl::CancelledError("the client went away"));
      return;
    }
    StartRead(&raw_in_);
  }
  void OnCancel() override { cancelled_ = true; }  // a step in progress stops
  void OnDone() override { delete this; }

 private:
  void Done(const absl::Status& st) {
    service_->Record("StreamTopK", st, absl::ToDoubleSeconds(absl::Now() - start_));
    Finish(ToGrpc(st));
  }
  OpenedCall open_;  // in the pool's open calls until gRPC is done with the call
  const TopKBackend* service_;
  grpc::CallbackServerContext* ctx_;
  grpc::ByteBuffer raw_in_, raw_out_;
  v1::TopKRequest req_;
  v1::TopKResponse resp_;
  uint64_t steps_ = 0;
  std::atomic<bool> cancelled_{false};
  absl::Time start_ = absl::Now();
};

}  // namespace

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* NewStreamTopK(
    const TopKBackend* backend, grpc::CallbackServerContext* ctx) {
  return new StreamReactor(backend, ctx);
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* DecoderService::StreamTopK(
    grpc::CallbackServerContext* ctx) {
  return NewStreamTopK(this, ctx);
}

}  // namespace zoom::server
