// RetainedLog: its records' golden bytes (version 1: the version, the id's
// length, the id, the kind, then the points' ids or the entry:
// tests/data/golden/retained_log_v1_points.hex holds the record of
// golden/log_entry_v1_delete.zlog under the id "old2", ..._entry.hex that of
// golden/log_entry_v1_create_field_index.zlog under "fi"; still read;
// version 2 adds the write version and the log version after the id:
// retained_log_v2_points.hex, the first record again); records past
// the position dropped at open; trimming by bytes keeps the newest and
// moves covered_from; the entries' bytes kept in memory within their
// budget; a rewind drops what follows.
#include "server/cluster/retained_log.h"

#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/binary_io.h"
#include "gtest/gtest.h"
#include "server/cluster/log_entry.h"
#include "storage/metadata_store.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_env.h"

namespace zoom::cluster {
namespace {

using ::zoom::testing::TempDir;

std::string Golden(const std::string& name) {
  auto hex = ReadFileToString(testing::TestDataPath("golden/" + name));
  EXPECT_OK(hex.status());
  return hex.ok() ? absl::HexStringToBytes(absl::StripAsciiWhitespace(*hex)) : "";
}

TEST(RetainedLogTest, RecordsMatchTheirGoldenBytes) {
  ASSERT_OK_AND_ASSIGN(std::string del_bytes, ReadFileToString(testing::TestDataPath(
                                                  "golden/log_entry_v1_delete.zlog")));
  ASSERT_OK_AND_ASSIGN(LogEntry del, DecodeLogEntry(del_bytes));
  const std::string points = Golden("retained_log_v1_points.hex");
  const std::string points_v2 = Golden("retained_log_v2_points.hex");
  EXPECT_EQ(EncodeRetainedRecord("old2", del, del_bytes, 1765000000123456789u,
                                 1765000000123456790u),
            points_v2);
  ASSERT_OK_AND_ASSIGN(RetainedEntry e2, DecodeRetainedRecord(9, points_v2));
  EXPECT_EQ(e2.id, "old2");
  EXPECT_EQ(e2.version, 1765000000123456789u);
  EXPECT_EQ(e2.log_version, 1765000000123456790u);
  EXPECT_EQ(e2.points, (std::vector<uint64_t>{1, 2, UINT64_MAX}));
  for (size_t n = 0; n < points_v2.size(); ++n) {
    EXPECT_FALSE(DecodeRetainedRecord(9, points_v2.substr(0, n)).ok()) << n;
  }
  ASSERT_OK_AND_ASSIGN(RetainedEntry e, DecodeRetainedRecord(9, points));
  EXPECT_EQ(e.version, 0u);
  EXPECT_EQ(e.sequence, 9u);
  EXPECT_EQ(e.id, "old2");
  EXPECT_FALSE(e.data.has_value());
  EXPECT_EQ(e.points, (std::vector<uint64_t>{1, 2, UINT64_MAX}));

  ASSERT_OK_AND_ASSIGN(std::string fi_bytes, ReadFileToString(testing::TestDataPath(
                                                 "golden/log_entry_v1_create_field_index.zlog")));
  ASSERT_OK_AND_ASSIGN(LogEntry fi, DecodeLogEntry(fi_bytes));
  const std::string entry = Golden("retained_log_v1_entry.hex");
  ASSERT_OK_AND_ASSIGN(RetainedEntry f, DecodeRetainedRecord(3, entry));
  EXPECT_EQ(f.id, "fi");
  EXPECT_EQ(f.data, fi_bytes);
  EXPECT_TRUE(f.points.empty());
  // Not a record: refused, never read past.
  EXPECT_FALSE(DecodeRetainedRecord(9, "").ok());
  EXPECT_FALSE(DecodeRetainedRecord(9, std::string("\x03\x00\x01", 3)).ok());
  EXPECT_FALSE(DecodeRetainedRecord(9, std::string("\x02\x00\x01", 3)).ok());
  EXPECT_FALSE(DecodeRetainedRecord(9, std::string("\x01\x09" "abc", 5)).ok());
  EXPECT_FALSE(DecodeRetainedRecord(9, std::string("\x01\x00\x07", 3)).ok());
  std::string short_points = points.substr(0, points.size() - 3);
  EXPECT_FALSE(DecodeRetainedRecord(9, short_points).ok());
}

TEST(RetainedLogTest, KeepsTrimsRewindsAndReopens) {
  TempDir dir;
  storage::MetadataOptions mo;
  ASSERT_OK_AND_ASSIGN(auto store, storage::MetadataStore::Open(dir.File("meta"), mo));
  // A field-index entry: its record holds its bytes (about 100 of them).
  LogEntry e;
  e.op = LogOp::kCreateFieldIndex;
  e.field = std::string(80, 'f');
  const std::string data = EncodeLogEntry(e);
  {
    ASSERT_OK_AND_ASSIGN(auto log, RetainedLog::Open(store.get(), 3, 0, 1000, 250));
    EXPECT_EQ(log->covered_from(), 0u);
    for (uint64_t s = 1; s <= 5; ++s) {
      ASSERT_OK(log->Append(s * 2, absl::StrCat("m", s), e, data));
    }
    EXPECT_EQ(log->Sequences(), (std::vector<uint64_t>{2, 4, 6, 8, 10}));
    EXPECT_EQ(log->IdAt(6), "m3");
    EXPECT_FALSE(log->IdAt(5).has_value());
    // Past 1000 bytes: the oldest go, covered_from follows.
    for (uint64_t s = 6; s <= 12; ++s) {
      ASSERT_OK(log->Append(s * 2, absl::StrCat("m", s), e, data));
    }
    EXPECT_LE(log->bytes(), 1000u);
    EXPECT_EQ(log->Sequences().back(), 24u);
    EXPECT_EQ(log->covered_from(), log->Sequences().front() - 2);
    ASSERT_OK_AND_ASSIGN(std::vector<RetainedEntry> after, log->After(20));
    ASSERT_EQ(after.size(), 2u);
    EXPECT_EQ(after[0].sequence, 22u);
    EXPECT_EQ(after[1].id, "m12");
    EXPECT_EQ(after[1].data, data);
    // An upsert's record holds its points' ids; its bytes stay in memory
    // while among the newest (memory_bytes 250: about two entries).
    LogEntry up;
    up.op = LogOp::kUpsert;
    up.dim = 2;
    up.points.push_back({77, {1.0f, 2.0f}, "p", {}});
    const std::string up_bytes = EncodeLogEntry(up);
    ASSERT_GT(up_bytes.size() * 9, 250u);
    for (uint64_t s = 30; s <= 46; s += 2) ASSERT_OK(log->Append(s, "u", up, up_bytes));
    ASSERT_OK_AND_ASSIGN(std::vector<RetainedEntry> ups, log->After(28));
    ASSERT_EQ(ups.size(), 9u);
    EXPECT_EQ(ups[0].points, std::vector<uint64_t>{77});
    EXPECT_FALSE(ups[0].data.has_value());  // older than the memory budget
    EXPECT_EQ(ups[8].data, up_bytes);
    ASSERT_OK(log->DropAfter(20));
    EXPECT_EQ(log->Sequences().back(), 20u);
  }
  // Reopened at position 16 (a crash before the position reached 20): the
  // records after it are dropped; covered_from is kept.
  ASSERT_OK_AND_ASSIGN(auto log, RetainedLog::Open(store.get(), 3, 16, 1000));
  EXPECT_EQ(log->Sequences().back(), 16u);
  EXPECT_GT(log->covered_from(), 0u);
  // Another collection's records are its own; a fresh one at a restored
  // position is covered from there.
  ASSERT_OK_AND_ASSIGN(auto other, RetainedLog::Open(store.get(), 4, 77, 1000));
  EXPECT_EQ(other->size(), 0u);
  EXPECT_EQ(other->covered_from(), 77u);
}

}  // namespace
}  // namespace zoom::cluster
