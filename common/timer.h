// File: common/timer.h
//
// A monotonic stopwatch for stage timings (QueryStats) and benchmarks.
#ifndef ZOOM_COMMON_TIMER_H_
#define ZOOM_COMMON_TIMER_H_

#include <chrono>

namespace zoom {

class Stopwatch {
 public:
  Stopwatch() : start_(std::chrono::steady_clock::now()) {}
  void Reset() { start_ = std::chrono::steady_clock::now(); }
  double ElapsedMicros() const {
    return std::chrono::duration<double, std::micro>(
               std::chrono::steady_clock::now() - start_)
        .count();
  }
  double ElapsedSeconds() const { return ElapsedMicros() * 1e-6; }

 private:
  std::chrono::steady_clock::time_point start_;
};

}  // namespace zoom

#endif  // ZOOM_COMMON_TIMER_H_
