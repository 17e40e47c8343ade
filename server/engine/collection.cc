#include "server/engine/collection.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/echo.h"
#include "common/logging.h"
#include "common/endian.h"
#include "common/status_macros.h"
#include "common/timer.h"
#include "common/vector_limits.h"
#include "absl/time/clock.h"

namespace zoom::server {
namespace {

namespace fs = std::filesystem;

absl::string_view AV(std::string_view s) { return absl::string_view(s.data(), s.size()); }

constexpr uint32_t kConfigVersion = 1;
constexpr uint32_t kStateVersion = 1;
constexpr uint64_t kMinIndexPoints = 256;

// "key=value" lines <-> map.
absl::StatusOr<absl::flat_hash_map<std::string, std::string>> ParseKeyValues(
    std::string_view text, std::string_view what) {
  absl::flat_hash_map<std::string, std::string> kv;
  for (absl::string_view line : absl::StrSplit(AV(text), '\n', absl::SkipEmpty())) {
    const size_t eq = line.find('=');
    if (eq == absl::string_view::npos) {
      return absl::DataLossError(absl::StrCat("malformed ", AV(what), " line '", line, "'"));
    }
    kv[std::string(line.substr(0, eq))] = std::string(line.substr(eq + 1));
  }
  return kv;
}

template <typename T>
absl::Status GetNumber(const absl::flat_hash_map<std::string, std::string>& kv,
                       const char* key, T* out) {
  auto it = kv.find(key);
  if (it == kv.end()) return absl::OkStatus();  // keep the default
  if constexpr (std::is_same_v<T, double>) {
    if (!absl::SimpleAtod(it->second, out)) {
      return absl::DataLossError(absl::StrCat("bad value for ", key));
    }
  } else {
    uint64_t v = 0;
    if (!absl::SimpleAtoi(it->second, &v)) {
      return absl::DataLossError(absl::StrCat("bad value for ", key));
    }
    *out = static_cast<T>(v);
  }
  return absl::OkStatus();
}

// The index's "bad input" (too few vectors, a vector it cannot train on)
// is, for a collection, a state that forbids the build, not a bad request.
absl::Status AsBuildStatus(const absl::Status& st) {
  if (absl::IsInvalidArgument(st)) return absl::FailedPreconditionError(st.message());
  return st;
}

}  // namespace

// ---- Config ------------------------------------------------------------------

absl::Status ValidateCollectionName(std::string_view name) {
  if (name.empty() || name.size() > 64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "collection name must be 1..64 characters of [A-Za-z0-9_-], got ",
        name.empty() ? std::string("an empty one") : absl::StrCat("'", EchoForMessage(name), "'")));
  }
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) {
      return absl::InvalidArgumentError(absl::StrCat(
          "collection name '", EchoForMessage(name), "' has the character ",
          DescribeCharAt(name, i), "; use only [A-Za-z0-9_-]"));
    }
  }
  return absl::OkStatus();
}

const char* IndexStateName(IndexState state) {
  switch (state) {
    case IndexState::kNone: return "NONE";
    case IndexState::kBuilding: return "BUILDING";
    case IndexState::kReady: return "READY";
    case IndexState::kFailed: return "FAILED";
  }
  return "UNKNOWN";
}

void CollectionConfig::ApplyDefaults() {
  index.metric = metric;
  index.dim = dim;
  if (index.pq.m == 0) {
    // About half a byte per dimension: ~8x smaller than float32.
    index.pq.m = std::max<uint32_t>(1, std::min<uint32_t>(dim, (dim + 1) / 2));
  }
  if (index.pq.nbits == 0) index.pq.nbits = 8;
  if (index.hnsw.M == 0) index.hnsw.M = 16;
  if (index.hnsw.ef_construction == 0) index.hnsw.ef_construction = 200;
  if (default_ef == 0) default_ef = 64;
  if (default_nprobe == 0) default_nprobe = 16;
  if (default_rerank == 0) default_rerank = 100;
}

absl::Status CollectionConfig::Validate(uint32_t max_dim) const {
  ZOOM_RETURN_IF_ERROR(ValidateCollectionName(name));
  if (dim == 0) return absl::InvalidArgumentError("dim must be at least 1");
  if (dim > max_dim) {
    return absl::InvalidArgumentError(
        absl::StrCat("dim ", dim, " is above this server's limit of ", max_dim, " (--max_dim)"));
  }
  if (metric == Metric::kCosine && dtype == storage::DType::kUint8) {
    // Cosine vectors are stored normalised, which uint8 cannot hold.
    return absl::InvalidArgumentError(
        "metric cosine needs dtype float32 (vectors are stored normalised)");
  }
  if (index.pq.m > dim) {
    return absl::InvalidArgumentError(
        absl::StrCat("pq_m ", index.pq.m, " is above dim ", dim, "; use 1..", dim));
  }
  if (index.hnsw.M < 2 || index.hnsw.M > 256) {
    return absl::InvalidArgumentError(absl::StrCat("M ", index.hnsw.M, " must be 2..256"));
  }
  if (index.hnsw.ef_construction < 1 || index.hnsw.ef_construction > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("ef_construction ", index.hnsw.ef_construction, " must be 1..4096"));
  }
  if (index.nlist > (1u << 20)) {
    return absl::InvalidArgumentError(absl::StrCat("nlist ", index.nlist, " must be <= 2^20"));
  }
  // The rest (pq_nbits and what it allows) is the index's own rule.
  return index.Validate();
}

std::string CollectionConfig::Encode() const {
  return absl::StrCat(
      "version=", kConfigVersion, "\nname=", name, "\ndim=", dim,
      "\nmetric=", MetricName(metric), "\ndtype=", storage::DTypeName(dtype),
      "\nindex_kind=", index::IndexKindName(index.kind),
      "\nhnsw_m=", index.hnsw.M,
      "\nef_construction=", index.hnsw.ef_construction, "\npq_m=", index.pq.m,
      "\npq_nbits=", index.pq.nbits, "\nopq=", index.pq.opq ? 1 : 0,
      "\nnlist=", index.nlist,
      "\ncompact_links=", index.hnsw.compact_links ? 1 : 0, "\nef=", default_ef,
      "\nnprobe=", default_nprobe, "\nrerank=", default_rerank, "\n");
}

absl::StatusOr<CollectionConfig> CollectionConfig::Decode(std::string_view text) {
  ZOOM_ASSIGN_OR_RETURN(auto kv, ParseKeyValues(text, "collection config"));
  uint32_t version = 0;
  ZOOM_RETURN_IF_ERROR(GetNumber(kv, "version", &version));
  if (version == 0 || version > kConfigVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("collection config version ", version, " is not readable by this zoomd"));
  }
  CollectionConfig c;
  c.name = kv["name"];
  ZOOM_RETURN_IF_ERROR(GetNumber(kv, "dim", &c.dim));
  ZOOM_ASSIGN_OR_RETURN(c.metric, ParseMetric(kv["metric"]));
  ZOOM_ASSIGN_OR_RETURN(c.dtype, storage::ParseDType(kv["dtype"]));
  ZOOM_ASSIGN_OR_RETURN(c.index.kind, index::ParseIndexKind(kv["index_kind"]));
  ZOOM_RETURN_IF_ERROR(GetNumber(kv, "hnsw_m", &c.index.hnsw.M));
  ZOOM_RETURN_IF_ERROR(GetNumber(kv, "ef_construction", &c.index.hnsw.ef_construction));
  ZOOM_RETURN_IF_ERROR(GetNumber(kv, "pq_m", &c.index.pq.m));
  ZOOM_RETURN_IF_ERROR(GetNumber(kv, "pq_nbits", &c.index.pq.nbits));
  uint32_t opq = 0;
  ZOOM_RETURN_IF_ERROR(GetNumber(kv, "opq", &opq));
  c.index.pq.opq = opq != 0;
  ZOOM_RETURN_IF_ERROR(GetNumber(kv, "nlist", &c.index.nlist));
  uint32_t compact_links = 0;  // absent in configs written before it existed
  ZOOM_RETURN_IF_ERROR(GetNumber(kv, "compact_links", &compact_links));
  c.index.hnsw.compact_links = compact_links != 0;
  ZOOM_RETURN_IF_ERROR(GetNumber(kv, "ef", &c.default_ef));
  ZOOM_RETURN_IF_ERROR(GetNumber(kv, "nprobe", &c.default_nprobe));
  ZOOM_RETURN_IF_ERROR(GetNumber(kv, "rerank", &c.default_rerank));
  c.index.metric = c.metric;
  c.index.dim = c.dim;
  return c;
}

// ---- Id table ----------------------------------------------------------------

namespace {

// InternalId -> (external id, dead bit). Segments are allocated by the single
// writer and never move, so readers index them without locks; a reader only
// looks at ids below the generation's `visible` count (acquire), which the
// writer publishes (release) after filling them.
class IdTable {
 public:
  static constexpr uint32_t kSegBits = 16;
  static constexpr uint32_t kSegSize = 1u << kSegBits;
  static constexpr uint32_t kMaxSegs = 1u << 16;

  IdTable() : segs_(new std::atomic<Segment*>[kMaxSegs]) {
    for (uint32_t i = 0; i < kMaxSegs; ++i) segs_[i].store(nullptr, std::memory_order_relaxed);
  }
  ~IdTable() {
    for (uint32_t i = 0; i < kMaxSegs; ++i) delete segs_[i].load(std::memory_order_relaxed);
  }
  IdTable(const IdTable&) = delete;
  IdTable& operator=(const IdTable&) = delete;

  // Writer: makes ids [0, n) addressable; new ids start dead.
  void Reserve(uint64_t n) {
    for (uint64_t s = 0; s * kSegSize < n; ++s) {
      if (segs_[s].load(std::memory_order_relaxed) == nullptr) {
        auto* seg = new Segment();
        for (auto& w : seg->dead) w.store(~uint64_t{0}, std::memory_order_relaxed);
        segs_[s].store(seg, std::memory_order_release);
      }
    }
  }
  void Set(InternalId id, uint64_t ext) {  // writer: live with `ext`
    Segment* seg = segs_[id >> kSegBits].load(std::memory_order_relaxed);
    const uint32_t off = id & (kSegSize - 1);
    seg->ext[off] = ext;
    seg->dead[off / 64].fetch_and(~(uint64_t{1} << (off % 64)), std::memory_order_release);
  }
  void Kill(InternalId id) {  // writer
    Segment* seg = segs_[id >> kSegBits].load(std::memory_order_relaxed);
    const uint32_t off = id & (kSegSize - 1);
    seg->dead[off / 64].fetch_or(uint64_t{1} << (off % 64), std::memory_order_release);
  }
  bool IsDead(InternalId id) const {
    const Segment* seg = segs_[id >> kSegBits].load(std::memory_order_acquire);
    if (seg == nullptr) return true;
    const uint32_t off = id & (kSegSize - 1);
    return (seg->dead[off / 64].load(std::memory_order_acquire) >> (off % 64)) & 1;
  }
  uint64_t External(InternalId id) const {
    return segs_[id >> kSegBits].load(std::memory_order_acquire)->ext[id & (kSegSize - 1)];
  }
  uint64_t Bytes(uint64_t n) const {
    const uint64_t segs = (n + kSegSize - 1) / kSegSize;
    return kMaxSegs * sizeof(void*) + segs * sizeof(Segment);
  }

 private:
  struct Segment {
    uint64_t ext[kSegSize];
    std::atomic<uint64_t> dead[kSegSize / 64];
  };
  std::unique_ptr<std::atomic<Segment*>[]> segs_;
};

}  // namespace

struct Collection::Generation : public index::IdFilter {
  uint32_t space = 0;
  std::string vectors_file;
  std::unique_ptr<SearchEngine> engine;
  IdTable ids;
  std::atomic<uint64_t> visible{0};  // records below are committed or dead
  std::atomic<uint64_t> live{0};
  // Set by the compaction that retired this generation: its records (and
  // payloads) are erased only when the last reader lets go of it, so a
  // search or get that started on it still reads its payloads.
  storage::MetadataStore* drop_records_on_release = nullptr;

  ~Generation() override {
    if (drop_records_on_release != nullptr) {
      drop_records_on_release->DropRecords(space).IgnoreError();
    }
  }

  bool IsExcluded(InternalId id) const override {
    return id >= visible.load(std::memory_order_acquire) || ids.IsDead(id);
  }
  uint64_t dead() const {
    const uint64_t v = visible.load(std::memory_order_acquire);
    const uint64_t l = live.load(std::memory_order_relaxed);
    return v > l ? v - l : 0;
  }
};

// ---- Open / create -----------------------------------------------------------

absl::StatusOr<std::shared_ptr<Collection::Generation>> Collection::OpenGeneration(
    uint32_t space, const std::string& vectors_file, bool create) {
  auto gen = std::make_shared<Generation>();
  gen->space = space;
  gen->vectors_file = vectors_file;
  const std::string path = (fs::path(dir_) / vectors_file).string();
  std::unique_ptr<storage::VectorStore> store;
  if (create) {
    ZOOM_ASSIGN_OR_RETURN(store, storage::VectorStore::Create(path, config_.dim, config_.dtype,
                                                              options_.store));
  } else {
    ZOOM_ASSIGN_OR_RETURN(store, storage::VectorStore::Open(path, options_.store));
    if (store->dim() != config_.dim || store->dtype() != config_.dtype) {
      return absl::DataLossError(absl::StrCat("vector file ", path,
                                              " does not match the collection's dim/dtype"));
    }
  }
  const uint64_t count = store->count();
  gen->ids.Reserve(count);
  uint64_t live = 0, beyond = 0;
  if (!create) {
    absl::flat_hash_map<uint64_t, InternalId> seen;
    ZOOM_RETURN_IF_ERROR(metadata_->ScanRecords(space, [&](InternalId id, uint64_t ext) {
      if (id >= count) {  // cannot happen with vectors written first; never serve it
        ++beyond;
        return absl::OkStatus();
      }
      auto [it, inserted] = seen.try_emplace(ext, id);
      if (!inserted) {  // keep the newest record of an id
        gen->ids.Kill(std::min(it->second, id));
        it->second = std::max(it->second, id);
        --live;
      }
      gen->ids.Set(it->second, ext);
      ++live;
      return absl::OkStatus();
    }));
  }
  if (beyond > 0) {
    ZOOM_LOG(WARNING, "collection ", config_.name, ": ", beyond,
             " records past the vector file's end ignored");
  }
  gen->live.store(live);
  gen->visible.store(count);
  gen->engine = std::make_unique<SearchEngine>(config_.metric, std::move(store), nullptr,
                                               options_.engine);
  return gen;
}

absl::StatusOr<std::unique_ptr<Collection>> Collection::Create(
    const std::string& dir, storage::MetadataStore* metadata, uint32_t id,
    const CollectionConfig& config, const CollectionOptions& options) {
  std::error_code ec;
  if (!fs::create_directories(dir, ec) || ec) {
    return absl::InternalError(absl::StrCat("cannot create the collection directory ", dir, ": ",
                                            ec ? ec.message() : "it exists"));
  }
  std::unique_ptr<Collection> c(new Collection());
  c->dir_ = dir;
  c->metadata_ = metadata;
  c->id_ = id;
  c->config_ = config;
  c->options_ = options;
  ZOOM_ASSIGN_OR_RETURN(auto gen, c->OpenGeneration(id, "vectors-1.zvec", /*create=*/true));
  {
    absl::MutexLock w(&c->write_mu_);
    c->next_file_seq_ = 2;
    {
      absl::WriterMutexLock m(&c->map_mu_);
      c->gen_ = std::move(gen);
    }
    ZOOM_RETURN_IF_ERROR(c->SaveStateLocked());
  }
  return c;
}

absl::StatusOr<std::unique_ptr<Collection>> Collection::Open(
    const std::string& dir, storage::MetadataStore* metadata,
    const storage::CollectionRecord& record, const CollectionOptions& options) {
  ZOOM_ASSIGN_OR_RETURN(CollectionConfig config, CollectionConfig::Decode(record.config));
  if (record.state.empty()) {
    // Create saves the state before the collection is handed out: without
    // one, a crash interrupted the create and nothing was ever stored in it.
    // Start it over, empty (instead of failing the whole database's open).
    std::error_code ec;
    fs::remove_all(dir, ec);
    return Create(dir, metadata, record.id, config, options);
  }
  std::unique_ptr<Collection> c(new Collection());
  c->dir_ = dir;
  c->metadata_ = metadata;
  c->id_ = record.id;
  c->config_ = config;
  c->options_ = options;
  ZOOM_ASSIGN_OR_RETURN(auto kv, ParseKeyValues(record.state, "collection state"));
  uint32_t version = 0, space = record.id, seq = 2, pending = 0;
  uint64_t snapshot_count = 0;
  ZOOM_RETURN_IF_ERROR(GetNumber(kv, "version", &version));
  if (version > kStateVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("collection state version ", version, " is not readable by this zoomd"));
  }
  ZOOM_RETURN_IF_ERROR(GetNumber(kv, "space", &space));
  ZOOM_RETURN_IF_ERROR(GetNumber(kv, "seq", &seq));
  ZOOM_RETURN_IF_ERROR(GetNumber(kv, "pending_space", &pending));
  ZOOM_RETURN_IF_ERROR(GetNumber(kv, "snapshot_count", &snapshot_count));
  const std::string vectors = kv.contains("vectors") ? kv["vectors"] : "vectors-1.zvec";
  const std::string snapshot = kv["snapshot"];

  absl::MutexLock w(&c->write_mu_);
  if (pending != 0) {  // an interrupted compaction: its records are garbage
    ZOOM_RETURN_IF_ERROR(metadata->DropRecords(pending));
  }
  // Files the state does not name are left-overs of an interrupted
  // compaction or snapshot: remove them.
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name != vectors && name != snapshot) fs::remove(entry.path(), ec);
  }
  ZOOM_ASSIGN_OR_RETURN(auto gen, c->OpenGeneration(space, vectors, /*create=*/false));
  c->next_file_seq_ = seq;
  absl::flat_hash_map<uint64_t, InternalId> by_external;
  by_external.reserve(gen->live.load());
  const uint64_t visible = gen->visible.load();
  for (uint64_t i = 0; i < visible; ++i) {
    if (!gen->ids.IsDead(static_cast<InternalId>(i))) {
      by_external[gen->ids.External(static_cast<InternalId>(i))] = static_cast<InternalId>(i);
    }
  }
  if (!snapshot.empty()) {
    Stopwatch sw;
    index::LoadIndexOptions load_options;  // the config decides the link layout
    if (config.index.kind == index::IndexKind::kHnswPq) {
      load_options.compact_links = config.index.hnsw.compact_links;
    }
    auto idx =
        index::LoadIndex((fs::path(dir) / snapshot).string(), load_options);
    absl::Status st = idx.ok() ? gen->engine->SetIndex(std::move(*idx)) : idx.status();
    if (st.ok()) {
      c->snapshot_file_ = snapshot;
      c->snapshot_count_ = snapshot_count;
      c->index_state_ = IndexState::kReady;
      ZOOM_LOG(INFO, "collection ", config.name, ": index snapshot ", snapshot, " loaded, ",
               visible - std::min(visible, snapshot_count), " points replayed, ",
               static_cast<int64_t>(sw.ElapsedMicros() / 1000), " ms");
    } else {
      ZOOM_LOG(WARNING, "collection ", config.name, ": index snapshot ", snapshot,
               " unusable (", st.message(), "); searching exactly until BuildIndex");
      c->index_state_ = IndexState::kFailed;
      absl::MutexLock b(&c->build_mu_);
      c->build_status_ = absl::Status(st.code(), absl::StrCat("index snapshot ", snapshot,
                                                             " unusable: ", st.message()));
    }
  }
  {
    absl::WriterMutexLock m(&c->map_mu_);
    c->gen_ = std::move(gen);
    c->by_external_ = std::move(by_external);
  }
  return c;
}

Collection::~Collection() {
  {
    absl::MutexLock t(&build_thread_mu_);
    if (build_thread_.joinable()) {
      // The last reference may go on the build thread itself (a callback
      // of WhenBuildDone): it is ending, and cannot join itself.
      if (build_thread_.get_id() == std::this_thread::get_id()) {
        build_thread_.detach();
      } else {
        build_thread_.join();
      }
    }
  }
  absl::MutexLock w(&write_mu_);
  std::shared_ptr<Generation> gen = Current();
  const index::VectorIndex* idx = gen ? gen->engine->index() : nullptr;
  if (!dropped_ && idx != nullptr && idx->size() > snapshot_count_) {
    absl::Status st = SaveSnapshotLocked();
    if (!st.ok()) {
      ZOOM_LOG(WARNING, "collection ", config_.name, ": snapshot at close failed: ",
               st.message());
    }
  }
}

std::shared_ptr<Collection::Generation> Collection::Current() const {
  absl::ReaderMutexLock m(&map_mu_);
  return gen_;
}

std::shared_ptr<const SearchEngine> Collection::engine() const {
  std::shared_ptr<Generation> gen = Current();
  return std::shared_ptr<const SearchEngine>(gen, gen->engine.get());
}

uint32_t Collection::record_space() const { return Current()->space; }

namespace {

// The collection's state record (the catalog's 's' entry): the one place
// its text is written.
std::string StateText(uint32_t space, const std::string& vectors, const std::string& snapshot,
                      uint64_t snapshot_count, uint32_t seq, uint32_t pending_space) {
  return absl::StrCat("version=", kStateVersion, "\nspace=", space, "\nvectors=", vectors,
                      "\nsnapshot=", snapshot, "\nsnapshot_count=", snapshot_count,
                      "\nseq=", seq,
                      pending_space != 0 ? absl::StrCat("\npending_space=", pending_space)
                                         : std::string(),
                      "\n");
}

}  // namespace

absl::Status Collection::SaveStateLocked() {
  if (dropped_) return absl::NotFoundError("the collection was dropped");
  std::shared_ptr<Generation> gen = Current();
  return metadata_->PutState(id_, StateText(gen->space, gen->vectors_file, snapshot_file_,
                                            snapshot_count_, next_file_seq_, pending_space_));
}

absl::Status Collection::SaveSnapshotLocked() {
  std::shared_ptr<Generation> gen = Current();
  const index::VectorIndex* idx = gen->engine->index();
  if (idx == nullptr) return absl::OkStatus();
  const std::string name = absl::StrCat("index-", next_file_seq_++, ".zidx");
  const std::string path = (fs::path(dir_) / name).string();
  ZOOM_RETURN_IF_ERROR(idx->Save(path));
  const std::string old = snapshot_file_;
  snapshot_file_ = name;
  snapshot_count_ = idx->size();
  absl::Status st = SaveStateLocked();
  if (!st.ok()) {
    std::error_code ec;
    fs::remove(path, ec);
    snapshot_file_ = old;
    return st;
  }
  if (!old.empty()) {
    std::error_code ec;
    fs::remove(fs::path(dir_) / old, ec);
  }
  return absl::OkStatus();
}

// ---- Writes ------------------------------------------------------------------

absl::Status Collection::Upsert(absl::Span<const PointRef> points) {
  if (points.empty()) return absl::InvalidArgumentError("no points to upsert");
  const size_t d = config_.dim;
  for (size_t i = 0; i < points.size(); ++i) {
    const float* v = points[i].vector;
    if (absl::Status st = CheckVectorMagnitude(config_.metric, v, d); !st.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("point ", points[i].id, " (#", i, "): ", st.message()));
    }
    if (config_.dtype == storage::DType::kUint8) {
      for (size_t j = 0; j < d; ++j) {
        if (v[j] < 0 || v[j] > 255 || v[j] != std::floor(v[j])) {
          return absl::InvalidArgumentError(absl::StrCat(
              "point ", points[i].id, " (#", i, "): component ", j, " is ", v[j],
              "; a uint8 collection takes integers 0..255"));
        }
      }
    }
  }
  // Later duplicates win.
  absl::flat_hash_map<uint64_t, size_t> last;
  last.reserve(points.size());
  for (size_t i = 0; i < points.size(); ++i) last[points[i].id] = i;
  std::vector<size_t> order;
  order.reserve(last.size());
  for (size_t i = 0; i < points.size(); ++i) {
    if (last[points[i].id] == i) order.push_back(i);
  }
  const size_t n = order.size();
  std::vector<float> vectors(n * d);
  for (size_t i = 0; i < n; ++i) {
    std::copy_n(points[order[i]].vector, d, vectors.data() + i * d);
  }

  absl::MutexLock w(&write_mu_);
  if (dropped_) return absl::NotFoundError(absl::StrCat("collection '", config_.name, "' was dropped"));
  std::shared_ptr<Generation> gen = Current();
  SearchEngine& engine = *gen->engine;
  const uint64_t base = engine.size();
  if (base + n > (uint64_t{1} << 32) - 1) {
    return absl::ResourceExhaustedError("the collection's vector file is full (2^32 records); "
                                        "compact or split the collection");
  }
  gen->ids.Reserve(base + n);
  absl::Status st = engine.Add(vectors.data(), n);
  if (!st.ok()) {
    // Whatever reached the file stays dead.
    gen->visible.store(engine.size(), std::memory_order_release);
    return st;
  }
  std::vector<storage::RecordWrite> writes(n);
  std::vector<InternalId> erased;
  {
    absl::ReaderMutexLock m(&map_mu_);
    for (size_t i = 0; i < n; ++i) {
      const PointRef& p = points[order[i]];
      writes[i] = {static_cast<InternalId>(base + i), p.id, p.payload};
      auto it = by_external_.find(p.id);
      if (it != by_external_.end()) erased.push_back(it->second);
    }
  }
  st = metadata_->Commit(gen->space, writes, erased);
  if (!st.ok()) {
    gen->visible.store(base + n, std::memory_order_release);  // the new records stay dead
    return st;
  }
  // Old records die before the new ones become visible: a search never sees
  // a point twice.
  for (InternalId old : erased) gen->ids.Kill(old);
  for (size_t i = 0; i < n; ++i) gen->ids.Set(static_cast<InternalId>(base + i), writes[i].external_id);
  {
    absl::WriterMutexLock m(&map_mu_);
    for (size_t i = 0; i < n; ++i) by_external_[writes[i].external_id] = writes[i].id;
  }
  gen->live.fetch_add(n - erased.size(), std::memory_order_relaxed);
  gen->visible.store(base + n, std::memory_order_release);
  MaybeAutoMaintainLocked();
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> Collection::Delete(absl::Span<const uint64_t> ids) {
  if (ids.empty()) return absl::InvalidArgumentError("no ids to delete");
  absl::MutexLock w(&write_mu_);
  if (dropped_) return absl::NotFoundError(absl::StrCat("collection '", config_.name, "' was dropped"));
  std::shared_ptr<Generation> gen = Current();
  std::vector<InternalId> erased;
  std::vector<uint64_t> externals;
  {
    absl::ReaderMutexLock m(&map_mu_);
    absl::flat_hash_set<uint64_t> seen;
    for (uint64_t id : ids) {
      if (!seen.insert(id).second) continue;
      auto it = by_external_.find(id);
      if (it == by_external_.end()) continue;
      erased.push_back(it->second);
      externals.push_back(id);
    }
  }
  if (erased.empty()) return 0;
  ZOOM_RETURN_IF_ERROR(metadata_->Commit(gen->space, {}, erased));
  for (InternalId old : erased) gen->ids.Kill(old);
  {
    absl::WriterMutexLock m(&map_mu_);
    for (uint64_t id : externals) by_external_.erase(id);
  }
  gen->live.fetch_sub(erased.size(), std::memory_order_relaxed);
  MaybeAutoMaintainLocked();
  return erased.size();
}

void Collection::MaybeAutoMaintainLocked() {
  std::shared_ptr<Generation> gen = Current();
  const uint64_t live = gen->live.load();
  // After a failed build, the automatic one waits for the backoff (else
  // every write would start it again).
  if (options_.auto_build_min_points > 0 && live >= options_.auto_build_min_points &&
      gen->engine->index() == nullptr && !building_.load() && MaintenanceDue()) {
    absl::Status st = StartBuild();
    ZOOM_LOG(INFO, "collection ", config_.name, ": ", live, " points, automatic index build: ",
             st.ok() ? absl::string_view("started") : st.message());
  }
}

// ---- Reads -------------------------------------------------------------------

absl::Status Collection::ReadPayloadsWithin(const Generation& gen,
                                            absl::Span<const InternalId> ids, uint64_t* budget,
                                            std::vector<std::string>* out) const {
  // In chunks: payloads are up to the server's limit each (1 MiB), so a
  // chunk overshoots the budget by little before the answer is refused.
  constexpr size_t kChunk = 16;
  out->clear();
  out->reserve(ids.size());
  std::vector<std::string> part;
  for (size_t first = 0; first < ids.size(); first += kChunk) {
    const size_t m = std::min(kChunk, ids.size() - first);
    ZOOM_RETURN_IF_ERROR(metadata_->GetPayloads(gen.space, ids.subspan(first, m), &part));
    for (std::string& p : part) {
      if (p.size() > *budget) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "the answer would be larger than this server sends in one message (after ",
            first, " of ", ids.size(), " payloads); ask for fewer points or without payloads"));
      }
      *budget -= p.size();
      out->push_back(std::move(p));
    }
  }
  return absl::OkStatus();
}

absl::Status Collection::Get(absl::Span<const uint64_t> ids, bool with_vectors,
                             bool with_payload, std::vector<PointData>* out,
                             uint64_t max_answer_bytes) const {
  out->clear();
  std::shared_ptr<Generation> gen;
  std::vector<InternalId> internal;  // one per distinct id found
  std::vector<uint32_t> source;      // per answer entry: its index in `internal`
  {
    absl::flat_hash_map<uint64_t, uint32_t> first;  // external id -> index in internal
    absl::ReaderMutexLock m(&map_mu_);
    gen = gen_;
    for (uint64_t id : ids) {
      auto [slot, inserted] = first.try_emplace(id, static_cast<uint32_t>(internal.size()));
      if (inserted) {
        auto it = by_external_.find(id);
        if (it == by_external_.end()) {
          slot->second = UINT32_MAX;  // missing: left out
        } else {
          internal.push_back(it->second);
        }
      }
      if (slot->second == UINT32_MAX) continue;
      out->push_back(PointData{id, {}, {}});
      source.push_back(slot->second);
    }
  }
  // Each id is read once, however often it is asked for; every answer entry
  // counts against the budget (an id repeated 600 times is 600 answers).
  const size_t d = config_.dim;
  uint64_t budget = max_answer_bytes;
  const uint64_t fixed = out->size() * (16 + (with_vectors ? d * sizeof(float) + 8 : 0));
  if (fixed > budget) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the answer (", out->size(), " points", with_vectors ? " with vectors" : "",
        ", about ", fixed, " bytes) would be larger than the ", max_answer_bytes,
        " bytes this server sends in one message; ask for fewer points"));
  }
  budget -= fixed;
  std::vector<std::string> payloads;
  if (with_payload && !internal.empty()) {
    ZOOM_RETURN_IF_ERROR(ReadPayloadsWithin(*gen, internal, &budget, &payloads));
    // Repeats beyond the first of each id cost their payload again.
    std::vector<bool> used(internal.size(), false);
    for (uint32_t src : source) {
      if (!used[src]) {
        used[src] = true;
        continue;
      }
      if (payloads[src].size() > budget) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "the answer (", out->size(), " points, ids repeated) would be larger than the ",
            max_answer_bytes, " bytes this server sends in one message; ask for each id once"));
      }
      budget -= payloads[src].size();
    }
  }
  std::vector<float> buf;
  if (with_vectors && !internal.empty()) {
    buf.resize(internal.size() * d);
    ZOOM_RETURN_IF_ERROR(gen->engine->store().ReadVectors(internal, buf.data()));
  }
  for (size_t i = 0; i < out->size(); ++i) {
    const uint32_t src = source[i];
    if (with_vectors) (*out)[i].vector.assign(buf.begin() + src * d, buf.begin() + (src + 1) * d);
    if (with_payload) (*out)[i].payload = payloads[src];
  }
  return absl::OkStatus();
}

absl::Status Collection::Search(const float* query, size_t dim,
                                const CollectionSearchParams& params,
                                std::vector<CollectionHit>* hits, QueryStats* stats,
                                bool* exact_used) const {
  hits->clear();
  if (dim != config_.dim) {
    return absl::InvalidArgumentError(absl::StrCat("query has ", dim,
                                                   " dimensions; collection '", config_.name,
                                                   "' has ", config_.dim));
  }
  if (absl::Status st = CheckVectorMagnitude(config_.metric, query, dim); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("query: ", st.message()));
  }
  std::shared_ptr<Generation> gen = Current();
  SearchParams p = params.engine;
  if (p.ef == 0) p.ef = config_.default_ef;
  if (p.nprobe == 0) p.nprobe = config_.default_nprobe;
  if (p.rerank_candidates == 0) p.rerank_candidates = config_.default_rerank;
  p.filter = gen.get();
  const bool exact = params.exact || gen->engine->index() == nullptr;
  if (exact_used != nullptr) *exact_used = exact;
  std::vector<SearchHit> found;
  ZOOM_RETURN_IF_ERROR(exact ? gen->engine->ExactSearch(query, p, &found, stats)
                             : gen->engine->Search(query, p, &found, stats));
  hits->resize(found.size());
  std::vector<InternalId> internal(found.size());
  for (size_t i = 0; i < found.size(); ++i) {
    (*hits)[i].id = gen->ids.External(found[i].id);
    (*hits)[i].score = found[i].score;
    internal[i] = found[i].id;
  }
  uint64_t budget = params.max_answer_bytes;
  const uint64_t fixed =
      internal.size() * (16 + (params.with_vectors ? config_.dim * sizeof(float) + 8 : 0));
  if (fixed > budget) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the answer (", internal.size(), " hits", params.with_vectors ? " with vectors" : "",
        ", about ", fixed, " bytes) would be larger than this server sends in one message; "
        "ask for a smaller k or without vectors"));
  }
  budget -= fixed;
  if (params.with_payload && !internal.empty()) {
    std::vector<std::string> payloads;
    ZOOM_RETURN_IF_ERROR(ReadPayloadsWithin(*gen, internal, &budget, &payloads));
    for (size_t i = 0; i < internal.size(); ++i) (*hits)[i].payload = std::move(payloads[i]);
  }
  if (params.with_vectors && !internal.empty()) {
    const size_t d = config_.dim;
    std::vector<float> buf(internal.size() * d);
    ZOOM_RETURN_IF_ERROR(gen->engine->store().ReadVectors(internal, buf.data()));
    for (size_t i = 0; i < internal.size(); ++i) {
      (*hits)[i].vector.assign(buf.begin() + i * d, buf.begin() + (i + 1) * d);
    }
  }
  return absl::OkStatus();
}

// ---- Index builds ------------------------------------------------------------

uint64_t Collection::MinIndexPoints() const {
  uint64_t min = kMinIndexPoints;
  if (config_.index.kind == index::IndexKind::kIvfHnswPq) {
    min = std::max<uint64_t>(min, config_.index.nlist);
  }
  return min;
}

absl::Status Collection::StartBuild() { return StartBuildImpl(/*join_running=*/false); }

absl::Status Collection::StartOrJoinBuild() { return StartBuildImpl(/*join_running=*/true); }

absl::Status Collection::StartBuildImpl(bool join_running) {
  if (join_running && building_.load()) return absl::OkStatus();
  if (dropped_) {
    return absl::NotFoundError(absl::StrCat("collection '", config_.name, "' was dropped"));
  }
  if (compacting_.load()) {
    // The compaction rebuilds the index of the generation it makes.
    return absl::FailedPreconditionError(
        absl::StrCat("a compaction of '", config_.name, "' is running; build after it"));
  }
  const uint64_t live = Current()->live.load();
  if (live < MinIndexPoints()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "collection '", config_.name, "' has ", live, " points; an index needs at least ",
        MinIndexPoints(),
        MinIndexPoints() > kMinIndexPoints ? " (its nlist)" : "",
        " to train (searches are exact until then)"));
  }
  bool expected = false;
  if (!building_.compare_exchange_strong(expected, true)) {
    if (join_running) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat("an index build of '", config_.name, "' is already running"));
  }
  // The previous build thread has ended its work (building_ was false);
  // joining and replacing it is serialised against other starts and the
  // destructor.
  absl::MutexLock t(&build_thread_mu_);
  if (build_thread_.joinable()) build_thread_.join();
  build_progress_ = 0;
  index_state_ = IndexState::kBuilding;
  build_thread_ = std::thread([this] { BuildMain(); });
  return absl::OkStatus();
}

absl::Status Collection::CheckTrainable(const Generation& gen, const float* vectors,
                                        uint64_t n) const {
  const size_t d = config_.dim;
  for (uint64_t i = 0; i < n; ++i) {
    const InternalId id = static_cast<InternalId>(i);
    if (gen.IsExcluded(id)) continue;
    const float* v = vectors + i * d;
    if (VectorMagnitudeOk(config_.metric, v, d)) continue;
    absl::Status why = CheckVectorMagnitude(config_.metric, v, d);
    return absl::FailedPreconditionError(absl::StrCat(
        "point ", gen.ids.External(id), " cannot be indexed: ", why.message(),
        " (stored by an older zoomd, before this rule); delete or overwrite it, then build "
        "again"));
  }
  return absl::OkStatus();
}

// Reads every record of the current generation and builds an index over
// them, trained on the live ones. Allocation failure and exceptions become
// a Status (a background thread must never take the process down).
absl::Status Collection::BuildOnce(std::unique_ptr<index::VectorIndex>* built,
                                   std::shared_ptr<Generation>* gen_out, uint64_t* n_out) {
  std::shared_ptr<Generation> gen = Current();
  *gen_out = gen;
  const SearchEngine& engine = *gen->engine;
  const uint64_t n = engine.size();
  *n_out = n;
  const size_t d = config_.dim;
  try {
    std::vector<float> vectors(n * d);
    std::vector<InternalId> ids;
    for (uint64_t first = 0; first < n; first += 4096) {
      const uint64_t m = std::min<uint64_t>(4096, n - first);
      ids.resize(m);
      for (uint64_t i = 0; i < m; ++i) ids[i] = static_cast<InternalId>(first + i);
      ZOOM_RETURN_IF_ERROR(engine.store().ReadVectors(ids, vectors.data() + first * d));
      build_progress_ = 0.1 * (first + m) / n;
    }
    ZOOM_RETURN_IF_ERROR(CheckTrainable(*gen, vectors.data(), n));
    index::IndexSpec spec = config_.index;
    spec.metric = config_.metric;
    spec.dim = config_.dim;
    spec.build_threads = options_.build_threads;
    build_progress_ = 0.1;
    auto idx = index::BuildIndex(spec, vectors.data(), n, gen.get());
    if (!idx.ok()) return AsBuildStatus(idx.status());
    *built = std::move(*idx);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        absl::StrCat("out of memory building the index over ", n, " points"));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("index build failed: ", e.what()));
  }
  return absl::OkStatus();
}

void Collection::BuildMain() {
  Stopwatch sw;
  std::unique_ptr<index::VectorIndex> built;
  std::shared_ptr<Generation> gen;
  uint64_t n = 0;
  absl::Status st = BuildOnce(&built, &gen, &n);
  build_progress_ = 0.9;
  if (st.ok()) {
    absl::MutexLock w(&write_mu_);
    if (Current() != gen || pending_space_ != 0) {
      st = absl::AbortedError("the collection was compacted during the build; build again");
    } else {
      st = gen->engine->SetIndex(std::move(built));
      if (st.ok()) st = SaveSnapshotLocked();
    }
  }
  built.reset();
  build_progress_ = 1.0;
  // A build overtaken by a compaction is not a failure: the compaction made
  // the index of the generation now serving (or none).
  const bool overtaken = absl::IsAborted(st);
  const std::shared_ptr<Generation> now = Current();
  index_state_ = st.ok() ? IndexState::kReady
                 : now->engine->index() != nullptr ? IndexState::kReady
                 : overtaken                        ? IndexState::kNone
                                                    : IndexState::kFailed;
  if (st.ok()) {
    ZOOM_LOG(INFO, "collection ", config_.name, ": index build over ", n, " points done in ",
             absl::SixDigits(sw.ElapsedMicros() / 1e6), " s");
  } else {
    ZOOM_LOG(WARNING, "collection ", config_.name, ": index build over ", n, " points failed: ",
             st.message());
  }
  if (!overtaken) NoteMaintenance(/*compaction=*/false, st);
  std::vector<std::function<void(absl::Status)>> waiters;
  {
    absl::MutexLock b(&build_mu_);
    build_status_ = st;
    building_ = false;
    build_done_.SignalAll();
    waiters.swap(build_waiters_);
  }
  for (auto& done : waiters) done(st);
}

void Collection::WhenBuildDone(std::function<void(absl::Status)> done) {
  absl::Status st;
  {
    absl::MutexLock b(&build_mu_);
    if (building_.load()) {
      build_waiters_.push_back(std::move(done));
      return;
    }
    st = build_status_;
  }
  done(st);
}

absl::Status Collection::WaitForBuild() {
  absl::MutexLock b(&build_mu_);
  while (building_.load()) build_done_.Wait(&build_mu_);
  return build_status_;
}

void Collection::NoteMaintenance(bool compaction, const absl::Status& st) {
  absl::MutexLock b(&build_mu_);
  if (compaction) compaction_status_ = st;
  if (st.ok()) {
    maintenance_failures_ = 0;
    maintenance_retry_at_ = absl::InfinitePast();
    return;
  }
  ++maintenance_failures_;
  absl::Duration wait = options_.maintenance_retry_base;
  for (uint32_t i = 1; i < maintenance_failures_ && wait < options_.maintenance_retry_max; ++i) {
    wait *= 2;
  }
  wait = std::min(wait, options_.maintenance_retry_max);
  maintenance_retry_at_ = absl::Now() + wait;
  ZOOM_LOG(WARNING, "collection ", config_.name, ": ", compaction ? "compaction" : "index build",
           " failed (", maintenance_failures_, " in a row); automatic maintenance retries in ",
           absl::FormatDuration(wait));
}

bool Collection::MaintenanceDue() const {
  absl::MutexLock b(&build_mu_);
  return absl::Now() >= maintenance_retry_at_;
}

// ---- Compaction --------------------------------------------------------------

absl::Status Collection::Compact() {
  if (building_.load()) {
    return absl::FailedPreconditionError(
        absl::StrCat("an index build of '", config_.name, "' is running; compact after it"));
  }
  absl::Status st;
  try {
    st = CompactOnce();
  } catch (const std::bad_alloc&) {
    st = absl::ResourceExhaustedError("out of memory during compaction");
  } catch (const std::exception& e) {
    st = absl::InternalError(absl::StrCat("compaction failed: ", e.what()));
  }
  if (!dropped_) NoteMaintenance(/*compaction=*/true, st);
  return st;
}

void Collection::MarkDropped(bool dropped) {
  dropping_ = dropped;  // a compaction in progress stops at its next chunk
  absl::MutexLock c(&compact_mu_);
  absl::MutexLock w(&write_mu_);
  dropped_ = dropped;
}

absl::Status Collection::CompactOnce() {
  absl::MutexLock one(&compact_mu_);
  compacting_ = true;  // no build starts until it ends (StartBuildImpl)
  absl::Cleanup not_compacting = [this] { compacting_ = false; };
  const absl::Status dropped_error =
      absl::NotFoundError(absl::StrCat("collection '", config_.name, "' was dropped"));
  // 1. Under the write lock, briefly: what to copy, and the new space
  //    announced in the state (a crash from here on leaves no garbage).
  std::shared_ptr<Generation> old;
  uint64_t visible = 0;
  std::vector<InternalId> live_ids;
  uint32_t space = 0;
  std::string vectors_file, snapshot_name;
  {
    absl::MutexLock w(&write_mu_);
    if (dropped_) return dropped_error;
    old = Current();
    visible = old->visible.load();
    for (uint64_t i = 0; i < visible; ++i) {
      if (!old->ids.IsDead(static_cast<InternalId>(i))) {
        live_ids.push_back(static_cast<InternalId>(i));
      }
    }
    if (live_ids.size() == old->engine->size()) return absl::OkStatus();  // nothing dead
    if (building_.load()) {
      return absl::FailedPreconditionError(
          absl::StrCat("an index build of '", config_.name, "' is running; compact after it"));
    }
    ZOOM_ASSIGN_OR_RETURN(space, metadata_->AllocateId());
    vectors_file = absl::StrCat("vectors-", next_file_seq_++, ".zvec");
    snapshot_name = absl::StrCat("index-", next_file_seq_++, ".zidx");
    pending_space_ = space;
    if (absl::Status st = SaveStateLocked(); !st.ok()) {
      pending_space_ = 0;
      return st;
    }
  }
  Stopwatch sw;
  auto cleanup_new = [&] {
    metadata_->DropRecords(space).IgnoreError();
    std::error_code ec;
    fs::remove(fs::path(dir_) / vectors_file, ec);
    fs::remove(fs::path(dir_) / snapshot_name, ec);
    absl::MutexLock w(&write_mu_);
    pending_space_ = 0;
    if (!dropped_) SaveStateLocked().IgnoreError();
  };
  // 2. Without the lock (writes go on): copy the live records in id order,
  //    in chunks, and build the index over them.
  auto gen_or = OpenGeneration(space, vectors_file, /*create=*/true);
  if (!gen_or.ok()) {
    cleanup_new();
    return gen_or.status();
  }
  std::shared_ptr<Generation> gen = std::move(*gen_or);
  const storage::VectorStore& src = old->engine->store();
  const size_t rb = src.record_bytes();
  const size_t d = config_.dim;
  const uint64_t n = live_ids.size();
  gen->ids.Reserve(n);
  std::vector<uint8_t> raw;
  std::vector<std::string> payloads;
  std::vector<storage::RecordWrite> writes;
  std::vector<float> all(n * d);
  absl::Status st;
  storage::VectorStoreOptions wopts = options_.store;
  // The generation's engine owns a store too; write through a second handle
  // with batched syncs, then reopen the engine on the result.
  auto store_or = storage::VectorStore::Open((fs::path(dir_) / vectors_file).string(), [&] {
    wopts.sync_on_append = false;
    return wopts;
  }());
  if (!store_or.ok()) {
    cleanup_new();
    return store_or.status();
  }
  std::unique_ptr<storage::VectorStore> writer = std::move(*store_or);
  for (uint64_t first = 0; first < n && st.ok(); first += 4096) {
    if (dropping_.load()) {
      st = dropped_error;
      break;
    }
    const uint64_t m = std::min<uint64_t>(4096, n - first);
    absl::Span<const InternalId> chunk(live_ids.data() + first, m);
    raw.resize(m * rb);
    st = src.ReadRaw(chunk, raw.data());
    if (st.ok()) st = src.ReadVectors(chunk, all.data() + first * d);
    if (st.ok()) st = writer->Append(raw.data(), m);
    // A record deleted since step 1 has no payload any more: it is copied
    // as is and killed in step 3.
    if (st.ok()) st = metadata_->GetPayloads(old->space, chunk, &payloads);
    if (!st.ok()) break;
    writes.resize(m);
    for (uint64_t i = 0; i < m; ++i) {
      writes[i] = {static_cast<InternalId>(first + i), old->ids.External(chunk[i]), payloads[i]};
    }
    st = metadata_->Commit(space, writes, {});
  }
  if (st.ok()) st = writer->Sync();
  writer.reset();
  if (st.ok()) {
    auto reopened = OpenGeneration(space, vectors_file, /*create=*/false);
    if (reopened.ok()) {
      gen = std::move(*reopened);
    } else {
      st = reopened.status();
    }
  }
  // The index: rebuilt over the live points when there was one (and enough
  // points are left to train it; else searches are exact), and saved as the
  // new generation's snapshot (the writes of step 3 are replayed after it).
  const bool indexed = old->engine->index() != nullptr && n >= MinIndexPoints();
  if (st.ok() && indexed) st = CheckTrainable(*gen, all.data(), n);
  if (st.ok() && indexed) {
    index::IndexSpec spec = config_.index;
    spec.metric = config_.metric;
    spec.dim = config_.dim;
    spec.build_threads = options_.build_threads;
    auto idx = index::BuildIndex(spec, all.data(), n);
    if (idx.ok()) {
      st = gen->engine->SetIndex(std::move(*idx));
    } else {
      st = AsBuildStatus(idx.status());
    }
    if (st.ok()) st = gen->engine->index()->Save((fs::path(dir_) / snapshot_name).string());
  }
  all = std::vector<float>();
  if (st.ok() && dropping_.load()) st = dropped_error;
  if (!st.ok()) {
    cleanup_new();
    return st;
  }
  // 3. Under the write lock: the writes made during step 2, then the switch.
  absl::MutexLock w(&write_mu_);
  if (dropped_) {
    metadata_->DropRecords(space).IgnoreError();
    pending_space_ = 0;
    return dropped_error;
  }
  auto undo = [&](const absl::Status& why) {
    pending_space_ = 0;
    metadata_->DropRecords(space).IgnoreError();
    std::error_code ec;
    fs::remove(fs::path(dir_) / vectors_file, ec);
    fs::remove(fs::path(dir_) / snapshot_name, ec);
    SaveStateLocked().IgnoreError();
    return why;
  };
  //    (a) Copied records deleted or overwritten since: dead in the new one.
  std::vector<InternalId> killed;
  for (uint64_t i = 0; i < n; ++i) {
    if (old->ids.IsDead(live_ids[i])) killed.push_back(static_cast<InternalId>(i));
  }
  //    (b) Records added since (live ones): appended to the new generation.
  const uint64_t now_visible = old->visible.load();
  std::vector<InternalId> added;
  for (uint64_t i = visible; i < now_visible; ++i) {
    if (!old->ids.IsDead(static_cast<InternalId>(i))) added.push_back(static_cast<InternalId>(i));
  }
  if (!killed.empty() || !added.empty()) {
    std::vector<float> vectors(added.size() * d);
    std::vector<std::string> added_payloads;
    if (!added.empty()) {
      if (absl::Status r = src.ReadVectors(added, vectors.data()); !r.ok()) return undo(r);
      if (absl::Status r = metadata_->GetPayloads(old->space, added, &added_payloads); !r.ok()) {
        return undo(r);
      }
    }
    const uint64_t base = gen->engine->size();
    gen->ids.Reserve(base + added.size());
    if (absl::Status r = gen->engine->Add(vectors.data(), added.size()); !r.ok()) return undo(r);
    std::vector<storage::RecordWrite> adds(added.size());
    for (size_t i = 0; i < added.size(); ++i) {
      adds[i] = {static_cast<InternalId>(base + i), old->ids.External(added[i]), added_payloads[i]};
    }
    if (absl::Status r = metadata_->Commit(space, adds, killed); !r.ok()) return undo(r);
    for (InternalId k : killed) gen->ids.Kill(k);
    for (size_t i = 0; i < adds.size(); ++i) gen->ids.Set(adds[i].id, adds[i].external_id);
    gen->live.fetch_add(adds.size(), std::memory_order_relaxed);
    gen->live.fetch_sub(killed.size(), std::memory_order_relaxed);
    gen->visible.store(base + added.size(), std::memory_order_release);
  }
  //    (c) The switch: the new state names the new space, file and snapshot
  //        at once.
  absl::flat_hash_map<uint64_t, InternalId> by_external;
  by_external.reserve(gen->live.load());
  const uint64_t new_visible = gen->visible.load();
  for (uint64_t i = 0; i < new_visible; ++i) {
    if (!gen->ids.IsDead(static_cast<InternalId>(i))) {
      by_external[gen->ids.External(static_cast<InternalId>(i))] = static_cast<InternalId>(i);
    }
  }
  const std::string old_snapshot = snapshot_file_;
  const uint64_t old_snapshot_count = snapshot_count_;
  {
    absl::WriterMutexLock m(&map_mu_);
    std::swap(gen_, gen);  // `gen` is now the old generation
    by_external_ = std::move(by_external);
  }
  pending_space_ = 0;
  snapshot_file_ = indexed ? snapshot_name : "";
  snapshot_count_ = indexed ? n : 0;
  st = SaveStateLocked();
  if (!st.ok()) {
    // The old state still names the old files: go back to them.
    {
      absl::WriterMutexLock m(&map_mu_);
      std::swap(gen_, gen);
      absl::flat_hash_map<uint64_t, InternalId> back;
      for (uint64_t i = 0; i < gen_->visible.load(); ++i) {
        if (!gen_->ids.IsDead(static_cast<InternalId>(i))) {
          back[gen_->ids.External(static_cast<InternalId>(i))] = static_cast<InternalId>(i);
        }
      }
      by_external_ = std::move(back);
    }
    snapshot_file_ = old_snapshot;
    snapshot_count_ = old_snapshot_count;
    pending_space_ = space;
    return undo(st);
  }
  old->drop_records_on_release = metadata_;  // see Generation
  std::error_code ec;
  fs::remove(fs::path(dir_) / old->vectors_file, ec);
  if (!old_snapshot.empty()) fs::remove(fs::path(dir_) / old_snapshot, ec);
  index_state_ = Current()->engine->index() != nullptr ? IndexState::kReady : IndexState::kNone;
  ZOOM_LOG(INFO, "collection ", config_.name, ": compacted ", now_visible, " -> ",
           Current()->visible.load(), " records in ", absl::SixDigits(sw.ElapsedMicros() / 1e6),
           " s (", added.size(), " added and ", killed.size(),
           " removed during it, applied at the switch)");
  return absl::OkStatus();
}

bool Collection::NeedsCompaction() const {
  if (options_.auto_compact_dead_ratio <= 0 || dropped_ || building_.load()) return false;
  if (!MaintenanceDue()) return false;  // a failed one waits for its backoff
  std::shared_ptr<Generation> gen = Current();
  const uint64_t stored = gen->engine->size();
  const uint64_t live = gen->live.load();
  const uint64_t dead = stored - std::min(stored, live);
  return dead >= options_.auto_compact_min_dead &&
         static_cast<double>(dead) >= options_.auto_compact_dead_ratio * static_cast<double>(stored);
}

// ---- Snapshots ---------------------------------------------------------------

namespace {

constexpr uint32_t kSnapshotManifestVersion = 1;

absl::Status FsyncPath(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot open ", path, " to sync it"));
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return absl::InternalError(absl::StrCat("cannot sync ", path));
  return absl::OkStatus();
}

constexpr auto PutLe = PutLittleEndian;
constexpr auto GetLe = GetLittleEndian;

}  // namespace

absl::StatusOr<Collection::SnapshotStats> Collection::WriteSnapshot(const std::string& path) const {
  // 1. The point of the snapshot, under the write lock (briefly).
  std::shared_ptr<Generation> gen;
  uint64_t records = 0, snapshot_count = 0;
  std::vector<std::pair<InternalId, uint64_t>> live;
  std::unique_ptr<storage::MetadataSnapshot> meta;
  std::string index_link;
  {
    absl::MutexLock w(&write_mu_);
    if (dropped_) {
      return absl::NotFoundError(absl::StrCat("collection '", config_.name, "' was dropped"));
    }
    gen = Current();
    records = gen->visible.load();
    live.reserve(gen->live.load());
    for (uint64_t i = 0; i < records; ++i) {
      const InternalId id = static_cast<InternalId>(i);
      if (!gen->ids.IsDead(id)) live.emplace_back(id, gen->ids.External(id));
    }
    meta = metadata_->TakeSnapshot();
    if (!snapshot_file_.empty()) {
      // A hard link keeps the index file as it is now, whatever replaces it.
      static std::atomic<uint64_t> links{0};
      index_link = (fs::path(dir_) / absl::StrCat(".snapshot-link-", links++, "-", snapshot_file_))
                       .string();
      std::error_code ec;
      fs::remove(index_link, ec);
      fs::create_hard_link(fs::path(dir_) / snapshot_file_, index_link, ec);
      if (ec) {
        return absl::InternalError(absl::StrCat("cannot link the index snapshot: ", ec.message()));
      }
      snapshot_count = std::min<uint64_t>(snapshot_count_, records);
    }
  }
  auto unlink = [&] {
    if (!index_link.empty()) {
      std::error_code ec;
      fs::remove(index_link, ec);
    }
  };
  absl::Cleanup unlink_on_return = unlink;
  absl::Status st;
  SnapshotStats stats;
  {
    // 2. The copy, without the lock.
    ZOOM_ASSIGN_OR_RETURN(auto writer, storage::ArchiveWriter::Create(path));
    const storage::VectorStore& store = gen->engine->store();
    st = writer->Add("manifest",
                     absl::StrCat("format=", kSnapshotManifestVersion, "\ncollection=", config_.name,
                                  "\nrecords=", records, "\npoints=", live.size(),
                                  "\nrecord_bytes=", store.record_bytes(),
                                  "\nsnapshot_count=", index_link.empty() ? 0 : snapshot_count,
                                  "\nindex=", index_link.empty() ? 0 : 1,
                                  "\ncreated_unix_ms=", absl::ToUnixMillis(absl::Now()), "\n"));
    if (st.ok()) st = writer->Add("config", config_.Encode());
    // The vector records [0, records): dead ones too, so the index's ids
    // stay the records' positions.
    const size_t rb = store.record_bytes();
    if (st.ok()) st = writer->Begin("vectors", records * rb);
    std::vector<uint8_t> raw;
    std::vector<InternalId> ids;
    for (uint64_t first = 0; first < records && st.ok(); first += 4096) {
      const uint64_t m = std::min<uint64_t>(4096, records - first);
      ids.resize(m);
      for (uint64_t i = 0; i < m; ++i) ids[i] = static_cast<InternalId>(first + i);
      raw.resize(m * rb);
      st = store.ReadRaw(ids, raw.data());
      if (st.ok()) st = writer->Append(raw.data(), raw.size());
    }
    if (st.ok()) st = writer->End();
    // The records with their payloads, as of the snapshot's moment.
    std::string rec;
    std::vector<std::string> payloads;
    std::vector<InternalId> chunk_ids;
    uint64_t rec_bytes = 0;
    // Sizes first (the entry is announced with its size): payload sizes
    // as of the snapshot.
    std::vector<uint32_t> payload_sizes(live.size());
    for (size_t first = 0; first < live.size() && st.ok(); first += 256) {
      const size_t m = std::min<size_t>(256, live.size() - first);
      chunk_ids.resize(m);
      for (size_t i = 0; i < m; ++i) chunk_ids[i] = live[first + i].first;
      st = metadata_->GetPayloads(gen->space, chunk_ids, &payloads, meta.get());
      for (size_t i = 0; i < m && st.ok(); ++i) {
        payload_sizes[first + i] = static_cast<uint32_t>(payloads[i].size());
        rec_bytes += 16 + payloads[i].size();
      }
    }
    if (st.ok()) st = writer->Begin("records", rec_bytes);
    for (size_t first = 0; first < live.size() && st.ok(); first += 256) {
      const size_t m = std::min<size_t>(256, live.size() - first);
      chunk_ids.resize(m);
      for (size_t i = 0; i < m; ++i) chunk_ids[i] = live[first + i].first;
      st = metadata_->GetPayloads(gen->space, chunk_ids, &payloads, meta.get());
      rec.clear();
      for (size_t i = 0; i < m && st.ok(); ++i) {
        PutLe(&rec, live[first + i].first, 4);
        PutLe(&rec, live[first + i].second, 8);
        PutLe(&rec, payloads[i].size(), 4);
        rec += payloads[i];
      }
      if (st.ok()) st = writer->Append(rec.data(), rec.size());
    }
    if (st.ok()) st = writer->End();
    if (st.ok() && !index_link.empty()) {
      std::error_code ec;
      const uint64_t size = fs::file_size(index_link, ec);
      std::ifstream in(index_link, std::ios::binary);
      if (ec || !in) {
        st = absl::InternalError("cannot read the index snapshot");
      } else {
        st = writer->Begin("index", size);
        std::vector<char> buf(1 << 20);
        for (uint64_t left = size; left > 0 && st.ok();) {
          const size_t n = static_cast<size_t>(std::min<uint64_t>(left, buf.size()));
          if (!in.read(buf.data(), static_cast<std::streamsize>(n))) {
            st = absl::InternalError("cannot read the index snapshot");
            break;
          }
          st = writer->Append(buf.data(), n);
          left -= n;
        }
        if (st.ok()) st = writer->End();
      }
    }
    if (st.ok()) st = writer->Finish();
    if (st.ok()) {
      stats.records = records;
      stats.points = live.size();
      stats.bytes = writer->bytes();
      stats.sha256 = writer->file_sha256();
    }
  }
  if (!st.ok()) return st;
  return stats;
}

absl::StatusOr<std::unique_ptr<Collection>> Collection::Restore(
    const std::string& dir, storage::MetadataStore* metadata, uint32_t id,
    const CollectionConfig& config, const storage::ArchiveReader& archive,
    const CollectionOptions& options) {
  auto bad = [](const std::string& why) {
    return absl::DataLossError(absl::StrCat("the snapshot does not fit together: ", why));
  };
  ZOOM_ASSIGN_OR_RETURN(std::string manifest_text, archive.Read("manifest", 1 << 16));
  ZOOM_ASSIGN_OR_RETURN(auto manifest, ParseKeyValues(manifest_text, "snapshot manifest"));
  uint32_t format = 0;
  uint64_t records = 0, points = 0, record_bytes = 0, snapshot_count = 0, has_index = 0;
  ZOOM_RETURN_IF_ERROR(GetNumber(manifest, "format", &format));
  if (format > kSnapshotManifestVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("snapshot manifest version ", format, " is newer than this zoomd reads"));
  }
  ZOOM_RETURN_IF_ERROR(GetNumber(manifest, "records", &records));
  ZOOM_RETURN_IF_ERROR(GetNumber(manifest, "points", &points));
  ZOOM_RETURN_IF_ERROR(GetNumber(manifest, "record_bytes", &record_bytes));
  ZOOM_RETURN_IF_ERROR(GetNumber(manifest, "snapshot_count", &snapshot_count));
  ZOOM_RETURN_IF_ERROR(GetNumber(manifest, "index", &has_index));
  const storage::ArchiveReader::Entry* vectors = archive.Find("vectors");
  const storage::ArchiveReader::Entry* recs = archive.Find("records");
  const storage::ArchiveReader::Entry* index = archive.Find("index");
  const uint64_t want_rb = uint64_t{config.dim} * storage::DTypeSize(config.dtype);
  if (vectors == nullptr || recs == nullptr) return bad("entries are missing");
  if (record_bytes != want_rb || vectors->size != records * record_bytes) {
    return bad("the vector records do not match the config");
  }
  if ((has_index != 0) != (index != nullptr) || snapshot_count > records) {
    return bad("the index entry does not match the manifest");
  }
  if (records > (uint64_t{1} << 32) - 1) return bad("too many records");
  std::error_code ec;
  if (!fs::create_directories(dir, ec) || ec) {
    return absl::InternalError(absl::StrCat("cannot create the collection directory: ",
                                            ec ? ec.message() : "it exists"));
  }
  const std::string vectors_file = "vectors-1.zvec";
  const std::string index_file = index != nullptr ? "index-2.zidx" : "";
  {
    storage::VectorStoreOptions wopts = options.store;
    wopts.sync_on_append = false;
    ZOOM_ASSIGN_OR_RETURN(auto store, storage::VectorStore::Create(
                                          (fs::path(dir) / vectors_file).string(), config.dim,
                                          config.dtype, wopts));
    const size_t chunk_records = std::max<size_t>(1, (4 << 20) / record_bytes);
    ZOOM_RETURN_IF_ERROR(archive.ReadChunks(
        *vectors, chunk_records * record_bytes,
        [&](const char* p, size_t n) { return store->Append(p, n / record_bytes); }));
    ZOOM_RETURN_IF_ERROR(store->Sync());
  }
  // The records: parsed as they stream, committed in batches.
  {
    std::string pending;
    std::vector<storage::RecordWrite> writes;
    std::vector<std::string> payload_store;
    uint64_t seen = 0;
    InternalId last = 0;
    auto flush = [&]() -> absl::Status {
      if (writes.empty()) return absl::OkStatus();
      absl::Status st = metadata->Commit(id, writes, {});
      writes.clear();
      payload_store.clear();
      return st;
    };
    ZOOM_RETURN_IF_ERROR(archive.ReadChunks(*recs, 1 << 20, [&](const char* p, size_t n) {
      pending.append(p, n);
      size_t pos = 0;
      payload_store.reserve(payload_store.size() + 4096);
      while (pending.size() - pos >= 16) {
        const uint32_t len = static_cast<uint32_t>(GetLe(pending.data() + pos + 12, 4));
        if (pending.size() - pos < 16 + size_t{len}) break;
        const InternalId rid = static_cast<InternalId>(GetLe(pending.data() + pos, 4));
        const uint64_t ext = GetLe(pending.data() + pos + 4, 8);
        if (rid >= records || (seen > 0 && rid <= last)) {
          return bad("a record is out of order or past the vectors");
        }
        last = rid;
        ++seen;
        payload_store.emplace_back(pending.data() + pos + 16, len);
        pos += 16 + len;
        writes.push_back({rid, ext, {}});
        if (writes.size() >= 4096) {
          for (size_t i = 0; i < writes.size(); ++i) writes[i].payload = payload_store[i];
          ZOOM_RETURN_IF_ERROR(flush());
        }
      }
      for (size_t i = 0; i < writes.size(); ++i) writes[i].payload = payload_store[i];
      pending.erase(0, pos);
      return absl::OkStatus();
    }));
    if (!pending.empty()) return bad("the records entry ends inside a record");
    for (size_t i = 0; i < writes.size(); ++i) writes[i].payload = payload_store[i];
    ZOOM_RETURN_IF_ERROR(flush());
    if (seen != points) return bad("the record count differs from the manifest's");
  }
  if (index != nullptr) {
    const std::string path = (fs::path(dir) / index_file).string();
    {
      std::ofstream out(path, std::ios::binary | std::ios::trunc);
      ZOOM_RETURN_IF_ERROR(archive.ReadChunks(*index, 1 << 20, [&](const char* p, size_t n) {
        out.write(p, static_cast<std::streamsize>(n));
        return out ? absl::OkStatus() : absl::ResourceExhaustedError("cannot write the index");
      }));
      out.flush();
      if (!out) return absl::ResourceExhaustedError("cannot write the index snapshot");
    }
    ZOOM_RETURN_IF_ERROR(FsyncPath(path));
  }
  const std::string state =
      StateText(id, vectors_file, index_file, index != nullptr ? snapshot_count : 0, 3, 0);
  ZOOM_RETURN_IF_ERROR(metadata->PutState(id, state));
  storage::CollectionRecord record;
  record.name = config.name;
  record.id = id;
  record.config = config.Encode();
  record.state = state;
  return Open(dir, metadata, record, options);
}

// ---- Info --------------------------------------------------------------------

CollectionInfo Collection::Info() const {
  CollectionInfo info;
  std::shared_ptr<Generation> gen = Current();
  info.config = config_;
  info.points = gen->live.load();
  info.stored_records = gen->engine->size();
  info.deleted_records = info.stored_records - std::min(info.stored_records, info.points);
  info.index_state = index_state_.load();
  const index::VectorIndex* idx = gen->engine->index();
  info.indexed_points = idx ? idx->size() : 0;
  info.resident_bytes = (idx ? idx->ResidentBytes() : 0) + gen->engine->CacheBytes() +
                        gen->ids.Bytes(info.stored_records) + info.points * 16;
  info.disk_bytes = gen->engine->store().file_bytes();
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    // (not a snapshot's hard link: ".snapshot-link-*")
    if (entry.path().extension() == ".zidx" &&
        entry.path().filename().string().rfind('.', 0) != 0) {
      info.disk_bytes += entry.file_size(ec);
    }
  }
  info.build_progress = building_.load() ? build_progress_.load() : 0;
  absl::MutexLock b(&build_mu_);
  info.index_error = std::string(build_status_.message());
  info.compaction_error = std::string(compaction_status_.message());
  info.maintenance_failures = maintenance_failures_;
  info.maintenance_retry_at = maintenance_retry_at_;
  return info;
}

}  // namespace zoom::server
