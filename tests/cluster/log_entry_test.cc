// LogEntry: the golden files of version 1 (written by a Python script from
// the format's description), round trips of every operation, and bytes
// that are not an entry: every truncation and every single-byte change is
// refused with a status, never a crash or an allocation the bytes could
// not hold.
#include "server/cluster/log_entry.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/binary_io.h"
#include "common/crc32c.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_env.h"

namespace zoom::cluster {
namespace {

using server::FieldIndexType;
using server::FieldValue;
using server::PayloadFields;
using ::testing::HasSubstr;
using ::zoom::testing::StatusIs;
using ::zoom::testing::TestDataPath;

// The entries the golden files hold (make_log_entry_v1.py).
std::vector<std::pair<std::string, LogEntry>> GoldenEntries() {
  std::vector<std::pair<std::string, LogEntry>> out;
  LogEntry up;
  up.op = LogOp::kUpsert;
  up.dim = 3;
  LogPoint a{7, {0.5f, -1.25f, 3.0f}, "seven", {}};
  a.fields["tag"] = FieldValue::Of(std::string("red"));
  a.fields["year"] = FieldValue::Of(int64_t{2018});
  up.points = {a, LogPoint{(uint64_t{1} << 63) + 5, {0.0f, 1.0f, -0.0f}, "", {}}};
  out.emplace_back("upsert", up);
  LogEntry del;
  del.op = LogOp::kDelete;
  del.ids = {1, 2, UINT64_MAX};
  out.emplace_back("delete", del);
  LogEntry set;
  set.op = LogOp::kSetPayload;
  set.overwrite = true;
  set.ids = {4, 9};
  set.fields["tag"] = FieldValue::Of(std::string("blue"));
  out.emplace_back("set_payload", set);
  LogEntry dp;
  dp.op = LogOp::kDeletePayload;
  dp.ids = {4};
  dp.keys = {"tag", "year"};
  out.emplace_back("delete_payload", dp);
  LogEntry ci;
  ci.op = LogOp::kCreateFieldIndex;
  ci.index_type = FieldIndexType::kInteger;
  ci.field = "year";
  out.emplace_back("create_field_index", ci);
  LogEntry di;
  di.op = LogOp::kDeleteFieldIndex;
  di.field = "tag";
  out.emplace_back("delete_field_index", di);
  return out;
}

TEST(LogEntryTest, GoldenFilesOfVersion1) {
  for (const auto& [name, entry] : GoldenEntries()) {
    SCOPED_TRACE(name);
    ASSERT_OK_AND_ASSIGN(std::string golden,
                         ReadFileToString(TestDataPath(absl::StrCat("golden/log_entry_v1_", name,
                                                                    ".zlog"))));
    EXPECT_EQ(EncodeLogEntry(entry), golden);
    ASSERT_OK_AND_ASSIGN(LogEntry decoded, DecodeLogEntry(golden));
    EXPECT_EQ(decoded, entry);
  }
}

// Version 2: a copy's write version after the header (the rest as in 1).
TEST(LogEntryTest, GoldenFileOfVersion2) {
  LogEntry del;
  del.op = LogOp::kDelete;
  del.ids = {1, 2, UINT64_MAX};
  del.version = 1765000000123456789u;
  ASSERT_OK_AND_ASSIGN(std::string golden,
                       ReadFileToString(TestDataPath("golden/log_entry_v2_delete.zlog")));
  EXPECT_EQ(EncodeLogEntry(del), golden);
  ASSERT_OK_AND_ASSIGN(LogEntry decoded, DecodeLogEntry(golden));
  EXPECT_EQ(decoded, del);
  // Without a version an entry is still written as version 1.
  del.version = 0;
  ASSERT_OK_AND_ASSIGN(std::string v1,
                       ReadFileToString(TestDataPath("golden/log_entry_v1_delete.zlog")));
  EXPECT_EQ(EncodeLogEntry(del), v1);
}

TEST(LogEntryTest, UpsertSizeBoundIsExactWithoutPayloads) {
  LogEntry up;
  up.op = LogOp::kUpsert;
  up.dim = 16;
  for (uint64_t i = 0; i < 10; ++i) up.points.push_back({i, std::vector<float>(16, 1.0f), "", {}});
  EXPECT_EQ(EncodeLogEntry(up).size(), UpsertEntryBytes(16, 10, 0));
  up.points[3].payload = "abc";
  EXPECT_EQ(EncodeLogEntry(up).size(), UpsertEntryBytes(16, 10, 3));
}

TEST(LogEntryTest, EveryTruncationAndByteChangeIsRefused) {
  std::vector<std::pair<std::string, LogEntry>> entries = GoldenEntries();
  entries.push_back(entries[0]);
  entries.back().first = "upsert, version 2";
  entries.back().second.version = 77;
  for (const auto& [name, entry] : entries) {
    SCOPED_TRACE(name);
    const std::string bytes = EncodeLogEntry(entry);
    for (size_t n = 0; n < bytes.size(); ++n) {
      EXPECT_FALSE(DecodeLogEntry(bytes.substr(0, n)).ok()) << n;
    }
    for (size_t i = 0; i < bytes.size(); ++i) {
      std::string bad = bytes;
      bad[i] ^= 0x5a;
      EXPECT_FALSE(DecodeLogEntry(bad).ok()) << i;
    }
    EXPECT_THAT(DecodeLogEntry(bytes + "x"), StatusIs(absl::StatusCode::kDataLoss));
  }
}

// Re-sealed with a valid CRC: what the structure checks must catch alone.
std::string Seal(std::string body_with_header) {
  std::string s = std::move(body_with_header);
  const uint32_t crc = Crc32c(s.data(), s.size());
  for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>(crc >> (8 * i)));
  return s;
}

TEST(LogEntryTest, LyingCountsNewerVersionsAndUnknownOps) {
  const std::string head = std::string("ZLOG\x01\x00", 6);
  // An upsert claiming 2^32-1 points of dimension 2^32-1 in a few bytes.
  EXPECT_THAT(DecodeLogEntry(Seal(head + std::string("\x01\x00\xff\xff\xff\xff\xff\xff\xff\xff",
                                                     10))),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("count")));
  EXPECT_THAT(DecodeLogEntry(Seal(head + std::string("\x02\x00\xff\xff\xff\x7f", 6))),
              StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(DecodeLogEntry(Seal(head + std::string("\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00",
                                                     10))),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("dimension 0")));
  EXPECT_THAT(DecodeLogEntry(Seal(std::string("ZLOG\x03\x00\x02\x00", 8))),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("upgrade")));
  // Version 2 with no version, or a version 0.
  EXPECT_THAT(DecodeLogEntry(Seal(std::string("ZLOG\x02\x00\x02\x00", 8))),
              StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(DecodeLogEntry(Seal(std::string("ZLOG\x02\x00\x02\x00", 8) + std::string(8, '\0') +
                                  std::string(4, '\0'))),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("version 0")));
  EXPECT_THAT(DecodeLogEntry(Seal(head + std::string("\x09\x00", 2))),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("unknown operation")));
  EXPECT_THAT(DecodeLogEntry(Seal(head + std::string("\x05\x00\x09\x00\x00\x00\x00", 7))),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("field index type")));
  EXPECT_THAT(DecodeLogEntry("not an entry"), StatusIs(absl::StatusCode::kDataLoss));
}

}  // namespace
}  // namespace zoom::cluster
