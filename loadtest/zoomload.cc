// File: loadtest/zoomload.cc
#include "loadtest/zoomload.h"

#include "common/json.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <future>
#include <memory>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace zoom::load {

// ---- LatencyHistogram ---------------------------------------------------------

LatencyHistogram::LatencyHistogram() : counts_(kBuckets, 0) {}

int LatencyHistogram::BucketIndex(uint64_t value) {
  if (value < kSubCount) return static_cast<int>(value);
  const int exponent = 63 - std::countl_zero(value);  // >= kSubBits
  const int shift = exponent - kSubBits;
  const uint64_t mantissa = (value >> shift) - kSubCount;  // 0..kSubCount-1
  return static_cast<int>((shift + 1) * kSubCount + mantissa);
}

uint64_t LatencyHistogram::BucketLow(int index) {
  if (index < static_cast<int>(kSubCount)) return static_cast<uint64_t>(index);
  const int shift = index / static_cast<int>(kSubCount) - 1;
  const uint64_t mantissa = static_cast<uint64_t>(index) % kSubCount;
  return (kSubCount + mantissa) << shift;
}

uint64_t LatencyHistogram::BucketHigh(int index) {
  if (index < static_cast<int>(kSubCount)) return static_cast<uint64_t>(index) + 1;
  const int shift = index / static_cast<int>(kSubCount) - 1;
  const uint64_t low = BucketLow(index);
  const uint64_t width = uint64_t{1} << shift;
  if (low > std::numeric_limits<uint64_t>::max() - width) {
    return std::numeric_limits<uint64_t>::max();
  }
  return low + width;
}

void LatencyHistogram::Record(uint64_t value, uint64_t times) {
  if (times == 0) return;
  counts_[BucketIndex(value)] += times;
  count_ += times;
  min_ = std::min(min_, value);
  max_ = std::max(max_, value);
  sum_ += static_cast<long double>(value) * times;
}

void LatencyHistogram::Merge(const LatencyHistogram& other) {
  if (other.count_ == 0) return;
  for (int i = 0; i < kBuckets; ++i) counts_[i] += other.counts_[i];
  count_ += other.count_;
  min_ = std::min(min_, other.min_);
  max_ = std::max(max_, other.max_);
  sum_ += other.sum_;
}

void LatencyHistogram::Clear() {
  std::fill(counts_.begin(), counts_.end(), 0);
  count_ = 0;
  min_ = std::numeric_limits<uint64_t>::max();
  max_ = 0;
  sum_ = 0;
}

double LatencyHistogram::mean() const {
  return count_ == 0 ? 0.0 : static_cast<double>(sum_ / count_);
}

double LatencyHistogram::Percentile(double p) const {
  if (count_ == 0) return 0;
  if (!(p > 0)) return static_cast<double>(min_);
  if (p >= 100) return static_cast<double>(max_);
  // Nearest rank; the small slack keeps e.g. 99.9% of 1000 at rank 999
  // despite the rounding of p / 100.
  const double exact = p / 100.0 * static_cast<double>(count_);
  uint64_t rank = static_cast<uint64_t>(std::ceil(exact - 1e-9 * std::max(1.0, exact)));
  rank = std::clamp<uint64_t>(rank, 1, count_);
  uint64_t seen = 0;
  for (int i = 0; i < kBuckets; ++i) {
    seen += counts_[i];
    if (seen >= rank) {
      double value;
      if (i < static_cast<int>(kSubCount)) {
        value = static_cast<double>(i);
      } else {
        const double low = static_cast<double>(BucketLow(i));
        const double high = static_cast<double>(BucketHigh(i));
        value = low + (high - low - 1) / 2;
      }
      return std::clamp(value, static_cast<double>(min_), static_cast<double>(max_));
    }
  }
  return static_cast<double>(max_);
}

std::vector<std::pair<int, uint64_t>> LatencyHistogram::NonEmptyBuckets() const {
  std::vector<std::pair<int, uint64_t>> out;
  if (count_ == 0) return out;
  for (int i = BucketIndex(min_); i <= BucketIndex(max_); ++i) {
    if (counts_[i] > 0) out.emplace_back(i, counts_[i]);
  }
  return out;
}

// ---- PoissonSchedule --------------------------------------------------------------

PoissonSchedule::PoissonSchedule(double rate, uint64_t seed) : rate_(rate), rng_(seed) {}

double PoissonSchedule::NextGap() {
  // A uniform in [0, 1) from the top 53 bits, then the exponential's
  // inverse CDF: -ln(1 - u) / rate.
  const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53;
  return -std::log1p(-u) / rate_;
}

double PoissonSchedule::Next() {
  t_ += NextGap();
  return t_;
}

// ---- StepResult -------------------------------------------------------------------

double StepResult::recall() const {
  return recall_samples == 0 ? std::numeric_limits<double>::quiet_NaN()
                             : recall_sum / static_cast<double>(recall_samples);
}

double StepResult::reads_per_query() const {
  return reads_samples == 0 ? std::numeric_limits<double>::quiet_NaN()
                            : reads_sum / static_cast<double>(reads_samples);
}

// ---- RunStep ------------------------------------------------------------------------

namespace {

std::string CodeName(int code) {
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

Clock::duration FromSeconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

class Runner {
 public:
  Runner(RequestSource& source, const StepConfig& config)
      : source_(source), config_(config) {
    result_.open_loop = config.open_loop;
    result_.concurrency = config.open_loop ? 0 : config.concurrency;
    result_.offered_rate = config.open_loop ? config.rate : 0;
    result_.duration_s = config.duration_s;
    result_.warmup_s = config.warmup_s;
  }

  StepResult Run() {
    start_ = Clock::now();
    measure_start_ = start_ + FromSeconds(config_.warmup_s);
    end_ = measure_start_ + FromSeconds(config_.duration_s);
    last_completion_ = measure_start_;
    std::thread progress;
    if (!config_.progress_label.empty()) progress = std::thread([this] { ProgressLoop(); });

    if (config_.open_loop) {
      Dispatch();
    } else {
      std::vector<std::thread> workers;
      workers.reserve(config_.concurrency);
      for (int i = 0; i < config_.concurrency; ++i) {
        workers.emplace_back([this] { Work(); });
      }
      for (std::thread& t : workers) t.join();
    }
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &Runner::Drained));
      finished_ = true;
    }
    if (progress.joinable()) progress.join();

    absl::MutexLock lock(&mu_);
    result_.issued = issued_measured_;
    // The measured window runs from the end of the warm-up to the last
    // completion, and is at least --duration unless --max_requests ended the
    // step early: an idle tail counts, a backlog that drains late stretches it.
    if (result_.requests > 0) {
      result_.window_s = std::max(0.0, Seconds(last_completion_ - measure_start_));
      if (!stopped_by_cap_) result_.window_s = std::max(result_.window_s, config_.duration_s);
    }
    if (config_.open_loop) {
      double period = config_.duration_s;
      if (stopped_by_cap_ && issued_measured_ > 0) {
        period = std::max(1e-9, Seconds(last_intended_ - measure_start_));
      }
      result_.scheduled_rate = period > 0 ? issued_measured_ / period : 0;
    }
    return std::move(result_);
  }

 private:
  // Closed loop: one worker; each request starts after the previous reply.
  void Work() {
    for (;;) {
      const Clock::time_point now = Clock::now();
      if (now >= end_) return;
      const bool measured = now >= measure_start_;
      {
        absl::MutexLock lock(&mu_);
        if (measured) {
          if (config_.max_requests > 0 && issued_measured_ >= config_.max_requests) {
            stopped_by_cap_ = true;
            return;
          }
          ++issued_measured_;
        }
        ++in_flight_;
      }
      auto replied = std::make_shared<std::promise<void>>();
      std::future<void> reply = replied->get_future();
      source_.Start(seq_.fetch_add(1), [this, now, measured, replied](const Outcome& o) {
        Complete(now, measured, o);
        replied->set_value();
      });
      reply.wait();
    }
  }

  // Open loop: issues each request at its scheduled time without waiting for
  // replies (up to max_in_flight outstanding).
  void Dispatch() {
    PoissonSchedule schedule(config_.rate, config_.seed);
    for (;;) {
      const Clock::time_point intended = start_ + FromSeconds(schedule.Next());
      if (intended >= end_) return;
      const bool measured = intended >= measure_start_;
      {
        absl::MutexLock lock(&mu_);
        if (measured && config_.max_requests > 0 &&
            issued_measured_ >= config_.max_requests) {
          stopped_by_cap_ = true;
          return;
        }
        mu_.Await(absl::Condition(this, &Runner::BelowCap));
      }
      std::this_thread::sleep_until(intended);
      const Clock::time_point now = Clock::now();
      {
        absl::MutexLock lock(&mu_);
        if (measured) {
          ++issued_measured_;
          last_intended_ = intended;
          result_.send_lag.Record(
              static_cast<uint64_t>(std::max<int64_t>(0, (now - intended).count())));
        }
        ++in_flight_;
      }
      source_.Start(seq_.fetch_add(1), [this, intended, measured](const Outcome& o) {
        Complete(intended, measured, o);
      });
    }
  }

  bool BelowCap() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return in_flight_ < std::max(1, config_.max_in_flight);
  }
  bool Drained() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return in_flight_ == 0; }

  void Complete(Clock::time_point intended, bool measured, const Outcome& o) {
    const Clock::time_point now = Clock::now();
    absl::MutexLock lock(&mu_);
    --in_flight_;
    if (!measured) {
      ++result_.warmup_requests;
      return;
    }
    const uint64_t latency_ns = static_cast<uint64_t>(std::max<int64_t>(
        0, std::chrono::duration_cast<std::chrono::nanoseconds>(now - intended).count()));
    ++result_.requests;
    OpStats& op = result_.by_op[o.op];
    if (o.code == 0) {
      ++result_.ok;
      ++op.ok;
      result_.latency.Record(latency_ns);
      op.latency.Record(latency_ns);
      if (!std::isnan(o.recall)) {
        result_.recall_sum += o.recall;
        ++result_.recall_samples;
      }
      if (o.ssd_reads >= 0) {
        result_.reads_sum += static_cast<double>(o.ssd_reads);
        ++result_.reads_samples;
      }
    } else {
      ++result_.errors;
      ++op.errors;
      ++result_.errors_by_code[CodeName(o.code)];
    }
    if (now > last_completion_) last_completion_ = now;
  }

  void ProgressLoop() {
    const bool tty = config_.progress_tty;
    const absl::Duration tick = tty ? absl::Milliseconds(250) : absl::Seconds(1);
    size_t last_length = 0;
    for (;;) {
      bool finished;
      std::string line;
      {
        absl::MutexLock lock(&mu_);
        finished = mu_.AwaitWithTimeout(absl::Condition(&finished_), tick);
        const Clock::time_point now = Clock::now();
        const double elapsed = Seconds(now - measure_start_);
        if (now < measure_start_) {
          line = absl::StrFormat("%s warm-up %.1f/%.1fs, %d in flight",
                                 config_.progress_label, Seconds(now - start_),
                                 config_.warmup_s, in_flight_);
        } else {
          const double shown = std::min(elapsed, config_.duration_s);
          line = absl::StrFormat(
              "%s %.1f/%gs %d requests, %.1f qps, p50 %s p99 %s, %d errors, %d in "
              "flight",
              config_.progress_label, shown, config_.duration_s, result_.requests,
              elapsed > 0 ? result_.requests / elapsed : 0.0,
              HumanMicros(result_.latency.Percentile(50) / 1000),
              HumanMicros(result_.latency.Percentile(99) / 1000), result_.errors,
              in_flight_);
          if (now >= end_) absl::StrAppend(&line, " (draining)");
        }
      }
      if (finished) break;
      if (tty) {
        const size_t length = line.size();
        if (line.size() < last_length) line.append(last_length - line.size(), ' ');
        last_length = length;
        absl::FPrintF(stderr, "\r%s", line);
      } else {
        absl::FPrintF(stderr, "%s\n", line);
      }
      std::fflush(stderr);
    }
    if (tty && last_length > 0) {
      absl::FPrintF(stderr, "\r%s\r", std::string(last_length, ' '));
      std::fflush(stderr);
    }
  }

  RequestSource& source_;
  const StepConfig config_;
  std::atomic<uint64_t> seq_{0};
  Clock::time_point start_, measure_start_, end_;

  absl::Mutex mu_;
  StepResult result_ ABSL_GUARDED_BY(mu_);
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t issued_measured_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopped_by_cap_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  Clock::time_point last_completion_ ABSL_GUARDED_BY(mu_);
  Clock::time_point last_intended_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

StepResult RunStep(RequestSource& source, const StepConfig& config) {
  Runner runner(source, config);
  return runner.Run();
}

// ---- Knee -----------------------------------------------------------------------------

std::optional<size_t> FindKnee(const std::vector<StepResult>& steps) {
  if (steps.empty()) return std::nullopt;
  const double first_p99 = steps[0].p_us(99);
  double best_qps = 0;
  std::optional<size_t> knee;
  for (size_t i = 0; i < steps.size(); ++i) {
    const StepResult& s = steps[i];
    bool keeps_up = s.requests > 0 && s.ok > 0 &&
                    static_cast<double>(s.errors) <= 0.01 * static_cast<double>(s.requests);
    if (keeps_up && i > 0 && first_p99 > 0 && s.p_us(99) > 10 * first_p99) keeps_up = false;
    if (keeps_up) {
      if (s.open_loop) {
        keeps_up = s.qps() >= 0.95 * s.scheduled_rate;
      } else if (i > 0) {
        keeps_up = s.qps() >= 1.05 * best_qps;
      }
    }
    if (!keeps_up) break;
    best_qps = std::max(best_qps, s.qps());
    knee = i;
  }
  return knee;
}

// ---- JSON -------------------------------------------------------------------------------

namespace {


// A finite number with `digits` decimals, else null.
std::string JsonNumber(double v, int digits = 3) {
  if (!std::isfinite(v)) return "null";
  std::string s = absl::StrFormat("%.*f", digits, v);
  // Trim trailing zeros ("12.500" -> "12.5", "3.000" -> "3").
  if (s.find('.') != std::string::npos) {
    while (!s.empty() && s.back() == '0') s.pop_back();
    if (!s.empty() && s.back() == '.') s.pop_back();
  }
  if (s == "-0") s = "0";
  return s;
}

std::string PercentileName(double p) {
  return JsonNumber(p, 4);
}

}  // namespace

std::string StepJson(const StepResult& s, const ReportContext& c, bool knee) {
  std::vector<std::string> f;
  auto add = [&f](absl::string_view key, const std::string& value) {
    f.push_back(absl::StrCat(::zoom::JsonQuote(std::string_view(key.data(), key.size())), ":", value));
  };
  add("workload", ::zoom::JsonQuote(c.workload));
  add("mode", ::zoom::JsonQuote(s.open_loop ? "open" : "closed"));
  add("target", ::zoom::JsonQuote(c.target));
  add(c.workload == "topk" ? "model" : "collection", ::zoom::JsonQuote(c.collection));
  add("dataset", ::zoom::JsonQuote(c.dataset));
  add("k", absl::StrCat(c.k));
  add("knobs", ::zoom::JsonQuote(c.knobs));
  add("offered_rate", s.open_loop ? JsonNumber(s.offered_rate) : "null");
  add("scheduled_rate", s.open_loop ? JsonNumber(s.scheduled_rate) : "null");
  add("concurrency", s.open_loop ? "null" : absl::StrCat(s.concurrency));
  add("duration_s", JsonNumber(s.duration_s));
  add("warmup_s", JsonNumber(s.warmup_s));
  add("window_s", JsonNumber(s.window_s, 6));
  add("qps", JsonNumber(s.qps()));
  add("requests", absl::StrCat(s.requests));
  add("ok", absl::StrCat(s.ok));
  add("errors", absl::StrCat(s.errors));
  {
    std::vector<std::string> codes;
    for (const auto& [code, n] : s.errors_by_code) {
      codes.push_back(absl::StrCat(::zoom::JsonQuote(code), ":", n));
    }
    add("errors_by_code", absl::StrCat("{", absl::StrJoin(codes, ","), "}"));
  }
  add("issued", absl::StrCat(s.issued));
  add("warmup_requests", absl::StrCat(s.warmup_requests));
  // Latencies are of the successful requests: null when there is none.
  const bool timed = s.latency.count() > 0;
  auto us = [timed](double v) { return timed ? JsonNumber(v) : std::string("null"); };
  add("min_us", us(s.latency.min() / 1000.0));
  add("mean_us", us(s.latency.mean() / 1000.0));
  add("p50_us", us(s.p_us(50)));
  add("p90_us", us(s.p_us(90)));
  add("p99_us", us(s.p_us(99)));
  add("p999_us", us(s.p_us(99.9)));
  add("max_us", us(s.latency.max() / 1000.0));
  add("recall_at_k", JsonNumber(s.recall(), 6));
  add("recall_samples", absl::StrCat(s.recall_samples));
  add("reads_per_query", JsonNumber(s.reads_per_query(), 3));
  {
    std::vector<std::string> ps;
    for (double p : kReportPercentiles) {
      ps.push_back(absl::StrCat("{\"percentile\":", PercentileName(p),
                                ",\"us\":", us(s.p_us(p)), "}"));
    }
    add("percentiles", absl::StrCat("[", absl::StrJoin(ps, ","), "]"));
  }
  {
    std::vector<std::string> buckets;
    for (const auto& [index, n] : s.latency.NonEmptyBuckets()) {
      buckets.push_back(absl::StrCat(
          "[", JsonNumber(LatencyHistogram::BucketLow(index) / 1000.0),
          ",", JsonNumber(LatencyHistogram::BucketHigh(index) / 1000.0), ",", n, "]"));
    }
    add("histogram",
        absl::StrCat("{\"unit\":\"us\",\"bucket_relative_width\":",
                     JsonNumber(1.0 / LatencyHistogram::kSubCount, 7),
                     ",\"columns\":[\"from_us\",\"to_us\",\"count\"],\"buckets\":[",
                     absl::StrJoin(buckets, ","), "]}"));
  }
  {
    std::vector<std::string> ops;
    for (const auto& [name, op] : s.by_op) {
      ops.push_back(absl::StrCat(
          ::zoom::JsonQuote(name), ":{\"ok\":", op.ok, ",\"errors\":", op.errors,
          ",\"p50_us\":", JsonNumber(op.latency.Percentile(50) / 1000.0),
          ",\"p99_us\":", JsonNumber(op.latency.Percentile(99) / 1000.0),
          ",\"max_us\":", JsonNumber(op.latency.max() / 1000.0), "}"));
    }
    add("by_op", absl::StrCat("{", absl::StrJoin(ops, ","), "}"));
  }
  if (s.open_loop) {
    add("send_lag_us",
        absl::StrCat("{\"p50\":", JsonNumber(s.send_lag.Percentile(50) / 1000.0),
                     ",\"p99\":", JsonNumber(s.send_lag.Percentile(99) / 1000.0),
                     ",\"max\":", JsonNumber(s.send_lag.max() / 1000.0), "}"));
  }
  add("knee", knee ? "true" : "false");
  return absl::StrCat("{", absl::StrJoin(f, ","), "}");
}

std::string ReportJson(const std::vector<StepResult>& steps, const ReportContext& context,
                       bool sweep) {
  const std::optional<size_t> knee = sweep ? FindKnee(steps) : std::nullopt;
  if (!sweep && steps.size() == 1) return StepJson(steps[0], context, false) + "\n";
  std::vector<std::string> items;
  for (size_t i = 0; i < steps.size(); ++i) {
    items.push_back(StepJson(steps[i], context, knee.has_value() && *knee == i));
  }
  return absl::StrCat("[\n", absl::StrJoin(items, ",\n"), "\n]\n");
}

// ---- Summary table --------------------------------------------------------------------

std::string HumanMicros(double us) {
  if (!std::isfinite(us)) return "-";
  if (us < 1000) return absl::StrFormat("%.0fus", us);
  if (us < 1e6) return absl::StrFormat("%.2fms", us / 1000);
  return absl::StrFormat("%.2fs", us / 1e6);
}

namespace {

std::string LoadLabel(const StepResult& s) {
  if (s.open_loop) return absl::StrCat("rate=", JsonNumber(s.offered_rate, 1), "/s");
  return absl::StrCat("c=", s.concurrency);
}

}  // namespace

std::string SummaryTable(const std::vector<StepResult>& steps) {
  const std::vector<std::string> headers = {
      "load",     "sched/s", "qps",    "p50_us",   "p90_us", "p99_us", "p99.9_us",
      "max_us", "requests", "errors", "recall@k", "reads/q"};
  std::vector<std::vector<std::string>> rows = {headers};
  for (const StepResult& s : steps) {
    const double recall = s.recall();
    const double reads = s.reads_per_query();
    const bool timed = s.latency.count() > 0;
    auto us = [timed](double v) { return timed ? absl::StrFormat("%.0f", v) : std::string("-"); };
    rows.push_back({LoadLabel(s), s.open_loop ? absl::StrFormat("%.1f", s.scheduled_rate) : "-",
                    absl::StrFormat("%.1f", s.qps()), us(s.p_us(50)), us(s.p_us(90)),
                    us(s.p_us(99)), us(s.p_us(99.9)), us(s.latency.max() / 1000.0),
                    absl::StrCat(s.requests), absl::StrCat(s.errors),
                    std::isnan(recall) ? "-" : absl::StrFormat("%.4f", recall),
                    std::isnan(reads) ? "-" : absl::StrFormat("%.1f", reads)});
  }
  std::vector<size_t> width(headers.size(), 0);
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      if (c == 0) {
        absl::StrAppendFormat(&line, "%-*s", static_cast<int>(width[c]), row[c]);
      } else {
        absl::StrAppendFormat(&line, "  %*s", static_cast<int>(width[c]), row[c]);
      }
    }
    absl::StrAppend(&out, line, "\n");
  }
  for (const StepResult& s : steps) {
    if (!s.errors_by_code.empty()) {
      std::vector<std::string> parts;
      for (const auto& [code, n] : s.errors_by_code) parts.push_back(absl::StrCat(code, " ", n));
      absl::StrAppend(&out, LoadLabel(s), " errors by code: ", absl::StrJoin(parts, ", "), "\n");
    }
    if (s.by_op.size() > 1) {
      std::vector<std::string> parts;
      for (const auto& [name, op] : s.by_op) {
        parts.push_back(absl::StrFormat("%s %d ok %d errors p50 %s p99 %s", name, op.ok,
                                        op.errors, HumanMicros(op.latency.Percentile(50) / 1000),
                                        HumanMicros(op.latency.Percentile(99) / 1000)));
      }
      absl::StrAppend(&out, LoadLabel(s), " by operation: ", absl::StrJoin(parts, "; "), "\n");
    }
  }
  return out;
}

// ---- SVG ----------------------------------------------------------------------------------

namespace {

std::string XmlEscape(absl::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string SvgLatencyLabel(double us) {
  if (us < 1000) return absl::StrFormat("%g µs", us);
  if (us < 1e6) return absl::StrFormat("%g ms", us / 1000);
  return absl::StrFormat("%g s", us / 1e6);
}

}  // namespace

std::string LatencySvg(const std::vector<StepResult>& steps, const std::string& title,
                       const std::string& subtitle) {
  constexpr double kWidth = 860, kHeight = 530;
  constexpr double kLeft = 90, kRight = 150, kTop = 60, kBottom = 70;
  const double plot_w = kWidth - kLeft - kRight, plot_h = kHeight - kTop - kBottom;
  const bool open = !steps.empty() && steps[0].open_loop;

  std::vector<double> xs;
  for (const StepResult& s : steps) {
    xs.push_back(s.open_loop ? s.offered_rate : static_cast<double>(s.concurrency));
  }
  const double x_min = xs.empty() ? 1 : *std::min_element(xs.begin(), xs.end());
  const double x_max = xs.empty() ? 1 : *std::max_element(xs.begin(), xs.end());
  const bool log_x = x_min > 0 && x_max / x_min >= 10;
  double x_lo, x_hi;
  if (log_x) {
    x_lo = std::log10(x_min) - 0.05 * std::log10(x_max / x_min);
    x_hi = std::log10(x_max) + 0.05 * std::log10(x_max / x_min);
  } else {
    x_lo = 0;
    x_hi = x_max > 0 ? x_max * 1.08 : 1;
  }
  auto px = [&](double x) {
    const double v = log_x ? std::log10(x) : x;
    return kLeft + (v - x_lo) / (x_hi - x_lo) * plot_w;
  };

  struct Series {
    const char* name;
    double p;
    const char* color;
  };
  const Series series[] = {{"p50", 50, "#1f77b4"},
                           {"p99", 99, "#ff7f0e"},
                           {"p99.9", 99.9, "#d62728"}};
  double y_min = std::numeric_limits<double>::infinity(), y_max = 0;
  for (const StepResult& s : steps) {
    for (const Series& se : series) {
      const double v = s.p_us(se.p);
      if (v > 0) {
        y_min = std::min(y_min, v);
        y_max = std::max(y_max, v);
      }
    }
  }
  if (!(y_max > 0)) {
    y_min = 1;
    y_max = 1000;
  }
  double y_lo = std::floor(std::log10(y_min)), y_hi = std::ceil(std::log10(y_max));
  if (y_hi <= y_lo) y_hi = y_lo + 1;
  auto py = [&](double us) {
    const double v = std::log10(std::max(us, std::pow(10.0, y_lo)));
    return kTop + (1 - (v - y_lo) / (y_hi - y_lo)) * plot_h;
  };

  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
      "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
      kWidth, kHeight, kWidth, kHeight);
  absl::StrAppendFormat(&svg,
                        "<text x=\"%.1f\" y=\"24\" font-size=\"16\" text-anchor=\"middle\">%s</text>\n",
                        kLeft + plot_w / 2, XmlEscape(title));
  if (!subtitle.empty()) {
    absl::StrAppendFormat(&svg,
                          "<text x=\"%.1f\" y=\"44\" fill=\"#444\" text-anchor=\"middle\">%s</text>\n",
                          kLeft + plot_w / 2, XmlEscape(subtitle));
  }
  // Horizontal grid: decades, with faint 2x and 5x lines.
  for (int e = static_cast<int>(y_lo); e <= static_cast<int>(y_hi); ++e) {
    const double us = std::pow(10.0, e);
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#bbb\"/>\n"
                          "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
                          kLeft, py(us), kLeft + plot_w, py(us), kLeft - 6, py(us) + 4,
                          SvgLatencyLabel(us));
    if (e < static_cast<int>(y_hi)) {
      for (double m : {2.0, 5.0}) {
        absl::StrAppendFormat(
            &svg,
            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>\n",
            kLeft, py(us * m), kLeft + plot_w, py(us * m));
      }
    }
  }
  // X ticks at each step's load; a label that would touch the previous one
  // is left out (the tick stays).
  double last_label_right = -1e9;
  for (double x : xs) {
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n",
                          px(x), kTop, px(x), kTop + plot_h);
    const std::string label = JsonNumber(x, 1);
    const double half = 3.6 * label.size();  // ~7.2 px a character at 12 px
    if (px(x) - half < last_label_right + 6) continue;
    last_label_right = px(x) + half;
    absl::StrAppendFormat(&svg, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n",
                          px(x), kTop + plot_h + 18, label);
  }
  // Axes and their titles.
  absl::StrAppendFormat(&svg,
                        "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
                        "stroke=\"black\"/>\n",
                        kLeft, kTop, plot_w, plot_h);
  absl::StrAppendFormat(
      &svg, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s%s</text>\n", kLeft + plot_w / 2,
      kHeight - 22,
      open ? "offered load (requests/s, open loop, Poisson arrivals)"
           : "offered load (concurrent requests, closed loop)",
      log_x ? ", log scale" : "");
  absl::StrAppendFormat(&svg,
                        "<text x=\"18\" y=\"%.1f\" text-anchor=\"middle\" "
                        "transform=\"rotate(-90 18 %.1f)\">latency (log scale)</text>\n",
                        kTop + plot_h / 2, kTop + plot_h / 2);
  // Knee.
  const std::optional<size_t> knee = FindKnee(steps);
  if (knee.has_value() && steps.size() > 1) {
    const double x = px(xs[*knee]);
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#555\" "
                          "stroke-dasharray=\"6 4\"/>\n"
                          "<text x=\"%.1f\" y=\"%.1f\" fill=\"#555\">knee</text>\n",
                          x, kTop, x, kTop + plot_h, x + 4, kTop + 14);
  }
  // Series.
  double legend_y = kTop + 10;
  for (const Series& se : series) {
    std::vector<std::string> points;
    for (size_t i = 0; i < steps.size(); ++i) {
      const double v = steps[i].p_us(se.p);
      if (v > 0) points.push_back(absl::StrFormat("%.1f,%.1f", px(xs[i]), py(v)));
    }
    if (points.size() > 1) {
      absl::StrAppendFormat(&svg,
                            "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" "
                            "points=\"%s\"/>\n",
                            se.color, absl::StrJoin(points, " "));
    }
    for (size_t i = 0; i < steps.size(); ++i) {
      const double v = steps[i].p_us(se.p);
      if (!(v > 0)) continue;
      absl::StrAppendFormat(&svg,
                            "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"><title>%s at "
                            "%s: %s (achieved %.1f qps)</title></circle>\n",
                            px(xs[i]), py(v), se.color, se.name, JsonNumber(xs[i], 1),
                            SvgLatencyLabel(std::round(v * 10) / 10), steps[i].qps());
    }
    const double lx = kLeft + plot_w + 16;
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                          "stroke-width=\"2\"/>\n<text x=\"%.1f\" y=\"%.1f\">%s</text>\n",
                          lx, legend_y, lx + 24, legend_y, se.color, lx + 30, legend_y + 4,
                          se.name);
    legend_y += 20;
  }
  svg += "</svg>\n";
  return svg;
}

// ---- Misc ---------------------------------------------------------------------------------

absl::Status WriteTextFile(const std::string& path, const std::string& text) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
  }
  const size_t written = std::fwrite(text.data(), 1, text.size(), f);
  const int closed = std::fclose(f);
  if (written != text.size() || closed != 0) {
    return absl::DataLossError(absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<double>> ParseNumberList(const std::string& text, bool integers) {
  std::vector<double> out;
  if (absl::StripAsciiWhitespace(text).empty()) {
    return absl::InvalidArgumentError("the list is empty");
  }
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    part = absl::StripAsciiWhitespace(part);
    double v = 0;
    if (part.empty() || !absl::SimpleAtod(part, &v) || !std::isfinite(v) || v <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", part, "' is not a positive number"));
    }
    if (integers && (v != std::floor(v) || v > 1e6)) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", part, "' is not a positive integer up to 1000000"));
    }
    out.push_back(v);
  }
  return out;
}

}  // namespace zoom::load
