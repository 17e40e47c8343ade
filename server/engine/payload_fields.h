// File: server/engine/payload_fields.h
//
// A point's typed payload: field name -> FieldValue (a string, an int64, a
// finite double, a bool, a geo point, null, or a list of those), next to
// its opaque payload bytes. The gRPC adapter converts v1::Value to and from
// these; the engine validates them (ValidateFields), stores them encoded
// (EncodeFields) in the MetadataStore under the point's external id, and
// decodes them for Get and Search (DecodeFields).
//
// Encoding, version 1 (little-endian; golden test
// tests/data/golden/payload_fields_v1.hex):
//
//   "ZF" u8 version=1  u32 nfields
//   nfields x { u16 name_len, name, u8 kind (0 null, 1 scalar, 2 list),
//               [scalar] | [u32 count, count x scalar] }
//   scalar: u8 type, then  1 string: u32 len, bytes | 2 int64: 8 bytes |
//           3 double: 8 bytes (IEEE) | 4 bool: 1 byte | 5 geo: 2 doubles
//
// with the names in strictly increasing byte order (one encoding per
// payload). No fields encode to "" (nothing is stored): a header with a
// count of 0 is not an encoding (found by the fuzzer).
#ifndef ZOOM_SERVER_ENGINE_PAYLOAD_FIELDS_H_
#define ZOOM_SERVER_ENGINE_PAYLOAD_FIELDS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace zoom::server {

struct GeoPoint {
  double lat = 0;  // -90..90
  double lon = 0;  // -180..180
  bool operator==(const GeoPoint& o) const { return lat == o.lat && lon == o.lon; }
};

// One value of a field (the alternatives' order is their type tag - 1).
using FieldScalar = std::variant<std::string, int64_t, double, bool, GeoPoint>;

struct FieldValue {
  enum class Kind : uint8_t { kNull = 0, kScalar = 1, kList = 2 };
  Kind kind = Kind::kNull;
  std::vector<FieldScalar> values;  // kScalar: exactly one; kList: any number

  static FieldValue Null() { return {}; }
  static FieldValue Of(FieldScalar v) { return {Kind::kScalar, {std::move(v)}}; }
  static FieldValue List(std::vector<FieldScalar> v) { return {Kind::kList, std::move(v)}; }
  bool operator==(const FieldValue& o) const { return kind == o.kind && values == o.values; }
};

using PayloadFields = std::map<std::string, FieldValue, std::less<>>;

struct FieldLimits {
  uint32_t max_name_bytes = 256;
  uint32_t max_fields = 1024;       // per point
  uint32_t max_list_values = 1024;  // per list
};

// InvalidArgument naming the field and what to fix: an empty name, one
// longer than the limit or holding a NUL byte, too many fields or list
// values, a double that is NaN or infinite, a geo point off the globe, a
// scalar-kind value with other than one value, a name or string value that
// is not valid UTF-8.
absl::Status ValidateFields(const PayloadFields& fields, const FieldLimits& limits = {});

// Version 1 (see above); "" for no fields.
std::string EncodeFields(const PayloadFields& fields);
// DataLoss for bytes that are not a version-1 encoding (truncated, a bad
// tag, names out of order, trailing bytes); FailedPrecondition for a newer
// version. "" decodes to no fields.
absl::StatusOr<PayloadFields> DecodeFields(std::string_view bytes);

}  // namespace zoom::server

#endif  // ZOOM_SERVER_ENGINE_PAYLOAD_FIELDS_H_
