#include "server/engine/id_tracker.h"

#include <algorithm>

#include "common/status_macros.h"

namespace zoom::server {

IdTracker::IdTracker() : blocks_(new std::atomic<Block*>[kMaxBlocks]) {
  for (uint32_t i = 0; i < kMaxBlocks; ++i) blocks_[i].store(nullptr, std::memory_order_relaxed);
}

IdTracker::~IdTracker() {
  for (uint32_t i = 0; i < kMaxBlocks; ++i) delete blocks_[i].load(std::memory_order_relaxed);
}

void IdTracker::Reserve(uint64_t n) {
  for (uint64_t b = 0; b * kBlockSize < n; ++b) {
    if (blocks_[b].load(std::memory_order_relaxed) == nullptr) {
      auto* block = new Block();
      for (auto& w : block->dead) w.store(~uint64_t{0}, std::memory_order_relaxed);
      blocks_[b].store(block, std::memory_order_release);
    }
  }
  if (n > reserved_.load(std::memory_order_relaxed)) reserved_.store(n, std::memory_order_relaxed);
}

void IdTracker::Set(InternalId id, uint64_t ext) {
  Block* block = blocks_[id >> kBlockBits].load(std::memory_order_relaxed);
  const uint32_t off = id & (kBlockSize - 1);
  block->ext[off] = ext;
  block->dead[off / 64].fetch_and(~(uint64_t{1} << (off % 64)), std::memory_order_release);
  bool merge = false;
  {
    absl::MutexLock m(&map_mu_);
    by_external_.Put(ext, id);
    live_.store(by_external_.size(), std::memory_order_relaxed);
    merge = by_external_.NeedsMerge();
  }
  if (merge) MaybeMerge();
}

void IdTracker::Kill(InternalId id) {
  Block* block = blocks_[id >> kBlockBits].load(std::memory_order_relaxed);
  const uint32_t off = id & (kBlockSize - 1);
  const uint64_t bit = uint64_t{1} << (off % 64);
  if (block->dead[off / 64].fetch_or(bit, std::memory_order_release) & bit) return;  // was dead
  bool merge = false;
  {
    absl::MutexLock m(&map_mu_);
    const uint64_t ext = block->ext[off];
    if (by_external_.Find(ext) == std::optional<InternalId>(id)) {
      by_external_.Erase(ext);
      live_.store(by_external_.size(), std::memory_order_relaxed);
      merge = by_external_.NeedsMerge();
    }
  }
  if (merge) MaybeMerge();
}

void IdTracker::MaybeMerge() {
  bool append = false;
  ExternalIdMap::Base merged;
  {
    // Readers go on during the merge: only this thread (the writer) changes the map.
    absl::ReaderMutexLock m(&map_mu_);
    if (!by_external_.NeedsMerge()) return;
    append = by_external_.CanAppend();
    if (!append) merged = by_external_.MergedBase();
  }
  absl::MutexLock m(&map_mu_);
  if (append) {
    by_external_.AppendDelta();  // O(delta)
  } else {
    by_external_.Install(std::move(merged));
  }
}

bool IdTracker::IsDead(InternalId id) const {
  const Block* block = blocks_[id >> kBlockBits].load(std::memory_order_acquire);
  if (block == nullptr) return true;
  const uint32_t off = id & (kBlockSize - 1);
  return (block->dead[off / 64].load(std::memory_order_acquire) >> (off % 64)) & 1;
}

void IdTracker::AndLive(uint64_t* words, uint64_t n) const {
  const uint64_t vis = std::min(n, visible());
  const uint64_t nwords = (n + 63) / 64;
  const uint64_t words_per_block = kBlockSize / 64;
  for (uint64_t w = 0; w < nwords; ++w) {
    const uint64_t first = w * 64;
    if (first >= vis) {
      words[w] = 0;
      continue;
    }
    const Block* block = blocks_[first >> kBlockBits].load(std::memory_order_acquire);
    if (block == nullptr) {
      words[w] = 0;
      continue;
    }
    uint64_t keep = ~block->dead[w % words_per_block].load(std::memory_order_acquire);
    if (vis - first < 64) keep &= (uint64_t{1} << (vis - first)) - 1;
    words[w] &= keep;
  }
}

uint64_t IdTracker::External(InternalId id) const {
  return blocks_[id >> kBlockBits].load(std::memory_order_acquire)->ext[id & (kBlockSize - 1)];
}

std::optional<InternalId> IdTracker::Find(uint64_t ext) const {
  absl::ReaderMutexLock m(&map_mu_);
  return by_external_.Find(ext);
}

void IdTracker::FindAll(absl::Span<const uint64_t> ext,
                        std::vector<std::optional<InternalId>>* out) const {
  out->resize(ext.size());
  absl::ReaderMutexLock m(&map_mu_);
  for (size_t i = 0; i < ext.size(); ++i) (*out)[i] = by_external_.Find(ext[i]);
}

std::vector<std::pair<InternalId, uint64_t>> IdTracker::LiveRecords() const {
  std::vector<std::pair<InternalId, uint64_t>> out;
  out.reserve(live());
  const uint64_t v = visible();
  for (uint64_t i = 0; i < v; ++i) {
    const InternalId id = static_cast<InternalId>(i);
    if (!IsDead(id)) out.emplace_back(id, External(id));
  }
  return out;
}

uint64_t IdTracker::MapBytes() const {
  absl::ReaderMutexLock m(&map_mu_);
  return by_external_.Bytes();
}

uint64_t IdTracker::Bytes() const {
  const uint64_t blocks = (reserved_.load(std::memory_order_relaxed) + kBlockSize - 1) / kBlockSize;
  return kMaxBlocks * sizeof(void*) + blocks * sizeof(Block) + MapBytes();
}

absl::Status IdTracker::Load(
    uint64_t records,
    const std::function<absl::Status(const std::function<absl::Status(InternalId, uint64_t)>&)>&
        scan,
    uint64_t* beyond) {
  Reserve(records);
  *beyond = 0;
  // Every record's (external, internal) pair; the map is built sorted at
  // the end (a scan in internal id order of an import of growing ids is
  // sorted already).
  std::vector<std::pair<uint64_t, InternalId>> pairs;
  pairs.reserve(records);
  bool sorted = true;
  ZOOM_RETURN_IF_ERROR(scan([&](InternalId id, uint64_t ext) {
    if (id >= records) {  // cannot happen with vectors written first; never serve it
      ++*beyond;
      return absl::OkStatus();
    }
    blocks_[id >> kBlockBits].load(std::memory_order_relaxed)->ext[id & (kBlockSize - 1)] = ext;
    if (!pairs.empty() && pairs.back() >= std::make_pair(ext, id)) sorted = false;
    pairs.emplace_back(ext, id);
    return absl::OkStatus();
  }));
  if (!sorted) std::sort(pairs.begin(), pairs.end());
  ExternalIdMap::BaseBuilder builder;
  for (size_t i = 0; i < pairs.size(); ++i) {
    // The newest record of an external id (the last of its run) is live;
    // older ones stay dead. (A record listed twice counts once.)
    if (i + 1 < pairs.size() && pairs[i + 1].first == pairs[i].first) continue;
    const auto [ext, id] = pairs[i];
    Block* block = blocks_[id >> kBlockBits].load(std::memory_order_relaxed);
    const uint32_t off = id & (kBlockSize - 1);
    block->dead[off / 64].fetch_and(~(uint64_t{1} << (off % 64)), std::memory_order_relaxed);
    builder.Add(ext, id);
  }
  std::vector<std::pair<uint64_t, InternalId>>().swap(pairs);
  {
    absl::MutexLock m(&map_mu_);
    by_external_.Reset(builder.Finish());
    live_.store(by_external_.size(), std::memory_order_relaxed);
  }
  Publish(records);
  return absl::OkStatus();
}

}  // namespace zoom::server
