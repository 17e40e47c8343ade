// File: server/engine/collection_config.h
//
// What a collection is, fixed at its creation: name, dimension, metric,
// dtype, the preview's index spec and the default search knobs; with its
// text codec (the catalog's config entry) and its validation.
#ifndef ZOOM_SERVER_ENGINE_COLLECTION_CONFIG_H_
#define ZOOM_SERVER_ENGINE_COLLECTION_CONFIG_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/metric.h"
#include "index/vector_index.h"
#include "storage/vector_store.h"

namespace zoom::server {

struct CollectionConfig {
  std::string name;
  uint32_t dim = 0;
  Metric metric = Metric::kL2;
  storage::DType dtype = storage::DType::kFloat32;
  // The preview built by BuildIndex (metric and dim are copied in).
  // pq.m 0 = automatic (ApplyDefaults).
  index::IndexSpec index = [] {
    index::IndexSpec spec;
    spec.pq.m = 0;
    return spec;
  }();
  // Search knobs used when a request leaves them 0.
  uint32_t default_ef = 64;
  uint32_t default_nprobe = 16;
  uint32_t default_rerank = 100;
  // The recall@10 a search aims at when it names neither knobs nor a
  // target (0: the server's, CollectionOptions::default_target_recall): the
  // knobs are then the cheapest the index's calibration found reaching it
  // (calibration.h). Beats the default knobs above. Without it, default
  // knobs other than the built-in 64 / 16 / 100 beat the server's target.
  double default_target_recall = 0;
  bool DefaultKnobsGiven() const {
    return default_ef != 64 || default_nprobe != 16 || default_rerank != 100;
  }
  // The target a search naming none aims at: its own default_target_recall,
  // else none when it gave knobs of its own, else the server's.
  double DefaultTarget(double server_default) const {
    if (default_target_recall > 0) return default_target_recall;
    return DefaultKnobsGiven() ? 0 : server_default;
  }
  // DRAM cache of hot full vectors (0: the server's default,
  // CollectionOptions::engine.cache_bytes).
  uint64_t cache_bytes = 0;

  // Fills zero index fields with defaults (pq.m about dim / 2, ...).
  void ApplyDefaults();
  // InvalidArgument naming the field to fix.
  absl::Status Validate(uint32_t max_dim, uint64_t max_cache_bytes) const;
  // A versioned "key=value" text; Decode reads any earlier version.
  // FailedPrecondition for a newer version, DataLoss for a malformed text.
  std::string Encode() const;
  static absl::StatusOr<CollectionConfig> Decode(std::string_view text);
  // The index spec a build uses: metric and dim of the collection.
  index::IndexSpec BuildSpec(int build_threads) const;
  // The fewest live points an index build needs (256, or nlist if larger).
  uint64_t MinIndexPoints() const;
};

// The fewest points any index trains on.
inline constexpr uint64_t kMinIndexPoints = 256;

// A name (of a collection or a decoder model): 1..64 of [A-Za-z0-9_-].
// InvalidArgument otherwise, never echoing more than a bounded prefix.
absl::Status ValidateCollectionName(std::string_view name);

}  // namespace zoom::server

#endif  // ZOOM_SERVER_ENGINE_COLLECTION_CONFIG_H_
