// PlannedIndex (planned_search.h): the strategies of a query's Search and
// their cost, over the kinds' passes and hooks.
#include "index/planned_search.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/status_macros.h"

namespace zoom::index::internal {

PlannedIndex::FilterShape PlannedIndex::ShapeOf(const AllowedIds& allowed,
                                                const SearchContext& ctx) const {
  FilterShape f;
  f.count = static_cast<double>(allowed.count);
  f.n = static_cast<double>(std::max<uint64_t>(ctx.live, allowed.count));
  f.share = ctx.live == 0 ? 1.0 : f.count / static_cast<double>(ctx.live);
  f.index_share = f.count / static_cast<double>(std::max<uint64_t>(1, size()));
  return f;
}

IdBitsView PlannedIndex::AllowView(const AllowedIds& allowed, double index_share) const {
  IdBitsView v = allowed.ids;
  v.share = index_share;
  return v;
}

absl::Status PlannedIndex::StopCheck(SearchContext* ctx, bool* stop) {
  *stop = false;
  absl::Status st = ctx->CheckStop();
  if (st.ok()) return st;
  if (ctx->allow_partial && st.code() == absl::StatusCode::kDeadlineExceeded) {
    *stop = true;
    ctx->stopped = true;
    return absl::OkStatus();
  }
  return st;
}

CostEstimate PlannedIndex::EstimateCost(size_t k, const IndexSearchParams& params,
                                        const AllowedIds& allowed,
                                        const SearchContext& ctx) const {
  const FilterShape f = ShapeOf(allowed, ctx);
  const double kp = static_cast<double>(k);
  const double scan = f.count > 0 ? FilteredPreviewCodes(kp, f, params, ctx.tuning) : 0;
  // The match scan: each matching code gathered.
  const double gathered = f.count * ctx.tuning.match_scan_cost + MatchScanExtra(f.count);
  CostEstimate est;
  est.codes = std::min(scan, gathered);
  if (f.share >= ctx.tuning.broad_share) {
    est.strategy = FilterStrategy::kPostFilter;
  } else if (gathered <= scan) {
    est.strategy = FilterStrategy::kMatchScan;
  } else {
    est.strategy = FilterStrategy::kFilteredPreview;
  }
  return est;
}

absl::Status PlannedIndex::Search(const float* query, size_t k, const IndexSearchParams& params,
                                  const AllowedIds& allowed, SearchContext* ctx,
                                  std::vector<Neighbor>* out) const {
  QueryStats local;
  QueryStats* stats = ctx->stats != nullptr ? ctx->stats : &local;
  ctx->fights = false;
  ctx->stopped = false;
  const uint64_t before = stats->candidates;
  IndexSearchParams p = params;
  p.allow = IdBitsView{};
  bool stop = false;
  if (allowed.empty()) {
    ZOOM_RETURN_IF_ERROR(Search(query, k, p, out, stats));
    // Fewer than asked: a layout the knobs do not reach (duplicates that
    // leave lists empty, a graph region cut off, two antipodal clusters).
    const uint64_t need =
        std::min<uint64_t>(ctx->need, ctx->live == 0 ? size() : ctx->live);
    for (int round = 0; out->size() < need && round < 3; ++round) {
      if (!WidenPlain(params, *ctx, &p)) break;
      ZOOM_RETURN_IF_ERROR(StopCheck(ctx, &stop));
      if (stop) break;
      ++stats->filter_expansions;
      ZOOM_RETURN_IF_ERROR(Search(query, k, p, out, stats));
    }
    stats->candidates = before + out->size();
    return absl::OkStatus();
  }

  const FilterShape f = ShapeOf(allowed, *ctx);
  FilterStrategy strategy = ctx->force;
  if (strategy == FilterStrategy::kNone || strategy == FilterStrategy::kExact) {
    strategy = EstimateCost(k, params, allowed, *ctx).strategy;
  }
  out->clear();
  if (allowed.count == 0) {
    stats->filter_strategy = strategy;
    stats->candidates = before;
    return absl::OkStatus();
  }
  const size_t need = std::min<uint64_t>(k, allowed.count);
  const size_t pool = std::max<size_t>(k, ctx->pool);
  const IdBitsView view = AllowView(allowed, f.index_share);
  // The filter's share among the plain pass's candidates (post_filter).
  double plain_local_share = 1.0;
  if (strategy == FilterStrategy::kMatchScan) {
    // Every matching code scored: the best of all the matches by the
    // preview's distance (as many as match when fewer).
    stats->filter_strategy = FilterStrategy::kMatchScan;
    p.filter = nullptr;  // the matches are live ones
    ZOOM_RETURN_IF_ERROR(SearchIds(query, pool, view, p, out, stats));
  }
  if (strategy == FilterStrategy::kPostFilter) {
    // The plain pass (liveness only), oversampled by 1 / share within the
    // server's limits; its matching candidates kept.
    stats->filter_strategy = FilterStrategy::kPostFilter;
    const double over = std::min(64.0, 1.0 / std::max(f.share, 1e-9));
    const size_t list = static_cast<size_t>(std::min<double>(
        std::ceil(static_cast<double>(k) * over * 1.2),
        std::max<double>(static_cast<double>(k), ctx->max_candidates)));
    PostFilterKnobs(list, *ctx, &p);
    ZOOM_RETURN_IF_ERROR(Search(query, list, p, out, stats));
    size_t kept = 0, matching = 0;
    for (const Neighbor& nb : *out) {
      const bool in = allowed.ids.Contains(nb.id);
      matching += in ? 1 : 0;
      if (in && kept < pool) (*out)[kept++] = nb;
    }
    if (!out->empty()) {
      plain_local_share = static_cast<double>(matching) / static_cast<double>(out->size());
    }
    out->resize(kept);
    if (kept < need) {
      ++stats->filter_expansions;
      strategy = FilterStrategy::kFilteredPreview;  // too few: the filtered preview
    }
  }
  if (strategy == FilterStrategy::kFilteredPreview) {
    // A pass admitting matching ids only, widened until it finds k of them.
    stats->filter_strategy = FilterStrategy::kFilteredPreview;
    p = params;
    p.filter = nullptr;  // the matches are live ones
    FilteredKnobs(k, f, params, *ctx, &p);
    p.allow = view;
    p.two_hop_share = ctx->tuning.two_hop_share;
    ZOOM_RETURN_IF_ERROR(Search(query, pool, p, out, stats));
    for (int round = 0; out->size() < need && round < 6; ++round) {
      if (!WidenFiltered(out->size(), need, params, *ctx, &p)) break;
      ZOOM_RETURN_IF_ERROR(StopCheck(ctx, &stop));
      if (stop) break;
      ++stats->filter_expansions;
      ZOOM_RETURN_IF_ERROR(Search(query, pool, p, out, stats));
    }
  }
  if (strategy == FilterStrategy::kFilteredPreview || strategy == FilterStrategy::kPostFilter) {
    // The filter's share among the codes the passes tested near the query
    // (or among the plain pass's candidates).
    const double local_share =
        stats->filter_tested > 0 ? static_cast<double>(stats->filter_matched) /
                                       static_cast<double>(stats->filter_tested)
                                 : plain_local_share;
    p.allow = IdBitsView{};
    ZOOM_RETURN_IF_ERROR(
        AfterFiltered(query, pool, params, p, allowed, f, local_share, ctx, out));
  }
  stats->candidates = before + out->size();
  return absl::OkStatus();
}

}  // namespace zoom::index::internal
