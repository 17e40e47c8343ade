// File: bench/bench_session.h
//
// Results collected across the workloads of one zoombench run, so that the
// run ends with zoomd and the baselines side by side.
#ifndef ZOOM_BENCH_SESSION_H_
#define ZOOM_BENCH_SESSION_H_

#include <vector>

#include "bench/bench_dataset.h"

namespace zoom::bench {

// Every ConfigResult reported so far in this process. Not thread-safe:
// workloads run one after another.
std::vector<ConfigResult>& SessionResults();

}  // namespace zoom::bench

#endif  // ZOOM_BENCH_SESSION_H_
