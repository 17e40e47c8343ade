// ClusterBackend's searches (cluster_backend.h "Reads"), completion-driven:
// a search's fan-out is started on the caller's thread (a worker), which
// returns at once; the shards' answers are merged in the fan-out's `done`
// (a gRPC callback thread or the fan-out's timer thread), which answers.
#include <algorithm>
#include <atomic>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/status_macros.h"
#include "server/cluster/router/cluster_backend.h"
#include "server/cluster/router/merge.h"

namespace zoom::server::router {
namespace {

using cluster::ShardMap;
using cluster::VersionedShardMap;
using SearchCall = ShardCall<v1::SearchRequest, v1::SearchResponse>;

// What the merge needs of a query and its map: the continuation outlives
// both.
struct MergeSpec {
  std::string collection;
  Metric metric = Metric::kL2;
  uint32_t k = 0;
  uint32_t shards = 0;
  bool allow_partial = false;
  float min_coverage = 0;
};

absl::StatusOr<api::SearchAnswer> MergeShards(RouterCore* core, const MergeSpec& spec,
                                              const absl::Status& request_error,
                                              std::vector<SearchCall>& calls) {
  ZOOM_RETURN_IF_ERROR(request_error);
  std::vector<api::SearchAnswer> parts;
  for (auto& sc : calls) {
    if (!sc.answered) continue;
    ZOOM_ASSIGN_OR_RETURN(api::SearchAnswer a, api::FromProto(std::move(sc.answer)));
    parts.push_back(std::move(a));
  }
  if (parts.size() < spec.shards) {
    const float coverage = static_cast<float>(parts.size()) / static_cast<float>(spec.shards);
    if (!spec.allow_partial && !(spec.min_coverage > 0 && coverage >= spec.min_coverage)) {
      core->Event(RouterEvent::kUnavailable);
      return Uncovered(spec.collection, calls, spec.shards);
    }
    core->Event(RouterEvent::kPartial);
  }
  return MergeSearch(spec.metric, spec.k, std::move(parts), spec.shards);
}

// Runs `start(done)` and waits for `done`'s value.
template <typename T, typename Start>
T Await(Start start) {
  absl::Notification answered;
  T out;
  start([&](T v) {
    out = std::move(v);
    answered.Notify();
  });
  answered.WaitForNotification();
  return out;
}

}  // namespace

void ClusterBackend::SearchOne(const api::Call& call, const VersionedShardMap& vm,
                               const api::Query& q, absl::Time deadline,
                               std::function<void(absl::StatusOr<api::SearchAnswer>)> done) {
  const ShardMap& m = vm.map;
  auto t = core_->Topo();
  std::map<uint32_t, uint64_t> session;
  if (q.consistency == api::Consistency::kSession) {
    for (const api::WriteToken& tok : q.after) {
      session[tok.shard] = std::max(session[tok.shard], tok.sequence);
    }
  }
  // The requests are the fan-out's from here (the query is not needed after).
  std::vector<SearchCall> calls(m.shards);
  for (uint32_t k = 0; k < m.shards; ++k) {
    calls[k].shard = k;
    api::ToProto(q, m.LocalName(k), &calls[k].req);
    calls[k].candidates = core_->Candidates(*t, m, k, true, session[k]);
  }
  MergeSpec spec{m.collection, m.config.metric, q.k, m.shards, q.allow_partial, q.min_coverage};
  core_->FanOutAsync<v1::SearchRequest, v1::SearchResponse>(
      m.uid, std::move(calls), deadline, call, core_->options().hedge,
      [](v1::VectorSearch::Stub* s, grpc::ClientContext* c, const v1::SearchRequest* r,
         v1::SearchResponse* a, std::function<void(grpc::Status)> f) {
        s->async()->Search(c, r, a, std::move(f));
      },
      [core = core_, spec = std::move(spec), done = std::move(done)](
          absl::Status st, std::vector<SearchCall> answered) {
        done(MergeShards(core, spec, st, answered));
      });
}

void ClusterBackend::SearchAsync(const api::Call& call, api::SearchRequest req,
                                 std::function<void(absl::StatusOr<api::SearchAnswer>)> done) {
  absl::StatusOr<VersionedShardMap> vm = core_->MapOf(req.collection);
  if (!vm.ok()) return done(vm.status());
  SearchOne(call, *vm, req.query, core_->ReadDeadline(call), std::move(done));
}

absl::StatusOr<api::SearchAnswer> ClusterBackend::Search(const api::Call& call,
                                                         const api::SearchRequest& req) {
  return Await<absl::StatusOr<api::SearchAnswer>>(
      [&](auto done) { SearchAsync(call, req, std::move(done)); });
}

// A batch runs query by query, each fanned out (a shard's SearchBatch would
// be one call a shard; left for when it is measured to matter): query i+1
// starts in query i's continuation. A query answered before SearchOne
// returns (no replica to ask) is taken by the loop in RunBatch instead, so
// that such a batch does not recurse once a query.
struct ClusterBackend::Batch {
  api::Call call;
  VersionedShardMap vm;
  api::SearchBatchRequest req;
  absl::Time deadline;
  std::function<void(absl::StatusOr<std::vector<api::SearchAnswer>>)> done;
  std::vector<api::SearchAnswer> out;
  size_t next = 0;
  // The query in flight: kStarting while RunBatch starts it, kWaiting once
  // RunBatch left it to its continuation, kAnswered once answered (in
  // `last`). Whichever of RunBatch and the continuation comes second goes
  // on with the batch.
  enum Phase { kStarting, kWaiting, kAnswered };
  std::atomic<int> phase{kStarting};
  absl::StatusOr<api::SearchAnswer> last;

  // Takes query `next`'s answer; false once the batch is answered.
  bool Absorb() {
    absl::StatusOr<api::SearchAnswer> a = std::move(last);
    if (!a.ok()) {
      done(absl::Status(a.status().code(),
                        absl::StrCat("query #", next, ": ", a.status().message())));
      return false;
    }
    out.push_back(std::move(*a));
    if (++next < req.queries.size()) return true;
    done(std::move(out));
    return false;
  }
};

void ClusterBackend::RunBatch(std::shared_ptr<Batch> b) {
  for (;;) {
    b->phase.store(Batch::kStarting);
    SearchOne(b->call, b->vm, b->req.queries[b->next], b->deadline,
              [this, b](absl::StatusOr<api::SearchAnswer> a) {
                b->last = std::move(a);
                if (b->phase.exchange(Batch::kAnswered) == Batch::kStarting) return;
                if (b->Absorb()) RunBatch(b);
              });
    if (b->phase.exchange(Batch::kWaiting) == Batch::kStarting) return;
    if (!b->Absorb()) return;
  }
}

void ClusterBackend::SearchBatchAsync(
    const api::Call& call, api::SearchBatchRequest req,
    std::function<void(absl::StatusOr<std::vector<api::SearchAnswer>>)> done) {
  absl::StatusOr<VersionedShardMap> vm = core_->MapOf(req.collection);
  if (!vm.ok()) return done(vm.status());
  if (absl::Status st = api::CheckAnswerSize(req.queries, vm->map.config.dim, limits_);
      !st.ok()) {
    return done(st);
  }
  if (req.queries.empty()) return done(std::vector<api::SearchAnswer>());
  auto b = std::make_shared<Batch>();
  b->call = call;
  b->vm = std::move(*vm);
  b->req = std::move(req);
  b->deadline = core_->ReadDeadline(call);
  b->done = std::move(done);
  RunBatch(std::move(b));
}

absl::StatusOr<std::vector<api::SearchAnswer>> ClusterBackend::SearchBatch(
    const api::Call& call, const api::SearchBatchRequest& req) {
  return Await<absl::StatusOr<std::vector<api::SearchAnswer>>>(
      [&](auto done) { SearchBatchAsync(call, req, std::move(done)); });
}

}  // namespace zoom::server::router
