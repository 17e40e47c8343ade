// ClusterBackend's writes (cluster_backend.h "Writes"): points, payloads
// and deletes as log entries through the WritePublisher, acknowledged
// under the request's write concern; the delete by filter's guard reads
// the shards at their log's head (CountAtHead).
#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "server/cluster/cluster_map.h"
#include "server/cluster/log_entry.h"
#include "server/cluster/router/cluster_backend.h"

namespace zoom::server::router {
namespace {

using cluster::ShardMap;
using cluster::VersionedShardMap;

cluster::LogEntry IdsEntry(cluster::LogOp op, std::vector<uint64_t> ids) {
  cluster::LogEntry e;
  e.op = op;
  e.ids = std::move(ids);
  return e;
}

// A write by ids' answer: the points its replicas changed (MAJORITY, ALL),
// else the ids sent (LOG: the router does not read before it writes).
api::WriteAnswer Answer(size_t ids, Written w) {
  return api::WriteAnswer{w.changed.value_or(ids), std::move(w.tokens), w.concern};
}

}  // namespace

// ---- writes -----------------------------------------------------------------------

absl::StatusOr<api::WriteAnswer> ClusterBackend::Upsert(const api::Call& call,
                                                        const api::UpsertRequest& req) {
  ZOOM_ASSIGN_OR_RETURN(VersionedShardMap vm, core_->MapOf(req.collection));
  CollectionConfig named = vm.map.config;
  named.name = req.collection;
  std::vector<PointRef> refs;
  ZOOM_RETURN_IF_ERROR(api::PointRefsOf(named, req.points, &refs));
  ZOOM_RETURN_IF_ERROR(ValidatePoints(vm.map.config, refs));
  ZOOM_ASSIGN_OR_RETURN(Written w, writes_.Upsert(vm.map, refs, req.concern, call.deadline));
  return api::WriteAnswer{refs.size(), std::move(w.tokens), w.concern};
}

absl::StatusOr<api::WriteAnswer> ClusterBackend::Delete(const api::Call& call,
                                                        const api::DeleteRequest& req) {
  if (req.filter != nullptr) return DeleteByFilter(call, req);
  ZOOM_ASSIGN_OR_RETURN(VersionedShardMap vm, core_->MapOf(req.collection));
  ZOOM_ASSIGN_OR_RETURN(
      Written w,
      writes_.ByIds(
          vm.map, req.ids, 0,
          [](std::vector<uint64_t> ids) { return IdsEntry(cluster::LogOp::kDelete, std::move(ids)); },
          req.concern, call.deadline));
  return Answer(req.ids.size(), std::move(w));
}

// The ids that match when the router reads them (a Scroll of ids, page by
// page), deleted by id through the log. Not one atomic step: a write
// racing it may make a point match after its page was read (kept) or stop
// matching before its delete applies (deleted). What it reads reflects
// every write acknowledged before it: the pages come from replicas that
// have applied their shard's log up to its head as of the call's start
// (CountAtHead), never from one still behind it.
//
// The guard (no `all`): a filter that matches every live point deletes
// nothing. Each shard's count and its live points come from one read on
// one replica (CountResponse.live), so the sums compare one state a shard,
// and that state holds every acknowledged write. (Two separate counts,
// each answered by whichever replica, could compare a replica that had
// applied a delete with one that had not, and pass while the filter
// matched everything.)
absl::StatusOr<api::WriteAnswer> ClusterBackend::DeleteByFilter(const api::Call& call,
                                                                const api::DeleteRequest& req) {
  ZOOM_RETURN_IF_ERROR(CheckDeleteFilter(*req.filter, req.all));
  ZOOM_ASSIGN_OR_RETURN(VersionedShardMap vm, core_->MapOf(req.collection));
  const absl::Time deadline = core_->ReadDeadline(call);
  uint64_t deleted = 0;
  // Every failure says how far the delete got, as a standalone's does.
  const auto failed = [&](const absl::Status& st) {
    return absl::Status(st.code(), absl::StrCat(st.message(), " (", deleted,
                                                " points passing the filter were deleted "
                                                "before it)"));
  };
  // With `all` only the replicas' positions matter: a count without a
  // filter (no evaluation) finds them.
  absl::StatusOr<HeadCounts> head =
      CountAtHead(vm, {req.collection, req.all ? nullptr : req.filter}, deadline, call);
  if (!head.ok()) return failed(head.status());
  if (!req.all) {
    if (absl::Status st = CheckDeleteMatches(head->matched, head->live, false, req.collection);
        !st.ok()) {
      return failed(st);
    }
  }
  api::ScrollRequest scroll;
  scroll.collection = req.collection;
  scroll.filter = req.filter;
  scroll.limit = std::min<uint32_t>(10000, limits_.max_ids);
  std::map<uint32_t, api::WriteToken> last;  // shard -> its last token
  api::WriteConcern concern =
      req.concern == api::WriteConcern::kDefault ? api::WriteConcern::kMajority : req.concern;
  for (;;) {
    absl::StatusOr<api::ScrollAnswer> page = ScrollIn(vm, scroll, deadline, call, &head->replicas);
    if (!page.ok()) return failed(page.status());
    if (!page->points.empty()) {
      std::vector<uint64_t> ids;
      for (const PointData& p : page->points) ids.push_back(p.id);
      absl::StatusOr<Written> w = writes_.ByIds(
          vm.map, ids, 0,
          [](std::vector<uint64_t> part) {
            return IdsEntry(cluster::LogOp::kDelete, std::move(part));
          },
          req.concern, deadline);
      if (!w.ok()) return failed(w.status());
      concern = w->concern;
      for (api::WriteToken& t : w->tokens) last[t.shard] = std::move(t);
      // The points the replicas deleted (a point deleted by a write racing
      // this one is not counted), else the ids read.
      deleted += w->changed.value_or(ids.size());
    }
    if (!page->next_offset.has_value()) break;
    scroll.offset = *page->next_offset;
  }
  api::WriteAnswer out{deleted, {}, concern};
  for (auto& [k, t] : last) out.tokens.push_back(std::move(t));
  return out;
}

// Every serving replica of every shard still to settle is asked (one call
// each, no failover: which replica answered matters); a shard settles on
// the answers of replicas at or past its head, counted from the furthest.
// A shard whose replicas all answered from behind the head (applying
// still) is asked again shortly, until the deadline.
absl::StatusOr<ClusterBackend::HeadCounts> ClusterBackend::CountAtHead(
    const VersionedShardMap& vm, const api::CountRequest& req, absl::Time deadline,
    const api::Call& call) {
  const ShardMap& m = vm.map;
  // The heads first: a write acknowledged before the call is at or below.
  std::vector<uint64_t> heads(m.shards);
  for (uint32_t k = 0; k < m.shards; ++k) {
    ZOOM_ASSIGN_OR_RETURN(heads[k], core_->js().LastSequence(
                                        cluster::StreamName(core_->cluster(), m.collection),
                                        cluster::ShardSubject(core_->cluster(), m.collection, k)));
  }
  HeadCounts out;
  out.replicas.resize(m.shards);
  out.heads = heads;
  std::vector<bool> settled(m.shards, false);
  std::vector<uint64_t> furthest(m.shards, 0);  // the furthest answer from behind its head
  std::vector<bool> ever_answered(m.shards, false);  // in any round so far
  for (;;) {
    auto t = core_->Topo();
    std::vector<ShardCall<v1::CountRequest, v1::CountResponse>> calls;
    std::vector<bool> asked(m.shards, false);
    for (uint32_t k = 0; k < m.shards; ++k) {
      if (settled[k]) continue;
      for (Candidate& c : core_->Candidates(*t, m, k, true, 0)) {
        ShardCall<v1::CountRequest, v1::CountResponse> sc;
        sc.shard = k;
        sc.req = api::ToProto(req, m.LocalName(k));
        sc.candidates = {std::move(c)};
        calls.push_back(std::move(sc));
        asked[k] = true;
      }
    }
    ZOOM_RETURN_IF_ERROR((core_->FanOut<v1::CountRequest, v1::CountResponse>(
        m.uid, calls, deadline, call, false,
        [](v1::VectorSearch::Stub* s, grpc::ClientContext* c, const v1::CountRequest* q,
           v1::CountResponse* r, std::function<void(grpc::Status)> f) {
          s->async()->Count(c, q, r, std::move(f));
        })));
    std::vector<std::vector<const ShardCall<v1::CountRequest, v1::CountResponse>*>> fresh(
        m.shards);
    std::vector<std::string> why_not(m.shards);
    std::vector<bool> answered(m.shards, false);
    for (const auto& sc : calls) {
      if (!sc.answered) {
        absl::StrAppend(&why_not[sc.shard], why_not[sc.shard].empty() ? "" : "; ",
                        sc.candidates.front().node, ": ",
                        sc.last_error.empty() ? "no answer before the deadline" : sc.last_error);
        continue;
      }
      answered[sc.shard] = true;
      ever_answered[sc.shard] = true;
      if (sc.answer.applied() >= heads[sc.shard]) {
        fresh[sc.shard].push_back(&sc);
      } else {
        furthest[sc.shard] = std::max(furthest[sc.shard], sc.answer.applied());
      }
    }
    bool behind = false;
    for (uint32_t k = 0; k < m.shards; ++k) {
      if (settled[k]) continue;
      if (!answered[k] && ever_answered[k]) {
        // Answered from behind its head before, not this time (the deadline
        // cut the round short, or the replica went): still behind.
        behind = true;
        continue;
      }
      if (!answered[k]) {
        // No replica answered: the guard cannot be read; nothing is deleted.
        return absl::UnavailableError(absl::StrCat(
            "collection ", m.collection, ": no replica of shard ", k, " answered (",
            asked[k] ? why_not[k] : "none is serving", ")"));
      }
      if (fresh[k].empty()) {
        behind = true;
        continue;
      }
      std::stable_sort(fresh[k].begin(), fresh[k].end(), [](const auto* a, const auto* b) {
        return a->answer.applied() > b->answer.applied();
      });
      const v1::CountResponse& a = fresh[k].front()->answer;
      out.matched += a.count();
      out.live += a.live();
      for (const auto* sc : fresh[k]) out.replicas[k].push_back(sc->candidates.front());
      settled[k] = true;
    }
    if (!behind) return out;
    if (absl::Now() + absl::Milliseconds(20) >= deadline) {
      std::vector<std::string> late;
      for (uint32_t k = 0; k < m.shards; ++k) {
        if (settled[k]) continue;
        late.push_back(absl::StrCat("shard ", k, " (its log is at ", heads[k],
                                    ", its replicas at most at ", furthest[k], ")"));
      }
      return absl::UnavailableError(absl::StrCat(
          "collection ", m.collection, ": no replica has applied the writes acknowledged "
          "before this call on ", absl::StrJoin(late, "; "), "; asking again is safe"));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

absl::StatusOr<api::WriteAnswer> ClusterBackend::SetPayload(const api::Call& call,
                                                            const api::SetPayloadRequest& req) {
  ZOOM_ASSIGN_OR_RETURN(VersionedShardMap vm, core_->MapOf(req.collection));
  ZOOM_RETURN_IF_ERROR(ValidateFields(req.fields));
  const size_t extra = EncodeFields(req.fields).size();
  ZOOM_ASSIGN_OR_RETURN(Written w, writes_.ByIds(
                                        vm.map, req.ids, extra,
                                        [&](std::vector<uint64_t> ids) {
                                          cluster::LogEntry e = IdsEntry(
                                              cluster::LogOp::kSetPayload, std::move(ids));
                                          e.fields = req.fields;
                                          e.overwrite = req.overwrite;
                                          return e;
                                        },
                                        req.concern, call.deadline));
  return Answer(req.ids.size(), std::move(w));
}

absl::StatusOr<api::WriteAnswer> ClusterBackend::DeletePayload(
    const api::Call& call, const api::DeletePayloadRequest& req) {
  ZOOM_ASSIGN_OR_RETURN(VersionedShardMap vm, core_->MapOf(req.collection));
  size_t extra = 0;
  for (const std::string& k : req.keys) extra += 4 + k.size();
  ZOOM_ASSIGN_OR_RETURN(Written w, writes_.ByIds(
                                        vm.map, req.ids, extra,
                                        [&](std::vector<uint64_t> ids) {
                                          cluster::LogEntry e = IdsEntry(
                                              cluster::LogOp::kDeletePayload, std::move(ids));
                                          e.keys = req.keys;
                                          return e;
                                        },
                                        req.concern, call.deadline));
  return Answer(req.ids.size(), std::move(w));
}

}  // namespace zoom::server::router
