// ivf_hnsw_pq's hooks of the planned search (planned_search.h): how its
// filtered passes cost and widen (nprobe), and the rings of farther lists
// where a filter fights the vectors.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "common/status_macros.h"
#include "index/ivf_hnsw_pq_index.h"

namespace zoom::index::internal {
namespace {

// The rings go on (and the caller re-ranks its pool) when the filter's
// share among the codes scanned near the query is below this fraction of
// its global share.
constexpr double kRingLocalShare = 0.5;

}  // namespace

uint32_t IvfHnswPqIndex::Lists() const { return std::max<uint32_t>(1, spec_.nlist); }

double IvfHnswPqIndex::FilteredPreviewCodes(double k, const FilterShape& f,
                                            const IndexSearchParams& params,
                                            const FilterTuning& tuning) const {
  // The lists of the first guess (FilteredKnobs), and half a round of
  // widening; the list scan tests every id and scores only the matching
  // codes.
  const double nlist = Lists();
  const double lists = std::max(params.nprobe / std::sqrt(std::max(f.share, 1e-6)),
                                1.5 * k * nlist / f.count);
  const double scan = std::min(f.n, 1.5 * lists * f.n / nlist);
  return scan * (tuning.test_cost + f.share);
}

double IvfHnswPqIndex::MatchScanExtra(double count) const {
  return std::min<double>(count, Lists());  // a centroid distance per list
}

void IvfHnswPqIndex::FilteredKnobs(size_t k, const FilterShape& f,
                                   const IndexSearchParams& /*base*/,
                                   const SearchContext& /*ctx*/, IndexSearchParams* p) const {
  if (f.share >= 1.0) return;
  // A first guess: nprobe / sqrt(share) lists (the filtered top-k lie
  // farther out, in more lists: measured on GloVe, a guess of only the
  // lists holding 1.5 K' matching points, were they spread evenly, lost
  // recall at 1% shares), and at least those.
  const uint32_t nlist = Lists();
  const double guess = std::ceil(
      std::max(p->nprobe / std::max(std::sqrt(f.share), 1e-3),
               1.5 * static_cast<double>(k) * nlist / f.count));
  p->nprobe = static_cast<uint32_t>(std::min<double>(nlist, std::max<double>(p->nprobe, guess)));
}

bool IvfHnswPqIndex::WidenFiltered(size_t found, size_t need, const IndexSearchParams& /*base*/,
                                   const SearchContext& /*ctx*/, IndexSearchParams* p) const {
  const uint32_t nlist = Lists();
  if (p->nprobe >= nlist) return false;
  const double grow = std::max(2.0, 1.5 * static_cast<double>(need) /
                                        std::max<double>(1, static_cast<double>(found)));
  p->nprobe = static_cast<uint32_t>(std::min<double>(nlist, std::ceil(p->nprobe * grow)));
  p->ef = std::max(p->ef, p->nprobe);
  return true;
}

bool IvfHnswPqIndex::WidenPlain(const IndexSearchParams& /*base*/, const SearchContext& /*ctx*/,
                                IndexSearchParams* p) const {
  const uint32_t nlist = Lists();
  if (p->nprobe >= nlist) return false;
  p->nprobe = static_cast<uint32_t>(std::min<uint64_t>(nlist, uint64_t{p->nprobe} * 8));
  p->ef = std::max(p->ef, p->nprobe);
  return true;
}

absl::Status IvfHnswPqIndex::AfterFiltered(const float* query, size_t pool,
                                           const IndexSearchParams& base,
                                           const IndexSearchParams& scanned,
                                           const AllowedIds& allowed, const FilterShape& f,
                                           double local_share, SearchContext* ctx,
                                           std::vector<Neighbor>* out) const {
  // Rings: `out` (the best `pool` matching candidates of the nearest
  // `probed` lists) meets the matching codes of the next as many lists
  // again, until a ring adds none to the best k by the preview's distance
  // (or every list is scanned). A filter that fights the vectors (the
  // query's own class excluded) has no match in the lists nearest the
  // query: the rings go on to where the matches are, however large the
  // filter's global share.
  QueryStats local;
  QueryStats* stats = ctx->stats != nullptr ? ctx->stats : &local;
  const uint32_t nlist = Lists();
  const size_t k = std::max<size_t>(1, ctx->answer_k > 0 ? ctx->answer_k : pool);
  uint32_t probed = scanned.nprobe;
  bool widened = false;
  std::vector<Neighbor> ring;
  IndexSearchParams p = base;
  p.filter = nullptr;  // the matches are live ones
  p.allow = allowed.ids;
  p.allow.share = f.index_share;
  while (probed < nlist) {
    bool stop = false;
    ZOOM_RETURN_IF_ERROR(StopCheck(ctx, &stop));
    if (stop) break;
    // The k-th best preview distance so far: a ring counts when it beats it.
    std::sort(out->begin(), out->end());
    const float kth = out->size() >= k ? (*out)[k - 1].distance
                                       : std::numeric_limits<float>::infinity();
    p.nprobe = static_cast<uint32_t>(
        std::min<uint64_t>(nlist, uint64_t{std::max(probed, 1u)} * 2));
    p.ef = std::max(p.ef, p.nprobe);
    p.first_probe = probed;
    ++stats->filter_expansions;
    ZOOM_RETURN_IF_ERROR(Search(query, pool, p, &ring, stats));
    probed = p.nprobe;
    size_t better = 0;
    for (const Neighbor& nb : ring) better += nb.distance < kth ? 1 : 0;
    out->insert(out->end(), ring.begin(), ring.end());
    std::sort(out->begin(), out->end());
    if (out->size() > pool) out->resize(pool);
    if (better == 0) break;
    widened = true;
  }
  ctx->fights = widened || local_share < kRingLocalShare * f.share;
  return absl::OkStatus();
}

}  // namespace zoom::index::internal
