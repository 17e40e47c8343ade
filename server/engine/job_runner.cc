#include "server/engine/job_runner.h"

#include <algorithm>
#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"

namespace zoom::server {

JobRunner::JobRunner(Options options) : options_(options) {
  const int n = std::max(1, options_.threads);
  threads_.reserve(n);
  for (int i = 0; i < n; ++i) threads_.emplace_back([this] { Worker(); });
}

JobRunner::~JobRunner() {
  DropWaiting(nullptr, /*stop=*/true);
  for (std::thread& t : threads_) {
    // (The last owner may let go on a worker thread: it cannot join itself.)
    if (t.get_id() == std::this_thread::get_id()) {
      t.detach();
    } else {
      t.join();
    }
  }
}

bool JobRunner::Submit(Job job) { return Enqueue(std::move(job), /*only_if_idle=*/false); }

bool JobRunner::TrySubmit(Job job) { return Enqueue(std::move(job), /*only_if_idle=*/true); }

bool JobRunner::Enqueue(Job job, bool only_if_idle) {
  absl::MutexLock l(&mu_);
  if (stopping_) return false;
  KeyState& ks = keys_[job.key];
  if (only_if_idle && !IdleLocked(ks)) return false;
  if (job.on_queued) job.on_queued();
  auto q = std::make_unique<Queued>();
  q->job = std::move(job);
  q->seq = next_seq_++;
  ks.waiting = std::move(q);  // replaces a waiting one (its waiters stay on the key)
  changed_.SignalAll();
  return true;
}

bool JobRunner::Active(const std::string& key) const {
  absl::MutexLock l(&mu_);
  auto it = keys_.find(key);
  return it != keys_.end() && !IdleLocked(it->second);
}

void JobRunner::WhenDone(const std::string& key, std::function<void(absl::Status)> done) {
  absl::Status now;
  {
    absl::MutexLock l(&mu_);
    KeyState& ks = keys_[key];
    if (!IdleLocked(ks)) {
      ks.waiters.push_back(std::move(done));
      return;
    }
    now = ks.last;
  }
  done(now);
}

absl::Status JobRunner::Wait(const std::string& key) {
  absl::MutexLock l(&mu_);
  auto idle = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    auto it = keys_.find(key);
    return it == keys_.end() || IdleLocked(it->second);
  };
  while (!idle()) changed_.Wait(&mu_);
  auto it = keys_.find(key);
  return it == keys_.end() ? absl::OkStatus() : it->second.last;
}

absl::Status JobRunner::LastStatus(const std::string& key) const {
  absl::MutexLock l(&mu_);
  auto it = keys_.find(key);
  return it == keys_.end() ? absl::OkStatus() : it->second.last;
}

void JobRunner::SetLastStatus(const std::string& key, absl::Status status) {
  absl::MutexLock l(&mu_);
  keys_[key].last = std::move(status);
}

void JobRunner::DropWaiting(const std::string* group, bool stop) {
  std::vector<std::function<void()>> dropped;
  std::vector<std::pair<std::function<void(absl::Status)>, absl::Status>> calls;
  {
    absl::MutexLock l(&mu_);
    if (stop) stopping_ = true;
    for (auto& [key, ks] : keys_) {
      if (ks.waiting != nullptr && (group == nullptr || ks.waiting->job.group == *group)) {
        ks.last = ks.waiting->job.dropped;
        if (ks.waiting->job.on_dropped) dropped.push_back(std::move(ks.waiting->job.on_dropped));
        ks.waiting.reset();
      }
      for (auto& w : TakeWaitersIfIdleLocked(&ks)) calls.emplace_back(std::move(w), ks.last);
    }
    changed_.SignalAll();
  }
  for (auto& d : dropped) d();
  for (auto& [w, st] : calls) w(st);
}

void JobRunner::CancelGroup(const std::string& group, bool wait) {
  DropWaiting(&group, /*stop=*/false);
  if (!wait) return;
  absl::MutexLock l(&mu_);
  auto none = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    for (const auto& [key, ks] : keys_) {
      if (ks.running && ks.running_group == group) return false;
    }
    return true;
  };
  while (!none()) changed_.Wait(&mu_);
}

JobRunner::Backoff JobRunner::NoteResult(const std::string& backoff_key,
                                         const absl::Status& status) {
  absl::MutexLock l(&mu_);
  Backoff& b = backoff_[backoff_key];
  if (status.ok()) {
    b = Backoff();
    return b;
  }
  ++b.failures;
  absl::Duration wait = options_.retry_base;
  for (uint32_t i = 1; i < b.failures && wait < options_.retry_max; ++i) wait *= 2;
  b.retry_at = absl::Now() + std::min(wait, options_.retry_max);
  return b;
}

JobRunner::Backoff JobRunner::BackoffOf(const std::string& backoff_key) const {
  absl::MutexLock l(&mu_);
  auto it = backoff_.find(backoff_key);
  return it == backoff_.end() ? Backoff() : it->second;
}

std::vector<std::function<void(absl::Status)>> JobRunner::TakeWaitersIfIdleLocked(KeyState* ks) {
  if (!IdleLocked(*ks)) return {};
  return std::exchange(ks->waiters, {});
}

void JobRunner::Worker() {
  for (;;) {
    std::string key;
    Job job;
    {
      absl::MutexLock l(&mu_);
      for (;;) {
        if (stopping_) return;
        // The job to start: not running already, due, highest priority,
        // then oldest; else the earliest time one becomes due.
        const absl::Time now = absl::Now();
        KeyState* best = nullptr;
        const std::string* best_key = nullptr;
        absl::Time wake = absl::InfiniteFuture();
        for (auto& [k, ks] : keys_) {
          if (ks.running || ks.waiting == nullptr) continue;
          const Queued& q = *ks.waiting;
          if (q.job.not_before > now) {
            wake = std::min(wake, q.job.not_before);
            continue;
          }
          if (best == nullptr || q.job.priority > best->waiting->job.priority ||
              (q.job.priority == best->waiting->job.priority && q.seq < best->waiting->seq)) {
            best = &ks;
            best_key = &k;
          }
        }
        if (best != nullptr) {
          key = *best_key;
          job = std::move(best->waiting->job);
          best->waiting.reset();
          best->running = true;
          best->running_group = job.group;
          break;
        }
        if (wake == absl::InfiniteFuture()) {
          changed_.Wait(&mu_);
        } else {
          changed_.WaitWithDeadline(&mu_, wake);
        }
      }
    }
    absl::Status st;
    try {
      st = job.run();
    } catch (const std::bad_alloc&) {
      st = absl::ResourceExhaustedError(absl::StrCat("job ", key, ": out of memory"));
    } catch (const std::exception& e) {
      st = absl::InternalError(absl::StrCat("job ", key, " failed: ", e.what()));
    }
    job = Job();  // its closure's captures go before the waiters hear
    std::vector<std::function<void(absl::Status)>> waiters;
    {
      absl::MutexLock l(&mu_);
      KeyState& ks = keys_[key];
      ks.running = false;
      ks.running_group.clear();
      ks.last = st;
      waiters = TakeWaitersIfIdleLocked(&ks);
      changed_.SignalAll();
    }
    for (auto& w : waiters) w(st);
  }
}

}  // namespace zoom::server
