// Collection: reads. The segment serving now answers them (segment.h);
// CollectionKnobs (collection_knobs.h) chooses a search's knobs (its target
// and calibration).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/engine/collection.h"

namespace zoom::server {

absl::Status Collection::Get(absl::Span<const uint64_t> ids, bool with_vectors,
                             bool with_payload, std::vector<PointData>* out,
                             uint64_t max_answer_bytes) const {
  return core_.Current()->Get(ids, with_vectors, with_payload, out, max_answer_bytes);
}

absl::Status Collection::Scroll(const Filter* filter, uint64_t offset, uint32_t limit,
                                bool with_vectors, bool with_payload, std::vector<PointData>* out,
                                std::optional<uint64_t>* next, bool* scan,
                                uint64_t max_answer_bytes) const {
  return core_.Current()->Scroll(filter, offset, limit, with_vectors, with_payload, out, next,
                                 scan, max_answer_bytes);
}

absl::StatusOr<FilterCount> Collection::Count(const Filter* filter) const {
  return core_.Current()->Count(filter);
}

std::string Collection::UnindexedField(const Filter& filter) const {
  return core_.Current()->UnindexedField(filter);
}

// ---- CollectionKnobs -------------------------------------------------------------

CollectionKnobs::CollectionKnobs(const CollectionConfig& config, const CollectionOptions& options)
    : config_(config), options_(options) {
  calibration_.store(std::make_shared<const CalibrationState>());
}

absl::Status CollectionKnobs::EngineParams(const Segment& seg, const CollectionSearchParams& params,
                                           SearchParams* out, QueryStats* stats) const {
  SearchParams& p = *out;
  p = params.engine;
  const double asked = params.target_recall;
  if (!(asked >= 0 && asked <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "target_recall ", asked, " must be in (0, 1] (0: the collection's default)"));
  }
  // The target: the request's; else (for the knobs it leaves 0) the
  // collection's default.
  const double target = asked > 0 ? asked : DefaultTarget();
  std::shared_ptr<const Calibration> cal;
  if (target > 0 && !p.exact && (p.ef == 0 || p.nprobe == 0 || p.rerank_candidates == 0)) {
    cal = CurrentCalibration();
  }
  if (cal != nullptr && seg.index() != nullptr) {
    const Calibration::Choice choice = cal->Choose(target);
    const CalibrationPoint& c = choice.point;
    const bool all = p.ef == 0 && p.nprobe == 0 && p.rerank_candidates == 0;
    uint32_t rerank = c.rerank_candidates;
    if (p.k > cal->k) {
      rerank = static_cast<uint32_t>(std::min<uint64_t>(
          params.context.limits.max_rerank, (uint64_t{rerank} * p.k + cal->k - 1) / cal->k));
    }
    if (p.rerank_candidates == 0) p.rerank_candidates = rerank;
    if (p.nprobe == 0) {
      p.nprobe = c.nprobe != 0 ? std::min(c.nprobe, params.context.limits.max_nprobe)
                               : config_.default_nprobe;
    }
    if (p.ef == 0) {
      p.ef = c.ef;
      if (index::TraitsOf(config_.index).ef_at_least_k) {
        p.ef = std::max(p.ef, p.rerank_candidates);
      }
      p.ef = std::min(p.ef, params.context.limits.max_ef);
    }
    // Knobs cut by this server's limits are not the curve's any more.
    const bool cut = p.ef < c.ef || (c.nprobe != 0 && p.nprobe < c.nprobe);
    // The band the curve measured with these knobs: only with all of them
    // (its recall is theirs), and not beside a request's own way of
    // reading fewer (band_confidence, rerank_stop_sd).
    if (all && !cut && p.band_confidence == 0 && p.rerank_stop_sd == 0) {
      p.band_confidence = c.band_confidence;
    }
    stats->target_recall = static_cast<float>(target);
    stats->target_reached = choice.reached;
    stats->knobs_calibrated = true;
    // The curve's recall holds for its own knobs only.
    if (all && !cut) stats->calibrated_recall = static_cast<float>(c.recall);
    if (cut) stats->target_reached = false;
  } else if (asked > 0) {
    stats->target_recall = static_cast<float>(asked);
  }
  if (p.ef == 0) p.ef = config_.default_ef;
  if (p.nprobe == 0) p.nprobe = config_.default_nprobe;
  if (p.rerank_candidates == 0) p.rerank_candidates = config_.default_rerank;
  // Brute force asked for, or no index yet: no knob runs, none is reported
  // (they were reported as if they had).
  if (!p.exact && seg.index() != nullptr) {
    stats->knob_ef = p.ef;
    stats->knob_nprobe = p.nprobe;
    stats->knob_rerank = p.rerank_candidates;
    stats->knob_band = static_cast<float>(p.band_confidence);
  }
  return absl::OkStatus();
}

double CollectionKnobs::DefaultTarget() const {
  return config_.DefaultTarget(options_.default_target_recall);
}

std::shared_ptr<const Calibration> CollectionKnobs::CurrentCalibration() const {
  return calibration_.load()->curve;
}

void CollectionKnobs::SetCalibration(std::shared_ptr<const Calibration> calibration,
                                     bool current) {
  std::shared_ptr<const CalibrationState> now = calibration_.load();
  std::shared_ptr<const CalibrationState> next;
  do {
    auto s = std::make_shared<CalibrationState>(*now);
    s->curve = calibration;
    s->current = current;
    if (current) s->error.clear();
    next = std::move(s);
  } while (!calibration_.compare_exchange_weak(now, next));
}

void CollectionKnobs::SetCalibrationError(std::string error) {
  std::shared_ptr<const CalibrationState> now = calibration_.load();
  std::shared_ptr<const CalibrationState> next;
  do {
    auto s = std::make_shared<CalibrationState>(*now);
    s->error = error;
    next = std::move(s);
  } while (!calibration_.compare_exchange_weak(now, next));
}

namespace {
// The knob choice (EngineParams) into a query's stats.
void KeepChoice(const QueryStats& chosen, QueryStats* stats) {
  stats->target_recall = chosen.target_recall;
  stats->calibrated_recall = chosen.calibrated_recall;
  stats->target_reached = chosen.target_reached;
  stats->knobs_calibrated = chosen.knobs_calibrated;
  stats->knob_ef = chosen.knob_ef;
  stats->knob_nprobe = chosen.knob_nprobe;
  stats->knob_rerank = chosen.knob_rerank;
  stats->knob_band = chosen.knob_band;
}
}  // namespace


absl::Status Collection::Search(absl::Span<const float> query,
                                const CollectionSearchParams& params,
                                QueryResult* result) const {
  result->hits.clear();
  std::shared_ptr<Segment> seg = core_.Current();
  SearchParams knobs;
  QueryStats chosen;
  ZOOM_RETURN_IF_ERROR(knobs_.EngineParams(*seg, params, &knobs, &chosen));
  ZOOM_RETURN_IF_ERROR(seg->Search(query, knobs, params, result));
  KeepChoice(chosen, &result->stats);
  return absl::OkStatus();
}

absl::Status Collection::SearchBatch(absl::Span<const float> queries, size_t nq,
                                     const CollectionSearchParams& params,
                                     std::vector<QueryResult>* results) const {
  std::shared_ptr<Segment> seg = core_.Current();
  SearchParams knobs;
  QueryStats chosen;
  ZOOM_RETURN_IF_ERROR(knobs_.EngineParams(*seg, params, &knobs, &chosen));
  ZOOM_RETURN_IF_ERROR(seg->Search(queries, nq, knobs, params, results));
  for (QueryResult& r : *results) KeepChoice(chosen, &r.stats);
  return absl::OkStatus();
}

}  // namespace zoom::server
