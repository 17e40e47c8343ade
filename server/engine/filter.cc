#include "server/engine/filter.h"

#include <cmath>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace zoom::server {
namespace {

bool GeoOk(const GeoPoint& p) {
  return p.lat >= -90 && p.lat <= 90 && p.lon >= -180 && p.lon <= 180;
}

absl::Status CheckBounds(const RangeBounds& r, const std::string& where) {
  if (r.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": give at least one of gt, gte, lt, lte"));
  }
  for (const std::optional<double>& b : {r.gt, r.gte, r.lt, r.lte}) {
    if (b && std::isnan(*b)) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": a bound is NaN"));
    }
  }
  return absl::OkStatus();
}

struct Walk {
  const FilterLimits& limits;
  uint32_t conditions = 0;

  absl::Status Condition(const server::Condition& c, uint32_t depth, const std::string& at) {
    using T = server::Condition::Type;
    if (++conditions > limits.max_conditions) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the filter has more than ", limits.max_conditions, " conditions; split the query"));
    }
    if (c.IsFieldCondition() && c.key.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(at, ": a field condition needs a key"));
    }
    const std::string where = c.key.empty() ? at : absl::StrCat(at, " (key '", c.key.substr(0, 64), "')");
    switch (c.type) {
      case T::kMatch:
        if (std::holds_alternative<double>(c.value) || std::holds_alternative<GeoPoint>(c.value)) {
          return absl::InvalidArgumentError(absl::StrCat(
              where, ": match takes a string, an integer or a bool (use range for doubles)"));
        }
        return absl::OkStatus();
      case T::kMatchAny:
      case T::kMatchExcept: {
        const char* name = c.type == T::kMatchAny ? "any" : "except";
        if (c.values.empty()) {
          return absl::InvalidArgumentError(absl::StrCat(where, ": match ", name, " is empty"));
        }
        if (c.values.size() > limits.max_values) {
          return absl::ResourceExhaustedError(absl::StrCat(
              where, ": match ", name, " lists ", c.values.size(), " values; at most ",
              limits.max_values, " are allowed"));
        }
        const bool strings = std::holds_alternative<std::string>(c.values[0]);
        for (const FieldScalar& v : c.values) {
          const bool ok = strings ? std::holds_alternative<std::string>(v)
                                  : std::holds_alternative<int64_t>(v);
          if (!ok) {
            return absl::InvalidArgumentError(absl::StrCat(
                where, ": match ", name, " takes strings only or integers only"));
          }
        }
        return absl::OkStatus();
      }
      case T::kRange:
        return CheckBounds(c.range, absl::StrCat(where, ": range"));
      case T::kValuesCount:
        return CheckBounds(c.range, absl::StrCat(where, ": values_count"));
      case T::kGeoRadius:
        if (!GeoOk(c.center)) {
          return absl::InvalidArgumentError(
              absl::StrCat(where, ": geo_radius centre is off the globe (lat -90..90, lon -180..180)"));
        }
        if (!(c.radius_m >= 0) || std::isinf(c.radius_m)) {
          return absl::InvalidArgumentError(
              absl::StrCat(where, ": geo_radius radius must be a finite number of metres >= 0"));
        }
        return absl::OkStatus();
      case T::kGeoBox:
        if (!GeoOk(c.top_left) || !GeoOk(c.bottom_right)) {
          return absl::InvalidArgumentError(absl::StrCat(
              where, ": geo_bounding_box corner is off the globe (lat -90..90, lon -180..180)"));
        }
        if (c.top_left.lat < c.bottom_right.lat) {
          return absl::InvalidArgumentError(absl::StrCat(
              where, ": geo_bounding_box top_left.lat is below bottom_right.lat"));
        }
        return absl::OkStatus();
      case T::kIsEmpty:
      case T::kIsNull:
        return absl::OkStatus();
      case T::kHasId:
        if (c.ids.size() > limits.max_ids) {
          return absl::ResourceExhaustedError(absl::StrCat(
              at, ": has_id lists ", c.ids.size(), " ids; at most ", limits.max_ids,
              " are allowed"));
        }
        return absl::OkStatus();
      case T::kNested:
        if (c.nested == nullptr) {
          return absl::InvalidArgumentError(absl::StrCat(at, ": a nested filter is missing"));
        }
        return Filter(*c.nested, depth + 1, at);
    }
    return absl::InvalidArgumentError(absl::StrCat(at, ": unknown condition"));
  }

  absl::Status Filter(const server::Filter& f, uint32_t depth, const std::string& at) {
    if (depth > limits.max_depth) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the filter nests deeper than ", limits.max_depth, " levels; flatten it"));
    }
    const auto list = [&](const std::vector<server::Condition>& cs, const char* name) {
      for (size_t i = 0; i < cs.size(); ++i) {
        absl::Status st = Condition(cs[i], depth, absl::StrCat(at, name, "[", i, "]"));
        if (!st.ok()) return st;
      }
      return absl::OkStatus();
    };
    if (absl::Status st = list(f.must, "must"); !st.ok()) return st;
    if (absl::Status st = list(f.should, "should"); !st.ok()) return st;
    if (absl::Status st = list(f.must_not, "must_not"); !st.ok()) return st;
    if (absl::Status st = list(f.min_should, "min_should"); !st.ok()) return st;
    if (!f.min_should.empty() &&
        (f.min_should_count == 0 || f.min_should_count > f.min_should.size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          at, "min_should: min_count is ", f.min_should_count, "; give 1..",
          f.min_should.size(), " (its number of conditions)"));
    }
    return absl::OkStatus();
  }
};

bool EqualsScalar(const FieldScalar& a, const FieldScalar& b) {
  return a.index() == b.index() && a == b;
}

bool NumericOf(const FieldScalar& v, double* out) {
  if (const int64_t* i = std::get_if<int64_t>(&v)) {
    *out = static_cast<double>(*i);
    return true;
  }
  if (const double* d = std::get_if<double>(&v)) {
    *out = *d;
    return true;
  }
  return false;
}

bool InBox(const Condition& c, const GeoPoint& p) {
  if (p.lat > c.top_left.lat || p.lat < c.bottom_right.lat) return false;
  if (c.top_left.lon <= c.bottom_right.lon) {
    return p.lon >= c.top_left.lon && p.lon <= c.bottom_right.lon;
  }
  return p.lon >= c.top_left.lon || p.lon <= c.bottom_right.lon;  // across the antimeridian
}

bool ConditionMatches(const Condition& c, uint64_t id, const PayloadFields& fields);

bool AllOf(const std::vector<Condition>& cs, uint64_t id, const PayloadFields& f) {
  for (const Condition& c : cs) {
    if (!ConditionMatches(c, id, f)) return false;
  }
  return true;
}

bool ConditionMatches(const Condition& c, uint64_t id, const PayloadFields& fields) {
  switch (c.type) {
    case Condition::Type::kHasId:
      return c.ids.contains(id);
    case Condition::Type::kNested:
      return Matches(*c.nested, id, fields);
    default: {
      auto it = fields.find(c.key);
      return FieldConditionMatches(c, it == fields.end() ? nullptr : &it->second);
    }
  }
}

}  // namespace

double HaversineMeters(const GeoPoint& a, const GeoPoint& b) {
  constexpr double kRadius = 6371008.8;
  constexpr double kRad = 3.14159265358979323846 / 180;
  const double dlat = (b.lat - a.lat) * kRad, dlon = (b.lon - a.lon) * kRad;
  const double s = std::sin(dlat / 2), t = std::sin(dlon / 2);
  const double h = s * s + std::cos(a.lat * kRad) * std::cos(b.lat * kRad) * t * t;
  return 2 * kRadius * std::asin(std::sqrt(std::min(1.0, h)));
}

absl::Status ValidateFilter(const Filter& filter, const FilterLimits& limits) {
  Walk w{limits};
  return w.Filter(filter, 1, "filter.");
}

bool ScalarMatches(const Condition& c, const FieldScalar& v) {
  using T = Condition::Type;
  switch (c.type) {
    case T::kMatch:
      return EqualsScalar(v, c.value);
    case T::kMatchAny:
      for (const FieldScalar& w : c.values) {
        if (EqualsScalar(v, w)) return true;
      }
      return false;
    case T::kRange: {
      double x;
      return NumericOf(v, &x) && c.range.Contains(x);
    }
    case T::kGeoRadius: {
      const GeoPoint* p = std::get_if<GeoPoint>(&v);
      return p != nullptr && HaversineMeters(c.center, *p) <= c.radius_m;
    }
    case T::kGeoBox: {
      const GeoPoint* p = std::get_if<GeoPoint>(&v);
      return p != nullptr && InBox(c, *p);
    }
    default:
      return false;
  }
}

bool FieldConditionMatches(const Condition& c, const FieldValue* value) {
  using T = Condition::Type;
  const std::vector<FieldScalar> none;
  const std::vector<FieldScalar>& vals = value == nullptr ? none : value->values;
  switch (c.type) {
    case T::kIsEmpty:
      return vals.empty();
    case T::kIsNull:
      return value != nullptr && value->kind == FieldValue::Kind::kNull;
    case T::kValuesCount:
      return c.range.Contains(static_cast<double>(vals.size()));
    case T::kMatchExcept:
      for (const FieldScalar& v : vals) {
        bool listed = false;
        for (const FieldScalar& w : c.values) listed = listed || EqualsScalar(v, w);
        if (!listed) return true;
      }
      return false;
    case T::kMatch:
    case T::kMatchAny:
    case T::kRange:
    case T::kGeoRadius:
    case T::kGeoBox:
      for (const FieldScalar& v : vals) {
        if (ScalarMatches(c, v)) return true;
      }
      return false;
    case T::kHasId:
    case T::kNested:
      return false;
  }
  return false;
}

bool Matches(const Filter& filter, uint64_t id, const PayloadFields& fields) {
  if (!AllOf(filter.must, id, fields)) return false;
  for (const Condition& c : filter.must_not) {
    if (ConditionMatches(c, id, fields)) return false;
  }
  if (!filter.should.empty()) {
    bool any = false;
    for (const Condition& c : filter.should) {
      if (ConditionMatches(c, id, fields)) {
        any = true;
        break;
      }
    }
    if (!any) return false;
  }
  if (!filter.min_should.empty()) {
    uint32_t n = 0;
    for (const Condition& c : filter.min_should) n += ConditionMatches(c, id, fields) ? 1 : 0;
    if (n < filter.min_should_count) return false;
  }
  return true;
}

namespace {

// The shape of one condition: a nested filter's after normalising it, a
// field or id condition's always kSome.
FilterShape ShapeOf(Condition* c) {
  if (c->type != Condition::Type::kNested || c->nested == nullptr) return FilterShape::kSome;
  auto inner = std::make_shared<Filter>(*c->nested);
  const FilterShape shape = NormalizeFilter(inner.get());
  c->nested = std::move(inner);
  return shape;
}

void MatchNothing(Filter* filter) {
  *filter = Filter();
  Condition all;
  all.type = Condition::Type::kNested;
  all.nested = std::make_shared<const Filter>();
  filter->must_not.push_back(std::move(all));
}

}  // namespace

FilterShape NormalizeFilter(Filter* filter) {
  // The canonical match-nothing form stays as it is.
  if (filter->must.empty() && filter->should.empty() && filter->min_should.empty() &&
      filter->must_not.size() == 1 && filter->must_not[0].type == Condition::Type::kNested &&
      filter->must_not[0].nested != nullptr && filter->must_not[0].nested->empty()) {
    return FilterShape::kNone;
  }
  bool none = false;
  // must: an always-true entry says nothing, an always-false one fails all.
  std::vector<Condition> kept;
  for (Condition& c : filter->must) {
    const FilterShape s = ShapeOf(&c);
    if (s == FilterShape::kNone) none = true;
    if (s == FilterShape::kSome) kept.push_back(std::move(c));
  }
  filter->must = std::move(kept);
  // must_not: the other way round.
  kept.clear();
  for (Condition& c : filter->must_not) {
    const FilterShape s = ShapeOf(&c);
    if (s == FilterShape::kAll) none = true;
    if (s == FilterShape::kSome) kept.push_back(std::move(c));
  }
  filter->must_not = std::move(kept);
  // should: one always-true entry satisfies it; always-false ones never
  // help, and a list of nothing but them fails.
  if (!filter->should.empty()) {
    bool satisfied = false;
    kept.clear();
    for (Condition& c : filter->should) {
      const FilterShape s = ShapeOf(&c);
      if (s == FilterShape::kAll) satisfied = true;
      if (s == FilterShape::kSome) kept.push_back(std::move(c));
    }
    if (satisfied) {
      kept.clear();
    } else if (kept.empty()) {
      none = true;
    }
    filter->should = std::move(kept);
  }
  // min_should: always-true entries count as met, always-false ones can
  // never count.
  if (!filter->min_should.empty()) {
    uint32_t met = 0;
    kept.clear();
    for (Condition& c : filter->min_should) {
      const FilterShape s = ShapeOf(&c);
      if (s == FilterShape::kAll) ++met;
      if (s == FilterShape::kSome) kept.push_back(std::move(c));
    }
    const uint32_t need = filter->min_should_count > met ? filter->min_should_count - met : 0;
    if (need == 0) {
      kept.clear();
      filter->min_should_count = 0;
    } else if (need > kept.size()) {
      none = true;
    } else {
      filter->min_should_count = need;
    }
    filter->min_should = std::move(kept);
  }
  if (none) {
    MatchNothing(filter);
    return FilterShape::kNone;
  }
  return filter->empty() ? FilterShape::kAll : FilterShape::kSome;
}

absl::Status CheckDeleteFilter(const Filter& filter, bool all) {
  if (all || !filter.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      "the filter matches every point (it is empty, or holds only empty nested filters); "
      "to delete every point set all: true, or drop the collection");
}

absl::Status CheckDeleteMatches(uint64_t matched, uint64_t live, bool all,
                                const std::string& collection) {
  if (all || matched == 0 || matched < live) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "the filter matches all ", live, " live points of '", collection,
      "'; nothing was deleted. To delete every point set all: true, or drop the collection"));
}

}  // namespace zoom::server
