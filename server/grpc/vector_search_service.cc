#include "server/grpc/vector_search_service.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/grpc/import_reactor.h"
#include "server/grpc/payload_convert.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/timer.h"
#include "server/grpc/unary_call.h"

namespace zoom::server {
namespace {

absl::StatusOr<Metric> MetricFromProto(v1::Metric m) {
  switch (m) {
    case v1::L2: return Metric::kL2;
    case v1::INNER_PRODUCT: return Metric::kInnerProduct;
    case v1::COSINE: return Metric::kCosine;
    case v1::METRIC_UNSPECIFIED:
      return absl::InvalidArgumentError("metric is required: L2, INNER_PRODUCT or COSINE");
    default:
      return absl::InvalidArgumentError(absl::StrCat("unknown metric value ", static_cast<int>(m)));
  }
}
v1::Metric MetricToProto(Metric m) {
  switch (m) {
    case Metric::kL2: return v1::L2;
    case Metric::kInnerProduct: return v1::INNER_PRODUCT;
    case Metric::kCosine: return v1::COSINE;
  }
  return v1::METRIC_UNSPECIFIED;
}

}  // namespace

namespace {
absl::Status CheckRange(const char* name, uint32_t value, uint32_t max);
}  // namespace

absl::StatusOr<CollectionConfig> ConfigFromSpec(const v1::CollectionSpec& spec,
                                                const ServiceLimits& limits) {
  ZOOM_ASSIGN_OR_RETURN(CollectionConfig config, FromProto(spec));
  if (spec.default_knobs().rerank_stop_sd() != 0) {
    return absl::InvalidArgumentError(
        "default_knobs.rerank_stop_sd: not a collection default (yet); set it per request "
        "in SearchRequest.knobs");
  }
  ZOOM_RETURN_IF_ERROR(CheckRange("default ef", config.default_ef, limits.max_ef));
  ZOOM_RETURN_IF_ERROR(CheckRange("default nprobe", config.default_nprobe, limits.max_nprobe));
  ZOOM_RETURN_IF_ERROR(
      CheckRange("default rerank_candidates", config.default_rerank, limits.max_rerank));
  return config;
}

// The cluster fields of a search, checked wherever it runs.
absl::Status CheckClusterFields(const v1::SearchRequest& req) {
  const float mc = req.min_coverage();
  if (!(mc >= 0.0f && mc <= 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "min_coverage must be in [0, 1] (the share of shards an answer must cover), got ", mc));
  }
  if (req.consistency() != v1::EVENTUAL && req.consistency() != v1::SESSION) {
    return absl::InvalidArgumentError(
        absl::StrCat("consistency ", static_cast<int>(req.consistency()),
                     " is not EVENTUAL (0) or SESSION (1)"));
  }
  if (req.after_size() > static_cast<int>(1024)) {
    return absl::InvalidArgumentError(
        absl::StrCat("after: ", req.after_size(), " write tokens; at most 1,024 (one a shard)"));
  }
  return absl::OkStatus();
}

namespace {

absl::Status CheckRange(const char* name, uint32_t value, uint32_t max) {
  if (value > max) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " ", value, " is above this server's limit of ", max));
  }
  return absl::OkStatus();
}

}  // namespace

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

absl::StatusOr<CollectionConfig> FromProto(const v1::CollectionSpec& spec) {
  CollectionConfig c;
  c.name = spec.name();
  ZOOM_RETURN_IF_ERROR(ValidateCollectionName(c.name));
  c.dim = spec.dim();
  ZOOM_ASSIGN_OR_RETURN(c.metric, MetricFromProto(spec.metric()));
  switch (spec.dtype()) {
    case v1::DTYPE_UNSPECIFIED:
    case v1::FLOAT32: c.dtype = storage::DType::kFloat32; break;
    case v1::UINT8: c.dtype = storage::DType::kUint8; break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown dtype value ", static_cast<int>(spec.dtype())));
  }
  const v1::IndexSpec& is = spec.index();
  switch (is.kind()) {
    case v1::INDEX_KIND_UNSPECIFIED:
    case v1::IVF_HNSW_PQ: c.index.kind = index::IndexKind::kIvfHnswPq; break;
    case v1::HNSW_PQ: c.index.kind = index::IndexKind::kHnswPq; break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown index kind value ", static_cast<int>(is.kind()), "; use HNSW_PQ or IVF_HNSW_PQ"));
  }
  c.index.hnsw.M = is.m();
  c.index.hnsw.ef_construction = is.ef_construction();
  c.index.pq.m = is.pq_m();
  c.index.pq.nbits = is.pq_nbits();
  c.index.pq.opq = is.opq();
  switch (is.quantizer()) {
    case v1::QUANTIZER_UNSPECIFIED:
    case v1::QUANTIZER_PQ: c.index.pq.code = index::CodeKind::kPq; break;
    case v1::QUANTIZER_RABITQ: c.index.pq.code = index::CodeKind::kRabitq; break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown quantizer value ", static_cast<int>(is.quantizer()),
                       "; use QUANTIZER_PQ or QUANTIZER_RABITQ"));
  }
  c.index.hnsw.compact_links = is.compact_links();
  c.index.nlist = is.nlist();
  c.default_ef = spec.default_knobs().ef();
  c.default_nprobe = spec.default_knobs().nprobe();
  c.default_rerank = spec.default_knobs().rerank_candidates();
  c.default_target_recall = spec.default_knobs().target_recall();
  c.cache_bytes = spec.cache_bytes();
  return c;
}

v1::CollectionInfo ToProto(const CollectionInfo& info) {
  v1::CollectionInfo out;
  v1::CollectionSpec* spec = out.mutable_spec();
  const CollectionConfig& c = info.config;
  spec->set_name(c.name);
  spec->set_dim(c.dim);
  spec->set_metric(MetricToProto(c.metric));
  spec->set_dtype(c.dtype == storage::DType::kUint8 ? v1::UINT8 : v1::FLOAT32);
  v1::IndexSpec* is = spec->mutable_index();
  is->set_kind(c.index.kind == index::IndexKind::kHnswPq ? v1::HNSW_PQ : v1::IVF_HNSW_PQ);
  is->set_m(c.index.hnsw.M);
  is->set_ef_construction(c.index.hnsw.ef_construction);
  is->set_pq_m(c.index.pq.m);
  is->set_pq_nbits(c.index.pq.nbits);
  is->set_nlist(c.index.nlist);
  is->set_opq(c.index.pq.opq);
  is->set_compact_links(c.index.hnsw.compact_links);
  is->set_quantizer(c.index.pq.code == index::CodeKind::kRabitq ? v1::QUANTIZER_RABITQ
                                                                 : v1::QUANTIZER_PQ);
  spec->mutable_default_knobs()->set_ef(c.default_ef);
  spec->mutable_default_knobs()->set_nprobe(c.default_nprobe);
  spec->mutable_default_knobs()->set_rerank_candidates(c.default_rerank);
  spec->mutable_default_knobs()->set_target_recall(static_cast<float>(c.default_target_recall));
  spec->set_cache_bytes(c.cache_bytes);
  out.set_points(info.points);
  out.set_deleted_points(info.deleted_records);
  out.set_stored_records(info.stored_records);
  out.set_index_state(static_cast<v1::IndexState>(static_cast<int>(info.index_state) + 1));
  out.set_indexed_points(info.indexed_points);
  out.set_trained_points(info.trained_points);
  out.set_auto_retrains(info.auto_retrains);
  out.set_code_error_ratio(info.code_error_ratio);
  out.set_drift_retrains(info.drift_retrains);
  out.set_resident_bytes(info.resident_bytes);
  out.set_disk_bytes(info.disk_bytes);
  out.set_build_progress(info.build_progress);
  out.set_index_error(info.index_error);
  out.set_compaction_error(info.compaction_error);
  out.set_maintenance_failures(info.maintenance_failures);
  if (info.maintenance_failures > 0) {
    out.set_maintenance_retry_unix_ms(absl::ToUnixMillis(info.maintenance_retry_at));
  }
  for (const FieldIndexInfo& f : info.field_indexes) {
    v1::FieldIndexInfo* fi = out.add_field_indexes();
    fi->set_field(f.field);
    fi->set_type(FieldIndexTypeToProto(f.type));
    fi->set_ready(f.ready);
    fi->set_points(f.points);
    fi->set_bytes(f.bytes);
  }
  if (info.calibration != nullptr) {
    const Calibration& cal = *info.calibration;
    v1::Calibration* pc = out.mutable_calibration();
    pc->set_k(cal.k);
    pc->set_queries(cal.queries);
    pc->set_indexed_points(cal.indexed_points);
    pc->set_created_unix_ms(cal.created_unix_ms);
    for (const CalibrationPoint& p : cal.points) {
      v1::CalibrationPoint* pp = pc->add_points();
      pp->set_ef(p.ef);
      pp->set_nprobe(p.nprobe);
      pp->set_rerank_candidates(p.rerank_candidates);
      pp->set_recall(p.recall);
      pp->set_recall_lower(p.recall_lower);
      pp->set_mean_us(p.mean_us);
      pp->set_ssd_reads(p.ssd_reads);
      pp->set_work(p.work);
    }
  }
  out.set_calibration_current(info.calibration_current);
  out.set_calibration_error(info.calibration_error);
  out.set_default_target_recall(static_cast<float>(info.default_target_recall));
  return out;
}

namespace {

// A Get / Scroll answer's point.
void PointToProto(PointData p, v1::Point* out) {
  out->set_id(p.id);
  out->mutable_vector()->Assign(p.vector.begin(), p.vector.end());
  out->set_payload(std::move(p.payload));
  FieldsToProto(p.fields, out->mutable_fields());
}

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

}  // namespace

VectorSearchService::VectorSearchService(Database* db, Metrics* metrics, WorkerPool* pool,
                                         const ServiceLimits& limits, const Authenticator* auth)
    : db_(db), metrics_(metrics), pool_(pool), limits_(limits), auth_(auth) {}

void VectorSearchService::Record(const char* rpc, const absl::Status& status,
                                 double seconds) const {
  if (metrics_ != nullptr) metrics_->RecordRpc(rpc, status.code(), seconds);
}

template <typename Work>
grpc::ServerUnaryReactor* VectorSearchService::Run(grpc::CallbackServerContext* ctx,
                                                   const char* rpc, WorkClass cls,
                                                   uint64_t units, Work work) {
  auto record = [this, rpc](const absl::Status& st, double seconds) { Record(rpc, st, seconds); };
  if (absl::Status st = AuthorizeCall(auth_, *ctx, RoleFor(cls)); !st.ok()) {
    return FinishNow(st, record);
  }
  if (absl::Status st = ClusterRefuses(rpc); !st.ok()) return FinishNow(st, record);
  return RunUnaryOnPool(pool_, ctx, cls, units, std::move(record), std::move(work));
}

absl::Status VectorSearchService::ClusterRefuses(const char* rpc) const {
  if (cluster_.node.empty()) return absl::OkStatus();
  static constexpr std::string_view kRouted[] = {
      "CreateCollection", "DropCollection",   "Upsert",           "Delete",  "Import",
      "SetPayload",       "DeletePayload",    "CreateFieldIndex", "DeleteFieldIndex",
      "RestoreSnapshot"};
  for (std::string_view r : kRouted) {
    if (r == rpc) {
      return absl::FailedPreconditionError(absl::StrCat(
          "this zoomd is node ", cluster_.node, " of cluster ", cluster_.cluster,
          ": its collections are shard replicas written through their log; send ", rpc,
          " to a router (zoomd --role=router)"));
    }
  }
  return absl::OkStatus();
}

// ---- Collections ---------------------------------------------------------------

grpc::ServerUnaryReactor* VectorSearchService::CreateCollection(
    grpc::CallbackServerContext* ctx, const v1::CreateCollectionRequest* req,
    v1::CreateCollectionResponse* resp) {
  return Run(ctx, "CreateCollection", WorkClass::kAdmin, 1, [this, req, resp](const std::atomic<bool>*) {
    ZOOM_ASSIGN_OR_RETURN(CollectionConfig config, ConfigFromSpec(req->spec(), limits_));
    if (req->spec().shards() > 1 || req->spec().replicas() > 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shards ", req->spec().shards(), " and replicas ", req->spec().replicas(),
          " need a cluster: this zoomd is standalone; create the collection through a router "
          "(zoomd --role=router), or leave both 0"));
    }
    ZOOM_ASSIGN_OR_RETURN(auto c, db_->CreateCollection(std::move(config)));
    *resp->mutable_info() = ToProto(c->Info());
    RefreshCollectionMetrics();
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* VectorSearchService::DropCollection(
    grpc::CallbackServerContext* ctx, const v1::DropCollectionRequest* req,
    v1::DropCollectionResponse*) {
  return Run(ctx, "DropCollection", WorkClass::kAdmin, 1, [this, req](const std::atomic<bool>*) {
    ZOOM_RETURN_IF_ERROR(ValidateCollectionName(req->name()));
    ZOOM_RETURN_IF_ERROR(db_->DropCollection(req->name()));
    if (metrics_ != nullptr) metrics_->RemoveCollection(req->name());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* VectorSearchService::GetServerInfo(
    grpc::CallbackServerContext* ctx, const v1::GetServerInfoRequest*,
    v1::GetServerInfoResponse* resp) {
  return Run(ctx, "GetServerInfo", WorkClass::kRead, 1, [this, resp](const std::atomic<bool>*) {
    resp->set_version(version_);
    resp->set_simd_level(Database::SimdLevel());
    resp->set_started_unix_ms(started_unix_ms_);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* VectorSearchService::ListCollections(
    grpc::CallbackServerContext* ctx, const v1::ListCollectionsRequest*,
    v1::ListCollectionsResponse* resp) {
  return Run(ctx, "ListCollections", WorkClass::kRead, 1, [this, resp](const std::atomic<bool>*) {
    for (const auto& c : db_->ListCollections()) *resp->add_collections() = ToProto(c->Info());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* VectorSearchService::GetCollection(
    grpc::CallbackServerContext* ctx, const v1::GetCollectionRequest* req,
    v1::GetCollectionResponse* resp) {
  return Run(ctx, "GetCollection", WorkClass::kRead, 1, [this, req, resp](const std::atomic<bool>*) {
    ZOOM_ASSIGN_OR_RETURN(auto c, db_->GetCollection(req->name()));
    *resp->mutable_info() = ToProto(c->Info());
    return absl::OkStatus();
  });
}

void VectorSearchService::RefreshCollectionMetrics() const {
  if (metrics_ == nullptr) return;
  for (const auto& c : db_->ListCollections()) {
    const CollectionInfo info = c->Info();
    metrics_->SetCollection(c->name(), info.points, info.resident_bytes, info.disk_bytes,
                            info.build_progress, IndexStateName(info.index_state));
  }
}

// ---- Points ------------------------------------------------------------------

absl::Status PointsFromProto(const std::string& collection, uint32_t dim,
                             const google::protobuf::RepeatedPtrField<v1::Point>& points,
                             const ServiceLimits& limits, std::vector<PointRef>* refs,
                             std::vector<PayloadFields>* fields, std::vector<float>* converted) {
  if (points.empty()) return absl::InvalidArgumentError("the batch has no points");
  if (points.size() > static_cast<int>(limits.max_batch)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the batch has ", points.size(), " points; this server takes at most ",
        limits.max_batch, " per message (split it)"));
  }
  refs->clear();
  refs->reserve(points.size());
  fields->assign(points.size(), PayloadFields());  // outlive the refs' use
  size_t byte_points = 0;
  for (const v1::Point& p : points) byte_points += p.vector_bytes().empty() ? 0 : 1;
  converted->clear();
  converted->reserve(byte_points * dim);  // the refs point into it: never reallocated
  std::vector<float> one;
  for (int i = 0; i < points.size(); ++i) {
    const v1::Point& p = points[i];
    ZOOM_ASSIGN_OR_RETURN(
        absl::Span<const float> v,
        VectorFromProto(p.vector(), p.vector_bytes(), &one,
                        absl::StrCat("point ", p.id(), " (#", i, ")")));
    if (v.size() != dim) {
      return absl::InvalidArgumentError(absl::StrCat(
          "point ", p.id(), " (#", i, ") has ", v.size(), " dimensions",
          p.vector_bytes().empty() ? "" : " (vector_bytes)", "; collection '", collection,
          "' has ", dim));
    }
    const float* vector = v.data();
    if (!p.vector_bytes().empty()) {
      const size_t at = converted->size();
      converted->insert(converted->end(), v.begin(), v.end());
      vector = converted->data() + at;
    }
    // The opaque bytes and the typed fields (as sent) count together.
    uint64_t payload_bytes = p.payload().size();
    for (const auto& [name, value] : p.fields()) payload_bytes += name.size() + value.ByteSizeLong();
    if (payload_bytes > limits.max_payload_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "point ", p.id(), " has a payload of ", payload_bytes,
          " bytes (payload and fields); the limit is ", limits.max_payload_bytes));
    }
    const PayloadFields* point_fields = nullptr;
    if (!p.fields().empty()) {
      absl::StatusOr<PayloadFields> f = FieldsFromProto(p.fields());
      if (!f.ok()) {
        return absl::Status(f.status().code(), absl::StrCat("point ", p.id(), " (#", i, "): ",
                                                            f.status().message()));
      }
      (*fields)[i] = std::move(*f);
      point_fields = &(*fields)[i];
    }
    refs->push_back({p.id(), vector, p.payload(), point_fields});
  }
  return absl::OkStatus();
}

absl::Status VectorSearchService::ApplyPoints(
    const std::string& collection, const google::protobuf::RepeatedPtrField<v1::Point>& points,
    uint64_t* applied) const {
  if (points.empty()) return absl::InvalidArgumentError("the batch has no points");
  ZOOM_ASSIGN_OR_RETURN(auto c, db_->GetCollection(collection));
  std::vector<PointRef> refs;
  std::vector<PayloadFields> fields;
  std::vector<float> converted;
  ZOOM_RETURN_IF_ERROR(PointsFromProto(collection, c->config().dim, points, limits_, &refs,
                                       &fields, &converted));
  ZOOM_RETURN_IF_ERROR(c->Upsert(refs));
  *applied += refs.size();
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* VectorSearchService::Upsert(grpc::CallbackServerContext* ctx,
                                                      const v1::UpsertRequest* req,
                                                      v1::UpsertResponse* resp) {
  return Run(ctx, "Upsert", WorkClass::kWrite, 1 + req->points_size() / 100, [this, req, resp](const std::atomic<bool>*) {
    uint64_t n = 0;
    ZOOM_RETURN_IF_ERROR(ApplyPoints(req->collection(), req->points(), &n));
    resp->set_upserted(n);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* VectorSearchService::Delete(grpc::CallbackServerContext* ctx,
                                                      const v1::DeleteRequest* req,
                                                      v1::DeleteResponse* resp) {
  return Run(ctx, "Delete", WorkClass::kWrite, 1 + req->ids_size() / 1000, [this, req, resp](const std::atomic<bool>*) {
    if (req->has_filter() || (req->all() && req->ids().empty())) {
      if (!req->ids().empty()) {
        return absl::InvalidArgumentError(
            "give either ids or a filter to delete by, not both");
      }
      Filter filter;
      ZOOM_RETURN_IF_ERROR(FilterFromProto(req->filter(), &filter));
      ZOOM_ASSIGN_OR_RETURN(auto c, db_->GetCollection(req->collection()));
      ZOOM_ASSIGN_OR_RETURN(uint64_t n, c->DeleteByFilter(filter, req->all()));
      resp->set_deleted(n);
      return absl::OkStatus();
    }
    if (req->ids().empty()) return absl::InvalidArgumentError("no ids (or filter) to delete");
    ZOOM_RETURN_IF_ERROR(CheckRange("number of ids", req->ids_size(), limits_.max_ids));
    ZOOM_ASSIGN_OR_RETURN(auto c, db_->GetCollection(req->collection()));
    ZOOM_ASSIGN_OR_RETURN(uint64_t n, c->Delete(req->ids()));
    resp->set_deleted(n);
    return absl::OkStatus();
  });
}

absl::Status VectorSearchService::AnswerGet(const v1::GetRequest& req, v1::GetResponse* resp) const {
  if (req.ids().empty()) return absl::InvalidArgumentError("no ids to get");
  ZOOM_RETURN_IF_ERROR(CheckRange("number of ids", req.ids_size(), limits_.max_ids));
  ZOOM_ASSIGN_OR_RETURN(auto c, db_->GetCollection(req.collection()));
  std::vector<PointData> found;
  ZOOM_RETURN_IF_ERROR(c->Get(req.ids(), req.with_vectors(), req.with_payload(), &found,
                              limits_.max_response_bytes));
  for (PointData& p : found) PointToProto(std::move(p), resp->add_points());
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* VectorSearchService::SetPayload(grpc::CallbackServerContext* ctx,
                                                          const v1::SetPayloadRequest* req,
                                                          v1::SetPayloadResponse* resp) {
  return Run(ctx, "SetPayload", WorkClass::kWrite, 1 + req->ids_size() / 1000,
             [this, req, resp](const std::atomic<bool>*) {
    if (req->ids().empty()) return absl::InvalidArgumentError("no ids to set the payload of");
    ZOOM_RETURN_IF_ERROR(CheckRange("number of ids", req->ids_size(), limits_.max_ids));
    uint64_t bytes = 0;
    for (const auto& [name, value] : req->fields()) bytes += name.size() + value.ByteSizeLong();
    if (bytes > limits_.max_payload_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("the fields take ", bytes,
                                                     " bytes; the limit is ",
                                                     limits_.max_payload_bytes));
    }
    ZOOM_ASSIGN_OR_RETURN(PayloadFields fields, FieldsFromProto(req->fields()));
    ZOOM_ASSIGN_OR_RETURN(auto c, db_->GetCollection(req->collection()));
    ZOOM_ASSIGN_OR_RETURN(uint64_t n, c->SetPayload(req->ids(), fields, req->overwrite()));
    resp->set_updated(n);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* VectorSearchService::DeletePayload(grpc::CallbackServerContext* ctx,
                                                             const v1::DeletePayloadRequest* req,
                                                             v1::DeletePayloadResponse* resp) {
  return Run(ctx, "DeletePayload", WorkClass::kWrite, 1 + req->ids_size() / 1000,
             [this, req, resp](const std::atomic<bool>*) {
    if (req->ids().empty()) return absl::InvalidArgumentError("no ids to delete the payload of");
    ZOOM_RETURN_IF_ERROR(CheckRange("number of ids", req->ids_size(), limits_.max_ids));
    // A point has at most FieldLimits::max_fields fields: more keys can
    // only name nothing, and each is looked up in every point.
    ZOOM_RETURN_IF_ERROR(
        CheckRange("number of keys", req->keys_size(), FieldLimits().max_fields));
    ZOOM_ASSIGN_OR_RETURN(auto c, db_->GetCollection(req->collection()));
    const std::vector<std::string> keys(req->keys().begin(), req->keys().end());
    ZOOM_ASSIGN_OR_RETURN(uint64_t n, c->DeletePayload(req->ids(), keys));
    resp->set_updated(n);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* VectorSearchService::Get(grpc::CallbackServerContext* ctx,
                                                   const v1::GetRequest* req,
                                                   v1::GetResponse* resp) {
  return Run(ctx, "Get", WorkClass::kRead, 1 + req->ids_size() / 100,
             [this, req, resp](const std::atomic<bool>*) { return AnswerGet(*req, resp); });
}

grpc::ServerReadReactor<grpc::ByteBuffer>* VectorSearchService::Import(
    grpc::CallbackServerContext* ctx, grpc::ByteBuffer* resp) {
  ImportHooks hooks;
  hooks.pool = pool_;
  hooks.auth = auth_;
  hooks.precheck = [this] { return ClusterRefuses("Import"); };
  hooks.apply = [this](const std::string& collection, v1::ImportRequest* req,
                       uint64_t* imported) { return ApplyPoints(collection, req->points(), imported); };
  hooks.record = [this](const absl::Status& st, double s) { Record("Import", st, s); };
  return new ImportReactor(std::move(hooks), ctx, resp);
}

// ---- Search ------------------------------------------------------------------

CollectionSearchParams VectorSearchService::ParamsOf(const v1::SearchRequest& req,
                                                    absl::Time deadline,
                                                    const std::atomic<bool>* cancelled,
                                                    bool degrade) const {
  CollectionSearchParams p;
  p.engine.k = req.k();
  p.engine.ef = req.knobs().ef();
  p.engine.nprobe = req.knobs().nprobe();
  p.engine.rerank_candidates = req.knobs().rerank_candidates();
  p.engine.rerank_stop_sd = req.knobs().rerank_stop_sd();  // validated by the engine
  p.target_recall = req.knobs().target_recall();           // validated by the collection
  p.engine.preview_only = req.preview_only() || degrade;
  p.engine.exact = req.exact();
  p.engine.with_vectors = req.with_vectors();
  p.context.allow_partial = req.allow_partial();
  p.context.deadline = deadline;
  p.context.cancelled = cancelled;
  p.context.limits.max_k = limits_.max_k;
  p.context.limits.max_ef = limits_.max_ef;
  p.context.limits.max_nprobe = limits_.max_nprobe;
  p.context.limits.max_rerank = limits_.max_rerank;
  p.with_payload = req.with_payload();
  return p;
}

absl::Status VectorSearchService::FilterOf(const v1::SearchRequest& req, Filter* out) const {
  *out = Filter();
  if (!req.has_filter()) return absl::OkStatus();
  return FilterFromProto(req.filter(), out);
}

namespace {

// Whether two queries of a batch can share one pipelined engine batch.
bool SameShape(const v1::SearchRequest& a, const v1::SearchRequest& b) {
  return a.k() == b.k() && a.knobs().ef() == b.knobs().ef() &&
         a.knobs().nprobe() == b.knobs().nprobe() &&
         a.knobs().rerank_candidates() == b.knobs().rerank_candidates() &&
         a.knobs().rerank_stop_sd() == b.knobs().rerank_stop_sd() &&
         a.knobs().target_recall() == b.knobs().target_recall() &&
         a.preview_only() == b.preview_only() && a.exact() == b.exact() &&
         a.with_payload() == b.with_payload() && a.with_vectors() == b.with_vectors() &&
         a.allow_partial() == b.allow_partial() && a.vector_size() == b.vector_size() &&
         a.vector_bytes().size() == b.vector_bytes().size() &&
         a.has_filter() == b.has_filter() &&
         (!a.has_filter() || a.filter().SerializeAsString() == b.filter().SerializeAsString());
}

}  // namespace

void VectorSearchService::FillResponse(const Collection& c, const Filter* filter,
                                       QueryResult* result, bool degrade,
                                       v1::SearchResponse* resp, uint64_t* budget) const {
  resp->set_coverage(1.0f);  // every point of the collection is here
  for (Hit& h : result->hits) {
    v1::Hit* out = resp->add_hits();
    out->set_id(h.id);
    out->set_score(h.score);
    out->set_payload(std::move(h.payload));
    out->mutable_vector()->Assign(h.vector.begin(), h.vector.end());
    FieldsToProto(h.fields, out->mutable_fields());
    const uint64_t bytes =
        h.fields.empty() ? 16 + out->payload().size() + h.vector.size() * sizeof(float)
                         : out->ByteSizeLong();
    *budget -= std::min(*budget, bytes);
  }
  QueryStats& stats = result->stats;
  if (degrade) stats.degraded = true;
  v1::QueryStats* s = resp->mutable_stats();
  s->set_preview_us(static_cast<uint64_t>(stats.preview_us));
  s->set_fullview_us(static_cast<uint64_t>(stats.fullview_us));
  s->set_rerank_us(static_cast<uint64_t>(stats.rerank_us));
  s->set_ssd_reads(static_cast<uint32_t>(stats.reads));
  s->set_fullview_rounds(stats.fullview_rounds);
  s->set_bytes_read(stats.bytes_read);
  s->set_candidates(static_cast<uint32_t>(stats.candidates));
  s->set_distance_evals(static_cast<uint32_t>(stats.distance_evals));
  s->set_cache_hits(static_cast<uint32_t>(stats.cache_hits));
  s->set_degraded(stats.degraded);
  s->set_exact(stats.exact);
  if (stats.filter_strategy != FilterStrategy::kNone) {
    s->set_filter_strategy(FilterStrategyName(stats.filter_strategy));
    s->set_filter_matches(stats.filter_matches);
    s->set_filter_expansions(stats.filter_expansions);
  }
  s->set_filter_scan(stats.filter_scan);
  s->set_target_recall(stats.target_recall);
  s->set_calibrated_recall(stats.calibrated_recall);
  s->set_target_reached(stats.target_reached);
  if (stats.knob_ef != 0) {
    s->mutable_knobs()->set_ef(stats.knob_ef);
    s->mutable_knobs()->set_nprobe(stats.knob_nprobe);
    s->mutable_knobs()->set_rerank_candidates(stats.knob_rerank);
  }
  std::string warning = ScanWarning(stats.filter_scan, c, filter);
  if (stats.target_recall > 0 && !stats.target_reached && !stats.exact) {
    absl::StrAppend(
        &warning, warning.empty() ? "" : "; ",
        stats.knobs_calibrated
            ? absl::StrCat("no calibrated knobs reached recall ", stats.target_recall,
                           "; the highest-recall ones ran (see GetCollection's calibration)")
            : absl::StrCat("target_recall ", stats.target_recall,
                           ": the index has no calibration yet; the default knobs ran"));
  }
  s->set_warning(std::move(warning));
  if (metrics_ != nullptr) metrics_->RecordQuery(c.name(), stats);
}

absl::Status VectorSearchService::DoSearch(absl::Time deadline, const Collection& c,
                                           const v1::SearchRequest& req,
                                           const std::atomic<bool>* cancelled,
                                           v1::SearchResponse* resp, uint64_t* budget,
                                           bool degrade) const {
  ZOOM_RETURN_IF_ERROR(CheckClusterFields(req));
  if (req.consistency() == v1::SESSION && cluster_.wait_applied) {
    ZOOM_RETURN_IF_ERROR(cluster_.wait_applied(
        c.name(), req.after(), std::min(deadline, absl::Now() + cluster_.max_session_wait)));
  }
  CollectionSearchParams p = ParamsOf(req, deadline, cancelled, degrade);
  p.max_answer_bytes = *budget;
  Filter filter;
  ZOOM_RETURN_IF_ERROR(FilterOf(req, &filter));
  p.filter = &filter;
  QueryResult result;
  std::vector<float> converted;
  ZOOM_ASSIGN_OR_RETURN(absl::Span<const float> query,
                        VectorFromProto(req.vector(), req.vector_bytes(), &converted, "the query"));
  ZOOM_RETURN_IF_ERROR(c.Search(query, p, &result));
  FillResponse(c, &filter, &result, degrade, resp, budget);
  return absl::OkStatus();
}

absl::Status VectorSearchService::DoSearchBatch(absl::Time deadline, const Collection& c,
                                                const v1::SearchBatchRequest& req,
                                                const std::atomic<bool>* cancelled,
                                                v1::SearchBatchResponse* resp,
                                                uint64_t* budget, bool degrade) const {
  const int nq = req.queries_size();
  bool same = nq > 1;
  for (int i = 1; i < nq && same; ++i) same = SameShape(req.queries(i), req.queries(0));
  if (!same) {
    for (int i = 0; i < nq; ++i) {
      if (cancelled->load()) return absl::CancelledError("the call was cancelled");
      absl::Status st =
          DoSearch(deadline, c, req.queries(i), cancelled, resp->add_results(), budget, degrade);
      if (!st.ok()) {
        return absl::Status(st.code(), absl::StrCat("query #", i, ": ", st.message()));
      }
    }
    return absl::OkStatus();
  }
  const size_t qd = req.queries(0).vector_size() + req.queries(0).vector_bytes().size();
  std::vector<float> vectors(static_cast<size_t>(nq) * qd);
  std::vector<float> converted;
  for (int i = 0; i < nq; ++i) {
    const v1::SearchRequest& q = req.queries(i);
    absl::StatusOr<absl::Span<const float>> v =
        VectorFromProto(q.vector(), q.vector_bytes(), &converted, "the query");
    if (!v.ok()) {
      return absl::Status(v.status().code(), absl::StrCat("query #", i, ": ", v.status().message()));
    }
    std::copy(v->begin(), v->end(), vectors.begin() + static_cast<size_t>(i) * qd);
  }
  CollectionSearchParams p = ParamsOf(req.queries(0), deadline, cancelled, degrade);
  p.max_answer_bytes = *budget;
  Filter filter;
  ZOOM_RETURN_IF_ERROR(FilterOf(req.queries(0), &filter));
  p.filter = &filter;
  std::vector<QueryResult> results;
  ZOOM_RETURN_IF_ERROR(c.SearchBatch(vectors, nq, p, &results));
  for (int i = 0; i < nq; ++i) {
    FillResponse(c, &filter, &results[i], degrade, resp->add_results(), budget);
  }
  return absl::OkStatus();
}

absl::Status VectorSearchService::AnswerSearch(const v1::SearchRequest& req,
                                               v1::SearchResponse* resp) const {
  ZOOM_ASSIGN_OR_RETURN(auto c, db_->GetCollection(req.collection()));
  uint64_t budget = limits_.max_response_bytes;
  return DoSearch(absl::InfiniteFuture(), *c, req, nullptr, resp, &budget, false);
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
  // exact scan, and the collection has an index.
  //  - Load shedding with allow_partial: when the reads queued ahead would
  //    outlast the deadline, the preview runs here and the answer comes
  //    back `degraded`, instead of being refused.
  //  - An idle server and a preview-only search (WorkerPool::TryBeginInline:
  //    nothing queued, one inline run at a time): tens of µs, less than the
  //    hand-off to a worker and back costs (~300 µs at p50 on a 2-core VM).
  //    A search that reads the SSD stays on the workers: measured inline,
  //    50-read searches lost throughput at 2-4 callers (a gRPC thread waits
  //    on the disk), README "grpc".
  const bool ram_only =
      !req->exact() && !req->with_payload() && !req->with_vectors() && !req->has_filter();
  const bool shed = ram_only && req->allow_partial() && deadline != absl::InfiniteFuture() &&
                    pool_->EstimatedWait(WorkClass::kRead) > deadline - absl::Now();
  if (shed || (ram_only && req->preview_only())) {
    auto c = db_->GetCollection(req->collection());
    auto here = [&](bool degrade) {
      return RunUnaryInline(
          ctx, [this](const absl::Status& st, double s) { Record("Search", st, s); },
          [&](const std::atomic<bool>* cancelled) -> absl::Status {
            if (!degrade) ZOOM_RETURN_IF_ERROR(QueuedCallStatus(ctx, false));
            uint64_t budget = limits_.max_response_bytes;
            return DoSearch(deadline, **c, *req, cancelled, resp, &budget, degrade);
          });
    };
    if (c.ok() && (*c)->engine()->index() != nullptr) {
      if (shed) return here(/*degrade=*/true);
      if (pool_->TryBeginInline(WorkClass::kRead)) {
        grpc::ServerUnaryReactor* call = here(/*degrade=*/false);
        pool_->EndInline(WorkClass::kRead);
        return call;
      }
    }
  }
  return Run(ctx, "Search", WorkClass::kRead, 1,
             [this, deadline, req, resp](const std::atomic<bool>* cancelled) {
               ZOOM_ASSIGN_OR_RETURN(auto c, db_->GetCollection(req->collection()));
               uint64_t budget = limits_.max_response_bytes;
               return DoSearch(deadline, *c, *req, cancelled, resp, &budget, false);
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
  if (ram_only && pool_->EstimatedWait(WorkClass::kRead) > deadline - absl::Now()) {
    if (AuthorizeCall(auth_, *ctx, Role::kRead).ok()) {
      auto c = db_->GetCollection(req->collection());
      if (c.ok() && (*c)->engine()->index() != nullptr) {
        return RunUnaryInline(
            ctx, [this](const absl::Status& st, double s) { Record("SearchBatch", st, s); },
            [&](const std::atomic<bool>* cancelled) -> absl::Status {
              uint64_t budget = limits_.max_response_bytes;
              return DoSearchBatch(deadline, **c, *req, cancelled, resp, &budget,
                                   /*degrade=*/true);
            });
      }
    }
  }
  return Run(ctx, "SearchBatch", WorkClass::kRead, std::max(1, req->queries_size()),
             [this, deadline, req, resp](const std::atomic<bool>* cancelled) {
    if (req->queries().empty()) return absl::InvalidArgumentError("the batch has no queries");
    ZOOM_RETURN_IF_ERROR(CheckRange("number of queries", req->queries_size(), limits_.max_batch));
    ZOOM_ASSIGN_OR_RETURN(auto c, db_->GetCollection(req->collection()));
    // The answer's size, known before any search runs (payloads aside):
    // refused when it cannot fit one message, instead of being built first.
    uint64_t estimate = 0;
    // (k above the limit is refused by the query's validation.)
    for (const v1::SearchRequest& q : req->queries()) {
      const uint64_t k = std::min(q.k(), limits_.max_k);
      estimate += 32 + k * (16 + (q.with_vectors() ? c->config().dim * 4 + 8 : 0));
    }
    if (estimate > limits_.max_response_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the answer to ", req->queries_size(), " queries would take about ", estimate >> 20,
          " MiB, more than the ", limits_.max_response_bytes >> 20,
          " MiB this server sends in one message; split the batch, lower k, or leave out "
          "the vectors"));
    }
    uint64_t budget = limits_.max_response_bytes;
    return DoSearchBatch(deadline, *c, *req, cancelled, resp, &budget);
  });
}

grpc::ServerUnaryReactor* VectorSearchService::Count(grpc::CallbackServerContext* ctx,
                                                     const v1::CountRequest* req,
                                                     v1::CountResponse* resp) {
  return Run(ctx, "Count", WorkClass::kRead, 1, [this, req, resp](const std::atomic<bool>*) {
    Filter filter;
    if (req->has_filter()) ZOOM_RETURN_IF_ERROR(FilterFromProto(req->filter(), &filter));
    ZOOM_ASSIGN_OR_RETURN(auto c, db_->GetCollection(req->collection()));
    ZOOM_ASSIGN_OR_RETURN(Collection::FilterCount n, c->Count(&filter));
    resp->set_count(n.count);
    resp->set_filter_scan(n.scan);
    resp->set_warning(ScanWarning(n.scan, *c, &filter));
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* VectorSearchService::Scroll(grpc::CallbackServerContext* ctx,
                                                      const v1::ScrollRequest* req,
                                                      v1::ScrollResponse* resp) {
  return Run(ctx, "Scroll", WorkClass::kRead, 1 + req->limit() / 100,
             [this, req, resp](const std::atomic<bool>*) {
    const uint32_t limit = req->limit() == 0 ? 100 : req->limit();
    ZOOM_RETURN_IF_ERROR(CheckRange("limit", limit, 10000));
    Filter filter;
    if (req->has_filter()) ZOOM_RETURN_IF_ERROR(FilterFromProto(req->filter(), &filter));
    ZOOM_ASSIGN_OR_RETURN(auto c, db_->GetCollection(req->collection()));
    std::vector<PointData> found;
    std::optional<uint64_t> next;
    bool scan = false;
    ZOOM_RETURN_IF_ERROR(c->Scroll(&filter, req->offset(), limit, req->with_vectors(),
                                   req->with_payload(), &found, &next, &scan,
                                   limits_.max_response_bytes));
    for (PointData& p : found) PointToProto(std::move(p), resp->add_points());
    if (next.has_value()) resp->set_next_offset(*next);
    resp->set_filter_scan(scan);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* VectorSearchService::CreateFieldIndex(
    grpc::CallbackServerContext* ctx, const v1::CreateFieldIndexRequest* req,
    v1::CreateFieldIndexResponse* resp) {
  return Run(ctx, "CreateFieldIndex", WorkClass::kAdmin, 1,
             [this, req, resp](const std::atomic<bool>*) {
    ZOOM_ASSIGN_OR_RETURN(FieldIndexType type, FieldIndexTypeFromProto(req->type()));
    ZOOM_ASSIGN_OR_RETURN(auto c, db_->GetCollection(req->collection()));
    // With wait, the build runs on this (admin) worker.
    ZOOM_RETURN_IF_ERROR(c->CreateFieldIndex(req->field(), type, /*background=*/!req->wait()));
    *resp->mutable_info() = ToProto(c->Info());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* VectorSearchService::DeleteFieldIndex(
    grpc::CallbackServerContext* ctx, const v1::DeleteFieldIndexRequest* req,
    v1::DeleteFieldIndexResponse* resp) {
  return Run(ctx, "DeleteFieldIndex", WorkClass::kAdmin, 1,
             [this, req, resp](const std::atomic<bool>*) {
    ZOOM_ASSIGN_OR_RETURN(auto c, db_->GetCollection(req->collection()));
    ZOOM_RETURN_IF_ERROR(c->DeleteFieldIndex(req->field()));
    *resp->mutable_info() = ToProto(c->Info());
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
      [this, name = req->collection(), wait = req->wait(), after = req->after(),
       deadline = DeadlineOf(ctx), resp](std::shared_ptr<PendingReply> reply) {
        auto c = db_->GetCollection(name);
        if (!c.ok()) return reply->Complete(c.status());
        std::shared_ptr<Collection> col = *c;
        // A replica builds once it has applied what the router saw in the
        // log (`after`): not over a part of an import.
        if (!after.empty() && cluster_.wait_applied) {
          const absl::Time until = std::min(deadline, absl::Now() + absl::Minutes(10));
          if (absl::Status st = cluster_.wait_applied(name, after, until); !st.ok()) {
            return reply->Complete(st);
          }
        }
        // A build already running (e.g. the automatic one started during an
        // import) is the build asked for: report it, or wait for it.
        if (absl::Status st = col->StartOrJoinBuild(); !st.ok()) return reply->Complete(st);
        // A weak reference: a waiting call must not keep a dropped
        // collection (or one the database is closing) alive.
        std::weak_ptr<Collection> weak = col;
        auto answer = [this, reply, resp, weak](const absl::Status& st) {
          std::shared_ptr<Collection> live = weak.lock();
          if (live == nullptr) {
            return reply->Complete(absl::NotFoundError("the collection was dropped"));
          }
          reply->Complete(st, [this, resp, &live] {
            *resp->mutable_info() = ToProto(live->Info());
            RefreshCollectionMetrics();
          });
        };
        if (!wait) return answer(absl::OkStatus());
        col->WhenBuildDone(answer);
      });
}

grpc::ServerUnaryReactor* VectorSearchService::Compact(grpc::CallbackServerContext* ctx,
                                                       const v1::CompactRequest* req,
                                                       v1::CompactResponse* resp) {
  return Run(ctx, "Compact", WorkClass::kAdmin, 1, [this, req, resp](const std::atomic<bool>*) {
    ZOOM_ASSIGN_OR_RETURN(auto c, db_->GetCollection(req->collection()));
    ZOOM_RETURN_IF_ERROR(c->Compact());
    *resp->mutable_info() = ToProto(c->Info());
    RefreshCollectionMetrics();
    return absl::OkStatus();
  });
}

// ---- Snapshots -----------------------------------------------------------------

namespace {

v1::SnapshotInfo ToProto(const SnapshotInfo& i) {
  v1::SnapshotInfo out;
  out.set_collection(i.collection);
  out.set_name(i.name);
  out.set_size_bytes(i.bytes);
  out.set_created_unix_ms(i.created_unix_ms);
  out.set_points(i.points);
  out.set_records(i.records);
  out.set_sha256(i.sha256);
  return out;
}

// The archive in chunks of 1 MiB, read on the pool (never on gRPC's thread).
class DownloadReactor final : public grpc::ServerWriteReactor<v1::SnapshotChunk> {
 public:
  DownloadReactor(const VectorSearchService* service, grpc::CallbackServerContext* ctx,
                  const v1::DownloadSnapshotRequest& req)
      : service_(service), ctx_(ctx) {
    absl::Status st = AuthorizeCall(service_->auth(), *ctx, Role::kAdmin);
    if (st.ok()) {
      auto file = service_->db()->SnapshotFile(req.collection(), req.name());
      if (file.ok()) {
        info_ = ToProto(file->second);
        in_.open(file->first, std::ios::binary);
        if (!in_) st = absl::NotFoundError("the snapshot cannot be read");
      } else {
        st = file.status();
      }
    }
    if (!st.ok()) {
      Done(st);
      return;
    }
    Next();
  }
  void OnWriteDone(bool ok) override {
    if (!ok) {
      Done(absl::CancelledError("the client went away"));
      return;
    }
    Next();
  }
  void OnDone() override { delete this; }

 private:
  void Next() {
    // Chunks are read work (a long snapshot or restore holding the admin
    // workers does not stall a download).
    absl::Status admitted = service_->pool()->TrySubmit(WorkClass::kRead, 1, absl::InfiniteFuture(), [this] {
      chunk_.Clear();
      std::string* data = chunk_.mutable_data();
      data->resize(1 << 20);
      in_.read(data->data(), static_cast<std::streamsize>(data->size()));
      data->resize(static_cast<size_t>(in_.gcount()));
      if (data->empty()) {
        Done(in_.eof() ? absl::OkStatus() : absl::DataLossError("reading the snapshot failed"));
        return;
      }
      chunk_.set_offset(offset_);
      if (offset_ == 0) *chunk_.mutable_info() = info_;
      offset_ += data->size();
      StartWrite(&chunk_);
    });
    if (!admitted.ok()) Done(admitted);
  }
  void Done(const absl::Status& st) {
    service_->Record("DownloadSnapshot", st, absl::ToDoubleSeconds(absl::Now() - start_));
    Finish(ToGrpc(st));
  }
  const VectorSearchService* service_;
  grpc::CallbackServerContext* ctx_;
  std::ifstream in_;
  v1::SnapshotInfo info_;
  v1::SnapshotChunk chunk_;
  uint64_t offset_ = 0;
  absl::Time start_ = absl::Now();
};

// RestoreSnapshot: the first message names the target (and maybe a source
// on the server); an upload's bytes are written to a staging file as they
// come (each message on the pool, the next read after it: flow control),
// then the archive is verified and restored.
class RestoreReactor final : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  RestoreReactor(const VectorSearchService* service, grpc::CallbackServerContext* ctx,
                 grpc::ByteBuffer* resp)
      : service_(service), ctx_(ctx), resp_(resp) {
    if (absl::Status st = AuthorizeCall(service_->auth(), *ctx, Role::kAdmin); !st.ok()) {
      Done(st);
      return;
    }
    if (absl::Status st = service_->ClusterRefuses("RestoreSnapshot"); !st.ok()) {
      Done(st);
      return;
    }
    StartRead(&raw_);
  }
  ~RestoreReactor() override {
    if (!upload_path_.empty()) {
      std::error_code ec;
      std::filesystem::remove(upload_path_, ec);
    }
  }
  void OnReadDone(bool ok) override {
    if (!ok) {
      if (ctx_->IsCancelled()) return Done(absl::CancelledError("the restore was cancelled"));
      if (messages_ == 0) return Done(absl::InvalidArgumentError("no RestoreSnapshot message"));
      if (!source_path_.empty()) return Restore(source_path_);
      out_.close();
      if (!out_) return Done(absl::ResourceExhaustedError("the upload could not be written"));
      return Restore(upload_path_);
    }
    // Upload chunks are write work, admitted like Import messages.
    absl::Status admitted = service_->pool()->TrySubmit(
        WorkClass::kWrite, 1 + raw_.Length() / 40000, absl::InfiniteFuture(), [this] {
      v1::RestoreSnapshotRequest req;
      const grpc::Status parsed =
          grpc::SerializationTraits<v1::RestoreSnapshotRequest>::Deserialize(&raw_, &req);
      raw_.Clear();
      if (!parsed.ok()) {
        return Done(absl::InvalidArgumentError(absl::StrCat(
            "RestoreSnapshot message #", messages_,
            " could not be parsed as a zoom.v1.RestoreSnapshotRequest")));
      }
      if (messages_++ == 0) {
        target_ = req.collection();
        overwrite_ = req.overwrite();
        if (absl::Status st = ValidateCollectionName(target_); !st.ok()) return Done(st);
        if (!req.source().empty()) {
          if (!req.data().empty()) {
            return Done(absl::InvalidArgumentError("give a source or data, not both"));
          }
          auto path = service_->db()->SnapshotSource(req.source());
          if (!path.ok()) return Done(path.status());
          // Restored when the stream ends: a message after it is refused,
          // not ignored.
          source_path_ = *path;
          StartRead(&raw_);
          return;
        }
        upload_path_ = service_->db()->UploadPath();
        out_.open(upload_path_, std::ios::binary | std::ios::trunc);
        if (!out_) return Done(absl::InternalError("cannot stage the upload"));
      } else if (!source_path_.empty()) {
        return Done(absl::InvalidArgumentError(
            "a restore from a source on the server takes one message; send the archive's data "
            "in a stream without a source, or the source alone"));
      } else if (!req.collection().empty() || !req.source().empty()) {
        return Done(absl::InvalidArgumentError(
            "only the first RestoreSnapshot message names the collection and source"));
      }
      out_.write(req.data().data(), static_cast<std::streamsize>(req.data().size()));
      if (!out_) {
        return Done(absl::ResourceExhaustedError(
            absl::StrCat("the upload could not be written after ", uploaded_,
                         " bytes (disk full?)")));
      }
      uploaded_ += req.data().size();
      StartRead(&raw_);
    });
    if (!admitted.ok()) Done(admitted);
  }
  void OnDone() override { delete this; }

 private:
  void Restore(const std::string& path) {
    service_->pool()->Submit([this, path] { RestoreNow(path); });
  }
  void RestoreNow(const std::string& path) {
    auto c = service_->db()->RestoreSnapshot(path, target_, overwrite_);
    if (!c.ok()) return Done(c.status());
    v1::RestoreSnapshotResponse out;
    *out.mutable_info() = ToProto((*c)->Info());
    SerializeToByteBuffer(out, resp_);
    service_->RefreshCollectionMetrics();
    Done(absl::OkStatus());
  }
  void Done(const absl::Status& st) {
    service_->Record("RestoreSnapshot", st, absl::ToDoubleSeconds(absl::Now() - start_));
    Finish(ToGrpc(st));
  }

  const VectorSearchService* service_;
  grpc::CallbackServerContext* ctx_;
  grpc::ByteBuffer* resp_;
  grpc::ByteBuffer raw_;
  uint64_t messages_ = 0;
  uint64_t uploaded_ = 0;
  std::string target_;
  bool overwrite_ = false;
  std::string upload_path_;
  std::string source_path_;  // a restore from the server's snapshots, when the stream ends
  std::ofstream out_;
  absl::Time start_ = absl::Now();
};

}  // namespace

grpc::ServerUnaryReactor* VectorSearchService::CreateSnapshot(
    grpc::CallbackServerContext* ctx, const v1::CreateSnapshotRequest* req,
    v1::CreateSnapshotResponse* resp) {
  return Run(ctx, "CreateSnapshot", WorkClass::kAdmin, 1, [this, req, resp](const std::atomic<bool>*) {
    ZOOM_ASSIGN_OR_RETURN(SnapshotInfo info, db_->CreateSnapshot(req->collection()));
    *resp->mutable_snapshot() = ToProto(info);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* VectorSearchService::ListSnapshots(
    grpc::CallbackServerContext* ctx, const v1::ListSnapshotsRequest* req,
    v1::ListSnapshotsResponse* resp) {
  return Run(ctx, "ListSnapshots", WorkClass::kRead, 1, [this, req, resp](const std::atomic<bool>*) {
    ZOOM_ASSIGN_OR_RETURN(auto list, db_->ListSnapshots(req->collection()));
    for (const SnapshotInfo& i : list) *resp->add_snapshots() = ToProto(i);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* VectorSearchService::DeleteSnapshot(
    grpc::CallbackServerContext* ctx, const v1::DeleteSnapshotRequest* req,
    v1::DeleteSnapshotResponse*) {
  return Run(ctx, "DeleteSnapshot", WorkClass::kAdmin, 1, [this, req](const std::atomic<bool>*) {
    return db_->DeleteSnapshot(req->collection(), req->name());
  });
}

grpc::ServerWriteReactor<v1::SnapshotChunk>* VectorSearchService::DownloadSnapshot(
    grpc::CallbackServerContext* ctx, const v1::DownloadSnapshotRequest* req) {
  return new DownloadReactor(this, ctx, *req);
}

grpc::ServerReadReactor<grpc::ByteBuffer>* VectorSearchService::RestoreSnapshot(
    grpc::CallbackServerContext* ctx, grpc::ByteBuffer* resp) {
  return new RestoreReactor(this, ctx, resp);
}

}  // namespace zoom::server
