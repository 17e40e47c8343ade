// File: common/process.h
//
// Figures of a process as the benchmark tools report them (zoombench,
// zoomload's server workloads: the same figure read the same way on both
// sides of a comparison), and the two process chores they share:
//
//   ProcessCpuSeconds, CpuSecondsOf    CPU time, user + system, every thread;
//   CurrentRssBytes, PeakRssBytes,     VmRSS and VmHWM (this process, or
//   RssBytesOf, PeakRssBytesOf           another by pid);
//   LoadAverage1m                      the machine's 1-minute load;
//   SelfDir                            where this executable is;
//   RunCommand                         a shell command's standard output.
//
// Linux: the figures come from /proc (getrusage for this process's CPU),
// and read as 0 (the load as -1) when unavailable (no /proc, a pid that has
// exited): a figure missing from a report must not stop a benchmark.
// Thread-safe (no state).
#ifndef ZOOM_COMMON_PROCESS_H_
#define ZOOM_COMMON_PROCESS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace zoom {

// This process's CPU time so far, in seconds (getrusage: user + system,
// every thread, a server in the same process included).
double ProcessCpuSeconds();
// Process `pid`'s CPU time so far, in seconds (/proc/PID/stat: utime +
// stime over the clock tick).
double CpuSecondsOf(int pid);

// Resident set size (VmRSS) and its peak (VmHWM), in bytes, of this
// process (/proc/self/status) or of `pid` (/proc/PID/status).
uint64_t CurrentRssBytes();
uint64_t PeakRssBytes();
uint64_t RssBytesOf(int pid);
uint64_t PeakRssBytesOf(int pid);

// Returns the heap's free memory to the system (glibc's malloc_trim; a
// no-op elsewhere): after a build, a compaction or a model's unload, glibc
// keeps the freed staging buffers' pages (at 1M points the server's RSS
// stayed ~130 MB above what it serves from).
void ReleaseFreedMemory();

// The 1-minute load average (/proc/loadavg). The benchmark machines are
// shared: a load above the core count means the timings are contaminated
// by other processes, so the tools print it beside them.
double LoadAverage1m();

// The directory of this executable (/proc/self/exe's, without the trailing
// '/'; "." when unknown): the tools find their sibling binaries from it.
std::string SelfDir();

// Runs `command` through /bin/sh and waits for it: its standard output
// (stderr is not captured: redirect it in `command`), or Internal naming
// the command and its wait status when it cannot start or exits non-zero.
absl::StatusOr<std::string> RunCommand(const std::string& command);

}  // namespace zoom

#endif  // ZOOM_COMMON_PROCESS_H_
