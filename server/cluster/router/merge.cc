#include "server/cluster/router/merge.h"

#include <algorithm>
#include <map>
#include <optional>

#include "absl/strings/str_cat.h"
#include "server/api/convert.h"

namespace zoom::server::router {

api::SearchAnswer MergeSearch(Metric metric, uint32_t k, std::vector<api::SearchAnswer> parts,
                              uint32_t shards) {
  api::SearchAnswer out;
  bool first = true;
  bool all_exact = true, any_hits = false, every_exact = true;
  for (api::SearchAnswer& p : parts) {
    out.stats.MergeParallel(p.stats, first);
    first = false;
    every_exact = every_exact && p.stats.exact;
    if (!p.hits.empty()) {
      any_hits = true;
      all_exact = all_exact && p.stats.exact;
    }
    if (out.warning.empty()) out.warning = std::move(p.warning);
    for (Hit& h : p.hits) out.hits.push_back(std::move(h));
  }
  // A shard where nothing matched ran no search: it does not make the
  // answer approximate.
  out.stats.exact = any_hits ? all_exact : (every_exact && !parts.empty());
  const Scorer scorer(metric);
  std::sort(out.hits.begin(), out.hits.end(), [&scorer](const Hit& a, const Hit& b) {
    return scorer.Before(a.score, a.id, b.score, b.id);
  });
  if (out.hits.size() > k) out.hits.resize(k);
  out.coverage = shards == 0 ? 1.0f
                             : static_cast<float>(parts.size()) / static_cast<float>(shards);
  out.degraded = parts.size() < shards;
  return out;
}

api::CollectionDescription DescribeMap(const cluster::ShardMap& m, double default_target) {
  api::CollectionDescription d;
  d.info.config = m.config;
  d.info.default_target_recall = m.config.DefaultTarget(default_target);
  d.shards = m.shards;
  d.replicas = m.replicas;
  return d;
}

api::CollectionDescription MergeInfo(
    const cluster::ShardMap& m, std::vector<std::pair<uint32_t, api::CollectionDescription>> parts,
    double default_target) {
  api::CollectionDescription out = DescribeMap(m, default_target);
  CollectionInfo& info = out.info;
  info.index_state = IndexState::kReady;
  // The least ready shard speaks for the collection.
  auto rank = [](IndexState s) {
    switch (s) {
      case IndexState::kFailed: return 0;
      case IndexState::kNone: return 1;
      case IndexState::kBuilding: return 2;
      default: return 3;
    }
  };
  std::map<std::string, FieldIndexInfo> fields;
  std::vector<std::string> field_order;
  bool first = true;
  for (auto& [shard, d] : parts) {
    const CollectionInfo& i = d.info;
    info.points += i.points;
    info.deleted_records += i.deleted_records;
    info.stored_records += i.stored_records;
    info.indexed_points += i.indexed_points;
    info.resident_bytes += i.resident_bytes;
    info.disk_bytes += i.disk_bytes;
    info.trained_points += i.trained_points;
    if (rank(i.index_state) < rank(info.index_state)) info.index_state = i.index_state;
    if (!i.index_error.empty() && info.index_error.empty()) {
      info.index_error = absl::StrCat("shard ", shard, ": ", i.index_error);
    }
    for (const FieldIndexInfo& f : i.field_indexes) {
      auto [it, added] = fields.try_emplace(f.field, f);
      if (added) {
        field_order.push_back(f.field);
        continue;
      }
      it->second.points += f.points;
      it->second.bytes += f.bytes;
      it->second.ready = it->second.ready && f.ready;
    }
    if (first) {
      info.calibration = i.calibration;
      info.calibration_current = i.calibration_current;
      first = false;
    }
  }
  for (const std::string& f : field_order) info.field_indexes.push_back(fields[f]);
  return out;
}

api::ScrollAnswer MergeScroll(std::vector<api::ScrollAnswer> parts, uint32_t limit,
                              uint64_t max_bytes) {
  api::ScrollAnswer out;
  std::optional<uint64_t> cutoff;
  for (const api::ScrollAnswer& p : parts) {
    if (p.next_offset.has_value()) cutoff = std::min(cutoff.value_or(UINT64_MAX), *p.next_offset);
    out.filter_scan = out.filter_scan || p.filter_scan;
  }
  std::vector<PointData*> points;
  for (api::ScrollAnswer& p : parts) {
    for (PointData& d : p.points) {
      if (!cutoff.has_value() || d.id < *cutoff) points.push_back(&d);
    }
  }
  std::sort(points.begin(), points.end(),
            [](const PointData* a, const PointData* b) { return a->id < b->id; });
  std::optional<uint64_t> next = cutoff;
  uint64_t bytes = 0;
  for (PointData* p : points) {
    bytes += 24 + p->payload.size() + p->vector.size() * sizeof(float) +
             EncodeFields(p->fields).size();
    if (out.points.size() == limit || (!out.points.empty() && bytes > max_bytes)) {
      next = p->id;
      break;
    }
    out.points.push_back(std::move(*p));
  }
  out.next_offset = next;
  return out;
}

}  // namespace zoom::server::router
