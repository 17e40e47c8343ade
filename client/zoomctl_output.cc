// zoomctl's output (zoomctl_output.h).
#include "client/zoomctl_output.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "google/protobuf/util/json_util.h"

namespace zoom::client {

int UsageError(absl::string_view message) {
  absl::FPrintF(stderr, "zoomctl: %s\nRun 'zoomctl --help' for usage.\n",
                message);
  return kExitUsage;
}

int Fail(const absl::Status& status) {
  absl::FPrintF(stderr, "error: %s: %s\n",
                absl::StatusCodeToString(status.code()), status.message());
  return kExitError;
}


// Prints `message` as one line of JSON (proto3 JSON mapping, field names as
// in the .proto, zero fields included).
int PrintJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string out;
  auto status =
      google::protobuf::util::MessageToJsonString(message, &out, options);
  if (!status.ok()) {
    return Fail(absl::InternalError(absl::StrCat(
        "cannot print the response as JSON: ", std::string(status.message()))));
  }
  absl::PrintF("%s\n", out);
  return kExitOk;
}

std::string HumanBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B",   "KiB", "MiB",
                                           "GiB", "TiB", "PiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 5) {
    value /= 1024;
    ++unit;
  }
  if (unit == 0) return absl::StrCat(bytes, " B");
  return absl::StrFormat("%.1f %s", value, kUnits[unit]);
}

std::string FormatVector(const google::protobuf::RepeatedField<float>& v) {
  std::string out = "[";
  for (int i = 0; i < v.size(); ++i) {
    if (i > 0) out += ", ";
    absl::StrAppendFormat(&out, "%g", v[i]);
  }
  out += "]";
  return out;
}

// The calibration's Pareto front (no cheaper point has as high a recall
// lower bound), cheapest first; '*' marks what the default target picks
// (the full grid: --json).
void PrintCalibration(const v1::CollectionInfo& info) {
  if (!info.calibration_error().empty()) {
    absl::PrintF("calibration:    FAILED: %s\n", info.calibration_error());
  }
  if (!info.has_calibration() || info.calibration().points().empty()) return;
  const v1::Calibration& cal = info.calibration();
  absl::PrintF("calibration:    recall@%d of %d stored points as queries, over %d indexed, %s%s\n",
               cal.k(), cal.queries(), cal.indexed_points(),
               absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", absl::FromUnixMillis(cal.created_unix_ms()),
                                absl::UTCTimeZone()),
               info.calibration_current() ? "" : " (an earlier index's; the current one is "
                                                 "measured in the background)");
  std::vector<const v1::CalibrationPoint*> points;
  for (const v1::CalibrationPoint& p : cal.points()) points.push_back(&p);
  // The server's order: by counted work (by time in a curve without it).
  bool counted = !points.empty();
  for (const auto* p : points) counted = counted && p->work() > 0;
  const auto cost = [counted](const v1::CalibrationPoint* p) {
    return counted ? p->work() : p->mean_us();
  };
  std::sort(points.begin(), points.end(), [&](const auto* a, const auto* b) {
    return cost(a) < cost(b) || (cost(a) == cost(b) && a->recall_lower() > b->recall_lower());
  });
  // What the default target picks: the cheapest whose lower bound reaches it.
  const double target = info.default_target_recall();
  const v1::CalibrationPoint* pick = nullptr;
  for (const auto* p : points) {
    if (target > 0 && p->recall_lower() + 1e-12 >= target) {
      pick = p;
      break;
    }
  }
  absl::PrintF("  %8s %8s %9s %7s %9s %6s %6s %7s %5s\n", "recall", "lower", "mean_us", "reads",
               "work", "ef", "nprobe", "rerank", "band");
  double best = -1;
  for (const auto* p : points) {
    if (p->recall_lower() <= best) continue;
    best = p->recall_lower();
    absl::PrintF("%s %8.4f %8.4f %9.1f %7.1f %9.0f %6d %6d %7d %5s\n", p == pick ? "*" : " ",
                 p->recall(), p->recall_lower(), p->mean_us(), p->ssd_reads(), p->work(), p->ef(),
                 p->nprobe(), p->rerank_candidates(),
                 p->band_confidence() > 0 ? absl::StrCat(p->band_confidence()) : "-");
  }
}

void PrintInfo(const v1::CollectionInfo& info) {
  const v1::CollectionSpec& spec = info.spec();
  const v1::IndexSpec& index = spec.index();
  const v1::SearchKnobs& knobs = spec.default_knobs();
  absl::PrintF("name:           %s\n", spec.name());
  absl::PrintF("dim:            %d\n", spec.dim());
  absl::PrintF("metric:         %s\n",
               EnumName<v1::Metric>(spec.metric(), v1::Metric_Name));
  absl::PrintF("dtype:          %s\n",
               EnumName<v1::DType>(spec.dtype(), v1::DType_Name));
  absl::PrintF(
      "index:          %s m=%d ef_construction=%d quantizer=%s pq_m=%d pq_nbits=%d "
      "nlist=%d opq=%s compact_links=%s\n",
      EnumName<v1::IndexKind>(index.kind(), v1::IndexKind_Name), index.m(),
      index.ef_construction(), index.quantizer() == v1::QUANTIZER_RABITQ ? "rabitq" : "pq",
      index.pq_m(), index.pq_nbits(), index.nlist(),
      index.opq() ? "true" : "false", index.compact_links() ? "true" : "false");
  absl::PrintF("default knobs:  ef=%d nprobe=%d rerank_candidates=%d\n",
               knobs.ef(), knobs.nprobe(), knobs.rerank_candidates());
  if (info.default_target_recall() > 0) {
    absl::PrintF("default target: recall@10 %.3g%s\n", info.default_target_recall(),
                 knobs.target_recall() > 0 ? "" : " (the server's)");
  }
  absl::PrintF("cache_bytes:    %d%s\n", spec.cache_bytes(),
               spec.cache_bytes() == 0 ? " (the server's --cache_bytes)" : "");
  if (spec.shards() > 0) {
    absl::PrintF("shards:         %d x %d replicas (a clustered collection)\n", spec.shards(),
                 spec.replicas());
  }
  absl::PrintF("points:         %d\n", info.points());
  absl::PrintF("deleted points: %d\n", info.deleted_points());
  absl::PrintF("stored records: %d\n", info.stored_records());
  std::string state =
      EnumName<v1::IndexState>(info.index_state(), v1::IndexState_Name);
  switch (info.index_state()) {
    case v1::BUILDING:
      absl::StrAppendFormat(&state, " (%.1f%%)", 100.0 * info.build_progress());
      break;
    case v1::FAILED:
      absl::StrAppend(&state, ": ", info.index_error());
      break;
    case v1::NONE:
      absl::StrAppend(&state, " (searches are exact)");
      break;
    default:
      break;
  }
  absl::PrintF("index state:    %s\n", state);
  absl::PrintF("indexed points: %d\n", info.indexed_points());
  if (info.trained_points() > 0) {
    absl::PrintF("trained on:     %d points (%d automatic retrains, %d of them for drift)\n",
                 info.trained_points(), info.auto_retrains(), info.drift_retrains());
  }
  if (info.code_error_ratio() > 0) {
    absl::PrintF("code error:     %.3fx the first points' after the build\n",
                 info.code_error_ratio());
  }
  absl::PrintF("resident:       %s\n", HumanBytes(info.resident_bytes()));
  absl::PrintF("disk:           %s\n", HumanBytes(info.disk_bytes()));
  for (const v1::FieldIndexInfo& f : info.field_indexes()) {
    absl::PrintF("field index:    %s (%s)%s, %d points, %s\n", f.field(),
                 absl::AsciiStrToLower(v1::FieldIndexType_Name(f.type())),
                 f.ready() ? "" : " BUILDING", f.points(), HumanBytes(f.bytes()));
  }
  PrintCalibration(info);
}

int PrintInfoResult(const absl::StatusOr<v1::CollectionInfo>& info, bool json) {
  if (!info.ok()) return Fail(info.status());
  if (json) return PrintJson(*info);
  PrintInfo(*info);
  return kExitOk;
}

}  // namespace zoom::client
