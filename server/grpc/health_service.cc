#include "server/grpc/health_service.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/echo.h"
#include "server/grpc/unary_call.h"

namespace zoom::server {
namespace {

namespace hv1 = grpc::health::v1;

// `request` parsed into `out`; false if it does not parse. (The buffer is
// const, and deserializing consumes one: a copy, which shares the slices.)
bool ParseRequest(const grpc::ByteBuffer* request, hv1::HealthCheckRequest* out) {
  grpc::ByteBuffer copy(*request);
  return grpc::SerializationTraits<hv1::HealthCheckRequest>::Deserialize(&copy, out).ok();
}

grpc::Status Unparseable() {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                      "the request could not be parsed as a grpc.health.v1.HealthCheckRequest "
                      "(check the client's protos)");
}

}  // namespace

// One Watch call. Its state is guarded by its own mutex; the service calls
// Update with its mutex held (the lock order), gRPC the reactions. Every
// gRPC operation is started under the mutex: the reactions of a
// ServerWriteReactor are never run inline within StartWrite or Finish (gRPC
// runs them on its own threads), so they cannot deadlock on it.
class HealthService::WatchReactor final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  // A watch that ends at once with `status` (a request that did not parse).
  explicit WatchReactor(const grpc::Status& status) : service_(nullptr) {
    absl::MutexLock l(&mu_);
    FinishLocked(status);
  }
  WatchReactor(HealthService* service, std::string name)
      : service_(service), name_(std::move(name)) {}

  const std::string& name() const { return name_; }

  // The watched service's status is now `status`; `last`: the service shuts
  // down, and the watch ends once it is sent.
  void Update(ServingStatus status, bool last) {
    absl::MutexLock l(&mu_);
    latest_ = status;
    last_ = last_ || last;
    SendLocked();
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock l(&mu_);
    writing_ = false;
    if (!ok) {
      FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "the client went away"));
      return;
    }
    SendLocked();
  }
  void OnCancel() override {
    absl::MutexLock l(&mu_);
    cancelled_ = true;
    SendLocked();  // finishes now, or once the write in flight is done
  }
  void OnDone() override {
    if (service_ != nullptr) service_->Forget(this);
    delete this;
  }

 private:
  // Whatever is due now: finish a cancelled watch, send the latest status if
  // it was not sent yet (the last one with the call's end), or end a watch
  // whose last status went out already. One write at a time.
  void SendLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_ || writing_) return;
    if (cancelled_) {
      FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "the watch was cancelled"));
      return;
    }
    if (!sent_any_ || latest_ != sent_) {
      hv1::HealthCheckResponse resp;
      resp.set_status(latest_);
      if (!SerializeToByteBuffer(resp, &out_)) {
        FinishLocked(
            grpc::Status(grpc::StatusCode::INTERNAL, "the status could not be serialized"));
        return;
      }
      sent_ = latest_;
      sent_any_ = true;
      if (last_) {
        finished_ = true;  // no OnWriteDone after this one
        StartWriteAndFinish(&out_, grpc::WriteOptions(), grpc::Status::OK);
      } else {
        writing_ = true;
        StartWrite(&out_);
      }
      return;
    }
    if (last_) FinishLocked(grpc::Status::OK);
  }
  void FinishLocked(const grpc::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) return;
    finished_ = true;
    Finish(status);
  }

  HealthService* const service_;  // null: not a registered watch
  const std::string name_;
  absl::Mutex mu_;
  ServingStatus latest_ ABSL_GUARDED_BY(mu_) = hv1::HealthCheckResponse::UNKNOWN;
  ServingStatus sent_ ABSL_GUARDED_BY(mu_) = hv1::HealthCheckResponse::UNKNOWN;
  bool sent_any_ ABSL_GUARDED_BY(mu_) = false;
  bool last_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ByteBuffer out_ ABSL_GUARDED_BY(mu_);
};

HealthService::HealthService(const std::vector<std::string>& services) {
  absl::MutexLock l(&mu_);
  for (const std::string& s : services) statuses_[s] = hv1::HealthCheckResponse::NOT_SERVING;
}

HealthService::~HealthService() {
  // gRPC ends every call by the end of grpc::Server::Shutdown; a watch's
  // OnDone may still be on its way (it locks mu_).
  absl::MutexLock l(&mu_);
  mu_.Await(absl::Condition(
      +[](absl::flat_hash_set<WatchReactor*>* w) { return w->empty(); }, &watches_));
}

void HealthService::SetServingStatus(const std::string& service, bool serving) {
  const ServingStatus status =
      serving ? hv1::HealthCheckResponse::SERVING : hv1::HealthCheckResponse::NOT_SERVING;
  absl::MutexLock l(&mu_);
  if (shut_down_) return;
  auto [it, added] = statuses_.try_emplace(service, status);
  if (!added) {
    if (it->second == status) return;
    it->second = status;
  }
  for (WatchReactor* w : watches_) {
    if (w->name() == service) w->Update(status, /*last=*/false);
  }
}

void HealthService::Shutdown() {
  absl::MutexLock l(&mu_);
  if (shut_down_) return;
  shut_down_ = true;
  for (auto& [name, status] : statuses_) status = hv1::HealthCheckResponse::NOT_SERVING;
  for (WatchReactor* w : watches_) w->Update(hv1::HealthCheckResponse::NOT_SERVING, /*last=*/true);
}

bool HealthService::WaitWatchesEnded(absl::Time deadline) {
  absl::MutexLock l(&mu_);
  return mu_.AwaitWithDeadline(
      absl::Condition(
          +[](absl::flat_hash_set<WatchReactor*>* w) { return w->empty(); }, &watches_),
      deadline);
}

HealthService::ServingStatus HealthService::Status(const std::string& service) const {
  absl::ReaderMutexLock l(&mu_);
  return StatusLocked(service);
}

HealthService::ServingStatus HealthService::StatusLocked(const std::string& service) const {
  auto it = statuses_.find(service);
  return it == statuses_.end() ? hv1::HealthCheckResponse::SERVICE_UNKNOWN : it->second;
}

void HealthService::Forget(WatchReactor* watch) {
  absl::MutexLock l(&mu_);
  watches_.erase(watch);
}

grpc::ServerUnaryReactor* HealthService::Check(grpc::CallbackServerContext* ctx,
                                               const grpc::ByteBuffer* request,
                                               grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  hv1::HealthCheckRequest req;
  if (!ParseRequest(request, &req)) {
    reactor->Finish(Unparseable());
    return reactor;
  }
  const ServingStatus status = Status(req.service());
  if (status == hv1::HealthCheckResponse::SERVICE_UNKNOWN) {
    reactor->Finish(grpc::Status(
        grpc::StatusCode::NOT_FOUND,
        absl::StrCat("unknown service '", EchoForMessage(req.service(), 256),
                     "' (\"\" is the server as a whole)")));
    return reactor;
  }
  hv1::HealthCheckResponse resp;
  resp.set_status(status);
  reactor->Finish(SerializeToByteBuffer(resp, response)
                      ? grpc::Status::OK
                      : grpc::Status(grpc::StatusCode::INTERNAL,
                                     "the status could not be serialized"));
  return reactor;
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* HealthService::Watch(
    grpc::CallbackServerContext* /*ctx*/, const grpc::ByteBuffer* request) {
  hv1::HealthCheckRequest req;
  if (!ParseRequest(request, &req)) return new WatchReactor(Unparseable());
  auto* watch = new WatchReactor(this, req.service());
  absl::MutexLock l(&mu_);
  // Registered even after Shutdown: its OnDone forgets it (the destructor
  // waits for that).
  watches_.insert(watch);
  watch->Update(shut_down_ ? hv1::HealthCheckResponse::NOT_SERVING : StatusLocked(req.service()),
                /*last=*/shut_down_);
  return watch;
}

}  // namespace zoom::server
