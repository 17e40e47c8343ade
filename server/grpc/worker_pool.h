// File: server/grpc/worker_pool.h
//
// WorkerPool: a fixed set of threads that run the RPC handlers' work, so
// that gRPC's callback threads never block on the SSD or an index build,
// with admission control (load shedding) per class of work:
//
//   kRead   searches, gets, listings, decoding
//   kWrite  upserts, deletes, import messages
//   kAdmin  collection and model management, builds, compactions
//
// Each class has a bounded queue, counted in units (a request's cost: one
// per query of a batch, per 100 points of a write, ...), and a cap on the
// workers it may occupy at once (writes and admin work can never take every
// worker from the reads). TrySubmit refuses at once, without queueing, when
// the class's queue is full (ResourceExhausted) or when the work queued
// ahead is expected to outlast the request's deadline (DeadlineExceeded;
// the estimate is the queued units times the class's recent time per unit).
// A request larger than the whole queue is admitted when the queue is
// empty. Workers take work round-robin over the classes that have some and
// are under their cap.
//
// Inline runs: TryBeginInline lets the caller run a short request of `cls`
// on its own thread (gRPC's) instead of queueing it, when nothing of the
// class is queued (it jumps no queue), the class is under its cap of
// running work (an inline run counts against it, as a worker would), and
// fewer than `max_inline` inline runs are going on (the rest of gRPC's
// threads stay free to take calls). EndInline ends it. On an idle server
// this saves the hand-off to a worker and back (~300 µs of latency on a
// 2-core VM, docs/benchmarks.md "grpc").
//
// Draining (a server's shutdown, zoom_server.h): from Drain on, a call that
// starts is refused (OpenCall: UNAVAILABLE, retryable: nothing ran), while
// the calls already open go on, their later messages and continuations
// included. WaitIdle returns once every open call is closed (gRPC is done
// with its reactor: the answer is on its way) and no work is queued,
// running or held: then nothing a client asked for is half done.
//
// Thread safety: all methods are safe from any thread. Stop() runs what is
// queued and joins.
#ifndef ZOOM_SERVER_GRPC_WORKER_POOL_H_
#define ZOOM_SERVER_GRPC_WORKER_POOL_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace zoom::server {

enum class WorkClass : int { kRead = 0, kWrite = 1, kAdmin = 2 };
inline constexpr int kWorkClasses = 3;
const char* WorkClassName(WorkClass c);

struct WorkClassLimits {
  int max_running = 1 << 20;                   // workers the class may occupy at once
  uint64_t max_queued_units = uint64_t{1} << 62;  // beyond: ResourceExhausted
};

struct WorkerPoolOptions {
  int threads = 8;
  std::array<WorkClassLimits, kWorkClasses> limits;
  // Inline runs allowed at once (0: none; see the file comment).
  int max_inline = 0;
  // The time per unit assumed before any work of a class has finished.
  absl::Duration initial_unit_time = absl::Microseconds(500);
  // The server's defaults for `threads` workers: reads may use all but one
  // and queue 8192 units; writes at most half the workers and 1024 units;
  // admin work a quarter of them (at least one) and 64 units; one inline
  // run at a time.
  static WorkerPoolOptions ForServer(int threads);
};

class WorkerPool {
 public:
  explicit WorkerPool(int threads);  // no limits
  explicit WorkerPool(const WorkerPoolOptions& options);
  ~WorkerPool() { Stop(); }
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Queues `task` as one unit of admin-class work, whatever the limits
  // (internal work, tests).
  void Submit(std::function<void()> task);
  // Queues `task` (`units` of class `cls`) or refuses it (see the file
  // comment); a refused task is dropped and not run.
  absl::Status TrySubmit(WorkClass cls, uint64_t units, absl::Time deadline,
                         std::function<void()> task);
  // True when the caller may run `cls` work on its own thread now (see the
  // file comment); it must then call EndInline once done. Inline runs do
  // not feed the class's time per unit: they are short by choice, and the
  // estimate is for the work that queues.
  bool TryBeginInline(WorkClass cls);
  // Work a task started that goes on without a worker (a router's search
  // waiting for its nodes): its units count against the class's queue
  // limit from Hold until Release, so that a flood of such calls is shed
  // as queued work is (ResourceExhausted), not held without bound.
  void Hold(WorkClass cls, uint64_t units);
  void Release(WorkClass cls, uint64_t units);
  uint64_t held_units(WorkClass cls) const;
  void EndInline(WorkClass cls);
  // Inline runs so far (metrics, tests).
  uint64_t inline_runs() const;
  // How long work of `cls` queued now would wait before it starts (the
  // estimate TrySubmit uses).
  absl::Duration EstimatedWait(WorkClass cls) const;
  size_t queued() const;
  void Stop();

  // A call's start: OK, counted open until CloseCall; or, once draining,
  // the refusal (not counted).
  absl::Status OpenCall();
  void CloseCall();
  int64_t open_calls() const;
  // From now on OpenCall refuses with `refusal` (see the file comment).
  void Drain(absl::Status refusal);
  // True once no call is open and no work is queued, running or held;
  // false if `deadline` comes first.
  bool WaitIdle(absl::Time deadline);

 private:
  struct Task {
    uint64_t units;
    std::function<void()> fn;
  };
  struct ClassState {
    std::deque<Task> queue;
    uint64_t queued_units = 0;
    uint64_t held_units = 0;  // Hold .. Release
    int running = 0;
    double unit_us = 0;  // moving average of the time per unit
  };
  void Run();
  bool HasRunnableLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Duration EstimatedWaitLocked(WorkClass cls) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  WorkerPoolOptions options_;
  mutable absl::Mutex mu_;
  std::array<ClassState, kWorkClasses> classes_ ABSL_GUARDED_BY(mu_);
  int next_class_ ABSL_GUARDED_BY(mu_) = 0;  // round-robin start
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status refusal_ ABSL_GUARDED_BY(mu_);
  int64_t open_calls_ ABSL_GUARDED_BY(mu_) = 0;
  int inline_running_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t inline_runs_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::thread> workers_;
};

// A call's membership in its pool's open calls: a reactor's member, so that
// the call closes when gRPC is done with it (the reactor's OnDone deletes
// it). Release closes it early (a call answered at once with a refusal).
class OpenedCall {
 public:
  OpenedCall() = default;
  ~OpenedCall() { Release(); }
  OpenedCall(const OpenedCall&) = delete;
  OpenedCall& operator=(const OpenedCall&) = delete;
  // pool->OpenCall(); OK and counted, or the refusal. A null pool: OK.
  absl::Status Open(WorkerPool* pool) {
    if (pool == nullptr) return absl::OkStatus();
    absl::Status st = pool->OpenCall();
    if (st.ok()) pool_ = pool;
    return st;
  }
  void Release() {
    if (pool_ != nullptr) pool_->CloseCall();
    pool_ = nullptr;
  }

 private:
  WorkerPool* pool_ = nullptr;
};

}  // namespace zoom::server

#endif  // ZOOM_SERVER_GRPC_WORKER_POOL_H_
