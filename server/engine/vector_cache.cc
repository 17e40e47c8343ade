#include "server/engine/vector_cache.h"

#include <algorithm>
#include <cstring>

namespace zoom::server {
namespace {
// Bookkeeping per entry: id, reference bit, hash node (~32 bytes).
constexpr uint64_t kOverheadBytes = 40;
}  // namespace

VectorCache::VectorCache(uint64_t budget_bytes, uint32_t dim)
    : dim_(dim), shards_(new Shard[kShards]) {
  const uint64_t per_entry = uint64_t{dim} * sizeof(float) + kOverheadBytes;
  slots_per_shard_ = static_cast<uint32_t>(
      std::min<uint64_t>(budget_bytes / per_entry / kShards, UINT32_MAX / 2));
  capacity_ = uint64_t{slots_per_shard_} * kShards;
  for (uint32_t s = 0; s < kShards; ++s) {
    Shard& sh = shards_[s];
    sh.ids.assign(slots_per_shard_, kInvalidInternalId);
    sh.referenced.assign(slots_per_shard_, 0);
    sh.data.resize(size_t{slots_per_shard_} * dim_);
    sh.slot_of.reserve(slots_per_shard_);
  }
}

uint64_t VectorCache::ResidentBytes() const {
  return capacity_ * (uint64_t{dim_} * sizeof(float) + kOverheadBytes);
}

bool VectorCache::Lookup(InternalId id, float* out) {
  if (slots_per_shard_ == 0) return false;
  Shard& sh = ShardOf(id);
  std::lock_guard<std::mutex> lock(sh.mu);
  auto it = sh.slot_of.find(id);
  if (it == sh.slot_of.end()) return false;
  sh.referenced[it->second] = 1;
  std::memcpy(out, sh.data.data() + size_t{it->second} * dim_, dim_ * sizeof(float));
  return true;
}

void VectorCache::Insert(InternalId id, const float* vector) {
  if (slots_per_shard_ == 0) return;
  Shard& sh = ShardOf(id);
  std::lock_guard<std::mutex> lock(sh.mu);
  if (sh.slot_of.count(id) != 0) return;
  uint32_t slot;
  if (sh.used < slots_per_shard_) {
    slot = sh.used++;
  } else {
    // CLOCK: skip (and clear) referenced slots once.
    while (sh.referenced[sh.hand]) {
      sh.referenced[sh.hand] = 0;
      sh.hand = (sh.hand + 1) % slots_per_shard_;
    }
    slot = sh.hand;
    sh.hand = (sh.hand + 1) % slots_per_shard_;
    if (sh.ids[slot] != kInvalidInternalId) sh.slot_of.erase(sh.ids[slot]);
  }
  sh.ids[slot] = id;
  sh.referenced[slot] = 0;
  sh.slot_of[id] = slot;
  std::memcpy(sh.data.data() + size_t{slot} * dim_, vector, dim_ * sizeof(float));
}

void VectorCache::Erase(InternalId id) {
  if (slots_per_shard_ == 0) return;
  Shard& sh = ShardOf(id);
  std::lock_guard<std::mutex> lock(sh.mu);
  auto it = sh.slot_of.find(id);
  if (it == sh.slot_of.end()) return;
  sh.ids[it->second] = kInvalidInternalId;
  sh.referenced[it->second] = 0;
  sh.slot_of.erase(it);
}

}  // namespace zoom::server
