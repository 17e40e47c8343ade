#include "server/cluster/router/model_router.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/echo.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "server/engine/decoder_engine.h"

namespace zoom::server::router {
namespace {

// The model as the nodes report it: serving before loading before failed.
v1::ModelInfo Best(const cluster::ModelSpec& spec,
                   const std::map<std::string, v1::ListModelsResponse>& nodes) {
  auto rank = [](v1::ModelState s) {
    return s == v1::SERVING ? 3 : s == v1::LOADING ? 2 : s == v1::MODEL_FAILED ? 1 : 0;
  };
  v1::ModelInfo best;
  best.set_name(spec.name);
  best.set_dir(spec.dir);
  best.set_m(spec.m);
  best.set_ef_construction(spec.ef_construction);
  best.set_state(v1::LOADING);  // no node has taken it up yet
  int best_rank = 0;
  for (const auto& [node, resp] : nodes) {
    for (const v1::ModelInfo& info : resp.models()) {
      if (info.name() != spec.name || rank(info.state()) <= best_rank) continue;
      best = info;
      best_rank = rank(info.state());
    }
  }
  return best;
}

}  // namespace

absl::Status ModelRouter::NoModel(const std::string& model) {
  absl::StatusOr<std::vector<cluster::ModelSpec>> specs = core_->catalog().ListModels();
  if (!specs.ok()) return specs.status();
  const bool known = std::any_of(specs->begin(), specs->end(),
                                 [&](const cluster::ModelSpec& s) { return s.name == model; });
  if (!known) {  // as a standalone says it
    return absl::NotFoundError(
        absl::StrCat("model '", EchoForMessage(model), "' is not loaded (LoadModel it)"));
  }
  std::vector<std::string> states;
  const std::shared_ptr<const Topology> t = core_->Topo();
  for (const auto& [id, n] : t->nodes) {
    std::string state = "not yet loading";
    for (const cluster::HostedModel& h : n.models) {
      if (h.name != model) continue;
      state = h.state == cluster::ModelLoadState::kLoading ? "loading" : "failed";
    }
    states.push_back(absl::StrCat(id, ": ", state));
  }
  return absl::UnavailableError(absl::StrCat(
      "no node serves model ", model, " yet (",
      states.empty() ? "no live nodes" : absl::StrJoin(states, ", "),
      "); ListModels says when it serves"));
}

absl::Status ModelRouter::TopK(const v1::TopKRequest& req, absl::Time deadline,
                               const api::Call& call, v1::TopKResponse* resp) {
  // A name no model can have is a model not loaded (as on a standalone).
  std::vector<ShardCall<v1::TopKRequest, v1::TopKResponse>> calls(1);
  calls[0].candidates = core_->ModelCandidates(*core_->Topo(), req.model());
  if (calls[0].candidates.empty()) {
    // Loaded through another router a moment ago: read the records again.
    core_->Event(RouterEvent::kMapRefresh);
    ZOOM_RETURN_IF_ERROR(core_->Refresh());
    calls[0].candidates = core_->ModelCandidates(*core_->Topo(), req.model());
    if (calls[0].candidates.empty()) return NoModel(req.model());
  }
  calls[0].req = req;
  ZOOM_RETURN_IF_ERROR((core_->FanOut<v1::TopKRequest, v1::TopKResponse, v1::Decoder::Stub>(
      0, calls, deadline, call, false,
      [](v1::Decoder::Stub* s, grpc::ClientContext* c, const v1::TopKRequest* q,
         v1::TopKResponse* r, std::function<void(grpc::Status)> f) {
        s->async()->TopK(c, q, r, std::move(f));
      })));
  if (!calls[0].answered) {
    if (absl::Now() >= deadline - core_->options().merge_margin) {
      return absl::DeadlineExceededError(absl::StrCat(
          "model ", req.model(), ": no node answered before the deadline (",
          calls[0].last_error.empty() ? "none failed" : calls[0].last_error, ")"));
    }
    return absl::Status(
        static_cast<absl::StatusCode>(calls[0].last_code == grpc::StatusCode::CANCELLED
                                          ? grpc::StatusCode::UNAVAILABLE
                                          : calls[0].last_code),
        absl::StrCat("model ", req.model(), ": every node serving it failed; the last: ",
                     calls[0].last_error));
  }
  *resp = std::move(calls[0].answer);
  return absl::OkStatus();
}

std::map<std::string, v1::ListModelsResponse> ModelRouter::NodeModels(absl::Time deadline,
                                                                      const api::Call& call) {
  std::vector<ShardCall<v1::ListModelsRequest, v1::ListModelsResponse>> calls;
  const std::shared_ptr<const Topology> t = core_->Topo();
  for (const auto& [id, n] : t->nodes) {
    if (n.address.empty()) continue;
    calls.emplace_back();
    calls.back().candidates = {{id, n.address, 0}};
  }
  (void)core_->FanOut<v1::ListModelsRequest, v1::ListModelsResponse, v1::Decoder::Stub>(
      0, calls, deadline, call, false,
      [](v1::Decoder::Stub* s, grpc::ClientContext* c, const v1::ListModelsRequest* q,
         v1::ListModelsResponse* r, std::function<void(grpc::Status)> f) {
        s->async()->ListModels(c, q, r, std::move(f));
      });
  std::map<std::string, v1::ListModelsResponse> out;
  for (auto& sc : calls) {
    if (sc.answered) out[sc.candidates[0].node] = std::move(sc.answer);
  }
  return out;
}

absl::Status ModelRouter::LoadFailed(
    const cluster::ModelSpec& spec, const std::string& node,
    const std::map<std::string, v1::ListModelsResponse>& nodes) const {
  const std::string removed = absl::StrCat(
      "It was removed from the cluster: every node needs the model's files under its "
      "--models_dir, as '", spec.dir.substr(0, 256), "'");
  auto it = nodes.find(node);
  if (it != nodes.end()) {
    for (const v1::ModelInfo& info : it->second.models()) {
      if (info.name() != spec.name || info.state() != v1::MODEL_FAILED) continue;
      // The node's own answer, as a standalone zoomd gives it
      // (DecoderEngine::StatusOf); a node that does not report the code
      // (older than ModelInfo.error_code): FAILED_PRECONDITION.
      const int code = info.error_code();
      const absl::StatusCode c = code > 0 && code <= 16 ? static_cast<absl::StatusCode>(code)
                                                        : absl::StatusCode::kFailedPrecondition;
      ZOOM_LOG(WARNING, "router: model ", spec.name, " did not load on node ", node, ": ",
               info.error(), ". ", removed);
      return absl::Status(c, absl::StrCat("model '", spec.name, "' cannot be loaded: ",
                                          info.error()));
    }
  }
  // The node did not say why (its ListModels did not answer in time).
  return absl::FailedPreconditionError(absl::StrCat(
      "model ", spec.name, " did not load on node ", node,
      ": it was refused there (its log says why). ", removed));
}

absl::StatusOr<v1::ModelInfo> ModelRouter::Load(const v1::LoadModelRequest& req,
                                                absl::Time deadline, const api::Call& call) {
  cluster::ModelSpec spec;
  spec.name = req.name();
  spec.dir = req.dir();
  spec.m = req.m();
  spec.ef_construction = req.ef_construction();
  spec.default_ef = req.default_ef();
  // What every node would refuse is refused here, as a node says it. A
  // model under this name that is recorded is ALREADY_EXISTS, the same
  // model again too (as on a standalone: one answer on both backends,
  // tests/conformance); one that failed to load on a node is replaced (a
  // standalone loads again over a failed model), its record removed first
  // so that every node loads it anew.
  index::FgdOptions options;
  if (req.m() != 0) options.hnsw.M = req.m();
  if (req.ef_construction() != 0) options.hnsw.ef_construction = req.ef_construction();
  ZOOM_RETURN_IF_ERROR(
      ValidateLoadRequest(spec.name, spec.dir, options, spec.default_ef, limits_));
  ZOOM_ASSIGN_OR_RETURN(std::vector<cluster::ModelSpec> specs, core_->catalog().ListModels());
  if (std::any_of(specs.begin(), specs.end(),
                  [&](const cluster::ModelSpec& s) { return s.name == spec.name; })) {
    (void)core_->Refresh();
    const std::shared_ptr<const Topology> t = core_->Topo();
    const bool failed = std::any_of(t->nodes.begin(), t->nodes.end(), [&](const auto& n) {
      return std::any_of(n.second.models.begin(), n.second.models.end(),
                         [&](const cluster::HostedModel& h) {
                           return h.name == spec.name &&
                                  h.state == cluster::ModelLoadState::kFailed;
                         });
    });
    if (!failed) {
      return absl::AlreadyExistsError(
          absl::StrCat("model '", spec.name, "' is already loaded; unload it first"));
    }
    ZOOM_RETURN_IF_ERROR(core_->catalog().RemoveModel(spec.name));
  }
  ZOOM_ASSIGN_OR_RETURN(cluster::ModelSpec added, core_->catalog().AddModel(spec));
  if (!req.wait()) return Best(added, {});
  // Until every live node serves it, or one failed to load it.
  for (;;) {
    (void)core_->Refresh();
    auto t = core_->Topo();
    if (t->nodes.empty()) {
      return absl::UnavailableError(absl::StrCat("cluster ", core_->cluster(),
                                                 " has no live node to load model ", spec.name,
                                                 " (it stays recorded)"));
    }
    bool all = true;
    std::string failed_on;
    for (const auto& [id, n] : t->nodes) {
      bool serving = false;
      for (const cluster::HostedModel& h : n.models) {
        if (h.name != spec.name) continue;
        serving = h.state == cluster::ModelLoadState::kServing;
        if (h.state == cluster::ModelLoadState::kFailed) failed_on = id;
      }
      all = all && serving;
    }
    if (all || !failed_on.empty()) {
      const auto nodes = NodeModels(absl::Now() + absl::Seconds(10), call);
      if (failed_on.empty()) return Best(added, nodes);
      // Nothing half-loaded behind a failed wait (as on a single zoomd).
      (void)core_->catalog().RemoveModel(spec.name);
      return LoadFailed(spec, failed_on, nodes);
    }
    if (absl::Now() + absl::Milliseconds(100) >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "model ", spec.name, " is still loading on some nodes; it stays recorded and "
          "loads on (ListModels says when it serves)"));
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
}

absl::Status ModelRouter::Unload(const std::string& name, absl::Time deadline) {
  ZOOM_ASSIGN_OR_RETURN(std::vector<cluster::ModelSpec> specs, core_->catalog().ListModels());
  if (std::none_of(specs.begin(), specs.end(),
                   [&](const cluster::ModelSpec& s) { return s.name == name; })) {
    return absl::NotFoundError(absl::StrCat("model '", EchoForMessage(name), "' is not loaded"));
  }
  ZOOM_RETURN_IF_ERROR(core_->catalog().RemoveModel(name));
  // Answered once no live node serves it any more (as a standalone's unload
  // is done when it answers): a TopK after it is NOT_FOUND, not answered by
  // a node that has not heard yet. Bounded by `deadline`: then it goes on.
  for (;;) {
    (void)core_->Refresh();
    const std::shared_ptr<const Topology> t = core_->Topo();
    const bool gone = std::none_of(t->nodes.begin(), t->nodes.end(), [&](const auto& n) {
      return std::any_of(n.second.models.begin(), n.second.models.end(),
                         [&](const cluster::HostedModel& h) { return h.name == name; });
    });
    if (gone) return absl::OkStatus();
    if (absl::Now() + absl::Milliseconds(50) >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "model '", EchoForMessage(name), "' was removed from the cluster; some nodes still "
          "unload it (ListModels says when none serves it)"));
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
}

absl::StatusOr<std::vector<v1::ModelInfo>> ModelRouter::List(absl::Time deadline,
                                                             const api::Call& call) {
  ZOOM_ASSIGN_OR_RETURN(std::vector<cluster::ModelSpec> specs, core_->catalog().ListModels());
  const auto nodes = NodeModels(deadline, call);
  std::vector<v1::ModelInfo> out;
  for (const cluster::ModelSpec& spec : specs) out.push_back(Best(spec, nodes));
  return out;
}

}  // namespace zoom::server::router
