// File: client/payload_json.h
//
// A point's typed payload (v1::Value map) from and to plain JSON, for the
// command line (zoomctl --fields) and the tools' output:
//
//   {"category": "laptop", "price": 999, "rating": 4.5, "stock": true,
//    "tags": ["new", "sale"], "at": {"lat": 48.85, "lon": 2.35}, "gone": null}
//
// A number with no fraction and within +-2^53 is an integer (999, 1e3);
// any other number a double (4.5; write 999.5 for a double near 999). An
// object of exactly "lat" and "lon" is a geo point; other objects are
// refused (fields are flat). Arrays hold single values.
#ifndef ZOOM_CLIENT_PAYLOAD_JSON_H_
#define ZOOM_CLIENT_PAYLOAD_JSON_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "google/protobuf/map.h"
#include "zoom/v1/zoom.pb.h"

namespace zoom::client {

using ProtoFields = google::protobuf::Map<std::string, v1::Value>;

// InvalidArgument naming what does not parse or fit.
absl::Status FieldsFromJson(std::string_view json, ProtoFields* out);
// One line of JSON, keys in sorted order.
std::string FieldsToJson(const ProtoFields& fields);

}  // namespace zoom::client

#endif  // ZOOM_CLIENT_PAYLOAD_JSON_H_
