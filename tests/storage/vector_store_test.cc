#include "storage/vector_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/crc32c.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "storage/pread_block_reader.h"
#include "tests/testing/fault_injecting_block_reader.h"
#include "tests/testing/fault_injecting_file_system.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_env.h"

namespace zoom::storage {
namespace {

using ::testing::HasSubstr;
using ::zoom::testing::StatusIs;
using ::zoom::testing::TempDir;
using ::zoom::testing::TestDataPath;

// The value of component j of golden vector i (exact in float32 and uint8).
float GoldenValue(uint32_t i, uint32_t j, DType dtype) {
  const uint32_t v = (i * 131 + j * 7 + 3) % 251;
  return dtype == DType::kUint8 ? static_cast<float>(v)
                                : static_cast<float>(v) * 0.25f - 20.0f;
}

std::vector<uint8_t> GoldenRecords(uint32_t n, uint32_t dim, DType dtype) {
  std::vector<uint8_t> out(size_t{n} * dim * DTypeSize(dtype));
  for (uint32_t i = 0; i < n; ++i) {
    for (uint32_t j = 0; j < dim; ++j) {
      const float v = GoldenValue(i, j, dtype);
      if (dtype == DType::kUint8) {
        out[size_t{i} * dim + j] = static_cast<uint8_t>(v);
      } else {
        std::memcpy(out.data() + (size_t{i} * dim + j) * 4, &v, 4);
      }
    }
  }
  return out;
}

std::vector<InternalId> Iota(uint32_t n) {
  std::vector<InternalId> ids(n);
  for (uint32_t i = 0; i < n; ++i) ids[i] = i;
  return ids;
}

void ExpectGolden(const VectorStore& s, uint32_t n) {
  ASSERT_EQ(s.count(), n);
  std::vector<float> out(size_t{n} * s.dim());
  QueryStats stats;
  ASSERT_OK(s.ReadVectors(Iota(n), out.data(), &stats));
  for (uint32_t i = 0; i < n; ++i) {
    for (uint32_t j = 0; j < s.dim(); ++j) {
      ASSERT_EQ(out[size_t{i} * s.dim() + j], GoldenValue(i, j, s.dtype()))
          << "vector " << i << " component " << j;
    }
  }
  EXPECT_GT(stats.reads, 0u);
  EXPECT_OK(s.VerifyData());
}

struct GoldenCase {
  const char* file;
  uint32_t dim;
  DType dtype;
  uint32_t n;
};
constexpr GoldenCase kGolden[] = {
    {"vector_store_v1_0_float32.zvec", 100, DType::kFloat32, 37},
    {"vector_store_v1_0_uint8.zvec", 784, DType::kUint8, 11},
};

// Files written by format 1.0 and checked in: every later version must read
// them. ZOOM_WRITE_GOLDEN=1 writes them (only when adding a new version).
TEST(VectorStoreTest, ReadsGoldenFilesOfFormat1_0) {
  const bool write = std::getenv("ZOOM_WRITE_GOLDEN") != nullptr;
  for (const GoldenCase& g : kGolden) {
    SCOPED_TRACE(g.file);
    const std::string path = TestDataPath(std::string("golden/") + g.file);
    if (write) {
      std::filesystem::create_directories(TestDataPath("golden"));
      std::filesystem::remove(path);
      ASSERT_OK_AND_ASSIGN(auto s, VectorStore::Create(path, g.dim, g.dtype));
      auto recs = GoldenRecords(g.n, g.dim, g.dtype);
      ASSERT_OK(s->Append(recs.data(), g.n));
    }
    // Read from a copy: Open takes the file read-write.
    TempDir tmp;
    const std::string copy = tmp.File(g.file);
    std::filesystem::copy_file(path, copy);
    ASSERT_OK_AND_ASSIGN(auto s, VectorStore::Open(copy));
    EXPECT_EQ(s->dim(), g.dim);
    EXPECT_EQ(s->dtype(), g.dtype);
    ExpectGolden(*s, g.n);
  }
}

class VectorStoreRoundTripTest : public ::testing::TestWithParam<DType> {};

TEST_P(VectorStoreRoundTripTest, AppendReadReopenAppend) {
  const DType dtype = GetParam();
  TempDir tmp;
  const std::string path = tmp.File("v.zvec");
  // 100-d: several records per 4 KiB block (float32: 10, uint8: 40).
  constexpr uint32_t kDim = 100;
  const auto recs = GoldenRecords(500, kDim, dtype);
  const size_t rb = size_t{kDim} * DTypeSize(dtype);
  {
    ASSERT_OK_AND_ASSIGN(auto s, VectorStore::Create(path, kDim, dtype));
    EXPECT_EQ(s->count(), 0u);
    ASSERT_OK(s->Append(recs.data(), 123));
    ASSERT_OK(s->Append(recs.data() + 123 * rb, 200));
    ExpectGolden(*s, 323);
  }
  ASSERT_OK_AND_ASSIGN(auto s, VectorStore::Open(path));
  ExpectGolden(*s, 323);
  ASSERT_OK(s->Append(recs.data() + 323 * rb, 177));
  ExpectGolden(*s, 500);
  // Random subsets, with duplicates, in any order.
  std::mt19937 rng(5);
  for (int round = 0; round < 20; ++round) {
    std::vector<InternalId> ids(1 + rng() % 150);
    for (auto& id : ids) id = rng() % 500;
    std::vector<float> out(ids.size() * kDim);
    ASSERT_OK(s->ReadVectors(ids, out.data()));
    std::vector<uint8_t> raw(ids.size() * rb);
    ASSERT_OK(s->ReadRaw(ids, raw.data()));
    for (size_t p = 0; p < ids.size(); ++p) {
      for (uint32_t j = 0; j < kDim; ++j) {
        ASSERT_EQ(out[p * kDim + j], GoldenValue(ids[p], j, dtype));
      }
      ASSERT_EQ(std::memcmp(raw.data() + p * rb, recs.data() + ids[p] * rb, rb), 0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(BothDTypes, VectorStoreRoundTripTest,
                         ::testing::Values(DType::kFloat32, DType::kUint8),
                         [](const auto& info) {
                           return std::string(DTypeName(info.param));
                         });

TEST(VectorStoreTest, OneReadPerVectorAndSharedBlocksCoalesce) {
  TempDir tmp;
  ASSERT_OK_AND_ASSIGN(
      auto s, VectorStore::Create(tmp.File("v.zvec"), 100, DType::kFloat32));
  const auto recs = GoldenRecords(100, 100, DType::kFloat32);
  ASSERT_OK(s->Append(recs.data(), 100));
  EXPECT_EQ(s->records_per_block(), 10u);  // 400-byte records
  // No record straddles a 4 KiB block.
  for (InternalId id = 0; id < 100; ++id) {
    const uint64_t off = s->RecordOffset(id);
    EXPECT_EQ(off / 4096, (off + s->record_bytes() - 1) / 4096) << id;
  }
  std::vector<float> out(3 * 100);
  QueryStats stats;
  const InternalId ids[] = {0, 55, 99};  // three blocks
  ASSERT_OK(s->ReadVectors(ids, out.data(), &stats));
  EXPECT_EQ(stats.reads, 3u);
  QueryStats shared;
  const InternalId same_block[] = {20, 21, 29};  // all in block 2
  ASSERT_OK(s->ReadVectors(same_block, out.data(), &shared));
  EXPECT_EQ(shared.reads, 1u);
  EXPECT_LE(shared.bytes_read, 4096u);
}

TEST(VectorStoreTest, LargeRecordsStartOnABlock) {
  TempDir tmp;
  // 1500 floats = 6000 bytes: one record spans two blocks, starting on one.
  ASSERT_OK_AND_ASSIGN(
      auto s, VectorStore::Create(tmp.File("v.zvec"), 1500, DType::kFloat32));
  const auto recs = GoldenRecords(7, 1500, DType::kFloat32);
  ASSERT_OK(s->Append(recs.data(), 7));
  for (InternalId id = 0; id < 7; ++id) EXPECT_EQ(s->RecordOffset(id) % 4096, 0u);
  ExpectGolden(*s, 7);
}

TEST(VectorStoreTest, BadIdsAndBadArgumentsAreClearErrors) {
  TempDir tmp;
  ASSERT_OK_AND_ASSIGN(
      auto s, VectorStore::Create(tmp.File("v.zvec"), 8, DType::kFloat32));
  const auto recs = GoldenRecords(3, 8, DType::kFloat32);
  ASSERT_OK(s->Append(recs.data(), 3));
  float out[8];
  const InternalId bad[] = {3};
  EXPECT_THAT(s->ReadVectors(bad, out),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("vector id 3")));
  EXPECT_THAT(VectorStore::Create(tmp.File("v.zvec"), 8, DType::kFloat32),
              StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr("exists")));
  EXPECT_THAT(VectorStore::Create(tmp.File("w.zvec"), 0, DType::kFloat32),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dimension")));
  EXPECT_THAT(VectorStore::Open(tmp.File("none.zvec")),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("none.zvec")));
}

// Corrupt files: every case is a clear Status, never a crash.
class VectorStoreCorruptionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = tmp_.File("c.zvec");
    auto s = VectorStore::Create(path_, 16, DType::kFloat32);
    ASSERT_OK(s.status());
    const auto recs = GoldenRecords(600, 16, DType::kFloat32);
    ASSERT_OK((*s)->Append(recs.data(), 600));
  }
  void Patch(uint64_t offset, const void* bytes, size_t n) {
    const int fd = ::open(path_.c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::pwrite(fd, bytes, n, static_cast<off_t>(offset)),
              static_cast<ssize_t>(n));
    ::close(fd);
  }
  TempDir tmp_;
  std::string path_;
};

TEST_F(VectorStoreCorruptionTest, WrongMagic) {
  Patch(0, "NOTZOOM!", 8);
  EXPECT_THAT(VectorStore::Open(path_),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("bad magic")));
}

TEST_F(VectorStoreCorruptionTest, NewerMajorVersion) {
  const uint16_t major = 2;
  Patch(8, &major, 2);
  // The version changed and the header's CRC not: damage, not a newer file.
  EXPECT_THAT(VectorStore::Open(path_),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("checksum")));
  // A newer zoomd's file (its header's CRC right).
  uint8_t h[4092];
  {
    const int fd = ::open(path_.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::pread(fd, h, sizeof(h), 0), static_cast<ssize_t>(sizeof(h)));
    ::close(fd);
  }
  const uint32_t crc = Crc32c(h, sizeof(h));
  Patch(4092, &crc, 4);
  EXPECT_THAT(VectorStore::Open(path_),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("written by a newer zoomd")));
}

TEST_F(VectorStoreCorruptionTest, HeaderChecksumMismatch) {
  const uint32_t dim = 17;
  Patch(16, &dim, 4);
  EXPECT_THAT(VectorStore::Open(path_),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("checksum")));
}

TEST_F(VectorStoreCorruptionTest, TruncatedData) {
  std::filesystem::resize_file(path_, 4096 + 100);
  EXPECT_THAT(VectorStore::Open(path_),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("truncated")));
  std::filesystem::resize_file(path_, 1000);
  EXPECT_THAT(VectorStore::Open(path_),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("truncated")));
}

TEST_F(VectorStoreCorruptionTest, FlippedDataByteFailsVerification) {
  const uint8_t junk = 0x5A;
  Patch(4096 + 64 * 10 + 3, &junk, 1);
  ASSERT_OK_AND_ASSIGN(auto s, VectorStore::Open(path_));
  EXPECT_THAT(s->VerifyData(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("data checksum")));
  // An opener that verifies (a cluster node) finds it at the open.
  VectorStoreOptions verify;
  verify.verify_on_open = true;
  EXPECT_THAT(VectorStore::Open(path_, verify),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("data checksum")));
}

TEST_F(VectorStoreCorruptionTest, TornTailIsIgnoredAndOverwritten) {
  // Bytes past the committed count (a crash after writing records, before
  // the header moved) are neither served nor kept.
  ASSERT_OK_AND_ASSIGN(auto s, VectorStore::Open(path_));
  const uint64_t end = s->file_bytes();
  s.reset();
  std::vector<uint8_t> junk(3000, 0xEE);
  Patch(end, junk.data(), junk.size());
  ASSERT_OK_AND_ASSIGN(s, VectorStore::Open(path_));
  EXPECT_EQ(s->count(), 600u);
  EXPECT_OK(s->VerifyData());
  const auto more = GoldenRecords(602, 16, DType::kFloat32);
  ASSERT_OK(s->Append(more.data() + 600 * 64, 2));
  ExpectGolden(*s, 602);
}

TEST(VectorStoreTest, ReadErrorsBecomeStatus) {
  TempDir tmp;
  VectorStoreOptions opts;
  opts.reader_factory = [](const std::string& p, const BlockReaderOptions& o)
      -> absl::StatusOr<std::unique_ptr<BlockReader>> {
    auto inner = PreadBlockReader::Open(p, o);
    if (!inner.ok()) return inner.status();
    return std::unique_ptr<BlockReader>(
        std::make_unique<zoom::testing::FaultInjectingBlockReader>(
            std::move(inner).value(), 0.3, 0.3, 11));
  };
  ASSERT_OK_AND_ASSIGN(
      auto s, VectorStore::Create(tmp.File("f.zvec"), 32, DType::kFloat32, opts));
  const auto recs = GoldenRecords(1000, 32, DType::kFloat32);
  ASSERT_OK(s->Append(recs.data(), 1000));
  int failures = 0;
  std::vector<float> out(40 * 32);
  for (int round = 0; round < 30; ++round) {
    std::vector<InternalId> ids(40);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = (round * 131 + i * 29) % 1000;
    QueryStats stats;
    const absl::Status st = s->ReadVectors(ids, out.data(), &stats);
    if (!st.ok()) {
      ++failures;
      EXPECT_THAT(st, StatusIs(absl::StatusCode::kDataLoss, HasSubstr("injected")));
      EXPECT_EQ(stats.read_errors, 1u);
    } else {
      for (size_t p = 0; p < ids.size(); ++p) {
        ASSERT_EQ(out[p * 32 + 5], GoldenValue(ids[p], 5, DType::kFloat32));
      }
    }
  }
  EXPECT_GT(failures, 0);
}

TEST(VectorStoreTest, ConcurrentReadersWhileOneWriterAppends) {
  TempDir tmp;
  ASSERT_OK_AND_ASSIGN(
      auto s, VectorStore::Create(tmp.File("v.zvec"), 24, DType::kFloat32));
  const auto recs = GoldenRecords(3000, 24, DType::kFloat32);
  ASSERT_OK(s->Append(recs.data(), 100));
  std::atomic<bool> done{false};
  std::atomic<int> errors{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 3; ++t) {
    readers.emplace_back([&, t] {
      std::mt19937 rng(t);
      std::vector<float> out(64 * 24);
      while (!done.load()) {
        const uint64_t c = s->count();  // committed: safe to read
        std::vector<InternalId> ids(64);
        for (auto& id : ids) id = rng() % c;
        if (!s->ReadVectors(ids, out.data()).ok()) ++errors;
        for (size_t p = 0; p < ids.size(); ++p) {
          if (out[p * 24 + 7] != GoldenValue(ids[p], 7, DType::kFloat32)) ++errors;
        }
      }
    });
  }
  for (uint32_t next = 100; next < 3000; next += 100) {
    ASSERT_OK(s->Append(recs.data() + size_t{next} * 24 * 4, 100));
  }
  done = true;
  for (auto& th : readers) th.join();
  EXPECT_EQ(errors.load(), 0);
  ExpectGolden(*s, 3000);
}

TEST(VectorStoreTest, UnsyncedAppendsBecomeVisibleAtSync) {
  TempDir tmp;
  VectorStoreOptions opts;
  opts.sync_on_append = false;
  ASSERT_OK_AND_ASSIGN(
      auto s, VectorStore::Create(tmp.File("v.zvec"), 8, DType::kUint8, opts));
  const auto recs = GoldenRecords(10, 8, DType::kUint8);
  ASSERT_OK(s->Append(recs.data(), 10));
  EXPECT_EQ(s->count(), 0u);
  ASSERT_OK(s->Sync());
  ExpectGolden(*s, 10);
}


// Every write of an Append can fail (EIO, a full disk, a write cut short,
// a failed fdatasync of the records or of the header): the Append reports
// it, nothing past the committed count is served, the next Append
// overwrites the torn tail, and a reopen finds exactly what was committed.
TEST(VectorStoreTest, WriteFaultsLoseNothingCommittedAndServeNothingHalfWritten) {
  using Op = FaultInjectingFileSystem::Op;
  constexpr uint32_t kDim = 100;
  const auto recs = GoldenRecords(400, kDim, DType::kFloat32);
  const size_t rb = kDim * sizeof(float);
  TempDir tmp;
  const std::string path = tmp.File("faults.zvec");
  FaultInjectingFileSystem faulty;
  VectorStoreOptions options;
  options.file_system = &faulty;
  ASSERT_OK_AND_ASSIGN(auto s, VectorStore::Create(path, kDim, DType::kFloat32, options));
  ASSERT_OK(s->Append(recs.data(), 100));
  struct Case {
    FaultInjectingFileSystem::Fault fault;
    absl::StatusCode code;
  };
  // An Append is: the records' write, their fdatasync, the header's write,
  // its fdatasync.
  const Case cases[] = {
      {{Op::kWrite, "/faults.zvec", 0, EIO}, absl::StatusCode::kDataLoss},
      {{Op::kWrite, "/faults.zvec", 0, ENOSPC, /*short_write=*/true}, absl::StatusCode::kResourceExhausted},
      {{Op::kSync, "/faults.zvec", 0, EIO}, absl::StatusCode::kDataLoss},
      {{Op::kWrite, "/faults.zvec", /*skip=*/1, ENOSPC}, absl::StatusCode::kResourceExhausted},
      {{Op::kSync, "/faults.zvec", /*skip=*/1, EIO}, absl::StatusCode::kDataLoss},
  };
  uint32_t committed = 100;
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrCat("op ", static_cast<int>(c.fault.op), " skip ", c.fault.skip));
    faulty.Inject(c.fault);
    EXPECT_THAT(s->Append(recs.data() + size_t{committed} * rb, 50),
                StatusIs(c.code, HasSubstr("injected")));
    faulty.Clear();
    EXPECT_EQ(s->count(), committed);  // nothing half-written is served
    std::vector<float> out(kDim);
    EXPECT_THAT(s->ReadVectors(std::vector<InternalId>{committed}, out.data()),
                StatusIs(absl::StatusCode::kOutOfRange));
    // The next Append takes the same place.
    ASSERT_OK(s->Append(recs.data() + size_t{committed} * rb, 50));
    committed += 50;
    ExpectGolden(*s, committed);
  }
  s.reset();
  ASSERT_OK_AND_ASSIGN(s, VectorStore::Open(path));
  ExpectGolden(*s, committed);
}

}  // namespace
}  // namespace zoom::storage
