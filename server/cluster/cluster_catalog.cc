#include "server/cluster/cluster_catalog.h"

#include <algorithm>
#include <random>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "server/engine/decoder_engine.h"

namespace zoom::cluster {

namespace {

// The four buckets of a cluster, in this order: shards, nodes, floors, models.
std::vector<BucketSpec> Buckets(const ClusterCatalogOptions& options) {
  std::vector<BucketSpec> out = {BucketSpec{ShardsBucket(options.cluster)},
                                 BucketSpec{NodesBucket(options.cluster)},
                                 BucketSpec{FloorsBucket(options.cluster)},
                                 BucketSpec{ModelsBucket(options.cluster)}};
  for (BucketSpec& b : out) b.replicas = options.nats_replicas;
  out[1].max_age = options.node_ttl;
  out[1].soft = out[2].soft = true;  // node records and log floors: remade by their writers
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ClusterCatalog>> ClusterCatalog::Open(
    JetStream* js, ClusterCatalogOptions options) {
  ZOOM_RETURN_IF_ERROR(ValidateClusterName(options.cluster));
  std::vector<std::unique_ptr<KeyValue>> kv;
  for (const BucketSpec& b : Buckets(options)) {
    ZOOM_ASSIGN_OR_RETURN(auto bucket, js->EnsureBucket(b));
    kv.push_back(std::move(bucket));
  }
  return std::unique_ptr<ClusterCatalog>(
      new ClusterCatalog(js, std::move(options), std::move(kv[0]), std::move(kv[1]),
                         std::move(kv[2]), std::move(kv[3])));
}

absl::Status ClusterCatalog::EnsureBuckets() {
  // The handles held stay valid: a bucket is reached by its name.
  for (const BucketSpec& b : Buckets(options_)) ZOOM_RETURN_IF_ERROR(js_->EnsureBucket(b).status());
  return absl::OkStatus();
}

absl::Status ClusterCatalog::RemakeSoftBuckets() {
  absl::Status first;
  for (const BucketSpec& b : Buckets(options_)) {
    if (!b.soft) continue;
    absl::Status st = js_->EnsureBucket(b).status();
    if (first.ok()) first = st;
  }
  return first;
}

absl::Status ClusterCatalog::RemakeNodesBucket() {
  const BucketSpec spec = Buckets(options_)[1];
  absl::Status del = js_->DeleteStream(absl::StrCat("KV_", spec.name));
  if (!del.ok() && !absl::IsNotFound(del)) return del;
  return js_->EnsureBucket(spec).status();
}

absl::StatusOr<bool> ClusterCatalog::HasRecordOf(const std::string& collection) const {
  ZOOM_ASSIGN_OR_RETURN(std::vector<std::string> keys, shards_->Keys());
  return std::find(keys.begin(), keys.end(), collection) != keys.end();
}

absl::Status ClusterCatalog::EnsureStreamOf(const ShardMap& map) {
  StreamSpec stream{StreamName(options_.cluster, map.collection), {}, options_.nats_replicas};
  for (uint32_t k = 0; k < map.shards; ++k) {
    stream.subjects.push_back(ShardSubject(options_.cluster, map.collection, k));
  }
  return js_->EnsureStream(stream);
}

absl::Status ClusterCatalog::RestoreMap(const ShardMap& map) {
  ZOOM_RETURN_IF_ERROR(EnsureStreamOf(map));
  absl::StatusOr<uint64_t> rev = shards_->Create(map.collection, map.Encode());
  if (absl::IsAlreadyExists(rev.status())) return absl::OkStatus();
  return rev.status();
}

absl::StatusOr<std::optional<VersionedShardMap>> ClusterCatalog::GetMap(
    const std::string& collection) const {
  ZOOM_RETURN_IF_ERROR(server::ValidateCollectionName(collection));
  ZOOM_ASSIGN_OR_RETURN(std::optional<KvEntry> e, shards_->Get(collection));
  if (!e.has_value()) return std::optional<VersionedShardMap>();
  ZOOM_ASSIGN_OR_RETURN(ShardMap map, ShardMap::Decode(e->value));
  return std::optional<VersionedShardMap>(VersionedShardMap{std::move(map), e->revision});
}

namespace {

// Every record of `bucket` that decodes (`decode(entry)`, StatusOr of the
// record); undecodable ones are skipped and logged as `what` (a newer
// zoomd's record is not this one's to serve); keys gone meanwhile too.
template <typename Decode>
auto ReadAll(const KeyValue& bucket, const std::string& cluster, const char* what, Decode decode)
    -> absl::StatusOr<std::vector<typename decltype(decode(KvEntry()))::value_type>> {
  ZOOM_ASSIGN_OR_RETURN(std::vector<std::string> keys, bucket.Keys());
  std::vector<typename decltype(decode(KvEntry()))::value_type> out;
  for (const std::string& key : keys) {
    ZOOM_ASSIGN_OR_RETURN(std::optional<KvEntry> e, bucket.Get(key));
    if (!e.has_value()) continue;
    auto record = decode(*e);
    if (!record.ok()) {
      ZOOM_LOG(WARNING, "cluster ", cluster, ": ", what, " ", key, " skipped: ",
               record.status().message());
      continue;
    }
    out.push_back(*std::move(record));
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<VersionedShardMap>> ClusterCatalog::ListMaps() const {
  return ReadAll(*shards_, options_.cluster, "shard map of",
                 [](const KvEntry& e) -> absl::StatusOr<VersionedShardMap> {
                   ZOOM_ASSIGN_OR_RETURN(ShardMap map, ShardMap::Decode(e.value));
                   return VersionedShardMap{std::move(map), e.revision};
                 });
}

absl::StatusOr<ShardMap> ClusterCatalog::CreateCollection(const server::CollectionConfig& config,
                                                          uint32_t shards, uint32_t replicas,
                                                          uint32_t max_dim) {
  ZOOM_RETURN_IF_ERROR(ValidateClustered(config.name, shards, replicas));
  server::CollectionConfig c = config;
  c.ApplyDefaults();
  ZOOM_RETURN_IF_ERROR(c.Validate(max_dim, UINT64_MAX));
  ZOOM_ASSIGN_OR_RETURN(std::optional<VersionedShardMap> existing, GetMap(c.name));
  if (existing.has_value()) {
    return absl::AlreadyExistsError(absl::StrCat("collection ", c.name, " exists in cluster ",
                                                 options_.cluster));
  }
  ZOOM_ASSIGN_OR_RETURN(std::vector<NodeInfo> nodes, LiveNodes());
  std::vector<std::string> ids;
  for (const NodeInfo& n : nodes) ids.push_back(n.node);
  ZOOM_ASSIGN_OR_RETURN(auto assignment, AssignShards(ids, shards, replicas));
  ShardMap map;
  map.collection = c.name;
  std::random_device rd;
  map.uid = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  map.shards = shards;
  map.replicas = replicas;
  map.config = c;
  map.assignment = std::move(assignment);
  map.created_unix_ms = absl::ToUnixMillis(absl::Now());
  ZOOM_RETURN_IF_ERROR(EnsureStreamOf(map));
  absl::StatusOr<uint64_t> rev = shards_->Create(c.name, map.Encode());
  if (absl::IsAlreadyExists(rev.status())) {
    return absl::AlreadyExistsError(absl::StrCat("collection ", c.name, " exists in cluster ",
                                                 options_.cluster));
  }
  ZOOM_RETURN_IF_ERROR(rev.status());
  return map;
}

absl::StatusOr<uint64_t> ClusterCatalog::UpdateMap(const ShardMap& map, uint64_t revision) {
  return shards_->Update(map.collection, map.Encode(), revision);
}

absl::Status ClusterCatalog::DropCollection(const std::string& collection) {
  ZOOM_ASSIGN_OR_RETURN(std::optional<VersionedShardMap> existing, GetMap(collection));
  if (!existing.has_value()) {
    return absl::NotFoundError(absl::StrCat("collection ", collection, " not found in cluster ",
                                            options_.cluster));
  }
  ZOOM_RETURN_IF_ERROR(shards_->Delete(collection));
  absl::Status st = js_->DeleteStream(StreamName(options_.cluster, collection));
  if (!st.ok() && !absl::IsNotFound(st)) return st;
  // The floors go with the stream (best effort: a uid is never reused, a
  // floor left behind is only a key).
  for (uint32_t k = 0; k < existing->map.shards; ++k) {
    (void)floors_->Delete(FloorKey(existing->map.uid, k));
  }
  return absl::OkStatus();
}

namespace {

absl::StatusOr<uint64_t> ParseFloor(const KvEntry& e) {
  uint64_t v = 0;
  if (!absl::SimpleAtoi(e.value, &v) || v == 0) {
    return absl::DataLossError(absl::StrCat("log floor '", e.value.substr(0, 32),
                                            "' is not a sequence"));
  }
  return v;
}

}  // namespace

absl::StatusOr<uint64_t> ClusterCatalog::LogFloor(uint64_t uid, uint32_t shard) const {
  ZOOM_ASSIGN_OR_RETURN(std::optional<KvEntry> e, floors_->Get(FloorKey(uid, shard)));
  if (!e.has_value()) return uint64_t{1};
  return ParseFloor(*e);
}

absl::StatusOr<std::function<void()>> ClusterCatalog::LockRepair(uint64_t uid, uint32_t shard,
                                                                 const std::string& holder,
                                                                 absl::Duration stale,
                                                                 absl::Duration wait) {
  const std::string key = absl::StrCat("repair.", FloorKey(uid, shard));
  const absl::Time deadline = absl::Now() + wait;
  std::string seen;
  for (;;) {
    const std::string value = absl::StrCat(holder, " ", absl::ToUnixMillis(absl::Now()));
    absl::StatusOr<uint64_t> made = floors_->Create(key, value);
    if (!made.ok() && absl::IsAlreadyExists(made.status())) {
      ZOOM_ASSIGN_OR_RETURN(std::optional<KvEntry> e, floors_->Get(key));
      if (e.has_value()) {
        seen = e->value;
        int64_t since_ms = 0;
        const size_t space = e->value.rfind(' ');
        if (space == std::string::npos ||
            !absl::SimpleAtoi(e->value.substr(space + 1), &since_ms) ||
            absl::Now() - absl::FromUnixMillis(since_ms) > stale) {
          made = floors_->Update(key, value, e->revision);  // its holder is gone
        }
      }
    }
    if (made.ok()) {
      KeyValue* kv = floors_.get();
      return std::function<void()>([kv, key] { (void)kv->Delete(key); });
    }
    if (!absl::IsAlreadyExists(made.status()) && !absl::IsAborted(made.status())) {
      return made.status();
    }
    if (absl::Now() >= deadline) {
      return absl::UnavailableError(absl::StrCat("the repair lock of shard ", shard,
                                                 " is held by ", seen));
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
}

absl::Status ClusterCatalog::RaiseLogFloor(uint64_t uid, uint32_t shard, uint64_t floor) {
  const std::string key = FloorKey(uid, shard);
  for (int attempt = 0; attempt < 16; ++attempt) {
    ZOOM_ASSIGN_OR_RETURN(std::optional<KvEntry> e, floors_->Get(key));
    absl::StatusOr<uint64_t> rev;
    if (!e.has_value()) {
      rev = floors_->Create(key, absl::StrCat(floor));
    } else {
      ZOOM_ASSIGN_OR_RETURN(uint64_t now, ParseFloor(*e));
      if (now >= floor) return absl::OkStatus();
      rev = floors_->Update(key, absl::StrCat(floor), e->revision);
    }
    if (rev.ok()) return absl::OkStatus();
    if (!absl::IsAborted(rev.status()) && !absl::IsAlreadyExists(rev.status())) {
      return rev.status();
    }
  }
  return absl::AbortedError(absl::StrCat("log floor ", key, ": changed 16 times in a row"));
}

absl::Status ClusterCatalog::LowerLogFloor(uint64_t uid, uint32_t shard, uint64_t floor) {
  const std::string key = FloorKey(uid, shard);
  for (int attempt = 0; attempt < 16; ++attempt) {
    ZOOM_ASSIGN_OR_RETURN(std::optional<KvEntry> e, floors_->Get(key));
    if (!e.has_value()) return absl::OkStatus();  // 1: nothing purged
    ZOOM_ASSIGN_OR_RETURN(uint64_t now, ParseFloor(*e));
    if (now <= floor) return absl::OkStatus();
    absl::StatusOr<uint64_t> rev = floors_->Update(key, absl::StrCat(floor), e->revision);
    if (rev.ok()) return absl::OkStatus();
    if (!absl::IsAborted(rev.status())) return rev.status();
  }
  return absl::AbortedError(absl::StrCat("log floor ", key, ": changed 16 times in a row"));
}

absl::StatusOr<std::vector<NodeInfo>> ClusterCatalog::LiveNodes() const {
  ZOOM_ASSIGN_OR_RETURN(std::vector<std::string> keys, nodes_->Keys());
  std::vector<NodeInfo> all;
  int64_t newest = 0;
  for (const std::string& key : keys) {
    ZOOM_ASSIGN_OR_RETURN(std::optional<KvEntry> e, nodes_->Get(key));
    if (!e.has_value()) continue;  // expired meanwhile
    absl::StatusOr<NodeInfo> info = NodeInfo::Decode(e->value);
    if (!info.ok() || info->role != "node") continue;
    newest = std::max(newest, info->heartbeat_unix_ms);
    all.push_back(*std::move(info));
  }
  // A record the bucket has not expired yet (its leader busy or being
  // elected) whose heartbeat is more than the max age behind the newest
  // one: that node stopped while the others went on. When every heartbeat
  // is old alike, NATS took no writes (no quorum): the nodes are kept.
  std::vector<NodeInfo> out;
  const int64_t ttl_ms = absl::ToInt64Milliseconds(options_.node_ttl);
  for (NodeInfo& n : all) {
    if (n.heartbeat_unix_ms + ttl_ms >= newest) out.push_back(std::move(n));
  }
  return out;
}

absl::Status ClusterCatalog::PutNode(const NodeInfo& info) {
  ZOOM_RETURN_IF_ERROR(ValidateNodeId(info.node));
  return nodes_->Put(info.node, info.Encode()).status();
}

absl::Status ClusterCatalog::RemoveNode(const std::string& node) {
  ZOOM_RETURN_IF_ERROR(ValidateNodeId(node));
  return nodes_->Delete(node);
}

absl::StatusOr<std::vector<ModelSpec>> ClusterCatalog::ListModels() const {
  return ReadAll(*models_, options_.cluster, "model",
                 [](const KvEntry& e) { return ModelSpec::Decode(e.value); });
}

absl::StatusOr<ModelSpec> ClusterCatalog::AddModel(const ModelSpec& spec) {
  ZOOM_RETURN_IF_ERROR(ValidateModelSpec(spec));
  ModelSpec s = spec;
  if (s.created_unix_ms == 0) s.created_unix_ms = absl::ToUnixMillis(absl::Now());
  absl::StatusOr<uint64_t> rev = models_->Create(s.name, s.Encode());
  if (rev.ok()) return s;
  if (!absl::IsAlreadyExists(rev.status())) return rev.status();
  ZOOM_ASSIGN_OR_RETURN(std::optional<KvEntry> e, models_->Get(s.name));
  if (e.has_value()) {
    absl::StatusOr<ModelSpec> now = ModelSpec::Decode(e->value);
    if (now.ok() && now->SameModel(s)) return *now;
    if (now.ok()) {
      return absl::AlreadyExistsError(absl::StrCat(
          "model ", s.name, " is loaded in cluster ", options_.cluster, " from dir '",
          now->dir.substr(0, 128), "' (m ", now->m, ", ef_construction ", now->ef_construction,
          "): unload it first, or choose another name"));
    }
  }
  return absl::AlreadyExistsError(absl::StrCat("model ", s.name, " exists in cluster ",
                                               options_.cluster));
}

absl::Status ClusterCatalog::RemoveModel(const std::string& name) {
  ZOOM_RETURN_IF_ERROR(server::ValidateModelName(name));
  ZOOM_ASSIGN_OR_RETURN(std::optional<KvEntry> e, models_->Get(name));
  if (!e.has_value()) {
    return absl::NotFoundError(absl::StrCat("model ", name, " is not loaded in cluster ",
                                            options_.cluster));
  }
  return models_->Delete(name);
}

}  // namespace zoom::cluster
