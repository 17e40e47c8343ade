#include "server/cluster/router/fan_out.h"

namespace zoom::server::router {

FanOutTimer::FanOutTimer() : thread_([this] { Loop(); }) {}

FanOutTimer::~FanOutTimer() {
  {
    absl::MutexLock l(&mu_);
    stopping_ = true;
    wake_.Signal();
  }
  thread_.join();
  // The callbacks left (and what they hold) go with queue_, outside mu_.
  std::map<std::pair<absl::Time, uint64_t>, std::function<void()>> left;
  {
    absl::MutexLock l(&mu_);
    left.swap(queue_);
  }
}

FanOutTimer::Id FanOutTimer::Schedule(absl::Time when, std::function<void()> fn) {
  absl::MutexLock l(&mu_);
  const Id id{when, next_seq_++};
  auto it = queue_.emplace(std::make_pair(when, id.seq), std::move(fn)).first;
  if (it == queue_.begin()) wake_.Signal();  // earlier than what the thread waits for
  return id;
}

void FanOutTimer::Cancel(const Id& id) {
  std::function<void()> dropped;  // destroyed outside mu_ (it may hold the last reference)
  absl::MutexLock l(&mu_);
  auto it = queue_.find({id.when, id.seq});
  if (it == queue_.end()) return;
  dropped = std::move(it->second);
  queue_.erase(it);
  // `dropped` is destroyed after `l` releases mu_ (declared before it).
}

void FanOutTimer::Loop() {
  mu_.Lock();
  while (!stopping_) {
    if (queue_.empty()) {
      wake_.Wait(&mu_);
      continue;
    }
    auto it = queue_.begin();
    if (it->first.first > absl::Now()) {
      wake_.WaitWithDeadline(&mu_, it->first.first);
      continue;
    }
    std::function<void()> fn = std::move(it->second);
    queue_.erase(it);
    mu_.Unlock();
    fn();
    fn = nullptr;
    mu_.Lock();
  }
  mu_.Unlock();
}

}  // namespace zoom::server::router
