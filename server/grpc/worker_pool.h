// File: server/grpc/worker_pool.h
//
// WorkerPool: a fixed set of threads that run the RPC handlers' work, so
// that gRPC's callback threads never block on the SSD or an index build.
// Submit never blocks; Stop() runs what is queued and joins.
//
// Thread safety: Submit and queued() are safe from any thread.
#ifndef ZOOM_SERVER_GRPC_WORKER_POOL_H_
#define ZOOM_SERVER_GRPC_WORKER_POOL_H_

#include <cstddef>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace zoom::server {

class WorkerPool {
 public:
  explicit WorkerPool(int threads) {
    for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { Run(); });
  }
  ~WorkerPool() { Stop(); }

  void Submit(std::function<void()> task) {
    absl::MutexLock lock(&mu_);
    queue_.push_back(std::move(task));
  }
  size_t queued() const {
    absl::MutexLock lock(&mu_);
    return queue_.size();
  }
  void Stop() {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      stopping_ = true;
    }
    for (auto& t : workers_) t.join();
  }

 private:
  void Run() {
    for (;;) {
      std::function<void()> task;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](WorkerPool* p) { return p->stopping_ || !p->queue_.empty(); }, this));
        if (queue_.empty()) return;  // stopping and drained
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task();
    }
  }

  mutable absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

}  // namespace zoom::server

#endif  // ZOOM_SERVER_GRPC_WORKER_POOL_H_
