// bench/datagen: the generator is a function of (seed, row), its ground
// truth is the brute force's, and the hardness measures agree with their
// definitions on a set where they are known.
#include <algorithm>
#include <filesystem>
#include <random>
#include <cmath>
#include <numeric>
#include <vector>

#include "bench/datagen/ground_truth.h"
#include "bench/datagen/mixture.h"
#include "common/texmex.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_env.h"

namespace zoom::datagen {
namespace {

MixtureSpec Small(Kind kind) {
  MixtureSpec s;
  s.kind = kind;
  s.dim = 24;
  s.clusters = 20;
  s.rank = 4;
  s.seed = 11;
  return s;
}

TEST(MixtureTest, RowsAreAFunctionOfSeedAndRow) {
  for (Kind kind : {Kind::kSiftLike, Kind::kEmbedding}) {
    ASSERT_OK_AND_ASSIGN(Mixture a, Mixture::Create(Small(kind)));
    ASSERT_OK_AND_ASSIGN(Mixture b, Mixture::Create(Small(kind)));
    std::vector<float> whole(100 * 24), part(10 * 24), other(10 * 24);
    a.Rows(0, 100, whole.data());
    b.Rows(37, 10, part.data());  // another instance, another range, same rows
    EXPECT_TRUE(std::equal(part.begin(), part.end(), whole.begin() + 37 * 24));
    a.Rows(37, 10, other.data(), /*stream=*/1);  // the queries' stream differs
    EXPECT_FALSE(std::equal(part.begin(), part.end(), other.begin()));
    MixtureSpec s = Small(kind);
    s.seed = 12;
    ASSERT_OK_AND_ASSIGN(Mixture c, Mixture::Create(s));
    c.Rows(37, 10, other.data());
    EXPECT_FALSE(std::equal(part.begin(), part.end(), other.begin()));
    for (size_t i = 0; i < 100; ++i) {
      const float* x = &whole[i * 24];
      if (kind == Kind::kSiftLike) {
        for (int t = 0; t < 24; ++t) {
          ASSERT_TRUE(x[t] >= 0 && x[t] <= 255 && x[t] == std::round(x[t])) << x[t];
        }
      } else {
        double n = 0;
        for (int t = 0; t < 24; ++t) n += double{x[t]} * x[t];
        ASSERT_NEAR(n, 1.0, 1e-5);
      }
    }
  }
}

TEST(MixtureTest, ClusterSizesFollowTheZipfLaw) {
  MixtureSpec s = Small(Kind::kEmbedding);
  s.zipf_s = 1.0;
  ASSERT_OK_AND_ASSIGN(Mixture m, Mixture::Create(s));
  std::vector<int> count(s.clusters);
  for (uint64_t i = 0; i < 20000; ++i) ++count[m.ClusterOf(i)];
  // Cluster 0 holds 1/H_20 = 27.8% of the points, cluster 1 half of that.
  EXPECT_NEAR(count[0] / 20000.0, 0.278, 0.02);
  EXPECT_NEAR(static_cast<double>(count[1]) / count[0], 0.5, 0.08);
}

TEST(MixtureTest, BadSpecsAreRefused) {
  MixtureSpec s = Small(Kind::kSiftLike);
  s.rank = 25;
  EXPECT_EQ(Mixture::Create(s).status().code(), absl::StatusCode::kInvalidArgument);
  s = Small(Kind::kSiftLike);
  s.noise = std::nan("");
  EXPECT_EQ(Mixture::Create(s).status().code(), absl::StatusCode::kInvalidArgument);
  s = Small(Kind::kSiftLike);
  s.clusters = 0;
  EXPECT_EQ(Mixture::Create(s).status().code(), absl::StatusCode::kInvalidArgument);
}

// The streamed top-k equals a brute force in double, ties to the lower id,
// on one thread and on three, for L2 (uint8) and cosine.
TEST(GroundTruthTest, EqualsBruteForce) {
  for (Kind kind : {Kind::kSiftLike, Kind::kEmbedding}) {
    ASSERT_OK_AND_ASSIGN(Mixture m, Mixture::Create(Small(kind)));
    constexpr uint64_t kN = 3000;
    constexpr size_t kQ = 25;
    constexpr uint32_t kK = 10;
    std::vector<float> base(kN * 24), q(kQ * 24);
    m.Rows(0, kN, base.data());
    m.Rows(0, kQ, q.data(), 1);
    const Metric metric = kind == Kind::kSiftLike ? Metric::kL2 : Metric::kCosine;
    for (int threads : {1, 3}) {
      ASSERT_OK_AND_ASSIGN(GroundTruth gt,
                           ExactTopK(m, kN, q.data(), kQ, metric, kK, threads, /*chunk=*/700));
      for (size_t i = 0; i < kQ; ++i) {
        std::vector<std::pair<double, int32_t>> all;
        for (uint64_t j = 0; j < kN; ++j) {
          double s = 0, qq = 0;
          for (int t = 0; t < 24; ++t) qq += double{q[i * 24 + t]} * q[i * 24 + t];
          for (int t = 0; t < 24; ++t) {
            const double a = base[j * 24 + t], b = q[i * 24 + t];
            s += metric == Metric::kL2 ? (a - b) * (a - b) : -a * b / std::sqrt(qq);
          }
          all.emplace_back(s, static_cast<int32_t>(j));
        }
        std::sort(all.begin(), all.end());
        for (uint32_t j = 0; j < kK; ++j) {
          ASSERT_EQ(gt.ids[i * kK + j], all[j].second) << "query " << i << " rank " << j;
          const double want = metric == Metric::kL2 ? all[j].first : -all[j].first;
          ASSERT_NEAR(gt.dist[i * kK + j], want, 1e-4 * std::max(1.0, std::abs(want)));
        }
      }
    }
  }
}

// On uniform points in a d-dimensional cube the LID estimate is near d;
// the relative contrast falls as d grows.
TEST(HardnessTest, LidOfUniformPointsIsTheirDimension) {
  testing::TempDir tmp;
  double rc_prev = 1e9;
  for (uint32_t d : {2u, 8u}) {
    const std::string dir = tmp.File("u" + std::to_string(d));
    std::filesystem::create_directories(dir);
    std::mt19937_64 rng(d);
    std::uniform_real_distribution<float> u(0, 1);
    constexpr uint64_t kN = 20000;
    constexpr size_t kQ = 100;
    constexpr uint32_t kK = 20;
    std::vector<float> base(kN * d), q(kQ * d);
    for (float& x : base) x = u(rng);
    for (float& x : q) x = 0.25f + 0.5f * u(rng);  // away from the faces
    std::vector<int32_t> ids(kQ * kK);
    std::vector<float> dist(kQ * kK);
    for (size_t i = 0; i < kQ; ++i) {
      std::vector<std::pair<float, int32_t>> all(kN);
      for (uint64_t j = 0; j < kN; ++j) {
        float s = 0;
        for (uint32_t t = 0; t < d; ++t) s += (base[j * d + t] - q[i * d + t]) * (base[j * d + t] - q[i * d + t]);
        all[j] = {s, static_cast<int32_t>(j)};
      }
      std::partial_sort(all.begin(), all.begin() + kK, all.end());
      for (uint32_t j = 0; j < kK; ++j) ids[i * kK + j] = all[j].second, dist[i * kK + j] = all[j].first;
    }
    const auto write = [](const std::string& path, VecsType type, uint32_t dim, const void* p,
                          size_t rows) {
      ASSERT_OK_AND_ASSIGN(VecsWriter w, VecsWriter::Create(path, type, dim));
      ASSERT_OK(w.Append(p, rows));
      ASSERT_OK(w.Close());
    };
    write(dir + "/base.fvecs", VecsType::kFloat32, d, base.data(), kN);
    write(dir + "/query.fvecs", VecsType::kFloat32, d, q.data(), kQ);
    write(dir + "/groundtruth_l2.ivecs", VecsType::kInt32, kK, ids.data(), kQ);
    write(dir + "/groundtruth_l2_dist.fvecs", VecsType::kFloat32, kK, dist.data(), kQ);
    ASSERT_OK_AND_ASSIGN(Hardness h, MeasureFolder(dir, Metric::kL2, kK, kQ, 200, 1));
    EXPECT_EQ(h.queries, kQ);
    EXPECT_NEAR(h.lid_median, d, 0.3 * d) << "d " << d;
    EXPECT_GT(h.rc_median, 1.0);
    EXPECT_LT(h.rc_median, rc_prev);
    rc_prev = h.rc_median;
  }
}

}  // namespace
}  // namespace zoom::datagen
