// File: server/engine/id_map.h
//
// ExternalIdMap: a segment's external id -> InternalId map in a few bytes
// per point, where a hash map takes ~26 (issue 16: at 10M points every
// byte per point is counted).
//
// Two parts:
//   base   sorted by external id, immutable between merges, in blocks of up
//          to 64 entries. A block is a run (consecutive external ids held
//          by consecutive internal ids: 16 bytes for the whole block, the
//          common case of an import of ids 0, 1, 2, ...), narrow (the
//          block's external ids within 2^32 of its first: 8 bytes an
//          entry) or wide (12 bytes an entry). Per block 16 bytes of
//          header, and a bucket table over the first keys (at most 8
//          bytes per block) that narrows a lookup to a block or two; so
//          ~0.3, ~8.4 or ~12.4 bytes per point.
//   delta  a hash map of the changes since the last merge (a new id, or
//          kErased for a base entry deleted), consulted first.
// The writer merges the delta into the base when it reaches 1/8 of the
// base (and at least 4,096 entries), so the delta adds at most ~3.3 bytes
// per point; merges cost O(N) each and, growing by 1/8, O(N) amortized per
// point over a growing map. A delta whose keys all follow the base's last
// key (an import of growing ids) is appended, not merged.
//
// Not thread-safe: IdTracker serializes it (readers shared, the writer
// exclusive; a merge is built under the shared lock by MergedBase() and
// installed under the exclusive one by Install()).
#ifndef ZOOM_SERVER_ENGINE_ID_MAP_H_
#define ZOOM_SERVER_ENGINE_ID_MAP_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"
#include "common/ids.h"

namespace zoom::server {

class ExternalIdMap {
 public:
  // The sorted part. Movable; built by BaseBuilder.
  struct Base {
    std::vector<uint64_t> first_key;  // per block, ascending
    std::vector<uint64_t> meta;       // per block: pos << 9 | kind << 7 | count
    std::vector<uint32_t> pool;       // narrow and wide blocks' entries
    // The first block whose first key falls in each bucket of keys
    // (key - first_key[0]) >> shift, plus an end: a lookup searches only
    // its bucket's blocks (~1 for spread keys) instead of all of them.
    std::vector<uint32_t> bucket;
    uint32_t shift = 0;
    uint64_t entries = 0;
    uint64_t last_key = 0;  // valid when entries > 0
    uint64_t Bytes() const;
    // The blocks [*lo, *hi) to search for ext (ext >= first_key[0]).
    void Blocks(uint64_t ext, size_t* lo, size_t* hi) const;
  };
  // Appends entries in strictly ascending external id to a Base.
  class BaseBuilder {
   public:
    BaseBuilder() = default;
    // Continues `base` (the next key must follow base.last_key).
    explicit BaseBuilder(Base base) : base_(std::move(base)) {}
    void Add(uint64_t ext, InternalId id);
    Base Finish();

   private:
    void Flush();
    void BuildBuckets();
    Base base_;
    std::vector<std::pair<uint64_t, InternalId>> pending_;
  };
  static constexpr uint32_t kBlock = 64;
  static constexpr uint64_t kMinMergeDelta = 4096;

  ExternalIdMap() = default;
  ExternalIdMap(ExternalIdMap&&) = default;
  ExternalIdMap& operator=(ExternalIdMap&&) = default;

  std::optional<InternalId> Find(uint64_t ext) const;
  // ext -> id (inserted or overwritten). id must not be kInvalidInternalId.
  void Put(uint64_t ext, InternalId id);
  // Forgets ext (nothing when absent).
  void Erase(uint64_t ext);
  // Entries (distinct external ids mapped).
  uint64_t size() const { return size_; }
  // RAM held (vectors' capacities and the delta's slots).
  uint64_t Bytes() const;
  // Calls fn(ext, id) for every entry in ascending ext.
  void ForEach(const std::function<void(uint64_t, InternalId)>& fn) const;

  // ---- Merging (the writer) ----
  bool NeedsMerge() const;
  // The delta appends to the base (every delta key follows the base's).
  bool CanAppend() const;
  // Appends the delta to the base in place: O(delta); CanAppend() first.
  void AppendDelta();
  // A new base holding every entry (base and delta); const.
  Base MergedBase() const;
  // Replaces the base with `merged` (from MergedBase() with no change since)
  // and empties the delta.
  void Install(Base merged);
  // Replaces everything with `base` (size = its entries).
  void Reset(Base base);

 private:
  static constexpr InternalId kErased = kInvalidInternalId;
  static std::optional<InternalId> FindInBase(const Base& b, uint64_t ext);
  static void ForEachInBase(
      const Base& b, const std::function<void(uint64_t, InternalId)>& fn);
  std::vector<std::pair<uint64_t, InternalId>> SortedDelta() const;

  Base base_;
  absl::flat_hash_map<uint64_t, InternalId> delta_;
  uint64_t size_ = 0;
};

}  // namespace zoom::server

#endif  // ZOOM_SERVER_ENGINE_ID_MAP_H_
