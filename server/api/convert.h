// File: server/api/convert.h
//
// zoom.v1 messages <-> the API's requests and answers (types.h), once, for
// every adapter and every backend. A request converter refuses what must
// not reach a backend, with the code and message the client gets:
// InvalidArgument for a shape or a count the server's limits (ServiceLimits,
// applied here and nowhere else) do not take, ResourceExhausted for a
// filter list over its limit. What depends on the collection (dimensions,
// knob ranges) is checked by the backend. Answers convert without checks.
#ifndef ZOOM_SERVER_API_CONVERT_H_
#define ZOOM_SERVER_API_CONVERT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "google/protobuf/repeated_field.h"
#include "server/api/payload_convert.h"
#include "server/api/types.h"
#include "server/engine/database.h"
#include "zoom/v1/zoom.pb.h"

namespace zoom::server {

// What this server takes in one request (zoomd's --max_k etc.).
struct ServiceLimits {
  uint32_t max_k = 1000;
  uint32_t max_batch = 10000;  // points per Upsert/Import message, queries per SearchBatch
  uint32_t max_ids = 100000;   // ids per Get/Delete/SetPayload/DeletePayload
  uint32_t max_ef = 10000;
  uint32_t max_nprobe = 65536;
  uint32_t max_rerank = 10000;
  uint32_t max_payload_bytes = 1 << 20;
  // The largest answer built (payloads and vectors counted as they are
  // read): the server's send limit, less room for the framing.
  uint64_t max_response_bytes = (uint64_t{64} << 20) - (64 << 10);
};

// InvalidArgument "<name> <value> is above this server's limit of <max>".
absl::Status CheckRange(const char* name, uint64_t value, uint64_t max);

// ---- collections --------------------------------------------------------------

// A CollectionSpec as a config (name, metric, dtype, index kind checked),
// and with ConfigFromSpec the limits' checks of its default knobs.
absl::StatusOr<CollectionConfig> FromProto(const v1::CollectionSpec& spec);
absl::StatusOr<CollectionConfig> ConfigFromSpec(const v1::CollectionSpec& spec,
                                                const ServiceLimits& limits);
v1::CollectionInfo ToProto(const CollectionInfo& info);
v1::SnapshotInfo ToProto(const SnapshotInfo& info);

// InvalidArgument for a search's cluster fields out of range (min_coverage
// outside [0, 1], an unknown consistency, more than 1,024 write tokens).
absl::Status CheckClusterFields(const v1::SearchRequest& req);

namespace api {

absl::StatusOr<CreateCollectionRequest> FromProto(const v1::CreateCollectionRequest& req,
                                                  const ServiceLimits& limits);
v1::CollectionInfo ToProto(const CollectionDescription& d);

// ---- points

// A request's write_concern (the proto enum's number): InvalidArgument for
// a number the enum does not have.
absl::StatusOr<WriteConcern> ConcernFromProto(int value);
v1::WriteConcern ConcernToProto(WriteConcern c);

// The points of an Upsert / Import message: InvalidArgument for an unknown
// write concern, none or more than limits.max_batch points, a vector given
// both ways, a payload over limits.max_payload_bytes, fields that do not
// convert. Their dimension is the backend's to check (PointRefsOf).
absl::StatusOr<UpsertRequest> UpsertFromProto(
    const std::string& collection, const google::protobuf::RepeatedPtrField<v1::Point>& points,
    int concern, const ServiceLimits& limits);
// The points as the engine takes them (pointing into `points`):
// InvalidArgument naming the first whose dimension is not config.dim.
absl::Status PointRefsOf(const CollectionConfig& config, const std::vector<NewPoint>& points,
                         std::vector<PointRef>* refs);

absl::StatusOr<DeleteRequest> FromProto(const v1::DeleteRequest& req,
                                        const ServiceLimits& limits);
absl::StatusOr<GetRequest> FromProto(const v1::GetRequest& req, const ServiceLimits& limits);
absl::StatusOr<SetPayloadRequest> FromProto(const v1::SetPayloadRequest& req,
                                            const ServiceLimits& limits);
absl::StatusOr<DeletePayloadRequest> FromProto(const v1::DeletePayloadRequest& req,
                                               const ServiceLimits& limits);
void ToProto(PointData p, v1::Point* out);

// ---- reads

absl::StatusOr<Query> QueryFromProto(const v1::SearchRequest& req);
absl::StatusOr<SearchRequest> FromProto(const v1::SearchRequest& req,
                                        const ServiceLimits& limits);
// InvalidArgument for no queries or more than limits.max_batch; a query's
// error is prefixed "query #i: ".
absl::StatusOr<SearchBatchRequest> FromProto(const v1::SearchBatchRequest& req,
                                             const ServiceLimits& limits);
void ToProto(SearchAnswer answer, v1::SearchResponse* out);
// The bytes a hit takes in an answer (its payload, fields and vector).
uint64_t AnswerBytes(const Hit& hit);
// ResourceExhausted when the answer to `queries` over vectors of `dim`
// would pass limits.max_response_bytes (known before any search runs,
// payloads aside): a batch is refused instead of being built first.
absl::Status CheckAnswerSize(const std::vector<Query>& queries, uint32_t dim,
                             const ServiceLimits& limits);

absl::StatusOr<CountRequest> FromProto(const v1::CountRequest& req,
                                       const ServiceLimits& limits);
absl::StatusOr<ScrollRequest> FromProto(const v1::ScrollRequest& req,
                                        const ServiceLimits& limits);
void ToProto(ScrollAnswer answer, v1::ScrollResponse* out);

// ---- indexes

absl::StatusOr<CreateFieldIndexRequest> FromProto(const v1::CreateFieldIndexRequest& req);
BuildIndexRequest FromProto(const v1::BuildIndexRequest& req);

// ---- what a router sends its nodes, and reads back -------------------------------
// (requests as protos for collection `local`, the shard's name on a node;
// answers as the API's; InvalidArgument for an answer that does not convert)

void ToProto(const Query& q, const std::string& local, v1::SearchRequest* out);
v1::CountRequest ToProto(const CountRequest& r, const std::string& local);
v1::ScrollRequest ToProto(const ScrollRequest& r, const std::string& local);
absl::StatusOr<SearchAnswer> FromProto(v1::SearchResponse resp);
absl::StatusOr<CollectionDescription> FromProto(const v1::CollectionInfo& info);
absl::StatusOr<PointData> FromProto(v1::Point p);
absl::StatusOr<ScrollAnswer> FromProto(v1::ScrollResponse resp);
// The strategy QueryStats names ("exact", ...); kNone for "" or unknown.
FilterStrategy FilterStrategyFromName(const std::string& name);

std::vector<WriteToken> TokensFromProto(
    const google::protobuf::RepeatedPtrField<v1::WriteToken>& tokens);
void TokensToProto(const std::vector<WriteToken>& tokens,
                   google::protobuf::RepeatedPtrField<v1::WriteToken>* out);

}  // namespace api
}  // namespace zoom::server

#endif  // ZOOM_SERVER_API_CONVERT_H_
