#include "server/engine/query.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/vector_limits.h"

namespace zoom::server {
namespace {

absl::Status CheckKnob(const char* name, uint32_t value, uint32_t max) {
  if (value == 0) return absl::InvalidArgumentError(absl::StrCat(name, " must be at least 1"));
  if (value > max) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " ", value, " is above this server's limit of ", max));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateQuery(Metric metric, uint32_t dim, absl::Span<const float> query,
                           const SearchParams& params, const SearchLimits& limits) {
  ZOOM_RETURN_IF_ERROR(CheckKnob("k", params.k, limits.max_k));
  ZOOM_RETURN_IF_ERROR(CheckKnob("ef", params.ef, limits.max_ef));
  ZOOM_RETURN_IF_ERROR(CheckKnob("nprobe", params.nprobe, limits.max_nprobe));
  if (params.rerank_candidates > limits.max_rerank) {
    return absl::InvalidArgumentError(absl::StrCat("rerank_candidates ", params.rerank_candidates,
                                                   " is above this server's limit of ",
                                                   limits.max_rerank));
  }
  // NaN fails both comparisons.
  if (!(params.rerank_stop_sd >= 0 && params.rerank_stop_sd <= 100)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rerank_stop_sd ", params.rerank_stop_sd,
        " is not in [0, 100] (0: read every candidate; 2 is a good start)"));
  }
  if (!(params.band_confidence >= 0 && params.band_confidence <= 100)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "band_confidence ", params.band_confidence,
        " is not in [0, 100] (0: read every candidate; 2 is a good start)"));
  }
  if (params.band_confidence > 0 && params.rerank_stop_sd > 0) {
    return absl::InvalidArgumentError(
        "band_confidence and rerank_stop_sd are two ways to read fewer candidates: set one");
  }
  if (query.empty()) return absl::InvalidArgumentError("the query vector is empty");
  if (query.size() != dim) {
    return absl::InvalidArgumentError(absl::StrCat("query has ", query.size(),
                                                   " dimensions; the collection has ", dim));
  }
  if (absl::Status st = CheckVectorMagnitude(metric, query.data(), dim); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("query: ", st.message()));
  }
  return absl::OkStatus();
}

}  // namespace zoom::server
