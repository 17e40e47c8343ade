#include "common/metric.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace zoom {
namespace {

using ::zoom::testing::StatusIs;

TEST(MetricTest, ParsesNamesAndRejectsUnknown) {
  ASSERT_OK_AND_ASSIGN(Metric l2, ParseMetric("L2"));
  EXPECT_EQ(l2, Metric::kL2);
  ASSERT_OK_AND_ASSIGN(Metric ip, ParseMetric("ip"));
  EXPECT_EQ(ip, Metric::kInnerProduct);
  ASSERT_OK_AND_ASSIGN(Metric cos, ParseMetric("angular"));
  EXPECT_EQ(cos, Metric::kCosine);
  EXPECT_THAT(ParseMetric("hamming"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::HasSubstr("use l2, ip or cosine")));
  for (Metric m : {Metric::kL2, Metric::kInnerProduct, Metric::kCosine}) {
    ASSERT_OK_AND_ASSIGN(Metric back, ParseMetric(MetricName(m)));
    EXPECT_EQ(back, m);
  }
}

TEST(MetricTest, OrderDirection) {
  EXPECT_TRUE(IsBetter(Metric::kL2, 1.0f, 2.0f));
  EXPECT_FALSE(IsBetter(Metric::kL2, 2.0f, 1.0f));
  EXPECT_TRUE(IsBetter(Metric::kInnerProduct, 2.0f, 1.0f));
  EXPECT_TRUE(IsBetter(Metric::kCosine, 0.9f, 0.1f));
}

TEST(MetricTest, NormalizeL2) {
  float v[3] = {3, 0, 4};
  ASSERT_TRUE(NormalizeL2(v, 3));
  EXPECT_FLOAT_EQ(v[0], 0.6f);
  EXPECT_FLOAT_EQ(v[2], 0.8f);
  float zero[2] = {0, 0};
  EXPECT_FALSE(NormalizeL2(zero, 2));
  float bad[2] = {std::numeric_limits<float>::infinity(), 1};
  EXPECT_FALSE(NormalizeL2(bad, 2));
  EXPECT_TRUE(std::isinf(bad[0]));  // left unchanged
}

TEST(MetricTest, ReferenceKernels) {
  const float a[4] = {1, 2, 3, 4};
  const float b[4] = {2, 0, 3, -1};
  EXPECT_FLOAT_EQ(L2SquaredReference(a, b, 4), 1 + 4 + 0 + 25);
  EXPECT_FLOAT_EQ(InnerProductReference(a, b, 4), 2 + 0 + 9 - 4);
}

}  // namespace
}  // namespace zoom
