// One conformance suite run against every BlockReader: io_uring (with and
// without registered file/buffers), pread (O_DIRECT and buffered) and a
// fault-injecting fake. Random batches are checked byte for byte against the
// file's known contents; errors must come back per request.
#include "storage/block_reader.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/aligned_buffer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "storage/pread_block_reader.h"
#include "tests/testing/fault_injecting_block_reader.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_env.h"
#ifdef ZOOM_HAVE_LIBURING
#include "storage/uring_block_reader.h"
#endif

namespace zoom::storage {
namespace {

using ::testing::HasSubstr;
using ::zoom::testing::FaultInjectingBlockReader;
using ::zoom::testing::StatusIs;
using ::zoom::testing::TempDir;

// 6 MiB + 1000 bytes: the last block is partial.
constexpr size_t kFileSize = (6u << 20) + 1000;

uint8_t ByteAt(uint64_t off) {
  uint64_t x = off * 0x9E3779B97F4A7C15ull;
  x ^= x >> 29;
  return static_cast<uint8_t>(x);
}

struct Backend {
  std::string name;
  std::function<absl::StatusOr<std::unique_ptr<BlockReader>>(const std::string&)>
      open;
  bool injects_faults = false;
  bool needs_uring = false;
};

void PrintTo(const Backend& b, std::ostream* os) { *os << b.name; }

std::vector<Backend> Backends() {
  std::vector<Backend> b;
  BlockReaderOptions small_queue;
  small_queue.queue_depth = 32;  // batches below are larger: chunked submits
#ifdef ZOOM_HAVE_LIBURING
  b.push_back({"uring_fixed", [small_queue](const std::string& p)
                   -> absl::StatusOr<std::unique_ptr<BlockReader>> {
                 auto r = UringBlockReader::Open(p, small_queue);
                 if (!r.ok()) return r.status();
                 return std::unique_ptr<BlockReader>(std::move(r).value());
               },
               false, true});
  b.push_back({"uring_plain", [small_queue](const std::string& p)
                   -> absl::StatusOr<std::unique_ptr<BlockReader>> {
                 BlockReaderOptions o = small_queue;
                 o.register_file = false;
                 o.register_buffers = false;
                 auto r = UringBlockReader::Open(p, o);
                 if (!r.ok()) return r.status();
                 return std::unique_ptr<BlockReader>(std::move(r).value());
               },
               false, true});
#endif
  b.push_back({"pread_direct", [](const std::string& p)
                   -> absl::StatusOr<std::unique_ptr<BlockReader>> {
                 auto r = PreadBlockReader::Open(p);
                 if (!r.ok()) return r.status();
                 return std::unique_ptr<BlockReader>(std::move(r).value());
               }});
  b.push_back({"pread_buffered", [](const std::string& p)
                   -> absl::StatusOr<std::unique_ptr<BlockReader>> {
                 BlockReaderOptions o;
                 o.direct_io = false;
                 auto r = PreadBlockReader::Open(p, o);
                 if (!r.ok()) return r.status();
                 return std::unique_ptr<BlockReader>(std::move(r).value());
               }});
  b.push_back({"faulty", [](const std::string& p)
                   -> absl::StatusOr<std::unique_ptr<BlockReader>> {
                 auto inner = MakeBlockReader(p);
                 if (!inner.ok()) return inner.status();
                 return std::unique_ptr<BlockReader>(
                     std::make_unique<FaultInjectingBlockReader>(
                         std::move(inner).value(), 0.1, 0.1, 7));
               },
               true});
  return b;
}

class BlockReaderConformanceTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    if (GetParam().needs_uring && !ProbeIoUring().available) {
      GTEST_SKIP() << "io_uring unavailable here: " << ProbeIoUring().reason;
    }
    path_ = tmp_.File("data.bin");
    std::vector<uint8_t> bytes(kFileSize);
    for (size_t i = 0; i < kFileSize; ++i) bytes[i] = ByteAt(i);
    const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::write(fd, bytes.data(), bytes.size()),
              static_cast<ssize_t>(bytes.size()));
    ::fsync(fd);
    ::close(fd);
    auto r = GetParam().open(path_);
    ASSERT_OK(r.status());
    reader_ = std::move(r).value();
  }

  // Reads `batches` random batches and checks every request.
  // `overlapped`: through ReadBatchOverlapped, whose work must run once.
  void RunRandomBatches(uint64_t seed, int batches, bool use_scratch,
                        bool overlapped = false) {
    std::mt19937_64 rng(seed);
    const size_t a = std::max<size_t>(reader_->alignment(), 1);
    const size_t unit = std::max<size_t>(a, 512);
    const uint64_t units = (kFileSize - 1000) / unit;
    for (int b = 0; b < batches; ++b) {
      const size_t n = 1 + rng() % 200;
      std::vector<ReadRequest> reqs(n);
      size_t total = 0;
      for (ReadRequest& r : reqs) {
        const size_t len_units = 1 + rng() % 8;
        r.offset = (rng() % (units - len_units)) * unit;
        r.len = len_units * unit;
        total += r.len;
      }
      AlignedBuffer own;
      uint8_t* base = nullptr;
      if (use_scratch) {
        ASSERT_OK_AND_ASSIGN(base, reader_->Scratch(total));
      } else {
        ASSERT_OK_AND_ASSIGN(own, AlignedBuffer::Allocate(total, 4096));
        base = own.data();
      }
      std::memset(base, 0xAB, total);
      size_t used = 0;
      for (ReadRequest& r : reqs) {
        r.buffer = base + used;
        used += r.len;
      }
      if (overlapped) {
        int calls = 0;
        uint64_t work = seed;
        ASSERT_OK(reader_->ReadBatchOverlapped(absl::MakeSpan(reqs), [&] {
          ++calls;
          for (int i = 0; i < 10000; ++i)
            work = work * 6364136223846793005u + 1;  // CPU work
        }));
        EXPECT_EQ(calls, 1);
        EXPECT_NE(work, seed);
      } else {
        ASSERT_OK(reader_->ReadBatch(absl::MakeSpan(reqs)));
      }
      CheckBatch(reqs);
    }
  }

  void CheckBatch(const std::vector<ReadRequest>& reqs) {
    std::vector<FaultInjectingBlockReader::Fault> faults;
    if (GetParam().injects_faults) {
      faults = static_cast<FaultInjectingBlockReader&>(*reader_).last_faults();
      ASSERT_EQ(faults.size(), reqs.size());
    }
    for (size_t i = 0; i < reqs.size(); ++i) {
      const ReadRequest& r = reqs[i];
      const bool faulted =
          !faults.empty() &&
          faults[i] != FaultInjectingBlockReader::Fault::kNone;
      if (faulted) {
        EXPECT_THAT(r.status, StatusIs(absl::StatusCode::kDataLoss,
                                       HasSubstr("injected")));
        EXPECT_LT(r.bytes_read, r.len);
      } else {
        ASSERT_OK(r.status) << "request " << i;
        ASSERT_EQ(r.bytes_read, r.len);
      }
      // Every byte reported read is the file's byte.
      const auto* p = static_cast<const uint8_t*>(r.buffer);
      for (size_t k = 0; k < r.bytes_read; ++k) {
        ASSERT_EQ(p[k], ByteAt(r.offset + k))
            << "request " << i << " byte " << k;
      }
    }
  }

  TempDir tmp_;
  std::string path_;
  std::unique_ptr<BlockReader> reader_;
};

TEST_P(BlockReaderConformanceTest, RandomBatchesMatchTheFile) {
  RunRandomBatches(1, 20, /*use_scratch=*/false);
}

TEST_P(BlockReaderConformanceTest, RandomBatchesIntoScratchMatchTheFile) {
  RunRandomBatches(2, 20, /*use_scratch=*/true);
}

TEST_P(BlockReaderConformanceTest,
       OverlappedBatchesMatchTheFileAndRunTheWorkOnce) {
  RunRandomBatches(3, 10, /*use_scratch=*/false, /*overlapped=*/true);
  RunRandomBatches(4, 10, /*use_scratch=*/true, /*overlapped=*/true);
  int calls = 0;
  EXPECT_OK(
      reader_->ReadBatchOverlapped({}, [&] { ++calls; }));  // nothing to read
  EXPECT_EQ(calls, 1);
}

// Two-phase reads: Submit returns with the reads in flight, Wait completes
// them (the same bytes as ReadBatch); a second Wait answers the same; a
// batch dropped unwaited leaves the reader usable; on io_uring a second
// batch on the thread's ring while one is pending is refused, not mixed in.
TEST_P(BlockReaderConformanceTest, SubmitThenWaitMatchesTheFile) {
  const size_t a = std::max<size_t>(reader_->alignment(), 1);
  const size_t unit = std::max<size_t>(a, 512);
  auto make = [&](uint64_t seed, AlignedBuffer* buf, std::vector<ReadRequest>* reqs) {
    std::mt19937_64 rng(seed);
    const uint64_t units = (kFileSize - 1000) / unit;
    reqs->assign(1 + rng() % 100, ReadRequest());
    size_t total = 0;
    for (ReadRequest& r : *reqs) {
      const size_t len_units = 1 + rng() % 4;
      r.offset = (rng() % (units - len_units)) * unit;
      r.len = len_units * unit;
      total += r.len;
    }
    auto own = AlignedBuffer::Allocate(total, 4096);
    ASSERT_OK(own.status());
    *buf = std::move(*own);
    size_t used = 0;
    for (ReadRequest& r : *reqs) {
      r.buffer = buf->data() + used;
      used += r.len;
    }
  };
  for (uint64_t seed = 10; seed < 20; ++seed) {
    AlignedBuffer buf;
    std::vector<ReadRequest> reqs;
    make(seed, &buf, &reqs);
    std::unique_ptr<PendingReads> pending = reader_->Submit(absl::MakeSpan(reqs));
    uint64_t work = seed;
    for (int i = 0; i < 10000; ++i) work = work * 6364136223846793005u + 1;  // CPU work
    ASSERT_OK(pending->Wait());
    EXPECT_OK(pending->Wait());  // the same answer again
    EXPECT_NE(work, seed);
    CheckBatch(reqs);
  }
  {
    AlignedBuffer buf;
    std::vector<ReadRequest> reqs;
    make(30, &buf, &reqs);
    std::unique_ptr<PendingReads> dropped = reader_->Submit(absl::MakeSpan(reqs));
    dropped.reset();  // waits for what is in flight
  }
  AlignedBuffer buf1, buf2;
  std::vector<ReadRequest> first, second;
  make(31, &buf1, &first);
  make(32, &buf2, &second);
  std::unique_ptr<PendingReads> one = reader_->Submit(absl::MakeSpan(first));
  std::unique_ptr<PendingReads> two = reader_->Submit(absl::MakeSpan(second));
  if (reader_->backend() == IoBackend::kIoUring && !GetParam().injects_faults) {
    EXPECT_THAT(two->Wait(), StatusIs(absl::StatusCode::kFailedPrecondition));
  } else {
    ASSERT_OK(two->Wait());
    CheckBatch(second);
  }
  ASSERT_OK(one->Wait());
  CheckBatch(first);
  // And the reader reads on.
  RunRandomBatches(33, 3, /*use_scratch=*/true);
}

TEST_P(BlockReaderConformanceTest, ConcurrentThreadsMatchTheFile) {
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back(
        [this, t] { RunRandomBatches(100 + t, 8, t % 2 == 0, t >= 2); });
  }
  for (auto& th : threads) th.join();
}

TEST_P(BlockReaderConformanceTest, EmptyBatchAndEmptyRequest) {
  EXPECT_OK(reader_->ReadBatch({}));
  std::vector<ReadRequest> reqs(1);
  reqs[0].len = 0;
  ASSERT_OK_AND_ASSIGN(reqs[0].buffer, reader_->Scratch(4096));
  ASSERT_OK(reader_->ReadBatch(absl::MakeSpan(reqs)));
  EXPECT_OK(reqs[0].status);
  EXPECT_EQ(reqs[0].bytes_read, 0u);
}

TEST_P(BlockReaderConformanceTest, ReadsPastTheEndAreOutOfRange) {
  if (GetParam().injects_faults) GTEST_SKIP() << "faults would mask the end";
  const size_t a = std::max<size_t>(reader_->alignment(), 512);
  ASSERT_OK_AND_ASSIGN(AlignedBuffer buf, AlignedBuffer::Allocate(3 * 4096, 4096));
  std::vector<ReadRequest> reqs(3);
  // Straddles the end: the tail of the file, then nothing.
  reqs[0].offset = AlignDown(kFileSize - 10, a);
  reqs[0].len = 2 * a;
  reqs[0].buffer = buf.data();
  // Wholly past the end.
  reqs[1].offset = AlignUp(kFileSize, a) + 4 * a;
  reqs[1].len = a;
  reqs[1].buffer = buf.data() + 4096;
  // A healthy request in the same batch.
  reqs[2].offset = 0;
  reqs[2].len = a;
  reqs[2].buffer = buf.data() + 8192;
  ASSERT_OK(reader_->ReadBatch(absl::MakeSpan(reqs)));
  EXPECT_THAT(reqs[0].status,
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("past the end")));
  EXPECT_EQ(reqs[0].bytes_read, kFileSize - reqs[0].offset);
  for (size_t k = 0; k < reqs[0].bytes_read; ++k) {
    ASSERT_EQ(buf.data()[k], ByteAt(reqs[0].offset + k));
  }
  EXPECT_THAT(reqs[1].status, StatusIs(absl::StatusCode::kOutOfRange, ::testing::_));
  EXPECT_EQ(reqs[1].bytes_read, 0u);
  EXPECT_OK(reqs[2].status);
  EXPECT_EQ(buf.data()[8192 + 7], ByteAt(7));
}

TEST_P(BlockReaderConformanceTest, MisalignedRequestFailsAloneUnderODirect) {
  if (!reader_->direct_io() || GetParam().injects_faults) {
    GTEST_SKIP() << "alignment applies to O_DIRECT readers";
  }
  const size_t a = reader_->alignment();
  ASSERT_OK_AND_ASSIGN(AlignedBuffer buf, AlignedBuffer::Allocate(4 * a, a));
  std::vector<ReadRequest> reqs(2);
  reqs[0].offset = a + 1;  // misaligned offset
  reqs[0].len = a;
  reqs[0].buffer = buf.data();
  reqs[1].offset = 2 * a;
  reqs[1].len = a;
  reqs[1].buffer = buf.data() + 2 * a;
  ASSERT_OK(reader_->ReadBatch(absl::MakeSpan(reqs)));
  EXPECT_THAT(reqs[0].status,
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("aligned")));
  EXPECT_OK(reqs[1].status);
  EXPECT_EQ(buf.data()[2 * a + 3], ByteAt(2 * a + 3));
}

INSTANTIATE_TEST_SUITE_P(
    AllReaders, BlockReaderConformanceTest, ::testing::ValuesIn(Backends()),
    [](const ::testing::TestParamInfo<Backend>& info) { return info.param.name; });

TEST(MakeBlockReaderTest, ChoosesABackendAndHonoursTheOverride) {
  TempDir tmp;
  const std::string path = tmp.File("f.bin");
  {
    std::vector<uint8_t> bytes(8192, 1);
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT, 0644);
    ASSERT_EQ(::write(fd, bytes.data(), bytes.size()), 8192);
    ::close(fd);
  }
  BlockReaderOptions pread;
  pread.backend = IoBackend::kPread;
  ASSERT_OK_AND_ASSIGN(auto r1, MakeBlockReader(path, pread));
  EXPECT_EQ(r1->backend(), IoBackend::kPread);
  ASSERT_OK_AND_ASSIGN(auto r2, MakeBlockReader(path));
  EXPECT_EQ(r2->backend(), ProbeIoUring().available ? IoBackend::kIoUring
                                                    : IoBackend::kPread);
  BlockReaderOptions uring;
  uring.backend = IoBackend::kIoUring;
  auto r3 = MakeBlockReader(path, uring);
  if (ProbeIoUring().available) {
    EXPECT_OK(r3.status());
  } else {
    EXPECT_THAT(r3, StatusIs(absl::StatusCode::kFailedPrecondition,
                             HasSubstr("io_uring")));
  }
  EXPECT_THAT(MakeBlockReader(tmp.File("nope.bin")),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("nope.bin")));
  BlockReaderOptions bad;
  bad.queue_depth = 0;
  EXPECT_THAT(MakeBlockReader(path, bad),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("queue_depth")));
}

TEST(MakeBlockReaderTest, ParsesBackendNames) {
  ASSERT_OK_AND_ASSIGN(IoBackend b, ParseIoBackend("io_uring"));
  EXPECT_EQ(b, IoBackend::kIoUring);
  ASSERT_OK_AND_ASSIGN(b, ParseIoBackend("PREAD"));
  EXPECT_EQ(b, IoBackend::kPread);
  EXPECT_THAT(ParseIoBackend("aio"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("auto, io_uring or pread")));
  EXPECT_STREQ(IoBackendName(IoBackend::kIoUring), "io_uring");
}

}  // namespace
}  // namespace zoom::storage
