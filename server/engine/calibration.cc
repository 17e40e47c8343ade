#include "server/engine/calibration.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "index/distance_kernels.h"
#include "server/engine/search_band.h"
#include "server/engine/search_scratch.h"

namespace zoom::server {
namespace {

// One-sided 95% normal quantile.
constexpr double kZ95 = 1.645;

// The collection's liveness, less the query point itself.
class AllButOne : public index::IdFilter {
 public:
  AllButOne(const index::IdFilter& live, InternalId self) : live_(live), self_(self) {}
  bool IsExcluded(InternalId id) const override { return id == self_ || live_.IsExcluded(id); }

 private:
  const index::IdFilter& live_;
  InternalId self_;
};

absl::Status CheckCancelled(const CalibrationOptions& options) {
  if (options.cancelled != nullptr && options.cancelled->load(std::memory_order_relaxed)) {
    return absl::CancelledError("calibration stopped");
  }
  return absl::OkStatus();
}

// Up to `want` distinct live ids of [0, n), drawn at random (a bounded
// number of draws: a collection that is mostly dead gives fewer), sorted.
std::vector<InternalId> SampleLive(const index::IdFilter& live, uint64_t n, uint32_t want,
                                   uint64_t seed) {
  std::mt19937_64 rng(seed);
  absl::flat_hash_set<InternalId> seen;
  std::vector<InternalId> out;
  const uint64_t draws = uint64_t{want} * 64 + 1024;
  for (uint64_t i = 0; i < draws && out.size() < want; ++i) {
    const auto id = static_cast<InternalId>(rng() % n);
    if (live.IsExcluded(id) || !seen.insert(id).second) continue;
    out.push_back(id);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The exact k nearest live neighbours of each query (rows of `queries`,
// prepared as stored), each query's own id excluded: one pass over the
// vector file. Distances: squared L2, or the negated inner product.
absl::Status ExactNeighbours(const SearchEngine& engine, const index::IdFilter& live,
                             const std::vector<InternalId>& self, const std::vector<float>& queries,
                             uint32_t k, const CalibrationOptions& options,
                             std::vector<std::vector<InternalId>>* out) {
  const size_t d = engine.dim();
  const size_t nq = self.size();
  const uint64_t n = engine.size();
  const Scorer scorer(engine.metric());
  const bool l2 = engine.metric() == Metric::kL2;
  using Scored = std::pair<float, InternalId>;  // the index's distance; max-heap: worst on top
  std::vector<std::vector<Scored>> heaps(nq);
  constexpr uint64_t kChunk = 4096;
  std::vector<InternalId> ids;
  std::vector<float> x, dist(kChunk);
  std::vector<uint8_t> excluded(kChunk);
  for (uint64_t first = 0; first < n; first += kChunk) {
    ZOOM_RETURN_IF_ERROR(CheckCancelled(options));
    const uint64_t m = std::min(kChunk, n - first);
    ids.resize(m);
    for (uint64_t i = 0; i < m; ++i) {
      ids[i] = static_cast<InternalId>(first + i);
      excluded[i] = live.IsExcluded(ids[i]);
    }
    x.resize(m * d);
    ZOOM_RETURN_IF_ERROR(engine.store().ReadVectors(ids, x.data()));
    for (size_t q = 0; q < nq; ++q) {
      const float* qv = queries.data() + q * d;
      if (l2) {
        index::L2SqrBatch(qv, x.data(), m, d, dist.data());
      } else {
        index::InnerProductBatch(qv, x.data(), m, d, dist.data());
      }
      std::vector<Scored>& heap = heaps[q];
      for (uint64_t i = 0; i < m; ++i) {
        if (excluded[i] || ids[i] == self[q]) continue;
        const float s = static_cast<float>(scorer.Distance(dist[i]));
        if (std::isnan(s)) continue;
        if (heap.size() < k) {
          heap.emplace_back(s, ids[i]);
          std::push_heap(heap.begin(), heap.end());
        } else if (Scored{s, ids[i]} < heap.front()) {
          std::pop_heap(heap.begin(), heap.end());
          heap.back() = {s, ids[i]};
          std::push_heap(heap.begin(), heap.end());
        }
      }
    }
  }
  out->assign(nq, {});
  for (size_t q = 0; q < nq; ++q) {
    for (const Scored& s : heaps[q]) (*out)[q].push_back(s.second);
  }
  return absl::OkStatus();
}

}  // namespace

Calibration::Choice Calibration::Choose(double target_recall) const {
  // Work when the curve counted it (version 2), else the measured time.
  bool counted = !points.empty();
  for (const CalibrationPoint& p : points) counted = counted && p.work > 0;
  const auto cost = [counted](const CalibrationPoint& p) { return counted ? p.work : p.mean_us; };
  // a before b: cheaper, then the higher lower bound, then smaller knobs.
  const auto cheaper = [&](const CalibrationPoint& a, const CalibrationPoint& b) {
    if (cost(a) != cost(b)) return cost(a) < cost(b);
    if (a.recall_lower != b.recall_lower) return a.recall_lower > b.recall_lower;
    return std::tie(a.nprobe, a.ef, a.rerank_candidates, a.band_confidence) <
           std::tie(b.nprobe, b.ef, b.rerank_candidates, b.band_confidence);
  };
  Choice best;
  bool found = false;
  for (const CalibrationPoint& p : points) {
    if (p.recall_lower + 1e-12 < target_recall) continue;
    if (!found || cheaper(p, best.point)) best.point = p;
    found = true;
  }
  if (found) {
    best.reached = true;
    return best;
  }
  // The highest recall; the cheaper of equals.
  for (const CalibrationPoint& p : points) {
    if (!found || p.recall_lower > best.point.recall_lower ||
        (p.recall_lower == best.point.recall_lower && cheaper(p, best.point))) {
      best.point = p;
    }
    found = true;
  }
  return best;
}

std::string Calibration::Encode() const {
  std::string out =
      absl::StrCat(kVersion, " ", k, " ", queries, " ", indexed_points, " ", created_unix_ms);
  // Doubles to 17 digits: a bound decoded back picks what it picked before.
  for (const CalibrationPoint& p : points) {
    absl::StrAppend(&out, ";", p.ef, " ", p.nprobe, " ", p.rerank_candidates,
                    absl::StrFormat(" %.17g %.17g %.17g %.17g %.17g %.17g %.17g", p.recall,
                                    p.recall_lower, p.mean_us, p.ssd_reads, p.work,
                                    p.band_confidence, p.certain_in));
  }
  return out;
}

absl::StatusOr<Calibration> Calibration::Decode(std::string_view in) {
  const absl::string_view text(in.data(), in.size());
  const auto bad = [&](absl::string_view why) {
    return absl::DataLossError(absl::StrCat("malformed calibration (", why, ")"));
  };
  std::vector<absl::string_view> parts = absl::StrSplit(text, ';');
  std::vector<absl::string_view> head = absl::StrSplit(parts[0], ' ');
  uint32_t version = 0;
  if (head.empty() || !absl::SimpleAtoi(head[0], &version) || version == 0) {
    return bad("no version");
  }
  if (version > kVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("calibration version ", version, " is newer than this zoomd reads (",
                     kVersion, ")"));
  }
  Calibration c;
  if (head.size() != 5 || !absl::SimpleAtoi(head[1], &c.k) ||
      !absl::SimpleAtoi(head[2], &c.queries) || !absl::SimpleAtoi(head[3], &c.indexed_points) ||
      !absl::SimpleAtoi(head[4], &c.created_unix_ms) || c.k == 0) {
    return bad("header");
  }
  for (size_t i = 1; i < parts.size(); ++i) {
    std::vector<absl::string_view> f = absl::StrSplit(parts[i], ' ');
    CalibrationPoint p;
    const size_t fields = version == 1 ? 7 : version == 2 ? 8 : 10;
    if (f.size() == fields && fields >= 8 &&
        (!absl::SimpleAtod(f[7], &p.work) || !(p.work >= 0) || !std::isfinite(p.work))) {
      return bad(absl::StrCat("point ", i));
    }
    if (f.size() == fields && fields >= 10 &&
        (!absl::SimpleAtod(f[8], &p.band_confidence) || !absl::SimpleAtod(f[9], &p.certain_in) ||
         !(p.band_confidence >= 0 && p.band_confidence <= 100) || !(p.certain_in >= 0))) {
      return bad(absl::StrCat("point ", i));
    }
    if (f.size() != fields || !absl::SimpleAtoi(f[0], &p.ef) || !absl::SimpleAtoi(f[1], &p.nprobe) ||
        !absl::SimpleAtoi(f[2], &p.rerank_candidates) || !absl::SimpleAtod(f[3], &p.recall) ||
        !absl::SimpleAtod(f[4], &p.recall_lower) || !absl::SimpleAtod(f[5], &p.mean_us) ||
        !absl::SimpleAtod(f[6], &p.ssd_reads) || p.ef == 0 || p.rerank_candidates == 0 ||
        !(p.recall >= 0 && p.recall <= 1) || !(p.recall_lower <= p.recall) ||
        !(p.mean_us >= 0) || !(p.ssd_reads >= 0) || !std::isfinite(p.mean_us) ||
        !std::isfinite(p.ssd_reads) || !std::isfinite(p.recall_lower) ||
        !(p.certain_in <= p.rerank_candidates)) {
      return bad(absl::StrCat("point ", i));
    }
    c.points.push_back(p);
  }
  if (c.points.empty()) return bad("no points");
  return c;
}

absl::StatusOr<Calibration> Calibrate(const SearchEngine& engine,
                                      const index::IdFilter& live,
                                      const CalibrationOptions& options) {
  if (engine.index() == nullptr) {
    return absl::FailedPreconditionError("no index to calibrate");
  }
  const uint32_t k = std::max<uint32_t>(options.k, 1);
  std::vector<uint32_t> rerank;
  for (uint32_t r : options.rerank) {
    if (r >= k) rerank.push_back(r);
  }
  std::sort(rerank.begin(), rerank.end());
  if (rerank.empty()) rerank.push_back(k);
  const index::KindTraits traits = index::TraitsOf(engine.index()->spec());
  const bool ivf = traits.breadth == index::KindTraits::Breadth::kNprobe;
  std::vector<uint32_t> primary = ivf ? options.nprobe : options.ef;
  std::sort(primary.begin(), primary.end());
  if (primary.empty()) return absl::InvalidArgumentError("an empty calibration grid");

  const uint64_t n = engine.size();
  const auto want = static_cast<uint32_t>(
      std::min<uint64_t>(options.queries, std::max<uint64_t>(200, n / 100)));
  const std::vector<InternalId> self =
      n == 0 ? std::vector<InternalId>() : SampleLive(live, n, want, options.seed);
  if (self.size() < 2) {
    return absl::FailedPreconditionError("too few live points to calibrate");
  }
  const size_t nq = self.size();
  const size_t d = engine.dim();
  if (options.sample_out != nullptr) *options.sample_out = self;
  std::vector<float> queries(nq * d);
  ZOOM_RETURN_IF_ERROR(engine.store().ReadVectors(self, queries.data()));
  std::vector<std::vector<InternalId>> truth;
  ZOOM_RETURN_IF_ERROR(ExactNeighbours(engine, live, self, queries, k, options, &truth));

  Calibration cal;
  cal.k = k;
  cal.queries = static_cast<uint32_t>(nq);
  cal.indexed_points = engine.index()->size();
  cal.created_unix_ms = absl::ToUnixMillis(absl::Now());

  // The fullview's cost at each K' (the smallest primary knob's preview).
  std::vector<double> fullview_us(rerank.size()), reads(rerank.size());
  const double read_cost = std::max(0.0, options.read_cost);
  QueryResult result;
  // Query q as a query the index has not seen, into `result`.
  const auto search = [&](size_t q, SearchParams p,
                           std::vector<index::Neighbor>* candidates = nullptr) -> absl::Status {
    ZOOM_RETURN_IF_ERROR(CheckCancelled(options));
    const AllButOne filter(live, self[q]);
    QueryContext ctx;
    ctx.deleted = &filter;
    ctx.hidden = self[q];
    ctx.maintenance = true;
    ctx.candidates_out = candidates;
    return engine.Search(absl::MakeConstSpan(queries.data() + q * d, d), p, &result, ctx);
  };
  // The knobs of primary value `value` with K' `kprime`.
  const auto knobs = [&](uint32_t value, uint32_t kprime) {
    SearchParams p;
    p.k = k;
    p.rerank_candidates = kprime;
    p.nprobe = ivf ? value : 16;
    p.ef = ivf ? std::max<uint32_t>(64, 2 * value) : std::max(value, kprime);
    return p;
  };
  // A first pass warms what the measured ones would otherwise pay for
  // first (the index's pages, the reader's buffers); not counted.
  for (size_t q = 0; q < std::min<size_t>(nq, 32); ++q) {
    ZOOM_RETURN_IF_ERROR(search(q, knobs(primary[0], rerank.back())));
  }
  for (size_t r = 0; r < rerank.size(); ++r) {
    const SearchParams p = knobs(primary[0], rerank[r]);
    double us = 0, rd = 0;
    for (size_t q = 0; q < nq; ++q) {
      ZOOM_RETURN_IF_ERROR(search(q, p));
      us += result.stats.fullview_us + result.stats.rerank_us;
      rd += static_cast<double>(result.stats.reads);
    }
    fullview_us[r] = us / static_cast<double>(nq);
    reads[r] = rd / static_cast<double>(nq);
  }

  // Recall at every (primary, K') from one preview per primary value. Not
  // for ivf_hnsw_pq's 4-bit fast scan: it re-scores the best 2 K' by its
  // rough distances, so a longer list holds better candidates than a
  // search at a smaller K' would; there, one preview per (primary, K').
  const bool one_list = traits.lists_nest;
  std::vector<double> sum(rerank.size()), sum2(rerank.size()), preview_us(rerank.size()),
      preview_evals(rerank.size());
  std::vector<uint32_t> found(rerank.size());
  // The band, per (K', confidence): sums of recall, its square, reads and
  // certain-in. Off when the index gives no intervals (found on the first
  // list) or the grid is empty.
  std::vector<double> confidences;
  for (double c : options.band_confidence) {
    if (c > 0 && c <= 100) confidences.push_back(c);
  }
  std::sort(confidences.begin(), confidences.end());
  confidences.erase(std::unique(confidences.begin(), confidences.end()), confidences.end());
  bool band = !confidences.empty();
  const size_t nc = confidences.size();
  std::vector<double> bsum(rerank.size() * nc), bsum2(rerank.size() * nc),
      breads(rerank.size() * nc), bin(rerank.size() * nc);
  std::vector<CalibrationPoint> band_points;
  std::vector<index::Neighbor> list_out;
  std::vector<float> lo, hi;
  std::vector<uint64_t> blocks;
  search_internal::BandPlan plan;
  std::vector<search_internal::Scored> scored;
  std::vector<Hit> best;
  std::vector<InternalId> taken;  // a replayed answer's ids
  // The query's exact scores (the engine's re-rank: Score of the prepared
  // query), by candidate id, read once a query.
  absl::flat_hash_map<InternalId, float> exact;
  std::vector<float> prepared(d), rows;
  std::vector<InternalId> missing;
  size_t exact_query = SIZE_MAX;
  // Query q's exact scores of every candidate in `list` into `exact` (one
  // batch of reads for those not known yet).
  const auto read_exact = [&](size_t q, const std::vector<index::Neighbor>& list) -> absl::Status {
    if (exact_query != q) {
      exact.clear();
      exact_query = q;
      std::copy_n(queries.data() + q * d, d, prepared.data());
      Scorer(engine.metric()).PrepareQuery(prepared.data(), d);
    }
    missing.clear();
    for (const index::Neighbor& nb : list) {
      if (!exact.contains(nb.id)) missing.push_back(nb.id);
    }
    if (missing.empty()) return absl::OkStatus();
    rows.resize(missing.size() * d);
    ZOOM_RETURN_IF_ERROR(engine.store().ReadVectors(missing, rows.data()));
    for (size_t i = 0; i < missing.size(); ++i) {
      exact.emplace(missing[i], engine.Score(prepared.data(), rows.data() + i * d));
    }
    return absl::OkStatus();
  };
  // The band's answers over `list`'s first rerank[r] for r in [r0, r1), at
  // every confidence, added to the sums.
  const auto replay = [&](size_t q, const std::vector<index::Neighbor>& list, size_t r0,
                          size_t r1) -> absl::Status {
    const float* qv = queries.data() + q * d;
    lo.resize(list.size());
    hi.resize(list.size());
    const double denom = static_cast<double>(std::max<size_t>(truth[q].size(), 1));
    bool have_exact = false;
    for (size_t ci = 0; ci < nc && band; ++ci) {
      if (!engine.index()->DistanceIntervals(qv, list, confidences[ci], lo.data(), hi.data())) {
        band = false;  // the index keeps no radii
        break;
      }
      if (!have_exact) {
        ZOOM_RETURN_IF_ERROR(read_exact(q, list));
        have_exact = true;
      }
      for (size_t r = r0; r < r1; ++r) {
        const size_t n = std::min<size_t>(rerank[r], list.size());
        search_internal::ClassifyBand(absl::MakeConstSpan(list.data(), n), lo.data(), hi.data(),
                                      k, &plan);
        // As SearchEngine::FullviewEnd: the certain-in (at most k) unread,
        // the rest of the k from the band by exact score.
        scored.clear();
        blocks.clear();
        taken.clear();
        for (size_t i = 0; i < n; ++i) {
          if (plan.cls[i] == search_internal::BandClass::kIn) {
            if (taken.size() < k) taken.push_back(list[i].id);
          } else if (plan.cls[i] == search_internal::BandClass::kRead) {
            blocks.push_back(engine.store().RecordOffset(list[i].id) /
                             storage::VectorStore::kBlockBytes);
            scored.push_back({list[i].id, exact.at(list[i].id)});
          }
        }
        // The engine's reads: one a distinct block (records sharing one
        // share the read).
        std::sort(blocks.begin(), blocks.end());
        const auto reads =
            static_cast<double>(std::unique(blocks.begin(), blocks.end()) - blocks.begin());
        search_internal::TakeBest(engine.metric(), &scored, k - taken.size(), &best);
        for (const Hit& h : best) taken.push_back(static_cast<InternalId>(h.id));
        uint32_t hit = 0;
        for (InternalId t : truth[q]) {
          hit += std::find(taken.begin(), taken.end(), t) != taken.end();
        }
        const double rq = truth[q].empty() ? 1.0 : hit / denom;
        const size_t at = r * nc + ci;
        bsum[at] += rq;
        bsum2[at] += rq * rq;
        breads[at] += reads;
        bin[at] += std::min<double>(plan.in, k);
      }
    }
    return absl::OkStatus();
  };
  for (uint32_t value : primary) {
    // hnsw_pq: an ef's list holds K' <= ef only.
    const uint32_t list = ivf ? rerank.back() : std::min(value, rerank.back());
    if (list < rerank.front()) continue;
    std::fill(sum.begin(), sum.end(), 0.0);
    std::fill(sum2.begin(), sum2.end(), 0.0);
    std::fill(preview_us.begin(), preview_us.end(), 0.0);
    std::fill(preview_evals.begin(), preview_evals.end(), 0.0);
    for (std::vector<double>* v : {&bsum, &bsum2, &breads, &bin}) {
      std::fill(v->begin(), v->end(), 0.0);
    }
    // Preview-only searches listing `len` candidates; counts the true
    // neighbours among the first rerank[r] into found[r] for r in [r0, r1).
    const auto count = [&](size_t q, uint32_t len, size_t r0, size_t r1) -> absl::Status {
      SearchParams p = knobs(value, len);
      p.preview_only = true;
      p.k = len;
      ZOOM_RETURN_IF_ERROR(search(q, p, band ? &list_out : nullptr));
      if (band) ZOOM_RETURN_IF_ERROR(replay(q, list_out, r0, r1));
      for (size_t r = r0; r < r1; ++r) {
        preview_us[r] += result.stats.preview_us;
        preview_evals[r] += static_cast<double>(result.stats.distance_evals);
      }
      for (InternalId t : truth[q]) {
        for (size_t pos = 0; pos < result.hits.size(); ++pos) {
          if (result.hits[pos].id != t) continue;
          for (size_t r = r0; r < r1; ++r) found[r] += pos < rerank[r];
          break;
        }
      }
      return absl::OkStatus();
    };
    for (size_t q = 0; q < nq; ++q) {
      std::fill(found.begin(), found.end(), 0);
      if (one_list) {
        ZOOM_RETURN_IF_ERROR(count(q, list, 0, rerank.size()));
      } else {
        for (size_t r = 0; r < rerank.size(); ++r) {
          ZOOM_RETURN_IF_ERROR(count(q, rerank[r], r, r + 1));
        }
      }
      const double denom = static_cast<double>(std::max<size_t>(truth[q].size(), 1));
      for (size_t r = 0; r < rerank.size(); ++r) {
        const double rq = truth[q].empty() ? 1.0 : found[r] / denom;
        sum[r] += rq;
        sum2[r] += rq * rq;
      }
    }
    for (double& us : preview_us) us /= static_cast<double>(nq);
    for (double& e : preview_evals) e /= static_cast<double>(nq);
    double best_lower = 0;
    for (size_t r = 0; r < rerank.size(); ++r) {
      if (rerank[r] > list) break;
      CalibrationPoint pt;
      pt.ef = knobs(value, list).ef;
      pt.nprobe = ivf ? value : 0;
      pt.rerank_candidates = rerank[r];
      const double m = sum[r] / static_cast<double>(nq);
      const double var =
          std::max(0.0, (sum2[r] - static_cast<double>(nq) * m * m) / static_cast<double>(nq - 1));
      pt.recall = m;
      pt.recall_lower = std::max(0.0, m - kZ95 * std::sqrt(var / static_cast<double>(nq)));
      pt.mean_us = preview_us[r] + fullview_us[r];
      pt.ssd_reads = reads[r];
      // At least 1: a version-2 point always counted some work.
      pt.work = std::max(1.0, preview_evals[r] + read_cost * reads[r]);
      best_lower = std::max(best_lower, pt.recall_lower);
      cal.points.push_back(pt);
      for (size_t ci = 0; ci < nc && band; ++ci) {
        const size_t at = r * nc + ci;
        CalibrationPoint bp = pt;
        bp.band_confidence = confidences[ci];
        const double bm = bsum[at] / static_cast<double>(nq);
        const double bvar = std::max(
            0.0, (bsum2[at] - static_cast<double>(nq) * bm * bm) / static_cast<double>(nq - 1));
        bp.recall = bm;
        bp.recall_lower = std::max(0.0, bm - kZ95 * std::sqrt(bvar / static_cast<double>(nq)));
        bp.ssd_reads = breads[at] / static_cast<double>(nq);
        bp.certain_in = bin[at] / static_cast<double>(nq);
        bp.mean_us = preview_us[r] + (reads[r] > 0 ? fullview_us[r] * bp.ssd_reads / reads[r] : 0);
        bp.work = std::max(1.0, preview_evals[r] + read_cost * bp.ssd_reads);
        band_points.push_back(bp);
      }
    }
    // Nothing above is worth measuring: every target up to 0.999 is met.
    if (best_lower >= 0.999) break;
  }
  if (cal.points.empty()) return absl::InternalError("the calibration grid measured nothing");
  // The band points no other point beats on both work and the lower bound
  // (equal on both: kept), each after its knobs' point without the band.
  const auto beaten = [&](const CalibrationPoint& p) {
    const auto beats = [&p](const CalibrationPoint& o) {
      return o.work <= p.work && o.recall_lower >= p.recall_lower &&
             (o.work < p.work || o.recall_lower > p.recall_lower);
    };
    return std::any_of(cal.points.begin(), cal.points.end(), beats) ||
           std::any_of(band_points.begin(), band_points.end(), beats);
  };
  std::vector<CalibrationPoint> kept;
  for (const CalibrationPoint& p : band_points) {
    if (!beaten(p)) kept.push_back(p);
  }
  if (!kept.empty()) {
    std::vector<CalibrationPoint> merged;
    merged.reserve(cal.points.size() + kept.size());
    size_t j = 0;
    for (const CalibrationPoint& p : cal.points) {
      merged.push_back(p);
      while (j < kept.size() && std::tie(kept[j].nprobe, kept[j].ef, kept[j].rerank_candidates) ==
                                    std::tie(p.nprobe, p.ef, p.rerank_candidates)) {
        merged.push_back(kept[j++]);
      }
    }
    cal.points = std::move(merged);
  }
  return cal;
}

}  // namespace zoom::server
