// File: server/engine/collection_knobs.h
//
// CollectionKnobs: a collection's recall curve (calibration.h) and the
// knobs a search's target gets from it (EngineParams). Owns the curve,
// whether it was measured on the serving index, and why the last
// measurement failed (one atomic shared_ptr: every search reads it without
// a lock); reads the config and options (the core's) and nothing else.
// Written by CollectionMaintenance (a measured curve, a failure, a new
// index making the curve stale) and by Collection::Open (the stored one).
//
// Apart from the maintenance (where issue 46's plan put it) because the
// read path needs the curve and nothing else of the maintenance: a search
// depends on this small part only, never on the builds' state.
//
// Implemented in collection_read.cc, beside the reads that use it.
//
// Thread safety: every method is safe from many threads.
#ifndef ZOOM_SERVER_ENGINE_COLLECTION_KNOBS_H_
#define ZOOM_SERVER_ENGINE_COLLECTION_KNOBS_H_

#include <atomic>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "common/query_stats.h"
#include "server/engine/calibration.h"
#include "server/engine/collection_config.h"
#include "server/engine/collection_types.h"
#include "server/engine/query.h"
#include "server/engine/segment.h"

namespace zoom::server {

class CollectionKnobs {
 public:
  // The recall curve the knobs of a target come from, whether it was
  // measured on the serving index, and why the last measurement failed.
  struct CalibrationState {
    std::shared_ptr<const Calibration> curve;  // null: none yet
    bool current = false;
    std::string error;  // "" when the last one did not fail
  };

  // `config` and `options` outlive it (the collection's core holds them).
  CollectionKnobs(const CollectionConfig& config, const CollectionOptions& options);
  CollectionKnobs(const CollectionKnobs&) = delete;
  CollectionKnobs& operator=(const CollectionKnobs&) = delete;

  // The engine's knobs of a search: for knobs left 0 the calibrated ones
  // of the target, else the collection's defaults (see
  // CollectionSearchParams::target_recall); the choice into *stats.
  // InvalidArgument for a bad target.
  absl::Status EngineParams(const Segment& seg, const CollectionSearchParams& params,
                            SearchParams* out, QueryStats* stats) const;
  // The target of a search that names none (CollectionInfo's
  // default_target_recall).
  double DefaultTarget() const;
  std::shared_ptr<const Calibration> CurrentCalibration() const;
  // All of it at once (Info, the maintenance's "is it current").
  std::shared_ptr<const CalibrationState> state() const { return calibration_.load(); }
  // Installs a curve (current: measured on the serving index); a current
  // one clears the error.
  void SetCalibration(std::shared_ptr<const Calibration> calibration, bool current);
  void SetCalibrationError(std::string error);

 private:
  const CollectionConfig& config_;
  const CollectionOptions& options_;
  std::atomic<std::shared_ptr<const CalibrationState>> calibration_;
};

}  // namespace zoom::server

#endif  // ZOOM_SERVER_ENGINE_COLLECTION_KNOBS_H_
