// zoombench --benchmarks=io: the fullview's I/O, simulated.
//
// On a file of --io_file_gib GiB of 4 KiB records, each "query" reads K'
// random records (K' in --io_kprime) with O_DIRECT, as one io_uring batch or
// as a pread loop, from 1 and 2 threads (--io_threads). Prints per-query
// latency p50/p99/p99.9, reads/s and MB/s, and, in the same run, fio's figures
// for the same file (random 4 KiB, direct=1, io_uring, iodepth 1/32/128) so
// the ratio to the device's limit is visible. fio QD128 runs before and
// after our rows because this shared disk drifts.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/aligned_buffer.h"
#include "common/process.h"
#include "common/status_macros.h"
#include "common/timer.h"
#include "bench/bench_util.h"
#include "storage/block_reader.h"
#include "storage/posix_file.h"

ABSL_FLAG(std::string, io_file, "/var/tmp/zoombench-io.dat",
          "File of 4 KiB records to read (written once, reused when big enough)");
ABSL_FLAG(double, io_file_gib, 4.0, "Size of --io_file in GiB (at least 4 for the figures of docs/benchmarks.md)");
ABSL_FLAG(std::string, io_kprime, "10,50,100,200", "Records per query (K')");
ABSL_FLAG(std::string, io_threads, "1,2", "Thread counts");
ABSL_FLAG(double, io_seconds, 3.0, "Seconds per configuration");
ABSL_FLAG(bool, io_fio, true, "Run fio on the same file for the device's limit");
ABSL_FLAG(bool, io_plain_uring, true,
          "Also run io_uring without registered file and buffers");

namespace zoom::bench {
namespace {

constexpr size_t kRecord = 4096;

absl::Status EnsureFile(const std::string& path, uint64_t bytes) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return storage::ErrnoStatus(errno, absl::StrCat("open ", path));
  storage::FileDescriptor f(fd);
  ZOOM_ASSIGN_OR_RETURN(uint64_t size, storage::FileSize(fd, path));
  if (size >= bytes) return absl::OkStatus();
  std::printf("writing %.1f GiB of 4 KiB records to %s (once) ...\n",
              bytes / double(1ull << 30), path.c_str());
  std::fflush(stdout);
  // Real bytes, not a sparse hole: holes would be "read" without any I/O.
  constexpr size_t kChunk = 8 << 20;
  ZOOM_ASSIGN_OR_RETURN(AlignedBuffer buf, AlignedBuffer::Allocate(kChunk, 4096));
  std::mt19937_64 rng(42);
  Stopwatch sw;
  for (uint64_t off = 0; off < bytes; off += kChunk) {
    auto* words = buf.as<uint64_t>();
    for (size_t i = 0; i < kChunk / 8; ++i) words[i] = rng();
    for (size_t r = 0; r < kChunk / kRecord; ++r) {
      const uint64_t record = (off / kRecord) + r;  // stamp: record number
      std::memcpy(buf.data() + r * kRecord, &record, 8);
    }
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kChunk, bytes - off));
    if (::pwrite(fd, buf.data(), n, static_cast<off_t>(off)) !=
        static_cast<ssize_t>(n)) {
      return storage::ErrnoStatus(errno, absl::StrCat("write ", path));
    }
  }
  if (::fdatasync(fd) != 0) return storage::ErrnoStatus(errno, "fdatasync");
  // Drop it from the page cache (O_DIRECT would bypass it anyway).
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  std::printf("  written in %.1f s\n", sw.ElapsedSeconds());
  return absl::OkStatus();
}

struct IoResult {
  std::string backend;
  bool registered = false;
  int k_prime = 0;
  int threads = 0;
  double p50_us = 0, p99_us = 0, p999_us = 0;
  double reads_per_s = 0, mb_per_s = 0;
  uint64_t queries = 0;
  uint64_t errors = 0;
};

absl::StatusOr<IoResult> RunOne(const storage::BlockReader& reader,
                                uint64_t records, int k_prime, int threads,
                                double seconds) {
  std::vector<std::vector<double>> lat(threads);
  std::atomic<uint64_t> errors{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> pool;
  Stopwatch wall;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::mt19937_64 rng(1000 + t * 7919 + k_prime);
      std::vector<storage::ReadRequest> reqs(k_prime);
      auto scratch = reader.Scratch(k_prime * kRecord);
      if (!scratch.ok()) {
        errors += 1;
        return;
      }
      lat[t].reserve(1 << 16);
      while (!stop.load(std::memory_order_relaxed)) {
        for (int i = 0; i < k_prime; ++i) {
          reqs[i].offset = (rng() % records) * kRecord;
          reqs[i].len = kRecord;
          reqs[i].buffer = *scratch + i * kRecord;
        }
        Stopwatch sw;
        const absl::Status st = reader.ReadBatch(absl::MakeSpan(reqs));
        lat[t].push_back(sw.ElapsedMicros());
        if (!st.ok()) ++errors;
        for (int i = 0; i < k_prime; ++i) {
          uint64_t stamp;
          std::memcpy(&stamp, reqs[i].buffer, 8);
          if (!reqs[i].status.ok() || stamp != reqs[i].offset / kRecord) ++errors;
        }
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& th : pool) th.join();
  const double elapsed = wall.ElapsedSeconds();
  std::vector<double> all;
  for (auto& v : lat) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  IoResult r;
  r.k_prime = k_prime;
  r.threads = threads;
  r.queries = all.size();
  r.errors = errors.load();
  r.p50_us = Percentile(all, 50);
  r.p99_us = Percentile(all, 99);
  r.p999_us = Percentile(all, 99.9);
  r.reads_per_s = static_cast<double>(all.size()) * k_prime / elapsed;
  r.mb_per_s = r.reads_per_s * kRecord / 1e6;
  return r;
}

// Pulls the number after `"key" :` that follows `from` in fio's JSON.
double JsonNumberAfter(const std::string& json, size_t from,
                       const std::string& key) {
  const size_t k = json.find("\"" + key + "\"", from);
  if (k == std::string::npos) return -1;
  const size_t colon = json.find(':', k);
  double v = -1;
  const size_t end = json.find_first_of(",}\n", colon + 1);
  std::string num(json.substr(colon + 1, end - colon - 1));
  num.erase(std::remove(num.begin(), num.end(), ' '), num.end());
  if (!absl::SimpleAtod(num, &v)) return -1;
  return v;
}

struct FioResult {
  int iodepth = 0;
  double iops = -1, p50_us = -1, p99_us = -1;
};

absl::StatusOr<FioResult> RunFio(const std::string& path, uint64_t bytes,
                                 int iodepth, double seconds) {
  const std::string cmd = absl::StrCat(
      "fio --name=r --filename=", path, " --size=", bytes,
      " --rw=randread --bs=4k --direct=1 --time_based --runtime=",
      std::max(1, static_cast<int>(seconds)),
      " --ioengine=io_uring --iodepth=", iodepth,
      " --output-format=json 2>/dev/null");
  ZOOM_ASSIGN_OR_RETURN(const std::string out, RunCommand(cmd));
  FioResult r;
  r.iodepth = iodepth;
  const size_t read = out.find("\"read\"");
  if (read == std::string::npos) {
    return absl::InternalError("cannot parse fio's JSON output");
  }
  r.iops = JsonNumberAfter(out, read, "iops");
  const size_t clat = out.find("\"clat_ns\"", read);
  r.p50_us = JsonNumberAfter(out, clat, "50.000000") / 1000.0;
  r.p99_us = JsonNumberAfter(out, clat, "99.000000") / 1000.0;
  return r;
}

absl::StatusOr<std::vector<int>> ParseInts(const std::string& s) {
  std::vector<int> out;
  for (absl::string_view part : absl::StrSplit(s, ',', absl::SkipEmpty())) {
    int v;
    if (!absl::SimpleAtoi(part, &v) || v <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("bad number '", part, "' in '", s, "'"));
    }
    out.push_back(v);
  }
  return out;
}

// The workload: Setup writes the file (once) and reads the flags; Run runs
// fio before, the fullview simulation's rows, fio again after; Report prints
// the two ratios the foundation issue asks for.
class IoWorkload : public Workload {
 public:
  absl::Status Setup() override;
  absl::Status Run(JsonLines& rep) override;
  absl::Status Report(JsonLines& rep) override;

 private:
  struct Variant {
    storage::IoBackend backend;
    bool registered;
  };
  absl::Status Fio(int qd, JsonLines& rep);
  // One row: `variant` at K' = k from t threads; skipped (a line says why)
  // when the backend cannot be made here.
  absl::Status Simulate(const Variant& variant, int k, int t, Table& table, JsonLines& rep);
  const IoResult* Find(const std::string& backend, bool registered, int k, int t) const;

  std::string path_;
  uint64_t bytes_ = 0, records_ = 0;
  double seconds_ = 0;
  std::vector<int> kprimes_, threads_;
  bool use_fio_ = false;
  std::vector<FioResult> fio_;
  std::vector<IoResult> results_;
};

absl::Status IoWorkload::Setup() {
  path_ = absl::GetFlag(FLAGS_io_file);
  bytes_ = AlignUp(static_cast<uint64_t>(absl::GetFlag(FLAGS_io_file_gib) * (1ull << 30)),
                   8 << 20);
  seconds_ = absl::GetFlag(FLAGS_io_seconds);
  ZOOM_ASSIGN_OR_RETURN(kprimes_, ParseInts(absl::GetFlag(FLAGS_io_kprime)));
  ZOOM_ASSIGN_OR_RETURN(threads_, ParseInts(absl::GetFlag(FLAGS_io_threads)));
  ZOOM_RETURN_IF_ERROR(EnsureFile(path_, bytes_));
  records_ = bytes_ / kRecord;
  use_fio_ = absl::GetFlag(FLAGS_io_fio) && ::access("/usr/bin/fio", X_OK) == 0;
  return absl::OkStatus();
}

absl::Status IoWorkload::Fio(int qd, JsonLines& rep) {
  ZOOM_ASSIGN_OR_RETURN(FioResult f, RunFio(path_, bytes_, qd, seconds_));
  fio_.push_back(f);
  std::printf("  fio QD%-4d  %9.0f IOPS  p50 %7.0f us  p99 %7.0f us\n", qd,
              f.iops, f.p50_us, f.p99_us);
  rep.Line({{"name", std::string("fio")},
            {"iodepth", int64_t{qd}},
            {"reads_per_s", f.iops},
            {"p50_us", f.p50_us},
            {"p99_us", f.p99_us},
            {"mb_per_s", f.iops * kRecord / 1e6}});
  return absl::OkStatus();
}

absl::Status IoWorkload::Simulate(const Variant& v, int k, int t, Table& table, JsonLines& rep) {
  storage::BlockReaderOptions opt;
  opt.backend = v.backend;
  opt.register_file = v.registered;
  opt.register_buffers = v.registered;
  auto reader = storage::MakeBlockReader(path_, opt);
  if (!reader.ok()) {
    std::printf("  %s: %s\n", std::string(storage::IoBackendName(v.backend)).c_str(),
                reader.status().ToString().c_str());
    return absl::OkStatus();
  }
  if (!(*reader)->direct_io()) {
    return absl::FailedPreconditionError(
        "the io file is not on a file system with O_DIRECT: figures would be page-cache figures");
  }
  ZOOM_ASSIGN_OR_RETURN(IoResult r, RunOne(**reader, records_, k, t, seconds_));
  r.backend = std::string(storage::IoBackendName(v.backend));
  r.registered = v.registered;
  if (r.errors > 0) {
    return absl::DataLossError(absl::StrCat(r.errors, " read errors or wrong records in ",
                                            r.backend, " K'=", k));
  }
  table.Row({r.backend, r.registered ? "yes" : "no", absl::StrCat(k),
             absl::StrCat(t), absl::StrCat(r.queries), Fmt(r.p50_us),
             Fmt(r.p99_us), Fmt(r.p999_us), Fmt(r.reads_per_s, 0),
             Fmt(r.mb_per_s)});
  rep.Line({{"backend", r.backend},
            {"registered", r.registered},
            {"k_prime", int64_t{k}},
            {"threads", int64_t{t}},
            {"queries", static_cast<int64_t>(r.queries)},
            {"p50_us", r.p50_us},
            {"p99_us", r.p99_us},
            {"p999_us", r.p999_us},
            {"reads_per_s", r.reads_per_s},
            {"mb_per_s", r.mb_per_s}});
  results_.push_back(r);
  return absl::OkStatus();
}

absl::Status IoWorkload::Run(JsonLines& rep) {
  if (use_fio_) {
    std::printf("fio (random 4 KiB, direct=1, io_uring, %.0f s each):\n", seconds_);
    for (int qd : {1, 32, 128}) ZOOM_RETURN_IF_ERROR(Fio(qd, rep));
  } else {
    std::printf("fio not found (apt-get install fio) or --noio_fio: no device figures\n");
  }
  std::vector<Variant> variants = {{storage::IoBackend::kIoUring, true}};
  if (absl::GetFlag(FLAGS_io_plain_uring)) {
    variants.push_back({storage::IoBackend::kIoUring, false});
  }
  variants.push_back({storage::IoBackend::kPread, false});

  std::printf("\nfullview simulation: K' random 4 KiB records per query, O_DIRECT, %.0f s each\n",
              seconds_);
  Table table({"backend", "registered", "K'", "threads", "queries", "p50_us",
               "p99_us", "p99.9_us", "reads/s", "MB/s"});
  for (int k : kprimes_) {
    for (int t : threads_) {
      for (const Variant& v : variants) ZOOM_RETURN_IF_ERROR(Simulate(v, k, t, table, rep));
    }
  }
  if (use_fio_) {
    std::printf("\nfio again after the runs (the disk drifts):\n");
    ZOOM_RETURN_IF_ERROR(Fio(128, rep));
  }
  return absl::OkStatus();
}

const IoResult* IoWorkload::Find(const std::string& backend, bool registered, int k,
                                 int t) const {
  for (const IoResult& r : results_) {
    if (r.backend == backend && r.registered == registered && r.k_prime == k && r.threads == t) {
      return &r;
    }
  }
  return nullptr;
}

absl::Status IoWorkload::Report(JsonLines& /*rep*/) {
  std::printf("\nsummary:\n");
  for (int t : threads_) {
    const IoResult* u = Find("io_uring", true, 100, t);
    const IoResult* p = Find("pread", false, 100, t);
    if (u && p) {
      std::printf("  K'=100, %d thread(s): pread-loop p50 / io_uring-batch p50 = %.1fx\n", t,
                  p->p50_us / u->p50_us);
    }
  }
  if (!use_fio_) return absl::OkStatus();
  double fio128 = 0;
  int n128 = 0;
  for (const FioResult& f : fio_) {
    if (f.iodepth == 128) {
      fio128 += f.iops;
      ++n128;
    }
  }
  fio128 /= std::max(1, n128);
  double best = 0;
  int best_k = 0;
  for (const IoResult& r : results_) {
    if (r.backend == "io_uring" && r.threads == 2 && r.reads_per_s > best) {
      best = r.reads_per_s;
      best_k = r.k_prime;
    }
  }
  if (best > 0) {
    std::printf("  io_uring at 2 threads (best K'=%d): %.0f reads/s = %.0f%% of fio QD128 "
                "(mean of the runs before and after: %.0f IOPS)\n",
                best_k, best, 100.0 * best / fio128, fio128);
  }
  return absl::OkStatus();
}

const RegisterWorkload kRegisterIo("io", RunWorkload<IoWorkload>);

}  // namespace
}  // namespace zoom::bench
