// Segment: reads (Match, Count, Get, Scroll, Search with its join).
#include <algorithm>
#include <atomic>
#include <optional>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/engine/segment.h"

namespace zoom::server {

absl::Status Segment::Match(const Filter& filter, MatchSet* out, bool* scan,
                            const QueryContext* ctx) const {
  *scan = false;
  const uint64_t size = ids_.visible();
  std::string unindexed;
  bool building = false;
  if (payload_.CanEvaluate(filter, &unindexed, &building)) {
    absl::Status st = payload_.Evaluate(filter, ids_, size, out);
    // (FailedPrecondition: an index deleted since CanEvaluate: scan.)
    if (st.code() != absl::StatusCode::kFailedPrecondition) return st;
  }
  // A field without a ready index: evaluated from the stored payloads
  // (every live point's; a scan, flagged in the stats), stopping at the
  // call's deadline or cancellation.
  *scan = true;
  out->Reset(size);
  static const PayloadFields kNone;
  for (const auto& [id, ext] : ids_.LiveRecords()) {
    if (id < size) out->Assign(id, Matches(filter, ext, kNone));
  }
  const auto check = [&]() -> absl::Status {
    if (ctx == nullptr) return absl::OkStatus();
    if (ctx->cancelled != nullptr && ctx->cancelled->load(std::memory_order_relaxed)) {
      return absl::CancelledError("the search was cancelled");
    }
    if (ctx->deadline != absl::InfiniteFuture() && absl::Now() >= ctx->deadline) {
      return absl::DeadlineExceededError(
          "the deadline passed while the filter was evaluated from the stored payloads (a "
          "field without a payload index: CreateFieldIndex makes it fast)");
    }
    return absl::OkStatus();
  };
  ZOOM_RETURN_IF_ERROR(ScanStoredFields(
      [&](uint64_t ext, InternalId id, const PayloadFields& f) {
        out->Assign(id, Matches(filter, ext, f));
      },
      [&](uint64_t) { return check(); }));
  AndLive(ids_, out);
  return absl::OkStatus();
}

absl::StatusOr<FilterCount> Segment::Count(const Filter* filter) const {
  FilterCount c;
  if (filter == nullptr || filter->empty()) {
    c.count = c.live = ids_.live();
    return c;
  }
  ZOOM_RETURN_IF_ERROR(ValidateFilter(*filter));
  MatchSet m;
  ZOOM_RETURN_IF_ERROR(Match(*filter, &m, &c.scan));
  // The live records of the match's range [0, visible() when it began),
  // read once after it: a published record only ever dies, so the match
  // restricted to them is the points that passed among exactly those
  // (records published since are in neither, a delete since in neither).
  MatchSet live(m.size());
  live.SetAll();
  AndLive(ids_, &live);
  m.And(live);
  c.count = m.Count();
  c.live = live.Count();
  return c;
}

std::string Segment::UnindexedField(const Filter& filter) const {
  std::string unindexed;
  bool building = false;
  if (payload_.CanEvaluate(filter, &unindexed, &building)) return "";
  return unindexed;
}

absl::Status Segment::ReadPayloadsWithin(std::vector<InternalId>* ids,
                                         absl::Span<const uint64_t> external, uint64_t* budget,
                                         std::vector<std::string>* payloads,
                                         std::vector<PayloadFields>* fields,
                                         std::vector<bool>* gone) const {
  // In chunks: payloads are up to the server's limit each (1 MiB), so a
  // chunk overshoots the budget by little before the answer is refused.
  constexpr size_t kChunk = 16;
  constexpr int kTries = 8;  // then under commit_mu_
  const uint64_t start_budget = *budget;
  std::vector<std::string> part, part_fields;
  std::vector<std::optional<InternalId>> now;
  gone->assign(external.size(), false);
  for (int attempt = 0;; ++attempt) {
    std::optional<absl::MutexLock> held;
    if (attempt >= kTries) held.emplace(&commit_mu_);
    const uint64_t before = commits_.load(std::memory_order_acquire);
    if (!held.has_value() && (before & 1) != 0) {
      std::this_thread::yield();  // a commit in flight
      continue;
    }
    // Each point's live record now (a point rewritten since the caller
    // found it is read at its new record).
    if (attempt > 0) {
      ids_.FindAll(external, &now);
      for (size_t i = 0; i < external.size(); ++i) {
        (*gone)[i] = !now[i].has_value();
        if (now[i].has_value()) (*ids)[i] = *now[i];
      }
    }
    *budget = start_budget;
    payloads->clear();
    payloads->reserve(external.size());
    fields->clear();
    fields->reserve(external.size());
    for (size_t first = 0; first < external.size(); first += kChunk) {
      const size_t m = std::min(kChunk, external.size() - first);
      ZOOM_RETURN_IF_ERROR(
          metadata_->GetPayloads(space_, absl::MakeConstSpan(*ids).subspan(first, m), &part));
      ZOOM_RETURN_IF_ERROR(
          metadata_->GetFields(collection_id_, external.subspan(first, m), &part_fields));
      for (size_t i = 0; i < m; ++i) {
        if ((*gone)[first + i]) {
          payloads->emplace_back();
          fields->emplace_back();
          continue;
        }
        const uint64_t bytes = part[i].size() + part_fields[i].size();
        if (bytes > *budget) {
          return absl::ResourceExhaustedError(absl::StrCat(
              "the answer would be larger than this server sends in one message (after ",
              first + i, " of ", external.size(),
              " payloads); ask for fewer points or without payloads"));
        }
        *budget -= bytes;
        absl::StatusOr<PayloadFields> f = DecodeFields(part_fields[i]);
        if (!f.ok()) {
          return absl::Status(f.status().code(), absl::StrCat("point ", external[first + i],
                                                              ": ", f.status().message()));
        }
        payloads->push_back(std::move(part[i]));
        fields->push_back(std::move(*f));
      }
    }
    std::atomic_thread_fence(std::memory_order_acquire);
    if (held.has_value() || commits_.load(std::memory_order_acquire) == before) {
      // Read between two commits: the records were the live ones (one
      // found before the last commit is checked again on the next try).
      if (attempt > 0 || held.has_value()) return absl::OkStatus();
      // The caller's records were found before `before` was read: one
      // commit may have replaced them since. Checked once more.
      ids_.FindAll(external, &now);
      bool same = true;
      for (size_t i = 0; i < external.size() && same; ++i) {
        same = now[i].has_value() && *now[i] == (*ids)[i];
      }
      if (same) return absl::OkStatus();
    }
  }
}

absl::Status Segment::Get(absl::Span<const uint64_t> ids, bool with_vectors, bool with_payload,
                          std::vector<PointData>* out, uint64_t max_answer_bytes) const {
  out->clear();
  std::vector<InternalId> internal;  // one per distinct id found
  std::vector<uint64_t> external;    // their external ids
  std::vector<uint32_t> source;      // per answer entry: its index in `internal`
  {
    std::vector<std::optional<InternalId>> found;
    ids_.FindAll(ids, &found);
    absl::flat_hash_map<uint64_t, uint32_t> first;  // external id -> index in internal
    for (size_t i = 0; i < ids.size(); ++i) {
      auto [slot, inserted] = first.try_emplace(ids[i], static_cast<uint32_t>(internal.size()));
      if (inserted) {
        if (!found[i].has_value()) {
          slot->second = UINT32_MAX;  // missing: left out
        } else {
          internal.push_back(*found[i]);
          external.push_back(ids[i]);
        }
      }
      if (slot->second == UINT32_MAX) continue;
      out->push_back(PointData{ids[i], {}, {}, {}});
      source.push_back(slot->second);
    }
  }
  // Each id is read once, however often it is asked for; every answer entry
  // counts against the budget (an id repeated 600 times is 600 answers).
  const size_t d = dim_;
  uint64_t budget = max_answer_bytes;
  const uint64_t fixed = out->size() * (16 + (with_vectors ? d * sizeof(float) + 8 : 0));
  if (fixed > budget) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the answer (", out->size(), " points", with_vectors ? " with vectors" : "",
        ", about ", fixed, " bytes) would be larger than the ", max_answer_bytes,
        " bytes this server sends in one message; ask for fewer points"));
  }
  budget -= fixed;
  std::vector<std::string> payloads;
  std::vector<PayloadFields> fields;
  std::vector<bool> gone(internal.size(), false);
  if (with_payload && !internal.empty()) {
    ZOOM_RETURN_IF_ERROR(
        ReadPayloadsWithin(&internal, external, &budget, &payloads, &fields, &gone));
    // Repeats beyond the first of each id cost their payload again.
    std::vector<bool> used(internal.size(), false);
    for (uint32_t src : source) {
      if (gone[src]) continue;
      if (!used[src]) {
        used[src] = true;
        continue;
      }
      const uint64_t again = payloads[src].size() + EncodeFields(fields[src]).size();
      if (again > budget) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "the answer (", out->size(), " points, ids repeated) would be larger than the ",
            max_answer_bytes, " bytes this server sends in one message; ask for each id once"));
      }
      budget -= again;
    }
  }
  std::vector<float> buf;
  if (with_vectors && !internal.empty()) {
    // The records the payloads were read from (a point rewritten meanwhile:
    // its new one; one deleted meanwhile is left out below).
    buf.resize(internal.size() * d);
    ZOOM_RETURN_IF_ERROR(engine_->store().ReadVectors(internal, buf.data()));
  }
  size_t kept = 0;
  for (size_t i = 0; i < out->size(); ++i) {
    const uint32_t src = source[i];
    if (gone[src]) continue;  // deleted before its payload was read: as after the delete
    PointData& p = (*out)[kept++];
    if (kept - 1 != i) p.id = (*out)[i].id;
    if (with_vectors) p.vector.assign(buf.begin() + src * d, buf.begin() + (src + 1) * d);
    if (with_payload) {
      p.payload = payloads[src];
      p.fields = fields[src];
    }
  }
  out->resize(kept);
  return absl::OkStatus();
}

absl::Status Segment::Scroll(const Filter* filter, uint64_t offset, uint32_t limit,
                             bool with_vectors, bool with_payload, std::vector<PointData>* out,
                             std::optional<uint64_t>* next, bool* scan,
                             uint64_t max_answer_bytes) const {
  out->clear();
  next->reset();
  *scan = false;
  if (limit == 0) return absl::InvalidArgumentError("limit must be at least 1");
  // The ids >= offset that pass, the limit + 1 smallest of them.
  std::vector<uint64_t> ext;
  if (filter != nullptr && !filter->empty()) {
    ZOOM_RETURN_IF_ERROR(ValidateFilter(*filter));
    MatchSet match;
    ZOOM_RETURN_IF_ERROR(Match(*filter, &match, scan));
    match.ForEach([&](InternalId id) {
      const uint64_t e = ids_.External(id);
      if (e >= offset) ext.push_back(e);
    });
  } else {
    for (const auto& [id, e] : ids_.LiveRecords()) {
      if (e >= offset) ext.push_back(e);
    }
  }
  if (ext.size() > limit) {
    std::nth_element(ext.begin(), ext.begin() + limit, ext.end());
    *next = ext[limit];
    ext.resize(limit);
  }
  std::sort(ext.begin(), ext.end());
  return Get(ext, with_vectors, with_payload, out, max_answer_bytes);
}

// ---- Search ------------------------------------------------------------------

absl::Status Segment::Prepare(const CollectionSearchParams& params, MatchSet* match,
                              QueryContext* ctx, bool* scan) const {
  *scan = false;
  *ctx = params.context;
  ctx->deleted = this;
  ctx->live_points = ids_.live();
  if (params.filter == nullptr || params.filter->empty()) return absl::OkStatus();
  ZOOM_RETURN_IF_ERROR(ValidateFilter(*params.filter));
  ZOOM_RETURN_IF_ERROR(Match(*params.filter, match, scan, &params.context));
  ctx->match = match;
  return absl::OkStatus();
}

absl::Status Segment::JoinHits(const CollectionSearchParams& params, uint64_t* budget,
                               QueryResult* result) const {
  std::vector<Hit>& hits = result->hits;
  std::vector<InternalId> internal(hits.size());
  for (size_t i = 0; i < hits.size(); ++i) {
    internal[i] = static_cast<InternalId>(hits[i].id);
    hits[i].id = ids_.External(internal[i]);
  }
  const bool with_vectors = params.engine.with_vectors;
  const uint64_t fixed = internal.size() * (16 + (with_vectors ? dim_ * sizeof(float) + 8 : 0));
  if (fixed > *budget) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the answer (", internal.size(), " hits", with_vectors ? " with vectors" : "",
        ", about ", fixed, " bytes) would be larger than this server sends in one message; "
        "ask for a smaller k or without vectors"));
  }
  *budget -= fixed;
  if (params.with_payload && !internal.empty()) {
    std::vector<uint64_t> external(hits.size());
    for (size_t i = 0; i < hits.size(); ++i) external[i] = hits[i].id;
    std::vector<std::string> payloads;
    std::vector<PayloadFields> fields;
    std::vector<bool> gone;
    ZOOM_RETURN_IF_ERROR(
        ReadPayloadsWithin(&internal, external, budget, &payloads, &fields, &gone));
    // A hit rewritten since the search found it carries its payload now;
    // one deleted since stays a hit (it was live when searched: never
    // fewer than k), without a payload.
    for (size_t i = 0; i < internal.size(); ++i) {
      hits[i].payload = std::move(payloads[i]);
      hits[i].fields = std::move(fields[i]);
    }
  }
  return absl::OkStatus();
}

absl::Status Segment::Search(absl::Span<const float> query, const SearchParams& knobs,
                             const CollectionSearchParams& params, QueryResult* result) const {
  result->hits.clear();
  MatchSet match;
  bool scan = false;
  QueryContext ctx;
  ZOOM_RETURN_IF_ERROR(Prepare(params, &match, &ctx, &scan));
  ZOOM_RETURN_IF_ERROR(engine_->Search(query, knobs, result, ctx));
  result->stats.filter_scan = scan;
  uint64_t budget = params.max_answer_bytes;
  return JoinHits(params, &budget, result);
}

absl::Status Segment::Search(absl::Span<const float> queries, size_t nq,
                             const SearchParams& knobs,
                             const CollectionSearchParams& params,
                             std::vector<QueryResult>* results) const {
  MatchSet match;
  bool scan = false;
  QueryContext ctx;
  ZOOM_RETURN_IF_ERROR(Prepare(params, &match, &ctx, &scan));
  ZOOM_RETURN_IF_ERROR(engine_->SearchBatch(queries, nq, knobs, /*threads=*/1, results, ctx));
  uint64_t budget = params.max_answer_bytes;
  for (size_t q = 0; q < nq; ++q) {
    QueryResult& r = (*results)[q];
    r.stats.filter_scan = scan;
    if (absl::Status st = JoinHits(params, &budget, &r); !st.ok()) {
      return absl::Status(st.code(), absl::StrCat("query #", q, ": ", st.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace zoom::server
