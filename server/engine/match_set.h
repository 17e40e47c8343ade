// File: server/engine/match_set.h
//
// MatchSet: the internal ids a filter admits, as a dense bitset over
// [0, size()) (one bit per record of the segment): O(1) membership for the
// preview's scan, word-wise set algebra for the filter's evaluation, and
// ascending enumeration for the exact strategy.
#ifndef ZOOM_SERVER_ENGINE_MATCH_SET_H_
#define ZOOM_SERVER_ENGINE_MATCH_SET_H_

#include <cstdint>
#include <vector>

#include "common/ids.h"
#include "index/search_types.h"

namespace zoom::server {

// A set of internal ids [0, size()), dense (one bit each): O(1) membership
// for the index's scan, word-wise set algebra. The ids a filter admits.
class MatchSet : public index::IdFilter {
 public:
  explicit MatchSet(uint64_t size = 0) { Reset(size); }
  void Reset(uint64_t size) {
    size_ = size;
    words_.assign((size + 63) / 64, 0);
  }
  uint64_t size() const { return size_; }
  bool Contains(InternalId id) const {
    return id < size_ && (words_[id >> 6] >> (id & 63) & 1) != 0;
  }
  bool IsExcluded(InternalId id) const override { return !Contains(id); }
  void Set(InternalId id) {
    if (id < size_) words_[id >> 6] |= uint64_t{1} << (id & 63);
  }
  void Clear(InternalId id) {
    if (id < size_) words_[id >> 6] &= ~(uint64_t{1} << (id & 63));
  }
  void Assign(InternalId id, bool on) { on ? Set(id) : Clear(id); }
  // Sets the ids [lo, hi) below size().
  void SetRange(uint64_t lo, uint64_t hi);
  // Clears the bits of the last word past size() (after words() were OR'ed
  // into directly).
  void ClearPastSize() {
    if (size_ % 64 != 0 && !words_.empty()) words_.back() &= (uint64_t{1} << (size_ % 64)) - 1;
  }
  void SetAll();
  void And(const MatchSet& o);
  void Or(const MatchSet& o);
  void AndNot(const MatchSet& o);
  void Invert();  // within [0, size)
  uint64_t Count() const;
  // Calls fn(id) for every id in the set, ascending.
  template <typename F>
  void ForEach(F fn) const {
    for (size_t w = 0; w < words_.size(); ++w) {
      for (uint64_t bits = words_[w]; bits != 0; bits &= bits - 1) {
        fn(static_cast<InternalId>(w * 64 + __builtin_ctzll(bits)));
      }
    }
  }
  std::vector<uint64_t>& words() { return words_; }
  const std::vector<uint64_t>& words() const { return words_; }

 private:
  uint64_t size_ = 0;
  std::vector<uint64_t> words_;
};

}  // namespace zoom::server

#endif  // ZOOM_SERVER_ENGINE_MATCH_SET_H_
