// Snapshots are untrusted input (trust, case 5), the engine's part: what a
// killed CreateSnapshot or upload staged is removed when the database
// opens (only those shapes; links removed as links), and a download is
// confined to the snapshots directory like a restore's source.
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/engine/database.h"
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

}  // namespace
}  // namespace zoom::server
