// File: index/planned_search.h (internal to index/)
//
// PlannedIndex: the shape every preview kind's query Search shares
// (VectorIndex::Search with `allowed` and a SearchContext), over the kind's
// one-pass Search and SearchIds. The kinds derive from it and supply the
// hooks: how their knobs widen, what their filtered passes cost, and what
// they do after a filtered pass (ivf_hnsw_pq's rings of farther lists).
//
// A filtered search runs one of three strategies (FilterStrategy), chosen
// by EstimateCost unless ctx->force names one:
//   post_filter       at least tuning.broad_share of the live points
//                     match: the plain pass, oversampled by 1 / share
//                     (x1.2, at most 64), its matching candidates kept; too
//                     few: the filtered preview.
//   match_scan        every matching code scored (SearchIds): when that
//                     costs no more than the filtered preview.
//   filtered_preview  a pass admitting matching ids only, widened (at most
//                     six times) until it holds min(k, matches).
// The list is up to ctx->pool long (the caller's re-rank pool, K' to 2 K').
// Without a filter: the plain pass, widened (at most three times) while it
// holds fewer than ctx->need.
#ifndef ZOOM_INDEX_PLANNED_SEARCH_H_
#define ZOOM_INDEX_PLANNED_SEARCH_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "index/vector_index.h"

namespace zoom::index::internal {

class PlannedIndex : public VectorIndex {
 public:
  using VectorIndex::Search;  // the one pass
  absl::Status Search(const float* query, size_t k, const IndexSearchParams& params,
                      const AllowedIds& allowed, SearchContext* ctx,
                      std::vector<Neighbor>* out) const final;
  CostEstimate EstimateCost(size_t k, const IndexSearchParams& params, const AllowedIds& allowed,
                            const SearchContext& ctx) const final;

 protected:
  // The filter's numbers, as the hooks see them.
  struct FilterShape {
    double count = 0;        // matching ids
    double n = 0;            // max(live points, count)
    double share = 1;        // count / live points (1 when not known)
    double index_share = 1;  // count / the index's ids
  };

  // Code distances of a filtered preview of k candidates (the walk or the
  // lists it scans, each code's membership test included).
  virtual double FilteredPreviewCodes(double k, const FilterShape& f,
                                      const IndexSearchParams& params,
                                      const FilterTuning& tuning) const = 0;
  // Code distances a match scan spends beyond its matching codes (ivf:
  // a centroid distance per list the matches are in).
  virtual double MatchScanExtra(double /*count*/) const { return 0; }
  // The post-filter's oversampled pass of `list` candidates.
  virtual void PostFilterKnobs(size_t /*list*/, const SearchContext& /*ctx*/,
                               IndexSearchParams* /*p*/) const {}
  // The filtered preview's first pass for k candidates.
  virtual void FilteredKnobs(size_t k, const FilterShape& f, const IndexSearchParams& base,
                             const SearchContext& ctx, IndexSearchParams* p) const = 0;
  // One widening of the filtered preview, which found `found` of `need`;
  // false when it cannot widen further.
  virtual bool WidenFiltered(size_t found, size_t need, const IndexSearchParams& base,
                             const SearchContext& ctx, IndexSearchParams* p) const = 0;
  // One widening (x8) of an unfiltered pass; false when it cannot.
  virtual bool WidenPlain(const IndexSearchParams& base, const SearchContext& ctx,
                          IndexSearchParams* p) const = 0;
  // After the filtered preview or the post-filter, whose last pass ran
  // with `scanned` (the query's knobs were `base`): where the kind can tell
  // whether the filter fights the vectors (the matches' share near the
  // query, `local_share`, against `f.share`) and look farther (ivf_hnsw_pq's
  // rings), into *out (at most `pool` long), setting ctx->fights.
  virtual absl::Status AfterFiltered(const float* /*query*/, size_t /*pool*/,
                                     const IndexSearchParams& /*base*/,
                                     const IndexSearchParams& /*scanned*/,
                                     const AllowedIds& /*allowed*/, const FilterShape& /*f*/,
                                     double /*local_share*/, SearchContext* /*ctx*/,
                                     std::vector<Neighbor>* /*out*/) const {
    return absl::OkStatus();
  }

  FilterShape ShapeOf(const AllowedIds& allowed, const SearchContext& ctx) const;
  // `allowed` with its share of the index's ids.
  IdBitsView AllowView(const AllowedIds& allowed, double index_share) const;
  // A widening's stop: Ok to go on; *stop true (and OK) when the deadline
  // passed under allow_partial; else the error.
  static absl::Status StopCheck(SearchContext* ctx, bool* stop);
};

}  // namespace zoom::index::internal

#endif  // ZOOM_INDEX_PLANNED_SEARCH_H_
