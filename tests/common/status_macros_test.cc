#include "common/status_macros.h"

#include <memory>

#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace zoom {
namespace {

using ::zoom::testing::StatusIs;

absl::Status FailIf(bool fail) {
  return fail ? absl::InternalError("boom") : absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<int>> MakeInt(bool fail, int v) {
  if (fail) return absl::NotFoundError("no int");
  return std::make_unique<int>(v);
}

absl::Status Chain(bool fail_first, bool fail_second, int* calls) {
  ++*calls;
  ZOOM_RETURN_IF_ERROR(FailIf(fail_first));
  ++*calls;
  ZOOM_RETURN_IF_ERROR(FailIf(fail_second));
  ++*calls;
  return absl::OkStatus();
}

absl::StatusOr<int> Sum(bool fail) {
  ZOOM_ASSIGN_OR_RETURN(auto a, MakeInt(false, 2));  // move-only value
  ZOOM_ASSIGN_OR_RETURN(std::unique_ptr<int> b, MakeInt(fail, 3));
  int c = 0;
  ZOOM_ASSIGN_OR_RETURN(c, absl::StatusOr<int>(4));  // existing lvalue
  return *a + *b + c;
}

TEST(StatusMacrosTest, ReturnIfErrorStopsAtFirstError) {
  int calls = 0;
  EXPECT_OK(Chain(false, false, &calls));
  EXPECT_EQ(calls, 3);
  calls = 0;
  EXPECT_THAT(Chain(true, false, &calls),
              StatusIs(absl::StatusCode::kInternal, "boom"));
  EXPECT_EQ(calls, 1);
  calls = 0;
  EXPECT_THAT(Chain(false, true, &calls),
              StatusIs(absl::StatusCode::kInternal, "boom"));
  EXPECT_EQ(calls, 2);
}

TEST(StatusMacrosTest, AssignOrReturn) {
  ASSERT_OK_AND_ASSIGN(int v, Sum(false));
  EXPECT_EQ(v, 9);
  EXPECT_THAT(Sum(true), StatusIs(absl::StatusCode::kNotFound, "no int"));
}

}  // namespace
}  // namespace zoom
