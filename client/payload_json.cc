#include "client/payload_json.h"

#include <cmath>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/json.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace zoom::client {
namespace {

absl::Status ScalarFromJson(const std::string& key, const google::protobuf::Value& in,
                            v1::Value* out, bool in_list) {
  switch (in.kind_case()) {
    case google::protobuf::Value::kNullValue:
      if (in_list) {
        return absl::InvalidArgumentError(absl::StrCat("field '", key, "': null inside a list"));
      }
      out->set_null_value(v1::NULL_VALUE);
      return absl::OkStatus();
    case google::protobuf::Value::kNumberValue: {
      const double d = in.number_value();
      if (std::trunc(d) == d && std::fabs(d) <= 9007199254740992.0) {
        out->set_integer_value(static_cast<int64_t>(d));
      } else {
        out->set_double_value(d);
      }
      return absl::OkStatus();
    }
    case google::protobuf::Value::kStringValue:
      out->set_string_value(in.string_value());
      return absl::OkStatus();
    case google::protobuf::Value::kBoolValue:
      out->set_bool_value(in.bool_value());
      return absl::OkStatus();
    case google::protobuf::Value::kStructValue: {
      const auto& f = in.struct_value().fields();
      auto lat = f.find("lat"), lon = f.find("lon");
      if (f.size() != 2 || lat == f.end() || lon == f.end() ||
          lat->second.kind_case() != google::protobuf::Value::kNumberValue ||
          lon->second.kind_case() != google::protobuf::Value::kNumberValue) {
        return absl::InvalidArgumentError(absl::StrCat(
            "field '", key, "': an object must be a geo point {\"lat\": N, \"lon\": N}"));
      }
      out->mutable_geo_value()->set_lat(lat->second.number_value());
      out->mutable_geo_value()->set_lon(lon->second.number_value());
      return absl::OkStatus();
    }
    case google::protobuf::Value::kListValue:
      if (in_list) {
        return absl::InvalidArgumentError(
            absl::StrCat("field '", key, "': a list inside a list"));
      }
      for (const google::protobuf::Value& e : in.list_value().values()) {
        absl::Status st =
            ScalarFromJson(key, e, out->mutable_list_value()->add_values(), /*in_list=*/true);
        if (!st.ok()) return st;
      }
      if (in.list_value().values().empty()) out->mutable_list_value();
      return absl::OkStatus();
    case google::protobuf::Value::KIND_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat("field '", key, "': no value"));
}

std::string Number(double d) {
  if (!std::isfinite(d)) return absl::StrCat("\"", d, "\"");  // JSON has no NaN
  std::string s = absl::StrFormat("%.17g", d);
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";  // stays a double
  return s;
}

std::string ScalarToJson(const v1::Value& v) {
  switch (v.kind_case()) {
    case v1::Value::kStringValue:
      return JsonQuote(v.string_value());
    case v1::Value::kIntegerValue:
      return absl::StrCat(v.integer_value());
    case v1::Value::kDoubleValue:
      return Number(v.double_value());
    case v1::Value::kBoolValue:
      return v.bool_value() ? "true" : "false";
    case v1::Value::kGeoValue:
      return absl::StrCat("{\"lat\":", Number(v.geo_value().lat()),
                          ",\"lon\":", Number(v.geo_value().lon()), "}");
    case v1::Value::kListValue: {
      std::string s = "[";
      for (int i = 0; i < v.list_value().values_size(); ++i) {
        if (i > 0) s += ",";
        s += ScalarToJson(v.list_value().values(i));
      }
      return s + "]";
    }
    case v1::Value::kNullValue:
    case v1::Value::KIND_NOT_SET:
      break;
  }
  return "null";
}

}  // namespace

absl::Status FieldsFromJson(std::string_view json, ProtoFields* out) {
  google::protobuf::Struct parsed;
  const auto st = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(json.data(), json.size()), &parsed);
  if (!st.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the fields are not a JSON object: ", st.ToString()));
  }
  for (const auto& [key, value] : parsed.fields()) {
    absl::Status s = ScalarFromJson(key, value, &(*out)[key], /*in_list=*/false);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

std::string FieldsToJson(const ProtoFields& fields) {
  const std::map<std::string, const v1::Value*> sorted = [&] {
    std::map<std::string, const v1::Value*> m;
    for (const auto& [k, v] : fields) m.emplace(k, &v);
    return m;
  }();
  std::string s = "{";
  bool first = true;
  for (const auto& [k, v] : sorted) {
    if (!first) s += ",";
    first = false;
    absl::StrAppend(&s, JsonQuote(k), ":", ScalarToJson(*v));
  }
  return s + "}";
}

}  // namespace zoom::client
