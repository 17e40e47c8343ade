// File: index/hnsw_graph.h
//
// HnswGraph: a hierarchical navigable small-world graph (Malkov & Yashunin)
// over dense InternalIds. It stores links only; distances come from a
// DistanceComputer (searches) or a BuildOracle (construction), so the same
// graph is searched with PQ codes and built with full vectors.
//
// Memory: level 0 keeps 2M links per node (+ a count), upper levels M; link
// ids are uint32. Rows live in ChunkedArrays, so the graph can grow while
// searches run. Compact() packs level 0 of the nodes present (the bulk of
// the graph's memory) into sorted, bit-packed delta lists: 2 header bytes
// plus ceil(log2 n) bits for the first link and the width of the largest
// gap for each further one, about a third of the (1 + 2M) * 4 bytes. Packed
// lists are immutable; an Insert() that changes one copies it to an
// uncompressed overlay row first (copy on write), and nodes added after
// Compact() get overlay rows, so Add keeps working; a per-node overlay slot
// (4 bytes) is allocated on the first change after Compact(). Overlay rows
// are full-size and stay so until the next Compact() (the owner's next
// load): many Adds after packing give much of the saving back.
//
// Thread safety: Search() is const and safe from many threads, also while
// Insert() runs. Insert() may be called from several threads at once for
// different ids (parallel build; per-node locks); Grow() and Compact() only
// by one writer with no Insert() in flight, and Compact() also with no
// Search() in flight (call it before the graph is published).
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
  // Whether the owner packs level 0 with Compact() after a build or a load
  // (not stored by Save(): the owner keeps it with its own spec).
  bool compact_links = false;

  absl::Status Validate() const;
};

// Exact (or best available) distances between stored points, for building.
class BuildOracle {
 public:
  virtual ~BuildOracle() = default;
  virtual float Between(InternalId a, InternalId b) const = 0;
  // Whether Between is 0 exactly for identical points (a squared L2
  // distance; not a negated inner product). The link selection limits
  // links between duplicates only then.
  virtual bool ZeroMeansIdentical() const { return false; }
};

// Per-thread search state: visited tags and heaps. Reuse across searches.
struct HnswScratch {
  std::vector<uint16_t> visited;
  uint16_t epoch = 0;
  std::vector<Neighbor> candidates;  // min-heap by distance
  std::vector<Neighbor> results;     // max-heap by distance
  std::vector<InternalId> batch_ids;
  std::vector<float> batch_dist;
  std::vector<InternalId> links;  // copy of a link list (2M + 1 slots)
  std::vector<InternalId> links2;  // two-hop search: a neighbour's links
  std::vector<InternalId> through;  // two-hop search: non-matching nodes walked
  std::vector<float> through_dist;
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
  // written to `out` (resized). Excluded ids are traversed, not returned;
  // `hidden` is neither (as if absent: IndexSearchParams::hidden), unless
  // it is where the descent must start or end (the entry point, or a
  // level-0 start with nowhere else to go).
  void Search(DistanceComputer& dc, size_t ef, const IdFilter* filter,
              HnswScratch& scratch, std::vector<Neighbor>* out,
              QueryStats* stats, InternalId hidden = kInvalidInternalId) const;
  // As above, returning only nodes in `allow` (and not excluded), for a
  // selective filter: level 0 is walked through matching nodes and the
  // matching neighbours of non-matching neighbours (two hops, after
  // ACORN-1, Patel et al., SIGMOD 2024), and only matching nodes are
  // scored (and the non-matching neighbours with no matching neighbour,
  // walked through as the plain walk would: regions without matches are
  // crossed), so the walk costs about what an unfiltered one does while
  // the matching subgraph stays connected down to shares of ~1 / (2M)^2. May
  // return fewer than ef (or none) when the matches are not reachable
  // that way from the entry point.
  void SearchTwoHop(DistanceComputer& dc, size_t ef, const IdBitsView& allow,
                    const IdFilter* filter, HnswScratch& scratch,
                    std::vector<Neighbor>* out, QueryStats* stats) const;

  // Packs level 0 of nodes [0, size()) as described above. Single writer,
  // no Insert() or Search() in flight. Idempotent for the nodes packed.
  void Compact();
  bool compacted() const { return packed_ != nullptr; }

  // The links of `id` (< size()) at `level` (<= its level) into `out`, in
  // stored order (ascending when packed). For inspection and tests.
  void Neighbors(InternalId id, int level, std::vector<InternalId>* out) const;
  // The level of node `id` (< size()).
  int Level(InternalId id) const { return *levels_.Row(id); }

  // Bytes held by links, levels and the upper-level tables.
  uint64_t ResidentBytes() const;

  void Save(BinaryWriter& w) const;
  absl::Status Load(BinaryReader& r);

 private:
  struct PackedLevel0;
  // Copies the links of `id` at `level` to `out` (room for MaxLinks(level))
  // and returns their count. Safe while Insert() rewrites the list.
  uint32_t GetLinks(InternalId id, int level, uint32_t* out) const;
  // The writable row [count, ids...] of `id` at `level`; a packed level-0
  // list is first copied to an overlay row. Caller holds LockFor(id).
  uint32_t* MutableLinks(InternalId id, int level);
  // Upper-level row of `id` (level >= 1, <= its level).
  uint32_t* UpperRow(InternalId id, int level) const {
    return const_cast<uint32_t*>(
        upper_rows_.Row(*upper_first_.Row(id) + uint64_t(level - 1)));
  }
  // A new overlay row (zeroed); returns its index. Holds overlay_mu_.
  uint64_t NewOverlayRow();
  // Makes slots of nodes [0, n) readable (zero: packed). Holds overlay_mu_.
  void EnsureSlots(uint64_t n);
  uint32_t MaxLinks(int level) const { return level == 0 ? 2 * options_.M : options_.M; }
  int DrawLevel();
  // Best-first search on one level from `entry`; results in scratch.results
  // (max-heap) with up to ef entries.
  void SearchLevel(DistanceComputer& dc, Neighbor entry, size_t ef, int level,
                   const IdFilter* filter, HnswScratch& s, QueryStats* stats) const;
  // `hidden`: never moved to (see Search).
  Neighbor Greedy(DistanceComputer& dc, Neighbor cur, int level, QueryStats* stats,
                  InternalId hidden = kInvalidInternalId) const;
  // The greedy descent from the entry point through the upper levels into
  // *cur (a level-0 node); false for an empty graph.
  bool DescendToLevel0(DistanceComputer& dc, QueryStats* stats, Neighbor* cur,
                       InternalId hidden = kInvalidInternalId) const;
  // The heuristic neighbour selection: keeps up to `max` of `cands`
  // (ascending), preferring diverse directions. Exact duplicates are
  // redundant links (oracle.ZeroMeansIdentical()): a candidate identical to
  // a kept neighbour is dropped, and at most kMaxDuplicateLinks identical to
  // the node itself are kept.
  // (Without this a run of duplicates fills every list with itself: a
  // distinct point among 999 copies got no in-link and was never found.)
  void SelectNeighbors(std::vector<Neighbor>& cands, uint32_t max,
                       const BuildOracle& oracle) const;
  std::mutex& LockFor(InternalId id) { return locks_[id & (kLockStripes - 1)]; }

  static constexpr size_t kLockStripes = 4096;

  HnswOptions options_;
  std::atomic<uint64_t> size_{0};
  // Level 0 before Compact(): (1 + 2M) per node, by id. After: overlay
  // rows, found through slot_.
  std::unique_ptr<ChunkedArray<uint32_t>> level0_;
  ChunkedArray<uint8_t> levels_;             // level of each node
  ChunkedArray<uint32_t> upper_first_;       // first upper row of each node
  ChunkedArray<uint32_t> upper_rows_;        // (1 + M) per row, by level
  uint64_t upper_row_count_ = 0;             // writer only
  // Compact layout (null until Compact()): packed level 0 of nodes
  // [0, packed_->n); slot_ maps a node to 1 + its overlay row (0: packed),
  // readable for ids < slots_n_.
  std::unique_ptr<const PackedLevel0> packed_;
  std::unique_ptr<ChunkedArray<uint32_t>> slot_;
  std::atomic<uint64_t> slots_n_{0};
  uint64_t overlay_rows_ = 0;
  std::mutex overlay_mu_;
  // Entry point: (level << 32) | id; kNoEntry when empty.
  static constexpr uint64_t kNoEntry = ~uint64_t{0};
  std::atomic<uint64_t> entry_{kNoEntry};
  std::mutex entry_mu_;
  std::unique_ptr<std::mutex[]> locks_;
  std::mt19937_64 rng_;
};

}  // namespace zoom::index

#endif  // ZOOM_INDEX_HNSW_GRAPH_H_
