#include "common/recall.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace zoom {
namespace {

template <typename T>
VecsMatrix<T> Matrix(uint32_t dim, std::vector<T> data) {
  VecsMatrix<T> m;
  m.dim = dim;
  m.rows = data.size() / dim;
  m.data = std::move(data);
  return m;
}

// Query (0, 0) over points with a duplicate (4 = 0) and a tie at the 3rd
// place (2 is as far as 1), plus two just past 1 (5 within the stored
// scores' float32 tolerance, 6 beyond it).
Dataset L2Set() {
  Dataset ds;
  ds.metric = Metric::kL2;
  ds.base = Matrix<float>(2, {0, 0, 1, 0, 0, 1, 2, 2, 0, 0, 1 + 4e-7f, 0, 1 + 1e-5f, 0});
  ds.queries = Matrix<float>(2, {0, 0});
  ds.gt = Matrix<int32_t>(3, {0, 4, 1});
  ds.gt_dist = Matrix<float>(3, {0, 0, 1});
  return ds;
}

double Recall(const Dataset& ds, std::vector<int64_t> ids, size_t k) {
  return RecallAtK(ds, 0, ids.data(), ids.size(), k);
}

TEST(RecallTest, TrueScoreIsTheMetricsExactScoreInDouble) {
  Dataset ds = L2Set();
  EXPECT_EQ(TrueScore(ds, 0, 3), 8.0);
  EXPECT_EQ(TrueScore(ds, 0, 4), 0.0);
  ds.metric = Metric::kInnerProduct;
  ds.queries = Matrix<float>(2, {3, 0.5f});
  EXPECT_EQ(TrueScore(ds, 0, 3), 7.0);
  ds.metric = Metric::kCosine;
  EXPECT_DOUBLE_EQ(TrueScore(ds, 0, 1), 3 / std::sqrt(9.25));
  EXPECT_EQ(TrueScore(ds, 0, 0), 0.0);  // a zero vector: no direction
}

TEST(RecallTest, TheGroundTruthAndItsTiesCount) {
  const Dataset ds = L2Set();
  EXPECT_EQ(Recall(ds, {0, 4, 1}, 3), 1.0);
  EXPECT_EQ(Recall(ds, {4, 0, 2}, 3), 1.0);  // 2 ties with the listed 1
  EXPECT_EQ(Recall(ds, {0, 4, 5}, 3), 1.0);  // within the 1e-6 relative tolerance
  EXPECT_DOUBLE_EQ(Recall(ds, {0, 4, 6}, 3), 2.0 / 3);
  EXPECT_DOUBLE_EQ(Recall(ds, {0, 3, -1}, 3), 1.0 / 3);
  EXPECT_EQ(Recall(ds, {4}, 1), 1.0);  // the duplicate of the top 1
  EXPECT_EQ(Recall(ds, {1}, 1), 0.0);
}

TEST(RecallTest, EachIdOnceOnlyTheFirstKAndOnlyBaseRows) {
  const Dataset ds = L2Set();
  EXPECT_DOUBLE_EQ(Recall(ds, {0, 0, 4}, 3), 2.0 / 3);
  EXPECT_DOUBLE_EQ(Recall(ds, {0, 4, 99}, 3), 2.0 / 3);
  EXPECT_EQ(Recall(ds, {3, 3, 3, 0, 4}, 3), 0.0);
  EXPECT_DOUBLE_EQ(Recall(ds, {0}, 3), 1.0 / 3);  // a short answer
}

TEST(RecallTest, NaNWhenTheGroundTruthCannotSay) {
  const Dataset ds = L2Set();
  EXPECT_TRUE(std::isnan(Recall(ds, {0, 4, 1, 2}, 4)));  // 3 columns of ground truth
  EXPECT_TRUE(std::isnan(Recall(ds, {0}, 0)));
  const int64_t id = 0;
  EXPECT_TRUE(std::isnan(RecallAtK(ds, 1, &id, 1, 1)));  // no such query
}

TEST(RecallTest, HigherIsBetterForInnerProduct) {
  Dataset ds;
  ds.metric = Metric::kInnerProduct;
  ds.base = Matrix<float>(2, {1, 0, 0, 1, 2, 0});
  ds.queries = Matrix<float>(2, {1, 0});
  ds.gt = Matrix<int32_t>(2, {2, 0});
  ds.gt_dist = Matrix<float>(2, {2, 1});
  EXPECT_EQ(Recall(ds, {0, 2}, 2), 1.0);
  EXPECT_EQ(Recall(ds, {2, 1}, 2), 0.5);
  EXPECT_EQ(Recall(ds, {1}, 1), 0.0);
}

}  // namespace
}  // namespace zoom
