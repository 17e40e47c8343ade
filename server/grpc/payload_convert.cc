#include "server/grpc/payload_convert.h"

#include "absl/strings/str_cat.h"

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

}  // namespace zoom::server
