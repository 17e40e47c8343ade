#include "index/hnsw_graph.h"

#include <algorithm>
#include <bit>
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

// The scored batch s.batch_ids/batch_dist[0, n) into the candidates (those
// within the bound, or all while fewer than ef results) and, unless
// excluded, the results (kept at ef); returns the new bound.
float AdmitBatch(HnswScratch& s, size_t n, size_t ef, const IdFilter* filter, float bound) {
  const ByDistanceGreater greater;
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
  return bound;
}

}  // namespace

// Level-0 lists of nodes [0, n), each: u16 header (count in bits 0-9, gap
// width in bits 10-15), then a little-endian bit stream: the smallest link
// in `first_bits` bits, then each further link as (gap - 1) in `width` bits,
// ascending. Offsets: a u64 base per group of 16 nodes plus a u16 per node
// (a group holds at most 16 * (2 + 4 + 511 * 4) bytes < 64 KiB at M <= 256).
// The packed bytes are read with unaligned little-endian loads.
static_assert(std::endian::native == std::endian::little);

struct HnswGraph::PackedLevel0 {
  static constexpr int kGroupShift = 4;
  uint64_t n = 0;
  uint32_t first_bits = 1;
  std::vector<uint64_t> group_base;
  std::vector<uint16_t> rel;
  std::vector<uint8_t> bytes;  // + 8 bytes of padding for 64-bit loads

  uint32_t Decode(uint64_t id, uint32_t* out) const {
    const uint8_t* p = bytes.data() + group_base[id >> kGroupShift] + rel[id];
    uint16_t header;
    std::memcpy(&header, p, sizeof(header));
    const uint32_t count = header & 0x3ffu;
    if (count == 0) return 0;
    const uint32_t width = header >> 10;
    p += sizeof(header);
    uint64_t bit = 0;
    const auto get = [&](uint32_t w) {
      uint64_t v;
      std::memcpy(&v, p + (bit >> 3), sizeof(v));
      v >>= bit & 7;
      bit += w;
      return static_cast<uint32_t>(v & ((uint64_t{1} << w) - 1));
    };
    uint32_t prev = get(first_bits);
    out[0] = prev;
    for (uint32_t i = 1; i < count; ++i) {
      prev += get(width) + 1;
      out[i] = prev;
    }
    return count;
  }

  uint64_t Bytes() const {
    return bytes.capacity() + group_base.capacity() * sizeof(uint64_t) +
           rel.capacity() * sizeof(uint16_t);
  }
};

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
      level0_(
          std::make_unique<ChunkedArray<uint32_t>>(1 + 2 * size_t{options.M})),
      levels_(1),
      upper_first_(1),
      upper_rows_(1 + size_t{options.M}),
      slot_(std::make_unique<ChunkedArray<uint32_t>>(1)),
      locks_(new std::mutex[kLockStripes]),
      rng_(options.seed) {}

HnswGraph::~HnswGraph() = default;

uint32_t HnswGraph::GetLinks(InternalId id, int level, uint32_t* out) const {
  const uint32_t* row;
  if (level > 0) {
    row = UpperRow(id, level);
  } else if (packed_ == nullptr) {
    row = level0_->Row(id);
  } else {
    uint32_t slot = 0;
    if (id < slots_n_.load(std::memory_order_acquire))
      slot = LoadCount(slot_->Row(id));
    if (slot == 0) return id < packed_->n ? packed_->Decode(id, out) : 0;
    row = level0_->Row(slot - 1);
  }
  const uint32_t cnt = std::min(LoadCount(row), MaxLinks(level));
  for (uint32_t i = 0; i < cnt; ++i) out[i] = LoadRelaxed(row + 1 + i);
  return cnt;
}

void HnswGraph::Neighbors(InternalId id, int level,
                          std::vector<InternalId>* out) const {
  out->resize(MaxLinks(level));
  out->resize(GetLinks(id, level, out->data()));
}

void HnswGraph::EnsureSlots(uint64_t n) {
  std::lock_guard<std::mutex> lock(overlay_mu_);
  if (slots_n_.load(std::memory_order_relaxed) >= n) return;
  slot_->SetFirstChunk(n);  // the first time: exact for the packed nodes
  slot_->Grow(n);
  slots_n_.store(n, std::memory_order_release);
}

uint64_t HnswGraph::NewOverlayRow() {
  std::lock_guard<std::mutex> lock(overlay_mu_);
  const uint64_t row = overlay_rows_++;
  level0_->Grow(overlay_rows_);
  return row;
}

uint32_t* HnswGraph::MutableLinks(InternalId id, int level) {
  if (level > 0) return UpperRow(id, level);
  if (packed_ == nullptr) return level0_->Row(id);
  if (id >= slots_n_.load(std::memory_order_acquire)) EnsureSlots(size());
  uint32_t* slot = slot_->Row(id);
  uint32_t s = LoadCount(slot);
  if (s == 0) {  // packed: copy it to an overlay row, then publish the row
    const uint64_t row = NewOverlayRow();
    uint32_t* r = level0_->Row(row);
    r[0] = packed_->Decode(id, r + 1);
    s = static_cast<uint32_t>(row + 1);
    StoreCount(slot, s);
  }
  return level0_->Row(s - 1);
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
  if (old == 0) {  // the first (bulk) rows: exact, later growth geometric
    level0_->SetFirstChunk(n);
    levels_.SetFirstChunk(n);
    upper_first_.SetFirstChunk(n);
  }
  levels_.Grow(n);
  upper_first_.Grow(n);
  for (uint64_t id = old; id < n; ++id) {
    const int level = DrawLevel();
    *levels_.Row(id) = static_cast<uint8_t>(level);
    if (level > 0) {
      *upper_first_.Row(id) = static_cast<uint32_t>(upper_row_count_);
      upper_row_count_ += level;
      upper_rows_.Grow(upper_row_count_);
    }
  }
  if (packed_ == nullptr) {
    level0_->Grow(n);
  } else {
    // New nodes get overlay rows; the packed ones keep slot 0 until changed.
    // (No reader reaches the new ids before size_ below.)
    EnsureSlots(n);
    for (uint64_t id = old; id < n; ++id) {
      StoreCount(slot_->Row(id), static_cast<uint32_t>(NewOverlayRow() + 1));
    }
  }
  size_.store(n, std::memory_order_release);
}

void HnswGraph::Compact() {
  const uint64_t n = size();
  auto p = std::make_unique<PackedLevel0>();
  p->n = n;
  p->first_bits =
      std::max(1, static_cast<int>(std::bit_width(n > 1 ? n - 1 : 1)));
  p->group_base.resize((n + 15) >> PackedLevel0::kGroupShift);
  p->rel.resize(n);
  std::vector<uint32_t> links(MaxLinks(0));
  uint64_t base = 0;
  for (uint64_t id = 0; id < n; ++id) {
    if ((id & 15) == 0) {
      base = p->bytes.size();
      p->group_base[id >> PackedLevel0::kGroupShift] = base;
    }
    p->rel[id] = static_cast<uint16_t>(p->bytes.size() - base);
    uint32_t cnt = GetLinks(static_cast<InternalId>(id), 0, links.data());
    std::sort(links.begin(), links.begin() + cnt);
    cnt = static_cast<uint32_t>(
        std::unique(links.begin(), links.begin() + cnt) - links.begin());
    uint32_t max_gap = 0;
    for (uint32_t i = 1; i < cnt; ++i)
      max_gap = std::max(max_gap, links[i] - links[i - 1] - 1);
    const uint32_t width = static_cast<uint32_t>(std::bit_width(max_gap));
    const uint16_t header = static_cast<uint16_t>(cnt | (width << 10));
    p->bytes.push_back(static_cast<uint8_t>(header));
    p->bytes.push_back(static_cast<uint8_t>(header >> 8));
    uint64_t acc = 0;
    uint32_t bits = 0;
    const auto put = [&](uint64_t v, uint32_t w) {
      acc |= v << bits;
      bits += w;
      while (bits >= 8) {
        p->bytes.push_back(static_cast<uint8_t>(acc));
        acc >>= 8;
        bits -= 8;
      }
    };
    for (uint32_t i = 0; i < cnt; ++i) {
      if (i == 0) {
        put(links[0], p->first_bits);
      } else {
        put(links[i] - links[i - 1] - 1, width);
      }
    }
    if (bits > 0) p->bytes.push_back(static_cast<uint8_t>(acc));
  }
  p->bytes.resize(p->bytes.size() + 8, 0);
  p->bytes.shrink_to_fit();
  packed_ = std::move(p);
  // Drop the uncompressed rows and any overlay (no reader is in flight).
  level0_ =
      std::make_unique<ChunkedArray<uint32_t>>(1 + 2 * size_t{options_.M});
  overlay_rows_ = 0;
  slots_n_.store(0, std::memory_order_release);
  slot_ = std::make_unique<ChunkedArray<uint32_t>>(1);
}

uint64_t HnswGraph::ResidentBytes() const {
  return level0_->ResidentBytes() + levels_.ResidentBytes() +
         upper_first_.ResidentBytes() + upper_rows_.ResidentBytes() +
         slot_->ResidentBytes() + (packed_ != nullptr ? packed_->Bytes() : 0);
}

Neighbor HnswGraph::Greedy(DistanceComputer& dc, Neighbor cur, int level, QueryStats* stats,
                           InternalId hidden) const {
  InternalId ids[512];  // MaxLinks(0) <= 512
  float dist[512];
  bool changed = true;
  while (changed) {
    changed = false;
    const uint32_t cnt = GetLinks(cur.id, level, ids);
    dc.Distances(ids, cnt, dist);
    if (stats) {
      stats->distance_evals += cnt;
      ++stats->hops;
    }
    for (uint32_t i = 0; i < cnt; ++i) {
      if (dist[i] < cur.distance && ids[i] != hidden) {
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
  s.links.resize(2 * size_t{options_.M} + 1);
  while (!s.candidates.empty()) {
    const Neighbor c = s.candidates.front();
    if (c.distance > bound && s.results.size() >= ef) break;
    std::pop_heap(s.candidates.begin(), s.candidates.end(), greater);
    s.candidates.pop_back();
    const uint32_t cnt = GetLinks(c.id, level, s.links.data());
    size_t n = 0;
    for (uint32_t i = 0; i < cnt; ++i) {
      const uint32_t nb = s.links[i];
      if (nb < visited_limit && s.Visit(nb)) s.batch_ids[n++] = nb;
    }
    if (stats) {
      stats->distance_evals += n;
      ++stats->hops;
    }
    if (n == 0) continue;
    dc.Distances(s.batch_ids.data(), n, s.batch_dist.data());
    bound = AdmitBatch(s, n, ef, filter, bound);
  }
}

bool HnswGraph::DescendToLevel0(DistanceComputer& dc, QueryStats* stats, Neighbor* cur,
                                InternalId hidden) const {
  const uint64_t e = entry_.load(std::memory_order_acquire);
  if (e == kNoEntry) return false;
  const int top = static_cast<int>(e >> 32);
  const auto entry = static_cast<InternalId>(e);
  // A hidden entry point is only where the descent starts: any neighbour
  // is better.
  *cur = {entry == hidden ? kInf : dc.Distance(entry), entry};
  for (int l = top; l > 0; --l) *cur = Greedy(dc, *cur, l, stats, hidden);
  if (cur->id == hidden) cur->distance = dc.Distance(hidden);
  return true;
}

void HnswGraph::Search(DistanceComputer& dc, size_t ef, const IdFilter* filter,
                       HnswScratch& scratch, std::vector<Neighbor>* out,
                       QueryStats* stats, InternalId hidden) const {
  out->clear();
  Neighbor cur;
  if (ef == 0 || !DescendToLevel0(dc, stats, &cur, hidden)) return;
  const uint64_t n = size();  // once: a writer may grow it meanwhile
  scratch.Begin(n);
  // Marked visited: never scored or expanded from here on.
  if (hidden < n && hidden != cur.id) scratch.Visit(hidden);
  SearchLevel(dc, cur, ef, 0, filter, scratch, stats);
  out->assign(scratch.results.begin(), scratch.results.end());
  std::sort(out->begin(), out->end());
}

void HnswGraph::SearchTwoHop(DistanceComputer& dc, size_t ef, const IdBitsView& allow,
                             const IdFilter* filter, HnswScratch& s,
                             std::vector<Neighbor>* out, QueryStats* stats) const {
  out->clear();
  Neighbor cur;
  if (ef == 0 || !DescendToLevel0(dc, stats, &cur)) return;
  s.Begin(size());
  const ByDistanceGreater greater;
  auto admit = [&](InternalId id) {
    return allow.Contains(id) && (filter == nullptr || !filter->IsExcluded(id));
  };
  s.candidates.clear();
  s.results.clear();
  s.through.clear();
  // The entry is expanded whether it matches or not (it is where the upper
  // levels led); only matching nodes join the candidates after it.
  s.Visit(cur.id);
  s.candidates.push_back(cur);
  if (admit(cur.id)) s.results.push_back(cur);
  float bound = s.results.empty() ? kInf : s.results.front().distance;
  const size_t visited_limit = s.visited.size();
  const size_t max0 = MaxLinks(0);
  s.links.resize(max0 + 1);
  s.links2.resize(max0 + 1);
  s.batch_ids.resize(max0 * (max0 + 1));
  s.batch_dist.resize(s.batch_ids.size());
  while (!s.candidates.empty()) {
    const Neighbor c = s.candidates.front();
    if (c.distance > bound && s.results.size() >= ef) break;
    std::pop_heap(s.candidates.begin(), s.candidates.end(), greater);
    s.candidates.pop_back();
    const uint32_t cnt = GetLinks(c.id, 0, s.links.data());
    size_t n = 0;
    for (uint32_t i = 0; i < cnt; ++i) {
      const uint32_t nb = s.links[i];
      if (nb >= visited_limit || !s.Visit(nb)) continue;
      if (allow.Contains(nb)) {
        s.batch_ids[n++] = nb;
        continue;
      }
      // A non-matching neighbour: its matching neighbours instead; when it
      // has none, it is walked through itself (scored, never a result), so
      // that regions without matches are crossed as the plain walk would.
      const uint32_t cnt2 = GetLinks(nb, 0, s.links2.data());
      bool any = false;
      for (uint32_t j = 0; j < cnt2; ++j) {
        const uint32_t nn = s.links2[j];
        if (nn >= visited_limit || !allow.Contains(nn)) continue;
        any = true;
        if (s.Visit(nn)) s.batch_ids[n++] = nn;
      }
      if (!any) s.through.push_back(nb);
    }
    if (!s.through.empty()) {
      s.through_dist.resize(s.through.size());
      dc.Distances(s.through.data(), s.through.size(), s.through_dist.data());
      if (stats) stats->distance_evals += s.through.size();
      for (size_t i = 0; i < s.through.size(); ++i) {
        if (s.results.size() < ef || s.through_dist[i] < bound) {
          s.candidates.push_back({s.through_dist[i], s.through[i]});
          std::push_heap(s.candidates.begin(), s.candidates.end(), greater);
        }
      }
      s.through.clear();
    }
    if (stats) {
      stats->distance_evals += n;
      ++stats->hops;
    }
    if (n == 0) continue;
    dc.Distances(s.batch_ids.data(), n, s.batch_dist.data());
    bound = AdmitBatch(s, n, ef, filter, bound);
  }
  out->assign(s.results.begin(), s.results.end());
  std::sort(out->begin(), out->end());
}

void HnswGraph::SelectNeighbors(std::vector<Neighbor>& cands, uint32_t max,
                                const BuildOracle& oracle) const {
  // No duplicate among cands (sorted: a duplicate of the node is first):
  // the classic heuristic, unchanged.
  const bool dedup = oracle.ZeroMeansIdentical() && !cands.empty() && cands.front().distance <= 0;
  if (cands.size() <= max && !dedup) return;
  constexpr uint32_t kMaxDuplicateLinks = 2;
  size_t kept = 0;
  uint32_t duplicates = 0;
  for (size_t i = 0; i < cands.size() && kept < max; ++i) {
    const Neighbor c = cands[i];
    if (dedup && c.distance <= 0 && duplicates >= kMaxDuplicateLinks) continue;
    bool good = true;
    for (size_t j = 0; j < kept; ++j) {
      // Closer to a kept neighbour than to the node (a duplicate of a kept
      // neighbour is: 0 < its distance).
      if (oracle.Between(c.id, cands[j].id) < c.distance) {
        good = false;
        break;
      }
    }
    if (!good) continue;
    duplicates += dedup && c.distance <= 0 ? 1 : 0;
    cands[kept++] = c;
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
  // Phase 1, top down: find and write this node's own links on every level.
  // Nobody links to it yet, so a concurrent search cannot reach it before
  // its lists down to level 0 exist (reached early, it would end a search
  // at a node with no level-0 links: a result of one).
  const int link_top = std::min(level, top);
  std::vector<std::vector<Neighbor>> chosen(static_cast<size_t>(link_top) + 1);
  for (int l = link_top; l >= 0; --l) {
    std::vector<Neighbor>& cands = chosen[static_cast<size_t>(l)];
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
      uint32_t* mine = MutableLinks(id, l);
      const uint32_t cnt = static_cast<uint32_t>(cands.size());
      for (uint32_t i = 0; i < cnt; ++i) StoreRelaxed(mine + 1 + i, cands[i].id);
      StoreCount(mine, cnt);
    }
    cur = next;
  }
  // Phase 2: the reverse links, which make the node reachable. (Sequential
  // inserts give the same graph as linking level by level: a level's search
  // reads only that level's lists.)
  std::vector<Neighbor> theirs;
  for (int l = link_top; l >= 0; --l) {
    const uint32_t max_links = MaxLinks(l);
    for (const Neighbor& nb : chosen[static_cast<size_t>(l)]) {
      std::lock_guard<std::mutex> lock(LockFor(nb.id));
      uint32_t* const cur_links =
          s.links.data();  // a copy; SearchLevel sized it
      const uint32_t cnt = GetLinks(nb.id, l, cur_links);
      bool present = false;
      for (uint32_t i = 0; i < cnt; ++i) present |= cur_links[i] == id;
      if (present) continue;
      uint32_t* links = MutableLinks(nb.id, l);
      if (cnt < max_links) {
        StoreRelaxed(links + 1 + cnt, id);
        StoreCount(links, cnt + 1);
        continue;
      }
      theirs.clear();
      theirs.push_back({nb.distance, id});
      for (uint32_t i = 0; i < cnt; ++i) {
        theirs.push_back({oracle.Between(nb.id, cur_links[i]), cur_links[i]});
      }
      std::sort(theirs.begin(), theirs.end());
      SelectNeighbors(theirs, max_links, oracle);
      for (uint32_t i = 0; i < theirs.size(); ++i) StoreRelaxed(links + 1 + i, theirs[i].id);
      StoreCount(links, static_cast<uint32_t>(theirs.size()));
    }
  }
  if (level > top) {
    entry_.store((uint64_t(level) << 32) | id, std::memory_order_release);
  }
}

void HnswGraph::Save(BinaryWriter& w) const {
  // One layout whatever the memory layout: per node its level, the level-0
  // row [count, 2M ids] (unused slots 0), then its upper rows.
  const uint64_t n = size();
  w.Put<uint32_t>(options_.M);
  w.Put<uint32_t>(options_.ef_construction);
  w.Put<uint64_t>(options_.seed);
  w.Put<uint64_t>(n);
  w.Put<uint64_t>(entry_.load());
  const size_t row = 1 + 2 * size_t{options_.M};
  std::vector<uint32_t> buf(row);
  for (uint64_t i = 0; i < n; ++i) {
    const uint8_t level = *levels_.Row(i);
    w.Put<uint8_t>(level);
    std::fill(buf.begin(), buf.end(), 0);
    buf[0] = GetLinks(static_cast<InternalId>(i), 0, buf.data() + 1);
    w.PutBytes(buf.data(), row * sizeof(uint32_t));
    for (int l = 1; l <= level; ++l) {
      w.PutBytes(UpperRow(static_cast<InternalId>(i), l),
                 (1 + options_.M) * sizeof(uint32_t));
    }
  }
}

absl::Status HnswGraph::Load(BinaryReader& r) {
  if (size() != 0 || packed_ != nullptr) {
    return absl::FailedPreconditionError("Load into a non-empty graph");
  }
  uint64_t n = 0, entry = 0;
  ZOOM_RETURN_IF_ERROR(r.Get(&options_.M));
  ZOOM_RETURN_IF_ERROR(r.Get(&options_.ef_construction));
  ZOOM_RETURN_IF_ERROR(r.Get(&options_.seed));
  ZOOM_RETURN_IF_ERROR(r.Get(&n));
  ZOOM_RETURN_IF_ERROR(r.Get(&entry));
  if (!options_.Validate().ok() ||
      level0_->width() != 1 + 2 * size_t{options_.M}) {
    return r.Corrupt("HNSW options do not match the index");
  }
  const size_t row = 1 + 2 * size_t{options_.M};
  if (n > r.remaining() / (1 + row * sizeof(uint32_t))) return r.Corrupt("HNSW node count");
  level0_->SetFirstChunk(n);
  levels_.SetFirstChunk(n);
  upper_first_.SetFirstChunk(n);
  level0_->Grow(n);
  levels_.Grow(n);
  upper_first_.Grow(n);
  for (uint64_t i = 0; i < n; ++i) {
    uint8_t level = 0;
    ZOOM_RETURN_IF_ERROR(r.Get(&level));
    if (level > kMaxLevel) return r.Corrupt("HNSW level out of range");
    *levels_.Row(i) = level;
    ZOOM_RETURN_IF_ERROR(r.GetBytes(level0_->Row(i), row * sizeof(uint32_t)));
    if (level > 0) {
      if (level > r.remaining() / ((1 + options_.M) * sizeof(uint32_t))) {
        return r.Corrupt("HNSW upper levels truncated");
      }
      *upper_first_.Row(i) = static_cast<uint32_t>(upper_row_count_);
      upper_row_count_ += level;
      upper_rows_.Grow(upper_row_count_);
      for (int l = 1; l <= level; ++l) {
        ZOOM_RETURN_IF_ERROR(r.GetBytes(UpperRow(static_cast<InternalId>(i), l),
                                        (1 + options_.M) * sizeof(uint32_t)));
      }
    }
  }
  // Validate every link so that a corrupt file cannot send a search astray.
  for (uint64_t i = 0; i < n; ++i) {
    for (int l = 0; l <= *levels_.Row(i); ++l) {
      const uint32_t* links =
          l == 0 ? level0_->Row(i) : UpperRow(static_cast<InternalId>(i), l);
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
  entry_.store(entry);
  size_.store(n, std::memory_order_release);
  return absl::OkStatus();
}

}  // namespace zoom::index
