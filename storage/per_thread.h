// File: storage/per_thread.h
//
// PerThread<T>: one T per (object, thread), created on first use by the
// calling thread and destroyed with the PerThread. Lookups hit a small
// thread-local cache (no lock); a miss takes a mutex. Ids are never reused,
// so a cache entry of a destroyed PerThread can never match a live one.
//
// Used for the io_uring ring and the scratch buffer of each reader thread.
#ifndef ZOOM_STORAGE_PER_THREAD_H_
#define ZOOM_STORAGE_PER_THREAD_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>

#include "absl/synchronization/mutex.h"

namespace zoom::storage {
namespace internal_per_thread {

uint64_t NextId();
// A number for the calling thread, unique over the process's lifetime
// (std::thread::id values are reused once a thread has exited).
uint64_t ThreadUid();
void* CacheLookup(uint64_t id);
void CacheInsert(uint64_t id, void* value);

}  // namespace internal_per_thread

template <typename T>
class PerThread {
 public:
  // `make` builds a T for a new thread; it may return nullptr on failure,
  // which Get() passes on (and retries on the next call).
  explicit PerThread(std::function<std::unique_ptr<T>()> make)
      : id_(internal_per_thread::NextId()), make_(std::move(make)) {}
  PerThread(const PerThread&) = delete;
  PerThread& operator=(const PerThread&) = delete;

  // This thread's T. Thread-safe.
  T* Get() const {
    if (void* p = internal_per_thread::CacheLookup(id_)) {
      return static_cast<T*>(p);
    }
    T* value = nullptr;
    {
      absl::MutexLock lock(&mu_);
      auto& slot = map_[internal_per_thread::ThreadUid()];
      if (!slot) slot = make_();
      value = slot.get();
    }
    if (value != nullptr) internal_per_thread::CacheInsert(id_, value);
    return value;
  }

 private:
  const uint64_t id_;
  std::function<std::unique_ptr<T>()> make_;
  mutable absl::Mutex mu_;
  // Keyed by ThreadUid(): a T made for a thread is never handed to another
  // (an io_uring ring set up with SINGLE_ISSUER must stay with its thread).
  // Entries of exited threads stay until the PerThread is destroyed.
  mutable std::unordered_map<uint64_t, std::unique_ptr<T>> map_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace zoom::storage

#endif  // ZOOM_STORAGE_PER_THREAD_H_
