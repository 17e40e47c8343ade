#include "common/aligned_buffer.h"

#include <utility>

#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace zoom {
namespace {

using ::zoom::testing::StatusIs;

TEST(AlignedBufferTest, AllocatesAlignedZeroedMemory) {
  for (size_t align : {8, 64, 512, 4096}) {
    ASSERT_OK_AND_ASSIGN(AlignedBuffer b, AlignedBuffer::Allocate(1000, align));
    EXPECT_TRUE(IsAligned(b.data(), align));
    EXPECT_EQ(b.size(), 1000u);
    EXPECT_EQ(b.alignment(), align);
    for (size_t i = 0; i < b.size(); ++i) ASSERT_EQ(b.data()[i], 0);
  }
}

TEST(AlignedBufferTest, RejectsBadAlignment) {
  EXPECT_THAT(AlignedBuffer::Allocate(64, 48),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::HasSubstr("power of two")));
  EXPECT_THAT(AlignedBuffer::Allocate(64, 2),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
}

TEST(AlignedBufferTest, MovesOwnership) {
  ASSERT_OK_AND_ASSIGN(AlignedBuffer a, AlignedBuffer::Allocate(128, 64));
  a.data()[5] = 42;
  uint8_t* p = a.data();
  AlignedBuffer b = std::move(a);
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(b.data()[5], 42);
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move)
  EXPECT_TRUE(a.empty());        // NOLINT(bugprone-use-after-move)
  AlignedBuffer c;
  c = std::move(b);
  EXPECT_EQ(c.data(), p);
}

TEST(AlignedBufferTest, AlignHelpers) {
  EXPECT_EQ(AlignUp(0, 512), 0u);
  EXPECT_EQ(AlignUp(1, 512), 512u);
  EXPECT_EQ(AlignUp(512, 512), 512u);
  EXPECT_EQ(AlignDown(1023, 512), 512u);
  EXPECT_TRUE(IsPowerOfTwo(4096));
  EXPECT_FALSE(IsPowerOfTwo(0));
  EXPECT_FALSE(IsPowerOfTwo(96));
}

}  // namespace
}  // namespace zoom
