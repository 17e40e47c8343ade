// File: common/report_table.h
//
// What the benchmark tools print, in one format: zoombench (bench/) and
// zoomload's server workloads (loadtest/server_workload.h) measure the two
// halves of one comparison (in process, over the wire) and a driver puts
// their rows side by side (loadtest/grpc_overhead.py), so a table, a JSON
// line and a percentile must mean the same on both sides:
//
//   JsonLines      one JSON object per line (their --json files);
//   Table          a fixed-width table on stdout, printed as rows arrive;
//   Fmt            a number as a table cell;
//   Percentile     nearest rank over a sorted sample (latencies);
//   ParseIntList   the comma lists of positive integers their sweep flags
//                  take ("1,2,4").
//
// Scripts and docs read these formats (grpc_overhead.py, docs/benchmarks.md):
// a change to one is a change to its readers. Nothing here is thread-safe:
// write from the thread that runs the workload.
#ifndef ZOOM_COMMON_REPORT_TABLE_H_
#define ZOOM_COMMON_REPORT_TABLE_H_

#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"

namespace zoom {

// ---- JsonLines --------------------------------------------------------------------

// A file of JSON lines, one object per Line call. Owns the file: opened
// (truncated) by the constructor, closed by the destructor.
class JsonLines {
 public:
  // `path` "" writes nothing (every Line is a no-op); a path that cannot be
  // opened leaves ok() false and every Line a no-op.
  explicit JsonLines(const std::string& path);
  ~JsonLines();
  JsonLines(const JsonLines&) = delete;
  JsonLines& operator=(const JsonLines&) = delete;

  // False only when a path was given and could not be opened for writing.
  bool ok() const { return path_.empty() || file_ != nullptr; }

  // A field's value. Pass strings as std::string: a const char* would
  // become the bool.
  using Value = std::variant<std::string, double, int64_t, bool>;
  using Fields = std::vector<std::pair<std::string, Value>>;

  // Writes {"key": value, ...} with the fields in the order given, ", "
  // between them, then '\n', and flushes (a run cut short keeps its lines).
  // Keys and strings through JsonQuote (common/json.h); doubles as %.6g, or
  // null when not finite; integers in full; bools as true / false.
  void Line(const Fields& fields);

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
};

// ---- Table ------------------------------------------------------------------------

// A fixed-width table on stdout: before the first row, the headers and a
// rule of '-' (width characters per column); each cell right-aligned in
// `width` characters (a longer one is printed whole, pushing the rest
// right). Every row is flushed as it is printed.
class Table {
 public:
  explicit Table(std::vector<std::string> headers, int width = 12);
  void Row(const std::vector<std::string>& cells);

 private:
  std::vector<std::string> headers_;
  int width_;
  bool printed_header_ = false;
};

// "%.*f" of `v`: Fmt(2.345, 2) == "2.35" (printf's rounding), Fmt(7, 0) == "7".
std::string Fmt(double v, int digits = 1);

// ---- The serving path's rows --------------------------------------------------------

// One row of the serving-path comparison: zoombench's collection workload
// (in process) and zoomload's grpc workload (over the wire) print and write
// it alike, so that loadtest/grpc_overhead.py reads both halves the same way.
struct ServingFigures {
  double recall_at_10 = std::numeric_limits<double>::quiet_NaN();
  double qps = 0, p50_us = 0, p99_us = 0, reads_per_query = 0, cpu_us_per_query = 0;
};
// The table's row (callers, `label`, recall, QPS, p50, p99, reads, CPU) and
// the JSON line {workload, dataset, path, callers, recall_at_10, qps, p50_us,
// p99_us, reads_per_query, cpu_us_per_query}.
void ServingRow(const std::string& workload, const std::string& dataset,
                const std::string& path, const std::string& label, int callers,
                const ServingFigures& f, Table& table, JsonLines& json);

// ---- Figures ----------------------------------------------------------------------

// The p-th percentile (0..100) of `sorted` (REQUIRES: ascending), nearest
// rank: the element at rank ceil(p / 100 * n) (1-based, at least 1, at most
// n). NaN when `sorted` is empty.
double Percentile(const std::vector<double>& sorted, double p);

// A comma list of positive integers ("16,32,64"; empty parts skipped).
// InvalidArgument naming the bad part, or the text when it holds none.
absl::StatusOr<std::vector<int>> ParseIntList(const std::string& text);

}  // namespace zoom

#endif  // ZOOM_COMMON_REPORT_TABLE_H_
