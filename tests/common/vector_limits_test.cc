#include "common/vector_limits.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace zoom {
namespace {

using ::testing::HasSubstr;
using ::zoom::testing::StatusIs;

TEST(VectorLimitsTest, L2AndIpTakeNormsUpTo1e18) {
  for (Metric m : {Metric::kL2, Metric::kInnerProduct}) {
    const std::vector<float> ok(8, 3.5e17f);       // norm 9.9e17
    const std::vector<float> over(8, 3.6e17f);     // norm 1.02e18
    const std::vector<float> big(8, 1e20f);
    EXPECT_OK(CheckVectorMagnitude(m, ok.data(), 8));
    EXPECT_TRUE(VectorMagnitudeOk(m, ok.data(), 8));
    EXPECT_FALSE(VectorMagnitudeOk(m, over.data(), 8));
    std::vector<float> one_big(8, 0.0f);
    one_big[5] = -2e18f;
    EXPECT_THAT(CheckVectorMagnitude(m, one_big.data(), 8),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         ::testing::AllOf(HasSubstr("component 5"), HasSubstr("-2e+18"),
                                          HasSubstr("at most 1e18"))));
    EXPECT_FALSE(VectorMagnitudeOk(m, big.data(), 8));
    // Zero is a fine l2 / ip vector.
    const std::vector<float> zero(8, 0.0f);
    EXPECT_OK(CheckVectorMagnitude(m, zero.data(), 8));
  }
}

TEST(VectorLimitsTest, CosineTakesAnyFiniteNonZeroVector) {
  const std::vector<float> max(8, std::numeric_limits<float>::max());
  const std::vector<float> tiny(8, std::numeric_limits<float>::denorm_min());
  EXPECT_OK(CheckVectorMagnitude(Metric::kCosine, max.data(), 8));
  EXPECT_OK(CheckVectorMagnitude(Metric::kCosine, tiny.data(), 8));
  const std::vector<float> zero(8, 0.0f);
  EXPECT_THAT(CheckVectorMagnitude(Metric::kCosine, zero.data(), 8),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("zero")));
  // Normalised in double, both become unit vectors.
  std::vector<float> a = max, b = tiny;
  ASSERT_TRUE(NormalizeL2(a.data(), 8));
  ASSERT_TRUE(NormalizeL2(b.data(), 8));
  EXPECT_NEAR(a[0], 1 / std::sqrt(8.0), 1e-6);
  EXPECT_NEAR(b[0], 1 / std::sqrt(8.0), 1e-6);
}

TEST(VectorLimitsTest, NonFiniteIsRefusedForEveryMetric) {
  for (Metric m : {Metric::kL2, Metric::kInnerProduct, Metric::kCosine}) {
    for (float bad : {std::numeric_limits<float>::quiet_NaN(),
                      std::numeric_limits<float>::infinity(),
                      -std::numeric_limits<float>::infinity()}) {
      std::vector<float> v(4, 1.0f);
      v[2] = bad;
      EXPECT_THAT(CheckVectorMagnitude(m, v.data(), 4),
                  StatusIs(absl::StatusCode::kInvalidArgument,
                           ::testing::AllOf(HasSubstr("component 2"), HasSubstr("finite"))));
      EXPECT_FALSE(VectorMagnitudeOk(m, v.data(), 4));
    }
  }
}

}  // namespace
}  // namespace zoom
