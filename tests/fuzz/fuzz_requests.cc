// libFuzzer targets for what a client sends:
//   requests  bytes -> one of the request messages (the first byte picks
//             which) -> the same validation and engine path as the RPC, in
//             process (VectorSearchService's conversion and limits, the
//             Collection, the Decoder), no network;
//   models    bytes -> a model directory (meta.json, W.f32 or W.f16, b.f32,
//             vocab.txt) -> ReadModelDir, as LoadModel reads it;
//   filter    bytes -> a v1::Filter -> FilterFromProto (the RPCs' check),
//             and when it passes: evaluated by the payload indexes over a
//             fixed set of 256 points, which must agree with the reference
//             (Matches) on every point (a disagreement aborts).
#include <grpcpp/server_context.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <cstdio>
#include <random>
#include <string>

#include "common/confined_dir.h"
#include "common/logging.h"
#include "server/engine/database.h"
#include "server/engine/decoder_engine.h"
#include "server/engine/filter.h"
#include "server/engine/payload_index.h"
#include "server/api/payload_convert.h"
#include "server/grpc/decoder_service.h"
#include "server/api/local_backend.h"
#include "server/grpc/vector_search_service.h"
#include "server/grpc/worker_pool.h"
#include "tests/fuzz/fuzz_util.h"
#include "zoom/v1/decoder.pb.h"
#include "zoom/v1/zoom.pb.h"

namespace zoom::fuzz {
namespace {

constexpr uint32_t kDim = 4;

struct World {
  std::unique_ptr<server::Database> db;
  std::unique_ptr<server::WorkerPool> pool;
  std::unique_ptr<server::api::LocalBackend> backend;
  std::unique_ptr<server::VectorSearchService> service;
  std::unique_ptr<server::DecoderEngine> decoder;
  std::unique_ptr<server::DecoderService> decoder_service;
  uint64_t upserts = 0;
};

void WriteModel(const std::string& dir, uint32_t vocab) {
  std::filesystem::create_directories(dir);
  std::mt19937 rng(1);
  std::normal_distribution<float> g;
  std::vector<float> w(vocab * kDim), b(vocab);
  for (float& x : w) x = g(rng);
  for (float& x : b) x = g(rng);
  std::ofstream(dir + "/W.f32", std::ios::binary)
      .write(reinterpret_cast<const char*>(w.data()), w.size() * 4);
  std::ofstream(dir + "/b.f32", std::ios::binary)
      .write(reinterpret_cast<const char*>(b.data()), b.size() * 4);
  std::ofstream vocab_out(dir + "/vocab.txt");
  for (uint32_t i = 0; i < vocab; ++i) vocab_out << "w" << i << "\n";
  std::ofstream(dir + "/meta.json") << "{\"vocab_size\": " << vocab << ", \"dim\": " << kDim
                                    << "}\n";
}

void Reset(World& w) {
  for (const char* name : {"l2", "cos", "u8"}) (void)w.db->DropCollection(name);
  for (auto [name, metric, dtype] :
       {std::tuple{"l2", Metric::kL2, storage::DType::kFloat32},
        std::tuple{"cos", Metric::kCosine, storage::DType::kFloat32},
        std::tuple{"u8", Metric::kInnerProduct, storage::DType::kUint8}}) {
    server::CollectionConfig c;
    c.name = name;
    c.dim = kDim;
    c.metric = metric;
    c.dtype = dtype;
    auto col = w.db->CreateCollection(c);
    if (!col.ok()) std::abort();
    std::vector<server::PointRef> points;
    std::vector<float> v(300 * kDim);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i * 37) % 11 + 1);
    for (uint64_t i = 0; i < 300; ++i) points.push_back({i, v.data() + i * kDim, "p"});
    if (!(*col)->Upsert(points).ok()) std::abort();
    if (std::string_view(name) != "u8") {
      if (!(*col)->maintenance().StartBuild().ok() || !(*col)->maintenance().WaitForBuild().ok()) {
        std::abort();
      }
    }
  }
  w.upserts = 0;
}

World& TheWorld() {
  static World* w = [] {
    auto* world = new World();
    server::DatabaseOptions o;
    o.data_dir = ScratchDir() + "/db";
    o.collection.store.reader.backend = storage::IoBackend::kPread;
    o.collection.store.reader.direct_io = false;
    o.collection.auto_build_min_points = 0;
    o.collection.build_threads = 1;
    auto db = server::Database::Open(o);
    if (!db.ok()) std::abort();
    world->db = std::move(*db);
    world->pool = std::make_unique<server::WorkerPool>(1);
    world->backend =
        std::make_unique<server::api::LocalBackend>(world->db.get(), server::ServiceLimits());
    world->service = std::make_unique<server::VectorSearchService>(
        world->backend.get(), nullptr, world->pool.get(), server::ServiceLimits());
    const std::string models = ScratchDir() + "/models";
    WriteModel(models + "/lm", 64);
    server::DecoderOptions d;
    d.models_dir = models;
    d.build_threads = 1;
    world->decoder = std::make_unique<server::DecoderEngine>(d);
    auto m = world->decoder->Load("lm", "lm", index::FgdOptions());
    if (!m.ok() || !world->decoder->Wait(*m).ok()) std::abort();
    world->decoder_service = std::make_unique<server::DecoderService>(
        world->decoder.get(), nullptr, world->pool.get());
    Reset(*world);
    return world;
  }();
  return *w;
}

void WriteRequestSeeds() {
  if (std::getenv("ZOOM_FUZZ_WRITE_SEEDS") == nullptr) return;
  auto seed = [](const std::string& name, char type, const google::protobuf::Message& m) {
    std::string bytes(1, type);
    m.AppendToString(&bytes);
    MaybeWriteSeed(name, bytes);
  };
  v1::UpsertRequest u;
  u.set_collection("l2");
  for (int i = 0; i < 3; ++i) {
    v1::Point* p = u.add_points();
    p->set_id(1000 + i);
    for (uint32_t j = 0; j < kDim; ++j) p->add_vector(float(i + j));
    p->set_payload("x");
  }
  seed("upsert", 0, u);
  v1::SearchRequest s;
  s.set_collection("l2");
  for (uint32_t j = 0; j < kDim; ++j) s.add_vector(1.0f + j);
  s.set_k(5);
  s.set_with_payload(true);
  seed("search", 1, s);
  {
    v1::SearchRequest fs = s;
    auto* c = fs.mutable_filter()->add_must();
    c->set_key("tag");
    c->mutable_match()->mutable_value()->set_string_value("a");
    seed("search_filter", 1, fs);
  }
  s.set_collection("cos");
  s.set_exact(true);
  s.set_with_vectors(true);
  seed("search_exact", 1, s);
  v1::GetRequest g;
  g.set_collection("l2");
  g.add_ids(1);
  g.add_ids(1);
  g.add_ids(7);
  g.set_with_payload(true);
  g.set_with_vectors(true);
  seed("get", 2, g);
  v1::DeleteRequest del;
  del.set_collection("u8");
  del.add_ids(3);
  seed("delete", 3, del);
  v1::CollectionSpec spec;
  spec.set_name("made");
  spec.set_dim(8);
  spec.set_metric(v1::COSINE);
  spec.mutable_index()->set_nlist(32);
  v1::CreateCollectionRequest cc;
  *cc.mutable_spec() = spec;
  seed("create", 4, cc);
  v1::TopKRequest t;
  t.set_model("lm");
  t.set_k(3);
  t.set_return_words(true);
  t.set_return_probs(true);
  for (uint32_t j = 0; j < kDim; ++j) t.add_contexts()->add_h(0.5f * j);
  seed("topk", 5, t);
  t.set_exact(true);
  seed("topk_exact", 5, t);
  v1::SearchBatchRequest b;
  b.set_collection("l2");
  *b.add_queries() = s;
  seed("batch", 6, b);
}

void FuzzRequest(const uint8_t* data, size_t size) {
  if (size < 1) return;
  World& w = TheWorld();
  const char* bytes = reinterpret_cast<const char*>(data) + 1;
  const int len = static_cast<int>(size - 1);
  switch (data[0] % 7) {
    case 0: {
      v1::UpsertRequest r;
      if (!r.ParseFromArray(bytes, len)) return;
      server::api::WriteAnswer a;
      (void)w.service->ApplyPoints(server::api::Call(), r.collection(), r.points(),
                                   r.write_concern(), &a);
      w.upserts += a.count;
      break;
    }
    case 1: {
      v1::SearchRequest r;
      if (!r.ParseFromArray(bytes, len)) return;
      v1::SearchResponse resp;
      (void)w.service->AnswerSearch(r, &resp);
      break;
    }
    case 2: {
      v1::GetRequest r;
      if (!r.ParseFromArray(bytes, len)) return;
      v1::GetResponse resp;
      (void)w.service->AnswerGet(r, &resp);
      break;
    }
    case 3: {
      v1::DeleteRequest r;
      if (!r.ParseFromArray(bytes, len) || r.ids().empty() || r.ids_size() > 100000) return;
      auto c = w.db->GetCollection(r.collection());
      if (c.ok()) (void)(*c)->Delete(r.ids());
      break;
    }
    case 4: {
      v1::CreateCollectionRequest r;
      if (!r.ParseFromArray(bytes, len)) return;
      auto config = server::FromProto(r.spec());
      if (!config.ok()) return;
      config->ApplyDefaults();
      (void)config->Validate(4096, uint64_t{1} << 30);  // the create path's checks, without the disk
      break;
    }
    case 5: {
      v1::TopKRequest r;
      if (!r.ParseFromArray(bytes, len)) return;
      v1::TopKResponse resp;
      grpc::ServerContext sctx;
      (void)w.decoder_service->Decode(r, server::CallContext(), sctx, &resp);
      break;
    }
    case 6: {
      v1::SearchBatchRequest r;
      if (!r.ParseFromArray(bytes, len) || r.queries_size() > 64) return;
      for (v1::SearchRequest q : r.queries()) {
        q.set_collection(r.collection());
        v1::SearchResponse resp;
        (void)w.service->AnswerSearch(q, &resp);
      }
      break;
    }
  }
  if (w.upserts > 20000) Reset(w);  // bounded growth
}

// 256 points with every field shape (missing, null, scalars of each
// type, lists, empty lists), indexed by one index of each type.
struct FilterWorld {
  server::IdTracker ids;
  server::PayloadIndex index;
  std::vector<server::PayloadFields> fields;
  std::vector<uint64_t> ext;
};

FilterWorld& TheFilterWorld() {
  static FilterWorld* w = [] {
    auto* fw = new FilterWorld();
    constexpr uint32_t kN = 256;
    fw->index.AddField("tag", server::FieldIndexType::kKeyword, true);
    fw->index.AddField("n", server::FieldIndexType::kInteger, true);
    fw->index.AddField("x", server::FieldIndexType::kFloat, true);
    fw->index.AddField("b", server::FieldIndexType::kBool, true);
    fw->index.AddField("at", server::FieldIndexType::kGeo, true);
    fw->ids.Reserve(kN);
    std::mt19937 rng(7);
    using server::FieldValue;
    for (uint32_t i = 0; i < kN; ++i) {
      server::PayloadFields f;
      const auto tag = [&] { return std::string(1, static_cast<char>('a' + rng() % 4)); };
      switch (i % 6) {
        case 0: break;
        case 1: f["tag"] = FieldValue::Null(); break;
        case 2: f["tag"] = FieldValue::List({tag(), tag()}); break;
        case 3: f["tag"] = FieldValue::List({}); break;
        case 4: f["tag"] = FieldValue::Of(int64_t{3}); break;
        default: f["tag"] = FieldValue::Of(tag()); break;
      }
      if (i % 5 != 0) {
        f["n"] = i % 7 == 0 ? FieldValue::Of(0.5 * (rng() % 20))
                            : FieldValue::Of(static_cast<int64_t>(rng() % 20) - 5);
      }
      if (i % 3 != 0) f["x"] = FieldValue::Of(static_cast<double>(rng() % 1000) / 10);
      if (i % 2 == 0) f["b"] = FieldValue::Of(rng() % 2 == 0);
      if (i % 4 != 1) {
        f["at"] = FieldValue::Of(server::GeoPoint{static_cast<double>(rng() % 180) - 90,
                                                  static_cast<double>(rng() % 360) - 180});
      }
      fw->ext.push_back(i * 3);
      fw->ids.Set(i, i * 3);
      fw->index.Update(i, nullptr, &f);
      fw->fields.push_back(std::move(f));
    }
    for (uint32_t i = 0; i < kN; i += 17) fw->ids.Kill(i);
    fw->ids.Publish(kN);
    return fw;
  }();
  return *w;
}

void WriteFilterSeeds() {
  if (std::getenv("ZOOM_FUZZ_WRITE_SEEDS") == nullptr) return;
  v1::Filter f;
  auto* c = f.add_must();
  c->set_key("tag");
  c->mutable_match()->mutable_value()->set_string_value("a");
  c = f.add_must();
  c->set_key("n");
  c->mutable_range()->set_gte(-2);
  c->mutable_range()->set_lt(9);
  c = f.add_should();
  c->mutable_is_empty()->set_key("tag");
  c = f.add_should();
  c->set_key("at");
  c->mutable_geo_radius()->mutable_center()->set_lat(10);
  c->mutable_geo_radius()->set_radius(5e6);
  c = f.add_must_not();
  c->add_has_id(9);
  c = f.add_must_not();
  auto* nested = c->mutable_filter();
  auto* e = nested->add_must();
  e->set_key("tag");
  e->mutable_match()->mutable_except()->add_values()->set_string_value("b");
  auto* ms = f.mutable_min_should();
  ms->set_min_count(1);
  auto* m1 = ms->add_conditions();
  m1->set_key("b");
  m1->mutable_match()->set_boolean(true);
  auto* m2 = ms->add_conditions();
  m2->set_key("tag");
  m2->mutable_values_count()->set_gte(2);
  MaybeWriteSeed("filter", f.SerializeAsString());
}

void FuzzFilter(const uint8_t* data, size_t size) {
  v1::Filter proto;
  if (!proto.ParseFromArray(data, static_cast<int>(size))) return;
  server::Filter filter;
  if (!server::FilterFromProto(proto, &filter).ok()) return;
  FilterWorld& w = TheFilterWorld();
  server::MatchSet got;
  absl::Status st = w.index.Evaluate(filter, w.ids, w.fields.size(), &got);
  if (!st.ok()) {
    // Only a condition the index type cannot answer, or an unindexed field.
    if (st.code() != absl::StatusCode::kInvalidArgument &&
        st.code() != absl::StatusCode::kFailedPrecondition) {
      std::abort();
    }
    return;
  }
  for (uint32_t i = 0; i < w.fields.size(); ++i) {
    const bool want = w.ids.IsLive(i) && server::Matches(filter, w.ext[i], w.fields[i]);
    if (got.Contains(i) != want) {
      std::fprintf(stderr, "payload index and reference disagree on point %u\n", i);
      std::abort();
    }
  }
}

void FuzzModelDir(const uint8_t* data, size_t size) {
  static const std::string root = [] {
    std::filesystem::create_directories(ScratchDir() + "/models/m");
    if (std::getenv("ZOOM_FUZZ_WRITE_SEEDS") != nullptr) {
      std::vector<float> w(6 * 2, 0.5f), b(6, 0.1f);
      MaybeWriteSeed("model", Join({R"({"vocab_size": 6, "dim": 2})",
                                    {reinterpret_cast<const char*>(w.data()), w.size() * 4},
                                    {reinterpret_cast<const char*>(b.data()), b.size() * 4},
                                    "a\nb\nc\nd\ne\nf\n", "f32"}));
      MaybeWriteSeed("model_f16", Join({R"({"V": 2, "d": 1})", std::string("\x00\x3c\x00\xbc", 4),
                                        std::string(8, '\0'), "x\ny\n", "f16"}));
    }
    return ScratchDir() + "/models";
  }();
  Cursor in(data, size);
  const std::string dir = root + "/m";
  std::error_code ec;
  for (const char* f : {"meta.json", "W.f32", "W.f16", "b.f32", "vocab.txt"}) {
    std::filesystem::remove(dir + "/" + f, ec);
  }
  const std::string_view meta = in.Part(), w = in.Part(), b = in.Part(), vocab = in.Part();
  const std::string_view kind = in.Part();
  WriteScratch("models/m/meta.json", meta);
  WriteScratch(kind == "f16" ? "models/m/W.f16" : "models/m/W.f32", w);
  WriteScratch("models/m/b.f32", b);
  WriteScratch("models/m/vocab.txt", vocab);
  auto confined = ConfinedDir::Open(root);
  if (!confined.ok()) return;
  (void)server::ReadModelDir(*confined, "m");
}

}  // namespace
}  // namespace zoom::fuzz

namespace {
enum class Target { kRequests, kModels, kFilter };
Target g_target = Target::kRequests;
}  // namespace

// One binary for the three targets: the name it runs under picks it.
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  zoom::SetMinLogLevel(zoom::LogSeverity::kERROR);
  const std::string self = std::filesystem::path((*argv)[0]).filename().string();
  g_target = self == "fuzz_model_dir" ? Target::kModels
             : self == "fuzz_filter"  ? Target::kFilter
                                      : Target::kRequests;
  if (g_target == Target::kRequests) zoom::fuzz::WriteRequestSeeds();
  if (g_target == Target::kFilter) zoom::fuzz::WriteFilterSeeds();
  (void)argc;
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  switch (g_target) {
    case Target::kModels: zoom::fuzz::FuzzModelDir(data, size); break;
    case Target::kFilter: zoom::fuzz::FuzzFilter(data, size); break;
    case Target::kRequests: zoom::fuzz::FuzzRequest(data, size); break;
  }
  return 0;
}
