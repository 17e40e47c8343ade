// Damaged files at open (DatabaseOptions::quarantine_damaged): a standalone
// refuses to open what it holds the only copy of; a cluster node sets the
// damage aside (a collection, or the whole metadata store) and starts
// without it, to make its replicas again from peers.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/engine/collection.h"
#include "server/engine/database.h"
#include "tests/server/collection_test_util.h"
#include "tests/testing/status_matchers.h"

namespace zoom::server {
namespace {

namespace fs = std::filesystem;
using namespace collection_testing;  // NOLINT(build/namespaces)
using ::testing::HasSubstr;
using ::zoom::testing::StatusIs;

// DATA_DIR/.damaged-* directories under `root`.
int AsideDirs(const fs::path& root) {
  int aside = 0;
  for (const auto& e : fs::directory_iterator(root)) {
    aside += e.path().filename().string().rfind(".damaged-", 0) == 0 ? 1 : 0;
  }
  return aside;
}

// A collection whose vector file was cut short: a standalone refuses to
// open (its only copy: DATA_LOSS naming it); with quarantine_damaged (a
// cluster node, whose replicas a peer can give again) the collection is
// moved aside and dropped, and the rest opens.
TEST_F(CollectionTest, ADamagedCollectionIsSetAsideOnlyWhereItHasCopies) {
  constexpr uint32_t kDim = 8;
  OpenDb();
  auto c = Create("hurt", kDim, Metric::kL2);
  auto fine = Create("fine", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  ASSERT_NE(fine, nullptr);
  Model model, other;
  UpsertRange(*c, 0, 100, ClusteredVectors(100, kDim, 5), &model);
  UpsertRange(*fine, 0, 100, ClusteredVectors(100, kDim, 6), &other);
  const std::string dir = c->core().dir();
  c.reset();
  fine.reset();
  CloseDb();
  fs::resize_file(fs::path(dir) / "vectors-1.zvec", 100);
  EXPECT_THAT(Database::Open(options_).status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("hurt")));
  options_.quarantine_damaged = true;
  OpenDb();
  EXPECT_THAT(db_->GetCollection("hurt").status(), StatusIs(absl::StatusCode::kNotFound));
  ASSERT_NE(Get("fine"), nullptr);
  EXPECT_EQ(Get("fine")->Info().points, 100u);
  EXPECT_FALSE(fs::exists(dir));
  bool aside = false;
  for (const auto& e : fs::directory_iterator(fs::path(dir).parent_path())) {
    aside = aside || e.path().filename().string().find(".damaged-") != std::string::npos;
  }
  EXPECT_TRUE(aside);
  // Made again under the same name, as a node's bootstrap does.
  EXPECT_NE(Create("hurt", kDim, Metric::kL2), nullptr);
}

// A collection whose manifest names a vector file that is gone (its store
// rolled back past a compaction that removed it: the fault runner's cut
// WAL did that) is refused on a standalone, set aside on a cluster node.
TEST_F(CollectionTest, ACollectionWhoseFileIsGoneIsSetAsideOnlyWhereItHasCopies) {
  constexpr uint32_t kDim = 8;
  OpenDb();
  auto c = Create("gone", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  Model model;
  UpsertRange(*c, 0, 50, ClusteredVectors(50, kDim, 7), &model);
  const std::string dir = c->core().dir();
  c.reset();
  CloseDb();
  fs::remove(fs::path(dir) / "vectors-1.zvec");
  EXPECT_THAT(Database::Open(options_).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("gone")));
  options_.quarantine_damaged = true;
  OpenDb();
  EXPECT_THAT(db_->GetCollection("gone").status(), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_FALSE(fs::exists(dir));
  EXPECT_NE(Create("gone", kDim, Metric::kL2), nullptr);
}

class DamagedStoreTest : public CollectionTest {
 protected:
  static constexpr uint32_t kDim = 8;
  // Collection "c" of `n` points made, and the database closed.
  void FillAndClose(size_t n) {
    OpenDb();
    auto c = Create("c", kDim, Metric::kL2);
    ASSERT_NE(c, nullptr);
    Model model;
    UpsertRange(*c, 0, n, ClusteredVectors(n, kDim, 5), &model);
    c.reset();
    CloseDb();
  }
};

// The metadata store (RocksDB) itself damaged: its MANIFEST overwritten, so
// that it does not open (Corruption). A standalone refuses (DATA_LOSS); a
// node moves the store and every collection's files to
// DATA_DIR/.damaged-<ms>/ and opens empty, keeping the rest of DATA_DIR.
TEST_F(DamagedStoreTest, ADamagedMetadataStoreIsSetAsideOnlyWhereItHasCopies) {
  FillAndClose(100);
  const fs::path root(options_.data_dir);
  {
    std::ofstream keep(root / "cluster_map.c");  // a node's file beside the store
    keep << "kept\n";
  }
  int manifests = 0;
  for (const auto& e : fs::directory_iterator(root / "meta")) {
    if (e.path().filename().string().rfind("MANIFEST-", 0) != 0) continue;
    const auto size = fs::file_size(e.path());
    std::fstream f(e.path(), std::ios::binary | std::ios::in | std::ios::out);
    f.write(std::string(size, '\x5a').data(), static_cast<std::streamsize>(size));
    ++manifests;
  }
  ASSERT_GT(manifests, 0);
  EXPECT_THAT(Database::Open(options_).status(), StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_TRUE(fs::exists(root / "collections"));  // a standalone moves nothing
  options_.quarantine_damaged = true;
  OpenDb();
  EXPECT_TRUE(db_->ListCollections().empty());
  EXPECT_TRUE(fs::exists(root / "cluster_map.c"));
  EXPECT_EQ(AsideDirs(root), 1);
  for (const auto& e : fs::directory_iterator(root)) {
    if (e.path().filename().string().rfind(".damaged-", 0) != 0) continue;
    EXPECT_TRUE(fs::exists(e.path() / "meta"));
    EXPECT_TRUE(fs::exists(e.path() / "collections"));
  }
  // Made again, as a node's bootstrap does.
  EXPECT_NE(Create("c", kDim, Metric::kL2), nullptr);
}

// A table file of the store damaged in its middle (a data block, which an
// open without verification may never read): a node's open reads every
// block (collection.store.verify_on_open) and sets the store aside as
// above.
TEST_F(DamagedStoreTest, ADamagedTableIsFoundWhenTheOpenVerifiesEveryBlock) {
  FillAndClose(300);
  OpenDb();  // the recovery writes what the log held to a table
  CloseDb();
  const fs::path root(options_.data_dir);
  std::vector<fs::path> tables;
  for (const auto& e : fs::directory_iterator(root / "meta")) {
    if (e.path().extension() == ".sst") tables.push_back(e.path());
  }
  ASSERT_FALSE(tables.empty());
  for (const fs::path& t : tables) {  // the middle of each: data blocks
    std::fstream f(t, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(static_cast<std::streamoff>(fs::file_size(t) / 3));
    f.write("\xde\xad\xbe\xef\xde\xad\xbe\xef", 8);
  }
  options_.quarantine_damaged = true;
  options_.collection.store.verify_on_open = true;
  OpenDb();
  EXPECT_TRUE(db_->ListCollections().empty());
  EXPECT_EQ(AsideDirs(root), 1);
}

}  // namespace
}  // namespace zoom::server
