#include "client/progress_bar.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"

namespace zoom::client {

ProgressBar::ProgressBar(uint64_t total, Options options)
    : total_(total),
      options_(std::move(options)),
      tty_(options_.tty_override >= 0 ? options_.tty_override == 1
                                      : isatty(STDERR_FILENO) == 1),
      start_(absl::Now()) {}

void ProgressBar::Update(uint64_t done) {
  done_ = done;
  if (!tty_ && !options_.lines_when_not_a_tty) return;
  const absl::Time now = absl::Now();
  const absl::Duration every = tty_ ? absl::Milliseconds(100) : absl::Seconds(1);
  if (now - last_draw_ < every && done != total_) return;
  last_draw_ = now;
  Draw(/*final=*/false);
}

void ProgressBar::Finish() { Draw(/*final=*/true); }

double ProgressBar::Seconds() const { return absl::ToDoubleSeconds(absl::Now() - start_); }

double ProgressBar::Rate() const {
  const double seconds = Seconds();
  return seconds > 0 ? static_cast<double>(done_) / seconds : 0.0;
}

std::string ProgressBar::Line(bool final) const {
  constexpr int kWidth = 30;
  const double fraction =
      total_ == 0 ? 1.0 : static_cast<double>(done_) / static_cast<double>(total_);
  const int filled = std::clamp(static_cast<int>(fraction * kWidth), 0, kWidth);
  const double rate = Rate();
  std::string line = options_.prefix.empty() ? "" : options_.prefix + " ";
  absl::StrAppendFormat(&line, "[%s%s] %5.1f%% %d/%d points %.0f points/s",
                        std::string(filled, '#'), std::string(kWidth - filled, '.'),
                        100.0 * fraction, done_, total_, rate);
  if (final) {
    absl::StrAppendFormat(&line, " %.1fs", Seconds());
  } else if (rate > 0 && done_ < total_) {
    absl::StrAppendFormat(&line, " ETA %.0fs", static_cast<double>(total_ - done_) / rate);
  }
  return line;
}

void ProgressBar::Draw(bool final) {
  std::string line = Line(final);
  // On a terminal, pad over the remains of a longer previous line.
  const size_t length = line.size();
  if (tty_ && line.size() < last_length_) line.append(last_length_ - line.size(), ' ');
  last_length_ = length;
  absl::FPrintF(stderr, "%s%s%s", tty_ ? "\r" : "", line, (final || !tty_) ? "\n" : "");
  std::fflush(stderr);
}

}  // namespace zoom::client
