// File: index/blas_core.h
//
// OpenBLAS's kernel choice. Debian's OpenBLAS (0.3.21, DYNAMIC_ARCH) picks
// its kernels from the CPU model when it loads; a CPU it does not know (a
// newer Xeon, or a hypervisor's generic "Intel Xeon Processor") gets its
// SSE3 "Prescott" kernels. On such a machine here (AVX-512) sgemm ran at
// 13.7 GFLOPS against 56.6 with the SkylakeX kernels (one thread), and
// 57% of an index build's time was Prescott sgemm (FAISS k-means).
// OpenBLAS reads OPENBLAS_CORETYPE only at load, so a binary that wants the
// right kernels restarts itself once with it set: EnsureBlasCore() at the
// top of main.
#ifndef ZOOM_INDEX_BLAS_CORE_H_
#define ZOOM_INDEX_BLAS_CORE_H_

namespace zoom::index {

// The core OpenBLAS runs ("Prescott", "Haswell", "SkylakeX", ...).
const char* BlasCoreName();

// The OPENBLAS_CORETYPE this CPU should have when OpenBLAS chose a weaker
// core than its instruction set allows ("SkylakeX" with AVX-512F/BW/DQ/VL,
// "Haswell" with AVX2+FMA), else nullptr; nullptr as well when
// OPENBLAS_CORETYPE is set already (the user's choice, or our restart).
const char* PreferredBlasCoreType();

// When PreferredBlasCoreType() names a core: sets OPENBLAS_CORETYPE and
// re-executes this program (/proc/self/exe) with the same argv; returns
// only when there is nothing to do or the exec failed (then the process
// goes on with the kernels it has). Call first thing in main, before any
// thread is started. ZOOM_BLAS_CORETYPE=keep in the environment disables it.
void EnsureBlasCore(char** argv);

}  // namespace zoom::index

#endif  // ZOOM_INDEX_BLAS_CORE_H_
