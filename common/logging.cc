#include "common/logging.h"

#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

namespace zoom {
namespace {

int InitialLevel() {
  const char* env = std::getenv("ZOOM_MIN_LOG_LEVEL");
  if (env != nullptr && env[0] >= '0' && env[0] <= '2') return env[0] - '0';
  return 0;
}

std::atomic<int>& MinLevel() {
  static std::atomic<int> level{InitialLevel()};
  return level;
}

}  // namespace

void SetMinLogLevel(LogSeverity level) {
  MinLevel().store(static_cast<int>(level), std::memory_order_relaxed);
}

bool LogEnabled(LogSeverity level) {
  return static_cast<int>(level) >= MinLevel().load(std::memory_order_relaxed);
}

namespace internal_log {

void Emit(LogSeverity severity, const char* file, int line,
          std::string_view message) {
  static constexpr char kLetters[] = {'I', 'W', 'E'};
  struct timeval tv;
  gettimeofday(&tv, nullptr);
  struct tm tm;
  localtime_r(&tv.tv_sec, &tm);
  const char* base = std::strrchr(file, '/');
  base = base ? base + 1 : file;
  char prefix[128];
  const int n = std::snprintf(
      prefix, sizeof(prefix), "%c%04d%02d%02d %02d:%02d:%02d.%06ld %d %s:%d] ",
      kLetters[static_cast<int>(severity)], tm.tm_year + 1900, tm.tm_mon + 1,
      tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
      static_cast<long>(tv.tv_usec), static_cast<int>(getpid()), base, line);
  std::string out(prefix, n > 0 ? static_cast<size_t>(n) : 0);
  out.append(message.data(), message.size());
  out.push_back('\n');
  // One write per line so that lines from threads do not interleave.
  ssize_t unused = write(STDERR_FILENO, out.data(), out.size());
  (void)unused;
}

}  // namespace internal_log
}  // namespace zoom
