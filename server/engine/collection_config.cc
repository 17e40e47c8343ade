#include "server/engine/collection_config.h"

#include <algorithm>
#include <cctype>

#include "absl/strings/str_cat.h"
#include "common/echo.h"
#include "common/status_macros.h"
#include "server/engine/key_value_text.h"

namespace zoom::server {
namespace {

constexpr uint32_t kConfigVersion = 1;

}  // namespace

absl::Status ValidateCollectionName(std::string_view name) {
  if (name.empty() || name.size() > 64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "collection name must be 1..64 characters of [A-Za-z0-9_-], got ",
        name.empty() ? std::string("an empty one") : absl::StrCat("'", EchoForMessage(name), "'")));
  }
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) {
      return absl::InvalidArgumentError(absl::StrCat(
          "collection name '", EchoForMessage(name), "' has the character ",
          DescribeCharAt(name, i), "; use only [A-Za-z0-9_-]"));
    }
  }
  return absl::OkStatus();
}

void CollectionConfig::ApplyDefaults() {
  index.metric = metric;
  index.dim = dim;
  if (index.pq.code == index::CodeKind::kRabitq) {
    // One 4-bit sub-code a dimension (product_quantizer.h).
    if (index.pq.m == 0) index.pq.m = dim;
    if (index.pq.nbits == 0) index.pq.nbits = 4;
  }
  if (index.pq.m == 0) {
    // About half a byte per dimension: ~8x smaller than float32.
    index.pq.m = std::max<uint32_t>(1, std::min<uint32_t>(dim, (dim + 1) / 2));
  }
  if (index.pq.nbits == 0) index.pq.nbits = 8;
  if (index.hnsw.M == 0) index.hnsw.M = 16;
  if (index.hnsw.ef_construction == 0) index.hnsw.ef_construction = 200;
  if (default_ef == 0) default_ef = 64;
  if (default_nprobe == 0) default_nprobe = 16;
  if (default_rerank == 0) default_rerank = 100;
}

absl::Status CollectionConfig::Validate(uint32_t max_dim, uint64_t max_cache_bytes) const {
  ZOOM_RETURN_IF_ERROR(ValidateCollectionName(name));
  if (dim == 0) return absl::InvalidArgumentError("dim must be at least 1");
  if (dim > max_dim) {
    return absl::InvalidArgumentError(
        absl::StrCat("dim ", dim, " is above this server's limit of ", max_dim, " (--max_dim)"));
  }
  if (cache_bytes > max_cache_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("cache_bytes ", cache_bytes,
                                                   " is above this server's limit of ",
                                                   max_cache_bytes, " (--max_cache_bytes)"));
  }
  if (metric == Metric::kCosine && dtype == storage::DType::kUint8) {
    // Cosine vectors are stored normalised, which uint8 cannot hold.
    return absl::InvalidArgumentError(
        "metric cosine needs dtype float32 (vectors are stored normalised)");
  }
  if (index.pq.m > dim) {
    return absl::InvalidArgumentError(
        absl::StrCat("pq_m ", index.pq.m, " is above dim ", dim, "; use 1..", dim));
  }
  if (index.hnsw.M < 2 || index.hnsw.M > 256) {
    return absl::InvalidArgumentError(absl::StrCat("M ", index.hnsw.M, " must be 2..256"));
  }
  if (index.hnsw.ef_construction < 1 || index.hnsw.ef_construction > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("ef_construction ", index.hnsw.ef_construction, " must be 1..4096"));
  }
  if (!(default_target_recall >= 0 && default_target_recall <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "default target_recall ", default_target_recall, " must be in (0, 1], or 0 for the server's"));
  }
  if (index.nlist > (1u << 20)) {
    return absl::InvalidArgumentError(absl::StrCat("nlist ", index.nlist, " must be <= 2^20"));
  }
  // The rest (pq_nbits and what it allows) is the index's own rule.
  return index.Validate();
}

std::string CollectionConfig::Encode() const {
  std::string out = absl::StrCat(
      "version=", kConfigVersion, "\nname=", name, "\ndim=", dim,
      "\nmetric=", MetricName(metric), "\ndtype=", storage::DTypeName(dtype),
      "\nindex_kind=", index::IndexKindName(index.kind),
      "\nhnsw_m=", index.hnsw.M,
      "\nef_construction=", index.hnsw.ef_construction, "\npq_m=", index.pq.m,
      "\npq_nbits=", index.pq.nbits, "\nopq=", index.pq.opq ? 1 : 0,
      "\nnlist=", index.nlist,
      "\ncompact_links=", index.hnsw.compact_links ? 1 : 0, "\nef=", default_ef,
      "\nnprobe=", default_nprobe, "\nrerank=", default_rerank,
      "\ncache_bytes=", cache_bytes, "\n");
  // Written only when set (configs read alike by a zoomd before it).
  if (default_target_recall > 0) absl::StrAppend(&out, "target_recall=", default_target_recall, "\n");
  if (index.pq.code != index::CodeKind::kPq) {
    absl::StrAppend(&out, "pq_code=", index::CodeKindName(index.pq.code), "\n");
  }
  return out;
}

absl::StatusOr<CollectionConfig> CollectionConfig::Decode(std::string_view text) {
  ZOOM_ASSIGN_OR_RETURN(KeyValueText kv, KeyValueText::Parse(text, "collection config"));
  uint32_t version = 0;
  ZOOM_RETURN_IF_ERROR(kv.Number("version", &version));
  if (version == 0 || version > kConfigVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("collection config version ", version, " is not readable by this zoomd"));
  }
  CollectionConfig c;
  c.name = kv.String("name");
  ZOOM_RETURN_IF_ERROR(kv.Number("dim", &c.dim));
  ZOOM_ASSIGN_OR_RETURN(c.metric, ParseMetric(kv.String("metric")));
  ZOOM_ASSIGN_OR_RETURN(c.dtype, storage::ParseDType(kv.String("dtype")));
  ZOOM_ASSIGN_OR_RETURN(c.index.kind, index::ParseIndexKind(kv.String("index_kind")));
  ZOOM_RETURN_IF_ERROR(kv.Number("hnsw_m", &c.index.hnsw.M));
  ZOOM_RETURN_IF_ERROR(kv.Number("ef_construction", &c.index.hnsw.ef_construction));
  ZOOM_RETURN_IF_ERROR(kv.Number("pq_m", &c.index.pq.m));
  ZOOM_RETURN_IF_ERROR(kv.Number("pq_nbits", &c.index.pq.nbits));
  uint32_t opq = 0;
  ZOOM_RETURN_IF_ERROR(kv.Number("opq", &opq));
  c.index.pq.opq = opq != 0;
  if (const std::string code = kv.String("pq_code"); !code.empty()) {  // absent: pq
    absl::StatusOr<index::CodeKind> kind = index::ParseCodeKind(code);
    if (!kind.ok()) return absl::DataLossError(absl::StrCat("collection config: ", kind.status().message()));
    c.index.pq.code = *kind;
  }
  ZOOM_RETURN_IF_ERROR(kv.Number("nlist", &c.index.nlist));
  uint32_t compact_links = 0;  // absent in configs written before it existed
  ZOOM_RETURN_IF_ERROR(kv.Number("compact_links", &compact_links));
  c.index.hnsw.compact_links = compact_links != 0;
  ZOOM_RETURN_IF_ERROR(kv.Number("ef", &c.default_ef));
  ZOOM_RETURN_IF_ERROR(kv.Number("nprobe", &c.default_nprobe));
  ZOOM_RETURN_IF_ERROR(kv.Number("rerank", &c.default_rerank));
  ZOOM_RETURN_IF_ERROR(kv.Number("cache_bytes", &c.cache_bytes));  // absent before it existed
  ZOOM_RETURN_IF_ERROR(kv.Number("target_recall", &c.default_target_recall));  // likewise
  if (!(c.default_target_recall >= 0 && c.default_target_recall <= 1)) {
    return absl::DataLossError("collection config: target_recall is not in [0, 1]");
  }
  c.index.metric = c.metric;
  c.index.dim = c.dim;
  return c;
}

index::IndexSpec CollectionConfig::BuildSpec(int build_threads) const {
  index::IndexSpec spec = index;
  spec.metric = metric;
  spec.dim = dim;
  spec.build_threads = build_threads;
  return spec;
}

uint64_t CollectionConfig::MinIndexPoints() const {
  uint64_t min = kMinIndexPoints;
  min = std::max<uint64_t>(min, index::TraitsOf(index).min_train_points);
  return min;
}

}  // namespace zoom::server
