// Index builds stop at a cancellation point once IndexSpec::cancel is set
// (trust, case 6: SIGTERM during a build must exit within the grace). Every
// test sets the flag at a point the build itself reaches (before it starts,
// or from its progress callback), so none depends on timing.
#include <atomic>
#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "index/index_internal.h"
#include "index/vector_index.h"
#include "tests/testing/status_matchers.h"

namespace zoom::index {
namespace {

using ::zoom::testing::StatusIs;

std::vector<float> Gaussian(size_t n, size_t d, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0, 1);
  std::vector<float> x(n * d);
  for (float& v : x) v = g(rng);
  return x;
}

IndexSpec Spec(IndexKind kind, const std::atomic<bool>* cancel) {
  IndexSpec spec;
  spec.kind = kind;
  spec.dim = 16;
  spec.pq.m = 4;
  spec.nlist = kind == IndexKind::kIvfHnswPq ? 16 : 0;
  spec.build_threads = 2;
  spec.cancel = cancel;
  return spec;
}

TEST(BuildCancelTest, ASetFlagStopsEveryKindBeforeItBuilds) {
  const std::vector<float> x = Gaussian(2000, 16, 1);
  std::atomic<bool> cancel{true};
  for (IndexKind kind : {IndexKind::kHnswPq, IndexKind::kIvfHnswPq}) {
    EXPECT_THAT(BuildIndex(Spec(kind, &cancel), x.data(), 2000).status(),
                StatusIs(absl::StatusCode::kCancelled));
  }
}

TEST(BuildCancelTest, AnUnsetFlagBuildsAndTheIndexKeepsNoPointerToIt) {
  const std::vector<float> x = Gaussian(2000, 16, 2);
  std::atomic<bool> cancel{false};
  for (IndexKind kind : {IndexKind::kHnswPq, IndexKind::kIvfHnswPq}) {
    ASSERT_OK_AND_ASSIGN(auto idx, BuildIndex(Spec(kind, &cancel), x.data(), 2000));
    EXPECT_EQ(idx->size(), 2000u);
    EXPECT_EQ(idx->spec().cancel, nullptr);
  }
}

// The streaming build: the flag set by its own progress callback after
// training (progress 0.1) stops it before the rows are encoded, and a flag
// set at the first chunk's end stops it before the next.
TEST(BuildCancelTest, AStreamingBuildStopsBetweenChunks) {
  const size_t n = 6000, d = 16;
  const std::vector<float> x = Gaussian(n, d, 3);
  RowReader read = [&](absl::Span<const InternalId> ids, float* out) {
    for (size_t i = 0; i < ids.size(); ++i) {
      std::copy_n(x.data() + size_t{ids[i]} * d, d, out + i * d);
    }
    return absl::OkStatus();
  };
  for (double at : {0.1, 0.2}) {
    std::atomic<bool> cancel{false};
    int chunks_after = 0;
    StreamingBuildOptions options;
    options.chunk_rows = 1000;
    options.progress = [&](double p) {
      if (cancel.load()) ++chunks_after;
      if (p >= at) cancel = true;
    };
    EXPECT_THAT(
        BuildIndexStreaming(Spec(IndexKind::kIvfHnswPq, &cancel), n, nullptr, read, options)
            .status(),
        StatusIs(absl::StatusCode::kCancelled))
        << at;
    EXPECT_EQ(chunks_after, 0) << "no chunk is encoded once the flag is set";
  }
}

// FAISS's k-means asks the interrupt hook between iterations: a cancelled
// scope makes it stop (FAISS throws; KMeans answers Cancelled, not
// Internal), and the hook answers no outside a cancelled scope.
TEST(BuildCancelTest, KMeansStopsAtItsNextIteration) {
  const std::vector<float> x = Gaussian(4000, 16, 4);
  internal::EnsureFaissInterruptHook();
  {
    std::atomic<bool> cancel{true};
    internal::BuildCancelScope scope(&cancel);
    EXPECT_THAT(internal::KMeans(x.data(), 4000, 16, 64, 20, 1, false).status(),
                StatusIs(absl::StatusCode::kCancelled));
  }
  EXPECT_FALSE(internal::BuildCancelled());
  ASSERT_OK_AND_ASSIGN(auto centroids, internal::KMeans(x.data(), 4000, 16, 64, 5, 1, false));
  EXPECT_EQ(centroids.size(), 64u * 16u);
}

// ParallelFor under a set flag runs no item, on one thread or several.
TEST(BuildCancelTest, ParallelForTakesNoItemOnceCancelled) {
  for (int threads : {1, 2, 4}) {
    std::atomic<bool> cancel{true};
    internal::BuildCancelScope scope(&cancel);
    std::atomic<int> ran{0};
    internal::ParallelFor(1000, threads, [&](size_t, int) { ++ran; });
    EXPECT_EQ(ran.load(), 0) << threads;
  }
  std::atomic<int> ran{0};
  internal::ParallelFor(1000, 2, [&](size_t, int) { ++ran; });
  EXPECT_EQ(ran.load(), 1000);
}

}  // namespace
}  // namespace zoom::index
