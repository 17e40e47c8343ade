// File: index/hnsw_graph.h
//
// HnswGraph: a hierarchical navigable small-world graph (Malkov & Yashunin)
// over dense InternalIds. It stores links only; distances come from a
// DistanceComputer (searches) or a BuildOracle (construction), so the same
// graph is searched with PQ codes and built with full vectors.
//
// Memory: level 0 keeps 2M links per node (+ a count), upper levels M; link
// ids are uint32. Rows live in ChunkedArrays, so the graph can grow while
// searches run.
//
// Thread safety: Search() is const and safe from many threads, also while
// Insert() runs. Insert() may be called from several threads at once for
// different ids (parallel build; per-node locks); Grow() only by one writer
// with no Insert() in flight.
#ifndef ZOOM_INDEX_HNSW_GRAPH_H_
#define ZOOM_INDEX_HNSW_GRAPH_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <vector>

#include "absl/status/status.h"
#include "common/binary_io.h"
#include "common/query_stats.h"
#include "index/chunked_array.h"
#include "index/search_types.h"

namespace zoom::index {

struct HnswOptions {
  // Links per node on the upper levels; level 0 has 2 * M. Default 16.
  uint32_t M = 16;
  // Candidate list size while building. Default 200.
  uint32_t ef_construction = 200;
  uint64_t seed = 100;

  absl::Status Validate() const;
};

// Exact (or best available) distances between stored points, for building.
class BuildOracle {
 public:
  virtual ~BuildOracle() = default;
  virtual float Between(InternalId a, InternalId b) const = 0;
};

// Per-thread search state: visited tags and heaps. Reuse across searches.
struct HnswScratch {
  std::vector<uint16_t> visited;
  uint16_t epoch = 0;
  std::vector<Neighbor> candidates;  // min-heap by distance
  std::vector<Neighbor> results;     // max-heap by distance
  std::vector<InternalId> batch_ids;
  std::vector<float> batch_dist;
  std::vector<InternalId> links;     // copy of a link list
  // Marks the start of a search over `n` nodes.
  void Begin(size_t n);
  bool Visit(InternalId id) {
    if (visited[id] == epoch) return false;
    visited[id] = epoch;
    return true;
  }
};

class HnswGraph {
 public:
  explicit HnswGraph(const HnswOptions& options);
  ~HnswGraph();

  const HnswOptions& options() const { return options_; }
  // Nodes with storage (linked or not).
  uint64_t size() const { return size_.load(std::memory_order_acquire); }

  // Adds storage for nodes [size(), n) and draws their levels. Single
  // writer, no Insert() in flight.
  void Grow(uint64_t n);
  // Links node `id` (< size(), not yet inserted) into the graph, using
  // `oracle` for distances. Thread-safe for distinct ids.
  void Insert(InternalId id, const BuildOracle& oracle, HnswScratch& scratch);

  // The up to `ef` nearest inserted nodes to the query of `dc`, ascending,
  // written to `out` (resized). Excluded ids are traversed, not returned.
  void Search(DistanceComputer& dc, size_t ef, const IdFilter* filter,
              HnswScratch& scratch, std::vector<Neighbor>* out,
              QueryStats* stats) const;

  // Bytes held by links, levels and the upper-level tables.
  uint64_t ResidentBytes() const;

  void Save(BinaryWriter& w) const;
  absl::Status Load(BinaryReader& r);

 private:
  // Link list of `id` at `level`: [count, ids...].
  uint32_t* Links(InternalId id, int level);
  const uint32_t* Links(InternalId id, int level) const;
  uint32_t MaxLinks(int level) const { return level == 0 ? 2 * options_.M : options_.M; }
  int DrawLevel();
  // Best-first search on one level from `entry`; results in scratch.results
  // (max-heap) with up to ef entries.
  void SearchLevel(DistanceComputer& dc, Neighbor entry, size_t ef, int level,
                   const IdFilter* filter, HnswScratch& s, QueryStats* stats) const;
  Neighbor Greedy(DistanceComputer& dc, Neighbor cur, int level,
                  QueryStats* stats) const;
  // The heuristic neighbour selection: keeps up to `max` of `cands`
  // (ascending), preferring diverse directions.
  void SelectNeighbors(std::vector<Neighbor>& cands, uint32_t max,
                       const BuildOracle& oracle) const;
  std::mutex& LockFor(InternalId id) { return locks_[id & (kLockStripes - 1)]; }

  static constexpr size_t kLockStripes = 4096;

  HnswOptions options_;
  std::atomic<uint64_t> size_{0};
  ChunkedArray<uint32_t> level0_;            // (1 + 2M) per node
  ChunkedArray<uint8_t> levels_;             // level of each node
  ChunkedArray<uint32_t*> upper_;            // levels * (1 + M), or null
  // Entry point: (level << 32) | id; kNoEntry when empty.
  static constexpr uint64_t kNoEntry = ~uint64_t{0};
  std::atomic<uint64_t> entry_{kNoEntry};
  std::mutex entry_mu_;
  std::unique_ptr<std::mutex[]> locks_;
  std::mt19937_64 rng_;
  uint64_t upper_bytes_ = 0;
};

}  // namespace zoom::index

#endif  // ZOOM_INDEX_HNSW_GRAPH_H_
