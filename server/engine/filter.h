// File: server/engine/filter.h
//
// Filter: which points a query (Search, Count, ...) may touch, judged by
// their typed payload (payload_fields.h) and their ids, in the shape of
// Qdrant's filter so that queries can be ported:
//
//   Filter     must (all), should (at least one, when any are given),
//              must_not (none), min_should (at least min_count of them)
//   Condition  a field condition on `key` (match, range, values_count,
//              geo radius / bounding box), has_id, is_empty, is_null, or a
//              nested Filter
//
// Semantics (the reference: Matches; payload indexes must agree with it,
// which the property tests check):
//   match value  some value of the field equals it (a string, an int64 or
//                a bool; an int64 never equals a double)
//   match any    some value equals one of the list (strings or int64s)
//   match except the field has some value (of any type) that is none of
//                the list; a missing, null or empty field does not match
//   range        some numeric value (int64 or double, compared as double)
//                lies within every bound given
//   values_count the number of values (a scalar 1, a list its size, null
//                or missing 0) lies within the bounds
//   geo radius   some geo value lies within radius_m metres of the centre
//                (haversine, on a sphere of 6,371,008.8 m)
//   geo box      some geo value has bottom_right.lat <= lat <= top_left.lat
//                and top_left.lon <= lon <= bottom_right.lon (a box across
//                the antimeridian has top_left.lon > bottom_right.lon)
//   is_empty     the field is missing, null or an empty list
//   is_null      the field is present and null
//   has_id       the point's external id is one of the list
// An empty filter matches every point.
#ifndef ZOOM_SERVER_ENGINE_FILTER_H_
#define ZOOM_SERVER_ENGINE_FILTER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "server/engine/payload_fields.h"

namespace zoom::server {

struct Filter;

struct RangeBounds {
  std::optional<double> gt, gte, lt, lte;
  bool Contains(double v) const {
    return (!gt || v > *gt) && (!gte || v >= *gte) && (!lt || v < *lt) && (!lte || v <= *lte);
  }
  bool empty() const { return !gt && !gte && !lt && !lte; }
};

struct Condition {
  enum class Type : uint8_t {
    kMatch,        // value
    kMatchAny,     // values
    kMatchExcept,  // values
    kRange,        // range
    kValuesCount,  // range
    kGeoRadius,    // center, radius_m
    kGeoBox,       // top_left, bottom_right
    kIsEmpty,
    kIsNull,
    kHasId,   // ids
    kNested,  // nested
  };
  Type type = Type::kMatch;
  std::string key;                  // field conditions, is_empty, is_null
  FieldScalar value;                // kMatch: a string, int64 or bool
  std::vector<FieldScalar> values;  // kMatchAny / kMatchExcept: strings or int64s
  RangeBounds range;
  GeoPoint center;
  double radius_m = 0;
  GeoPoint top_left, bottom_right;
  absl::flat_hash_set<uint64_t> ids;  // kHasId
  std::shared_ptr<const Filter> nested;

  bool IsFieldCondition() const { return type != Type::kHasId && type != Type::kNested; }
};

struct Filter {
  std::vector<Condition> must, should, must_not;
  std::vector<Condition> min_should;
  uint32_t min_should_count = 0;

  bool empty() const {
    return must.empty() && should.empty() && must_not.empty() && min_should.empty();
  }
};

struct FilterLimits {
  uint32_t max_depth = 8;             // nested filters (the top one is depth 1)
  uint32_t max_conditions = 256;      // in the whole filter
  uint32_t max_values = 1024;         // one match any / except list
  uint32_t max_ids = 65536;           // one has_id list
};

// InvalidArgument naming what to fix: nesting deeper than max_depth, more
// than max_conditions conditions, a field condition without a key, a match
// value of another type than string/int64/bool, a mixed or empty any /
// except list, a range or values_count without bounds (or NaN ones), a geo
// centre or corner off the globe, a negative or NaN radius, min_should
// with min_count 0 or above its conditions. ResourceExhausted for an any /
// except list or a has_id list over its limit.
absl::Status ValidateFilter(const Filter& filter, const FilterLimits& limits = {});

// What a filter matches regardless of the points' payloads, as far as its
// shape tells: every point (kAll), none (kNone), or it depends (kSome).
enum class FilterShape : uint8_t { kAll, kNone, kSome };

// Rewrites a valid filter into an equivalent one without the parts that
// match regardless of the payload, and returns its shape: a nested filter
// that normalises to empty passes (a `must` entry dropped, a `should` list
// satisfied, a `min_should` entry counted as met), one that matches
// nothing fails (a `must` entry makes the whole filter match nothing, a
// `must_not` entry is dropped, ...). After it, kAll means `filter->empty()`
// ({"must": [{"filter": {}}]} is a match-all filter, not a narrow one), and
// a kNone filter is rewritten to the canonical match-nothing form
// (must_not: [an empty nested filter]). Matches() gives the same answer on
// every point before and after. Idempotent.
FilterShape NormalizeFilter(Filter* filter);

// Delete by filter's guard against a wipe by accident: InvalidArgument,
// saying how to ask for it, when the normalised `filter` is empty and not
// `all` (a filter meant to be narrow that matches every point).
absl::Status CheckDeleteFilter(const Filter& filter, bool all);
// FailedPrecondition when `matched` points of `live` (> 0) are all of them
// and not `all`: such a delete runs only when asked for by name.
absl::Status CheckDeleteMatches(uint64_t matched, uint64_t live, bool all,
                                const std::string& collection);

// Whether the point `id` with `fields` passes `filter` (the reference
// semantics above). The filter must be valid.
bool Matches(const Filter& filter, uint64_t id, const PayloadFields& fields);
// One field condition on one field's value (null: the field is missing).
bool FieldConditionMatches(const Condition& c, const FieldValue* value);

// For match (value / any), range and geo conditions: whether the one
// value `v` satisfies `c` (the field matches when some value does).
bool ScalarMatches(const Condition& c, const FieldScalar& v);

// Great-circle distance in metres.
double HaversineMeters(const GeoPoint& a, const GeoPoint& b);

}  // namespace zoom::server

#endif  // ZOOM_SERVER_ENGINE_FILTER_H_
