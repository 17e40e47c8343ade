#include "common/texmex.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_env.h"

namespace zoom {
namespace {

using ::testing::HasSubstr;
using ::zoom::testing::StatusIs;
using ::zoom::testing::TempDir;
using ::zoom::testing::TestDataPath;

// tests/data/sift-ngt-5k: real SIFT descriptors (see tests/data/README.md).
TEST(TexmexTest, ReadsRealBvecs) {
  ASSERT_OK_AND_ASSIGN(VecsReader r,
                       VecsReader::Open(TestDataPath("sift-ngt-5k/base.bvecs")));
  EXPECT_EQ(r.type(), VecsType::kUint8);
  EXPECT_EQ(r.dim(), 128u);
  EXPECT_EQ(r.count(), 4500u);
  // Streaming in uneven batches gives the same rows as one load.
  std::vector<uint8_t> streamed(4500 * 128);
  size_t rows = 0;
  while (true) {
    ASSERT_OK_AND_ASSIGN(size_t n, r.Read(777, streamed.data() + rows * 128));
    if (n == 0) break;
    rows += n;
  }
  EXPECT_EQ(rows, 4500u);
  ASSERT_OK_AND_ASSIGN(auto all, LoadBvecs(TestDataPath("sift-ngt-5k/base.bvecs")));
  EXPECT_EQ(all.data, streamed);
  // SIFT descriptors of this set have L2 norm 510..514 (TEXMEX style).
  for (size_t i = 0; i < all.rows; i += 97) {
    double s = 0;
    for (size_t j = 0; j < 128; ++j) s += static_cast<double>(all.row(i)[j]) * all.row(i)[j];
    EXPECT_NEAR(std::sqrt(s), 512, 3) << "row " << i;
  }
}

TEST(TexmexTest, ReadsRealIvecsAndFvecsConsistently) {
  ASSERT_OK_AND_ASSIGN(auto gt,
                       LoadIvecs(TestDataPath("sift-ngt-5k/groundtruth_l2.ivecs")));
  ASSERT_OK_AND_ASSIGN(
      auto dist,
      LoadVecsAsFloat(TestDataPath("sift-ngt-5k/groundtruth_l2_dist.fvecs")));
  ASSERT_OK_AND_ASSIGN(auto base,
                       LoadVecsAsFloat(TestDataPath("sift-ngt-5k/base.bvecs")));
  ASSERT_OK_AND_ASSIGN(auto query,
                       LoadVecsAsFloat(TestDataPath("sift-ngt-5k/query.bvecs")));
  EXPECT_EQ(gt.rows, 500u);
  EXPECT_EQ(gt.dim, 100u);
  EXPECT_EQ(dist.rows, 500u);
  EXPECT_EQ(query.rows, 500u);
  // The stored distance of each query's nearest neighbour is the exact
  // squared L2 distance between the vectors the other files hold.
  for (size_t q = 0; q < 500; q += 50) {
    const int id = gt.row(q)[0];
    ASSERT_GE(id, 0);
    ASSERT_LT(static_cast<size_t>(id), base.rows);
    double s = 0;
    for (size_t j = 0; j < 128; ++j) {
      const double d = double{query.row(q)[j]} - base.row(id)[j];
      s += d * d;
    }
    EXPECT_EQ(static_cast<float>(s), dist.row(q)[0]) << "query " << q;
    EXPECT_LE(dist.row(q)[0], dist.row(q)[99]);
  }
}

TEST(TexmexTest, WriterRoundTripAndSeek) {
  TempDir tmp;
  const std::string path = tmp.File("x.fvecs");
  ASSERT_OK_AND_ASSIGN(VecsWriter w,
                       VecsWriter::Create(path, VecsType::kFloat32, 3));
  const float rows[] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  ASSERT_OK(w.Append(rows, 2));
  ASSERT_OK(w.Append(rows + 6, 1));
  ASSERT_OK(w.Close());
  ASSERT_OK_AND_ASSIGN(VecsReader r, VecsReader::Open(path));
  EXPECT_EQ(r.count(), 3u);
  ASSERT_OK(r.Seek(2));
  float got[3];
  ASSERT_OK_AND_ASSIGN(size_t n, r.Read(10, got));
  EXPECT_EQ(n, 1u);
  EXPECT_EQ(got[0], 7);
  EXPECT_EQ(got[2], 9);
  EXPECT_THAT(r.Seek(4), StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("past")));
}

TEST(TexmexTest, EmptyFileHasNoRows) {
  TempDir tmp;
  const std::string path = tmp.File("e.ivecs");
  std::ofstream(path).close();
  ASSERT_OK_AND_ASSIGN(VecsReader r, VecsReader::Open(path));
  EXPECT_EQ(r.count(), 0u);
  int32_t buf[4];
  ASSERT_OK_AND_ASSIGN(size_t n, r.Read(1, buf));
  EXPECT_EQ(n, 0u);
}

void WriteBytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()),
          static_cast<std::streamsize>(bytes.size()));
}

std::vector<uint8_t> Record(int32_t d, std::vector<uint8_t> payload) {
  std::vector<uint8_t> out(4);
  std::memcpy(out.data(), &d, 4);
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

TEST(TexmexTest, TruncatedFileIsAClearError) {
  TempDir tmp;
  auto bytes = Record(4, {1, 2, 3, 4});
  auto second = Record(4, {5, 6, 7, 8});
  bytes.insert(bytes.end(), second.begin(), second.end() - 1);  // cut 1 byte
  WriteBytes(tmp.File("t.bvecs"), bytes);
  EXPECT_THAT(VecsReader::Open(tmp.File("t.bvecs")),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("not a whole number of 8-byte records")));
}

TEST(TexmexTest, InconsistentDimensionIsAClearError) {
  TempDir tmp;
  // Two 8-byte records whose second claims dimension 3: the size fits, the
  // content does not.
  auto bytes = Record(4, {1, 2, 3, 4});
  auto bad = Record(3, {5, 6, 7, 8});
  bytes.insert(bytes.end(), bad.begin(), bad.end());
  WriteBytes(tmp.File("i.bvecs"), bytes);
  ASSERT_OK_AND_ASSIGN(VecsReader r, VecsReader::Open(tmp.File("i.bvecs")));
  uint8_t buf[8];
  EXPECT_THAT(r.Read(2, buf), StatusIs(absl::StatusCode::kDataLoss,
                                       HasSubstr("row 1 has dimension 3")));
}

TEST(TexmexTest, GarbageDimensionAndWrongFilesAreClearErrors) {
  TempDir tmp;
  WriteBytes(tmp.File("g.fvecs"), Record(-5, {0, 0, 0, 0}));
  EXPECT_THAT(VecsReader::Open(tmp.File("g.fvecs")),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("dimension -5")));
  WriteBytes(tmp.File("s.fvecs"), {1, 0});
  EXPECT_THAT(VecsReader::Open(tmp.File("s.fvecs")),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("truncated")));
  EXPECT_THAT(VecsReader::Open(tmp.File("missing.fvecs")),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("missing.fvecs")));
  EXPECT_THAT(VecsReader::Open(tmp.File("x.txt")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr(".fvecs, .bvecs or .ivecs")));
  EXPECT_THAT(LoadVecsAsFloat(TestDataPath("sift-ngt-5k/groundtruth_l2.ivecs")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("ivecs")));
}

TEST(TexmexTest, LoadWithRowLimit) {
  ASSERT_OK_AND_ASSIGN(auto q, LoadVecsAsFloat(
                                   TestDataPath("sift-ngt-5k/query.bvecs"), 10));
  EXPECT_EQ(q.rows, 10u);
  EXPECT_EQ(q.data.size(), 1280u);
}

}  // namespace
}  // namespace zoom
