// File: common/logging.h
//
// Minimal glog-style logging to stderr (the installed Abseil has no absl/log):
//
//   ZOOM_LOG(INFO, "io backend: ", name, " (", reason, ")");
//
// prints "I20261130 05:47:29.123456 12345 file.cc:42] io backend: ...".
// Severities: INFO, WARNING, ERROR. Messages below the minimum (default INFO;
// ZOOM_MIN_LOG_LEVEL=0..2 in the environment, or SetMinLogLevel) are dropped.
// Thread-safe: one write(2) per line.
#ifndef ZOOM_COMMON_LOGGING_H_
#define ZOOM_COMMON_LOGGING_H_

#include <string_view>

#include "absl/strings/str_cat.h"

namespace zoom {

enum class LogSeverity { kINFO = 0, kWARNING = 1, kERROR = 2 };

void SetMinLogLevel(LogSeverity level);
bool LogEnabled(LogSeverity level);

namespace internal_log {
void Emit(LogSeverity severity, const char* file, int line,
          std::string_view message);
}  // namespace internal_log

}  // namespace zoom

#define ZOOM_LOG(severity, ...)                                            \
  do {                                                                     \
    if (::zoom::LogEnabled(::zoom::LogSeverity::k##severity)) {            \
      ::zoom::internal_log::Emit(::zoom::LogSeverity::k##severity,         \
                                 __FILE__, __LINE__,                       \
                                 ::absl::StrCat(__VA_ARGS__));             \
    }                                                                      \
  } while (0)

#endif  // ZOOM_COMMON_LOGGING_H_
