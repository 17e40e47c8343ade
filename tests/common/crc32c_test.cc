#include "common/crc32c.h"

#include <cstring>
#include <string>

#include "gtest/gtest.h"

namespace zoom {
namespace {

TEST(Crc32cTest, KnownVectors) {
  // RFC 3720 (iSCSI) B.4 check values.
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);
  uint8_t zeros[32] = {0};
  EXPECT_EQ(Crc32c(zeros, 32), 0x8A9136AAu);
  uint8_t ones[32];
  std::memset(ones, 0xff, sizeof(ones));
  EXPECT_EQ(Crc32c(ones, 32), 0x62A8AB43u);
  EXPECT_EQ(Crc32c(nullptr, 0), 0u);
}

TEST(Crc32cTest, ExtendEqualsWhole) {
  std::string s;
  for (int i = 0; i < 1000; ++i) s.push_back(static_cast<char>(i * 7 + 3));
  const uint32_t whole = Crc32c(s.data(), s.size());
  for (size_t cut : {0, 1, 7, 8, 9, 500, 999, 1000}) {
    EXPECT_EQ(Crc32cExtend(Crc32c(s.data(), cut), s.data() + cut,
                           s.size() - cut),
              whole)
        << cut;
  }
}

}  // namespace
}  // namespace zoom
