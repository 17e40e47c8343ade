#include "common/process.h"

#include <unistd.h>

#include <climits>
#include <filesystem>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace zoom {
namespace {

using ::testing::HasSubstr;
using ::zoom::testing::IsOkAndHolds;
using ::zoom::testing::StatusIs;

// Spins for about `seconds` of CPU time.
void Burn(double seconds) {
  const double until = ProcessCpuSeconds() + seconds;
  volatile uint64_t x = 0;
  while (ProcessCpuSeconds() < until) {
    for (int i = 0; i < 100000; ++i) x = x + i;
  }
}

TEST(ProcessTest, CpuSecondsGrowWithWork) {
  const double self_before = ProcessCpuSeconds();
  const double proc_before = CpuSecondsOf(::getpid());
  Burn(0.05);
  EXPECT_GE(ProcessCpuSeconds() - self_before, 0.05);
  // /proc counts in clock ticks (1/100 s): the same time, coarser.
  EXPECT_GT(CpuSecondsOf(::getpid()), proc_before);
  EXPECT_NEAR(CpuSecondsOf(::getpid()), ProcessCpuSeconds(), 0.1);
}

TEST(ProcessTest, ResidentSetOfThisAndAnotherProcess) {
  const uint64_t rss = CurrentRssBytes();
  EXPECT_GT(rss, 0u);
  EXPECT_EQ(rss % 1024, 0u);  // /proc reports kB
  EXPECT_GE(PeakRssBytes(), rss);
  const uint64_t mine = RssBytesOf(::getpid());
  EXPECT_GT(mine, 0u);
  EXPECT_GE(PeakRssBytesOf(::getpid()), mine);
  EXPECT_GT(RssBytesOf(::getppid()), 0u);  // another process: the one that ran this test
}

TEST(ProcessTest, AnUnknownProcessReadsAsZero) {
  EXPECT_EQ(RssBytesOf(INT_MAX), 0u);
  EXPECT_EQ(PeakRssBytesOf(INT_MAX), 0u);
  EXPECT_EQ(CpuSecondsOf(INT_MAX), 0);
}

TEST(ProcessTest, LoadAverageAndSelfDir) {
  EXPECT_GE(LoadAverage1m(), 0);
  const std::string dir = SelfDir();
  EXPECT_TRUE(std::filesystem::is_directory(dir)) << dir;
  EXPECT_EQ(dir, std::filesystem::read_symlink("/proc/self/exe").parent_path().string());
}

TEST(ProcessTest, RunCommandReturnsStdoutOrTheExitStatus) {
  EXPECT_THAT(RunCommand("printf 'a\\nb'; echo err >&2"), IsOkAndHolds(std::string("a\nb")));
  EXPECT_THAT(RunCommand("true"), IsOkAndHolds(std::string()));
  EXPECT_THAT(RunCommand("echo partial; exit 3"),
              StatusIs(absl::StatusCode::kInternal,
                       HasSubstr("command failed (status 768): echo partial; exit 3")));
}

}  // namespace
}  // namespace zoom
