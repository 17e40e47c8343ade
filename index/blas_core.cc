#include "index/blas_core.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>

extern "C" {
char* openblas_get_corename(void);
}

namespace zoom::index {
namespace {

// How much of the x86 instruction set a core's kernels use: 0 up to SSE4,
// 1 AVX, 2 AVX2, 3 AVX-512.
int CoreRank(const char* name) {
  static const char* const kAvx512[] = {"SkylakeX", "Cooperlake", "SapphireRapids"};
  static const char* const kAvx2[] = {"Haswell", "Zen", "Skylake"};
  static const char* const kAvx[] = {"Sandybridge", "Bulldozer", "Piledriver", "Steamroller",
                                     "Excavator"};
  for (const char* n : kAvx512) {
    if (strcasecmp(name, n) == 0) return 3;
  }
  for (const char* n : kAvx2) {
    if (strcasecmp(name, n) == 0) return 2;
  }
  for (const char* n : kAvx) {
    if (strcasecmp(name, n) == 0) return 1;
  }
  return 0;
}

}  // namespace

const char* BlasCoreName() {
  const char* name = openblas_get_corename();
  return name != nullptr ? name : "unknown";
}

const char* PreferredBlasCoreType() {
#if defined(__x86_64__)
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return nullptr;
  __builtin_cpu_init();
  const char* want = nullptr;
  int want_rank = 0;
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl")) {
    want = "SkylakeX";
    want_rank = 3;
  } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    want = "Haswell";
    want_rank = 2;
  }
  if (want == nullptr || CoreRank(BlasCoreName()) >= want_rank) return nullptr;
  return want;
#else
  return nullptr;
#endif
}

void EnsureBlasCore(char** argv) {
  const char* keep = std::getenv("ZOOM_BLAS_CORETYPE");
  if (keep != nullptr && std::strcmp(keep, "keep") == 0) return;
  const char* core = PreferredBlasCoreType();
  if (core == nullptr) return;
  if (setenv("OPENBLAS_CORETYPE", core, 1) != 0) return;
  execv("/proc/self/exe", argv);
  // The exec failed: go on with the kernels OpenBLAS chose.
}

}  // namespace zoom::index
