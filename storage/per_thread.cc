#include "storage/per_thread.h"

#include <array>

namespace zoom::storage::internal_per_thread {
namespace {

struct Entry {
  uint64_t id = 0;
  void* value = nullptr;
};
constexpr size_t kCacheSize = 8;
thread_local std::array<Entry, kCacheSize> tls_cache;
thread_local size_t tls_next = 0;

}  // namespace

uint64_t NextId() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

uint64_t ThreadUid() {
  static std::atomic<uint64_t> next{1};
  thread_local const uint64_t uid = next.fetch_add(1, std::memory_order_relaxed);
  return uid;
}

void* CacheLookup(uint64_t id) {
  for (const Entry& e : tls_cache) {
    if (e.id == id) return e.value;
  }
  return nullptr;
}

void CacheInsert(uint64_t id, void* value) {
  tls_cache[tls_next] = Entry{id, value};
  tls_next = (tls_next + 1) % kCacheSize;
}

}  // namespace zoom::storage::internal_per_thread
