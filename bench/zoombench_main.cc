// zoombench: zoomd's db_bench-like benchmark binary. Each workload lives in
// its own file (bench_<name>.cc) and registers itself by name:
//
//   zoombench --benchmarks=io [--json FILE] [workload flags]
//
// Workloads run in the order given; the first failure stops the run with a
// non-zero exit.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench/bench_dataset.h"
#include "bench/bench_session.h"
#include "bench/bench_util.h"
#include "server/engine/database.h"

ABSL_FLAG(std::string, benchmarks, "io",
          "Comma-separated workloads to run (see --helpfull for each one's flags)");
ABSL_FLAG(std::string, json, "", "Also write results as JSON lines to this file");

int main(int argc, char** argv) {
  zoom::server::Database::EnsureBlasCore(argv);  // before any thread: may re-exec
  std::vector<std::string> names;
  for (const auto& [name, fn] : zoom::bench::Workloads()) names.push_back(name);
  absl::SetProgramUsageMessage(
      "zoomd benchmarks. --benchmarks=" + absl::StrJoin(names, "|") +
      " [--json FILE]");
  absl::ParseCommandLine(argc, argv);
  zoom::JsonLines reporter(absl::GetFlag(FLAGS_json));
  if (!reporter.ok()) {
    std::fprintf(stderr, "zoombench: cannot write --json %s\n",
                 absl::GetFlag(FLAGS_json).c_str());
    return 2;
  }
  const std::vector<std::string> wanted =
      absl::StrSplit(absl::GetFlag(FLAGS_benchmarks), ',', absl::SkipEmpty());
  for (const std::string& name : wanted) {
    auto it = zoom::bench::Workloads().find(name);
    if (it == zoom::bench::Workloads().end()) {
      std::fprintf(stderr, "zoombench: unknown workload '%s'; known: %s\n",
                   name.c_str(), absl::StrJoin(names, ", ").c_str());
      return 2;
    }
    std::printf("== %s\n", name.c_str());
    const absl::Status st = it->second(reporter);
    if (!st.ok()) {
      std::fprintf(stderr, "zoombench: %s failed: %s\n", name.c_str(),
                   st.ToString().c_str());
      return 1;
    }
  }
  // zoomd and the baselines side by side, when both ran.
  const auto& all = zoom::bench::SessionResults();
  const bool ours = std::any_of(all.begin(), all.end(), [](const auto& r) {
    return zoom::bench::IsOurs(r.name);
  });
  const bool theirs = std::any_of(all.begin(), all.end(), [](const auto& r) {
    return !zoom::bench::IsOurs(r.name);
  });
  if (ours && theirs) {
    std::printf("\n== side by side (one run, same data and threads)\n");
    zoom::bench::PrintSideBySide(all, {0.90, 0.95, 0.99});
  }
  return 0;
}
