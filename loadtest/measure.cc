#include "loadtest/measure.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/json.h"
#include "common/status_macros.h"
#include "common/vector_dataset.h"

namespace zoom::load {
namespace {

// "Key:   123 kB" of /proc/<pid>/status, in bytes.
uint64_t ProcStatusBytes(int pid, const std::string& key) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
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

double TrueScore(const ScoredSet& set, size_t q, size_t id) {
  const float* a = set.queries.row(q);
  const float* b = set.base.row(id);
  const size_t d = set.base.dim;
  double dot = 0, na = 0, nb = 0, l2 = 0;
  for (size_t i = 0; i < d; ++i) {
    const double x = a[i], y = b[i];
    dot += x * y;
    na += x * x;
    nb += y * y;
    l2 += (x - y) * (x - y);
  }
  switch (set.metric) {
    case Metric::kL2:
      return l2;
    case Metric::kInnerProduct:
      return dot;
    case Metric::kCosine:
      return !(na > 0) || !(nb > 0) ? 0 : dot / (std::sqrt(na) * std::sqrt(nb));
  }
  return 0;
}

}  // namespace

JsonLines::JsonLines(const std::string& path) : path_(path) {
  if (!path_.empty()) file_ = std::fopen(path_.c_str(), "w");
}

JsonLines::~JsonLines() {
  if (file_ != nullptr) std::fclose(file_);
}

void JsonLines::Line(const Fields& fields) {
  if (file_ == nullptr) return;
  std::string line = "{";
  for (size_t i = 0; i < fields.size(); ++i) {
    if (i > 0) line += ", ";
    absl::StrAppend(&line, JsonQuote(fields[i].first), ": ");
    const Value& v = fields[i].second;
    if (const auto* s = std::get_if<std::string>(&v)) {
      absl::StrAppend(&line, JsonQuote(*s));
    } else if (const auto* d = std::get_if<double>(&v)) {
      absl::StrAppend(&line, std::isfinite(*d) ? absl::StrFormat("%.6g", *d) : "null");
    } else if (const auto* n = std::get_if<int64_t>(&v)) {
      absl::StrAppend(&line, *n);
    } else {
      absl::StrAppend(&line, std::get<bool>(v) ? "true" : "false");
    }
  }
  line += "}\n";
  std::fputs(line.c_str(), file_);
  std::fflush(file_);
}

Table::Table(std::vector<std::string> headers, int width)
    : headers_(std::move(headers)), width_(width) {}

void Table::Row(const std::vector<std::string>& cells) {
  if (!printed_header_) {
    std::string h, rule;
    for (const std::string& c : headers_) {
      absl::StrAppend(&h, absl::StrFormat("%*s", width_, c));
      rule.append(static_cast<size_t>(width_), '-');
    }
    std::printf("%s\n%s\n", h.c_str(), rule.c_str());
    printed_header_ = true;
  }
  std::string r;
  for (const std::string& c : cells) absl::StrAppend(&r, absl::StrFormat("%*s", width_, c));
  std::printf("%s\n", r.c_str());
  std::fflush(stdout);
}

std::string Fmt(double v, int digits) { return absl::StrFormat("%.*f", digits, v); }

double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return std::nan("");
  const double rank = std::ceil(p / 100.0 * static_cast<double>(sorted.size()));
  size_t i = rank < 1 ? 0 : static_cast<size_t>(rank) - 1;
  return sorted[std::min(i, sorted.size() - 1)];
}

absl::StatusOr<std::vector<int>> ParseIntList(const std::string& text) {
  std::vector<int> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int v = 0;
    if (!absl::SimpleAtoi(part, &v) || v <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("bad number '", part, "' in '", text, "'"));
    }
    out.push_back(v);
  }
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat("empty list '", text, "'"));
  return out;
}

absl::StatusOr<ScoredSet> LoadScoredSet(const std::string& dir, Metric metric,
                                        uint64_t max_queries) {
  ZOOM_ASSIGN_OR_RETURN(const DatasetFolder folder, OpenDatasetFolder(dir, /*need_base=*/true));
  ScoredSet set;
  set.name = folder.name;
  set.dir = folder.dir;
  set.metric = metric;
  set.is_uint8 = folder.base_is_uint8;
  ZOOM_ASSIGN_OR_RETURN(set.gt, LoadGroundTruth(folder, metric, max_queries, &set.gt_dist));
  ZOOM_ASSIGN_OR_RETURN(set.base, LoadBase(folder));
  ZOOM_ASSIGN_OR_RETURN(set.queries, LoadQueries(folder, max_queries));
  return set;
}

double RecallAtK(const ScoredSet& set, size_t q, const int64_t* ids, size_t n_ids, size_t k) {
  if (k == 0 || k > set.gt_dist.dim || q >= set.gt_dist.rows) {
    return std::numeric_limits<double>::quiet_NaN();
  }
  const double threshold = set.gt_dist.row(q)[k - 1];
  // The stored scores are float32 roundings of float64 values.
  const double tol = 1e-6 * std::max(std::abs(threshold), 1e-12);
  std::vector<int64_t> unique(ids, ids + std::min(n_ids, k));
  std::sort(unique.begin(), unique.end());
  unique.erase(std::unique(unique.begin(), unique.end()), unique.end());
  size_t hits = 0;
  for (int64_t id : unique) {
    if (id < 0 || static_cast<uint64_t>(id) >= set.base.rows) continue;
    const double s = TrueScore(set, q, static_cast<size_t>(id));
    hits += HigherIsBetter(set.metric) ? s >= threshold - tol : s <= threshold + tol;
  }
  return static_cast<double>(hits) / static_cast<double>(k);
}

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
  if (close == std::string::npos) return 0;
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

uint64_t RssBytesOf(int pid) { return ProcStatusBytes(pid, "VmRSS:"); }
uint64_t PeakRssBytesOf(int pid) { return ProcStatusBytes(pid, "VmHWM:"); }

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

}  // namespace zoom::load
