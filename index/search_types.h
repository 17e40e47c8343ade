// File: index/search_types.h
//
// Small types shared by the preview indexes: a scored id, the deleted-ids
// filter, and the per-query distance computer the graph code calls without
// knowing whether it scores PQ codes or full vectors.
#ifndef ZOOM_INDEX_SEARCH_TYPES_H_
#define ZOOM_INDEX_SEARCH_TYPES_H_

#include <cstddef>
#include <cstdint>

#include "common/ids.h"

namespace zoom::index {

// An id with its distance (lower is better: squared L2, or the negated
// inner product for IP and cosine).
struct Neighbor {
  float distance;
  InternalId id;
  friend bool operator<(const Neighbor& a, const Neighbor& b) {
    return a.distance < b.distance || (a.distance == b.distance && a.id < b.id);
  }
};

// Ids that must not be returned (deleted points). Searches still traverse
// them, so the graph stays connected, and still return k results when k
// live points exist. Thread-safe reads.
class IdFilter {
 public:
  virtual ~IdFilter() = default;
  virtual bool IsExcluded(InternalId id) const = 0;
};

// A read-only view of a dense bitset of ids (bit id & 63 of words[id / 64];
// ids >= size are not in the set): the ids a filtered search may return.
// `share` is the fraction of the index's ids in the set, a hint the index
// uses to choose how to search (a test before each distance, or after).
struct IdBitsView {
  const uint64_t* words = nullptr;
  uint64_t size = 0;
  double share = 1.0;
  bool empty() const { return words == nullptr; }
  bool Contains(InternalId id) const {
    return id < size && (words[id >> 6] >> (id & 63) & 1) != 0;
  }
};

// Distances from one query, bound at construction. One per thread.
class DistanceComputer {
 public:
  virtual ~DistanceComputer() = default;
  // out[i] = distance from the query to ids[i], i < n.
  virtual void Distances(const InternalId* ids, size_t n, float* out) = 0;
  float Distance(InternalId id) {
    float d;
    Distances(&id, 1, &d);
    return d;
  }
};

}  // namespace zoom::index

#endif  // ZOOM_INDEX_SEARCH_TYPES_H_
