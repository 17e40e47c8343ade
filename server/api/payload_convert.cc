#include "server/api/payload_convert.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <variant>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace zoom::server {
namespace {

absl::StatusOr<FieldScalar> ScalarFromProto(const std::string& name, const v1::Value& v) {
  switch (v.kind_case()) {
    case v1::Value::kStringValue:
      return FieldScalar(v.string_value());
    case v1::Value::kIntegerValue:
      return FieldScalar(static_cast<int64_t>(v.integer_value()));
    case v1::Value::kDoubleValue:
      return FieldScalar(v.double_value());
    case v1::Value::kBoolValue:
      return FieldScalar(v.bool_value());
    case v1::Value::kGeoValue:
      return FieldScalar(GeoPoint{v.geo_value().lat(), v.geo_value().lon()});
    case v1::Value::kListValue:
      return absl::InvalidArgumentError(
          absl::StrCat("field '", name, "': a list inside a list; lists hold single values"));
    case v1::Value::kNullValue:
      return absl::InvalidArgumentError(
          absl::StrCat("field '", name, "': null inside a list; leave it out"));
    case v1::Value::KIND_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("field '", name, "': a value with no kind set (string_value, integer_value, "
                   "double_value, bool_value, geo_value, list_value or null_value)"));
}

void ScalarToProto(const FieldScalar& s, v1::Value* out) {
  switch (s.index()) {
    case 0:
      out->set_string_value(std::get<std::string>(s));
      break;
    case 1:
      out->set_integer_value(std::get<int64_t>(s));
      break;
    case 2:
      out->set_double_value(std::get<double>(s));
      break;
    case 3:
      out->set_bool_value(std::get<bool>(s));
      break;
    case 4: {
      const GeoPoint& g = std::get<GeoPoint>(s);
      out->mutable_geo_value()->set_lat(g.lat);
      out->mutable_geo_value()->set_lon(g.lon);
      break;
    }
  }
}

}  // namespace

absl::StatusOr<absl::Span<const float>> VectorFromProto(
    const google::protobuf::RepeatedField<float>& floats, const std::string& bytes,
    std::vector<float>* scratch, absl::string_view what) {
  if (bytes.empty()) return absl::MakeConstSpan(floats.data(), floats.size());
  if (!floats.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " has both vector (", floats.size(), " floats) and vector_bytes (", bytes.size(),
        " bytes): give one"));
  }
  scratch->resize(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) {
    (*scratch)[i] = static_cast<float>(static_cast<unsigned char>(bytes[i]));
  }
  return absl::MakeConstSpan(*scratch);
}

absl::StatusOr<PayloadFields> FieldsFromProto(const ProtoFields& fields) {
  PayloadFields out;
  for (const auto& [name, value] : fields) {
    FieldValue fv;
    if (value.kind_case() == v1::Value::kNullValue) {
      fv.kind = FieldValue::Kind::kNull;
    } else if (value.kind_case() == v1::Value::kListValue) {
      fv.kind = FieldValue::Kind::kList;
      fv.values.reserve(value.list_value().values_size());
      for (const v1::Value& e : value.list_value().values()) {
        absl::StatusOr<FieldScalar> s = ScalarFromProto(name, e);
        if (!s.ok()) return s.status();
        fv.values.push_back(std::move(*s));
      }
    } else {
      absl::StatusOr<FieldScalar> s = ScalarFromProto(name, value);
      if (!s.ok()) return s.status();
      fv = FieldValue::Of(std::move(*s));
    }
    out.emplace(name, std::move(fv));
  }
  return out;
}

void FieldsToProto(const PayloadFields& fields, ProtoFields* out) {
  for (const auto& [name, value] : fields) {
    v1::Value& v = (*out)[name];
    switch (value.kind) {
      case FieldValue::Kind::kNull:
        v.set_null_value(v1::NULL_VALUE);
        break;
      case FieldValue::Kind::kScalar:
        ScalarToProto(value.values.front(), &v);
        break;
      case FieldValue::Kind::kList: {
        v1::ListValue* list = v.mutable_list_value();
        for (const FieldScalar& s : value.values) ScalarToProto(s, list->add_values());
        break;
      }
    }
  }
}

namespace {

// A JSON-ish value as a match operand: a string, an integer or a bool.
absl::Status MatchScalar(const google::protobuf::Value& v, const std::string& at,
                         FieldScalar* out) {
  switch (v.kind_case()) {
    case google::protobuf::Value::kStringValue:
      *out = v.string_value();
      return absl::OkStatus();
    case google::protobuf::Value::kBoolValue:
      *out = v.bool_value();
      return absl::OkStatus();
    case google::protobuf::Value::kNumberValue: {
      const double d = v.number_value();
      if (!(std::abs(d) <= 9007199254740992.0) || d != std::floor(d)) {
        return absl::InvalidArgumentError(absl::StrCat(
            at, ": match takes integers (|n| <= 2^53 as a JSON number; `integer` for any "
                "int64), strings or bools, not ", d, " (use range for numbers with a fraction)"));
      }
      *out = static_cast<int64_t>(d);
      return absl::OkStatus();
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(at, ": match takes a string, an integer or a bool"));
  }
}

RangeBounds BoundsOf(const v1::Range& r) {
  RangeBounds b;
  if (r.has_gt()) b.gt = r.gt();
  if (r.has_gte()) b.gte = r.gte();
  if (r.has_lt()) b.lt = r.lt();
  if (r.has_lte()) b.lte = r.lte();
  return b;
}

GeoPoint GeoOf(const v1::GeoPoint& p) { return {p.lat(), p.lon()}; }

// Conditions and has_id ids converted so far in the whole filter: the
// limits hold before anything more is allocated.
struct Budget {
  uint64_t conditions = 0, ids = 0;
};

absl::Status FilterAt(const v1::Filter& proto, Filter* out, const FilterLimits& limits,
                      uint32_t depth, const std::string& at, Budget* budget);

absl::Status ConditionOf(const v1::Condition& c, Condition* out, const FilterLimits& limits,
                         uint32_t depth, const std::string& at, Budget* budget) {
  const int field_parts = (c.has_match() ? 1 : 0) + (c.has_range() ? 1 : 0) +
                          (c.has_values_count() ? 1 : 0) + (c.has_geo_radius() ? 1 : 0) +
                          (c.has_geo_bounding_box() ? 1 : 0);
  const int kinds = (!c.key().empty() || field_parts > 0 ? 1 : 0) + (c.has_id_size() > 0 ? 1 : 0) +
                    (c.has_is_empty() ? 1 : 0) + (c.has_is_null() ? 1 : 0) +
                    (c.has_filter() ? 1 : 0);
  if (kinds != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        at, ": a condition sets exactly one of key (with match, range, values_count, "
            "geo_radius or geo_bounding_box), has_id, is_empty, is_null or filter; this one sets ",
        kinds == 0 ? "none" : "several"));
  }
  if (c.has_id_size() > 0) {
    budget->ids += static_cast<uint64_t>(c.has_id_size());
    if (static_cast<uint64_t>(c.has_id_size()) > limits.max_ids || budget->ids > 4 * uint64_t{limits.max_ids}) {
      return absl::ResourceExhaustedError(absl::StrCat(
          at, ": has_id lists ", c.has_id_size(), " ids; at most ", limits.max_ids,
          " are allowed in one, ", 4 * uint64_t{limits.max_ids}, " in a whole filter"));
    }
    out->type = Condition::Type::kHasId;
    out->ids.insert(c.has_id().begin(), c.has_id().end());
    return absl::OkStatus();
  }
  if (c.has_is_empty() || c.has_is_null()) {
    out->type = c.has_is_empty() ? Condition::Type::kIsEmpty : Condition::Type::kIsNull;
    out->key = c.has_is_empty() ? c.is_empty().key() : c.is_null().key();
    if (out->key.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          at, ": ", c.has_is_empty() ? "is_empty" : "is_null", " needs a key"));
    }
    return absl::OkStatus();
  }
  if (c.has_filter()) {
    auto nested = std::make_shared<Filter>();
    ZOOM_RETURN_IF_ERROR(FilterAt(c.filter(), nested.get(), limits, depth + 1,
                                  absl::StrCat(at, ".filter."), budget));
    out->type = Condition::Type::kNested;
    out->nested = std::move(nested);
    return absl::OkStatus();
  }
  out->key = c.key();
  if (field_parts != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        at, ": a field condition (key '", c.key().substr(0, 64), "') sets exactly one of match, "
            "range, values_count, geo_radius, geo_bounding_box"));
  }
  if (c.key().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(at, ": a field condition needs a key"));
  }
  if (c.has_range()) {
    out->type = Condition::Type::kRange;
    out->range = BoundsOf(c.range());
    return absl::OkStatus();
  }
  if (c.has_values_count()) {
    out->type = Condition::Type::kValuesCount;
    out->range = BoundsOf(c.values_count());
    return absl::OkStatus();
  }
  if (c.has_geo_radius()) {
    out->type = Condition::Type::kGeoRadius;
    out->center = GeoOf(c.geo_radius().center());
    out->radius_m = c.geo_radius().radius();
    return absl::OkStatus();
  }
  if (c.has_geo_bounding_box()) {
    out->type = Condition::Type::kGeoBox;
    out->top_left = GeoOf(c.geo_bounding_box().top_left());
    out->bottom_right = GeoOf(c.geo_bounding_box().bottom_right());
    return absl::OkStatus();
  }
  const v1::Match& m = c.match();
  const std::string mat = absl::StrCat(at, ".match");
  const auto list = [&](const google::protobuf::ListValue& l, Condition::Type type) {
    out->type = type;
    if (static_cast<uint64_t>(l.values_size()) > limits.max_values) {
      return absl::ResourceExhaustedError(absl::StrCat(mat, ": ", l.values_size(),
                                                       " values; at most ", limits.max_values,
                                                       " are allowed"));
    }
    for (const google::protobuf::Value& v : l.values()) {
      FieldScalar s;
      ZOOM_RETURN_IF_ERROR(MatchScalar(v, mat, &s));
      out->values.push_back(std::move(s));
    }
    return absl::OkStatus();
  };
  const auto ints = [&](const v1::Integers& l, Condition::Type type) {
    out->type = type;
    if (static_cast<uint64_t>(l.values_size()) > limits.max_values) {
      return absl::ResourceExhaustedError(absl::StrCat(mat, ": ", l.values_size(),
                                                       " values; at most ", limits.max_values,
                                                       " are allowed"));
    }
    for (int64_t v : l.values()) out->values.emplace_back(v);
    return absl::OkStatus();
  };
  switch (m.match_value_case()) {
    case v1::Match::kValue:
      out->type = Condition::Type::kMatch;
      return MatchScalar(m.value(), mat, &out->value);
    case v1::Match::kAny:
      return list(m.any(), Condition::Type::kMatchAny);
    case v1::Match::kExcept:
      return list(m.except(), Condition::Type::kMatchExcept);
    case v1::Match::kKeyword:
      out->type = Condition::Type::kMatch;
      out->value = m.keyword();
      return absl::OkStatus();
    case v1::Match::kInteger:
      out->type = Condition::Type::kMatch;
      out->value = m.integer();
      return absl::OkStatus();
    case v1::Match::kBoolean:
      out->type = Condition::Type::kMatch;
      out->value = m.boolean();
      return absl::OkStatus();
    case v1::Match::kIntegers:
      return ints(m.integers(), Condition::Type::kMatchAny);
    case v1::Match::kExceptIntegers:
      return ints(m.except_integers(), Condition::Type::kMatchExcept);
    case v1::Match::MATCH_VALUE_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      mat, ": give one of value, any, except, keyword, integer, boolean, integers, "
           "except_integers"));
}

absl::Status FilterAt(const v1::Filter& proto, Filter* out, const FilterLimits& limits,
                      uint32_t depth, const std::string& at, Budget* budget) {
  if (depth > limits.max_depth) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the filter nests deeper than ", limits.max_depth, " levels; flatten it"));
  }
  const auto list = [&](const google::protobuf::RepeatedPtrField<v1::Condition>& in,
                        std::vector<Condition>* cs, const char* name) {
    budget->conditions += static_cast<uint64_t>(in.size());
    if (budget->conditions > limits.max_conditions) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the filter has more than ", limits.max_conditions, " conditions; split the query"));
    }
    cs->resize(in.size());
    for (int i = 0; i < in.size(); ++i) {
      ZOOM_RETURN_IF_ERROR(ConditionOf(in[i], &(*cs)[i], limits, depth,
                                       absl::StrCat(at, name, "[", i, "]"), budget));
    }
    return absl::OkStatus();
  };
  ZOOM_RETURN_IF_ERROR(list(proto.must(), &out->must, "must"));
  ZOOM_RETURN_IF_ERROR(list(proto.should(), &out->should, "should"));
  ZOOM_RETURN_IF_ERROR(list(proto.must_not(), &out->must_not, "must_not"));
  if (proto.has_min_should()) {
    ZOOM_RETURN_IF_ERROR(
        list(proto.min_should().conditions(), &out->min_should, "min_should.conditions"));
    out->min_should_count = static_cast<uint32_t>(
        std::min<uint64_t>(proto.min_should().min_count(), UINT32_MAX));
    if (out->min_should.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(at, "min_should: give its conditions (or leave min_should out)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status FilterFromProto(const v1::Filter& proto, Filter* out, const FilterLimits& limits) {
  *out = Filter();
  Budget budget;
  ZOOM_RETURN_IF_ERROR(FilterAt(proto, out, limits, 1, "filter.", &budget));
  ZOOM_RETURN_IF_ERROR(ValidateFilter(*out, limits));
  NormalizeFilter(out);
  return absl::OkStatus();
}

namespace {

void BoundsTo(const RangeBounds& b, v1::Range* r) {
  if (b.gt) r->set_gt(*b.gt);
  if (b.gte) r->set_gte(*b.gte);
  if (b.lt) r->set_lt(*b.lt);
  if (b.lte) r->set_lte(*b.lte);
}

void GeoTo(const GeoPoint& g, v1::GeoPoint* p) {
  p->set_lat(g.lat);
  p->set_lon(g.lon);
}

void ConditionTo(const Condition& c, v1::Condition* out) {
  using T = Condition::Type;
  switch (c.type) {
    case T::kHasId: {
      std::vector<uint64_t> ids(c.ids.begin(), c.ids.end());
      std::sort(ids.begin(), ids.end());  // a set: the same filter, the same bytes
      for (uint64_t id : ids) out->add_has_id(id);
      return;
    }
    case T::kIsEmpty:
      out->mutable_is_empty()->set_key(c.key);
      return;
    case T::kIsNull:
      out->mutable_is_null()->set_key(c.key);
      return;
    case T::kNested:
      if (c.nested != nullptr) {
        FilterToProto(*c.nested, out->mutable_filter());
      } else {
        out->mutable_filter();
      }
      return;
    default:
      break;
  }
  out->set_key(c.key);
  switch (c.type) {
    case T::kRange: return BoundsTo(c.range, out->mutable_range());
    case T::kValuesCount: return BoundsTo(c.range, out->mutable_values_count());
    case T::kGeoRadius:
      GeoTo(c.center, out->mutable_geo_radius()->mutable_center());
      out->mutable_geo_radius()->set_radius(c.radius_m);
      return;
    case T::kGeoBox:
      GeoTo(c.top_left, out->mutable_geo_bounding_box()->mutable_top_left());
      GeoTo(c.bottom_right, out->mutable_geo_bounding_box()->mutable_bottom_right());
      return;
    case T::kMatch: {
      v1::Match* m = out->mutable_match();
      if (const auto* s = std::get_if<std::string>(&c.value)) {
        m->set_keyword(*s);
      } else if (const auto* i = std::get_if<int64_t>(&c.value)) {
        m->set_integer(*i);
      } else if (const auto* b = std::get_if<bool>(&c.value)) {
        m->set_boolean(*b);
      }
      return;
    }
    case T::kMatchAny:
    case T::kMatchExcept: {
      v1::Match* m = out->mutable_match();
      const bool ints = !c.values.empty() && std::holds_alternative<int64_t>(c.values[0]);
      if (ints) {
        v1::Integers* l =
            c.type == T::kMatchAny ? m->mutable_integers() : m->mutable_except_integers();
        for (const FieldScalar& v : c.values) l->add_values(std::get<int64_t>(v));
      } else {
        google::protobuf::ListValue* l =
            c.type == T::kMatchAny ? m->mutable_any() : m->mutable_except();
        for (const FieldScalar& v : c.values) {
          if (const auto* s = std::get_if<std::string>(&v)) l->add_values()->set_string_value(*s);
        }
      }
      return;
    }
    default:
      return;
  }
}

void ConditionsTo(const std::vector<Condition>& in,
                  google::protobuf::RepeatedPtrField<v1::Condition>* out) {
  for (const Condition& c : in) ConditionTo(c, out->Add());
}

}  // namespace

void FilterToProto(const Filter& filter, v1::Filter* out) {
  out->Clear();
  ConditionsTo(filter.must, out->mutable_must());
  ConditionsTo(filter.should, out->mutable_should());
  ConditionsTo(filter.must_not, out->mutable_must_not());
  if (!filter.min_should.empty()) {
    ConditionsTo(filter.min_should, out->mutable_min_should()->mutable_conditions());
    out->mutable_min_should()->set_min_count(filter.min_should_count);
  }
}

absl::StatusOr<FieldIndexType> FieldIndexTypeFromProto(v1::FieldIndexType type) {
  switch (type) {
    case v1::KEYWORD: return FieldIndexType::kKeyword;
    case v1::INTEGER: return FieldIndexType::kInteger;
    case v1::FLOAT: return FieldIndexType::kFloat;
    case v1::BOOL: return FieldIndexType::kBool;
    case v1::GEO: return FieldIndexType::kGeo;
    default:
      return absl::InvalidArgumentError(
          "give the field index's type: KEYWORD, INTEGER, FLOAT, BOOL or GEO");
  }
}

v1::FieldIndexType FieldIndexTypeToProto(FieldIndexType type) {
  switch (type) {
    case FieldIndexType::kKeyword: return v1::KEYWORD;
    case FieldIndexType::kInteger: return v1::INTEGER;
    case FieldIndexType::kFloat: return v1::FLOAT;
    case FieldIndexType::kBool: return v1::BOOL;
    case FieldIndexType::kGeo: return v1::GEO;
  }
  return v1::FIELD_INDEX_TYPE_UNSPECIFIED;
}

}  // namespace zoom::server
