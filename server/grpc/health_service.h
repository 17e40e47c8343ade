// File: server/grpc/health_service.h
//
// HealthService: grpc.health.v1.Health, the standard gRPC health-checking
// protocol (gRPC's doc/health-checking.md), served by zoomd itself instead
// of gRPC's default service, whose Watch answered a request that does not
// parse with INTERNAL.
//
// Statuses are kept per service name ("" = the server as a whole). The
// names given at construction start NOT_SERVING; SetServingStatus sets one
// (a name not known yet becomes known).
//
//   Check(service)  the service's status; a name never set: NOT_FOUND
//                   ("unknown service"), as the protocol says.
//   Watch(service)  the current status at once (SERVICE_UNKNOWN for a name
//                   never set), then each change, until the client cancels
//                   or Shutdown. One write in flight per watch: when the
//                   status changes several times meanwhile, the latest is
//                   sent (the protocol allows dropping the intermediate
//                   ones); an unchanged status is not sent again.
//   Shutdown()      every status NOT_SERVING for good (later
//                   SetServingStatus calls are ignored); each watch is sent
//                   NOT_SERVING (if it has not just been) and ends OK at
//                   once, so grpc::Server::Shutdown does not wait for the
//                   watches until its deadline. A Watch that starts after it
//                   gets NOT_SERVING and ends OK.
//
// Both methods are raw (grpc::ByteBuffer, parsed here): a request that does
// not parse is INVALID_ARGUMENT "the request could not be parsed as a
// grpc.health.v1.HealthCheckRequest". No API key is needed (probes carry
// none; auth.h).
//
// Thread safety: every method from any thread. The service outlives the
// grpc::Server it is registered with (its destructor waits for the watches'
// reactors, which gRPC ends at the server's Shutdown).
#ifndef ZOOM_SERVER_GRPC_HEALTH_SERVICE_H_
#define ZOOM_SERVER_GRPC_HEALTH_SERVICE_H_

#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace zoom::server {

using HealthServiceBase = grpc::health::v1::Health::WithRawCallbackMethod_Check<
    grpc::health::v1::Health::WithRawCallbackMethod_Watch<grpc::health::v1::Health::Service>>;

class HealthService final : public HealthServiceBase {
 public:
  using ServingStatus = grpc::health::v1::HealthCheckResponse::ServingStatus;

  // `services`: the names known from the start (NOT_SERVING).
  explicit HealthService(const std::vector<std::string>& services);
  ~HealthService() override;
  HealthService(const HealthService&) = delete;
  HealthService& operator=(const HealthService&) = delete;

  // SERVING or NOT_SERVING; the watches of `service` are told. Ignored after
  // Shutdown.
  void SetServingStatus(const std::string& service, bool serving);
  // NOT_SERVING everywhere for good; ends every watch (see above).
  void Shutdown();
  // True once every watch has ended (gRPC is done with it: its last status
  // and its end went out); false if `deadline` comes first. After Shutdown,
  // before the connections are cut.
  bool WaitWatchesEnded(absl::Time deadline);
  // The status Watch would send now (SERVICE_UNKNOWN: a name never set).
  ServingStatus Status(const std::string& service) const;

  grpc::ServerUnaryReactor* Check(grpc::CallbackServerContext* ctx,
                                  const grpc::ByteBuffer* request,
                                  grpc::ByteBuffer* response) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Watch(grpc::CallbackServerContext* ctx,
                                                    const grpc::ByteBuffer* request) override;

 private:
  class WatchReactor;

  ServingStatus StatusLocked(const std::string& service) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // A watch's OnDone: it is forgotten (then deletes itself).
  void Forget(WatchReactor* watch);

  // Lock order: mu_, then a WatchReactor's own mutex.
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, ServingStatus> statuses_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<WatchReactor*> watches_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace zoom::server

#endif  // ZOOM_SERVER_GRPC_HEALTH_SERVICE_H_
