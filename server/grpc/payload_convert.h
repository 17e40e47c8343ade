// File: server/grpc/payload_convert.h
//
// v1::Value maps (a point's typed payload on the wire) to and from the
// engine's PayloadFields. FieldsFromProto refuses what the engine cannot
// store (a value with no kind, a list inside a list) with InvalidArgument;
// the engine's ValidateFields checks the rest (names, finiteness, the
// globe, sizes).
#ifndef ZOOM_SERVER_GRPC_PAYLOAD_CONVERT_H_
#define ZOOM_SERVER_GRPC_PAYLOAD_CONVERT_H_

#include <string>

#include "absl/status/statusor.h"
#include "google/protobuf/map.h"
#include "server/engine/payload_fields.h"
#include "zoom/v1/zoom.pb.h"

namespace zoom::server {

using ProtoFields = google::protobuf::Map<std::string, v1::Value>;

absl::StatusOr<PayloadFields> FieldsFromProto(const ProtoFields& fields);
void FieldsToProto(const PayloadFields& fields, ProtoFields* out);

}  // namespace zoom::server

#endif  // ZOOM_SERVER_GRPC_PAYLOAD_CONVERT_H_
