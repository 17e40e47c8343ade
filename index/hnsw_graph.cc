#include "index/hnsw_graph.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace zoom::index {
namespace {

constexpr int kMaxLevel = 30;
constexpr float kInf = std::numeric_limits<float>::infinity();

// Link entries are read while another thread may rewrite them (parallel
// build, or Add during searches): relaxed atomic accesses make that defined.
inline uint32_t LoadRelaxed(const uint32_t* p) {
  return std::atomic_ref<uint32_t>(*const_cast<uint32_t*>(p))
      .load(std::memory_order_relaxed);
}
inline uint32_t LoadCount(const uint32_t* p) {
  return std::atomic_ref<uint32_t>(*const_cast<uint32_t*>(p))
      .load(std::memory_order_acquire);
}
inline void StoreRelaxed(uint32_t* p, uint32_t v) {
  std::atomic_ref<uint32_t>(*p).store(v, std::memory_order_relaxed);
}
inline void StoreCount(uint32_t* p, uint32_t v) {
  std::atomic_ref<uint32_t>(*p).store(v, std::memory_order_release);
}

struct ByDistanceGreater {
  bool operator()(const Neighbor& a, const Neighbor& b) const { return b < a; }
};

// Distances from one stored point, through the build oracle.
class OracleComputer final : public DistanceComputer {
 public:
  OracleComputer(const BuildOracle& oracle, InternalId from)
      : oracle_(oracle), from_(from) {}
  void Distances(const InternalId* ids, size_t n, float* out) override {
    for (size_t i = 0; i < n; ++i) out[i] = oracle_.Between(from_, ids[i]);
  }

 private:
  const BuildOracle& oracle_;
  const InternalId from_;
};

}  // namespace

absl::Status HnswOptions::Validate() const {
  if (M < 2 || M > 256) {
    return absl::InvalidArgumentError(absl::StrCat("HNSW M ", M, " out of range 2..256"));
  }
  if (ef_construction < 1 || ef_construction > 4096) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ef_construction ", ef_construction, " out of range 1..4096"));
  }
  return absl::OkStatus();
}

void HnswScratch::Begin(size_t n) {
  if (visited.size() < n) visited.resize(n + n / 4 + 64, 0);
  if (++epoch == 0) {
    std::fill(visited.begin(), visited.end(), 0);
    epoch = 1;
  }
  candidates.clear();
  results.clear();
}

HnswGraph::HnswGraph(const HnswOptions& options)
    : options_(options),
      level0_(1 + 2 * size_t{options.M}),
      levels_(1),
      upper_(1),
      locks_(new std::mutex[kLockStripes]),
      rng_(options.seed) {}

HnswGraph::~HnswGraph() {
  const uint64_t n = size();
  for (uint64_t i = 0; i < n; ++i) delete[] * upper_.Row(i);
}

uint32_t* HnswGraph::Links(InternalId id, int level) {
  if (level == 0) return level0_.Row(id);
  return *upper_.Row(id) + size_t(level - 1) * (1 + options_.M);
}
const uint32_t* HnswGraph::Links(InternalId id, int level) const {
  if (level == 0) return level0_.Row(id);
  return *upper_.Row(id) + size_t(level - 1) * (1 + options_.M);
}

int HnswGraph::DrawLevel() {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const double mult = 1.0 / std::log(double(options_.M));
  const double r = -std::log(std::max(u(rng_), 1e-12)) * mult;
  return std::min(kMaxLevel, static_cast<int>(r));
}

void HnswGraph::Grow(uint64_t n) {
  const uint64_t old = size();
  if (n <= old) return;
  level0_.Grow(n);
  levels_.Grow(n);
  upper_.Grow(n);
  for (uint64_t id = old; id < n; ++id) {
    const int level = DrawLevel();
    *levels_.Row(id) = static_cast<uint8_t>(level);
    if (level > 0) {
      const size_t words = size_t(level) * (1 + options_.M);
      *upper_.Row(id) = new uint32_t[words]();
      upper_bytes_ += words * sizeof(uint32_t);
    }
  }
  size_.store(n, std::memory_order_release);
}

uint64_t HnswGraph::ResidentBytes() const {
  return level0_.ResidentBytes() + levels_.ResidentBytes() +
         upper_.ResidentBytes() + upper_bytes_;
}

Neighbor HnswGraph::Greedy(DistanceComputer& dc, Neighbor cur, int level,
                           QueryStats* stats) const {
  InternalId ids[257];
  float dist[257];
  bool changed = true;
  while (changed) {
    changed = false;
    const uint32_t* links = Links(cur.id, level);
    const uint32_t cnt = std::min(LoadCount(links), MaxLinks(level));
    for (uint32_t i = 0; i < cnt; ++i) ids[i] = LoadRelaxed(links + 1 + i);
    dc.Distances(ids, cnt, dist);
    if (stats) {
      stats->distance_evals += cnt;
      ++stats->hops;
    }
    for (uint32_t i = 0; i < cnt; ++i) {
      if (dist[i] < cur.distance) {
        cur = {dist[i], ids[i]};
        changed = true;
      }
    }
  }
  return cur;
}

void HnswGraph::SearchLevel(DistanceComputer& dc, Neighbor entry, size_t ef,
                            int level, const IdFilter* filter, HnswScratch& s,
                            QueryStats* stats) const {
  const ByDistanceGreater greater;
  s.candidates.clear();
  s.results.clear();
  s.Visit(entry.id);
  s.candidates.push_back(entry);
  if (filter == nullptr || !filter->IsExcluded(entry.id)) s.results.push_back(entry);
  float bound = s.results.empty() ? kInf : s.results.front().distance;
  const size_t visited_limit = s.visited.size();
  s.batch_ids.resize(2 * size_t{options_.M} + 1);
  s.batch_dist.resize(2 * size_t{options_.M} + 1);
  while (!s.candidates.empty()) {
    const Neighbor c = s.candidates.front();
    if (c.distance > bound && s.results.size() >= ef) break;
    std::pop_heap(s.candidates.begin(), s.candidates.end(), greater);
    s.candidates.pop_back();
    const uint32_t* links = Links(c.id, level);
    const uint32_t cnt = std::min(LoadCount(links), MaxLinks(level));
    size_t n = 0;
    for (uint32_t i = 0; i < cnt; ++i) {
      const uint32_t nb = LoadRelaxed(links + 1 + i);
      if (nb < visited_limit && s.Visit(nb)) s.batch_ids[n++] = nb;
    }
    if (stats) {
      stats->distance_evals += n;
      ++stats->hops;
    }
    if (n == 0) continue;
    dc.Distances(s.batch_ids.data(), n, s.batch_dist.data());
    for (size_t i = 0; i < n; ++i) {
      const float d = s.batch_dist[i];
      if (s.results.size() < ef || d < bound) {
        const Neighbor nb{d, s.batch_ids[i]};
        s.candidates.push_back(nb);
        std::push_heap(s.candidates.begin(), s.candidates.end(), greater);
        if (filter == nullptr || !filter->IsExcluded(nb.id)) {
          s.results.push_back(nb);
          std::push_heap(s.results.begin(), s.results.end());
          if (s.results.size() > ef) {
            std::pop_heap(s.results.begin(), s.results.end());
            s.results.pop_back();
          }
          bound = s.results.front().distance;
        }
      }
    }
  }
}

void HnswGraph::Search(DistanceComputer& dc, size_t ef, const IdFilter* filter,
                       HnswScratch& scratch, std::vector<Neighbor>* out,
                       QueryStats* stats) const {
  out->clear();
  const uint64_t e = entry_.load(std::memory_order_acquire);
  if (e == kNoEntry || ef == 0) return;
  const int top = static_cast<int>(e >> 32);
  Neighbor cur{dc.Distance(static_cast<InternalId>(e)), static_cast<InternalId>(e)};
  for (int l = top; l > 0; --l) cur = Greedy(dc, cur, l, stats);
  scratch.Begin(size());
  SearchLevel(dc, cur, ef, 0, filter, scratch, stats);
  out->assign(scratch.results.begin(), scratch.results.end());
  std::sort(out->begin(), out->end());
}

void HnswGraph::SelectNeighbors(std::vector<Neighbor>& cands, uint32_t max,
                                const BuildOracle& oracle) const {
  if (cands.size() <= max) return;
  size_t kept = 0;
  for (size_t i = 0; i < cands.size() && kept < max; ++i) {
    const Neighbor c = cands[i];
    bool good = true;
    for (size_t j = 0; j < kept; ++j) {
      if (oracle.Between(c.id, cands[j].id) < c.distance) {
        good = false;
        break;
      }
    }
    if (good) cands[kept++] = c;
  }
  cands.resize(kept);
}

void HnswGraph::Insert(InternalId id, const BuildOracle& oracle,
                       HnswScratch& s) {
  const int level = *levels_.Row(id);
  std::unique_lock<std::mutex> entry_lock(entry_mu_, std::defer_lock);
  uint64_t e = entry_.load(std::memory_order_acquire);
  if (e == kNoEntry || level > static_cast<int>(e >> 32)) {
    entry_lock.lock();  // may raise the entry point: serialise
    e = entry_.load(std::memory_order_acquire);
  }
  if (e == kNoEntry) {
    entry_.store((uint64_t(level) << 32) | id, std::memory_order_release);
    return;
  }
  const int top = static_cast<int>(e >> 32);
  OracleComputer dc(oracle, id);
  const auto ep = static_cast<InternalId>(e);
  Neighbor cur{oracle.Between(id, ep), ep};
  for (int l = top; l > level; --l) cur = Greedy(dc, cur, l, nullptr);
  std::vector<Neighbor> cands;
  for (int l = std::min(level, top); l >= 0; --l) {
    s.Begin(size());
    s.Visit(id);
    SearchLevel(dc, cur, options_.ef_construction, l, nullptr, s, nullptr);
    cands.assign(s.results.begin(), s.results.end());
    std::sort(cands.begin(), cands.end());
    cands.erase(std::remove_if(cands.begin(), cands.end(),
                               [id](const Neighbor& n) { return n.id == id; }),
                cands.end());
    if (cands.empty()) continue;
    const Neighbor next = cands.front();
    SelectNeighbors(cands, options_.M, oracle);
    {
      std::lock_guard<std::mutex> lock(LockFor(id));
      uint32_t* mine = Links(id, l);
      const uint32_t cnt = static_cast<uint32_t>(cands.size());
      for (uint32_t i = 0; i < cnt; ++i) StoreRelaxed(mine + 1 + i, cands[i].id);
      StoreCount(mine, cnt);
    }
    const uint32_t max_links = MaxLinks(l);
    std::vector<Neighbor> theirs;
    for (const Neighbor& nb : cands) {
      std::lock_guard<std::mutex> lock(LockFor(nb.id));
      uint32_t* links = Links(nb.id, l);
      const uint32_t cnt = LoadCount(links);
      bool present = false;
      for (uint32_t i = 0; i < cnt; ++i) present |= links[1 + i] == id;
      if (present) continue;
      if (cnt < max_links) {
        StoreRelaxed(links + 1 + cnt, id);
        StoreCount(links, cnt + 1);
        continue;
      }
      theirs.clear();
      theirs.push_back({nb.distance, id});
      for (uint32_t i = 0; i < cnt; ++i) {
        theirs.push_back({oracle.Between(nb.id, links[1 + i]), links[1 + i]});
      }
      std::sort(theirs.begin(), theirs.end());
      SelectNeighbors(theirs, max_links, oracle);
      for (uint32_t i = 0; i < theirs.size(); ++i) StoreRelaxed(links + 1 + i, theirs[i].id);
      StoreCount(links, static_cast<uint32_t>(theirs.size()));
    }
    cur = next;
  }
  if (level > top) {
    entry_.store((uint64_t(level) << 32) | id, std::memory_order_release);
  }
}

void HnswGraph::Save(BinaryWriter& w) const {
  const uint64_t n = size();
  w.Put<uint32_t>(options_.M);
  w.Put<uint32_t>(options_.ef_construction);
  w.Put<uint64_t>(options_.seed);
  w.Put<uint64_t>(n);
  w.Put<uint64_t>(entry_.load());
  const size_t row = 1 + 2 * size_t{options_.M};
  for (uint64_t i = 0; i < n; ++i) {
    const uint8_t level = *levels_.Row(i);
    w.Put<uint8_t>(level);
    w.PutBytes(level0_.Row(i), row * sizeof(uint32_t));
    if (level > 0) {
      w.PutBytes(*upper_.Row(i), size_t{level} * (1 + options_.M) * sizeof(uint32_t));
    }
  }
}

absl::Status HnswGraph::Load(BinaryReader& r) {
  if (size() != 0) return absl::FailedPreconditionError("Load into a non-empty graph");
  uint64_t n = 0, entry = 0;
  ZOOM_RETURN_IF_ERROR(r.Get(&options_.M));
  ZOOM_RETURN_IF_ERROR(r.Get(&options_.ef_construction));
  ZOOM_RETURN_IF_ERROR(r.Get(&options_.seed));
  ZOOM_RETURN_IF_ERROR(r.Get(&n));
  ZOOM_RETURN_IF_ERROR(r.Get(&entry));
  if (!options_.Validate().ok() || level0_.width() != 1 + 2 * size_t{options_.M}) {
    return r.Corrupt("HNSW options do not match the index");
  }
  const size_t row = 1 + 2 * size_t{options_.M};
  if (n > r.remaining() / (1 + row * sizeof(uint32_t))) return r.Corrupt("HNSW node count");
  level0_.Grow(n);
  levels_.Grow(n);
  upper_.Grow(n);
  for (uint64_t i = 0; i < n; ++i) {
    uint8_t level = 0;
    ZOOM_RETURN_IF_ERROR(r.Get(&level));
    if (level > kMaxLevel) return r.Corrupt("HNSW level out of range");
    *levels_.Row(i) = level;
    ZOOM_RETURN_IF_ERROR(r.GetBytes(level0_.Row(i), row * sizeof(uint32_t)));
    if (level > 0) {
      const size_t words = size_t{level} * (1 + options_.M);
      *upper_.Row(i) = new uint32_t[words];
      upper_bytes_ += words * sizeof(uint32_t);
      ZOOM_RETURN_IF_ERROR(r.GetBytes(*upper_.Row(i), words * sizeof(uint32_t)));
    }
  }
  // Validate every link so that a corrupt file cannot send a search astray.
  for (uint64_t i = 0; i < n; ++i) {
    for (int l = 0; l <= *levels_.Row(i); ++l) {
      const uint32_t* links = Links(static_cast<InternalId>(i), l);
      if (links[0] > MaxLinks(l)) return r.Corrupt("HNSW link count");
      for (uint32_t k = 0; k < links[0]; ++k) {
        if (links[1 + k] >= n || *levels_.Row(links[1 + k]) < l) {
          return r.Corrupt("HNSW link out of range");
        }
      }
    }
  }
  if (entry != kNoEntry &&
      ((entry & 0xffffffffu) >= n ||
       static_cast<int>(entry >> 32) != *levels_.Row(entry & 0xffffffffu))) {
    return r.Corrupt("HNSW entry point");
  }
  if (entry == kNoEntry && n > 0) {
    // Nodes without an entry point: a file of a graph with no inserts.
  }
  entry_.store(entry);
  size_.store(n, std::memory_order_release);
  return absl::OkStatus();
}

}  // namespace zoom::index
