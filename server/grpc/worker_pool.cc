#include "server/grpc/worker_pool.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace zoom::server {

const char* WorkClassName(WorkClass c) {
  switch (c) {
    case WorkClass::kRead: return "read";
    case WorkClass::kWrite: return "write";
    case WorkClass::kAdmin: return "admin";
  }
  return "unknown";
}

WorkerPoolOptions WorkerPoolOptions::ForServer(int threads) {
  WorkerPoolOptions o;
  o.threads = std::max(1, threads);
  // Reads leave a worker to the other classes, so writes and admin work go
  // on under any read load.
  o.limits[static_cast<int>(WorkClass::kRead)] = {std::max(1, o.threads - 1), 8192};
  o.limits[static_cast<int>(WorkClass::kWrite)] = {std::max(1, o.threads / 2), 1024};
  o.limits[static_cast<int>(WorkClass::kAdmin)] = {std::max(1, o.threads / 4), 64};
  o.max_inline = 1;
  return o;
}

WorkerPool::WorkerPool(int threads) : WorkerPool([threads] {
  WorkerPoolOptions o;
  o.threads = std::max(1, threads);
  return o;
}()) {}

WorkerPool::WorkerPool(const WorkerPoolOptions& options) : options_(options) {
  for (ClassState& c : classes_) c.unit_us = absl::ToDoubleMicroseconds(options_.initial_unit_time);
  for (int i = 0; i < options_.threads; ++i) workers_.emplace_back([this] { Run(); });
}

void WorkerPool::Submit(std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  ClassState& c = classes_[static_cast<int>(WorkClass::kAdmin)];
  c.queue.push_back({1, std::move(task)});
  c.queued_units += 1;
}

absl::Duration WorkerPool::EstimatedWaitLocked(WorkClass cls) const {
  const int i = static_cast<int>(cls);
  const ClassState& c = classes_[i];
  const int parallel = std::max(1, std::min(options_.limits[i].max_running, options_.threads));
  return absl::Microseconds(static_cast<double>(c.queued_units) * c.unit_us / parallel);
}

absl::Duration WorkerPool::EstimatedWait(WorkClass cls) const {
  absl::MutexLock lock(&mu_);
  return EstimatedWaitLocked(cls);
}

absl::Status WorkerPool::TrySubmit(WorkClass cls, uint64_t units, absl::Time deadline,
                                   std::function<void()> task) {
  units = std::max<uint64_t>(units, 1);
  const int i = static_cast<int>(cls);
  absl::MutexLock lock(&mu_);
  if (stopping_) return absl::UnavailableError("the server is shutting down");
  ClassState& c = classes_[i];
  const uint64_t cap = options_.limits[i].max_queued_units;
  const uint64_t waiting = c.queued_units + c.held_units;
  if (waiting > 0 && waiting + units > cap) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the server is overloaded: its ", WorkClassName(cls), " queue holds ", waiting,
        " of ", cap, " units (this request is ", units,
        "); retry with backoff, or send smaller requests"));
  }
  if (deadline != absl::InfiniteFuture() && c.queued_units > 0) {
    const absl::Duration wait = EstimatedWaitLocked(cls);
    const absl::Duration left = deadline - absl::Now();
    if (wait > left) {
      return absl::DeadlineExceededError(absl::StrFormat(
          "refused at once: the %s work queued ahead would take about %d ms, beyond the "
          "deadline (%d ms left)",
          WorkClassName(cls), static_cast<int64_t>(absl::ToDoubleMilliseconds(wait)),
          static_cast<int64_t>(absl::ToDoubleMilliseconds(left))));
    }
  }
  c.queue.push_back({units, std::move(task)});
  c.queued_units += units;
  return absl::OkStatus();
}

void WorkerPool::Hold(WorkClass cls, uint64_t units) {
  absl::MutexLock lock(&mu_);
  classes_[static_cast<int>(cls)].held_units += std::max<uint64_t>(units, 1);
}

void WorkerPool::Release(WorkClass cls, uint64_t units) {
  absl::MutexLock lock(&mu_);
  ClassState& c = classes_[static_cast<int>(cls)];
  c.held_units -= std::min(c.held_units, std::max<uint64_t>(units, 1));
}

uint64_t WorkerPool::held_units(WorkClass cls) const {
  absl::MutexLock lock(&mu_);
  return classes_[static_cast<int>(cls)].held_units;
}

bool WorkerPool::TryBeginInline(WorkClass cls) {
  const int i = static_cast<int>(cls);
  absl::MutexLock lock(&mu_);
  ClassState& c = classes_[i];
  if (stopping_ || draining_ || inline_running_ >= options_.max_inline || !c.queue.empty() ||
      c.running >= options_.limits[i].max_running) {
    return false;
  }
  ++inline_running_;
  ++inline_runs_;
  ++c.running;
  return true;
}

void WorkerPool::EndInline(WorkClass cls) {
  absl::MutexLock lock(&mu_);
  --inline_running_;
  --classes_[static_cast<int>(cls)].running;
}

uint64_t WorkerPool::inline_runs() const {
  absl::MutexLock lock(&mu_);
  return inline_runs_;
}

size_t WorkerPool::queued() const {
  absl::MutexLock lock(&mu_);
  size_t n = 0;
  for (const ClassState& c : classes_) n += c.queue.size();
  return n;
}

void WorkerPool::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  for (auto& t : workers_) t.join();
}

absl::Status WorkerPool::OpenCall() {
  absl::MutexLock lock(&mu_);
  if (draining_) return refusal_;
  ++open_calls_;
  return absl::OkStatus();
}

void WorkerPool::CloseCall() {
  absl::MutexLock lock(&mu_);
  --open_calls_;
}

int64_t WorkerPool::open_calls() const {
  absl::MutexLock lock(&mu_);
  return open_calls_;
}

void WorkerPool::Drain(absl::Status refusal) {
  absl::MutexLock lock(&mu_);
  draining_ = true;
  refusal_ = std::move(refusal);
}

bool WorkerPool::WaitIdle(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithDeadline(
      absl::Condition(
          +[](WorkerPool* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
            if (p->open_calls_ > 0 || p->inline_running_ > 0) return false;
            for (const ClassState& c : p->classes_) {
              if (!c.queue.empty() || c.running > 0 || c.held_units > 0) return false;
            }
            return true;
          },
          this),
      deadline);
}

bool WorkerPool::HasRunnableLocked() const {
  for (int i = 0; i < kWorkClasses; ++i) {
    if (!classes_[i].queue.empty() && classes_[i].running < options_.limits[i].max_running) {
      return true;
    }
  }
  return false;
}

void WorkerPool::Run() {
  for (;;) {
    Task task;
    int cls = -1;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](WorkerPool* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
            bool any_queued = false;
            for (const ClassState& c : p->classes_) any_queued |= !c.queue.empty();
            return p->HasRunnableLocked() || (p->stopping_ && !any_queued);
          },
          this));
      for (int k = 0; k < kWorkClasses; ++k) {
        const int i = (next_class_ + k) % kWorkClasses;
        if (!classes_[i].queue.empty() && classes_[i].running < options_.limits[i].max_running) {
          cls = i;
          break;
        }
      }
      if (cls < 0) return;  // stopping and drained
      next_class_ = (cls + 1) % kWorkClasses;
      ClassState& c = classes_[cls];
      task = std::move(c.queue.front());
      c.queue.pop_front();
      c.queued_units -= std::min(c.queued_units, task.units);
      ++c.running;
    }
    const absl::Time start = absl::Now();
    task.fn();
    const double us = absl::ToDoubleMicroseconds(absl::Now() - start) / task.units;
    absl::MutexLock lock(&mu_);
    ClassState& c = classes_[cls];
    --c.running;
    c.unit_us = 0.9 * c.unit_us + 0.1 * us;
  }
}

}  // namespace zoom::server
