#include "server/grpc/vector_search_service.h"

#include <atomic>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "server/grpc/import_reactor.h"
#include "server/grpc/snapshot_reactors.h"
#include "server/grpc/unary_call.h"

namespace zoom::server {

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  // The message travels in a trailer; a client's default limit for all of
  // its metadata is 8 KiB. Every message is meant to be short; this cap is
  // the safety net (cut at a UTF-8 character boundary).
  constexpr size_t kMaxMessage = 2048;
  std::string message(status.message());
  if (message.size() > kMaxMessage) {
    size_t cut = kMaxMessage;
    while (cut > 0 && (static_cast<unsigned char>(message[cut]) & 0xc0) == 0x80) --cut;
    message.resize(cut);
    message += "...";
  }
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::move(message));
}

api::Call CallOf(const grpc::ServerContextBase& ctx, absl::Time deadline,
                 const std::atomic<bool>* cancelled) {
  api::Call call;
  call.deadline = deadline;
  call.cancelled = cancelled;
  for (const char* key : {"authorization", "api-key"}) {
    auto range = ctx.client_metadata().equal_range(key);
    for (auto it = range.first; it != range.second; ++it) {
      call.credentials.emplace_back(key, std::string(it->second.data(), it->second.size()));
    }
  }
  return call;
}

api::Call CallOf(const grpc::CallbackServerContext* ctx, const std::atomic<bool>* cancelled) {
  return CallOf(*ctx, DeadlineOf(ctx), cancelled);
}

VectorSearchService::VectorSearchService(api::CollectionBackend* backend, Metrics* metrics,
                                         WorkerPool* pool, const ServiceLimits& limits,
                                         const Authenticator* auth)
    : backend_(backend), metrics_(metrics), pool_(pool), limits_(limits), auth_(auth) {}

void VectorSearchService::Record(const char* rpc, const absl::Status& status,
                                 double seconds) const {
  if (metrics_ != nullptr) metrics_->RecordRpc(rpc, status.code(), seconds);
}

template <typename Work>
grpc::ServerUnaryReactor* VectorSearchService::Run(grpc::CallbackServerContext* ctx,
                                                   const char* rpc, WorkClass cls,
                                                   uint64_t units, Writes writes, Work work) {
  auto record = [this, rpc](const absl::Status& st, double seconds) { Record(rpc, st, seconds); };
  if (absl::Status st = AuthorizeCall(auth_, *ctx, RoleFor(cls)); !st.ok()) {
    return FinishNow(st, record);
  }
  if (writes == Writes::kYes) {
    if (absl::Status st = backend_->AcceptsWrites(rpc); !st.ok()) return FinishNow(st, record);
  }
  return RunUnaryOnPool(pool_, ctx, cls, units, std::move(record),
                        [ctx, work = std::move(work)](const std::atomic<bool>* cancelled) {
                          return work(CallOf(ctx, cancelled));
                        });
}

template <typename Work>
grpc::ServerUnaryReactor* VectorSearchService::RunAsync(grpc::CallbackServerContext* ctx,
                                                        const char* rpc, WorkClass cls,
                                                        uint64_t units, Work work) {
  auto record = [this, rpc](const absl::Status& st, double seconds) { Record(rpc, st, seconds); };
  if (absl::Status st = AuthorizeCall(auth_, *ctx, RoleFor(cls)); !st.ok()) {
    return FinishNow(st, record);
  }
  return RunAsyncOnPool(pool_, ctx, cls, units, std::move(record),
                        [ctx, work = std::move(work)](const std::atomic<bool>* cancelled,
                                                      std::shared_ptr<PendingReply> reply) {
                          work(CallOf(ctx, cancelled), std::move(reply));
                        });
}

void VectorSearchService::RefreshCollectionMetrics() const {
  if (metrics_ == nullptr) return;
  absl::StatusOr<std::vector<api::CollectionDescription>> all =
      backend_->ListCollections(api::Call());
  if (!all.ok()) return;
  for (const api::CollectionDescription& d : *all) {
    const CollectionInfo& info = d.info;
    metrics_->SetCollection(info.config.name, info.points, info.resident_bytes, info.disk_bytes,
                            info.build_progress, IndexStateName(info.index_state));
  }
}

// ---- Collections ---------------------------------------------------------------

grpc::ServerUnaryReactor* VectorSearchService::GetServerInfo(
    grpc::CallbackServerContext* ctx, const v1::GetServerInfoRequest*,
    v1::GetServerInfoResponse* resp) {
  return Run(ctx, "GetServerInfo", WorkClass::kRead, 1, Writes::kNo, [this, resp](const api::Call&) {
    resp->set_version(version_);
    resp->set_simd_level(Database::SimdLevel());
    resp->set_started_unix_ms(started_unix_ms_);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* VectorSearchService::CreateCollection(
    grpc::CallbackServerContext* ctx, const v1::CreateCollectionRequest* req,
    v1::CreateCollectionResponse* resp) {
  return Run(ctx, "CreateCollection", WorkClass::kAdmin, 1, Writes::kYes,
             [this, req, resp](const api::Call& call) {
    ZOOM_ASSIGN_OR_RETURN(api::CreateCollectionRequest r, api::FromProto(*req, limits_));
    ZOOM_ASSIGN_OR_RETURN(api::CollectionDescription d, backend_->CreateCollection(call, r));
    *resp->mutable_info() = api::ToProto(d);
    RefreshCollectionMetrics();
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* VectorSearchService::DropCollection(
    grpc::CallbackServerContext* ctx, const v1::DropCollectionRequest* req,
    v1::DropCollectionResponse*) {
  return Run(ctx, "DropCollection", WorkClass::kAdmin, 1, Writes::kYes,
             [this, req](const api::Call& call) {
    ZOOM_RETURN_IF_ERROR(backend_->DropCollection(call, req->name()));
    if (metrics_ != nullptr) metrics_->RemoveCollection(req->name());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* VectorSearchService::ListCollections(
    grpc::CallbackServerContext* ctx, const v1::ListCollectionsRequest*,
    v1::ListCollectionsResponse* resp) {
  return Run(ctx, "ListCollections", WorkClass::kRead, 1, Writes::kNo,
             [this, resp](const api::Call& call) {
    ZOOM_ASSIGN_OR_RETURN(std::vector<api::CollectionDescription> all,
                          backend_->ListCollections(call));
    for (const api::CollectionDescription& d : all) *resp->add_collections() = api::ToProto(d);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* VectorSearchService::GetCollection(
    grpc::CallbackServerContext* ctx, const v1::GetCollectionRequest* req,
    v1::GetCollectionResponse* resp) {
  return Run(ctx, "GetCollection", WorkClass::kRead, 1, Writes::kNo,
             [this, req, resp](const api::Call& call) {
    ZOOM_ASSIGN_OR_RETURN(api::CollectionDescription d, backend_->GetCollection(call, req->name()));
    *resp->mutable_info() = api::ToProto(d);
    return absl::OkStatus();
  });
}

// ---- Points ------------------------------------------------------------------

absl::Status VectorSearchService::ApplyPoints(
    const api::Call& call, const std::string& collection,
    const google::protobuf::RepeatedPtrField<v1::Point>& points, int concern,
    api::WriteAnswer* answer) const {
  ZOOM_ASSIGN_OR_RETURN(api::UpsertRequest r,
                        api::UpsertFromProto(collection, points, concern, limits_));
  ZOOM_ASSIGN_OR_RETURN(api::WriteAnswer a, backend_->Upsert(call, r));
  answer->count += a.count;
  answer->concern = a.concern;
  answer->tokens.insert(answer->tokens.end(), std::make_move_iterator(a.tokens.begin()),
                        std::make_move_iterator(a.tokens.end()));
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* VectorSearchService::Upsert(grpc::CallbackServerContext* ctx,
                                                      const v1::UpsertRequest* req,
                                                      v1::UpsertResponse* resp) {
  return Run(ctx, "Upsert", WorkClass::kWrite, 1 + req->points_size() / 100, Writes::kYes,
             [this, req, resp](const api::Call& call) {
    api::WriteAnswer a;
    ZOOM_RETURN_IF_ERROR(
        ApplyPoints(call, req->collection(), req->points(), req->write_concern(), &a));
    resp->set_upserted(a.count);
    api::TokensToProto(a.tokens, resp->mutable_tokens());
    resp->set_write_concern(api::ConcernToProto(a.concern));
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* VectorSearchService::Delete(grpc::CallbackServerContext* ctx,
                                                      const v1::DeleteRequest* req,
                                                      v1::DeleteResponse* resp) {
  return Run(ctx, "Delete", WorkClass::kWrite, 1 + req->ids_size() / 1000, Writes::kYes,
             [this, req, resp](const api::Call& call) {
    ZOOM_ASSIGN_OR_RETURN(api::DeleteRequest r, api::FromProto(*req, limits_));
    ZOOM_ASSIGN_OR_RETURN(api::WriteAnswer a, backend_->Delete(call, r));
    resp->set_deleted(a.count);
    api::TokensToProto(a.tokens, resp->mutable_tokens());
    resp->set_write_concern(api::ConcernToProto(a.concern));
    return absl::OkStatus();
  });
}

absl::Status VectorSearchService::AnswerGet(const v1::GetRequest& req, v1::GetResponse* resp) const {
  ZOOM_ASSIGN_OR_RETURN(api::GetRequest r, api::FromProto(req, limits_));
  ZOOM_ASSIGN_OR_RETURN(std::vector<PointData> found, backend_->Get(api::Call(), r));
  for (PointData& p : found) api::ToProto(std::move(p), resp->add_points());
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* VectorSearchService::Get(grpc::CallbackServerContext* ctx,
                                                   const v1::GetRequest* req,
                                                   v1::GetResponse* resp) {
  return Run(ctx, "Get", WorkClass::kRead, 1 + req->ids_size() / 100, Writes::kNo,
             [this, req, resp](const api::Call& call) {
    ZOOM_ASSIGN_OR_RETURN(api::GetRequest r, api::FromProto(*req, limits_));
    ZOOM_ASSIGN_OR_RETURN(std::vector<PointData> found, backend_->Get(call, r));
    for (PointData& p : found) api::ToProto(std::move(p), resp->add_points());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* VectorSearchService::SetPayload(grpc::CallbackServerContext* ctx,
                                                          const v1::SetPayloadRequest* req,
                                                          v1::SetPayloadResponse* resp) {
  return Run(ctx, "SetPayload", WorkClass::kWrite, 1 + req->ids_size() / 1000, Writes::kYes,
             [this, req, resp](const api::Call& call) {
    ZOOM_ASSIGN_OR_RETURN(api::SetPayloadRequest r, api::FromProto(*req, limits_));
    ZOOM_ASSIGN_OR_RETURN(api::WriteAnswer a, backend_->SetPayload(call, r));
    resp->set_updated(a.count);
    api::TokensToProto(a.tokens, resp->mutable_tokens());
    resp->set_write_concern(api::ConcernToProto(a.concern));
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* VectorSearchService::DeletePayload(grpc::CallbackServerContext* ctx,
                                                             const v1::DeletePayloadRequest* req,
                                                             v1::DeletePayloadResponse* resp) {
  return Run(ctx, "DeletePayload", WorkClass::kWrite, 1 + req->ids_size() / 1000, Writes::kYes,
             [this, req, resp](const api::Call& call) {
    ZOOM_ASSIGN_OR_RETURN(api::DeletePayloadRequest r, api::FromProto(*req, limits_));
    ZOOM_ASSIGN_OR_RETURN(api::WriteAnswer a, backend_->DeletePayload(call, r));
    resp->set_updated(a.count);
    api::TokensToProto(a.tokens, resp->mutable_tokens());
    resp->set_write_concern(api::ConcernToProto(a.concern));
    return absl::OkStatus();
  });
}

grpc::ServerReadReactor<grpc::ByteBuffer>* VectorSearchService::Import(
    grpc::CallbackServerContext* ctx, grpc::ByteBuffer* resp) {
  // The last token of each shard written goes in the response (clustered
  // collections), with the replicas that acknowledged it; every batch is
  // acknowledged under the first message's write concern.
  struct Written {
    std::map<uint32_t, api::WriteToken> tokens;
    std::optional<int> concern;
    api::WriteConcern applied = api::WriteConcern::kMajority;
  };
  auto written = std::make_shared<Written>();
  ImportHooks hooks;
  hooks.pool = pool_;
  hooks.auth = auth_;
  hooks.precheck = [this] { return backend_->AcceptsWrites("Import"); };
  hooks.apply = [this, ctx, written](const std::string& collection, v1::ImportRequest* req,
                                     uint64_t* imported) {
    if (!written->concern.has_value()) written->concern = req->write_concern();
    api::WriteAnswer a;
    api::Call call = CallOf(ctx, nullptr);
    call.deadline = absl::InfiniteFuture();  // each message; the stream has its own
    ZOOM_RETURN_IF_ERROR(ApplyPoints(call, collection, req->points(), *written->concern, &a));
    *imported += a.count;
    written->applied = a.concern;
    for (api::WriteToken& t : a.tokens) written->tokens[t.shard] = std::move(t);
    return absl::OkStatus();
  };
  hooks.finish = [written](v1::ImportResponse* out) {
    std::vector<api::WriteToken> tokens;
    for (auto& [k, t] : written->tokens) tokens.push_back(t);
    api::TokensToProto(tokens, out->mutable_tokens());
    out->set_write_concern(api::ConcernToProto(written->applied));
  };
  hooks.record = [this](const absl::Status& st, double s) { Record("Import", st, s); };
  return new ImportReactor(std::move(hooks), ctx, resp);
}

// ---- Search ------------------------------------------------------------------

void VectorSearchService::FillSearch(const std::string& collection, api::SearchAnswer a,
                                     v1::SearchResponse* resp) const {
  if (metrics_ != nullptr && backend_->SearchesHere()) metrics_->RecordQuery(collection, a.stats);
  api::ToProto(std::move(a), resp);
}

void VectorSearchService::FillSearchBatch(const std::string& collection,
                                          std::vector<api::SearchAnswer> answers,
                                          v1::SearchBatchResponse* resp) const {
  for (api::SearchAnswer& a : answers) {
    if (metrics_ != nullptr && backend_->SearchesHere()) {
      metrics_->RecordQuery(collection, a.stats);
    }
    api::ToProto(std::move(a), resp->add_results());
  }
}

absl::Status VectorSearchService::DoSearch(const api::Call& call, const v1::SearchRequest& req,
                                           bool degrade, v1::SearchResponse* resp) const {
  ZOOM_ASSIGN_OR_RETURN(api::SearchRequest r, api::FromProto(req, limits_));
  r.query.degrade = degrade;
  ZOOM_ASSIGN_OR_RETURN(api::SearchAnswer a, backend_->Search(call, r));
  FillSearch(req.collection(), std::move(a), resp);
  return absl::OkStatus();
}

absl::Status VectorSearchService::DoSearchBatch(const api::Call& call,
                                                const v1::SearchBatchRequest& req, bool degrade,
                                                v1::SearchBatchResponse* resp) const {
  ZOOM_ASSIGN_OR_RETURN(api::SearchBatchRequest r, api::FromProto(req, limits_));
  for (api::Query& q : r.queries) q.degrade = degrade;
  ZOOM_ASSIGN_OR_RETURN(std::vector<api::SearchAnswer> answers, backend_->SearchBatch(call, r));
  FillSearchBatch(req.collection(), std::move(answers), resp);
  return absl::OkStatus();
}

// The request and response stay valid until the reply completes
// (RunAsyncOnPool), so the continuation reads and writes them in `fill`.
void VectorSearchService::StartSearch(const api::Call& call, const v1::SearchRequest* req,
                                      v1::SearchResponse* resp,
                                      std::shared_ptr<PendingReply> reply) const {
  absl::StatusOr<api::SearchRequest> r = api::FromProto(*req, limits_);
  if (!r.ok()) return reply->Complete(r.status());
  r->query.degrade = false;
  backend_->SearchAsync(call, std::move(*r),
                        [this, req, resp, reply](absl::StatusOr<api::SearchAnswer> a) {
                          if (!a.ok()) return reply->Complete(a.status());
                          reply->Complete(absl::OkStatus(), [&] {
                            FillSearch(req->collection(), std::move(*a), resp);
                          });
                        });
}

void VectorSearchService::StartSearchBatch(const api::Call& call,
                                           const v1::SearchBatchRequest* req,
                                           v1::SearchBatchResponse* resp,
                                           std::shared_ptr<PendingReply> reply) const {
  absl::StatusOr<api::SearchBatchRequest> r = api::FromProto(*req, limits_);
  if (!r.ok()) return reply->Complete(r.status());
  for (api::Query& q : r->queries) q.degrade = false;
  backend_->SearchBatchAsync(
      call, std::move(*r),
      [this, req, resp, reply](absl::StatusOr<std::vector<api::SearchAnswer>> answers) {
        if (!answers.ok()) return reply->Complete(answers.status());
        reply->Complete(absl::OkStatus(), [&] {
          FillSearchBatch(req->collection(), std::move(*answers), resp);
        });
      });
}

absl::Status VectorSearchService::AnswerSearch(const v1::SearchRequest& req,
                                               v1::SearchResponse* resp) const {
  return DoSearch(api::Call(), req, false, resp);
}

grpc::ServerUnaryReactor* VectorSearchService::SearchHere(grpc::CallbackServerContext* ctx,
                                                          const v1::SearchRequest* req,
                                                          v1::SearchResponse* resp,
                                                          bool degrade) {
  return RunUnaryInline(
      ctx, [this](const absl::Status& st, double s) { Record("Search", st, s); },
      [&](const std::atomic<bool>* cancelled) -> absl::Status {
        if (!degrade) ZOOM_RETURN_IF_ERROR(QueuedCallStatus(ctx, false));
        return DoSearch(CallOf(ctx, cancelled), *req, degrade, resp);
      });
}

grpc::ServerUnaryReactor* VectorSearchService::Search(grpc::CallbackServerContext* ctx,
                                                      const v1::SearchRequest* req,
                                                      v1::SearchResponse* resp) {
  const absl::Time deadline = DeadlineOf(ctx);
  if (absl::Status st = AuthorizeCall(auth_, *ctx, Role::kRead); !st.ok()) {
    return FinishNow(st, [this](const absl::Status& s, double t) { Record("Search", s, t); });
  }
  // Two kinds of search are answered right here, on gRPC's thread. Both
  // stay in RAM: no payloads or vectors (RocksDB, the SSD), no filter (its
  // evaluation may scan the payloads, its exact strategy reads the SSD), no
  // exact scan, and the collection has an index (a local one).
  //  - Load shedding with allow_partial: when the reads queued ahead would
  //    outlast the deadline, the preview runs here and the answer comes
  //    back `degraded`, instead of being refused.
  //  - An idle server and a preview-only search (WorkerPool::TryBeginInline:
  //    nothing queued, one inline run at a time): tens of µs, less than the
  //    hand-off to a worker and back costs (~300 µs at p50 on a 2-core VM).
  //    A search that reads the SSD stays on the workers: measured inline,
  //    50-read searches lost throughput at 2-4 callers (a gRPC thread waits
  //    on the disk), docs/benchmarks.md "grpc".
  const bool ram_only =
      !req->exact() && !req->with_payload() && !req->with_vectors() && !req->has_filter();
  const bool shed = ram_only && req->allow_partial() && deadline != absl::InfiniteFuture() &&
                    pool_->EstimatedWait(WorkClass::kRead) > deadline - absl::Now();
  if ((shed || (ram_only && req->preview_only())) && backend_->AnswersInRam(req->collection())) {
    if (shed) return SearchHere(ctx, req, resp, /*degrade=*/true);
    if (pool_->TryBeginInline(WorkClass::kRead)) {
      grpc::ServerUnaryReactor* call = SearchHere(ctx, req, resp, /*degrade=*/false);
      pool_->EndInline(WorkClass::kRead);
      return call;
    }
  }
  // On a worker, which starts the search and returns: a router's nodes
  // answer to its fan-out, whose continuation finishes the call.
  return RunAsync(ctx, "Search", WorkClass::kRead, 1,
                  [this, req, resp](const api::Call& call, std::shared_ptr<PendingReply> reply) {
                    StartSearch(call, req, resp, std::move(reply));
                  });
}

grpc::ServerUnaryReactor* VectorSearchService::SearchBatch(grpc::CallbackServerContext* ctx,
                                                           const v1::SearchBatchRequest* req,
                                                           v1::SearchBatchResponse* resp) {
  const absl::Time deadline = DeadlineOf(ctx);
  // Load shedding with allow_partial, as for Search: when the work queued
  // ahead would outlast the deadline, a batch that stays in RAM (every
  // query allow_partial, none exact, filtered or asking for payloads or
  // vectors) is answered by its previews here, degraded, not refused.
  bool ram_only = !req->queries().empty() && deadline != absl::InfiniteFuture() &&
                  req->queries_size() <= static_cast<int>(limits_.max_batch);
  for (const v1::SearchRequest& q : req->queries()) {
    ram_only = ram_only && q.allow_partial() && !q.exact() && !q.with_payload() &&
               !q.with_vectors() && !q.has_filter();
  }
  if (ram_only && pool_->EstimatedWait(WorkClass::kRead) > deadline - absl::Now() &&
      AuthorizeCall(auth_, *ctx, Role::kRead).ok() && backend_->AnswersInRam(req->collection())) {
    return RunUnaryInline(
        ctx, [this](const absl::Status& st, double s) { Record("SearchBatch", st, s); },
        [&](const std::atomic<bool>* cancelled) -> absl::Status {
          return DoSearchBatch(CallOf(ctx, cancelled), *req, /*degrade=*/true, resp);
        });
  }
  return RunAsync(ctx, "SearchBatch", WorkClass::kRead, std::max(1, req->queries_size()),
                  [this, req, resp](const api::Call& call, std::shared_ptr<PendingReply> reply) {
                    StartSearchBatch(call, req, resp, std::move(reply));
                  });
}

grpc::ServerUnaryReactor* VectorSearchService::Count(grpc::CallbackServerContext* ctx,
                                                     const v1::CountRequest* req,
                                                     v1::CountResponse* resp) {
  return Run(ctx, "Count", WorkClass::kRead, 1, Writes::kNo,
             [this, req, resp](const api::Call& call) {
    ZOOM_ASSIGN_OR_RETURN(api::CountRequest r, api::FromProto(*req, limits_));
    ZOOM_ASSIGN_OR_RETURN(api::CountAnswer a, backend_->Count(call, r));
    resp->set_count(a.count);
    resp->set_live(a.live);
    resp->set_applied(a.applied);
    resp->set_filter_scan(a.filter_scan);
    resp->set_warning(std::move(a.warning));
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* VectorSearchService::Scroll(grpc::CallbackServerContext* ctx,
                                                      const v1::ScrollRequest* req,
                                                      v1::ScrollResponse* resp) {
  return Run(ctx, "Scroll", WorkClass::kRead, 1 + req->limit() / 100, Writes::kNo,
             [this, req, resp](const api::Call& call) {
    ZOOM_ASSIGN_OR_RETURN(api::ScrollRequest r, api::FromProto(*req, limits_));
    ZOOM_ASSIGN_OR_RETURN(api::ScrollAnswer a, backend_->Scroll(call, r));
    api::ToProto(std::move(a), resp);
    return absl::OkStatus();
  });
}

// ---- Indexes and maintenance ---------------------------------------------------

grpc::ServerUnaryReactor* VectorSearchService::CreateFieldIndex(
    grpc::CallbackServerContext* ctx, const v1::CreateFieldIndexRequest* req,
    v1::CreateFieldIndexResponse* resp) {
  return Run(ctx, "CreateFieldIndex", WorkClass::kAdmin, 1, Writes::kYes,
             [this, req, resp](const api::Call& call) {
    ZOOM_ASSIGN_OR_RETURN(api::CreateFieldIndexRequest r, api::FromProto(*req));
    ZOOM_ASSIGN_OR_RETURN(api::CollectionDescription d, backend_->CreateFieldIndex(call, r));
    *resp->mutable_info() = api::ToProto(d);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* VectorSearchService::DeleteFieldIndex(
    grpc::CallbackServerContext* ctx, const v1::DeleteFieldIndexRequest* req,
    v1::DeleteFieldIndexResponse* resp) {
  return Run(ctx, "DeleteFieldIndex", WorkClass::kAdmin, 1, Writes::kYes,
             [this, req, resp](const api::Call& call) {
    ZOOM_ASSIGN_OR_RETURN(api::CollectionDescription d,
                          backend_->DeleteFieldIndex(call, {req->collection(), req->field()}));
    *resp->mutable_info() = api::ToProto(d);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* VectorSearchService::BuildIndex(grpc::CallbackServerContext* ctx,
                                                          const v1::BuildIndexRequest* req,
                                                          v1::BuildIndexResponse* resp) {
  // Waiting for the build holds no worker: the build's thread completes the
  // reply.
  if (absl::Status st = AuthorizeCall(auth_, *ctx, Role::kAdmin); !st.ok()) {
    return FinishNow(st, [this](const absl::Status& s, double t) { Record("BuildIndex", s, t); });
  }
  return RunDeferredOnPool(
      pool_, ctx, WorkClass::kAdmin, 1,
      [this](const absl::Status& st, double seconds) { Record("BuildIndex", st, seconds); },
      [this, r = api::FromProto(*req), call = CallOf(ctx, nullptr),
       resp](std::shared_ptr<PendingReply> reply) {
        backend_->BuildIndex(call, r,
                             [this, reply, resp](absl::StatusOr<api::CollectionDescription> d) {
          if (!d.ok()) return reply->Complete(d.status());
          reply->Complete(absl::OkStatus(), [this, resp, &d] {
            *resp->mutable_info() = api::ToProto(*d);
            RefreshCollectionMetrics();
          });
        });
      });
}

grpc::ServerUnaryReactor* VectorSearchService::Compact(grpc::CallbackServerContext* ctx,
                                                       const v1::CompactRequest* req,
                                                       v1::CompactResponse* resp) {
  return Run(ctx, "Compact", WorkClass::kAdmin, 1, Writes::kNo,
             [this, req, resp](const api::Call& call) {
    ZOOM_ASSIGN_OR_RETURN(api::CollectionDescription d, backend_->Compact(call, req->collection()));
    *resp->mutable_info() = api::ToProto(d);
    RefreshCollectionMetrics();
    return absl::OkStatus();
  });
}

// ---- Snapshots -----------------------------------------------------------------

grpc::ServerUnaryReactor* VectorSearchService::CreateSnapshot(
    grpc::CallbackServerContext* ctx, const v1::CreateSnapshotRequest* req,
    v1::CreateSnapshotResponse* resp) {
  return Run(ctx, "CreateSnapshot", WorkClass::kAdmin, 1, Writes::kNo,
             [this, req, resp](const api::Call& call) {
    ZOOM_ASSIGN_OR_RETURN(SnapshotInfo info, backend_->CreateSnapshot(call, req->collection()));
    *resp->mutable_snapshot() = ToProto(info);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* VectorSearchService::ListSnapshots(
    grpc::CallbackServerContext* ctx, const v1::ListSnapshotsRequest* req,
    v1::ListSnapshotsResponse* resp) {
  return Run(ctx, "ListSnapshots", WorkClass::kRead, 1, Writes::kNo,
             [this, req, resp](const api::Call& call) {
    ZOOM_ASSIGN_OR_RETURN(auto list, backend_->ListSnapshots(call, req->collection()));
    for (const SnapshotInfo& i : list) *resp->add_snapshots() = ToProto(i);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* VectorSearchService::DeleteSnapshot(
    grpc::CallbackServerContext* ctx, const v1::DeleteSnapshotRequest* req,
    v1::DeleteSnapshotResponse*) {
  return Run(ctx, "DeleteSnapshot", WorkClass::kAdmin, 1, Writes::kNo,
             [this, req](const api::Call& call) {
    return backend_->DeleteSnapshot(call, req->collection(), req->name());
  });
}

grpc::ServerWriteReactor<v1::SnapshotChunk>* VectorSearchService::DownloadSnapshot(
    grpc::CallbackServerContext* ctx, const v1::DownloadSnapshotRequest* req) {
  return NewDownloadReactor(this, ctx, *req);
}

grpc::ServerReadReactor<grpc::ByteBuffer>* VectorSearchService::RestoreSnapshot(
    grpc::CallbackServerContext* ctx, grpc::ByteBuffer* resp) {
  return NewRestoreReactor(this, ctx, resp);
}

}  // namespace zoom::server
