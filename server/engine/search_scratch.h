// File: server/engine/search_scratch.h
//
// Internal to the SearchEngine (search_engine.cc, search_engine_filtered.cc):
// the re-rank's working types and the per-thread buffers of the query path.
// Not part of the engine's API.
#ifndef ZOOM_SERVER_ENGINE_SEARCH_SCRATCH_H_
#define ZOOM_SERVER_ENGINE_SEARCH_SCRATCH_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/types/span.h"
#include "common/ids.h"
#include "common/metric.h"
#include "common/query_stats.h"
#include "index/search_types.h"
#include "server/engine/query.h"
#include "server/engine/vector_cache.h"

namespace zoom::server::search_internal {

// A candidate with its exact score (the re-rank's working type; the answer
// is Hits).
struct Scored {
  InternalId id;
  float score;
};

// Per-thread buffers of the query path, reused so that a warm thread does
// not allocate.
struct Scratch {
  std::vector<float> query;
  std::vector<index::Neighbor> candidates;
  std::vector<InternalId> ids;
  std::vector<InternalId> misses;
  std::vector<uint32_t> miss_pos;
  std::vector<float> vectors;
  std::vector<float> miss_vectors;
  std::vector<Scored> scored;
  // The re-rank that stops early: which candidates were read, the next
  // round's positions, and the exact distances seen.
  std::vector<char> read;
  std::vector<uint32_t> round_pos;
  std::vector<float> kth;
};
inline Scratch& ThreadScratch() {
  thread_local Scratch s;
  return s;
}

inline bool Better(Metric metric, const Scored& a, const Scored& b) {
  return Scorer(metric).Before(a.score, a.id, b.score, b.id);
}

// Keeps the best k in *heap (a heap with the worst on top).
inline void Offer(Metric metric, const Scored& h, size_t k, std::vector<Scored>* heap) {
  const auto worse = [metric](const Scored& a, const Scored& b) { return Better(metric, a, b); };
  if (heap->size() < k) {
    heap->push_back(h);
    std::push_heap(heap->begin(), heap->end(), worse);
  } else if (Better(metric, h, heap->front())) {
    std::pop_heap(heap->begin(), heap->end(), worse);
    heap->back() = h;
    std::push_heap(heap->begin(), heap->end(), worse);
  }
}

// The DRAM cache's part of reading the candidates at `positions` into their
// slots of s.vectors: the hits are copied in, the misses listed in
// s.misses / s.miss_pos for one read into s.miss_vectors (sized here).
// Without a cache every position is a miss (and not counted as one).
inline void LookupCached(VectorCache* cache, size_t d, absl::Span<const uint32_t> positions, Scratch& s,
                  QueryStats* stats) {
  s.misses.clear();
  s.miss_pos.clear();
  for (uint32_t pos : positions) {
    if (cache == nullptr || !cache->Lookup(s.ids[pos], s.vectors.data() + size_t{pos} * d)) {
      s.misses.push_back(s.ids[pos]);
      s.miss_pos.push_back(pos);
    }
  }
  s.miss_vectors.resize(s.misses.size() * d);
  if (cache != nullptr) {
    stats->cache_hits += positions.size() - s.misses.size();
    stats->cache_misses += s.misses.size();
  }
}

// After the misses' read: each copied to its slot, and cached.
inline void StoreMisses(VectorCache* cache, size_t d, Scratch& s) {
  for (size_t j = 0; j < s.misses.size(); ++j) {
    const float* v = s.miss_vectors.data() + j * d;
    std::memcpy(s.vectors.data() + size_t{s.miss_pos[j]} * d, v, d * sizeof(float));
    if (cache != nullptr) cache->Insert(s.misses[j], v);
  }
}

// The answer's hits from the best `k` of `scored` (sorted here).
inline void TakeBest(Metric metric, std::vector<Scored>* scored, size_t k, std::vector<Hit>* hits) {
  k = std::min(k, scored->size());
  std::partial_sort(scored->begin(), scored->begin() + k, scored->end(),
                    [metric](const Scored& a, const Scored& b) { return Better(metric, a, b); });
  hits->resize(k);
  for (size_t i = 0; i < k; ++i) {
    (*hits)[i].id = (*scored)[i].id;
    (*hits)[i].score = (*scored)[i].score;
  }
}

}  // namespace zoom::server::search_internal

#endif  // ZOOM_SERVER_ENGINE_SEARCH_SCRATCH_H_
