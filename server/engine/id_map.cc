#include "server/engine/id_map.h"

#include <algorithm>

namespace zoom::server {
namespace {

enum Kind : uint64_t { kRun = 0, kNarrow = 1, kWide = 2 };

inline uint64_t Meta(uint64_t pos, Kind kind, uint32_t count) {
  return pos << 9 | static_cast<uint64_t>(kind) << 7 | count;
}
inline uint32_t MetaCount(uint64_t m) { return static_cast<uint32_t>(m & 127); }
inline Kind MetaKind(uint64_t m) { return static_cast<Kind>((m >> 7) & 3); }
inline uint64_t MetaPos(uint64_t m) { return m >> 9; }

inline uint64_t WideKey(const uint32_t* keys, uint32_t i) {
  return uint64_t{keys[2 * i]} | uint64_t{keys[2 * i + 1]} << 32;
}

}  // namespace

uint64_t ExternalIdMap::Base::Bytes() const {
  return first_key.capacity() * sizeof(uint64_t) +
         meta.capacity() * sizeof(uint64_t) +
         pool.capacity() * sizeof(uint32_t) +
         bucket.capacity() * sizeof(uint32_t);
}

void ExternalIdMap::Base::Blocks(uint64_t ext, size_t* lo, size_t* hi) const {
  if (bucket.empty()) {
    *lo = 0;
    *hi = first_key.size();
    return;
  }
  const uint64_t b = (ext - first_key[0]) >> shift;
  if (b + 1 >= bucket.size()) {  // past the last bucket: the last block's
    *lo = bucket[bucket.size() - 1];
    *hi = first_key.size();
    return;
  }
  *lo = bucket[b];
  *hi = bucket[b + 1];
}

void ExternalIdMap::BaseBuilder::Add(uint64_t ext, InternalId id) {
  pending_.emplace_back(ext, id);
  if (pending_.size() == kBlock) Flush();
}

void ExternalIdMap::BaseBuilder::Flush() {
  if (pending_.empty()) return;
  const uint32_t n = static_cast<uint32_t>(pending_.size());
  const uint64_t first = pending_.front().first;
  const uint64_t span = pending_.back().first - first;
  bool run = span == n - 1;
  for (uint32_t i = 1; run && i < n; ++i) {
    run = pending_[i].second == pending_[0].second + i;
  }
  base_.first_key.push_back(first);
  if (run) {
    base_.meta.push_back(Meta(pending_[0].second, kRun, n));
  } else if (span <= UINT32_MAX) {
    base_.meta.push_back(Meta(base_.pool.size(), kNarrow, n));
    for (const auto& [ext, id] : pending_)
      base_.pool.push_back(static_cast<uint32_t>(ext - first));
    for (const auto& [ext, id] : pending_) base_.pool.push_back(id);
  } else {
    base_.meta.push_back(Meta(base_.pool.size(), kWide, n));
    for (const auto& [ext, id] : pending_) {
      base_.pool.push_back(static_cast<uint32_t>(ext));
      base_.pool.push_back(static_cast<uint32_t>(ext >> 32));
    }
    for (const auto& [ext, id] : pending_) base_.pool.push_back(id);
  }
  base_.entries += n;
  base_.last_key = pending_.back().first;
  pending_.clear();
}

void ExternalIdMap::BaseBuilder::BuildBuckets() {
  std::vector<uint32_t>().swap(base_.bucket);
  base_.shift = 0;
  const size_t blocks = base_.first_key.size();
  if (blocks < 16) return;  // a binary search over all of them is as fast
  const uint64_t range = base_.first_key.back() - base_.first_key.front();
  // About one bucket per block: the smallest shift with range >> shift <
  // blocks.
  while ((range >> base_.shift) >= blocks) ++base_.shift;
  const uint64_t buckets = (range >> base_.shift) + 1;
  base_.bucket.resize(buckets + 1);
  size_t block = 0;
  for (uint64_t b = 0; b <= buckets; ++b) {
    while (block < blocks &&
           ((base_.first_key[block] - base_.first_key[0]) >> base_.shift) < b) {
      ++block;
    }
    base_.bucket[b] = static_cast<uint32_t>(block);
  }
}

ExternalIdMap::Base ExternalIdMap::BaseBuilder::Finish() {
  Flush();
  BuildBuckets();
  base_.first_key.shrink_to_fit();
  base_.meta.shrink_to_fit();
  base_.pool.shrink_to_fit();
  return std::move(base_);
}

std::optional<InternalId> ExternalIdMap::FindInBase(const Base& b,
                                                    uint64_t ext) {
  if (b.entries == 0 || ext > b.last_key) return std::nullopt;
  if (ext < b.first_key[0]) return std::nullopt;
  size_t lo = 0, hi = 0;
  b.Blocks(ext, &lo, &hi);
  // The last block starting at or before ext: in [lo, hi) or just before lo
  // (it started in an earlier bucket).
  auto it =
      std::upper_bound(b.first_key.begin() + lo, b.first_key.begin() + hi, ext);
  const size_t block = static_cast<size_t>(it - b.first_key.begin()) - 1;
  const uint64_t off = ext - b.first_key[block];
  const uint64_t m = b.meta[block];
  const uint32_t n = MetaCount(m);
  const uint64_t pos = MetaPos(m);
  switch (MetaKind(m)) {
    case kRun:
      if (off < n) return static_cast<InternalId>(pos + off);
      return std::nullopt;
    case kNarrow: {
      if (off > UINT32_MAX) return std::nullopt;
      const uint32_t* keys = b.pool.data() + pos;
      const uint32_t* at =
          std::lower_bound(keys, keys + n, static_cast<uint32_t>(off));
      if (at == keys + n || *at != off) return std::nullopt;
      return keys[n + (at - keys)];
    }
    case kWide: {
      const uint32_t* keys = b.pool.data() + pos;
      uint32_t lo = 0, hi = n;  // first index with key >= ext
      while (lo < hi) {
        const uint32_t mid = (lo + hi) / 2;
        if (WideKey(keys, mid) < ext)
          lo = mid + 1;
        else
          hi = mid;
      }
      if (lo == n || WideKey(keys, lo) != ext) return std::nullopt;
      return keys[2 * n + lo];
    }
  }
  return std::nullopt;
}

void ExternalIdMap::ForEachInBase(
    const Base& b, const std::function<void(uint64_t, InternalId)>& fn) {
  for (size_t block = 0; block < b.first_key.size(); ++block) {
    const uint64_t first = b.first_key[block];
    const uint64_t m = b.meta[block];
    const uint32_t n = MetaCount(m);
    const uint64_t pos = MetaPos(m);
    const uint32_t* p = b.pool.data() + pos;
    switch (MetaKind(m)) {
      case kRun:
        for (uint32_t i = 0; i < n; ++i)
          fn(first + i, static_cast<InternalId>(pos + i));
        break;
      case kNarrow:
        for (uint32_t i = 0; i < n; ++i) fn(first + p[i], p[n + i]);
        break;
      case kWide:
        for (uint32_t i = 0; i < n; ++i) fn(WideKey(p, i), p[2 * n + i]);
        break;
    }
  }
}

std::optional<InternalId> ExternalIdMap::Find(uint64_t ext) const {
  if (!delta_.empty()) {
    auto it = delta_.find(ext);
    if (it != delta_.end()) {
      if (it->second == kErased) return std::nullopt;
      return it->second;
    }
  }
  return FindInBase(base_, ext);
}

void ExternalIdMap::Put(uint64_t ext, InternalId id) {
  auto [it, inserted] = delta_.try_emplace(ext, id);
  if (inserted) {
    if (!FindInBase(base_, ext).has_value()) ++size_;
  } else {
    if (it->second == kErased) ++size_;
    it->second = id;
  }
}

void ExternalIdMap::Erase(uint64_t ext) {
  const bool in_base = FindInBase(base_, ext).has_value();
  auto it = delta_.find(ext);
  if (it != delta_.end()) {
    if (it->second == kErased) return;  // erased already
    --size_;
    if (in_base) {
      it->second = kErased;
    } else {
      delta_.erase(it);
    }
  } else if (in_base) {
    --size_;
    delta_.emplace(ext, kErased);
  }
}

uint64_t ExternalIdMap::Bytes() const {
  // A slot (key, value, padded) and a control byte per bucket.
  return base_.Bytes() +
         delta_.capacity() * (sizeof(std::pair<uint64_t, InternalId>) + 1);
}

void ExternalIdMap::ForEach(
    const std::function<void(uint64_t, InternalId)>& fn) const {
  const std::vector<std::pair<uint64_t, InternalId>> delta = SortedDelta();
  size_t d = 0;
  ForEachInBase(base_, [&](uint64_t ext, InternalId id) {
    for (; d < delta.size() && delta[d].first < ext; ++d)
      fn(delta[d].first, delta[d].second);
    if (d < delta.size() && delta[d].first == ext) {
      if (delta[d].second != kErased) fn(ext, delta[d].second);
      ++d;
    } else {
      fn(ext, id);
    }
  });
  for (; d < delta.size(); ++d) fn(delta[d].first, delta[d].second);
}

std::vector<std::pair<uint64_t, InternalId>> ExternalIdMap::SortedDelta()
    const {
  std::vector<std::pair<uint64_t, InternalId>> out(delta_.begin(),
                                                   delta_.end());
  std::sort(out.begin(), out.end());
  return out;
}

bool ExternalIdMap::NeedsMerge() const {
  return delta_.size() >= std::max<uint64_t>(kMinMergeDelta, base_.entries / 8);
}

bool ExternalIdMap::CanAppend() const {
  if (base_.entries == 0) return true;
  for (const auto& [ext, id] : delta_) {
    if (ext <= base_.last_key) return false;
  }
  return true;
}

void ExternalIdMap::AppendDelta() {
  // Only keys past the base's: none of them is kErased (Erase marks only
  // base entries).
  const std::vector<std::pair<uint64_t, InternalId>> delta = SortedDelta();
  BaseBuilder builder(std::move(base_));
  for (const auto& [ext, id] : delta) builder.Add(ext, id);
  base_ = builder.Finish();
  absl::flat_hash_map<uint64_t, InternalId>().swap(delta_);
}

ExternalIdMap::Base ExternalIdMap::MergedBase() const {
  BaseBuilder builder;
  ForEach([&](uint64_t ext, InternalId id) { builder.Add(ext, id); });
  return builder.Finish();
}

void ExternalIdMap::Install(Base merged) {
  base_ = std::move(merged);
  absl::flat_hash_map<uint64_t, InternalId>().swap(delta_);
}

void ExternalIdMap::Reset(Base base) {
  size_ = base.entries;
  Install(std::move(base));
}

}  // namespace zoom::server
