// File: server/api/types.h
//
// The requests and answers of zoom.v1.VectorSearch as a CollectionBackend
// (backend.h) takes and gives them: engine types, converted from the
// protos and checked against the server's limits once, by the adapter
// (convert.h), whatever backend then runs them. A request that reaches a
// backend is well formed: its filter passed ValidateFilter's shape checks,
// its ids and points are within the limits, its fields converted. What
// depends on the collection (a vector's dimension, a knob's range, the
// magnitude rule) is the backend's (the engine's) to check.
#ifndef ZOOM_SERVER_API_TYPES_H_
#define ZOOM_SERVER_API_TYPES_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "common/query_stats.h"
#include "server/engine/collection.h"
#include "server/engine/filter.h"
#include "server/engine/payload_fields.h"
#include "server/engine/query.h"

namespace zoom::server::api {

// The call around a request: when to stop, and who asks.
struct Call {
  absl::Time deadline = absl::InfiniteFuture();
  // True once the client cancelled (may be null).
  const std::atomic<bool>* cancelled = nullptr;
  // The client's credentials (its authorization / api-key metadata), for a
  // backend that asks other servers on its behalf.
  std::vector<std::pair<std::string, std::string>> credentials;
};

// A write's position in a clustered collection's log (shard, sequence),
// and the replicas that had it on disk when it was acknowledged (empty
// under kLog).
struct WriteToken {
  uint32_t shard = 0;
  uint64_t sequence = 0;
  std::vector<std::string> acknowledged_by;
};

// When a write is acknowledged (zoom.v1.WriteConcern): a clustered
// collection's write once its log stored it (kLog), or once more than half
// (kMajority, the default) or all (kAll) of its shard's replicas have it
// on disk. A standalone's one copy meets every concern under --sync=always.
enum class WriteConcern : uint8_t { kDefault = 0, kLog = 1, kMajority = 2, kAll = 3 };
const char* WriteConcernName(WriteConcern c);

enum class Consistency : uint8_t { kEventual = 0, kSession = 1 };

// ---- collections --------------------------------------------------------------

// A collection as the API describes it: the engine's info, and (clustered
// collections) its shards and replicas.
struct CollectionDescription {
  CollectionInfo info;
  uint32_t shards = 0;
  uint32_t replicas = 0;
};

struct CreateCollectionRequest {
  CollectionConfig config;  // named and checked (ConfigFromSpec)
  uint32_t shards = 0;      // 0: the backend's default
  uint32_t replicas = 0;
};

// ---- points -------------------------------------------------------------------

// A point of an Upsert / Import.
struct NewPoint {
  uint64_t id = 0;
  std::vector<float> vector;
  bool vector_from_bytes = false;  // sent as vector_bytes (named in messages)
  std::string payload;
  PayloadFields fields;
  bool has_fields = false;
};

struct UpsertRequest {
  std::string collection;
  std::vector<NewPoint> points;  // 1..limits.max_batch, payloads within the limit
  WriteConcern concern = WriteConcern::kDefault;
};

// A write's answer: how many points it changed (Upsert: taken; Delete:
// deleted; SetPayload / DeletePayload: changed), and where it is in a
// clustered collection's log (one token a shard written, in shard order).
struct WriteAnswer {
  uint64_t count = 0;
  std::vector<WriteToken> tokens;
  // The concern it was acknowledged under (never kDefault).
  WriteConcern concern = WriteConcern::kMajority;
};

struct DeleteRequest {
  std::string collection;
  std::vector<uint64_t> ids;  // by ids (1..max_ids) ...
  // ... or by filter (when set; ids empty): every live point that passes
  // it; a filter that matches every point only with `all`.
  std::shared_ptr<const Filter> filter;
  bool all = false;
  WriteConcern concern = WriteConcern::kDefault;
};

struct GetRequest {
  std::string collection;
  std::vector<uint64_t> ids;  // 1..max_ids
  bool with_vectors = false;
  bool with_payload = false;
};

struct SetPayloadRequest {
  std::string collection;
  std::vector<uint64_t> ids;  // 1..max_ids
  PayloadFields fields;       // within max_payload_bytes as sent
  bool overwrite = false;
  WriteConcern concern = WriteConcern::kDefault;
};

struct DeletePayloadRequest {
  std::string collection;
  std::vector<uint64_t> ids;      // 1..max_ids
  std::vector<std::string> keys;  // at most FieldLimits::max_fields
  WriteConcern concern = WriteConcern::kDefault;
};

// ---- search -------------------------------------------------------------------

// The knobs a query names (0: the collection's default or calibration).
struct Knobs {
  uint32_t ef = 0;
  uint32_t nprobe = 0;
  uint32_t rerank_candidates = 0;
  double rerank_stop_sd = 0;
  double target_recall = 0;
  double band_confidence = 0;
};

struct Query {
  std::vector<float> vector;
  uint32_t k = 0;
  Knobs knobs;
  bool preview_only = false;
  bool exact = false;
  bool with_payload = false;
  bool with_vectors = false;
  bool allow_partial = false;
  bool exact_scores = false;  // with knobs.band_confidence
  std::shared_ptr<const Filter> filter;  // null: none
  // Clustered collections: the share of shards an answer must cover, and
  // session consistency (the writes of `after` visible).
  float min_coverage = 0;
  Consistency consistency = Consistency::kEventual;
  std::vector<WriteToken> after;
  // Load shedding (set by the adapter, not the client): the preview only,
  // flagged degraded.
  bool degrade = false;
};

struct SearchRequest {
  std::string collection;
  Query query;
};

struct SearchBatchRequest {
  std::string collection;
  std::vector<Query> queries;  // 1..max_batch
};

struct SearchAnswer {
  std::vector<Hit> hits;  // best first, external ids
  QueryStats stats;
  std::string warning;  // what the client should know (a scan, a target not reached)
  // The share of the collection's shards the answer covers (1: all), and
  // whether it is short of them.
  float coverage = 1;
  bool degraded = false;
};

struct CountRequest {
  std::string collection;
  std::shared_ptr<const Filter> filter;  // null: every live point
};

struct CountAnswer {
  uint64_t count = 0;
  // The live points `count` was taken over, read with it (count <= live;
  // CountResponse.live). A router's: the sum of its shards' pairs.
  uint64_t live = 0;
  // A cluster node's: the shard log sequence its replica had applied before
  // it counted (CountResponse.applied); 0 otherwise.
  uint64_t applied = 0;
  bool filter_scan = false;
  std::string warning;
};

struct ScrollRequest {
  std::string collection;
  std::shared_ptr<const Filter> filter;  // null: every live point
  uint64_t offset = 0;
  uint32_t limit = 100;  // 1..10000
  bool with_payload = false;
  bool with_vectors = false;
};

struct ScrollAnswer {
  std::vector<PointData> points;  // by id
  std::optional<uint64_t> next_offset;
  bool filter_scan = false;
};

// ---- indexes ------------------------------------------------------------------

struct CreateFieldIndexRequest {
  std::string collection;
  std::string field;
  FieldIndexType type = FieldIndexType::kKeyword;
  bool wait = false;  // answer once it is built
};

struct DeleteFieldIndexRequest {
  std::string collection;
  std::string field;
};

struct BuildIndexRequest {
  std::string collection;
  bool wait = false;
  std::vector<WriteToken> after;  // a replica builds once it applied these
};

}  // namespace zoom::server::api

#endif  // ZOOM_SERVER_API_TYPES_H_
