#include "loadtest/server_workload.h"

#include <unistd.h>

#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/vector_dataset.h"

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
  return MetricOrDefault(absl::GetFlag(FLAGS_metric), dir);
}

absl::StatusOr<uint32_t> KFlag() {
  const uint32_t k = absl::GetFlag(FLAGS_k);
  if (k == 0 || k > 1000) return absl::InvalidArgumentError("--k must be 1..1000");
  return k;
}

absl::StatusOr<std::unique_ptr<ZoomdChild>> StartZoomd(const std::string& data_dir, DataDir mode,
                                                       std::vector<std::string> flags) {
  ZoomdChildOptions options;
  ZOOM_ASSIGN_OR_RETURN(options.binary, ZoomdFlag());
  options.data_dir = data_dir;
  options.log_path = data_dir + ".log";
  options.flags = std::move(flags);
  if (mode == DataDir::kWipe) {
    std::error_code ec;
    std::filesystem::remove_all(options.data_dir, ec);
    if (!ec) std::filesystem::remove(options.log_path, ec);
    if (ec) {
      return absl::InternalError(
          absl::StrCat("cannot wipe ", options.data_dir, " and its log: ", ec.message()));
    }
  }
  auto zoomd = std::make_unique<ZoomdChild>(std::move(options));
  ZOOM_RETURN_IF_ERROR(zoomd->Start().status());
  return zoomd;
}

}  // namespace zoom::load
