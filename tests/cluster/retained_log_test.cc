// RetainedLog: its record's golden bytes (version 1: the version, the id's
// length, the id, a ZLOG entry: tests/data/golden/retained_log_v1.hex,
// whose entry is golden/log_entry_v1_delete.zlog under the id "old2");
// records past the position dropped at open; trimming by bytes keeps the
// newest and moves covered_from; a rewind drops what follows.
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

TEST(RetainedLogTest, RecordMatchesItsGoldenBytes) {
  ASSERT_OK_AND_ASSIGN(std::string hex,
                       ReadFileToString(testing::TestDataPath("golden/retained_log_v1.hex")));
  const std::string golden = absl::HexStringToBytes(absl::StripAsciiWhitespace(hex));
  ASSERT_OK_AND_ASSIGN(std::string entry, ReadFileToString(testing::TestDataPath(
                                              "golden/log_entry_v1_delete.zlog")));
  EXPECT_EQ(EncodeRetainedRecord("old2", entry), golden);
  ASSERT_OK_AND_ASSIGN(RetainedEntry e, DecodeRetainedRecord(9, golden));
  EXPECT_EQ(e.sequence, 9u);
  EXPECT_EQ(e.id, "old2");
  EXPECT_EQ(e.data, entry);
  ASSERT_OK_AND_ASSIGN(LogEntry decoded, DecodeLogEntry(e.data));
  EXPECT_EQ(decoded.op, LogOp::kDelete);
  // Not a record: refused, never read past.
  EXPECT_FALSE(DecodeRetainedRecord(9, "").ok());
  EXPECT_FALSE(DecodeRetainedRecord(9, std::string("\x02\x00", 2)).ok());
  EXPECT_FALSE(DecodeRetainedRecord(9, std::string("\x01\x09" "abc", 5)).ok());
}

TEST(RetainedLogTest, KeepsTrimsRewindsAndReopens) {
  TempDir dir;
  storage::MetadataOptions mo;
  ASSERT_OK_AND_ASSIGN(auto store, storage::MetadataStore::Open(dir.File("meta"), mo));
  const std::string data(100, 'x');
  {
    ASSERT_OK_AND_ASSIGN(auto log, RetainedLog::Open(store.get(), 3, 0, 1000));
    EXPECT_EQ(log->covered_from(), 0u);
    for (uint64_t s = 1; s <= 5; ++s) ASSERT_OK(log->Append(s * 2, absl::StrCat("m", s), data));
    EXPECT_EQ(log->Sequences(), (std::vector<uint64_t>{2, 4, 6, 8, 10}));
    EXPECT_EQ(log->IdAt(6), "m3");
    EXPECT_FALSE(log->IdAt(5).has_value());
    // Past 1000 bytes: the oldest go, covered_from follows.
    for (uint64_t s = 6; s <= 12; ++s) ASSERT_OK(log->Append(s * 2, absl::StrCat("m", s), data));
    EXPECT_LE(log->bytes(), 1000u);
    EXPECT_EQ(log->Sequences().back(), 24u);
    EXPECT_EQ(log->covered_from(), log->Sequences().front() - 2);
    ASSERT_OK_AND_ASSIGN(std::vector<RetainedEntry> after, log->After(20));
    ASSERT_EQ(after.size(), 2u);
    EXPECT_EQ(after[0].sequence, 22u);
    EXPECT_EQ(after[1].id, "m12");
    EXPECT_EQ(after[1].data, data);
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
