#include "server/api/convert.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/status_macros.h"

namespace zoom::server {

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

// ---- points -------------------------------------------------------------------

const char* WriteConcernName(WriteConcern c) {
  switch (c) {
    case WriteConcern::kDefault:
      return "default";
    case WriteConcern::kLog:
      return "log";
    case WriteConcern::kMajority:
      return "majority";
    case WriteConcern::kAll:
      return "all";
  }
  return "?";
}

absl::StatusOr<WriteConcern> ConcernFromProto(int value) {
  switch (value) {
    case v1::WRITE_CONCERN_DEFAULT:
      return WriteConcern::kDefault;
    case v1::WRITE_CONCERN_LOG:
      return WriteConcern::kLog;
    case v1::WRITE_CONCERN_MAJORITY:
      return WriteConcern::kMajority;
    case v1::WRITE_CONCERN_ALL:
      return WriteConcern::kAll;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "write_concern ", value, " is not one of WRITE_CONCERN_DEFAULT (0), LOG (1), "
          "MAJORITY (2), ALL (3)"));
  }
}

v1::WriteConcern ConcernToProto(WriteConcern c) {
  switch (c) {
    case WriteConcern::kLog:
      return v1::WRITE_CONCERN_LOG;
    case WriteConcern::kAll:
      return v1::WRITE_CONCERN_ALL;
    case WriteConcern::kDefault:
    case WriteConcern::kMajority:
      break;
  }
  return v1::WRITE_CONCERN_MAJORITY;
}

absl::StatusOr<UpsertRequest> UpsertFromProto(
    const std::string& collection, const google::protobuf::RepeatedPtrField<v1::Point>& points,
    int concern, const ServiceLimits& limits) {
  ZOOM_ASSIGN_OR_RETURN(WriteConcern wc, ConcernFromProto(concern));
  if (points.empty()) return absl::InvalidArgumentError("the batch has no points");
  if (points.size() > static_cast<int>(limits.max_batch)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the batch has ", points.size(), " points; this server takes at most ",
        limits.max_batch, " per message (split it)"));
  }
  UpsertRequest out;
  out.collection = collection;
  out.concern = wc;
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
  ZOOM_ASSIGN_OR_RETURN(out.concern, ConcernFromProto(req.write_concern()));
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
  ZOOM_ASSIGN_OR_RETURN(out.concern, ConcernFromProto(req.write_concern()));
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
  ZOOM_ASSIGN_OR_RETURN(out.concern, ConcernFromProto(req.write_concern()));
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
  q.knobs.band_confidence = req.knobs().band_confidence();  // checked by the engine
  q.exact_scores = req.exact_scores();
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

absl::Status CheckAnswerSize(const std::vector<Query>& queries, uint32_t dim,
                             const ServiceLimits& limits) {
  uint64_t estimate = 0;
  // (k above the limit is refused by the query's validation.)
  for (const Query& q : queries) {
    const uint64_t k = std::min(q.k, limits.max_k);
    estimate += 32 + k * (16 + (q.with_vectors ? uint64_t{dim} * 4 + 8 : 0));
  }
  if (estimate <= limits.max_response_bytes) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "the answer to ", queries.size(), " queries would take about ", estimate >> 20,
      " MiB, more than the ", limits.max_response_bytes >> 20,
      " MiB this server sends in one message; split the batch, lower k, or leave out the "
      "vectors"));
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
    out->set_estimated(h.estimated);
  }
  const QueryStats& stats = answer.stats;
  v1::QueryStats* s = resp->mutable_stats();
  s->set_preview_us(static_cast<uint64_t>(stats.preview_us));
  s->set_fullview_us(static_cast<uint64_t>(stats.fullview_us));
  s->set_rerank_us(static_cast<uint64_t>(stats.rerank_us));
  s->set_ssd_reads(static_cast<uint32_t>(stats.reads));
  s->set_fullview_rounds(stats.fullview_rounds);
  s->set_certain_in(static_cast<uint32_t>(stats.certain_in));
  s->set_certain_out(static_cast<uint32_t>(stats.certain_out));
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
    s->mutable_knobs()->set_band_confidence(stats.knob_band);
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

// ---- what a router sends its nodes, and reads back ----------------------------------

void ToProto(const Query& q, const std::string& local, v1::SearchRequest* out) {
  out->set_collection(local);
  out->mutable_vector()->Assign(q.vector.begin(), q.vector.end());
  out->set_k(q.k);
  v1::SearchKnobs* k = out->mutable_knobs();
  k->set_ef(q.knobs.ef);
  k->set_nprobe(q.knobs.nprobe);
  k->set_rerank_candidates(q.knobs.rerank_candidates);
  k->set_rerank_stop_sd(static_cast<float>(q.knobs.rerank_stop_sd));
  k->set_target_recall(static_cast<float>(q.knobs.target_recall));
  k->set_band_confidence(static_cast<float>(q.knobs.band_confidence));
  out->set_exact_scores(q.exact_scores);
  out->set_preview_only(q.preview_only || q.degrade);
  out->set_exact(q.exact);
  out->set_with_payload(q.with_payload);
  out->set_with_vectors(q.with_vectors);
  out->set_allow_partial(q.allow_partial);
  if (q.filter != nullptr) FilterToProto(*q.filter, out->mutable_filter());
  out->set_consistency(q.consistency == Consistency::kSession ? v1::SESSION : v1::EVENTUAL);
  TokensToProto(q.after, out->mutable_after());
}

v1::CountRequest ToProto(const CountRequest& r, const std::string& local) {
  v1::CountRequest out;
  out.set_collection(local);
  if (r.filter != nullptr) FilterToProto(*r.filter, out.mutable_filter());
  return out;
}

v1::ScrollRequest ToProto(const ScrollRequest& r, const std::string& local) {
  v1::ScrollRequest out;
  out.set_collection(local);
  if (r.filter != nullptr) FilterToProto(*r.filter, out.mutable_filter());
  out.set_offset(r.offset);
  out.set_limit(r.limit);
  out.set_with_payload(r.with_payload);
  out.set_with_vectors(r.with_vectors);
  return out;
}

FilterStrategy FilterStrategyFromName(const std::string& name) {
  for (FilterStrategy s : {FilterStrategy::kExact, FilterStrategy::kFilteredPreview,
                           FilterStrategy::kPostFilter, FilterStrategy::kMatchScan}) {
    if (name == FilterStrategyName(s)) return s;
  }
  return FilterStrategy::kNone;
}

absl::StatusOr<SearchAnswer> FromProto(v1::SearchResponse resp) {
  SearchAnswer a;
  a.coverage = resp.coverage();
  a.degraded = resp.degraded();
  a.hits.reserve(resp.hits_size());
  for (v1::Hit& h : *resp.mutable_hits()) {
    Hit out;
    out.id = h.id();
    out.score = h.score();
    out.payload = std::move(*h.mutable_payload());
    out.vector.assign(h.vector().begin(), h.vector().end());
    out.estimated = h.estimated();
    if (!h.fields().empty()) {
      ZOOM_ASSIGN_OR_RETURN(out.fields, FieldsFromProto(h.fields()));
    }
    a.hits.push_back(std::move(out));
  }
  const v1::QueryStats& s = resp.stats();
  QueryStats& st = a.stats;
  st.preview_us = static_cast<double>(s.preview_us());
  st.fullview_us = static_cast<double>(s.fullview_us());
  st.rerank_us = static_cast<double>(s.rerank_us());
  st.reads = s.ssd_reads();
  st.fullview_rounds = s.fullview_rounds();
  st.certain_in = s.certain_in();
  st.certain_out = s.certain_out();
  st.bytes_read = s.bytes_read();
  st.candidates = s.candidates();
  st.distance_evals = s.distance_evals();
  st.cache_hits = s.cache_hits();
  st.degraded = s.degraded();
  st.exact = s.exact();
  st.filter_strategy = FilterStrategyFromName(s.filter_strategy());
  st.filter_matches = s.filter_matches();
  st.filter_expansions = s.filter_expansions();
  st.filter_scan = s.filter_scan();
  st.target_recall = s.target_recall();
  st.calibrated_recall = s.calibrated_recall();
  st.target_reached = s.target_reached();
  st.knob_ef = s.knobs().ef();
  st.knob_nprobe = s.knobs().nprobe();
  st.knob_rerank = s.knobs().rerank_candidates();
  st.knob_band = s.knobs().band_confidence();
  a.warning = s.warning();
  return a;
}


absl::StatusOr<PointData> FromProto(v1::Point p) {
  PointData out;
  out.id = p.id();
  out.vector.assign(p.vector().begin(), p.vector().end());
  out.payload = std::move(*p.mutable_payload());
  if (!p.fields().empty()) {
    ZOOM_ASSIGN_OR_RETURN(out.fields, FieldsFromProto(p.fields()));
  }
  return out;
}

absl::StatusOr<ScrollAnswer> FromProto(v1::ScrollResponse resp) {
  ScrollAnswer a;
  a.points.reserve(resp.points_size());
  for (v1::Point& p : *resp.mutable_points()) {
    ZOOM_ASSIGN_OR_RETURN(PointData d, FromProto(std::move(p)));
    a.points.push_back(std::move(d));
  }
  if (resp.has_next_offset()) a.next_offset = resp.next_offset();
  a.filter_scan = resp.filter_scan();
  return a;
}

std::vector<WriteToken> TokensFromProto(
    const google::protobuf::RepeatedPtrField<v1::WriteToken>& tokens) {
  std::vector<WriteToken> out;
  out.reserve(tokens.size());
  for (const v1::WriteToken& t : tokens) {
    out.push_back({t.shard(), t.sequence(), {t.acknowledged_by().begin(), t.acknowledged_by().end()}});
  }
  return out;
}

void TokensToProto(const std::vector<WriteToken>& tokens,
                   google::protobuf::RepeatedPtrField<v1::WriteToken>* out) {
  for (const WriteToken& t : tokens) {
    v1::WriteToken* p = out->Add();
    p->set_shard(t.shard);
    p->set_sequence(t.sequence);
    for (const std::string& n : t.acknowledged_by) p->add_acknowledged_by(n);
  }
}

}  // namespace api
}  // namespace zoom::server
