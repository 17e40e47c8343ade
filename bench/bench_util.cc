#include "bench/bench_util.h"

#include "common/json.h"

#include <sys/wait.h>

#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace zoom::bench {
namespace {


}  // namespace

Reporter::Reporter(const std::string& json_path) : json_path_(json_path) {
  if (!json_path_.empty()) json_ = std::fopen(json_path_.c_str(), "w");
}

Reporter::~Reporter() {
  if (json_ != nullptr) std::fclose(json_);
}

void Reporter::JsonLine(const Fields& fields) {
  if (json_ == nullptr) return;
  std::string line = "{";
  for (size_t i = 0; i < fields.size(); ++i) {
    if (i > 0) line += ", ";
    absl::StrAppend(&line, JsonQuote(fields[i].first), ": ");
    const Value& v = fields[i].second;
    if (const auto* s = std::get_if<std::string>(&v)) {
      absl::StrAppend(&line, JsonQuote(*s));
    } else if (const auto* d = std::get_if<double>(&v)) {
      absl::StrAppend(&line, std::isfinite(*d) ? absl::StrFormat("%.6g", *d)
                                               : std::string("null"));
    } else if (const auto* n = std::get_if<int64_t>(&v)) {
      absl::StrAppend(&line, *n);
    } else {
      absl::StrAppend(&line, std::get<bool>(v) ? "true" : "false");
    }
  }
  line += "}\n";
  std::fputs(line.c_str(), json_);
  std::fflush(json_);
}

Table::Table(std::vector<std::string> headers, int width)
    : headers_(std::move(headers)), width_(width) {}

void Table::Row(const std::vector<std::string>& cells) {
  if (!printed_header_) {
    std::string h, rule;
    for (const auto& c : headers_) {
      absl::StrAppend(&h, absl::StrFormat("%*s", width_, c));
      rule.append(static_cast<size_t>(width_), '-');
    }
    std::printf("%s\n%s\n", h.c_str(), rule.c_str());
    printed_header_ = true;
  }
  std::string r;
  for (const auto& c : cells) absl::StrAppend(&r, absl::StrFormat("%*s", width_, c));
  std::printf("%s\n", r.c_str());
  std::fflush(stdout);
}

double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return std::nan("");
  const double rank = std::ceil(p / 100.0 * static_cast<double>(sorted.size()));
  size_t i = rank < 1 ? 0 : static_cast<size_t>(rank) - 1;
  if (i >= sorted.size()) i = sorted.size() - 1;
  return sorted[i];
}

std::string Fmt(double v, int digits) { return absl::StrFormat("%.*f", digits, v); }

std::map<std::string, WorkloadFn>& Workloads() {
  static auto* w = new std::map<std::string, WorkloadFn>();
  return *w;
}

absl::Status RunCommand(const std::string& cmd, std::string* output) {
  std::FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return absl::InternalError(absl::StrCat("popen: ", cmd));
  char buf[4096];
  size_t n;
  output->clear();
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) output->append(buf, n);
  const int rc = ::pclose(p);
  if (rc != 0) {
    return absl::InternalError(absl::StrCat("command failed (status ", rc,
                                            "): ", cmd));
  }
  return absl::OkStatus();
}

}  // namespace zoom::bench
