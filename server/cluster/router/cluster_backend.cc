#include "server/cluster/router/cluster_backend.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "server/cluster/cluster_map.h"
#include "server/cluster/log_entry.h"
#include "server/cluster/router/merge.h"

namespace zoom::server::router {
namespace {

using cluster::ShardMap;
using cluster::VersionedShardMap;

// The catalog's words for a collection it lacks or has, as a standalone
// says them.
absl::Status AsStandalone(const absl::Status& st, const std::string& collection) {
  if (absl::IsNotFound(st)) {
    return absl::NotFoundError(absl::StrCat("collection '", collection, "' does not exist"));
  }
  if (absl::IsAlreadyExists(st)) {
    return absl::AlreadyExistsError(absl::StrCat(
        "collection '", collection, "' already exists; drop it first or pick another name"));
  }
  return st;
}

}  // namespace

// ---- collections ----------------------------------------------------------------

absl::StatusOr<api::CollectionDescription> ClusterBackend::CreateCollection(
    const api::Call& call, const api::CreateCollectionRequest& req) {
  // What a standalone's Database refuses (--max_dim, --max_cache_bytes).
  CollectionConfig config = req.config;
  config.ApplyDefaults();
  ZOOM_RETURN_IF_ERROR(config.Validate(defaults_.max_dim, defaults_.max_cache_bytes));
  const uint32_t shards = req.shards == 0 ? 1 : req.shards;
  uint32_t replicas = req.replicas;
  if (replicas == 0) {
    ZOOM_ASSIGN_OR_RETURN(auto nodes, core_->catalog().LiveNodes());
    replicas = nodes.size() >= 2 ? 2 : 1;
  }
  absl::StatusOr<ShardMap> created =
      core_->catalog().CreateCollection(req.config, shards, replicas, defaults_.max_dim);
  if (!created.ok()) return AsStandalone(created.status(), req.config.name);
  const ShardMap& m = *created;
  // Answer once every shard has a serving replica (or a while later: the
  // nodes converge on their own).
  const absl::Time until = std::min(core_->ReadDeadline(call) - absl::Milliseconds(50),
                                    absl::Now() + core_->options().create_wait);
  for (;;) {
    if (core_->Refresh().ok()) {
      auto t = core_->Topo();
      bool ready = true;
      for (uint32_t k = 0; k < m.shards && ready; ++k) {
        ready = !core_->Candidates(*t, m, k, true, 0).empty();
      }
      if (ready) break;
    }
    if (absl::Now() >= until) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return DescribeMap(m, defaults_.default_target_recall);
}

absl::Status ClusterBackend::DropCollection(const api::Call&, const std::string& name) {
  ZOOM_RETURN_IF_ERROR(ValidateCollectionName(name));
  if (absl::Status st = core_->catalog().DropCollection(name); !st.ok()) {
    return AsStandalone(st, name);
  }
  (void)core_->Refresh();
  return absl::OkStatus();
}

absl::StatusOr<std::vector<api::CollectionDescription>> ClusterBackend::ListCollections(
    const api::Call& call) {
  ZOOM_RETURN_IF_ERROR(core_->Refresh());
  const absl::Time deadline = core_->ReadDeadline(call);
  std::vector<api::CollectionDescription> out;
  const std::shared_ptr<const Topology> t = core_->Topo();  // holds the maps
  for (const auto& [name, vm] : t->maps) {
    // Best effort: a collection with a shard down is listed by its spec.
    absl::StatusOr<api::CollectionDescription> d = Info(vm, deadline, call);
    out.push_back(d.ok() ? std::move(*d) : DescribeMap(vm.map, defaults_.default_target_recall));
  }
  return out;
}

absl::StatusOr<api::CollectionDescription> ClusterBackend::GetCollection(
    const api::Call& call, const std::string& name) {
  ZOOM_ASSIGN_OR_RETURN(VersionedShardMap vm, core_->MapOf(name));
  return Info(vm, core_->ReadDeadline(call), call);
}

absl::StatusOr<std::vector<std::pair<uint32_t, api::CollectionDescription>>>
ClusterBackend::ShardInfos(const VersionedShardMap& vm, absl::Time deadline,
                           const api::Call& call) {
  const ShardMap& m = vm.map;
  auto t = core_->Topo();
  std::vector<ShardCall<v1::GetCollectionRequest, v1::GetCollectionResponse>> calls(m.shards);
  for (uint32_t k = 0; k < m.shards; ++k) {
    calls[k].shard = k;
    calls[k].req.set_name(m.LocalName(k));
    calls[k].candidates = core_->Candidates(*t, m, k, true, 0);
  }
  ZOOM_RETURN_IF_ERROR((core_->FanOut<v1::GetCollectionRequest, v1::GetCollectionResponse>(
      m.uid, calls, deadline, call, false,
      [](v1::VectorSearch::Stub* s, grpc::ClientContext* c, const v1::GetCollectionRequest* q,
         v1::GetCollectionResponse* r, std::function<void(grpc::Status)> f) {
        s->async()->GetCollection(c, q, r, std::move(f));
      })));
  if (!AllAnswered(calls)) return Uncovered(m.collection, calls, m.shards);
  std::vector<std::pair<uint32_t, api::CollectionDescription>> parts;
  for (const auto& sc : calls) {
    ZOOM_ASSIGN_OR_RETURN(api::CollectionDescription d, api::FromProto(sc.answer.info()));
    parts.emplace_back(sc.shard, std::move(d));
  }
  return parts;
}

absl::StatusOr<api::CollectionDescription> ClusterBackend::Info(const VersionedShardMap& vm,
                                                                absl::Time deadline,
                                                                const api::Call& call) {
  ZOOM_ASSIGN_OR_RETURN(auto parts, ShardInfos(vm, deadline, call));
  return MergeInfo(vm.map, std::move(parts), defaults_.default_target_recall);
}

absl::StatusOr<api::CollectionDescription> ClusterBackend::InfoWhen(
    const VersionedShardMap& vm, absl::Time deadline, const api::Call& call,
    const std::function<bool(const CollectionInfo&)>& shard_done) {
  for (;;) {
    absl::StatusOr<std::vector<std::pair<uint32_t, api::CollectionDescription>>> parts =
        ShardInfos(vm, deadline, call);
    const bool last = absl::Now() + absl::Milliseconds(100) >= deadline;
    if (parts.ok()) {
      const bool done = std::all_of(parts->begin(), parts->end(),
                                    [&](const auto& p) { return shard_done(p.second.info); });
      if (done || last) return MergeInfo(vm.map, std::move(*parts), defaults_.default_target_recall);
    } else if (last) {
      return parts.status();
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

// ---- reads ------------------------------------------------------------------------

absl::StatusOr<std::vector<PointData>> ClusterBackend::Get(const api::Call& call,
                                                           const api::GetRequest& req) {
  ZOOM_ASSIGN_OR_RETURN(VersionedShardMap vm, core_->MapOf(req.collection));
  const ShardMap& m = vm.map;
  auto t = core_->Topo();
  std::map<uint32_t, std::vector<uint64_t>> by_shard;
  for (uint64_t id : req.ids) by_shard[cluster::ShardOf(id, m.shards)].push_back(id);
  std::vector<ShardCall<v1::GetRequest, v1::GetResponse>> calls;
  for (auto& [k, ids] : by_shard) {
    ShardCall<v1::GetRequest, v1::GetResponse> sc;
    sc.shard = k;
    sc.req.set_collection(m.LocalName(k));
    sc.req.mutable_ids()->Assign(ids.begin(), ids.end());
    sc.req.set_with_vectors(req.with_vectors);
    sc.req.set_with_payload(req.with_payload);
    sc.candidates = core_->Candidates(*t, m, k, true, 0);
    calls.push_back(std::move(sc));
  }
  ZOOM_RETURN_IF_ERROR((core_->FanOut<v1::GetRequest, v1::GetResponse>(
      m.uid, calls, core_->ReadDeadline(call), call, core_->options().hedge,
      [](v1::VectorSearch::Stub* s, grpc::ClientContext* c, const v1::GetRequest* q,
         v1::GetResponse* r, std::function<void(grpc::Status)> f) {
        s->async()->Get(c, q, r, std::move(f));
      })));
  if (!AllAnswered(calls)) return Uncovered(m.collection, calls, m.shards);
  std::map<uint64_t, v1::Point*> found;
  for (auto& sc : calls) {
    for (v1::Point& p : *sc.answer.mutable_points()) found[p.id()] = &p;
  }
  std::vector<PointData> out;
  for (uint64_t id : req.ids) {
    auto it = found.find(id);
    if (it == found.end()) continue;
    ZOOM_ASSIGN_OR_RETURN(PointData d, api::FromProto(*it->second));
    out.push_back(std::move(d));
  }
  return out;
}

absl::StatusOr<api::CountAnswer> ClusterBackend::CountIn(const VersionedShardMap& vm,
                                                         const api::CountRequest& req,
                                                         absl::Time deadline,
                                                         const api::Call& call) {
  const ShardMap& m = vm.map;
  auto t = core_->Topo();
  std::vector<ShardCall<v1::CountRequest, v1::CountResponse>> calls(m.shards);
  for (uint32_t k = 0; k < m.shards; ++k) {
    calls[k].shard = k;
    calls[k].req = api::ToProto(req, m.LocalName(k));
    calls[k].candidates = core_->Candidates(*t, m, k, true, 0);
  }
  ZOOM_RETURN_IF_ERROR((core_->FanOut<v1::CountRequest, v1::CountResponse>(
      m.uid, calls, deadline, call, core_->options().hedge,
      [](v1::VectorSearch::Stub* s, grpc::ClientContext* c, const v1::CountRequest* q,
         v1::CountResponse* r, std::function<void(grpc::Status)> f) {
        s->async()->Count(c, q, r, std::move(f));
      })));
  if (!AllAnswered(calls)) return Uncovered(m.collection, calls, m.shards);
  api::CountAnswer out;
  for (const auto& sc : calls) {
    out.count += sc.answer.count();
    out.live += sc.answer.live();
    out.filter_scan = out.filter_scan || sc.answer.filter_scan();
    if (out.warning.empty()) out.warning = sc.answer.warning();
  }
  return out;
}

absl::StatusOr<api::CountAnswer> ClusterBackend::Count(const api::Call& call,
                                                       const api::CountRequest& req) {
  ZOOM_ASSIGN_OR_RETURN(VersionedShardMap vm, core_->MapOf(req.collection));
  return CountIn(vm, req, core_->ReadDeadline(call), call);
}

// One page over every shard: each shard's first points from the offset
// (about twice its share of the limit: ids spread evenly over the shards,
// so S times the limit would be read and dropped), merged by id. A shard
// whose part ran short stops the merged page at its next_offset, so a page
// may be shorter than the limit, never wrong.
absl::StatusOr<api::ScrollAnswer> ClusterBackend::ScrollIn(
    const VersionedShardMap& vm, const api::ScrollRequest& req, absl::Time deadline,
    const api::Call& call, const std::vector<std::vector<Candidate>>* replicas) {
  const ShardMap& m = vm.map;
  auto t = core_->Topo();
  const uint32_t per_shard =
      std::min<uint32_t>(req.limit, 2 * ((req.limit + m.shards - 1) / m.shards) + 16);
  std::vector<ShardCall<v1::ScrollRequest, v1::ScrollResponse>> calls(m.shards);
  for (uint32_t k = 0; k < m.shards; ++k) {
    calls[k].shard = k;
    calls[k].req = api::ToProto(req, m.LocalName(k));
    calls[k].req.set_limit(per_shard);
    calls[k].candidates =
        replicas != nullptr ? (*replicas)[k] : core_->Candidates(*t, m, k, true, 0);
  }
  ZOOM_RETURN_IF_ERROR((core_->FanOut<v1::ScrollRequest, v1::ScrollResponse>(
      m.uid, calls, deadline, call, replicas == nullptr && core_->options().hedge,
      [](v1::VectorSearch::Stub* s, grpc::ClientContext* c, const v1::ScrollRequest* q,
         v1::ScrollResponse* r, std::function<void(grpc::Status)> f) {
        s->async()->Scroll(c, q, r, std::move(f));
      })));
  if (!AllAnswered(calls)) return Uncovered(m.collection, calls, m.shards);
  std::vector<api::ScrollAnswer> parts;
  for (auto& sc : calls) {
    ZOOM_ASSIGN_OR_RETURN(api::ScrollAnswer a, api::FromProto(std::move(sc.answer)));
    parts.push_back(std::move(a));
  }
  return MergeScroll(std::move(parts), req.limit, limits_.max_response_bytes);
}

absl::StatusOr<api::ScrollAnswer> ClusterBackend::Scroll(const api::Call& call,
                                                         const api::ScrollRequest& req) {
  ZOOM_ASSIGN_OR_RETURN(VersionedShardMap vm, core_->MapOf(req.collection));
  return ScrollIn(vm, req, core_->ReadDeadline(call), call);
}

// ---- indexes and maintenance ----------------------------------------------------

absl::StatusOr<api::CollectionDescription> ClusterBackend::CreateFieldIndex(
    const api::Call& call, const api::CreateFieldIndexRequest& req) {
  ZOOM_ASSIGN_OR_RETURN(VersionedShardMap vm, core_->MapOf(req.collection));
  ZOOM_RETURN_IF_ERROR(ValidateFieldIndexName(req.field));
  const absl::Time deadline = req.wait ? core_->AdminDeadline(call) : core_->ReadDeadline(call);
  // What a replica would refuse must not enter the log: another type on
  // the field (checked against the indexes now).
  ZOOM_ASSIGN_OR_RETURN(api::CollectionDescription now, Info(vm, deadline, call));
  for (const FieldIndexInfo& f : now.info.field_indexes) {
    if (f.field == req.field && f.type != req.type) {
      return absl::FailedPreconditionError(absl::StrCat("field '", req.field.substr(0, 64),
                                                        "' has a ", FieldIndexTypeName(f.type),
                                                        " index; delete it first"));
    }
  }
  cluster::LogEntry e;
  e.op = cluster::LogOp::kCreateFieldIndex;
  e.field = req.field;
  e.index_type = req.type;
  ZOOM_RETURN_IF_ERROR(writes_.ToAll(vm.map, e, call.deadline));
  // The answer shows the index on every shard (built, with `wait`), as a
  // standalone's does; at most until the deadline.
  return InfoWhen(vm, deadline, call, [&](const CollectionInfo& info) {
    for (const FieldIndexInfo& f : info.field_indexes) {
      if (f.field == req.field) return !req.wait || f.ready;
    }
    return false;
  });
}

absl::StatusOr<api::CollectionDescription> ClusterBackend::DeleteFieldIndex(
    const api::Call& call, const api::DeleteFieldIndexRequest& req) {
  ZOOM_ASSIGN_OR_RETURN(VersionedShardMap vm, core_->MapOf(req.collection));
  ZOOM_RETURN_IF_ERROR(ValidateFieldIndexName(req.field));
  const absl::Time deadline = core_->ReadDeadline(call);
  ZOOM_ASSIGN_OR_RETURN(api::CollectionDescription now, Info(vm, deadline, call));
  auto has = [&](const api::CollectionDescription& d) {
    return std::any_of(d.info.field_indexes.begin(), d.info.field_indexes.end(),
                       [&](const FieldIndexInfo& f) { return f.field == req.field; });
  };
  if (!has(now)) {
    return absl::NotFoundError(
        absl::StrCat("field '", req.field.substr(0, 64), "' has no payload index"));
  }
  cluster::LogEntry e;
  e.op = cluster::LogOp::kDeleteFieldIndex;
  e.field = req.field;
  ZOOM_RETURN_IF_ERROR(writes_.ToAll(vm.map, e, call.deadline));
  return InfoWhen(vm, deadline, call, [&](const CollectionInfo& info) {
    return std::none_of(info.field_indexes.begin(), info.field_indexes.end(),
                        [&](const FieldIndexInfo& f) { return f.field == req.field; });
  });
}

void ClusterBackend::BuildIndex(
    const api::Call& call, const api::BuildIndexRequest& req,
    std::function<void(absl::StatusOr<api::CollectionDescription>)> done) {
  auto run = [&]() -> absl::StatusOr<api::CollectionDescription> {
    ZOOM_ASSIGN_OR_RETURN(VersionedShardMap vm, core_->MapOf(req.collection));
    const ShardMap& m = vm.map;
    const absl::Time deadline = core_->AdminDeadline(call);
    auto t = core_->Topo();
    // Every live replica builds its own index: one call each, no failover;
    // each first applies its shard's log as far as it is now (a build
    // asked after an import covers it).
    google::protobuf::RepeatedPtrField<v1::WriteToken> heads;
    for (uint32_t k = 0; k < m.shards; ++k) {
      ZOOM_ASSIGN_OR_RETURN(uint64_t head,
                            core_->js().LastSequence(
                                cluster::StreamName(core_->cluster(), m.collection),
                                cluster::ShardSubject(core_->cluster(), m.collection, k)));
      v1::WriteToken* tok = heads.Add();
      tok->set_shard(k);
      tok->set_sequence(head);
    }
    std::vector<ShardCall<v1::BuildIndexRequest, v1::BuildIndexResponse>> calls;
    for (uint32_t k = 0; k < m.shards; ++k) {
      for (const Candidate& c : core_->Candidates(*t, m, k, false, 0)) {
        ShardCall<v1::BuildIndexRequest, v1::BuildIndexResponse> sc;
        sc.shard = k;
        sc.req.set_collection(m.LocalName(k));
        sc.req.set_wait(req.wait);
        *sc.req.mutable_after() = heads;
        sc.candidates = {c};
        calls.push_back(std::move(sc));
      }
    }
    ZOOM_RETURN_IF_ERROR((core_->FanOut<v1::BuildIndexRequest, v1::BuildIndexResponse>(
        m.uid, calls, deadline, call, false,
        [](v1::VectorSearch::Stub* s, grpc::ClientContext* c, const v1::BuildIndexRequest* q,
           v1::BuildIndexResponse* r, std::function<void(grpc::Status)> f) {
          s->async()->BuildIndex(c, q, r, std::move(f));
        })));
    std::vector<std::string> failed;
    bool refused = false;  // a replica's FAILED_PRECONDITION (too few points): the caller's
    for (const auto& sc : calls) {
      if (sc.answered) continue;
      failed.push_back(absl::StrCat("shard ", sc.shard, " (", sc.last_error, ")"));
      refused = refused || sc.last_code == grpc::StatusCode::FAILED_PRECONDITION;
    }
    if (!failed.empty() && refused) {
      // Too few points in the whole collection (the replicas have applied
      // the log up to the heads now): the standalone's refusal.
      absl::StatusOr<api::CollectionDescription> now = Info(vm, deadline, call);
      const uint64_t min_points = m.config.MinIndexPoints();
      if (now.ok() && now->info.points < min_points) {
        return absl::FailedPreconditionError(absl::StrCat(
            "collection '", req.collection, "' has ", now->info.points,
            " points; an index needs at least ", min_points,
            min_points > kMinIndexPoints ? " (its nlist)" : "",
            " to train (searches are exact until then)"));
      }
    }
    if (!failed.empty()) {
      const std::string msg = absl::StrCat(
          "collection ", m.collection, ": the build did not start on ",
          absl::StrJoin(failed, "; "),
          ". A replica builds over what it has applied: writes just acknowledged may not be "
          "there yet");
      return refused ? absl::FailedPreconditionError(msg) : absl::UnavailableError(msg);
    }
    return Info(vm, deadline, call);
  };
  done(run());
}

absl::StatusOr<api::CollectionDescription> ClusterBackend::Compact(
    const api::Call& call, const std::string& collection) {
  ZOOM_ASSIGN_OR_RETURN(VersionedShardMap vm, core_->MapOf(collection));
  const ShardMap& m = vm.map;
  const absl::Time deadline = core_->AdminDeadline(call);
  auto t = core_->Topo();
  // A compaction is a replica's own (its files, not its contents): every
  // live replica compacts, one call each.
  std::vector<ShardCall<v1::CompactRequest, v1::CompactResponse>> calls;
  for (uint32_t k = 0; k < m.shards; ++k) {
    for (const Candidate& c : core_->Candidates(*t, m, k, false, 0)) {
      ShardCall<v1::CompactRequest, v1::CompactResponse> sc;
      sc.shard = k;
      sc.req.set_collection(m.LocalName(k));
      sc.candidates = {c};
      calls.push_back(std::move(sc));
    }
  }
  ZOOM_RETURN_IF_ERROR((core_->FanOut<v1::CompactRequest, v1::CompactResponse>(
      m.uid, calls, deadline, call, false,
      [](v1::VectorSearch::Stub* s, grpc::ClientContext* c, const v1::CompactRequest* q,
         v1::CompactResponse* r, std::function<void(grpc::Status)> f) {
        s->async()->Compact(c, q, r, std::move(f));
      })));
  std::vector<std::string> failed;
  for (const auto& sc : calls) {
    if (!sc.answered) failed.push_back(absl::StrCat("shard ", sc.shard, " (", sc.last_error, ")"));
  }
  if (!failed.empty()) {
    return absl::UnavailableError(absl::StrCat("collection ", m.collection,
                                               ": the compaction failed on ",
                                               absl::StrJoin(failed, "; "),
                                               " (the others compacted; asking again is safe)"));
  }
  return Info(vm, deadline, call);
}

// ---- snapshots: ClusterSnapshots ------------------------------------------------------

ClusterBackend::ClusterBackend(RouterCore* core, const ServiceLimits& limits,
                               const Defaults& defaults)
    : core_(core),
      limits_(limits),
      defaults_(defaults),
      writes_(core),
      snapshots_(std::make_unique<ClusterSnapshots>(core, defaults.snapshot_store)) {}

ClusterBackend::~ClusterBackend() = default;

absl::StatusOr<SnapshotInfo> ClusterBackend::CreateSnapshot(const api::Call& call,
                                                            const std::string& collection) {
  ZOOM_ASSIGN_OR_RETURN(VersionedShardMap vm, core_->MapOf(collection));
  api::CountRequest all;
  all.collection = collection;
  ZOOM_ASSIGN_OR_RETURN(HeadCounts head,
                        CountAtHead(vm, all, core_->AdminDeadline(call), call));
  return snapshots_->Create(call, vm, head.replicas, head.heads);
}

absl::StatusOr<std::vector<SnapshotInfo>> ClusterBackend::ListSnapshots(
    const api::Call&, const std::string& collection) {
  ZOOM_ASSIGN_OR_RETURN(Database * store, snapshots_->Store());
  return store->ListSnapshots(collection);
}

absl::Status ClusterBackend::DeleteSnapshot(const api::Call&, const std::string& collection,
                                            const std::string& name) {
  ZOOM_ASSIGN_OR_RETURN(Database * store, snapshots_->Store());
  return store->DeleteSnapshot(collection, name);
}

absl::StatusOr<std::unique_ptr<api::SnapshotReader>> ClusterBackend::OpenSnapshot(
    const api::Call&, const std::string& collection, const std::string& name) {
  ZOOM_ASSIGN_OR_RETURN(Database * store, snapshots_->Store());
  ZOOM_ASSIGN_OR_RETURN(auto file, store->SnapshotFile(collection, name));
  auto reader = std::make_unique<api::FileSnapshotReader>(file.first, file.second);
  if (!reader->ok()) return absl::NotFoundError("the snapshot cannot be read");
  return std::unique_ptr<api::SnapshotReader>(std::move(reader));
}

absl::StatusOr<std::unique_ptr<api::SnapshotRestore>> ClusterBackend::BeginRestore(
    const api::Call&, const std::string& collection, bool overwrite, const std::string& source) {
  ZOOM_RETURN_IF_ERROR(ValidateCollectionName(collection));
  ZOOM_ASSIGN_OR_RETURN(Database * store, snapshots_->Store());
  ZOOM_ASSIGN_OR_RETURN(DatabaseOptions scratch, snapshots_->ScratchOptions());
  auto restore = std::make_unique<api::StagedRestore>(
      store, [this, scratch, collection, overwrite](const api::Call& call,
                                                    const std::string& path) {
        return api::RestoreByReplay(*this, scratch, call, path, collection, overwrite);
      });
  if (!source.empty()) {
    ZOOM_ASSIGN_OR_RETURN(std::string path, store->SnapshotSource(source));
    restore->SetSource(std::move(path));
  } else {
    ZOOM_RETURN_IF_ERROR(restore->StageUpload());
  }
  return std::unique_ptr<api::SnapshotRestore>(std::move(restore));
}

}  // namespace zoom::server::router
