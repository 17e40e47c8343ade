// File: server/engine/vector_cache.h
//
// VectorCache: an optional DRAM cache of hot full vectors (float32, dim
// each) in front of the fullview's SSD reads, bounded by a byte budget.
// Sharded by id; each shard evicts with CLOCK (second chance), so a lookup
// hit costs one lock, one hash probe and one copy.
//
// Thread safety: all methods are safe from many threads.
#ifndef ZOOM_SERVER_ENGINE_VECTOR_CACHE_H_
#define ZOOM_SERVER_ENGINE_VECTOR_CACHE_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "common/ids.h"

namespace zoom::server {

class VectorCache {
 public:
  // Holds as many vectors of `dim` floats as fit in `budget_bytes`
  // (counting the per-entry bookkeeping).
  VectorCache(uint64_t budget_bytes, uint32_t dim);

  // Copies `id`'s vector to `out` (dim floats) and returns true on a hit.
  bool Lookup(InternalId id, float* out);
  // Caches `id`'s vector (dim floats), evicting another if full.
  void Insert(InternalId id, const float* vector);
  // Forgets `id` (e.g. deleted or rewritten).
  void Erase(InternalId id);

  uint64_t capacity() const { return capacity_; }
  // Bytes held when full (the budget actually used).
  uint64_t ResidentBytes() const;

 private:
  struct Shard {
    std::mutex mu;
    std::unordered_map<InternalId, uint32_t> slot_of;
    std::vector<InternalId> ids;    // per slot; kInvalidInternalId = free
    std::vector<uint8_t> referenced;
    std::vector<float> data;        // slots * dim
    uint32_t hand = 0;
    uint32_t used = 0;
  };
  static constexpr uint32_t kShards = 16;
  Shard& ShardOf(InternalId id) { return shards_[id % kShards]; }

  const uint32_t dim_;
  uint64_t capacity_ = 0;
  uint32_t slots_per_shard_ = 0;
  std::unique_ptr<Shard[]> shards_;
};

}  // namespace zoom::server

#endif  // ZOOM_SERVER_ENGINE_VECTOR_CACHE_H_
