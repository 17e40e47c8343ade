#include "common/report_table.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "common/binary_io.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_env.h"

namespace zoom {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::zoom::testing::IsOkAndHolds;
using ::zoom::testing::StatusIs;
using ::zoom::testing::TempDir;

// The bytes zoombench and zoomload have always written (their readers:
// loadtest/grpc_overhead.py, the tests that parse --json).
TEST(JsonLinesTest, WritesOneObjectPerLineInTheGivenOrder) {
  TempDir tmp;
  const std::string path = tmp.File("out.json");
  {
    JsonLines json(path);
    ASSERT_TRUE(json.ok());
    json.Line({{"name", std::string("zoomd \"x\"\n")},
               {"qps", 1234.5678},
               {"tiny", 1.5e-7},
               {"recall_at_100", std::numeric_limits<double>::quiet_NaN()},
               {"inf", std::numeric_limits<double>::infinity()},
               {"bytes", int64_t{9007199254740993}},
               {"neg", int64_t{-3}},
               {"exact", true},
               {"degraded", false}});
    // Flushed at once: a run cut short keeps its lines.
    EXPECT_THAT(ReadFileToString(path),
                IsOkAndHolds(std::string(
                    "{\"name\": \"zoomd \\\"x\\\"\\n\", \"qps\": 1234.57, \"tiny\": 1.5e-07, "
                    "\"recall_at_100\": null, \"inf\": null, \"bytes\": 9007199254740993, "
                    "\"neg\": -3, \"exact\": true, \"degraded\": false}\n")));
    json.Line({});
  }
  EXPECT_THAT(ReadFileToString(path), IsOkAndHolds(HasSubstr("}\n{}\n")));
}

TEST(JsonLinesTest, NoPathWritesNothingAndABadPathIsNotOk) {
  JsonLines none("");
  EXPECT_TRUE(none.ok());
  none.Line({{"a", int64_t{1}}});  // a no-op
  TempDir tmp;
  JsonLines bad(tmp.File("no/such/dir/out.json"));
  EXPECT_FALSE(bad.ok());
  bad.Line({{"a", int64_t{1}}});  // a no-op too
}

TEST(JsonLinesTest, ReopeningTruncates) {
  TempDir tmp;
  const std::string path = tmp.File("out.json");
  { JsonLines(path).Line({{"run", int64_t{1}}}); }
  { JsonLines(path).Line({{"run", int64_t{2}}}); }
  EXPECT_THAT(ReadFileToString(path), IsOkAndHolds(std::string("{\"run\": 2}\n")));
}

TEST(TableTest, PrintsTheHeaderAndRuleOnceThenRightAlignedRows) {
  ::testing::internal::CaptureStdout();
  {
    Table table({"threads", "QPS"}, 8);
    table.Row({"1", Fmt(1234.56, 0)});
    table.Row({"16", "a-long-cell"});  // wider than the column: printed whole
  }
  EXPECT_EQ(::testing::internal::GetCapturedStdout(),
            " threads     QPS\n"
            "----------------\n"
            "       1    1235\n"
            "      16a-long-cell\n");
  ::testing::internal::CaptureStdout();
  Table empty({"a"});
  EXPECT_EQ(::testing::internal::GetCapturedStdout(), "");  // nothing before a row
  ::testing::internal::CaptureStdout();
  empty.Row({"x"});
  EXPECT_EQ(::testing::internal::GetCapturedStdout(),
            "           a\n------------\n           x\n");  // width 12 by default
}

// Both halves of the serving comparison write the same keys in the same
// order (loadtest/grpc_overhead.py reads them alike).
TEST(ServingRowTest, WritesTheSameKeysForEitherPath) {
  TempDir tmp;
  const std::string path = tmp.File("out.json");
  {
    JsonLines json(path);
    Table table({"callers", "path", "recall@10", "QPS", "p50_us", "p99_us", "reads/q", "cpu_us"});
    ServingFigures f;
    f.recall_at_10 = 0.92415;
    f.qps = 1234.4;
    f.p50_us = 800;
    f.p99_us = 2000;
    f.reads_per_query = 49.9;
    f.cpu_us_per_query = 321;
    ServingRow("grpc", "glove", "grpc", "gRPC", 4, f, table, json);
  }
  EXPECT_THAT(ReadFileToString(path),
              IsOkAndHolds(std::string(
                  "{\"workload\": \"grpc\", \"dataset\": \"glove\", \"path\": \"grpc\", "
                  "\"callers\": 4, \"recall_at_10\": 0.92415, \"qps\": 1234.4, \"p50_us\": 800, "
                  "\"p99_us\": 2000, \"reads_per_query\": 49.9, \"cpu_us_per_query\": 321}\n")));
}

TEST(FmtTest, FixedDigits) {
  EXPECT_EQ(Fmt(2.345, 2), "2.35");
  EXPECT_EQ(Fmt(7, 0), "7");
  EXPECT_EQ(Fmt(0.97333333, 4), "0.9733");
  EXPECT_EQ(Fmt(12.25), "12.2");  // one digit by default; printf rounds to even here
  EXPECT_EQ(Fmt(std::nan("")), "nan");
}

TEST(PercentileTest, NearestRank) {
  const std::vector<double> ten = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  EXPECT_EQ(Percentile(ten, 0), 1);
  EXPECT_EQ(Percentile(ten, 10), 1);
  EXPECT_EQ(Percentile(ten, 11), 2);
  EXPECT_EQ(Percentile(ten, 50), 5);
  EXPECT_EQ(Percentile(ten, 99), 10);
  EXPECT_EQ(Percentile(ten, 99.9), 10);
  EXPECT_EQ(Percentile(ten, 100), 10);
  EXPECT_EQ(Percentile(ten, 150), 10);  // clamped
  EXPECT_EQ(Percentile({42}, 50), 42);
  EXPECT_TRUE(std::isnan(Percentile({}, 50)));
}

TEST(ParseIntListTest, PositiveIntegersOnly) {
  ASSERT_OK_AND_ASSIGN(std::vector<int> v, ParseIntList("1,2,4"));
  EXPECT_THAT(v, ElementsAre(1, 2, 4));
  ASSERT_OK_AND_ASSIGN(v, ParseIntList("16,,32,"));
  EXPECT_THAT(v, ElementsAre(16, 32));
  EXPECT_THAT(ParseIntList("1,0").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bad number '0' in '1,0'")));
  EXPECT_THAT(ParseIntList("2,-1").status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseIntList("x").status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseIntList(",").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("empty list ','")));
}

}  // namespace
}  // namespace zoom
