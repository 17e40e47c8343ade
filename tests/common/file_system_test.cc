// The file layer: the one errno mapping, the POSIX file, atomic writes that
// fail at every step, the fault-injecting twin's own rules, and the
// streaming BinaryWriter.
#include "common/file_system.h"

#include <sys/stat.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/binary_io.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/fault_injecting_file_system.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_env.h"

namespace zoom {
namespace {

using ::testing::HasSubstr;
using ::zoom::testing::StatusIs;
using ::zoom::testing::TempDir;
using Op = FaultInjectingFileSystem::Op;

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(FileSystemTest, OneErrnoMapping) {
  EXPECT_THAT(FileErrorToStatus(EIO, "write f"), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("write f")));
  EXPECT_THAT(FileErrorToStatus(ENOSPC, "x"), StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(FileErrorToStatus(EDQUOT, "x"), StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(FileErrorToStatus(EFBIG, "x"), StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(FileErrorToStatus(ENOENT, "x"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(FileErrorToStatus(EEXIST, "x"), StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_THAT(FileErrorToStatus(EACCES, "x"), StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(FileErrorToStatus(EROFS, "x"), StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(FileErrorToStatus(EINVAL, "x"), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(FileSystemTest, PosixFileReadsWritesAndRefusesWhatTheModeForbids) {
  TempDir tmp;
  FileSystem& fs = *FileSystem::Posix();
  const std::string path = tmp.File("f");
  {
    ASSERT_OK_AND_ASSIGN(auto f, fs.Open(path, FileSystem::Mode::kCreateNew));
    ASSERT_OK(f->PWrite(3, "abc", 3));
    ASSERT_OK(f->Sync());
    ASSERT_OK_AND_ASSIGN(uint64_t size, f->Size());
    EXPECT_EQ(size, 6u);
    char buf[3];
    ASSERT_OK(f->PRead(3, buf, 3));
    EXPECT_EQ(std::string(buf, 3), "abc");
    EXPECT_THAT(f->PRead(4, buf, 3), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("truncated")));
    ASSERT_OK(f->Close());
  }
  EXPECT_THAT(fs.Open(path, FileSystem::Mode::kCreateNew),
              StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr(path)));
  EXPECT_THAT(fs.Open(tmp.File("missing"), FileSystem::Mode::kReadWrite),
              StatusIs(absl::StatusCode::kNotFound));
  ASSERT_OK_AND_ASSIGN(auto ro, fs.Open(path, FileSystem::Mode::kReadOnly));
  EXPECT_FALSE(ro->PWrite(0, "x", 1).ok());
  EXPECT_THAT(fs.SyncDir(tmp.File("no-such-dir")), StatusIs(absl::StatusCode::kNotFound));
}

// Whatever step fails, the old file stays whole and the temporary goes;
// a failed directory sync is reported (the rename happened).
TEST(FileSystemTest, AtomicWriteFailsCleanlyAtEveryStep) {
  TempDir tmp;
  const std::string path = tmp.File("state");
  ASSERT_OK(WriteFileAtomically(*FileSystem::Posix(), path, "old contents"));
  struct Case {
    FaultInjectingFileSystem::Fault fault;
    absl::StatusCode code;
    bool renamed;
  };
  const Case cases[] = {
      {{Op::kOpen, ".tmp", 0, ENOSPC}, absl::StatusCode::kResourceExhausted, false},
      {{Op::kWrite, ".tmp", 0, EIO}, absl::StatusCode::kDataLoss, false},
      {{Op::kWrite, ".tmp", 0, ENOSPC, /*short_write=*/true}, absl::StatusCode::kResourceExhausted,
       false},
      {{Op::kSync, ".tmp", 0, EIO}, absl::StatusCode::kDataLoss, false},
      {{Op::kRename, "/state", 0, EIO}, absl::StatusCode::kDataLoss, false},
      {{Op::kSyncDir, "", 0, EIO}, absl::StatusCode::kDataLoss, true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(static_cast<int>(c.fault.op));
    ASSERT_OK(WriteFileAtomically(*FileSystem::Posix(), path, "old contents"));
    FaultInjectingFileSystem faulty;
    faulty.Inject(c.fault);
    EXPECT_THAT(WriteFileAtomically(faulty, path, "new contents, longer"),
                StatusIs(c.code, HasSubstr("injected")));
    EXPECT_EQ(faulty.fired(), 1);
    EXPECT_EQ(Slurp(path), c.renamed ? "new contents, longer" : "old contents");
    EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  }
}

TEST(FaultInjectingFileSystemTest, SkipStickyAndPathMatching) {
  TempDir tmp;
  FaultInjectingFileSystem faulty;
  // (Names that cannot occur in the random temporary directory's path.)
  faulty.Inject({Op::kWrite, "/beta", /*skip=*/1, ENOSPC, false, /*sticky=*/true});
  ASSERT_OK_AND_ASSIGN(auto a, faulty.Open(tmp.File("alpha"), FileSystem::Mode::kCreateNew));
  ASSERT_OK_AND_ASSIGN(auto b, faulty.Open(tmp.File("beta"), FileSystem::Mode::kCreateNew));
  EXPECT_OK(a->PWrite(0, "1", 1));  // another path
  EXPECT_OK(b->PWrite(0, "1", 1));  // skipped
  EXPECT_THAT(b->PWrite(1, "2", 1), StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(b->PWrite(1, "2", 1), StatusIs(absl::StatusCode::kResourceExhausted));  // sticky
  EXPECT_EQ(faulty.fired(), 2);
  faulty.Clear();
  EXPECT_OK(b->PWrite(1, "2", 1));
  // A short write lands half of the bytes.
  faulty.Inject({Op::kWrite, "/alpha", 0, EIO, /*short_write=*/true});
  EXPECT_THAT(a->PWrite(0, "abcd", 4), StatusIs(absl::StatusCode::kDataLoss));
  char buf[2];
  ASSERT_OK(a->PRead(0, buf, 2));
  EXPECT_EQ(std::string(buf, 2), "ab");
}

// The streaming BinaryWriter writes exactly the bytes of the in-memory one
// (small puts, puts bigger than its buffer, the CRC), holding at most a
// buffer; a failed write, a failed rename and a writer dropped uncommitted
// leave the old file whole and no temporary behind.
TEST(BinaryWriterTest, StreamingWritesTheSameFileAndFailsCleanly) {
  TempDir tmp;
  const std::string path = tmp.File("big");
  std::vector<uint32_t> big(3 * BinaryWriter::kStreamBufferBytes / sizeof(uint32_t) + 7);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint32_t>(i * 2654435761u);
  auto fill = [&](BinaryWriter& w) {
    for (uint32_t i = 0; i < 300000; ++i) w.Put<uint32_t>(i);  // crosses the buffer
    w.PutVector(big);                                           // bigger than the buffer
    w.PutString("tail");
  };
  BinaryWriter mem("ZOOMTST", 1, 2);
  fill(mem);
  const size_t mem_size = mem.size();
  ASSERT_OK(mem.Commit(tmp.File("mem")));
  {
    BinaryWriter streamed("ZOOMTST", 1, 2, path, nullptr);
    fill(streamed);
    EXPECT_EQ(streamed.size(), mem_size);
    ASSERT_OK(streamed.Commit(path));
  }
  ASSERT_EQ(Slurp(path), Slurp(tmp.File("mem")));
  ASSERT_OK_AND_ASSIGN(BinaryReader r, BinaryReader::Open(path, "ZOOMTST", 1, "test"));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  const std::string old = Slurp(path);

  struct Case {
    FaultInjectingFileSystem::Fault fault;
    absl::StatusCode code;
  };
  const Case cases[] = {
      {{Op::kOpen, ".tmp", 0, ENOSPC}, absl::StatusCode::kResourceExhausted},
      {{Op::kWrite, ".tmp", 2, EIO}, absl::StatusCode::kDataLoss},  // mid-stream
      {{Op::kWrite, ".tmp", 1, ENOSPC, /*short_write=*/true},
       absl::StatusCode::kResourceExhausted},
      {{Op::kSync, ".tmp", 0, EIO}, absl::StatusCode::kDataLoss},
      {{Op::kRename, "/big", 0, EIO}, absl::StatusCode::kDataLoss},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(static_cast<int>(c.fault.op));
    FaultInjectingFileSystem faulty;
    faulty.Inject(c.fault);
    {
      BinaryWriter w("ZOOMTST", 1, 3, path, &faulty);
      fill(w);
      EXPECT_THAT(w.Commit(path, &faulty), StatusIs(c.code, HasSubstr("injected")));
    }
    EXPECT_EQ(faulty.fired(), 1);
    EXPECT_EQ(Slurp(path), old);
    EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  }
  {
    BinaryWriter dropped("ZOOMTST", 1, 3, path, nullptr);
    fill(dropped);
    EXPECT_TRUE(std::filesystem::exists(path + ".tmp"));
  }
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  EXPECT_EQ(Slurp(path), old);
  BinaryWriter elsewhere("ZOOMTST", 1, 3, path, nullptr);
  EXPECT_THAT(elsewhere.Commit(tmp.File("other")), StatusIs(absl::StatusCode::kInternal));
}

// ReadFileToString reads what a path names only when it is a regular file:
// a FIFO planted in its place is refused at once (its open does not wait
// for a writer), a directory too.
TEST(ReadFileToStringTest, ReadsRegularFilesAndRefusesFifosAtOnce) {
  TempDir dir;
  {
    std::ofstream f(dir.File("plain"), std::ios::binary);
    f << std::string(200000, 'x');
  }
  absl::StatusOr<std::string> got = ReadFileToString(dir.File("plain"));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->size(), 200000u);
  ASSERT_EQ(mkfifo(dir.File("fifo").c_str(), 0600), 0);
  EXPECT_THAT(ReadFileToString(dir.File("fifo")).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a regular file")));
  EXPECT_THAT(ReadFileToString(dir.path()).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ReadFileToString(dir.File("absent")).status(),
              StatusIs(absl::StatusCode::kNotFound));
}

}  // namespace
}  // namespace zoom
