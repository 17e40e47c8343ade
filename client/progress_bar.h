// A one-line progress bar on stderr for the command-line tools (zoomctl
// import, zoomload --setup):
//
//   import [#########.....................]  31.2% 62400/200000 points 181000 points/s ETA 1s
//
// On a terminal the line is redrawn in place ('\r', at most ten times a
// second). Otherwise it prints nothing until Finish() unless
// `lines_when_not_a_tty` is set, in which case it prints one full line a
// second (logs of a long run). Finish() always prints the final state with
// the elapsed time and ends the line.
//
// Not thread-safe: call Update and Finish from one thread (the import
// callbacks run on the calling thread).
#ifndef ZOOM_CLIENT_PROGRESS_BAR_H_
#define ZOOM_CLIENT_PROGRESS_BAR_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/time/time.h"

namespace zoom::client {

class ProgressBar {
 public:
  struct Options {
    std::string prefix;  // before the bar, e.g. "import"; may be empty
    bool lines_when_not_a_tty = false;
    // Where to draw; -1: stderr's descriptor decides whether it is a terminal.
    int tty_override = -1;  // 0: not a terminal, 1: a terminal (tests)
  };
  ProgressBar(uint64_t total, Options options);
  explicit ProgressBar(uint64_t total) : ProgressBar(total, Options{}) {}

  // `done` of `total` units finished.
  void Update(uint64_t done);
  // Prints the final state and ends the line.
  void Finish();

  double Seconds() const;
  // Units per second since construction.
  double Rate() const;

  // The line Draw would print now (no '\r', no padding); for tests.
  std::string Line(bool final) const;

 private:
  void Draw(bool final);

  const uint64_t total_;
  const Options options_;
  const bool tty_;
  const absl::Time start_;
  absl::Time last_draw_ = absl::InfinitePast();
  uint64_t done_ = 0;
  size_t last_length_ = 0;
};

}  // namespace zoom::client

#endif  // ZOOM_CLIENT_PROGRESS_BAR_H_
