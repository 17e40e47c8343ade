// The collection half of convert.h: specs, configs, infos and snapshots,
// both ways.
#include "server/api/convert.h"

#include <memory>
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
  if (spec.default_knobs().band_confidence() != 0) {
    return absl::InvalidArgumentError(
        "default_knobs.band_confidence: not a collection default (yet); set it per request "
        "in SearchRequest.knobs");
  }
  ZOOM_RETURN_IF_ERROR(CheckRange("default ef", config.default_ef, limits.max_ef));
  ZOOM_RETURN_IF_ERROR(CheckRange("default nprobe", config.default_nprobe, limits.max_nprobe));
  ZOOM_RETURN_IF_ERROR(
      CheckRange("default rerank_candidates", config.default_rerank, limits.max_rerank));
  return config;
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
      pp->set_band_confidence(p.band_confidence);
      pp->set_certain_in(p.certain_in);
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

absl::StatusOr<CollectionDescription> FromProto(const v1::CollectionInfo& in) {
  CollectionDescription d;
  CollectionInfo& info = d.info;
  ZOOM_ASSIGN_OR_RETURN(info.config, server::FromProto(in.spec()));
  d.shards = in.spec().shards();
  d.replicas = in.spec().replicas();
  info.points = in.points();
  info.deleted_records = in.deleted_points();
  info.stored_records = in.stored_records();
  info.index_state = in.index_state() == v1::INDEX_STATE_UNSPECIFIED
                         ? IndexState::kNone
                         : static_cast<IndexState>(static_cast<int>(in.index_state()) - 1);
  info.indexed_points = in.indexed_points();
  info.trained_points = in.trained_points();
  info.auto_retrains = in.auto_retrains();
  info.code_error_ratio = in.code_error_ratio();
  info.drift_retrains = in.drift_retrains();
  info.resident_bytes = in.resident_bytes();
  info.disk_bytes = in.disk_bytes();
  info.build_progress = in.build_progress();
  info.index_error = in.index_error();
  info.compaction_error = in.compaction_error();
  info.maintenance_failures = in.maintenance_failures();
  if (in.maintenance_failures() > 0) {
    info.maintenance_retry_at = absl::FromUnixMillis(in.maintenance_retry_unix_ms());
  }
  for (const v1::FieldIndexInfo& f : in.field_indexes()) {
    FieldIndexInfo fi;
    fi.field = f.field();
    ZOOM_ASSIGN_OR_RETURN(fi.type, FieldIndexTypeFromProto(f.type()));
    fi.ready = f.ready();
    fi.points = f.points();
    fi.bytes = f.bytes();
    info.field_indexes.push_back(std::move(fi));
  }
  if (in.has_calibration()) {
    auto cal = std::make_shared<Calibration>();
    const v1::Calibration& pc = in.calibration();
    cal->k = pc.k();
    cal->queries = pc.queries();
    cal->indexed_points = pc.indexed_points();
    cal->created_unix_ms = pc.created_unix_ms();
    for (const v1::CalibrationPoint& p : pc.points()) {
      CalibrationPoint cp;
      cp.ef = p.ef();
      cp.nprobe = p.nprobe();
      cp.rerank_candidates = p.rerank_candidates();
      cp.recall = p.recall();
      cp.recall_lower = p.recall_lower();
      cp.mean_us = p.mean_us();
      cp.ssd_reads = p.ssd_reads();
      cp.work = p.work();
      cp.band_confidence = p.band_confidence();
      cp.certain_in = p.certain_in();
      cal->points.push_back(cp);
    }
    info.calibration = std::move(cal);
  }
  info.calibration_current = in.calibration_current();
  info.calibration_error = in.calibration_error();
  info.default_target_recall = in.default_target_recall();
  return d;
}

}  // namespace api
}  // namespace zoom::server
