#include "common/report_table.h"

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/json.h"

namespace zoom {

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
  const size_t i = rank < 1 ? 0 : static_cast<size_t>(rank) - 1;
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

void ServingRow(const std::string& workload, const std::string& dataset,
                const std::string& path, const std::string& label, int callers,
                const ServingFigures& f, Table& table, JsonLines& json) {
  table.Row({std::to_string(callers), label, Fmt(f.recall_at_10, 4), Fmt(f.qps, 0),
             Fmt(f.p50_us, 0), Fmt(f.p99_us, 0), Fmt(f.reads_per_query, 1),
             Fmt(f.cpu_us_per_query, 0)});
  json.Line({{"workload", workload},
             {"dataset", dataset},
             {"path", path},
             {"callers", static_cast<int64_t>(callers)},
             {"recall_at_10", f.recall_at_10},
             {"qps", f.qps},
             {"p50_us", f.p50_us},
             {"p99_us", f.p99_us},
             {"reads_per_query", f.reads_per_query},
             {"cpu_us_per_query", f.cpu_us_per_query}});
}

}  // namespace zoom
