// File: tests/index/distance_kernels_test.cc
//
// Every kernel of index/distance_kernels.h at every SIMD level this CPU can
// run (levels above DetectedSimdLevel() are skipped), against
// double-precision references, over many sizes, with unaligned pointers,
// and with inputs that end at an unreadable page (no kernel may read past
// its arrays) and outputs followed by a canary (none may write past them).
#include "index/distance_kernels.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <limits>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "common/metric.h"
#include "gtest/gtest.h"

namespace zoom::index {

// Test parameters print as "avx2", not as raw bytes (found by ADL).
void PrintTo(SimdLevel level, std::ostream* os) { *os << SimdLevelName(level); }

namespace {

// A double-precision result and the sum of the absolute values of its
// terms, which bounds the rounding error of any float summation order.
struct Reference {
  double value = 0;
  double scale = 0;
};

Reference L2Ref(const float* a, const float* b, size_t d) {
  Reference r;
  for (size_t i = 0; i < d; ++i) {
    const double t = double{a[i]} - b[i];
    r.value += t * t;
  }
  r.scale = r.value;
  return r;
}

Reference IpRef(const float* a, const float* b, size_t d) {
  Reference r;
  for (size_t i = 0; i < d; ++i) {
    const double t = double{a[i]} * b[i];
    r.value += t;
    r.scale += std::abs(t);
  }
  return r;
}

Reference AdcRef(const float* table, const uint8_t* code, size_t m) {
  Reference r;
  for (size_t j = 0; j < m; ++j) {
    const double t = table[j * kPqCentroids + code[j]];
    r.value += t;
    r.scale += std::abs(t);
  }
  return r;
}

// Float summation of n terms errs by at most ~n * 2^-24 * scale; 1e-4 * scale
// covers n up to ~1600 terms, while dropping or doubling one term of
// typical size (scale / n) is caught up to n ~ 10^4.
::testing::AssertionResult Near(float got, const Reference& ref) {
  const double tolerance = 1e-4 * ref.scale + 1e-6;
  const double error = std::abs(double{got} - ref.value);
  if (error <= tolerance) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "got " << got << ", reference " << ref.value << " (error " << error
         << " > tolerance " << tolerance << ")";
}

// `n` values in [-1, 1) after `offset` leading elements, so that data() +
// offset is misaligned for any vector width when offset is odd.
class Floats {
 public:
  Floats(size_t n, size_t offset, std::mt19937& rng)
      : storage_(n + offset), offset_(offset) {
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (float& x : storage_) x = dist(rng);
  }
  const float* data() const { return storage_.data() + offset_; }

 private:
  std::vector<float> storage_;
  size_t offset_;
};

class Bytes {
 public:
  Bytes(size_t n, size_t offset, std::mt19937& rng)
      : storage_(n + offset), offset_(offset) {
    for (uint8_t& x : storage_) x = static_cast<uint8_t>(rng());
  }
  const uint8_t* data() const { return storage_.data() + offset_; }

 private:
  std::vector<uint8_t> storage_;
  size_t offset_;
};

// Output arrays of n floats followed by a canary, at offset 1 (misaligned).
class Output {
 public:
  explicit Output(size_t n) : storage_(n + 2, kCanary), n_(n) {}
  float* data() { return storage_.data() + 1; }
  float operator[](size_t i) const { return storage_[i + 1]; }
  bool CanaryIntact() const {
    return storage_[0] == kCanary && storage_[n_ + 1] == kCanary;
  }

 private:
  static constexpr float kCanary = -12345.5f;
  std::vector<float> storage_;
  size_t n_;
};

std::vector<size_t> VectorDims() {
  std::vector<size_t> dims;
  for (size_t d = 1; d <= 70; ++d) dims.push_back(d);
  for (size_t d : {100, 128, 784, 960}) dims.push_back(d);
  return dims;
}

// The level a test runs at; levels this CPU lacks are skipped.
class DistanceKernelsTest : public ::testing::TestWithParam<SimdLevel> {
 protected:
  void SetUp() override {
    if (static_cast<int>(GetParam()) > static_cast<int>(DetectedSimdLevel())) {
      GTEST_SKIP() << "CPU lacks " << SimdLevelName(GetParam());
    }
    SetSimdLevelForTesting(GetParam());
    ASSERT_EQ(ActiveSimdLevel(), GetParam());
  }
  void TearDown() override { SetSimdLevelForTesting(DetectedSimdLevel()); }

  std::mt19937 rng_{20180917};
};

TEST_P(DistanceKernelsTest, L2SqrAndInnerProduct) {
  for (size_t d : VectorDims()) {
    // (0, 0): vector-aligned when the allocator aligns; (1, 3): neither is.
    for (auto [offset_a, offset_b] : {std::pair{0, 0}, std::pair{1, 3}}) {
      const Floats a(d, offset_a, rng_);
      const Floats b(d, offset_b, rng_);
      ASSERT_TRUE(
          Near(L2Sqr(a.data(), b.data(), d), L2Ref(a.data(), b.data(), d)))
          << "L2Sqr d=" << d << " offsets " << offset_a << "," << offset_b;
      ASSERT_TRUE(Near(InnerProduct(a.data(), b.data(), d),
                       IpRef(a.data(), b.data(), d)))
          << "InnerProduct d=" << d << " offsets " << offset_a << ","
          << offset_b;
      // Agrees with common/metric.h's reference too.
      ASSERT_TRUE(Near(L2Sqr(a.data(), b.data(), d),
                       {L2SquaredReference(a.data(), b.data(), d),
                        L2Ref(a.data(), b.data(), d).scale}));
      ASSERT_TRUE(Near(InnerProduct(a.data(), b.data(), d),
                       {InnerProductReference(a.data(), b.data(), d),
                        IpRef(a.data(), b.data(), d).scale}));
      ASSERT_EQ(L2Sqr(a.data(), a.data(), d), 0.0f) << "d=" << d;
    }
  }
  const float x = 1;
  EXPECT_EQ(L2Sqr(&x, &x, 0), 0.0f);
  EXPECT_EQ(InnerProduct(&x, &x, 0), 0.0f);
}

// The overflow contract (distance_kernels.h): inside the magnitude rule
// (norms <= 1e18, common/vector_limits.h) every result is finite; outside
// it the result is what IEEE arithmetic gives, the same at every level:
// L2Sqr saturates to +Inf, and an inner product whose terms overflow with
// both signs is NaN (the engine ranks NaN last).
TEST_P(DistanceKernelsTest, OverflowIsDefinedAtEveryLevel) {
  for (size_t d : {1, 7, 8, 16, 17, 100}) {
    SCOPED_TRACE(d);
    const float edge = static_cast<float>(1e18 / std::sqrt(double(d)));  // norm 1e18
    std::vector<float> a(d, edge), b(d, -edge);
    EXPECT_TRUE(std::isfinite(L2Sqr(a.data(), b.data(), d)));
    EXPECT_NEAR(L2Sqr(a.data(), b.data(), d), 4e36, 4e36 * 1e-5);
    EXPECT_NEAR(InnerProduct(a.data(), b.data(), d), -1e36, 1e36 * 1e-5);
    std::vector<float> out(3);
    std::vector<float> rows;
    for (int r = 0; r < 3; ++r) rows.insert(rows.end(), b.begin(), b.end());
    L2SqrBatch(a.data(), rows.data(), 3, d, out.data());
    for (float x : out) EXPECT_TRUE(std::isfinite(x));
    // Beyond the rule.
    std::vector<float> big(d, 3e38f), neg(d, -3e38f);
    EXPECT_EQ(L2Sqr(big.data(), neg.data(), d), std::numeric_limits<float>::infinity());
    EXPECT_EQ(InnerProduct(big.data(), big.data(), d), std::numeric_limits<float>::infinity());
    EXPECT_EQ(InnerProduct(big.data(), neg.data(), d), -std::numeric_limits<float>::infinity());
    if (d >= 2) {
      std::vector<float> mixed(d, 3e38f);
      mixed[0] = -3e38f;
      EXPECT_TRUE(std::isnan(InnerProduct(big.data(), mixed.data(), d)));
    }
  }
}

TEST_P(DistanceKernelsTest, Batches) {
  std::vector<size_t> dims;
  for (size_t d = 1; d <= 34; ++d) dims.push_back(d);
  for (size_t d : {63, 64, 65, 100, 128, 784}) dims.push_back(d);
  for (size_t d : dims) {
    for (size_t n : {0, 1, 2, 3, 4, 5, 7, 8, 9, 13}) {
      const Floats q(d, 1, rng_);
      const Floats x(n * d, 1, rng_);
      Output l2(n);
      Output ip(n);
      L2SqrBatch(q.data(), x.data(), n, d, l2.data());
      InnerProductBatch(q.data(), x.data(), n, d, ip.data());
      ASSERT_TRUE(l2.CanaryIntact()) << "L2SqrBatch n=" << n << " d=" << d;
      ASSERT_TRUE(ip.CanaryIntact())
          << "InnerProductBatch n=" << n << " d=" << d;
      for (size_t i = 0; i < n; ++i) {
        const float* row = x.data() + i * d;
        ASSERT_TRUE(Near(l2[i], L2Ref(q.data(), row, d)))
            << "L2SqrBatch n=" << n << " d=" << d << " row " << i;
        ASSERT_TRUE(Near(ip[i], IpRef(q.data(), row, d)))
            << "InnerProductBatch n=" << n << " d=" << d << " row " << i;
      }
    }
  }
}

// Checks both tables of (m, dsub) on slices of the given pools.
void CheckPqTables(const float* q, const float* centroids, size_t m,
                   size_t dsub) {
  Output l2(m * kPqCentroids);
  Output ip(m * kPqCentroids);
  PqL2Table(q, centroids, m, dsub, l2.data());
  PqIpTable(q, centroids, m, dsub, ip.data());
  ASSERT_TRUE(l2.CanaryIntact()) << "PqL2Table m=" << m << " dsub=" << dsub;
  ASSERT_TRUE(ip.CanaryIntact()) << "PqIpTable m=" << m << " dsub=" << dsub;
  for (size_t j = 0; j < m; ++j) {
    for (size_t c = 0; c < kPqCentroids; ++c) {
      const float* qj = q + j * dsub;
      const float* cj = centroids + (j * kPqCentroids + c) * dsub;
      const size_t e = j * kPqCentroids + c;
      ASSERT_TRUE(Near(l2[e], L2Ref(qj, cj, dsub)))
          << "PqL2Table m=" << m << " dsub=" << dsub << " j=" << j
          << " c=" << c;
      ASSERT_TRUE(Near(ip[e], IpRef(qj, cj, dsub)))
          << "PqIpTable m=" << m << " dsub=" << dsub << " j=" << j
          << " c=" << c;
    }
  }
}

TEST_P(DistanceKernelsTest, PqTables) {
  // Every m <= 70 for dsub <= 17; a few m for the wider sub-spaces (every
  // code path of dsub <= 32, and the generic one above).
  constexpr size_t kMaxM = 70;
  constexpr size_t kMaxDsub = 100;
  // One pool of centroids and queries, sliced per (m, dsub).
  const Floats centroids(kMaxM * kPqCentroids * 17, 1, rng_);
  const Floats q(kMaxM * kMaxDsub, 1, rng_);
  for (size_t dsub = 1; dsub <= 17; ++dsub) {
    for (size_t m = 1; m <= kMaxM; ++m) {
      CheckPqTables(q.data(), centroids.data(), m, dsub);
      if (HasFatalFailure()) return;
    }
  }
  std::vector<size_t> wide;
  for (size_t dsub = 18; dsub <= 34; ++dsub) wide.push_back(dsub);
  for (size_t dsub : {size_t{40}, size_t{48}, size_t{64}, kMaxDsub}) {
    wide.push_back(dsub);
  }
  for (size_t dsub : wide) {
    for (size_t m : {1, 2, 5}) {
      ASSERT_LE(m * kPqCentroids * dsub, kMaxM * kPqCentroids * 17);
      CheckPqTables(q.data(), centroids.data(), m, dsub);
      if (HasFatalFailure()) return;
    }
  }
}

TEST_P(DistanceKernelsTest, PqAdcSingleAndScan) {
  for (size_t m = 1; m <= 70; ++m) {
    const Floats table(m * kPqCentroids, 1, rng_);
    for (size_t n : {0, 1, 2, 3, 5, 9, 17}) {
      const Bytes codes(n * m, 1, rng_);
      Output out(n);
      PqAdcScan(table.data(), codes.data(), n, m, out.data());
      ASSERT_TRUE(out.CanaryIntact()) << "PqAdcScan n=" << n << " m=" << m;
      for (size_t i = 0; i < n; ++i) {
        const uint8_t* code = codes.data() + i * m;
        const Reference ref = AdcRef(table.data(), code, m);
        ASSERT_TRUE(Near(out[i], ref))
            << "PqAdcScan n=" << n << " m=" << m << " i=" << i;
        ASSERT_TRUE(Near(PqAdc(table.data(), code, m), ref))
            << "PqAdc m=" << m << " i=" << i;
      }
    }
  }
  // The extreme codes 0 and 255 in every sub-quantiser.
  for (size_t m = 1; m <= 70; ++m) {
    const Floats table(m * kPqCentroids, 0, rng_);
    for (uint8_t value : {uint8_t{0}, uint8_t{255}}) {
      const std::vector<uint8_t> code(m, value);
      ASSERT_TRUE(Near(PqAdc(table.data(), code.data(), m),
                       AdcRef(table.data(), code.data(), m)))
          << "m=" << m << " code byte " << int{value};
    }
  }
}

TEST_P(DistanceKernelsTest, PqAdcGather) {
  constexpr size_t kRows = 100;
  for (size_t m = 1; m <= 70; ++m) {
    const Floats table(m * kPqCentroids, 1, rng_);
    const Bytes codes(kRows * m, 1, rng_);
    for (size_t n : {0, 1, 2, 3, 4, 5, 8, 33}) {
      // Random rows with repeats, plus the first and last row.
      std::vector<uint32_t> ids(n);
      for (uint32_t& id : ids) id = static_cast<uint32_t>(rng_() % kRows);
      if (n > 0) ids[0] = kRows - 1;
      if (n > 1) ids[1] = 0;
      Output out(n);
      PqAdcGather(table.data(), codes.data(), ids.data(), n, m, out.data());
      ASSERT_TRUE(out.CanaryIntact()) << "PqAdcGather n=" << n << " m=" << m;
      for (size_t i = 0; i < n; ++i) {
        ASSERT_TRUE(
            Near(out[i], AdcRef(table.data(), codes.data() + ids[i] * m, m)))
            << "PqAdcGather n=" << n << " m=" << m << " i=" << i;
      }
    }
  }
}

// Memory whose last byte is followed by an inaccessible page: a kernel that
// reads past the end of an array placed with End() faults.
class GuardedBuffer {
 public:
  explicit GuardedBuffer(size_t bytes) {
    page_ = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    usable_ = (bytes + page_ - 1) / page_ * page_;
    void* p = mmap(nullptr, usable_ + page_, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    base_ = p == MAP_FAILED ? nullptr : static_cast<char*>(p);
    if (base_ != nullptr && mprotect(base_ + usable_, page_, PROT_NONE) != 0) {
      munmap(base_, usable_ + page_);
      base_ = nullptr;
    }
  }
  ~GuardedBuffer() {
    if (base_ != nullptr) munmap(base_, usable_ + page_);
  }
  GuardedBuffer(const GuardedBuffer&) = delete;
  GuardedBuffer& operator=(const GuardedBuffer&) = delete;

  bool ok() const { return base_ != nullptr; }
  // A copy of `n` elements of `src` whose last element ends at the guard.
  template <typename T>
  const T* End(const T* src, size_t n) {
    T* dst = reinterpret_cast<T*>(base_ + usable_) - n;
    std::memcpy(dst, src, n * sizeof(T));
    return dst;
  }

 private:
  size_t page_ = 0;
  size_t usable_ = 0;
  char* base_ = nullptr;
};

TEST_P(DistanceKernelsTest, NoReadPastTheEnd) {
  for (size_t d : VectorDims()) {
    const Floats a(d, 0, rng_);
    const Floats b(d, 0, rng_);
    GuardedBuffer ga(d * sizeof(float));
    GuardedBuffer gb(d * sizeof(float));
    ASSERT_TRUE(ga.ok() && gb.ok());
    const float* ea = ga.End(a.data(), d);
    const float* eb = gb.End(b.data(), d);
    EXPECT_TRUE(Near(L2Sqr(ea, eb, d), L2Ref(a.data(), b.data(), d)));
    EXPECT_TRUE(Near(InnerProduct(ea, eb, d), IpRef(a.data(), b.data(), d)));
    for (size_t n : {1, 3, 4, 5}) {
      const Floats x(n * d, 0, rng_);
      GuardedBuffer gx(n * d * sizeof(float));
      ASSERT_TRUE(gx.ok());
      const float* ex = gx.End(x.data(), n * d);
      Output out(n);
      L2SqrBatch(ea, ex, n, d, out.data());
      EXPECT_TRUE(Near(out[n - 1], L2Ref(a.data(), ex + (n - 1) * d, d)));
      InnerProductBatch(ea, ex, n, d, out.data());
      EXPECT_TRUE(Near(out[n - 1], IpRef(a.data(), ex + (n - 1) * d, d)));
    }
  }
  for (size_t dsub = 1; dsub <= 17; ++dsub) {
    constexpr size_t kM = 3;
    const Floats centroids(kM * kPqCentroids * dsub, 0, rng_);
    const Floats q(kM * dsub, 0, rng_);
    GuardedBuffer gc(kM * kPqCentroids * dsub * sizeof(float));
    GuardedBuffer gq(kM * dsub * sizeof(float));
    ASSERT_TRUE(gc.ok() && gq.ok());
    const float* ec = gc.End(centroids.data(), kM * kPqCentroids * dsub);
    const float* eq = gq.End(q.data(), kM * dsub);
    Output table(kM * kPqCentroids);
    const size_t last = kM * kPqCentroids - 1;
    PqL2Table(eq, ec, kM, dsub, table.data());
    EXPECT_TRUE(
        Near(table[last], L2Ref(eq + (kM - 1) * dsub, ec + last * dsub, dsub)))
        << "dsub=" << dsub;
    PqIpTable(eq, ec, kM, dsub, table.data());
    EXPECT_TRUE(
        Near(table[last], IpRef(eq + (kM - 1) * dsub, ec + last * dsub, dsub)))
        << "dsub=" << dsub;
  }
  for (size_t m = 1; m <= 70; ++m) {
    const Floats table(m * kPqCentroids, 0, rng_);
    GuardedBuffer gt(m * kPqCentroids * sizeof(float));
    ASSERT_TRUE(gt.ok());
    const float* et = gt.End(table.data(), m * kPqCentroids);
    constexpr size_t kN = 5;
    const Bytes codes(kN * m, 0, rng_);
    GuardedBuffer gcodes(kN * m);
    ASSERT_TRUE(gcodes.ok());
    const uint8_t* ecodes = gcodes.End(codes.data(), kN * m);
    const uint8_t* last_code = ecodes + (kN - 1) * m;
    const Reference ref = AdcRef(et, last_code, m);
    EXPECT_TRUE(Near(PqAdc(et, last_code, m), ref)) << "m=" << m;
    Output out(kN);
    PqAdcScan(et, ecodes, kN, m, out.data());
    EXPECT_TRUE(Near(out[kN - 1], ref)) << "m=" << m;
    const uint32_t ids[kN] = {kN - 1, 0, kN - 1, 2, kN - 1};
    PqAdcGather(et, ecodes, ids, kN, m, out.data());
    EXPECT_TRUE(Near(out[kN - 1], ref)) << "m=" << m;
  }
}

// 4-bit fast scan: codes written with Pq4SetCode read back with Pq4GetCode;
// the scan equals a plain sum of the byte table over the codes (exact
// integers), at every m (odd m has a padding sub-quantiser), with the last
// block ending at an unreadable page; and the quantised table reproduces
// float ADC within its stated bound.
TEST_P(DistanceKernelsTest, Pq4FastScan) {
  std::uniform_int_distribution<int> nibble(0, 15);
  for (size_t m : {1, 2, 3, 7, 16, 31, 50, 64, 100, 255, 256, 257, 300, 784, 1024}) {
    // Entries up to the largest the quantised table holds at this m (255,
    // then 65535 / m: the sums stay below 2^16).
    std::uniform_int_distribution<int> byte(0, static_cast<int>(Pq4LutMax(m)));
    constexpr size_t kBlocks = 3;
    const size_t n = kBlocks * kPq4BlockSize, bb = Pq4BlockBytes(m);
    std::vector<uint8_t> codes(n * m);
    for (auto& c : codes) c = static_cast<uint8_t>(nibble(rng_));
    std::vector<uint8_t> blocks(kBlocks * bb, 0);
    for (size_t i = 0; i < n; ++i) {
      Pq4SetCode(blocks.data() + (i / kPq4BlockSize) * bb, m, i % kPq4BlockSize,
                 codes.data() + i * m);
    }
    std::vector<uint8_t> back(m);
    for (size_t i = 0; i < n; ++i) {
      Pq4GetCode(blocks.data() + (i / kPq4BlockSize) * bb, m, i % kPq4BlockSize, back.data());
      ASSERT_EQ(0, std::memcmp(back.data(), codes.data() + i * m, m)) << "m=" << m << " i=" << i;
    }
    std::vector<uint8_t> lut(Pq4PaddedM(m) * kPq4Centroids, 0);
    for (size_t j = 0; j < m * kPq4Centroids; ++j) lut[j] = static_cast<uint8_t>(byte(rng_));
    GuardedBuffer gb(blocks.size());
    ASSERT_TRUE(gb.ok());
    const uint8_t* eblocks = gb.End(blocks.data(), blocks.size());
    std::vector<uint16_t> out(n + 1, 0xbeef), ref(n, 0);
    Pq4ScanBlocks(lut.data(), eblocks, kBlocks, m, out.data());
    Pq4ScanBlocksScalar(lut.data(), blocks.data(), kBlocks, m, ref.data());
    for (size_t i = 0; i < n; ++i) {
      uint32_t sum = 0;
      for (size_t j = 0; j < m; ++j) sum += lut[j * kPq4Centroids + codes[i * m + j]];
      ASSERT_EQ(out[i], sum) << "m=" << m << " i=" << i;
      ASSERT_EQ(ref[i], sum) << "m=" << m << " i=" << i;
    }
    EXPECT_EQ(out[n], 0xbeef) << "wrote past the output, m=" << m;

    // Quantised float table: bias + scale * sum within m * scale / 2.
    const Floats table(m * kPq4Centroids, 0, rng_);
    float bias = 0, scale = 0;
    Pq4QuantizeTable(table.data(), m, lut.data(), &bias, &scale);
    ASSERT_GT(scale, 0.0f);
    for (size_t j = 0; j < m * kPq4Centroids; ++j) ASSERT_LE(lut[j], Pq4LutMax(m)) << "m=" << m;
    if (m % 2 != 0) {
      for (size_t c = 0; c < kPq4Centroids; ++c) EXPECT_EQ(lut[m * kPq4Centroids + c], 0);
    }
    Pq4ScanBlocks(lut.data(), blocks.data(), kBlocks, m, out.data());
    for (size_t i = 0; i < n; ++i) {
      double exact = 0;
      for (size_t j = 0; j < m; ++j) exact += table.data()[j * kPq4Centroids + codes[i * m + j]];
      const double approx = double{bias} + double{scale} * out[i];
      ASSERT_NEAR(approx, exact, 0.5 * m * scale + 1e-4 * (1 + std::abs(exact)))
          << "m=" << m << " i=" << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllLevels, DistanceKernelsTest,
                         ::testing::Values(SimdLevel::kScalar, SimdLevel::kAvx2,
                                           SimdLevel::kAvx512),
                         [](const ::testing::TestParamInfo<SimdLevel>& info) {
                           return std::string(SimdLevelName(info.param));
                         });

TEST(SimdLevelTest, SetSimdLevelForTestingCapsAtDetected) {
  const SimdLevel detected = DetectedSimdLevel();
  SetSimdLevelForTesting(SimdLevel::kAvx512);
  EXPECT_EQ(ActiveSimdLevel(), detected);
  SetSimdLevelForTesting(SimdLevel::kScalar);
  EXPECT_EQ(ActiveSimdLevel(), SimdLevel::kScalar);
  // Kernels follow the level at once (no stale per-kernel caching).
  const float a[3] = {1, 2, 3};
  const float b[3] = {0, 2, 5};
  EXPECT_EQ(L2Sqr(a, b, 3), 5.0f);
  SetSimdLevelForTesting(detected);
  EXPECT_EQ(ActiveSimdLevel(), detected);
  EXPECT_EQ(L2Sqr(a, b, 3), 5.0f);
}

TEST(SimdLevelTest, TheDefaultTableAgreesWithTheScalarReference) {
  // At AVX-512 the default table mixes AVX-512 and AVX2 kernels by a
  // calibration at the first call; whatever it chose must compute the same.
  UseDefaultKernelsForTesting();
  EXPECT_EQ(ActiveSimdLevel(), DetectedSimdLevel());
  EXPECT_EQ(std::string(KernelChoices()).rfind(SimdLevelName(DetectedSimdLevel()), 0), 0u)
      << KernelChoices();
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1, 1);
  const size_t m = 32, dsub = 4, d = m * dsub, n = 100;
  std::vector<float> q(d), centroids(m * kPqCentroids * dsub), x(n * d);
  for (auto& v : q) v = u(rng);
  for (auto& v : centroids) v = u(rng);
  for (auto& v : x) v = u(rng);
  std::vector<uint8_t> codes(n * m);
  for (auto& c : codes) c = static_cast<uint8_t>(rng());
  std::vector<uint32_t> ids(n);
  for (size_t i = 0; i < n; ++i) ids[i] = static_cast<uint32_t>((i * 37) % n);
  std::vector<float> table(m * kPqCentroids), ref_table(m * kPqCentroids);
  std::vector<float> scan(n), gathered(n), batch(n), ref_scan(n), ref_batch(n);
  PqL2Table(q.data(), centroids.data(), m, dsub, table.data());
  PqAdcScan(table.data(), codes.data(), n, m, scan.data());
  PqAdcGather(table.data(), codes.data(), ids.data(), n, m, gathered.data());
  InnerProductBatch(q.data(), x.data(), n, d, batch.data());
  const float one = PqAdc(table.data(), codes.data(), m);
  SetSimdLevelForTesting(SimdLevel::kScalar);
  PqL2Table(q.data(), centroids.data(), m, dsub, ref_table.data());
  PqAdcScan(ref_table.data(), codes.data(), n, m, ref_scan.data());
  InnerProductBatch(q.data(), x.data(), n, d, ref_batch.data());
  UseDefaultKernelsForTesting();
  for (size_t i = 0; i < table.size(); ++i) EXPECT_NEAR(table[i], ref_table[i], 1e-4) << i;
  for (size_t i = 0; i < n; ++i) {
    EXPECT_NEAR(scan[i], ref_scan[i], 1e-3) << i;
    EXPECT_NEAR(gathered[i], ref_scan[ids[i]], 1e-3) << i;
    EXPECT_NEAR(batch[i], ref_batch[i], 1e-3) << i;
  }
  EXPECT_NEAR(one, ref_scan[0], 1e-3);
}

TEST(SimdLevelTest, Names) {
  EXPECT_STREQ(SimdLevelName(SimdLevel::kScalar), "scalar");
  EXPECT_STREQ(SimdLevelName(SimdLevel::kAvx2), "avx2");
  EXPECT_STREQ(SimdLevelName(SimdLevel::kAvx512), "avx512");
}

}  // namespace
}  // namespace zoom::index
