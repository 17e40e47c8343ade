#include "server/engine/match_set.h"

#include <algorithm>

namespace zoom::server {

void MatchSet::SetRange(uint64_t lo, uint64_t hi) {
  hi = std::min(hi, size_);
  while (lo < hi && lo % 64 != 0) Set(static_cast<InternalId>(lo++));
  for (; lo + 64 <= hi; lo += 64) words_[lo >> 6] = ~uint64_t{0};
  while (lo < hi) Set(static_cast<InternalId>(lo++));
}

void MatchSet::SetAll() {
  std::fill(words_.begin(), words_.end(), ~uint64_t{0});
  if (size_ % 64 != 0 && !words_.empty()) words_.back() = (uint64_t{1} << (size_ % 64)) - 1;
}
void MatchSet::And(const MatchSet& o) {
  for (size_t i = 0; i < words_.size(); ++i) words_[i] &= i < o.words_.size() ? o.words_[i] : 0;
}
void MatchSet::Or(const MatchSet& o) {
  for (size_t i = 0; i < words_.size() && i < o.words_.size(); ++i) words_[i] |= o.words_[i];
  if (size_ % 64 != 0 && !words_.empty()) words_.back() &= (uint64_t{1} << (size_ % 64)) - 1;
}
void MatchSet::AndNot(const MatchSet& o) {
  for (size_t i = 0; i < words_.size() && i < o.words_.size(); ++i) words_[i] &= ~o.words_[i];
}
void MatchSet::Invert() {
  for (uint64_t& w : words_) w = ~w;
  if (size_ % 64 != 0 && !words_.empty()) words_.back() &= (uint64_t{1} << (size_ % 64)) - 1;
}
uint64_t MatchSet::Count() const {
  uint64_t n = 0;
  for (uint64_t w : words_) n += static_cast<uint64_t>(__builtin_popcountll(w));
  return n;
}

}  // namespace zoom::server
