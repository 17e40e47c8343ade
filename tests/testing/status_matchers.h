// File: tests/testing/status_matchers.h
//
// gMock matchers and assertions for absl::Status / StatusOr (the installed
// Abseil has none):
//
//   EXPECT_OK(store->Sync());
//   ASSERT_OK_AND_ASSIGN(auto store, VectorStore::Open(path));
//   EXPECT_THAT(reader.Read(1, buf), StatusIs(absl::StatusCode::kDataLoss,
//                                             HasSubstr("truncated")));
#ifndef ZOOM_TESTS_TESTING_STATUS_MATCHERS_H_
#define ZOOM_TESTS_TESTING_STATUS_MATCHERS_H_

#include <ostream>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace zoom::testing {

inline const absl::Status& GetStatus(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& s) {
  return s.status();
}

MATCHER_P2(StatusIs, code, message_matcher,
           "has code " + absl::StatusCodeToString(code)) {
  const absl::Status& s = ::zoom::testing::GetStatus(arg);
  *result_listener << "status is " << s;
  return s.code() == code &&
         ::testing::ExplainMatchResult(message_matcher,
                                       std::string(s.message()),
                                       result_listener);
}

// StatusIs(code): any message.
MATCHER_P(StatusIs, code, "has code " + absl::StatusCodeToString(code)) {
  const absl::Status& s = ::zoom::testing::GetStatus(arg);
  *result_listener << "status is " << s;
  return s.code() == code;
}

MATCHER(IsOk, "is OK") {
  const absl::Status& s = ::zoom::testing::GetStatus(arg);
  *result_listener << "status is " << s;
  return s.ok();
}

// A StatusOr that is OK and whose value `value_matcher` matches.
MATCHER_P(IsOkAndHolds, value_matcher, "is OK and holds a value that matches") {
  if (!arg.ok()) {
    *result_listener << "status is " << arg.status();
    return false;
  }
  return ::testing::ExplainMatchResult(value_matcher, *arg, result_listener);
}

}  // namespace zoom::testing

#define ZOOM_TESTING_CONCAT_INNER_(a, b) a##b
#define ZOOM_TESTING_CONCAT_(a, b) ZOOM_TESTING_CONCAT_INNER_(a, b)

#define EXPECT_OK(expr) EXPECT_THAT((expr), ::zoom::testing::IsOk())
#define ASSERT_OK(expr) ASSERT_THAT((expr), ::zoom::testing::IsOk())

#define ASSERT_OK_AND_ASSIGN(lhs, rexpr)                                   \
  ASSERT_OK_AND_ASSIGN_IMPL_(ZOOM_TESTING_CONCAT_(statusor_, __LINE__), \
                             lhs, rexpr)
#define ASSERT_OK_AND_ASSIGN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                               \
  ASSERT_TRUE(statusor.ok()) << statusor.status();       \
  lhs = std::move(statusor).value()

#endif  // ZOOM_TESTS_TESTING_STATUS_MATCHERS_H_
