#include <fstream>
#include <string>

#include "common/binary_io.h"
#include "common/json.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_env.h"

namespace zoom {
namespace {

using ::testing::HasSubstr;
using ::zoom::testing::StatusIs;

TEST(ReadFileToStringTest, ReadsBytesAndNamesAMissingFile) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/f.bin";
  const std::string bytes("a\0b\nc", 5);
  {
    std::ofstream out(path, std::ios::binary);
    out << bytes;
  }
  absl::StatusOr<std::string> read = ReadFileToString(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, bytes);
  absl::StatusOr<std::string> missing = ReadFileToString(dir.path() + "/nope");
  EXPECT_THAT(missing.status(), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("/nope"));
}

TEST(JsonUintFieldTest, FindsTheFirstIntegerValueOfTheKey) {
  EXPECT_EQ(JsonUintField(R"({"dim": 256, "V": 10000})", "dim"), 256u);
  EXPECT_EQ(JsonUintField(R"({"V":10000})", "V"), 10000u);
  EXPECT_EQ(JsonUintField("{\n  \"topk\" :\t100\n}", "topk"), 100u);
  // A mention of the key that is not a key with a number is skipped.
  EXPECT_EQ(JsonUintField(R"({"note": "dim", "dim": 7})", "dim"), 7u);
  EXPECT_EQ(JsonUintField(R"({"model": {"dim": 3}})", "dim"), 3u);
}

TEST(JsonUintFieldTest, AbsentOrNotAnUnsignedInteger) {
  EXPECT_EQ(JsonUintField(R"({"dim": 256})", "d"), std::nullopt);
  EXPECT_EQ(JsonUintField(R"({"dim": "256"})", "dim"), std::nullopt);
  EXPECT_EQ(JsonUintField(R"({"dim": -1})", "dim"), std::nullopt);
  EXPECT_EQ(JsonUintField(R"({"dim": 12345678901234567890123})", "dim"), std::nullopt);
  EXPECT_EQ(JsonUintField("", "dim"), std::nullopt);
  // Not integers (2.5 used to read as 2).
  EXPECT_EQ(JsonUintField(R"({"vocab_size": 2.5})", "vocab_size"), std::nullopt);
  EXPECT_EQ(JsonUintField(R"({"dim": 1e3})", "dim"), std::nullopt);
  EXPECT_EQ(JsonUintField(R"({"dim": 16E0})", "dim"), std::nullopt);
}

}  // namespace
}  // namespace zoom
