// WorkerPool (server/grpc/worker_pool.h): inline runs, held work, and the
// drain a server's shutdown goes through.
#include "server/grpc/worker_pool.h"

#include <atomic>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace zoom {
namespace {

using ::testing::HasSubstr;
using ::zoom::testing::StatusIs;

// Inline runs (issue 19 §3): the caller's thread may run a request when
// nothing of its class is queued, the class is under its cap (an inline
// run counts against it) and the inline slot is free.
TEST(WorkerPoolTest, InlineRunsOnlyWhenNothingWaitsAndCountAgainstTheCap) {
  server::WorkerPoolOptions o;
  o.threads = 1;
  o.max_inline = 1;
  o.limits[static_cast<int>(server::WorkClass::kRead)].max_running = 1;
  server::WorkerPool pool(o);
  ASSERT_TRUE(pool.TryBeginInline(server::WorkClass::kRead));
  EXPECT_FALSE(pool.TryBeginInline(server::WorkClass::kRead));  // the slot is taken
  // The inline run holds the reads' one place: a queued read waits for it.
  std::atomic<bool> ran{false};
  ASSERT_OK(pool.TrySubmit(server::WorkClass::kRead, 1, absl::InfiniteFuture(),
                           [&] { ran = true; }));
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_FALSE(ran.load());
  pool.EndInline(server::WorkClass::kRead);
  const absl::Time end = absl::Now() + absl::Seconds(60);
  while (!ran.load() && absl::Now() < end) absl::SleepFor(absl::Milliseconds(1));
  EXPECT_TRUE(ran.load());
  // Another class is not held by the reads' inline run; a pool without
  // inline runs never grants one.
  ASSERT_TRUE(pool.TryBeginInline(server::WorkClass::kAdmin));
  pool.EndInline(server::WorkClass::kAdmin);
  EXPECT_EQ(pool.inline_runs(), 2u);
  server::WorkerPool plain(2);
  EXPECT_FALSE(plain.TryBeginInline(server::WorkClass::kRead));
}

// Held work (a router's search waiting for its nodes, no worker busy):
// its units count against the class's queue limit until released, so a
// flood is shed as queued work would be.
TEST(WorkerPoolTest, HeldUnitsCountAgainstTheQueueLimitUntilReleased) {
  server::WorkerPoolOptions o;
  o.threads = 1;
  o.limits[static_cast<int>(server::WorkClass::kRead)].max_queued_units = 10;
  server::WorkerPool pool(o);
  pool.Hold(server::WorkClass::kRead, 8);
  EXPECT_EQ(pool.held_units(server::WorkClass::kRead), 8u);
  EXPECT_THAT(pool.TrySubmit(server::WorkClass::kRead, 3, absl::InfiniteFuture(), [] {}),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("holds 8 of 10")));
  // Another class is not held by the reads.
  absl::Notification admin;
  ASSERT_OK(pool.TrySubmit(server::WorkClass::kAdmin, 3, absl::InfiniteFuture(),
                           [&] { admin.Notify(); }));
  ASSERT_TRUE(admin.WaitForNotificationWithTimeout(absl::Seconds(60)));
  pool.Release(server::WorkClass::kRead, 8);
  EXPECT_EQ(pool.held_units(server::WorkClass::kRead), 0u);
  absl::Notification read;
  ASSERT_OK(pool.TrySubmit(server::WorkClass::kRead, 3, absl::InfiniteFuture(),
                           [&] { read.Notify(); }));
  ASSERT_TRUE(read.WaitForNotificationWithTimeout(absl::Seconds(60)));
}

// The drain (zoom_server.h, Shutdown): a call that starts is refused with
// the drain's status and not counted; the calls already open go on (their
// later work is admitted) and WaitIdle waits for them, for queued and
// running work and for held units. A deadline in the past answers at once.
TEST(WorkerPoolTest, ADrainRefusesNewCallsAndWaitsForTheOpenOnes) {
  server::WorkerPool pool(2);
  server::OpenedCall open;
  ASSERT_OK(open.Open(&pool));
  EXPECT_EQ(pool.open_calls(), 1);
  EXPECT_FALSE(pool.TryBeginInline(server::WorkClass::kRead));  // max_inline 0
  absl::Notification release, started, ran_later;
  ASSERT_OK(pool.TrySubmit(server::WorkClass::kWrite, 1, absl::InfiniteFuture(), [&] {
    started.Notify();
    release.WaitForNotification();
  }));
  ASSERT_TRUE(started.WaitForNotificationWithTimeout(absl::Seconds(60)));

  pool.Drain(absl::UnavailableError("draining"));
  server::OpenedCall late;
  EXPECT_THAT(late.Open(&pool), StatusIs(absl::StatusCode::kUnavailable, HasSubstr("draining")));
  EXPECT_EQ(pool.open_calls(), 1);  // the refused call is not counted
  // The open call's next message is still admitted.
  ASSERT_OK(pool.TrySubmit(server::WorkClass::kRead, 1, absl::InfiniteFuture(),
                           [&] { ran_later.Notify(); }));
  ASSERT_TRUE(ran_later.WaitForNotificationWithTimeout(absl::Seconds(60)));

  EXPECT_FALSE(pool.WaitIdle(absl::InfinitePast()));  // a call is open, a task runs
  open.Release();
  EXPECT_EQ(pool.open_calls(), 0);
  EXPECT_FALSE(pool.WaitIdle(absl::InfinitePast()));  // the task still runs
  release.Notify();
  EXPECT_TRUE(pool.WaitIdle(absl::Now() + absl::Seconds(60)));
  pool.Hold(server::WorkClass::kRead, 1);  // a routed search waiting for its nodes
  EXPECT_FALSE(pool.WaitIdle(absl::InfinitePast()));
  pool.Release(server::WorkClass::kRead, 1);
  EXPECT_TRUE(pool.WaitIdle(absl::InfinitePast()));
  // A null pool (no server: tests, tools) always opens.
  server::OpenedCall none;
  EXPECT_OK(none.Open(nullptr));
}

}  // namespace
}  // namespace zoom
