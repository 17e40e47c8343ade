#include "server/api/convert.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/status_macros.h"

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

absl::Status CheckRange(const char* name, uint64_t value, uint64_t max) {
  if (value > max) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " ", value, " is above this server's limit of ", max));
  }
  return absl::OkStatus();
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

namespace api {
namespace {

std::vector<uint64_t> Ids(const google::protobuf::RepeatedField<uint64_t>& ids) {
  return std::vector<uint64_t>(ids.begin(), ids.end());
}

// A request's filter, when it has one (null otherwise).
absl::Status OptionalFilter(bool has, const v1::Filter& proto,
                            std::shared_ptr<const Filter>* out) {
  out->reset();
  if (!has) return absl::OkStatus();
  auto f = std::make_shared<Filter>();
  ZOOM_RETURN_IF_ERROR(FilterFromProto(proto, f.get()));
  *out = std::move(f);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CreateCollectionRequest> FromProto(const v1::CreateCollectionRequest& req,
                                                  const ServiceLimits& limits) {
  CreateCollectionRequest out;
  ZOOM_ASSIGN_OR_RETURN(out.config, ConfigFromSpec(req.spec(), limits));
  out.shards = req.spec().shards();
  out.replicas = req.spec().replicas();
  return out;
}

v1::CollectionInfo ToProto(const CollectionDescription& d) {
  v1::CollectionInfo out = server::ToProto(d.info);
  if (d.shards > 0) out.mutable_spec()->set_shards(d.shards);
  if (d.replicas > 0) out.mutable_spec()->set_replicas(d.replicas);
  return out;
}

// ---- points -------------------------------------------------------------------

absl::StatusOr<UpsertRequest> UpsertFromProto(
    const std::string& collection, const google::protobuf::RepeatedPtrField<v1::Point>& points,
    const ServiceLimits& limits) {
  if (points.empty()) return absl::InvalidArgumentError("the batch has no points");
  if (points.size() > static_cast<int>(limits.max_batch)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the batch has ", points.size(), " points; this server takes at most ",
        limits.max_batch, " per message (split it)"));
  }
  UpsertRequest out;
  out.collection = collection;
  out.points.resize(points.size());
  std::vector<float> scratch;
  for (int i = 0; i < points.size(); ++i) {
    const v1::Point& p = points[i];
    NewPoint& n = out.points[i];
    n.id = p.id();
    ZOOM_ASSIGN_OR_RETURN(
        absl::Span<const float> v,
        VectorFromProto(p.vector(), p.vector_bytes(), &scratch,
                        absl::StrCat("point ", p.id(), " (#", i, ")")));
    n.vector.assign(v.begin(), v.end());
    n.vector_from_bytes = !p.vector_bytes().empty();
    // The opaque bytes and the typed fields (as sent) count together.
    uint64_t payload_bytes = p.payload().size();
    for (const auto& [name, value] : p.fields()) payload_bytes += name.size() + value.ByteSizeLong();
    if (payload_bytes > limits.max_payload_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "point ", p.id(), " has a payload of ", payload_bytes,
          " bytes (payload and fields); the limit is ", limits.max_payload_bytes));
    }
    n.payload = p.payload();
    if (!p.fields().empty()) {
      absl::StatusOr<PayloadFields> f = FieldsFromProto(p.fields());
      if (!f.ok()) {
        return absl::Status(f.status().code(), absl::StrCat("point ", p.id(), " (#", i, "): ",
                                                            f.status().message()));
      }
      n.fields = std::move(*f);
      n.has_fields = true;
    }
  }
  return out;
}

absl::Status PointRefsOf(const CollectionConfig& config, const std::vector<NewPoint>& points,
                         std::vector<PointRef>* refs) {
  refs->clear();
  refs->reserve(points.size());
  for (size_t i = 0; i < points.size(); ++i) {
    const NewPoint& p = points[i];
    if (p.vector.size() != config.dim) {
      return absl::InvalidArgumentError(absl::StrCat(
          "point ", p.id, " (#", i, ") has ", p.vector.size(), " dimensions",
          p.vector_from_bytes ? " (vector_bytes)" : "", "; collection '", config.name, "' has ",
          config.dim));
    }
    refs->push_back({p.id, p.vector.data(), p.payload, p.has_fields ? &p.fields : nullptr});
  }
  return absl::OkStatus();
}

absl::StatusOr<DeleteRequest> FromProto(const v1::DeleteRequest& req,
                                        const ServiceLimits& limits) {
  DeleteRequest out;
  out.collection = req.collection();
  out.all = req.all();
  if (req.has_filter() || (req.all() && req.ids().empty())) {
    if (!req.ids().empty()) {
      return absl::InvalidArgumentError("give either ids or a filter to delete by, not both");
    }
    auto f = std::make_shared<Filter>();
    ZOOM_RETURN_IF_ERROR(FilterFromProto(req.filter(), f.get()));
    out.filter = std::move(f);
    return out;
  }
  if (req.ids().empty()) return absl::InvalidArgumentError("no ids (or filter) to delete");
  ZOOM_RETURN_IF_ERROR(CheckRange("number of ids", req.ids_size(), limits.max_ids));
  out.ids = Ids(req.ids());
  return out;
}

absl::StatusOr<GetRequest> FromProto(const v1::GetRequest& req, const ServiceLimits& limits) {
  if (req.ids().empty()) return absl::InvalidArgumentError("no ids to get");
  ZOOM_RETURN_IF_ERROR(CheckRange("number of ids", req.ids_size(), limits.max_ids));
  GetRequest out;
  out.collection = req.collection();
  out.ids = Ids(req.ids());
  out.with_vectors = req.with_vectors();
  out.with_payload = req.with_payload();
  return out;
}

absl::StatusOr<SetPayloadRequest> FromProto(const v1::SetPayloadRequest& req,
                                            const ServiceLimits& limits) {
  if (req.ids().empty()) return absl::InvalidArgumentError("no ids to set the payload of");
  ZOOM_RETURN_IF_ERROR(CheckRange("number of ids", req.ids_size(), limits.max_ids));
  uint64_t bytes = 0;
  for (const auto& [name, value] : req.fields()) bytes += name.size() + value.ByteSizeLong();
  if (bytes > limits.max_payload_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("the fields take ", bytes,
                                                   " bytes; the limit is ",
                                                   limits.max_payload_bytes));
  }
  SetPayloadRequest out;
  ZOOM_ASSIGN_OR_RETURN(out.fields, FieldsFromProto(req.fields()));
  out.collection = req.collection();
  out.ids = Ids(req.ids());
  out.overwrite = req.overwrite();
  return out;
}

absl::StatusOr<DeletePayloadRequest> FromProto(const v1::DeletePayloadRequest& req,
                                               const ServiceLimits& limits) {
  if (req.ids().empty()) return absl::InvalidArgumentError("no ids to delete the payload of");
  ZOOM_RETURN_IF_ERROR(CheckRange("number of ids", req.ids_size(), limits.max_ids));
  // A point has at most FieldLimits::max_fields fields: more keys can only
  // name nothing, and each is looked up in every point.
  ZOOM_RETURN_IF_ERROR(CheckRange("number of keys", req.keys_size(), FieldLimits().max_fields));
  DeletePayloadRequest out;
  out.collection = req.collection();
  out.ids = Ids(req.ids());
  out.keys.assign(req.keys().begin(), req.keys().end());
  return out;
}

void ToProto(PointData p, v1::Point* out) {
  out->set_id(p.id);
  out->mutable_vector()->Assign(p.vector.begin(), p.vector.end());
  out->set_payload(std::move(p.payload));
  FieldsToProto(p.fields, out->mutable_fields());
}

// ---- reads --------------------------------------------------------------------

absl::StatusOr<Query> QueryFromProto(const v1::SearchRequest& req) {
  ZOOM_RETURN_IF_ERROR(CheckClusterFields(req));
  Query q;
  ZOOM_RETURN_IF_ERROR(OptionalFilter(req.has_filter(), req.filter(), &q.filter));
  std::vector<float> scratch;
  ZOOM_ASSIGN_OR_RETURN(absl::Span<const float> v,
                        VectorFromProto(req.vector(), req.vector_bytes(), &scratch, "the query"));
  q.vector.assign(v.begin(), v.end());
  q.k = req.k();
  q.knobs.ef = req.knobs().ef();
  q.knobs.nprobe = req.knobs().nprobe();
  q.knobs.rerank_candidates = req.knobs().rerank_candidates();
  q.knobs.rerank_stop_sd = req.knobs().rerank_stop_sd();  // checked by the engine
  q.knobs.target_recall = req.knobs().target_recall();    // checked by the collection
  q.preview_only = req.preview_only();
  q.exact = req.exact();
  q.with_payload = req.with_payload();
  q.with_vectors = req.with_vectors();
  q.allow_partial = req.allow_partial();
  q.min_coverage = req.min_coverage();
  q.consistency =
      req.consistency() == v1::SESSION ? Consistency::kSession : Consistency::kEventual;
  q.after = TokensFromProto(req.after());
  return q;
}

absl::StatusOr<SearchRequest> FromProto(const v1::SearchRequest& req, const ServiceLimits&) {
  SearchRequest out;
  out.collection = req.collection();
  ZOOM_ASSIGN_OR_RETURN(out.query, QueryFromProto(req));
  return out;
}

absl::StatusOr<SearchBatchRequest> FromProto(const v1::SearchBatchRequest& req,
                                             const ServiceLimits& limits) {
  if (req.queries().empty()) return absl::InvalidArgumentError("the batch has no queries");
  ZOOM_RETURN_IF_ERROR(CheckRange("number of queries", req.queries_size(), limits.max_batch));
  SearchBatchRequest out;
  out.collection = req.collection();
  out.queries.reserve(req.queries_size());
  std::string first_filter;  // query 0's, serialized
  for (int i = 0; i < req.queries_size(); ++i) {
    const v1::SearchRequest& r = req.queries(i);
    absl::StatusOr<Query> q = QueryFromProto(r);
    if (!q.ok()) {
      return absl::Status(q.status().code(),
                          absl::StrCat("query #", i, ": ", q.status().message()));
    }
    // Queries that send the same filter share it (one engine batch can run
    // them: the backend compares filters by identity).
    if (r.has_filter()) {
      std::string bytes = r.filter().SerializeAsString();
      if (i == 0) {
        first_filter = std::move(bytes);
      } else if (req.queries(0).has_filter() && bytes == first_filter) {
        q->filter = out.queries[0].filter;
      }
    }
    out.queries.push_back(std::move(*q));
  }
  return out;
}

uint64_t AnswerBytes(const Hit& h) {
  uint64_t bytes = 16 + h.payload.size() + h.vector.size() * sizeof(float);
  if (!h.fields.empty()) {
    ProtoFields fields;
    FieldsToProto(h.fields, &fields);
    for (const auto& [name, value] : fields) bytes += name.size() + value.ByteSizeLong() + 6;
  }
  return bytes;
}

void ToProto(SearchAnswer answer, v1::SearchResponse* resp) {
  resp->set_coverage(answer.coverage);
  resp->set_degraded(answer.degraded);
  for (Hit& h : answer.hits) {
    v1::Hit* out = resp->add_hits();
    out->set_id(h.id);
    out->set_score(h.score);
    out->set_payload(std::move(h.payload));
    out->mutable_vector()->Assign(h.vector.begin(), h.vector.end());
    FieldsToProto(h.fields, out->mutable_fields());
  }
  const QueryStats& stats = answer.stats;
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
  s->set_warning(std::move(answer.warning));
}

absl::StatusOr<CountRequest> FromProto(const v1::CountRequest& req, const ServiceLimits&) {
  CountRequest out;
  out.collection = req.collection();
  ZOOM_RETURN_IF_ERROR(OptionalFilter(req.has_filter(), req.filter(), &out.filter));
  return out;
}

absl::StatusOr<ScrollRequest> FromProto(const v1::ScrollRequest& req, const ServiceLimits&) {
  ScrollRequest out;
  out.limit = req.limit() == 0 ? 100 : req.limit();
  ZOOM_RETURN_IF_ERROR(CheckRange("limit", out.limit, 10000));
  ZOOM_RETURN_IF_ERROR(OptionalFilter(req.has_filter(), req.filter(), &out.filter));
  out.collection = req.collection();
  out.offset = req.offset();
  out.with_payload = req.with_payload();
  out.with_vectors = req.with_vectors();
  return out;
}

void ToProto(ScrollAnswer answer, v1::ScrollResponse* out) {
  for (PointData& p : answer.points) ToProto(std::move(p), out->add_points());
  if (answer.next_offset.has_value()) out->set_next_offset(*answer.next_offset);
  out->set_filter_scan(answer.filter_scan);
}

// ---- indexes ------------------------------------------------------------------

absl::StatusOr<CreateFieldIndexRequest> FromProto(const v1::CreateFieldIndexRequest& req) {
  CreateFieldIndexRequest out;
  ZOOM_ASSIGN_OR_RETURN(out.type, FieldIndexTypeFromProto(req.type()));
  out.collection = req.collection();
  out.field = req.field();
  out.wait = req.wait();
  return out;
}

BuildIndexRequest FromProto(const v1::BuildIndexRequest& req) {
  BuildIndexRequest out;
  out.collection = req.collection();
  out.wait = req.wait();
  out.after = TokensFromProto(req.after());
  return out;
}

std::vector<WriteToken> TokensFromProto(
    const google::protobuf::RepeatedPtrField<v1::WriteToken>& tokens) {
  std::vector<WriteToken> out;
  out.reserve(tokens.size());
  for (const v1::WriteToken& t : tokens) out.push_back({t.shard(), t.sequence()});
  return out;
}

void TokensToProto(const std::vector<WriteToken>& tokens,
                   google::protobuf::RepeatedPtrField<v1::WriteToken>* out) {
  for (const WriteToken& t : tokens) {
    v1::WriteToken* p = out->Add();
    p->set_shard(t.shard);
    p->set_sequence(t.sequence);
  }
}

}  // namespace api
}  // namespace zoom::server
