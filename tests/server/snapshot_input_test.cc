// Snapshots are untrusted input (trust, case 5), the engine's part: what a
// killed CreateSnapshot or upload staged is removed when the database
// opens (only those shapes; links removed as links), a download is
// confined to the snapshots directory like a restore's source, and a
// restore validates what it loads: an archive rewritten with its checksums
// recomputed (NaN, infinite or huge vectors, a config switched to cosine,
// fields an Upsert refuses, a garbage index) is DATA_LOSS naming the entry,
// and nothing is created.
#include <sys/stat.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/endian.h"
#include "server/engine/collection.h"
#include "server/engine/database.h"
#include "server/engine/payload_fields.h"
#include "storage/snapshot_archive.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_env.h"

namespace zoom::server {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using ::zoom::testing::StatusIs;
using ::zoom::testing::TempDir;

void Write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

std::string Read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(SnapshotInputTest, StagingLeftoversAreRemovedAtOpenAndNothingElse) {
  TempDir tmp, outside;
  DatabaseOptions options;
  options.data_dir = tmp.File("data");
  const fs::path snaps = fs::path(options.data_dir) / "snapshots";
  Write(snaps / "c" / "snap-1.zsnap.tmp", std::string(4096, 'x'));       // a killed create
  Write(snaps / ".incoming" / "upload-17-0.zsnap", std::string(4096, 'y'));  // a killed upload
  Write(snaps / "c" / "snap-2.zsnap", "kept");                           // a finished one
  Write(snaps / "c" / "snap-2.info", "kept");
  Write(snaps / "c" / "notes.tmp", "kept");                              // not our shape
  const fs::path secret = outside.File("secret.zsnap.tmp");
  Write(secret, "outside");
  fs::create_symlink(secret, snaps / "c" / "evil.zsnap.tmp");
  fs::create_symlink(secret, snaps / ".incoming" / "upload-evil");
  ASSERT_OK_AND_ASSIGN(auto db, Database::Open(options));
  EXPECT_FALSE(fs::exists(snaps / "c" / "snap-1.zsnap.tmp"));
  EXPECT_FALSE(fs::exists(snaps / ".incoming" / "upload-17-0.zsnap"));
  EXPECT_FALSE(fs::is_symlink(snaps / "c" / "evil.zsnap.tmp"));
  EXPECT_FALSE(fs::is_symlink(snaps / ".incoming" / "upload-evil"));
  EXPECT_EQ(Read(secret), "outside") << "a link's target is never touched";
  EXPECT_EQ(Read(snaps / "c" / "snap-2.zsnap"), "kept");
  EXPECT_EQ(Read(snaps / "c" / "notes.tmp"), "kept");
}

TEST(SnapshotInputTest, ADownloadIsConfinedToTheSnapshotsDirectory) {
  TempDir tmp, outside;
  DatabaseOptions options;
  options.data_dir = tmp.File("data");
  ASSERT_OK_AND_ASSIGN(auto db, Database::Open(options));
  const fs::path snaps = fs::path(options.data_dir) / "snapshots";
  const fs::path secret = outside.File("secret");
  Write(secret, "the server's private key");
  fs::create_directories(snaps / "s");
  fs::create_symlink(secret, snaps / "s" / "leak.zsnap");
  EXPECT_THAT(db->SnapshotFile("s", "leak").status(),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       AllOf(HasSubstr("outside the snapshots directory"),
                             Not(HasSubstr(secret.string())))));
  // A FIFO is not served either (nor opened in a way that could block).
  ASSERT_EQ(mkfifo((snaps / "s" / "pipe.zsnap").c_str(), 0600), 0);
  EXPECT_THAT(db->SnapshotFile("s", "pipe").status(), StatusIs(absl::StatusCode::kNotFound));
  // A link that stays inside is followed; a missing one is NotFound.
  Write(snaps / "s" / "real.zsnap", "archive");
  fs::create_symlink("real.zsnap", snaps / "s" / "alias.zsnap");
  ASSERT_OK_AND_ASSIGN(auto file, db->SnapshotFile("s", "alias"));
  EXPECT_EQ(file.second.bytes, 7u);
  EXPECT_THAT(db->SnapshotFile("s", "none").status(), StatusIs(absl::StatusCode::kNotFound));
}

// The archive at `from` with entry `name` replaced by edit(its bytes),
// every checksum recomputed, at `to`.
void Rewrite(const std::string& from, const std::string& to, const std::string& name,
             const std::function<void(std::string*)>& edit) {
  ASSERT_OK_AND_ASSIGN(auto in, storage::ArchiveReader::Open(from));
  ASSERT_OK_AND_ASSIGN(auto out, storage::ArchiveWriter::Create(to));
  bool found = false;
  for (const storage::ArchiveReader::Entry& e : in->entries()) {
    std::string data;
    ASSERT_OK(in->ReadChunks(e, 1 << 20, [&](const char* p, size_t n) {
      data.append(p, n);
      return absl::OkStatus();
    }));
    if (e.name == name) {
      edit(&data);
      found = true;
    }
    ASSERT_OK(out->Add(e.name, data));
  }
  ASSERT_TRUE(found) << name;
  ASSERT_OK(out->Finish());
}

TEST(SnapshotInputTest, ARestoreValidatesEveryRecordItLoads) {
  TempDir tmp;
  DatabaseOptions options;
  options.data_dir = tmp.File("data");
  options.collection.auto_build_min_points = 0;
  options.collection.build_threads = 1;
  ASSERT_OK_AND_ASSIGN(auto db, Database::Open(options));
  constexpr uint32_t kDim = 8, kN = 400;
  CollectionConfig config;
  config.name = "src";
  config.dim = kDim;
  config.metric = Metric::kL2;
  ASSERT_OK_AND_ASSIGN(auto c, db->CreateCollection(config));
  std::mt19937 rng(5);
  std::normal_distribution<float> g(0, 1);
  std::vector<float> x(kN * kDim);
  for (float& v : x) v = g(rng);
  std::vector<PayloadFields> fields(kN);
  std::vector<PointRef> refs;
  for (uint32_t i = 0; i < kN; ++i) {
    fields[i]["tag"] = FieldValue::Of(std::string(i % 2 ? "a" : "b"));
    refs.push_back({i, x.data() + i * kDim, "", &fields[i]});
  }
  ASSERT_OK(c->Upsert(refs));
  ASSERT_OK(c->maintenance().StartBuild());
  ASSERT_OK(c->maintenance().WaitForBuild());
  ASSERT_OK_AND_ASSIGN(SnapshotInfo info, db->CreateSnapshot("src"));
  ASSERT_OK_AND_ASSIGN(auto file, db->SnapshotFile("src", info.name));
  // The untouched archive restores (the rewrite itself changes nothing).
  const std::string same = tmp.File("same.zsnap");
  Rewrite(file.first, same, "config", [](std::string*) {});
  ASSERT_OK(db->RestoreSnapshot(same, "same", false).status());

  const auto set_float = [](std::string* d, size_t record, size_t j, float v) {
    std::memcpy(d->data() + (record * kDim + j) * sizeof(float), &v, sizeof(float));
  };
  // The first point's typed fields replaced (same id, new encoding).
  const auto set_fields = [](const PayloadFields& f) {
    return [f](std::string* d) {
      const uint32_t old_len = static_cast<uint32_t>(GetLittleEndian(d->data() + 8, 4));
      const std::string value = EncodeFields(f);
      std::string len;
      PutLittleEndian(&len, value.size(), 4);
      d->replace(8, 4 + old_len, len + value);
    };
  };
  PayloadFields off_globe, long_name, long_list, bad_utf8;
  off_globe["at"] = FieldValue::Of(GeoPoint{1000, 0});
  long_name[std::string(300, 'n')] = FieldValue::Of(int64_t{1});
  std::vector<FieldScalar> many(5000, FieldScalar(int64_t{1}));
  long_list["l"] = FieldValue::List(many);
  bad_utf8["s"] = FieldValue::Of(std::string("\xff\xfe bad"));
  struct Case {
    std::string what, entry;
    std::function<void(std::string*)> edit;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"a NaN component", "vectors",
       [&](std::string* d) { set_float(d, 5, 3, std::numeric_limits<float>::quiet_NaN()); },
       "vector record 5"},
      {"an infinite component", "vectors",
       [&](std::string* d) { set_float(d, 7, 0, std::numeric_limits<float>::infinity()); },
       "vector record 7"},
      {"a huge finite vector", "vectors", [&](std::string* d) { set_float(d, 9, 1, 3e30f); },
       "vector record 9"},
      {"the config switched to cosine", "config",
       [](std::string* d) {
         const size_t at = d->find("metric=l2");
         ASSERT_NE(at, std::string::npos);
         d->replace(at, 9, "metric=cosine");
       },
       "cosine collection stores unit vectors"},
      {"latitude 1000", "fields", set_fields(off_globe), "off the globe"},
      {"a 300-byte field name", "fields", set_fields(long_name), "bytes; at most"},
      {"a 5,000-element list", "fields", set_fields(long_list), "values; at most"},
      {"a string of invalid UTF-8", "fields", set_fields(bad_utf8), "not valid UTF-8"},
      {"a garbage index", "index",
       [](std::string* d) {
         for (size_t i = 0; i < d->size(); i += 7) (*d)[i] = static_cast<char>(i * 31);
       },
       "index does not load"},
  };
  int n = 0;
  for (const Case& k : cases) {
    SCOPED_TRACE(k.what);
    const std::string crafted = tmp.File("crafted" + std::to_string(n) + ".zsnap");
    Rewrite(file.first, crafted, k.entry, k.edit);
    const std::string target = "bad" + std::to_string(n++);
    EXPECT_THAT(db->RestoreSnapshot(crafted, target, false).status(),
                StatusIs(absl::StatusCode::kDataLoss, HasSubstr(k.says)));
    EXPECT_THAT(db->GetCollection(target).status(), StatusIs(absl::StatusCode::kNotFound));
  }
}

}  // namespace
}  // namespace zoom::server
