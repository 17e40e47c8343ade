// libFuzzer targets for the file formats zoomd reads: the vector store
// (header and records), index files, FGD graph files, TEXMEX .fvecs /
// .bvecs / .ivecs, the collection config text and snapshot archives (raw,
// and rebuilt around fuzzed entries so the restore path past the checksums
// is reached). One binary; the name it runs under picks the target.
#include <cstddef>
#include <cstdio>
#include <filesystem>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/logging.h"
#include "common/texmex.h"
#include "index/fgd_index.h"
#include "index/vector_index.h"
#include "server/engine/collection.h"
#include "server/engine/database.h"
#include "server/cluster/log_entry.h"
#include "server/engine/payload_fields.h"
#include "storage/snapshot_archive.h"
#include "storage/vector_store.h"
#include "tests/fuzz/fuzz_util.h"

namespace zoom::fuzz {
namespace {

storage::VectorStoreOptions PlainReads() {
  storage::VectorStoreOptions o;
  o.reader.backend = storage::IoBackend::kPread;
  o.reader.direct_io = false;  // tmpfs has no O_DIRECT
  return o;
}

void FuzzVectorStore(const uint8_t* data, size_t size) {
  const std::string path = WriteScratch("store.zvec", {reinterpret_cast<const char*>(data), size});
  auto store = storage::VectorStore::Open(path, PlainReads());
  if (!store.ok()) return;
  const uint64_t n = std::min<uint64_t>((*store)->count(), 8);
  std::vector<InternalId> ids;
  for (uint64_t i = 0; i < n; ++i) ids.push_back(static_cast<InternalId>(i));
  std::vector<float> out(ids.size() * (*store)->dim());
  (void)(*store)->ReadVectors(ids, out.data());
  (void)(*store)->VerifyData();
}

void FuzzIndexFile(const uint8_t* data, size_t size) {
  if (size < 1) return;
  const std::string path =
      WriteScratch("index.zidx", {reinterpret_cast<const char*>(data) + 1, size - 1});
  index::LoadIndexOptions opts;
  if (data[0] & 1) opts.compact_links = (data[0] & 2) != 0;
  auto idx = index::LoadIndex(path, opts);
  if (!idx.ok()) return;
  const uint32_t d = (*idx)->spec().dim;
  if (d == 0 || d > 4096) return;
  std::vector<float> q(d, 0.5f);
  index::IndexSearchParams p;
  p.ef = 16;
  p.nprobe = 4;
  std::vector<index::Neighbor> out;
  (void)(*idx)->Search(q.data(), 5, p, &out, nullptr);
}

void FuzzFgdFile(const uint8_t* data, size_t size) {
  const std::string path = WriteScratch("graph.zfgd", {reinterpret_cast<const char*>(data), size});
  auto idx = index::FgdIndex::Load(path);
  if (!idx.ok()) return;
  const uint32_t d = (*idx)->dim();
  if (d == 0 || d > 4096) return;
  std::vector<float> h(d, 0.25f);
  index::FgdSearchParams p;
  p.k = std::min<uint32_t>(5, (*idx)->vocab_size());
  std::vector<index::FgdResult> out;
  (void)(*idx)->Search(h.data(), 1, p, &out, nullptr);
}

void FuzzTexmex(const uint8_t* data, size_t size) {
  if (size < 1) return;
  static const char* kExt[] = {"fvecs", "bvecs", "ivecs"};
  const std::string path = WriteScratch(std::string("v.") + kExt[data[0] % 3],
                                        {reinterpret_cast<const char*>(data) + 1, size - 1});
  if (data[0] % 3 == 2) {
    (void)LoadIvecs(path, 64);
  } else {
    (void)LoadVecsAsFloat(path, 64);
  }
}

void FuzzConfig(const uint8_t* data, size_t size) {
  auto c = server::CollectionConfig::Decode({reinterpret_cast<const char*>(data), size});
  if (!c.ok()) return;
  (void)c->Validate(4096, uint64_t{1} << 30);
  (void)server::CollectionConfig::Decode(c->Encode());
}

server::Database* SnapshotDb() {
  static server::Database* db = [] {
    server::DatabaseOptions o;
    o.data_dir = ScratchDir() + "/db";
    o.collection.store = PlainReads();
    o.collection.auto_build_min_points = 0;
    o.collection.build_threads = 1;
    auto opened = server::Database::Open(o);
    if (!opened.ok()) std::abort();
    return opened->release();
  }();
  return db;
}

void FuzzSnapshot(const uint8_t* data, size_t size) {
  Cursor in(data, size);
  const uint8_t mode = in.Byte();
  std::string path;
  if (mode % 2 == 0) {
    // The archive as sent.
    path = WriteScratch("raw.zsnap", in.Rest());
  } else {
    // A well-formed archive around fuzzed entries: the checksums pass, the
    // restore's own parsing is what is exercised.
    path = ScratchDir() + "/built.zsnap";
    auto w = storage::ArchiveWriter::Create(path);
    if (!w.ok()) return;
    static const char* kNames[] = {"manifest", "config", "vectors", "records", "index", "fields"};
    for (const char* name : kNames) {
      const std::string_view part = in.Part();
      const bool optional = name == std::string_view("index") || name == std::string_view("fields");
      if (optional && part.empty()) continue;
      if (!(*w)->Add(name, part).ok()) return;
    }
    if (!(*w)->Finish().ok()) return;
  }
  server::Database* db = SnapshotDb();
  auto c = db->RestoreSnapshot(path, "restored", /*overwrite=*/true);
  if (c.ok()) {
    {
      const uint32_t d = (*c)->config().dim;
      std::vector<float> q(d, 1.0f);
      server::CollectionSearchParams p;
      p.engine.k = 3;
      server::QueryResult r;
      (void)(*c)->Search(q, p, &r);
    }
    c->reset();
    (void)db->DropCollection("restored");
  }
}

// Typed payload fields as stored: decoded, and when they decode, the
// encoding is canonical (re-encoding gives the same bytes) and validates.
void FuzzPayloadFields(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<server::PayloadFields> f = server::DecodeFields(bytes);
  if (!f.ok()) return;
  if (server::EncodeFields(*f) != bytes) std::abort();
  (void)server::ValidateFields(*f);
}

// A cluster log entry as a replica reads it from the stream: decoded, or
// refused; one that decodes encodes back to the same bytes.
void FuzzLogEntry(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<cluster::LogEntry> e = cluster::DecodeLogEntry(bytes);
  if (!e.ok()) return;
  if (cluster::EncodeLogEntry(*e) != bytes) std::abort();
}

}  // namespace
}  // namespace zoom::fuzz

namespace {
using Fn = void (*)(const uint8_t*, size_t);
Fn g_target = nullptr;
}  // namespace

// One binary for these targets: the name it is run under (a link per
// target, made by the build) picks the target.
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  zoom::SetMinLogLevel(zoom::LogSeverity::kERROR);
  using namespace zoom::fuzz;
  const std::string self = std::filesystem::path((*argv)[0]).filename().string();
  static const std::pair<const char*, Fn> kTargets[] = {
      {"fuzz_vector_store", FuzzVectorStore}, {"fuzz_index_file", FuzzIndexFile},
      {"fuzz_fgd_file", FuzzFgdFile},         {"fuzz_texmex", FuzzTexmex},
      {"fuzz_config", FuzzConfig},            {"fuzz_snapshot", FuzzSnapshot},
      {"fuzz_payload_fields", FuzzPayloadFields}, {"fuzz_log_entry", FuzzLogEntry}};
  for (const auto& [name, fn] : kTargets) {
    if (self == name) g_target = fn;
  }
  if (g_target == nullptr) {
    std::fprintf(stderr, "run this binary as one of its target names (fuzz_vector_store, ...)\n");
    std::abort();
  }
  (void)argc;
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  g_target(data, size);
  return 0;
}
