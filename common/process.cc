#include "common/process.h"

#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace zoom {
namespace {

// "Key:   123 kB" of a /proc/<pid>/status file, in bytes; 0 when absent.
uint64_t ProcStatusBytes(const std::string& status_path, const std::string& key) {
  std::ifstream in(status_path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) != 0) continue;
    absl::string_view rest = absl::StripAsciiWhitespace(absl::string_view(line).substr(key.size()));
    uint64_t kb = 0;
    if (absl::SimpleAtoi(rest.substr(0, rest.find(' ')), &kb)) return kb * 1024;
    return 0;
  }
  return 0;
}

std::string StatusPath(int pid) { return absl::StrCat("/proc/", pid, "/status"); }

}  // namespace

double ProcessCpuSeconds() {
  rusage u{};
  if (getrusage(RUSAGE_SELF, &u) != 0) return 0;
  auto secs = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  return secs(u.ru_utime) + secs(u.ru_stime);
}

double CpuSecondsOf(int pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // The command name may hold spaces: the fields start after its ')'.
  const size_t close = text.rfind(')');
  if (close == std::string::npos || close + 2 > text.size()) return 0;
  std::istringstream fields(text.substr(close + 2));
  std::string field;
  double ticks = 0;
  // After ')': state (3), ..., utime (14), stime (15).
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    double v = 0;
    if ((i == 14 || i == 15) && absl::SimpleAtod(field, &v)) ticks += v;
  }
  return ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

uint64_t CurrentRssBytes() { return ProcStatusBytes("/proc/self/status", "VmRSS:"); }
uint64_t PeakRssBytes() { return ProcStatusBytes("/proc/self/status", "VmHWM:"); }
uint64_t RssBytesOf(int pid) { return ProcStatusBytes(StatusPath(pid), "VmRSS:"); }
uint64_t PeakRssBytesOf(int pid) { return ProcStatusBytes(StatusPath(pid), "VmHWM:"); }

void ReleaseFreedMemory() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

double LoadAverage1m() {
  std::ifstream in("/proc/loadavg");
  double load = -1;
  if (!(in >> load)) return -1;
  return load;
}

std::string SelfDir() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  const std::string p(buf, static_cast<size_t>(n));
  return p.substr(0, p.rfind('/'));
}

absl::StatusOr<std::string> RunCommand(const std::string& command) {
  std::FILE* p = ::popen(command.c_str(), "r");
  if (p == nullptr) return absl::InternalError(absl::StrCat("popen: ", command));
  std::string output;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) output.append(buf, n);
  const int rc = ::pclose(p);
  if (rc != 0) {
    return absl::InternalError(absl::StrCat("command failed (status ", rc, "): ", command));
  }
  return output;
}

}  // namespace zoom
