#include "common/vector_dataset.h"

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace zoom {
namespace {

namespace fs = std::filesystem;

bool IsFile(const std::string& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec);
}

// DIR/<stem>.fvecs or DIR/<stem>.bvecs, whichever exists ("" when neither).
std::string VecsPath(const std::string& dir, const char* stem) {
  for (const char* ext : {".fvecs", ".bvecs"}) {
    std::string path = absl::StrCat(dir, "/", stem, ext);
    if (IsFile(path)) return path;
  }
  return "";
}

}  // namespace

std::string DatasetFolder::GroundTruthPath(Metric metric) const {
  return absl::StrCat(dir, "/groundtruth_", MetricName(metric), ".ivecs");
}

std::string DatasetFolder::GroundTruthDistPath(Metric metric) const {
  return absl::StrCat(dir, "/groundtruth_", MetricName(metric), "_dist.fvecs");
}

bool DatasetFolder::HasGroundTruth(Metric metric) const {
  for (Metric m : ground_truth_metrics) {
    if (m == metric) return true;
  }
  return false;
}

Metric DatasetFolder::DefaultMetric() const {
  return ground_truth_metrics.empty() ? Metric::kL2 : ground_truth_metrics.front();
}

std::string DatasetFolder::GroundTruthMetricNames() const {
  if (ground_truth_metrics.empty()) return "none";
  std::vector<std::string> names;
  for (Metric m : ground_truth_metrics) names.emplace_back(MetricName(m));
  return absl::StrJoin(names, ", ");
}

absl::StatusOr<DatasetFolder> OpenDatasetFolder(const std::string& dir_in, bool need_base) {
  DatasetFolder f;
  f.dir = dir_in;
  while (f.dir.size() > 1 && f.dir.back() == '/') f.dir.pop_back();
  std::error_code ec;
  if (!fs::is_directory(f.dir, ec)) {
    return absl::NotFoundError(absl::StrCat("data set folder ", f.dir, " does not exist"));
  }
  f.name = fs::path(f.dir).filename().string();
  f.query_path = VecsPath(f.dir, "query");
  if (f.query_path.empty()) {
    return absl::NotFoundError(
        absl::StrCat("data set ", f.dir, " has neither query.fvecs nor query.bvecs"));
  }
  ZOOM_ASSIGN_OR_RETURN(VecsReader qr, VecsReader::Open(f.query_path));
  f.query_rows = qr.count();
  f.query_dim = qr.dim();
  if (f.query_rows == 0) {
    return absl::FailedPreconditionError(absl::StrCat(f.query_path, " has no queries"));
  }
  f.base_path = VecsPath(f.dir, "base");
  if (f.base_path.empty()) {
    if (need_base) {
      return absl::NotFoundError(
          absl::StrCat("data set ", f.dir, " has neither base.fvecs nor base.bvecs"));
    }
  } else {
    ZOOM_ASSIGN_OR_RETURN(VecsReader br, VecsReader::Open(f.base_path));
    f.base_rows = br.count();
    f.base_dim = br.dim();
    f.base_is_uint8 = br.type() == VecsType::kUint8;
    if (need_base && f.base_rows == 0) {
      return absl::FailedPreconditionError(absl::StrCat(f.base_path, " is empty"));
    }
    if (f.base_rows > 0 && f.base_dim != f.query_dim) {
      return absl::FailedPreconditionError(
          absl::StrCat(f.query_path, " has dimension ", f.query_dim, " but ", f.base_path,
                       " has dimension ", f.base_dim));
    }
  }
  for (Metric m : {Metric::kCosine, Metric::kL2, Metric::kInnerProduct}) {
    if (IsFile(f.GroundTruthPath(m))) f.ground_truth_metrics.push_back(m);
  }
  return f;
}

absl::StatusOr<VecsMatrix<float>> LoadQueries(const DatasetFolder& folder, uint64_t max_rows) {
  return LoadVecsAsFloat(folder.query_path, max_rows);
}

absl::StatusOr<VecsMatrix<float>> LoadBase(const DatasetFolder& folder, uint64_t max_rows) {
  if (folder.base_path.empty()) {
    return absl::NotFoundError(
        absl::StrCat("data set ", folder.dir, " has neither base.fvecs nor base.bvecs"));
  }
  return LoadVecsAsFloat(folder.base_path, max_rows);
}

absl::StatusOr<VecsMatrix<int32_t>> LoadGroundTruth(const DatasetFolder& folder, Metric metric,
                                                    uint64_t max_rows, VecsMatrix<float>* dist) {
  const std::string gt_path = folder.GroundTruthPath(metric);
  const std::string gtd_path = folder.GroundTruthDistPath(metric);
  std::vector<std::string> needed = {gt_path};
  if (dist != nullptr) needed.push_back(gtd_path);
  for (const std::string& p : needed) {
    if (!IsFile(p)) {
      return absl::NotFoundError(absl::StrCat(
          "missing ", p, " (ground truth for metric ", MetricName(metric),
          "); this folder has ground truth for: ", folder.GroundTruthMetricNames()));
    }
  }
  // Row counts of the whole files, so that a truncated query set is still
  // checked against all of the ground truth.
  ZOOM_ASSIGN_OR_RETURN(VecsReader gr, VecsReader::Open(gt_path));
  if (gr.count() != folder.query_rows) {
    return absl::FailedPreconditionError(absl::StrCat(gt_path, " has ", gr.count(),
                                                      " rows but ", folder.query_path, " has ",
                                                      folder.query_rows, " queries"));
  }
  const uint64_t rows = max_rows == 0 ? gr.count() : std::min<uint64_t>(max_rows, gr.count());
  if (dist != nullptr) {
    ZOOM_ASSIGN_OR_RETURN(VecsReader gdr, VecsReader::Open(gtd_path));
    if (gdr.count() != gr.count() || gdr.dim() != gr.dim()) {
      return absl::FailedPreconditionError(absl::StrCat(gtd_path, " is ", gdr.count(), " x ",
                                                        gdr.dim(), " but ", gt_path, " is ",
                                                        gr.count(), " x ", gr.dim()));
    }
    ZOOM_ASSIGN_OR_RETURN(*dist, LoadVecsAsFloat(gtd_path, rows));
  }
  ZOOM_ASSIGN_OR_RETURN(VecsMatrix<int32_t> gt, LoadIvecs(gt_path, rows));
  for (int32_t id : gt.data) {
    if (id < 0 || (folder.base_rows > 0 && static_cast<uint64_t>(id) >= folder.base_rows)) {
      return absl::FailedPreconditionError(absl::StrCat(
          gt_path, " holds id ", id, " outside the base's ", folder.base_rows, " rows"));
    }
  }
  return gt;
}

absl::StatusOr<Metric> MetricOrDefault(const std::string& name, const std::string& dir) {
  if (!name.empty()) return ParseMetric(name);
  ZOOM_ASSIGN_OR_RETURN(const DatasetFolder folder, OpenDatasetFolder(dir, /*need_base=*/false));
  return folder.DefaultMetric();
}

absl::StatusOr<Dataset> LoadDataset(const std::string& dir, Metric metric,
                                    uint64_t max_queries) {
  ZOOM_ASSIGN_OR_RETURN(const DatasetFolder folder, OpenDatasetFolder(dir, /*need_base=*/true));
  Dataset ds;
  ds.name = folder.name;
  ds.dir = folder.dir;
  ds.metric = metric;
  ds.is_uint8 = folder.base_is_uint8;
  ZOOM_ASSIGN_OR_RETURN(ds.gt, LoadGroundTruth(folder, metric, max_queries, &ds.gt_dist));
  ZOOM_ASSIGN_OR_RETURN(ds.base, LoadBase(folder));
  ZOOM_ASSIGN_OR_RETURN(ds.queries, LoadQueries(folder, max_queries));
  return ds;
}

}  // namespace zoom
