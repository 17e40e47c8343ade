// File: server/api/payload_convert.h
//
// Conversions of v1 request parts to the engine's types. VectorFromProto: a
// point's or a query's vector, sent as floats or as one byte a dimension.
// v1::Value maps (a point's typed payload on the wire) to and from the
// engine's PayloadFields. FieldsFromProto refuses what the engine cannot
// store (a value with no kind, a list inside a list) with InvalidArgument;
// the engine's ValidateFields checks the rest (names, finiteness, the
// globe, sizes).
#ifndef ZOOM_SERVER_API_PAYLOAD_CONVERT_H_
#define ZOOM_SERVER_API_PAYLOAD_CONVERT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "google/protobuf/map.h"
#include "server/engine/filter.h"
#include "server/engine/payload_fields.h"
#include "server/engine/payload_index.h"
#include "zoom/v1/zoom.pb.h"

namespace zoom::server {

using ProtoFields = google::protobuf::Map<std::string, v1::Value>;

// A vector sent as `floats` (the `vector` field) or as `bytes` (the
// `vector_bytes` field: one byte a dimension, 0..255, converted into
// *scratch, which the span then points into). InvalidArgument naming
// `what` ("point 7 (#0)", "the query") when both are set. The length is
// the caller's to check against the collection's dim.
absl::StatusOr<absl::Span<const float>> VectorFromProto(
    const google::protobuf::RepeatedField<float>& floats, const std::string& bytes,
    std::vector<float>* scratch, absl::string_view what);

absl::StatusOr<PayloadFields> FieldsFromProto(const ProtoFields& fields);
void FieldsToProto(const PayloadFields& fields, ProtoFields* out);

// A v1::Filter as the engine's (filter.h), or InvalidArgument naming the
// condition ("filter.must[0].match: ...") for a shape that says nothing or
// two things, a match value that is not a string, an integer or a bool, a
// nesting past `limits.max_depth`; ResourceExhausted for a has_id or
// any/except list over its limit. ValidateFilter checks the rest.
absl::Status FilterFromProto(const v1::Filter& proto, Filter* out,
                             const FilterLimits& limits = {});
// A valid engine filter as a v1::Filter that converts back to the same one
// (the typed match forms; what a router sends its nodes).
void FilterToProto(const Filter& filter, v1::Filter* out);
// The engine's index type of a v1 one (InvalidArgument for UNSPECIFIED).
absl::StatusOr<FieldIndexType> FieldIndexTypeFromProto(v1::FieldIndexType type);
v1::FieldIndexType FieldIndexTypeToProto(FieldIndexType type);

}  // namespace zoom::server

#endif  // ZOOM_SERVER_API_PAYLOAD_CONVERT_H_
