#include "loadtest/server_workload.h"

#include <unistd.h>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/vector_dataset.h"
#include "loadtest/zoomd_child.h"

ABSL_FLAG(std::string, zoomd, "",
          "grpc, fgd, scale: the zoomd binary they start (default: ../server/main/zoomd next to "
          "zoomload)");
ABSL_FLAG(uint64_t, max_queries, 0,
          "grpc: use the first N queries of the data set (0: all)");

namespace zoom::load {

std::map<std::string, ServerWorkloadInfo>& ServerWorkloads() {
  static auto* workloads = new std::map<std::string, ServerWorkloadInfo>();
  return *workloads;
}

absl::StatusOr<std::string> ZoomdFlag() {
  std::string zoomd = absl::GetFlag(FLAGS_zoomd);
  if (zoomd.empty()) zoomd = DefaultZoomdBinary();
  if (::access(zoomd.c_str(), X_OK) != 0) {
    return absl::NotFoundError(absl::StrCat("no zoomd binary at ", zoomd, ": pass --zoomd"));
  }
  return zoomd;
}

absl::StatusOr<Metric> MetricFor(const std::string& dir) {
  const std::string name = absl::GetFlag(FLAGS_metric);
  if (!name.empty()) return ParseMetric(name);
  ZOOM_ASSIGN_OR_RETURN(const DatasetFolder folder, OpenDatasetFolder(dir, /*need_base=*/false));
  return folder.DefaultMetric();
}

}  // namespace zoom::load
