// The id maps' RAM and speed at scale (issue 16): IdTracker (the forward
// table and the compact reverse map, id_map.h) against the absl hash map
// it replaced, for N points imported in batches of 1,000 the way
// Collection::Upsert does it (FindAll, then Set per point), then N random
// lookups. Three id patterns: an import of growing ids (0, 1, 2, ...),
// a dense set in random order, and random 64-bit ids. Prints bytes per
// point as counted (Bytes()) and as measured (the RSS growth), the import
// rate through the tracker and the lookup cost.
//
//   build/bench/zoom_id_map_bench [--n=10000000]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "server/engine/id_tracker.h"

ABSL_FLAG(uint64_t, n, 10000000, "points");

namespace zoom::server {
namespace {

uint64_t RssBytes() {
  std::ifstream in("/proc/self/statm");
  uint64_t pages = 0, resident = 0;
  in >> pages >> resident;
  return resident * 4096;
}

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
      .count();
}

std::vector<uint64_t> Ids(const std::string& pattern, uint64_t n) {
  std::vector<uint64_t> ids(n);
  std::mt19937_64 rng(42);
  if (pattern == "growing") {
    std::iota(ids.begin(), ids.end(), 0);
  } else if (pattern == "dense-shuffled") {
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
  } else {
    for (auto& x : ids) x = rng();
  }
  return ids;
}

void Run(const std::string& pattern, uint64_t n) {
  const std::vector<uint64_t> ext = Ids(pattern, n);
  std::vector<uint64_t> probes(n);
  {
    std::mt19937_64 rng(7);
    for (auto& p : probes) p = ext[rng() % n];
  }
  constexpr uint64_t kBatch = 1000;
  // IdTracker, as Collection::Upsert drives it.
  {
    const uint64_t rss0 = RssBytes();
    auto t = std::make_unique<IdTracker>();
    std::vector<std::optional<InternalId>> had;
    const auto t0 = std::chrono::steady_clock::now();
    for (uint64_t first = 0; first < n; first += kBatch) {
      const uint64_t m = std::min(kBatch, n - first);
      t->Reserve(first + m);
      t->FindAll(absl::MakeConstSpan(ext.data() + first, m), &had);
      for (uint64_t i = 0; i < m; ++i)
        t->Set(static_cast<InternalId>(first + i), ext[first + i]);
      for (const auto& h : had) {
        if (h.has_value()) t->Kill(*h);
      }
      t->Publish(first + m);
    }
    const double import_s = Seconds(t0);
    const uint64_t rss = RssBytes() - rss0;
    const auto t1 = std::chrono::steady_clock::now();
    uint64_t hits = 0;
    std::vector<std::optional<InternalId>> found;
    for (uint64_t first = 0; first < n; first += kBatch) {
      const uint64_t m = std::min(kBatch, n - first);
      t->FindAll(absl::MakeConstSpan(probes.data() + first, m), &found);
      for (const auto& f : found) hits += f.has_value();
    }
    const double find_s = Seconds(t1);
    std::printf(
        "%-15s IdTracker     N %9lu  counted %6.2f B/pt (map %5.2f)  RSS "
        "+%6.2f B/pt  "
        "import %5.2f M/s  find %6.1f ns  hits %lu\n",
        pattern.c_str(), static_cast<unsigned long>(n), 1.0 * t->Bytes() / n,
        1.0 * t->MapBytes() / n, 1.0 * rss / n, n / import_s / 1e6,
        find_s * 1e9 / n, static_cast<unsigned long>(hits));
  }
  // The hash map IdTracker held before (plus its forward table: the same
  // 8.125 bytes a record either way).
  {
    const uint64_t rss0 = RssBytes();
    auto map = std::make_unique<absl::flat_hash_map<uint64_t, InternalId>>();
    const auto t0 = std::chrono::steady_clock::now();
    for (uint64_t i = 0; i < n; ++i)
      (*map)[ext[i]] = static_cast<InternalId>(i);
    const double import_s = Seconds(t0);
    const uint64_t rss = RssBytes() - rss0;
    const auto t1 = std::chrono::steady_clock::now();
    uint64_t hits = 0;
    for (uint64_t i = 0; i < n; ++i) hits += map->contains(probes[i]);
    const double find_s = Seconds(t1);
    std::printf(
        "%-15s absl hash map N %9lu  counted %6.2f B/pt (map %5.2f)  RSS "
        "+%6.2f B/pt  "
        "insert %5.2f M/s  find %6.1f ns  hits %lu\n",
        pattern.c_str(), static_cast<unsigned long>(n),
        8.125 + 1.0 * map->capacity() *
                    (sizeof(std::pair<uint64_t, InternalId>) + 1) / n,
        1.0 * map->capacity() * (sizeof(std::pair<uint64_t, InternalId>) + 1) /
            n,
        8.125 + 1.0 * rss / n, n / import_s / 1e6, find_s * 1e9 / n,
        static_cast<unsigned long>(hits));
  }
}

}  // namespace
}  // namespace zoom::server

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const uint64_t n = absl::GetFlag(FLAGS_n);
  for (const char* p : {"growing", "dense-shuffled", "random64"})
    zoom::server::Run(p, n);
  return 0;
}
