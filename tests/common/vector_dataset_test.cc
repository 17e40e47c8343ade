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

}  // namespace
}  // namespace zoom
