#include "server/api/local_backend.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/file_system.h"
#include "common/status_macros.h"
#include "server/api/snapshot_files.h"

namespace zoom::server::api {
namespace {

CollectionDescription Describe(const Collection& c) { return CollectionDescription{c.Info()}; }

// The stats' warning for a filter evaluated from the stored payloads
// (`filter`: the query's, to name the field).
std::string ScanWarning(bool scan, const Collection& c, const Filter* filter) {
  if (!scan) return "";
  const std::string field = filter != nullptr ? c.UnindexedField(*filter) : "";
  return absl::StrCat("the filter names a field without a ready payload index",
                      field.empty() ? "" : absl::StrCat(" ('", field.substr(0, 64), "')"),
                      ": it was evaluated from the stored payloads of every point (a scan); "
                      "CreateFieldIndex makes it fast");
}

// Whether two queries of a batch can share one pipelined engine batch (the
// converter shares one filter between queries that send the same).
bool SameShape(const Query& a, const Query& b) {
  return a.k == b.k && a.knobs.ef == b.knobs.ef && a.knobs.nprobe == b.knobs.nprobe &&
         a.knobs.rerank_candidates == b.knobs.rerank_candidates &&
         a.knobs.rerank_stop_sd == b.knobs.rerank_stop_sd &&
         a.knobs.target_recall == b.knobs.target_recall &&
         a.knobs.band_confidence == b.knobs.band_confidence &&
         a.exact_scores == b.exact_scores && a.preview_only == b.preview_only &&
         a.exact == b.exact && a.with_payload == b.with_payload &&
         a.with_vectors == b.with_vectors && a.allow_partial == b.allow_partial &&
         a.degrade == b.degrade && a.vector.size() == b.vector.size() && a.filter == b.filter &&
         a.consistency == b.consistency;
}

const Filter kNoFilter;


}  // namespace

bool LocalBackend::AnswersInRam(const std::string& collection) const {
  auto c = db_->GetCollection(collection);
  return c.ok() && (*c)->core().engine()->index() != nullptr;
}

// ---- collections ----------------------------------------------------------------

absl::StatusOr<CollectionDescription> LocalBackend::CreateCollection(
    const Call&, const CreateCollectionRequest& req) {
  if (req.shards > 1 || req.replicas > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shards ", req.shards, " and replicas ", req.replicas,
        " need a cluster: this zoomd is standalone; create the collection through a router "
        "(zoomd --role=router), or leave both 0"));
  }
  ZOOM_ASSIGN_OR_RETURN(auto c, db_->CreateCollection(req.config));
  return Describe(*c);
}

absl::Status LocalBackend::DropCollection(const Call&, const std::string& name) {
  ZOOM_RETURN_IF_ERROR(ValidateCollectionName(name));
  return db_->DropCollection(name);
}

absl::StatusOr<std::vector<CollectionDescription>> LocalBackend::ListCollections(const Call&) {
  std::vector<CollectionDescription> out;
  for (const auto& c : db_->ListCollections()) out.push_back(Describe(*c));
  return out;
}

absl::StatusOr<CollectionDescription> LocalBackend::GetCollection(const Call&,
                                                                  const std::string& name) {
  ZOOM_ASSIGN_OR_RETURN(auto c, db_->GetCollection(name));
  return Describe(*c);
}

// ---- points -----------------------------------------------------------------------

// The concern a standalone's write meets: under --sync=always its one copy
// is on disk when it answers (every concern, the one asked reported);
// under --sync=batch it is in the WAL, synced later (kLog).
WriteAnswer LocalBackend::Answer(uint64_t count, WriteConcern asked) const {
  WriteAnswer a;
  a.count = count;
  a.concern = !db_->options().sync_always ? WriteConcern::kLog
              : asked == WriteConcern::kDefault ? WriteConcern::kMajority
                                                : asked;
  return a;
}

absl::StatusOr<WriteAnswer> LocalBackend::Upsert(const Call&, const UpsertRequest& req) {
  ZOOM_ASSIGN_OR_RETURN(auto c, db_->GetCollection(req.collection));
  std::vector<PointRef> refs;
  ZOOM_RETURN_IF_ERROR(PointRefsOf(c->config(), req.points, &refs));
  ZOOM_RETURN_IF_ERROR(c->Upsert(refs));
  return Answer(refs.size(), req.concern);
}

absl::StatusOr<WriteAnswer> LocalBackend::Delete(const Call&, const DeleteRequest& req) {
  ZOOM_ASSIGN_OR_RETURN(auto c, db_->GetCollection(req.collection));
  if (req.filter != nullptr) {
    ZOOM_ASSIGN_OR_RETURN(uint64_t n, c->DeleteByFilter(*req.filter, req.all));
    return Answer(n, req.concern);
  }
  ZOOM_ASSIGN_OR_RETURN(uint64_t n, c->Delete(req.ids));
  return Answer(n, req.concern);
}

absl::StatusOr<std::vector<PointData>> LocalBackend::Get(const Call&, const GetRequest& req) {
  ZOOM_ASSIGN_OR_RETURN(auto c, db_->GetCollection(req.collection));
  std::vector<PointData> found;
  ZOOM_RETURN_IF_ERROR(c->Get(req.ids, req.with_vectors, req.with_payload, &found,
                              limits_.max_response_bytes));
  return found;
}

absl::StatusOr<WriteAnswer> LocalBackend::SetPayload(const Call&, const SetPayloadRequest& req) {
  ZOOM_ASSIGN_OR_RETURN(auto c, db_->GetCollection(req.collection));
  ZOOM_ASSIGN_OR_RETURN(uint64_t n, c->SetPayload(req.ids, req.fields, req.overwrite));
  return Answer(n, req.concern);
}

absl::StatusOr<WriteAnswer> LocalBackend::DeletePayload(const Call&,
                                                        const DeletePayloadRequest& req) {
  ZOOM_ASSIGN_OR_RETURN(auto c, db_->GetCollection(req.collection));
  ZOOM_ASSIGN_OR_RETURN(uint64_t n, c->DeletePayload(req.ids, req.keys));
  return Answer(n, req.concern);
}

// ---- search -----------------------------------------------------------------------

CollectionSearchParams LocalBackend::ParamsOf(const Call& call, const Query& q) const {
  CollectionSearchParams p;
  p.engine.k = q.k;
  p.engine.ef = q.knobs.ef;
  p.engine.nprobe = q.knobs.nprobe;
  p.engine.rerank_candidates = q.knobs.rerank_candidates;
  p.engine.rerank_stop_sd = q.knobs.rerank_stop_sd;  // validated by the engine
  p.engine.band_confidence = q.knobs.band_confidence;
  p.engine.exact_scores = q.exact_scores;
  p.target_recall = q.knobs.target_recall;           // validated by the collection
  p.engine.preview_only = q.preview_only || q.degrade;
  p.engine.exact = q.exact;
  p.engine.with_vectors = q.with_vectors;
  p.context.allow_partial = q.allow_partial;
  p.context.deadline = call.deadline;
  p.context.cancelled = call.cancelled;
  p.context.limits.max_k = limits_.max_k;
  p.context.limits.max_ef = limits_.max_ef;
  p.context.limits.max_nprobe = limits_.max_nprobe;
  p.context.limits.max_rerank = limits_.max_rerank;
  p.with_payload = q.with_payload;
  p.filter = q.filter != nullptr ? q.filter.get() : &kNoFilter;
  return p;
}

SearchAnswer LocalBackend::AnswerOf(const Collection& c, const Query& q, QueryResult result,
                                    uint64_t* budget) const {
  SearchAnswer a;
  for (const Hit& h : result.hits) *budget -= std::min(*budget, AnswerBytes(h));
  a.hits = std::move(result.hits);
  a.stats = result.stats;
  if (q.degrade) a.stats.degraded = true;
  const QueryStats& stats = a.stats;
  a.warning = ScanWarning(stats.filter_scan, c, q.filter.get());
  if (stats.target_recall > 0 && !stats.target_reached && !stats.exact) {
    absl::StrAppend(
        &a.warning, a.warning.empty() ? "" : "; ",
        stats.knobs_calibrated
            ? absl::StrCat("no calibrated knobs reached recall ", stats.target_recall,
                           "; the highest-recall ones ran (see GetCollection's calibration)")
            : absl::StrCat("target_recall ", stats.target_recall,
                           ": the index has no calibration yet; the default knobs ran"));
  }
  return a;
}

absl::StatusOr<SearchAnswer> LocalBackend::SearchOne(const Call& call, const Collection& c,
                                                     const Query& q, uint64_t* budget) const {
  ZOOM_RETURN_IF_ERROR(BeforeSearch(call, c.config().name, q));
  CollectionSearchParams p = ParamsOf(call, q);
  p.max_answer_bytes = *budget;
  QueryResult result;
  ZOOM_RETURN_IF_ERROR(c.Search(q.vector, p, &result));
  return AnswerOf(c, q, std::move(result), budget);
}

absl::StatusOr<SearchAnswer> LocalBackend::Search(const Call& call, const SearchRequest& req) {
  ZOOM_ASSIGN_OR_RETURN(auto c, db_->GetCollection(req.collection));
  uint64_t budget = limits_.max_response_bytes;
  return SearchOne(call, *c, req.query, &budget);
}

absl::StatusOr<std::vector<SearchAnswer>> LocalBackend::SearchBatch(
    const Call& call, const SearchBatchRequest& req) {
  ZOOM_ASSIGN_OR_RETURN(auto c, db_->GetCollection(req.collection));
  ZOOM_RETURN_IF_ERROR(CheckAnswerSize(req.queries, c->config().dim, limits_));
  uint64_t budget = limits_.max_response_bytes;
  const size_t nq = req.queries.size();
  std::vector<SearchAnswer> out;
  out.reserve(nq);
  bool same = nq > 1;
  for (size_t i = 1; i < nq && same; ++i) same = SameShape(req.queries[i], req.queries[0]);
  if (!same) {
    for (size_t i = 0; i < nq; ++i) {
      if (call.cancelled != nullptr && call.cancelled->load()) {
        return absl::CancelledError("the call was cancelled");
      }
      absl::StatusOr<SearchAnswer> a = SearchOne(call, *c, req.queries[i], &budget);
      if (!a.ok()) {
        return absl::Status(a.status().code(),
                            absl::StrCat("query #", i, ": ", a.status().message()));
      }
      out.push_back(std::move(*a));
    }
    return out;
  }
  // One pipelined engine batch: query i+1's preview while i's reads fly.
  const Query& first = req.queries[0];
  for (size_t i = 0; i < nq; ++i) {
    absl::Status st = BeforeSearch(call, c->config().name, req.queries[i]);
    if (!st.ok()) return absl::Status(st.code(), absl::StrCat("query #", i, ": ", st.message()));
  }
  const size_t qd = first.vector.size();
  std::vector<float> vectors(nq * qd);
  for (size_t i = 0; i < nq; ++i) {
    std::copy(req.queries[i].vector.begin(), req.queries[i].vector.end(),
              vectors.begin() + static_cast<std::ptrdiff_t>(i * qd));
  }
  CollectionSearchParams p = ParamsOf(call, first);
  p.max_answer_bytes = budget;
  std::vector<QueryResult> results;
  ZOOM_RETURN_IF_ERROR(c->SearchBatch(vectors, nq, p, &results));
  for (size_t i = 0; i < nq; ++i) {
    out.push_back(AnswerOf(*c, req.queries[i], std::move(results[i]), &budget));
  }
  return out;
}

absl::StatusOr<CountAnswer> LocalBackend::Count(const Call&, const CountRequest& req) {
  ZOOM_ASSIGN_OR_RETURN(auto c, db_->GetCollection(req.collection));
  const Filter* filter = req.filter != nullptr ? req.filter.get() : &kNoFilter;
  // A replica's log position read before the count (it is recorded after
  // each write is applied): the count covers every write up to it.
  const uint64_t applied = c->log_position();
  ZOOM_ASSIGN_OR_RETURN(Collection::FilterCount n, c->Count(filter));
  CountAnswer out;
  out.count = n.count;
  out.live = n.live;
  out.applied = applied;
  out.filter_scan = n.scan;
  out.warning = ScanWarning(n.scan, *c, filter);
  return out;
}

absl::StatusOr<ScrollAnswer> LocalBackend::Scroll(const Call&, const ScrollRequest& req) {
  ZOOM_ASSIGN_OR_RETURN(auto c, db_->GetCollection(req.collection));
  ScrollAnswer out;
  const Filter* filter = req.filter != nullptr ? req.filter.get() : &kNoFilter;
  ZOOM_RETURN_IF_ERROR(c->Scroll(filter, req.offset, req.limit, req.with_vectors,
                                 req.with_payload, &out.points, &out.next_offset,
                                 &out.filter_scan, limits_.max_response_bytes));
  return out;
}

// ---- indexes and maintenance ------------------------------------------------------

absl::StatusOr<CollectionDescription> LocalBackend::CreateFieldIndex(
    const Call&, const CreateFieldIndexRequest& req) {
  ZOOM_ASSIGN_OR_RETURN(auto c, db_->GetCollection(req.collection));
  // With wait, the build runs on this (admin) worker.
  ZOOM_RETURN_IF_ERROR(
      c->field_indexes().Create(req.field, req.type, /*background=*/!req.wait));
  return Describe(*c);
}

absl::StatusOr<CollectionDescription> LocalBackend::DeleteFieldIndex(
    const Call&, const DeleteFieldIndexRequest& req) {
  ZOOM_ASSIGN_OR_RETURN(auto c, db_->GetCollection(req.collection));
  ZOOM_RETURN_IF_ERROR(c->field_indexes().Delete(req.field));
  return Describe(*c);
}

void LocalBackend::BuildIndex(const Call& call, const BuildIndexRequest& req,
                              std::function<void(absl::StatusOr<CollectionDescription>)> done) {
  auto c = db_->GetCollection(req.collection);
  if (!c.ok()) return done(c.status());
  std::shared_ptr<Collection> col = *c;
  if (absl::Status st = BeforeBuild(call, req); !st.ok()) return done(st);
  // A build already running (e.g. the automatic one started during an
  // import) is the build asked for: report it, or wait for it.
  if (absl::Status st = col->maintenance().StartOrJoinBuild(); !st.ok()) return done(st);
  // A weak reference: a waiting call must not keep a dropped collection (or
  // one the database is closing) alive.
  std::weak_ptr<Collection> weak = col;
  auto answer = [weak, done = std::move(done)](const absl::Status& st) {
    std::shared_ptr<Collection> live = weak.lock();
    if (live == nullptr) return done(absl::NotFoundError("the collection was dropped"));
    if (!st.ok()) return done(st);
    done(Describe(*live));
  };
  if (!req.wait) return answer(absl::OkStatus());
  col->maintenance().WhenBuildDone(std::move(answer));
}

absl::StatusOr<CollectionDescription> LocalBackend::Compact(const Call&,
                                                            const std::string& collection) {
  ZOOM_ASSIGN_OR_RETURN(auto c, db_->GetCollection(collection));
  ZOOM_RETURN_IF_ERROR(c->maintenance().Compact());
  return Describe(*c);
}

// ---- snapshots --------------------------------------------------------------------

absl::StatusOr<SnapshotInfo> LocalBackend::CreateSnapshot(const Call&,
                                                          const std::string& collection) {
  return db_->CreateSnapshot(collection);
}

absl::StatusOr<std::vector<SnapshotInfo>> LocalBackend::ListSnapshots(
    const Call&, const std::string& collection) {
  return db_->ListSnapshots(collection);
}

absl::Status LocalBackend::DeleteSnapshot(const Call&, const std::string& collection,
                                          const std::string& name) {
  return db_->DeleteSnapshot(collection, name);
}

absl::StatusOr<std::unique_ptr<SnapshotReader>> LocalBackend::OpenSnapshot(
    const Call&, const std::string& collection, const std::string& name) {
  ZOOM_ASSIGN_OR_RETURN(auto file, db_->SnapshotFile(collection, name));
  auto reader = std::make_unique<FileSnapshotReader>(file.first, file.second);
  if (!reader->ok()) return absl::NotFoundError("the snapshot cannot be read");
  return std::unique_ptr<SnapshotReader>(std::move(reader));
}

absl::StatusOr<std::unique_ptr<SnapshotRestore>> LocalBackend::BeginRestore(
    const Call&, const std::string& collection, bool overwrite, const std::string& source) {
  ZOOM_RETURN_IF_ERROR(ValidateCollectionName(collection));
  // A collection's archive is restored by the engine (its files, its index
  // as they were); a cluster's by replaying its shards' points here.
  auto restore = std::make_unique<StagedRestore>(
      db_, [this, collection, overwrite](const Call& call,
                                         const std::string& path)
               -> absl::StatusOr<CollectionDescription> {
        if (IsClusterArchive(path)) {
          DatabaseOptions scratch = db_->options();
          scratch.data_dir = db_->snapshots_dir() + "/.incoming";
          ReplayOptions ro;
          ro.keep_layout = false;
          return RestoreByReplay(*this, scratch, call, path, collection, overwrite, ro);
        }
        ZOOM_ASSIGN_OR_RETURN(auto c, db_->RestoreSnapshot(path, collection, overwrite));
        return Describe(*c);
      });
  if (!source.empty()) {
    ZOOM_ASSIGN_OR_RETURN(std::string path, db_->SnapshotSource(source));
    restore->SetSource(std::move(path));
  } else {
    ZOOM_RETURN_IF_ERROR(restore->StageUpload());
  }
  return std::unique_ptr<SnapshotRestore>(std::move(restore));
}

// ---- NodeBackend ------------------------------------------------------------------

absl::Status NodeBackend::AcceptsWrites(absl::string_view rpc) const {
  return absl::FailedPreconditionError(absl::StrCat(
      "this zoomd is node ", options_.node, " of cluster ", options_.cluster,
      ": its collections are shard replicas written through their log; send ", rpc,
      " to a router (zoomd --role=router)"));
}

absl::Status NodeBackend::BeforeSearch(const Call& call, const std::string& collection,
                                       const Query& query) const {
  if (query.consistency != Consistency::kSession || !options_.wait_applied) {
    return absl::OkStatus();
  }
  return options_.wait_applied(collection, query.after,
                               std::min(call.deadline, absl::Now() + options_.max_session_wait));
}

absl::Status NodeBackend::BeforeBuild(const Call& call, const BuildIndexRequest& req) const {
  // A replica builds once it has applied what the router saw in the log
  // (`after`): not over a part of an import.
  if (req.after.empty() || !options_.wait_applied) return absl::OkStatus();
  const absl::Time until = std::min(call.deadline, absl::Now() + absl::Minutes(10));
  return options_.wait_applied(req.collection, req.after, until);
}

}  // namespace zoom::server::api
