// File: server/engine/job_runner.h
//
// JobRunner: the background work of a Database and its collections (index
// builds and their calibrations, payload index builds, the maintenance
// tick that compacts and releases retired segments) on a fixed set of
// threads, one runner per Database.
//
//   keys         a job has a key ("7/build", "7/field/color"): at most one
//                job of a key runs at a time, and one more may wait behind
//                it (Submit); TrySubmit queues only when the key is idle
//   priorities   among the waiting jobs that may start, a higher priority
//                starts first (kUser: a client asked; kAuto: an automatic
//                build or the tick; kIdle: a calibration), then the oldest
//   delays       a job may wait until a time (not_before): the tick's next
//                run, a retry after a backoff
//   waiters      WhenDone / Wait: once the key is idle (none runs or
//                waits), with the status of its last job; LastStatus
//   backoff      NoteResult / Due / BackoffOf: failures in a row of a
//                backoff key (a collection's builds and compactions share
//                one) and when automatic work may try again:
//                base * 2^(failures - 1), at most max
//   cancellation CancelGroup drops the waiting jobs of a group (a
//                collection): their waiters get the job's `dropped` status;
//                with `wait` it returns once none of the group runs. A
//                running job is stopped by its owner's own flag (the
//                collection's closing flag reaches the build's
//                cancellation points); the runner does not interrupt it.
//   stop         the destructor drops every waiting job and joins the
//                threads after the running ones end; Submit then answers
//                false and calls nothing.
//
// A job must not wait for another job of the same runner (every thread
// could be waiting). Callbacks (WhenDone) run on the thread that ends the
// key's last job, or on the caller's when the key is idle: never under the
// runner's lock.
//
// Thread safety: every method may be called from any thread, also from a
// job.
#ifndef ZOOM_SERVER_ENGINE_JOB_RUNNER_H_
#define ZOOM_SERVER_ENGINE_JOB_RUNNER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace zoom::server {

class JobRunner {
 public:
  enum class Priority : int { kIdle = 0, kAuto = 1, kUser = 2 };

  struct Job {
    std::string key;
    std::string group;
    Priority priority = Priority::kAuto;
    absl::Time not_before = absl::InfinitePast();
    std::function<absl::Status()> run;
    // Called once it is queued, under the runner's lock (before it can
    // start): quick, and not calling the runner. May be empty.
    std::function<void()> on_queued;
    // Called when it is dropped before it started (CancelGroup, stop), on
    // the dropping thread, before its waiters hear: the owner puts back
    // what on_queued changed. May be empty.
    std::function<void()> on_dropped;
    // What its waiters get when it is dropped before it started.
    absl::Status dropped = absl::CancelledError("the job was cancelled before it started");
  };

  struct Backoff {
    uint32_t failures = 0;                        // in a row
    absl::Time retry_at = absl::InfinitePast();  // automatic work waits until then
  };

  struct Options {
    int threads = 4;
    absl::Duration retry_base = absl::Seconds(10);
    absl::Duration retry_max = absl::Minutes(15);
  };

  explicit JobRunner(Options options);
  ~JobRunner();
  JobRunner(const JobRunner&) = delete;
  JobRunner& operator=(const JobRunner&) = delete;

  // Queues `job` to run after the key's running job (if any); a job of the
  // key already waiting is replaced by this one (its waiters stay). False
  // (nothing queued) once the runner stops.
  bool Submit(Job job);
  // Queues `job` only when no job of its key runs or waits: false otherwise.
  bool TrySubmit(Job job);
  // Whether a job of `key` runs or waits.
  bool Active(const std::string& key) const;
  // done(the status of the key's last job) once the key is idle: at once,
  // on this thread, when it is.
  void WhenDone(const std::string& key, std::function<void(absl::Status)> done);
  // Blocks until the key is idle; the status of its last job. Not from a job.
  absl::Status Wait(const std::string& key);
  // The status of the key's last job (OK before any); SetLastStatus sets it
  // (a failure found before any job, e.g. at open).
  absl::Status LastStatus(const std::string& key) const;
  void SetLastStatus(const std::string& key, absl::Status status);

  // Drops the group's waiting jobs; with `wait`, returns once none of its
  // jobs runs (not from one of them).
  void CancelGroup(const std::string& group, bool wait);

  // Books the result of automatic work under `backoff_key`: OK clears the
  // failures, an error counts one and sets the retry time. The new state.
  Backoff NoteResult(const std::string& backoff_key, const absl::Status& status);
  Backoff BackoffOf(const std::string& backoff_key) const;
  // Whether automatic work of `backoff_key` may run now.
  bool Due(const std::string& backoff_key) const { return absl::Now() >= BackoffOf(backoff_key).retry_at; }

 private:
  struct Queued {
    Job job;
    uint64_t seq = 0;
  };
  struct KeyState {
    bool running = false;
    std::unique_ptr<Queued> waiting;  // at most one
    absl::Status last;
    std::vector<std::function<void(absl::Status)>> waiters;
    std::string running_group;
  };

  void Worker();
  // Drops the waiting jobs (of `group`; null: all), then calls their
  // on_dropped and the waiters of keys left idle; `stop`: nothing is
  // queued after.
  void DropWaiting(const std::string* group, bool stop);
  bool Enqueue(Job job, bool only_if_idle);
  // Under mu_: the key's waiters to call once it is idle (moves them out).
  std::vector<std::function<void(absl::Status)>> TakeWaitersIfIdleLocked(KeyState* ks)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool IdleLocked(const KeyState& ks) const { return !ks.running && ks.waiting == nullptr; }

  const Options options_;
  mutable absl::Mutex mu_;
  absl::CondVar changed_;  // a job queued, ended or dropped; stopping
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, KeyState> keys_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Backoff> backoff_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_;
};

}  // namespace zoom::server

#endif  // ZOOM_SERVER_ENGINE_JOB_RUNNER_H_
