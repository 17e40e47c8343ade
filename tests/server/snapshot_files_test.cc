// The cluster snapshot's manifest (format 1, golden) and the restore by
// replay (api::RestoreByReplay) a standalone runs for a cluster's archive:
// every shard's points back under one collection, a corrupt shard refused
// before the target changes.
#include "server/api/snapshot_files.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "gtest/gtest.h"
#include "server/api/local_backend.h"
#include "server/engine/database.h"
#include "storage/snapshot_archive.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_env.h"

namespace zoom::server::api {
namespace {

using ::zoom::testing::StatusIs;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

ClusterSnapshotManifest Example() {
  ClusterSnapshotManifest m;
  m.collection = "docs";
  m.shards = 2;
  m.replicas = 3;
  m.created_unix_ms = 1796601600000;
  m.parts.resize(2);
  m.parts[0] = {41, "node0", 10, 12, 4096, std::string(64, 'a')};
  m.parts[1] = {7, "node2", 5, 5, 2048, std::string(64, 'b')};
  return m;
}

// tests/data/golden/cluster_snapshot_manifest_v1.txt is Example() as
// version 1 writes it: it must keep decoding to the same manifest, and
// encoding must not change while the version stays.
TEST(ClusterSnapshotManifestTest, GoldenVersion1) {
  const std::string golden = ReadAll(
      zoom::testing::TestDataPath("golden/cluster_snapshot_manifest_v1.txt"));
  ASSERT_FALSE(golden.empty());
  EXPECT_EQ(Example().Encode(), golden);
  ASSERT_OK_AND_ASSIGN(ClusterSnapshotManifest m,
                       ClusterSnapshotManifest::Decode(golden));
  EXPECT_EQ(m.collection, "docs");
  EXPECT_EQ(m.shards, 2u);
  EXPECT_EQ(m.replicas, 3u);
  EXPECT_EQ(m.points(), 15u);
  EXPECT_EQ(m.records(), 17u);
  ASSERT_EQ(m.parts.size(), 2u);
  EXPECT_EQ(m.parts[1].sequence, 7u);
  EXPECT_EQ(m.parts[1].node, "node2");
  EXPECT_EQ(m.parts[0].sha256, std::string(64, 'a'));
}

TEST(ClusterSnapshotManifestTest, RefusesWhatItCannotRead) {
  std::string text = Example().Encode();
  EXPECT_THAT(ClusterSnapshotManifest::Decode("version=1\nshards=1\n").status(),
              StatusIs(absl::StatusCode::kDataLoss));
  std::string newer = text;
  newer.replace(newer.find("version=1"), 9, "version=2");
  EXPECT_THAT(ClusterSnapshotManifest::Decode(newer).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  std::string missing = text.substr(0, text.find("shard.1."));
  EXPECT_THAT(ClusterSnapshotManifest::Decode(missing).status(),
              StatusIs(absl::StatusCode::kDataLoss));
  std::string many = text;
  many.replace(many.find("shards=2"), 8, "shards=99999999");
  EXPECT_THAT(ClusterSnapshotManifest::Decode(many).status(),
              StatusIs(absl::StatusCode::kDataLoss));
}

class ReplayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DatabaseOptions o;
    o.data_dir = dir_.File("db");
    o.sync_always = false;
    ASSERT_OK_AND_ASSIGN(db_, Database::Open(o));
    backend_ = std::make_unique<LocalBackend>(db_.get(), ServiceLimits{});
  }

  // Collection `name` holding ids [from, from + n) with payloads; its
  // snapshot's archive path.
  std::string Shard(const std::string& name, uint64_t from, int n) {
    CreateCollectionRequest req;
    req.config.name = name;
    req.config.dim = 4;
    EXPECT_OK(backend_->CreateCollection(Call{}, req).status());
    UpsertRequest up;
    up.collection = name;
    for (int i = 0; i < n; ++i) {
      NewPoint p;
      p.id = from + i;
      p.vector = {float(from + i), 1, 2, 3};
      p.payload = absl::StrCat("p", from + i);
      up.points.push_back(p);
    }
    EXPECT_OK(backend_->Upsert(Call{}, up).status());
    auto info = db_->CreateSnapshot(name);
    EXPECT_OK(info.status());
    auto file = db_->SnapshotFile(name, info->name);
    EXPECT_OK(file.status());
    return file->first;
  }

  // A cluster archive of `shards` (the router's shape), at `path`.
  void ClusterArchive(const std::vector<std::string>& shards,
                      const std::string& path, bool corrupt_last = false) {
    ClusterSnapshotManifest m;
    m.collection = "docs";
    m.shards = static_cast<uint32_t>(shards.size());
    m.replicas = 1;
    m.parts.resize(shards.size());
    ASSERT_OK_AND_ASSIGN(auto w, storage::ArchiveWriter::Create(path));
    ASSERT_OK(w->Add(kClusterManifestEntry, m.Encode()));
    for (size_t k = 0; k < shards.size(); ++k) {
      std::string bytes = ReadAll(shards[k]);
      if (corrupt_last && k + 1 == shards.size())
        bytes[bytes.size() / 2] ^= 0x10;
      ASSERT_OK(w->Add(
          ClusterSnapshotManifest::EntryName(static_cast<uint32_t>(k)), bytes));
    }
    ASSERT_OK(w->Finish());
  }

  absl::StatusOr<CollectionDescription> Restore(const std::string& path,
                                                const std::string& target,
                                                bool overwrite) {
    const std::string rel = "up/x.zsnap";
    std::filesystem::create_directories(db_->snapshots_dir() + "/up");
    std::filesystem::copy_file(
        path, db_->snapshots_dir() + "/" + rel,
        std::filesystem::copy_options::overwrite_existing);
    ZOOM_ASSIGN_OR_RETURN(
        auto r, backend_->BeginRestore(Call{}, target, overwrite, rel));
    return r->Finish(Call{});
  }

  zoom::testing::TempDir dir_;
  std::unique_ptr<Database> db_;
  std::unique_ptr<LocalBackend> backend_;
};

TEST_F(ReplayTest, AClusterArchiveRestoresEveryShardsPointsIntoOneCollection) {
  const std::string s0 = Shard("s0", 0, 30), s1 = Shard("s1", 1000, 20);
  const std::string archive = dir_.File("cluster.zsnap");
  ClusterArchive({s0, s1}, archive);
  EXPECT_TRUE(IsClusterArchive(archive));
  EXPECT_FALSE(IsClusterArchive(s0));
  EXPECT_FALSE(IsClusterArchive(dir_.File("absent")));
  ASSERT_OK_AND_ASSIGN(CollectionDescription d, Restore(archive, "all", false));
  EXPECT_EQ(d.info.points, 50u);
  GetRequest get;
  get.collection = "all";
  get.ids = {3, 1019};
  get.with_vectors = get.with_payload = true;
  ASSERT_OK_AND_ASSIGN(std::vector<PointData> got, backend_->Get(Call{}, get));
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].vector, (std::vector<float>{3, 1, 2, 3}));
  EXPECT_EQ(got[0].payload, "p3");
  EXPECT_EQ(got[1].payload, "p1019");
  // Again: the collection exists.
  EXPECT_THAT(Restore(archive, "all", false).status(),
              StatusIs(absl::StatusCode::kAlreadyExists));
  ASSERT_OK_AND_ASSIGN(d, Restore(archive, "all", true));
  EXPECT_EQ(d.info.points, 50u);
  // No scratch is left behind.
  int left = 0;
  for (const auto& e : std::filesystem::directory_iterator(
           db_->snapshots_dir() + "/.incoming")) {
    (void)e;
    ++left;
  }
  EXPECT_EQ(left, 0);
}

TEST_F(ReplayTest, ACorruptShardIsRefusedBeforeTheTargetChanges) {
  const std::string s0 = Shard("s0", 0, 30), s1 = Shard("s1", 1000, 20);
  const std::string good = dir_.File("good.zsnap"),
                    bad = dir_.File("bad.zsnap");
  ClusterArchive({s0, s1}, good);
  ASSERT_OK(Restore(good, "kept", false).status());
  // The corruption is inside shard 1's own archive, re-wrapped with fresh
  // outer digests: only the inner verification finds it.
  ClusterArchive({s0, s1}, bad, /*corrupt_last=*/true);
  EXPECT_THAT(Restore(bad, "kept", true).status(),
              StatusIs(absl::StatusCode::kDataLoss));
  ASSERT_OK_AND_ASSIGN(CollectionDescription d,
                       backend_->GetCollection(Call{}, "kept"));
  EXPECT_EQ(d.info.points, 50u);
}

// An archive whose entries check but that is no collection's snapshot (a
// cluster archive nested as a shard, entries made by hand) is DATA_LOSS,
// not NOT_FOUND (which would say the source is missing).
TEST_F(ReplayTest, AnArchiveOfAnotherKindIsDataLoss) {
  const std::string s0 = Shard("s0", 0, 5);
  const std::string inner = dir_.File("inner.zsnap"), outer = dir_.File("outer.zsnap");
  ClusterArchive({s0}, inner);
  ClusterArchive({inner}, outer);  // its shard 0 is a cluster archive
  EXPECT_THAT(Restore(outer, "x", false).status(), StatusIs(absl::StatusCode::kDataLoss));
  const std::string hand = dir_.File("hand.zsnap");
  {
    ASSERT_OK_AND_ASSIGN(auto w, storage::ArchiveWriter::Create(hand));
    ASSERT_OK(w->Add("manifest", "anything=1\n"));
    ASSERT_OK(w->Finish());
  }
  EXPECT_THAT(Restore(hand, "y", false).status(), StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(backend_->GetCollection(Call{}, "x").status(),
              StatusIs(absl::StatusCode::kNotFound));
}

}  // namespace
}  // namespace zoom::server::api
