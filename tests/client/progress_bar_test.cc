#include "client/progress_bar.h"

#include <algorithm>
#include <string>
#include <utility>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace zoom::client {
namespace {

ProgressBar::Options Opts(std::string prefix, bool lines, int tty) {
  ProgressBar::Options o;
  o.prefix = std::move(prefix);
  o.lines_when_not_a_tty = lines;
  o.tty_override = tty;
  return o;
}

using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::Not;
using ::testing::StartsWith;

TEST(ProgressBarTest, LineShowsPrefixBarFractionAndCounts) {
  ProgressBar bar(200, Opts("import", false, 0));
  bar.Update(50);
  const std::string line = bar.Line(/*final=*/false);
  EXPECT_THAT(line, StartsWith("import [" + std::string(7, '#') + std::string(23, '.') +
                               "]  25.0% 50/200 points "));
  EXPECT_THAT(line, MatchesRegex(".* [0-9]+ points/s( ETA [0-9]+s)?"));
  bar.Update(200);
  const std::string done = bar.Line(/*final=*/true);
  EXPECT_THAT(done, HasSubstr("[##############################] 100.0% 200/200 points"));
  EXPECT_THAT(done, MatchesRegex(".* [0-9]+\\.[0-9]s"));
  EXPECT_THAT(done, Not(HasSubstr("ETA")));
}

TEST(ProgressBarTest, NoPrefixAndEmptyTotal) {
  ProgressBar bar(0, Opts("", false, 0));
  EXPECT_THAT(bar.Line(false), StartsWith("[##############################] 100.0% 0/0 points"));
}

TEST(ProgressBarTest, NotATtyPrintsOnlyTheFinalLineUnlessAskedForLines) {
  testing::internal::CaptureStderr();
  {
    ProgressBar quiet(10, Opts("", false, 0));
    for (uint64_t i = 1; i <= 10; ++i) quiet.Update(i);
    quiet.Finish();
  }
  const std::string out = testing::internal::GetCapturedStderr();
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  EXPECT_THAT(out, EndsWith("\n"));
  EXPECT_THAT(out, Not(HasSubstr("\r")));

  testing::internal::CaptureStderr();
  {
    ProgressBar lines(10, Opts("import", true, 0));
    lines.Update(1);  // the first update draws at once
    lines.Finish();
  }
  const std::string two = testing::internal::GetCapturedStderr();
  EXPECT_EQ(std::count(two.begin(), two.end(), '\n'), 2) << two;
}

TEST(ProgressBarTest, TerminalRedrawsInPlace) {
  testing::internal::CaptureStderr();
  {
    ProgressBar bar(10, Opts("", false, 1));
    bar.Update(1);
    bar.Finish();
  }
  const std::string out = testing::internal::GetCapturedStderr();
  EXPECT_THAT(out, StartsWith("\r["));
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\r'), 2) << out;
}

}  // namespace
}  // namespace zoom::client
