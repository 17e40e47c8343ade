#include "common/vector_dataset.h"

#include <filesystem>
#include <string>
#include <vector>

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

template <typename T>
void Write(const std::string& path, VecsType type, uint32_t dim, const std::vector<T>& data) {
  auto w = VecsWriter::Create(path, type, dim);
  ASSERT_OK(w.status());
  ASSERT_OK(w->Append(data.data(), data.size() / dim));
  ASSERT_OK(w->Close());
}

// A folder of 4 base rows and 2 queries of dimension 2, with l2 and ip
// ground truth (3 neighbours each).
std::string MakeFolder(const TempDir& tmp, const std::string& name) {
  const std::string dir = tmp.File(name);
  std::filesystem::create_directories(dir);
  Write<float>(dir + "/base.fvecs", VecsType::kFloat32, 2, {0, 0, 1, 0, 0, 1, 1, 1});
  Write<float>(dir + "/query.fvecs", VecsType::kFloat32, 2, {0.1f, 0, 0.9f, 1});
  for (const char* m : {"l2", "ip"}) {
    Write<int32_t>(dir + "/groundtruth_" + m + ".ivecs", VecsType::kInt32, 3, {0, 1, 2, 3, 1, 2});
    Write<float>(dir + "/groundtruth_" + m + "_dist.fvecs", VecsType::kFloat32, 3,
                 {0.01f, 0.81f, 1.01f, 0.01f, 0.81f, 1.01f});
  }
  return dir;
}

TEST(VectorDatasetTest, OpensAFolderAndLoadsWhatAgrees) {
  TempDir tmp;
  const std::string dir = MakeFolder(tmp, "small");
  ASSERT_OK_AND_ASSIGN(DatasetFolder f, OpenDatasetFolder(dir + "/", /*need_base=*/true));
  EXPECT_EQ(f.dir, dir);
  EXPECT_EQ(f.name, "small");
  EXPECT_EQ(f.base_rows, 4u);
  EXPECT_EQ(f.query_rows, 2u);
  EXPECT_EQ(f.base_dim, 2u);
  EXPECT_FALSE(f.base_is_uint8);
  EXPECT_THAT(f.ground_truth_metrics, ElementsAre(Metric::kL2, Metric::kInnerProduct));
  EXPECT_EQ(f.DefaultMetric(), Metric::kL2);  // no cosine ground truth here
  EXPECT_EQ(f.GroundTruthMetricNames(), "l2, ip");
  ASSERT_OK_AND_ASSIGN(VecsMatrix<float> q, LoadQueries(f, 1));
  EXPECT_EQ(q.rows, 1u);
  ASSERT_OK_AND_ASSIGN(VecsMatrix<float> base, LoadBase(f));
  EXPECT_EQ(base.rows, 4u);
  VecsMatrix<float> dist;
  ASSERT_OK_AND_ASSIGN(VecsMatrix<int32_t> gt, LoadGroundTruth(f, Metric::kL2, 1, &dist));
  EXPECT_EQ(gt.rows, 1u);
  EXPECT_EQ(dist.rows, 1u);
  EXPECT_THAT(LoadGroundTruth(f, Metric::kCosine).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("ground truth for: l2, ip")));
  // Cosine ground truth, when there is some, is the default.
  Write<int32_t>(dir + "/groundtruth_cosine.ivecs", VecsType::kInt32, 3, {0, 1, 2, 3, 1, 2});
  ASSERT_OK_AND_ASSIGN(f, OpenDatasetFolder(dir, true));
  EXPECT_EQ(f.DefaultMetric(), Metric::kCosine);
}

TEST(VectorDatasetTest, DisagreeingFilesAreClearErrors) {
  TempDir tmp;
  EXPECT_THAT(OpenDatasetFolder(tmp.File("none"), false).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("does not exist")));
  const std::string dir = MakeFolder(tmp, "bad");
  // No base: fine for a tool that only queries, not for one that builds.
  std::filesystem::remove(dir + "/base.fvecs");
  ASSERT_OK_AND_ASSIGN(DatasetFolder f, OpenDatasetFolder(dir, false));
  EXPECT_TRUE(f.base_path.empty());
  EXPECT_THAT(OpenDatasetFolder(dir, true).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("neither base.fvecs nor base.bvecs")));
  // A base of another dimension.
  Write<float>(dir + "/base.fvecs", VecsType::kFloat32, 3, {0, 0, 0});
  EXPECT_THAT(OpenDatasetFolder(dir, true).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("has dimension 2 but")));
  // Ground truth with an id outside the base, or too few rows.
  Write<float>(dir + "/base.fvecs", VecsType::kFloat32, 2, {0, 0, 1, 0, 0, 1, 1, 1});
  Write<int32_t>(dir + "/groundtruth_l2.ivecs", VecsType::kInt32, 3, {0, 1, 2, 3, 1, 9});
  ASSERT_OK_AND_ASSIGN(f, OpenDatasetFolder(dir, true));
  EXPECT_THAT(LoadGroundTruth(f, Metric::kL2).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("holds id 9")));
  Write<int32_t>(dir + "/groundtruth_l2.ivecs", VecsType::kInt32, 3, {0, 1, 2});
  EXPECT_THAT(LoadGroundTruth(f, Metric::kL2).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("has 1 rows but")));
  // A distance file that does not match the ids.
  Write<int32_t>(dir + "/groundtruth_l2.ivecs", VecsType::kInt32, 3, {0, 1, 2, 3, 1, 2});
  Write<float>(dir + "/groundtruth_l2_dist.fvecs", VecsType::kFloat32, 2, {0, 0, 0, 0});
  VecsMatrix<float> dist;
  EXPECT_THAT(LoadGroundTruth(f, Metric::kL2, 0, &dist).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("is 2 x 2 but")));
  // No queries at all.
  std::filesystem::remove(dir + "/query.fvecs");
  EXPECT_THAT(OpenDatasetFolder(dir, false).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("neither query.fvecs")));
}

TEST(VectorDatasetTest, LoadDatasetReadsWhatABenchmarkMeasures) {
  TempDir tmp;
  const std::string dir = MakeFolder(tmp, "small");
  ASSERT_OK_AND_ASSIGN(Dataset ds, LoadDataset(dir + "/", Metric::kInnerProduct, 1));
  EXPECT_EQ(ds.name, "small");
  EXPECT_EQ(ds.dir, dir);
  EXPECT_EQ(ds.metric, Metric::kInnerProduct);
  EXPECT_FALSE(ds.is_uint8);
  EXPECT_EQ(ds.dim(), 2u);
  EXPECT_EQ(ds.base.rows, 4u);  // every base row
  EXPECT_THAT(ds.queries.data, ElementsAre(0.1f, 0));  // the first query only
  EXPECT_THAT(ds.gt.data, ElementsAre(0, 1, 2));
  EXPECT_THAT(ds.gt_dist.data, ElementsAre(0.01f, 0.81f, 1.01f));
  ASSERT_OK_AND_ASSIGN(ds, LoadDataset(dir, Metric::kL2));
  EXPECT_EQ(ds.queries.rows, 2u);  // 0: all
  EXPECT_EQ(ds.gt.rows, 2u);
  EXPECT_THAT(LoadDataset(dir, Metric::kCosine).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("ground truth for: l2, ip")));
  // A uint8 base is widened to float, exactly.
  std::filesystem::remove(dir + "/base.fvecs");
  Write<uint8_t>(dir + "/base.bvecs", VecsType::kUint8, 2, {0, 0, 255, 0, 0, 7, 1, 1});
  Write<uint8_t>(dir + "/query.bvecs", VecsType::kUint8, 2, {3, 4, 5, 6});
  std::filesystem::remove(dir + "/query.fvecs");
  ASSERT_OK_AND_ASSIGN(ds, LoadDataset(dir, Metric::kL2));
  EXPECT_TRUE(ds.is_uint8);
  EXPECT_THAT(ds.base.data, ElementsAre(0, 0, 255, 0, 0, 7, 1, 1));
  EXPECT_THAT(ds.queries.data, ElementsAre(3, 4, 5, 6));
  // No base: a benchmark needs one.
  std::filesystem::remove(dir + "/base.bvecs");
  EXPECT_THAT(LoadDataset(dir, Metric::kL2).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("neither base.fvecs nor")));
}

TEST(VectorDatasetTest, MetricOrDefaultTakesTheNameElseTheFolders) {
  TempDir tmp;
  const std::string dir = MakeFolder(tmp, "small");
  EXPECT_THAT(MetricOrDefault("ip", dir), IsOkAndHolds(Metric::kInnerProduct));
  EXPECT_THAT(MetricOrDefault("cosine", tmp.File("none")), IsOkAndHolds(Metric::kCosine));
  EXPECT_THAT(MetricOrDefault("", dir), IsOkAndHolds(Metric::kL2));  // no cosine ground truth
  EXPECT_THAT(MetricOrDefault("hamming", dir).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(MetricOrDefault("", tmp.File("none")).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("does not exist")));
}

}  // namespace
}  // namespace zoom
