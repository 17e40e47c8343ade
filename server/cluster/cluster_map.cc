#include "server/cluster/cluster_map.h"

#include <algorithm>
#include <cctype>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "server/engine/decoder_engine.h"
#include "server/engine/key_value_text.h"

namespace zoom::cluster {
namespace {

absl::string_view AV(std::string_view s) { return absl::string_view(s.data(), s.size()); }

bool NameChars(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
}

absl::Status ValidateShortName(std::string_view what, std::string_view name) {
  if (name.empty() || name.size() > 32 || !NameChars(name)) {
    return absl::InvalidArgumentError(absl::StrCat(AV(what), " must be 1..32 characters of "
                                                   "[A-Za-z0-9_-], got '", AV(name), "'"));
  }
  return absl::OkStatus();
}

bool IsHex(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
  });
}

absl::StatusOr<uint64_t> ParseHex64(std::string_view s, std::string_view what) {
  uint64_t v = 0;
  if (s.size() != 16 || !IsHex(s) || !absl::SimpleHexAtoi(AV(s), &v)) {
    return absl::DataLossError(absl::StrCat(AV(what), ": '", AV(s), "' is not 16 hex digits"));
  }
  return v;
}

absl::StatusOr<uint64_t> ParseU64(std::string_view s, std::string_view what) {
  uint64_t v = 0;
  if (!absl::SimpleAtoi(AV(s), &v)) {
    return absl::DataLossError(absl::StrCat(AV(what), ": '", AV(s), "' is not a number"));
  }
  return v;
}

absl::Status CheckFormat(const server::KeyValueText& kv, uint32_t known, std::string_view what) {
  uint32_t format = 0;
  ZOOM_RETURN_IF_ERROR(kv.Number("format", &format));
  if (format == 0) return absl::DataLossError(absl::StrCat(AV(what), ": no format"));
  if (format > known) {
    return absl::FailedPreconditionError(absl::StrCat(AV(what), " format ", format,
                                                      " is newer than this zoomd reads (",
                                                      known, "): upgrade it"));
  }
  return absl::OkStatus();
}

}  // namespace

uint32_t ShardOf(uint64_t id, uint32_t shards) {
  // SplitMix64's finaliser: consecutive ids spread evenly.
  uint64_t z = id + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return shards <= 1 ? 0 : static_cast<uint32_t>(z % shards);
}

std::string StreamName(std::string_view cluster, std::string_view collection) {
  return absl::StrCat("zoomd_", AV(cluster), "_", AV(collection));
}
std::string ShardSubject(std::string_view cluster, std::string_view collection, uint32_t shard) {
  return absl::StrCat("zoomd.", AV(cluster), ".", AV(collection), ".", shard);
}
std::string ShardsBucket(std::string_view cluster) {
  return absl::StrCat("zoomd_", AV(cluster), "_shards");
}
std::string NodesBucket(std::string_view cluster) {
  return absl::StrCat("zoomd_", AV(cluster), "_nodes");
}
std::string FloorsBucket(std::string_view cluster) {
  return absl::StrCat("zoomd_", AV(cluster), "_floors");
}
std::string ModelsBucket(std::string_view cluster) {
  return absl::StrCat("zoomd_", AV(cluster), "_models");
}
std::string AcksSubject(std::string_view cluster) {
  return absl::StrCat("zoomd_acks.", AV(cluster));
}
std::string FloorKey(uint64_t uid, uint32_t shard) {
  return absl::StrCat(absl::Hex(uid, absl::kZeroPad16), ".", shard);
}
std::string ConsumerName(std::string_view node, uint64_t uid, uint32_t shard) {
  return absl::StrCat(AV(node), "_", absl::Hex(uid, absl::kZeroPad16), "_", shard);
}

absl::Status ValidateClusterName(std::string_view name) {
  return ValidateShortName("the cluster name (--cluster)", name);
}
absl::Status ValidateNodeId(std::string_view id) {
  return ValidateShortName("the node id (--node_id)", id);
}

absl::Status ValidateClustered(std::string_view collection, uint32_t shards, uint32_t replicas) {
  ZOOM_RETURN_IF_ERROR(server::ValidateCollectionName(collection));
  if (collection.size() > kMaxClusteredName) {
    return absl::InvalidArgumentError(
        absl::StrCat("a clustered collection's name is at most ", kMaxClusteredName,
                     " characters ('", AV(collection), "' has ", collection.size(), ")"));
  }
  if (shards < 1 || shards > kMaxShards) {
    return absl::InvalidArgumentError(
        absl::StrCat("shards must be 1..", kMaxShards, ", got ", shards));
  }
  if (replicas < 1 || replicas > kMaxReplicas) {
    return absl::InvalidArgumentError(
        absl::StrCat("replicas must be 1..", kMaxReplicas, ", got ", replicas));
  }
  return absl::OkStatus();
}

std::string ShardMap::LocalName(uint32_t shard) const {
  return absl::StrCat(collection, "_s", shard, "_", absl::Hex(uid & 0xffffffffu, absl::kZeroPad8));
}

std::optional<LocalShard> ParseLocalName(std::string_view local) {
  // <collection>_s<shard>_<8 hex>
  if (local.size() < 1 + 3 + 1 + 9) return std::nullopt;
  const std::string_view hex = local.substr(local.size() - 8);
  if (!IsHex(hex) || local[local.size() - 9] != '_') return std::nullopt;
  const std::string_view rest = local.substr(0, local.size() - 9);
  const size_t s = rest.rfind("_s");
  if (s == std::string_view::npos || s == 0 || s + 2 >= rest.size()) return std::nullopt;
  const std::string_view digits = rest.substr(s + 2);
  if (digits.size() > 4 || !std::all_of(digits.begin(), digits.end(), [](char c) {
        return c >= '0' && c <= '9';
      })) {
    return std::nullopt;
  }
  LocalShard out;
  out.collection = std::string(rest.substr(0, s));
  (void)absl::SimpleAtoi(AV(digits), &out.shard);
  (void)absl::SimpleHexAtoi(AV(hex), &out.uid8);
  return out;
}

std::string ShardMap::Encode() const {
  std::string s = absl::StrCat("format=", kFormat, "\ncollection=", collection,
                               "\nuid=", absl::Hex(uid, absl::kZeroPad16), "\nshards=", shards,
                               "\nreplicas=", replicas,
                               "\nconfig=", absl::BytesToHexString(config.Encode()));
  for (size_t k = 0; k < assignment.size(); ++k) {
    absl::StrAppend(&s, "\nshard.", k, "=", absl::StrJoin(assignment[k], ","));
  }
  absl::StrAppend(&s, "\ncreated_unix_ms=", created_unix_ms, "\n");
  return s;
}

absl::StatusOr<ShardMap> ShardMap::Decode(std::string_view text) {
  ZOOM_ASSIGN_OR_RETURN(server::KeyValueText kv, server::KeyValueText::Parse(text, "shard map"));
  ZOOM_RETURN_IF_ERROR(CheckFormat(kv, kFormat, "shard map"));
  ShardMap m;
  m.collection = kv.String("collection");
  ZOOM_ASSIGN_OR_RETURN(m.uid, ParseHex64(kv.String("uid"), "shard map uid"));
  ZOOM_RETURN_IF_ERROR(kv.Number("shards", &m.shards));
  ZOOM_RETURN_IF_ERROR(kv.Number("replicas", &m.replicas));
  if (absl::Status st = ValidateClustered(m.collection, m.shards, m.replicas); !st.ok()) {
    return absl::DataLossError(absl::StrCat("shard map: ", st.message()));
  }
  const std::string hex = kv.String("config");
  if (hex.empty() || hex.size() % 2 != 0 ||
      !std::all_of(hex.begin(), hex.end(), [](char c) { return std::isxdigit(c); })) {
    return absl::DataLossError("shard map: config is not hex");
  }
  ZOOM_ASSIGN_OR_RETURN(m.config, server::CollectionConfig::Decode(absl::HexStringToBytes(hex)));
  if (m.config.name != m.collection) {
    return absl::DataLossError("shard map: its config names another collection");
  }
  for (uint32_t k = 0; k < m.shards; ++k) {
    const std::string key = absl::StrCat("shard.", k);
    if (!kv.Has(key)) return absl::DataLossError(absl::StrCat("shard map: no ", key));
    std::vector<std::string> nodes = absl::StrSplit(kv.String(key), ',', absl::SkipEmpty());
    if (nodes.size() != m.replicas) {
      return absl::DataLossError(absl::StrCat("shard map: ", key, " has ", nodes.size(),
                                              " nodes, not ", m.replicas));
    }
    for (const std::string& n : nodes) {
      if (!ValidateNodeId(n).ok()) {
        return absl::DataLossError(absl::StrCat("shard map: ", key, " names a bad node"));
      }
    }
    m.assignment.push_back(std::move(nodes));
  }
  uint64_t created = 0;
  ZOOM_RETURN_IF_ERROR(kv.Number("created_unix_ms", &created));
  m.created_unix_ms = static_cast<int64_t>(created);
  return m;
}

absl::StatusOr<std::vector<std::vector<std::string>>> AssignShards(
    const std::vector<std::string>& nodes, uint32_t shards, uint32_t replicas) {
  if (replicas > nodes.size()) {
    return absl::FailedPreconditionError(absl::StrCat(
        replicas, " replicas a shard need ", replicas, " nodes; ", nodes.size(),
        " are present (", absl::StrJoin(nodes, ", "), "): start more nodes or ask fewer replicas"));
  }
  std::vector<std::vector<std::string>> out(shards);
  const size_t n = nodes.size();
  for (uint32_t k = 0; k < shards; ++k) {
    for (uint32_t r = 0; r < replicas; ++r) {
      out[k].push_back(nodes[(static_cast<size_t>(k) * replicas + r) % n]);
    }
  }
  return out;
}

int ReplaceGone(std::vector<std::vector<std::string>>* assignment,
                const std::vector<std::string>& live, const std::set<std::string>& gone,
                std::map<std::string, int>* load) {
  int moved = 0;
  for (std::vector<std::string>& replicas : *assignment) {
    for (std::string& node : replicas) {
      if (gone.count(node) == 0) continue;
      const std::string* best = nullptr;
      for (const std::string& candidate : live) {
        if (gone.count(candidate) != 0 ||
            std::find(replicas.begin(), replicas.end(), candidate) != replicas.end()) {
          continue;
        }
        if (best == nullptr || (*load)[candidate] < (*load)[*best]) best = &candidate;
      }
      if (best == nullptr) continue;
      --(*load)[node];
      ++(*load)[*best];
      node = *best;
      ++moved;
    }
  }
  return moved;
}

const char* ReplicaStateName(ReplicaState s) {
  switch (s) {
    case ReplicaState::kCatchingUp: return "catching_up";
    case ReplicaState::kServing: return "serving";
    case ReplicaState::kFailed: return "failed";
  }
  return "failed";
}

const HostedShard* NodeInfo::Find(uint64_t uid, uint32_t shard) const {
  for (const HostedShard& h : hosted) {
    if (h.uid == uid && h.shard == shard) return &h;
  }
  return nullptr;
}

bool NodeInfo::Serves(const std::string& name) const {
  for (const HostedModel& m : models) {
    if (m.name == name && m.state == ModelLoadState::kServing) return true;
  }
  return false;
}

namespace {
const char* ModelStateName(ModelLoadState s) {
  switch (s) {
    case ModelLoadState::kLoading: return "loading";
    case ModelLoadState::kServing: return "serving";
    case ModelLoadState::kFailed: return "failed";
  }
  return "failed";
}
}  // namespace

absl::Status ValidateModelSpec(const ModelSpec& spec) {
  ZOOM_RETURN_IF_ERROR(server::ValidateModelName(spec.name));
  if (spec.dir.empty() || spec.dir.size() > 1024 ||
      spec.dir.find_first_of(std::string("\n\r\0", 3)) != std::string::npos) {
    return absl::InvalidArgumentError(
        "a model's dir must be 1..1024 bytes without line breaks or NUL: a directory under "
        "every node's --models_dir");
  }
  return absl::OkStatus();
}

std::string ModelSpec::Encode() const {
  return absl::StrCat("format=", kFormat, "\nname=", name, "\ndir=", dir, "\nm=", m,
                      "\nef_construction=", ef_construction, "\ndefault_ef=", default_ef,
                      "\ncreated_unix_ms=", created_unix_ms, "\n");
}

absl::StatusOr<ModelSpec> ModelSpec::Decode(std::string_view text) {
  ZOOM_ASSIGN_OR_RETURN(server::KeyValueText kv, server::KeyValueText::Parse(text, "model spec"));
  ZOOM_RETURN_IF_ERROR(CheckFormat(kv, kFormat, "model spec"));
  ModelSpec s;
  s.name = kv.String("name");
  s.dir = kv.String("dir");
  ZOOM_RETURN_IF_ERROR(kv.Number("m", &s.m));
  ZOOM_RETURN_IF_ERROR(kv.Number("ef_construction", &s.ef_construction));
  ZOOM_RETURN_IF_ERROR(kv.Number("default_ef", &s.default_ef));
  uint64_t created = 0;
  ZOOM_RETURN_IF_ERROR(kv.Number("created_unix_ms", &created));
  s.created_unix_ms = static_cast<int64_t>(created);
  if (absl::Status st = ValidateModelSpec(s); !st.ok()) {
    return absl::DataLossError(absl::StrCat("model spec: ", st.message()));
  }
  return s;
}

std::string NodeInfo::Encode() const {
  std::string s = absl::StrCat("format=", kFormat, "\nnode=", node, "\naddress=", address,
                               "\nrole=", role, "\nheartbeat_unix_ms=", heartbeat_unix_ms);
  for (size_t i = 0; i < hosted.size(); ++i) {
    const HostedShard& h = hosted[i];
    absl::StrAppend(&s, "\nhosted.", i, "=", h.collection, ",", h.shard, ",",
                    absl::Hex(h.uid, absl::kZeroPad16), ",", h.applied, ",", h.pending, ",",
                    ReplicaStateName(h.state));
    if (h.repairs > 0) absl::StrAppend(&s, ",", h.repairs);
    if (h.has_digest) absl::StrAppend(&s, "\ndigest.", i, "=", absl::Hex(h.digest, absl::kZeroPad16));
  }
  for (size_t i = 0; i < models.size(); ++i) {
    absl::StrAppend(&s, "\nmodel.", i, "=", models[i].name, ",", ModelStateName(models[i].state));
  }
  absl::StrAppend(&s, "\n");
  return s;
}

absl::StatusOr<NodeInfo> NodeInfo::Decode(std::string_view text) {
  ZOOM_ASSIGN_OR_RETURN(server::KeyValueText kv, server::KeyValueText::Parse(text, "node info"));
  ZOOM_RETURN_IF_ERROR(CheckFormat(kv, kFormat, "node info"));
  NodeInfo n;
  n.node = kv.String("node");
  if (!ValidateNodeId(n.node).ok()) return absl::DataLossError("node info: bad node id");
  n.address = kv.String("address");
  n.role = kv.String("role", "node");
  uint64_t hb = 0;
  ZOOM_RETURN_IF_ERROR(kv.Number("heartbeat_unix_ms", &hb));
  n.heartbeat_unix_ms = static_cast<int64_t>(hb);
  for (size_t i = 0;; ++i) {
    const std::string key = absl::StrCat("hosted.", i);
    if (!kv.Has(key)) break;
    std::vector<std::string> f = absl::StrSplit(kv.String(key), ',');
    if (f.size() != 6 && f.size() != 7) {
      return absl::DataLossError(absl::StrCat("node info: ", key, " malformed"));
    }
    HostedShard h;
    h.collection = f[0];
    ZOOM_ASSIGN_OR_RETURN(uint64_t shard, ParseU64(f[1], key));
    if (shard >= kMaxShards) return absl::DataLossError(absl::StrCat("node info: ", key));
    h.shard = static_cast<uint32_t>(shard);
    ZOOM_ASSIGN_OR_RETURN(h.uid, ParseHex64(f[2], key));
    ZOOM_ASSIGN_OR_RETURN(h.applied, ParseU64(f[3], key));
    ZOOM_ASSIGN_OR_RETURN(h.pending, ParseU64(f[4], key));
    if (f[5] == "catching_up") {
      h.state = ReplicaState::kCatchingUp;
    } else if (f[5] == "serving") {
      h.state = ReplicaState::kServing;
    } else if (f[5] == "failed") {
      h.state = ReplicaState::kFailed;
    } else {
      return absl::DataLossError(absl::StrCat("node info: ", key, " has state '", f[5], "'"));
    }
    if (f.size() == 7) {
      ZOOM_ASSIGN_OR_RETURN(h.repairs, ParseU64(f[6], key));
    }
    const std::string digest_key = absl::StrCat("digest.", i);
    if (kv.Has(digest_key)) {
      ZOOM_ASSIGN_OR_RETURN(h.digest, ParseHex64(kv.String(digest_key), digest_key));
      h.has_digest = true;
    }
    n.hosted.push_back(std::move(h));
  }
  for (size_t i = 0;; ++i) {
    const std::string key = absl::StrCat("model.", i);
    if (!kv.Has(key)) break;
    std::vector<std::string> f = absl::StrSplit(kv.String(key), ',');
    if (f.size() != 2 || !server::ValidateModelName(f[0]).ok()) {
      return absl::DataLossError(absl::StrCat("node info: ", key, " malformed"));
    }
    HostedModel m;
    m.name = f[0];
    if (f[1] == "loading") {
      m.state = ModelLoadState::kLoading;
    } else if (f[1] == "serving") {
      m.state = ModelLoadState::kServing;
    } else if (f[1] == "failed") {
      m.state = ModelLoadState::kFailed;
    } else {
      return absl::DataLossError(absl::StrCat("node info: ", key, " has state '", f[1], "'"));
    }
    n.models.push_back(std::move(m));
  }
  return n;
}

std::string ReplicaAck::Encode() const {
  std::string s = absl::StrCat("format=", kFormat, "\nnode=", node, "\nuid=",
                               absl::Hex(uid, absl::kZeroPad16), "\nshard=", shard,
                               "\ndurable=", durable);
  if (!applied.empty()) {
    absl::StrAppend(&s, "\napplied=",
                    absl::StrJoin(applied, ",", [](std::string* out, const AppliedEntry& e) {
                      absl::StrAppend(out, e.sequence, ":", e.id);
                      if (e.changed.has_value()) absl::StrAppend(out, ":", *e.changed);
                    }));
  }
  if (base > 0) absl::StrAppend(&s, "\nbase_node=", base_node, "\nbase=", base);
  absl::StrAppend(&s, "\n");
  return s;
}

absl::StatusOr<ReplicaAck> ReplicaAck::Decode(std::string_view text) {
  ZOOM_ASSIGN_OR_RETURN(server::KeyValueText kv,
                        server::KeyValueText::Parse(text, "replica ack"));
  ZOOM_RETURN_IF_ERROR(CheckFormat(kv, kFormat, "replica ack"));
  ReplicaAck a;
  a.node = kv.String("node");
  if (!ValidateNodeId(a.node).ok()) return absl::DataLossError("replica ack: bad node id");
  ZOOM_ASSIGN_OR_RETURN(a.uid, ParseHex64(kv.String("uid"), "replica ack uid"));
  uint64_t shard = 0;
  ZOOM_RETURN_IF_ERROR(kv.Number("shard", &shard));
  if (shard >= kMaxShards) return absl::DataLossError("replica ack: shard out of range");
  a.shard = static_cast<uint32_t>(shard);
  ZOOM_RETURN_IF_ERROR(kv.Number("durable", &a.durable));
  const std::string applied = kv.String("applied");
  if (!applied.empty()) {
    const std::vector<std::string> items = absl::StrSplit(applied, ',');
    for (const std::string& item : items) {
      std::vector<std::string> f = absl::StrSplit(item, ':');
      if (f.size() != 2 && f.size() != 3) {
        return absl::DataLossError("replica ack: applied malformed");
      }
      AppliedEntry e;
      ZOOM_ASSIGN_OR_RETURN(e.sequence, ParseU64(f[0], "replica ack applied"));
      e.id = f[1];
      if (e.id.size() > 64 ||
          !std::all_of(e.id.begin(), e.id.end(),
                       [](char c) { return absl::ascii_isalnum(c) || c == '-' || c == '_'; })) {
        return absl::DataLossError("replica ack: applied has a bad message id");
      }
      if (f.size() == 3) {
        ZOOM_ASSIGN_OR_RETURN(uint64_t n, ParseU64(f[2], "replica ack applied"));
        e.changed = n;
      }
      a.applied.push_back(std::move(e));
    }
  }
  if (kv.Has("base")) {
    ZOOM_RETURN_IF_ERROR(kv.Number("base", &a.base));
    a.base_node = kv.String("base_node");
    if (a.base == 0 || !ValidateNodeId(a.base_node).ok()) {
      return absl::DataLossError("replica ack: bad base (base_node and a position above 0)");
    }
  }
  return a;
}

}  // namespace zoom::cluster
