#include "bench/bench_util.h"

namespace zoom::bench {

std::map<std::string, WorkloadFn>& Workloads() {
  static auto* w = new std::map<std::string, WorkloadFn>();
  return *w;
}

}  // namespace zoom::bench
