// File: server/engine/id_tracker.h
//
// IdTracker: a segment's point identities, in both directions, in one
// place: InternalId (a record's position in the vector file) -> external
// id and tombstone, and external id -> its live record. (qdrant's id
// tracker, for one segment.)
//
// The forward table is lock-free for readers: its blocks are allocated by
// the single writer and never move, and a reader looks only at ids below
// visible() (acquire), which the writer publishes (release) after filling
// them. The reverse map (ExternalIdMap, id_map.h: sorted blocks plus a
// hash delta, a few bytes per point) is guarded by a reader/writer lock.
//
// Writer protocol for a commit of new records [base, base + n):
//   Reserve(base + n); Set(id, ext) for each (the map now names the new
//   record); Kill(old) for each replaced record; Publish(base + n).
// A search (IsLive) never sees a point twice: new records are invisible
// until Publish, and replaced ones die before it. live() moves at Publish
// too, so a reader never counts a batch half applied. A delete (Kill
// alone) ends with Publish(visible()).
#ifndef ZOOM_SERVER_ENGINE_ID_TRACKER_H_
#define ZOOM_SERVER_ENGINE_ID_TRACKER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "common/ids.h"
#include "server/engine/id_map.h"

namespace zoom::server {

class IdTracker {
 public:
  // At most 2^32 records (InternalId).
  IdTracker();
  ~IdTracker();
  IdTracker(const IdTracker&) = delete;
  IdTracker& operator=(const IdTracker&) = delete;

  // The one rebuild path, on a new tracker: ids [0, records) addressable and dead, then
  // `scan` calls its argument for every (internal, external) record pair,
  // in any order; the newest record of an external id (the largest
  // internal id) is its live one. Records at or past `records` are
  // ignored and counted in *beyond. All of [0, records) is published.
  absl::Status Load(uint64_t records,
                    const std::function<absl::Status(
                        const std::function<absl::Status(InternalId, uint64_t)>&)>& scan,
                    uint64_t* beyond);

  // ---- Writer (single) ----
  // Makes ids [0, n) addressable; new ids start dead.
  void Reserve(uint64_t n);
  // `id` becomes the live record of `ext` (the map names it; the record ext
  // had before stays live until Kill).
  void Set(InternalId id, uint64_t ext);
  // `id` dies; the map forgets ext only if it still names `id`.
  void Kill(InternalId id);
  // Records below n are committed or dead: readers see them, and the live
  // count as it is now.
  void Publish(uint64_t n) {
    published_live_.store(live_.load(std::memory_order_relaxed), std::memory_order_relaxed);
    visible_.store(n, std::memory_order_release);
  }

  // ---- Readers (any thread) ----
  uint64_t visible() const { return visible_.load(std::memory_order_acquire); }
  // Points with a live record (the map's size) as of the last Publish.
  uint64_t live() const { return published_live_.load(std::memory_order_relaxed); }
  uint64_t dead() const {
    const uint64_t v = visible(), l = live();
    return v > l ? v - l : 0;
  }
  // Visible and not dead.
  bool IsLive(InternalId id) const { return id < visible() && !IsDead(id); }
  // The tombstone bit alone (ids never reserved are dead).
  bool IsDead(InternalId id) const;
  // The external id of a reserved record.
  uint64_t External(InternalId id) const;
  // The live record of `ext`.
  std::optional<InternalId> Find(uint64_t ext) const;
  // Find for many under one lock: (*out)[i] is the record of ext[i] or
  // nullopt.
  void FindAll(absl::Span<const uint64_t> ext, std::vector<std::optional<InternalId>>* out) const;
  // Clears, in the bitset words[0 .. (n + 63) / 64) over ids [0, n), the
  // bit of every id that is not live (dead, or at or past visible()).
  void AndLive(uint64_t* words, uint64_t n) const;
  // The live (internal, external) pairs below visible(), in id order.
  std::vector<std::pair<InternalId, uint64_t>> LiveRecords() const;
  // RAM held: the forward table (its block pointers, 8 bytes of external
  // id and a tombstone bit per record) and the reverse map.
  uint64_t Bytes() const;
  // The reverse map's part of Bytes().
  uint64_t MapBytes() const;

 private:
  static constexpr uint32_t kBlockBits = 16;
  static constexpr uint32_t kBlockSize = 1u << kBlockBits;
  static constexpr uint32_t kMaxBlocks = 1u << 16;
  struct Block {
    uint64_t ext[kBlockSize];
    std::atomic<uint64_t> dead[kBlockSize / 64];
  };

  std::unique_ptr<std::atomic<Block*>[]> blocks_;
  std::atomic<uint64_t> reserved_{0};
  std::atomic<uint64_t> visible_{0};
  std::atomic<uint64_t> live_{0};            // the writer's count
  std::atomic<uint64_t> published_live_{0};  // live_ at the last Publish
  // Merges the map's delta into its base when due (the writer, no lock held).
  void MaybeMerge();
  mutable absl::Mutex map_mu_;
  ExternalIdMap by_external_ ABSL_GUARDED_BY(map_mu_);
};

}  // namespace zoom::server

#endif  // ZOOM_SERVER_ENGINE_ID_TRACKER_H_
