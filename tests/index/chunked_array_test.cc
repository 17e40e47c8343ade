// ChunkedArray: rows are distinct, zeroed, never move as the array grows,
// and the capacity is what the header promises (geometric chunks, or an
// exact first chunk after SetFirstChunk).
#include "index/chunked_array.h"

#include <cstdint>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace zoom::index {
namespace {

// Fills rows [0, n) with their ids, growing in steps, and checks that every
// row keeps its address and value and that ForEachRun covers each row once.
void FillAndCheck(ChunkedArray<uint32_t, 4>& a, uint64_t n) {
  std::vector<const uint32_t*> where;
  for (uint64_t grown = 0; grown < n;) {
    const uint64_t next = std::min<uint64_t>(n, grown + 1 + grown / 3);
    a.Grow(next);
    ASSERT_GE(a.capacity(), next);
    for (uint64_t i = grown; i < next; ++i) {
      uint32_t* row = a.Row(i);
      for (size_t j = 0; j < a.width(); ++j)
        ASSERT_EQ(row[j], 0u) << i;  // zeroed
      for (size_t j = 0; j < a.width(); ++j)
        row[j] = static_cast<uint32_t>(i * 10 + j);
      where.push_back(row);
    }
    grown = next;
    for (uint64_t i = 0; i < grown; ++i)
      ASSERT_EQ(a.Row(i), where[i]) << i;  // never moved
  }
  std::set<const uint32_t*> distinct(where.begin(), where.end());
  EXPECT_EQ(distinct.size(), n);
  uint64_t next_row = 0;
  a.ForEachRun(n, [&](uint64_t first, const uint32_t* rows, uint64_t count) {
    EXPECT_EQ(first, next_row);
    for (uint64_t i = 0; i < count; ++i) {
      EXPECT_EQ(rows + i * a.width(), where[first + i]);
      EXPECT_EQ(rows[i * a.width()], (first + i) * 10);
    }
    next_row += count;
  });
  EXPECT_EQ(next_row, n);
}

TEST(ChunkedArrayTest, GeometricChunks) {
  ChunkedArray<uint32_t, 4> a(3);
  EXPECT_EQ(a.capacity(), 0u);
  a.Grow(1);
  EXPECT_EQ(a.capacity(), 4u);
  a.Grow(5);
  EXPECT_EQ(a.capacity(), 12u);  // 4 + 8
  FillAndCheck(a, 100);
  EXPECT_EQ(a.capacity(), 124u);  // 4 + 8 + 16 + 32 + 64
  EXPECT_EQ(a.ResidentBytes(), 124u * 3 * sizeof(uint32_t));
}

TEST(ChunkedArrayTest, ExactFirstChunkThenGeometric) {
  ChunkedArray<uint32_t, 4> a(2);
  a.SetFirstChunk(37);
  a.Grow(37);
  EXPECT_EQ(a.capacity(), 37u);  // a bulk load wastes nothing
  a.Grow(38);
  EXPECT_EQ(a.capacity(), 41u);  // then small geometric steps: 37 + 4
  a.Grow(49);
  EXPECT_EQ(a.capacity(), 49u);  // 37 + 4 + 8
  a.Grow(50);
  EXPECT_EQ(a.capacity(), 65u);  // + 16
  a.SetFirstChunk(5);            // ignored once rows exist
  EXPECT_EQ(a.capacity(), 65u);
  ChunkedArray<uint32_t, 4> b(2);
  b.SetFirstChunk(37);
  FillAndCheck(b, 300);
}

}  // namespace
}  // namespace zoom::index
