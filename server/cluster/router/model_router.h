// File: server/cluster/router/model_router.h
//
// ModelRouter: the zoom.v1.Decoder models of a cluster, as a router serves
// them. Models are read-only and every node serves each one, loaded from
// its own --models_dir (the same files on every node):
//   * Load records the model in the models bucket (a model recorded under
//     its name AlreadyExists, the same one again too, as on a standalone;
//     one that failed on a node is replaced) and the nodes load it; with
//     `wait` the answer comes once every live node serves it (a node whose
//     load failed fails the call with that node's own answer, the code and
//     message a standalone zoomd gives, and the model is removed again: the
//     router's log names the node), else at once, LOADING.
//   * Unload removes it (NotFound when absent) and answers once no live node
//     serves it any more (DeadlineExceeded past `deadline`: they go on).
//   * List: each model as the nodes report it (serving before loading
//     before failed).
//   * TopK goes to the next node serving the model (round-robin; a node
//     that failed recently last), with failover to the others; NotFound for
//     a model the cluster does not have, Unavailable while no node serves
//     it yet (saying their states).
// (The decoder's API is still proto-level: issue 50 gives it a backend.)
#ifndef ZOOM_SERVER_CLUSTER_ROUTER_MODEL_ROUTER_H_
#define ZOOM_SERVER_CLUSTER_ROUTER_MODEL_ROUTER_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/api/types.h"
#include "server/cluster/router/router_core.h"
#include "server/engine/decoder_engine.h"
#include "zoom/v1/decoder.pb.h"

namespace zoom::server::router {

class ModelRouter {
 public:
  // `core` outlives the router; `limits`: the nodes' (a model they would
  // refuse is refused before it is recorded).
  ModelRouter(RouterCore* core, const DecodeLimits& limits) : core_(core), limits_(limits) {}

  absl::Status TopK(const v1::TopKRequest& req, absl::Time deadline, const api::Call& call,
                    v1::TopKResponse* resp);
  absl::StatusOr<v1::ModelInfo> Load(const v1::LoadModelRequest& req, absl::Time deadline,
                                     const api::Call& call);
  absl::Status Unload(const std::string& name, absl::Time deadline);
  absl::StatusOr<std::vector<v1::ModelInfo>> List(absl::Time deadline, const api::Call& call);

 private:
  // Every live node's ListModels (those that answered), by node id.
  std::map<std::string, v1::ListModelsResponse> NodeModels(absl::Time deadline,
                                                           const api::Call& call);
  // Why no node serves `model`.
  absl::Status NoModel(const std::string& model);
  // The answer to a load that failed on `node` (`nodes`: their ListModels):
  // the node's own code and message ("model 'x' cannot be loaded: ...").
  absl::Status LoadFailed(const cluster::ModelSpec& spec, const std::string& node,
                          const std::map<std::string, v1::ListModelsResponse>& nodes) const;

  RouterCore* core_;
  DecodeLimits limits_;
};

}  // namespace zoom::server::router

#endif  // ZOOM_SERVER_CLUSTER_ROUTER_MODEL_ROUTER_H_
