// File: index/chunked_array.h
//
// ChunkedArray<T>: a growable array of fixed-width rows (`width` Ts per id)
// whose rows never move, so readers may use rows of ids below the published
// size while the single writer grows it. Chunk k holds base * 2^k rows
// (geometric: at most 2x over-allocation once grown; a bulk load passes its
// exact row count as the base and wastes nothing). SetFirstChunk(rows)
// instead makes chunk 0 exactly `rows` and the later ones base * 2^(k-1),
// so a bulk load is exact and the first growth after it is small. The
// chunk table is fixed, so it never moves either. Chunks come from calloc,
// so a big one costs RAM only as its rows are written (the kernel's zero
// pages stand in for the rest): a bulk load's exactly sized lists fill
// while its staging is freed, not beside it.
//
// Thread safety: Grow() by one writer at a time; Row() from any thread for
// ids the writer has published (e.g. through an atomic size).
#ifndef ZOOM_INDEX_CHUNKED_ARRAY_H_
#define ZOOM_INDEX_CHUNKED_ARRAY_H_

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <type_traits>
#include <utility>

namespace zoom::index {

template <typename T, uint64_t kBaseRows = 1024>
class ChunkedArray {
  static_assert(std::is_trivial_v<T>, "rows are calloc'ed");

 public:
  static constexpr size_t kMaxChunks = 40;

  // `base_rows` (>= 1) sizes the first chunk; a bulk load that knows its
  // row count passes it to allocate exactly.
  explicit ChunkedArray(size_t width = 1, uint64_t base_rows = kBaseRows)
      : width_(width), base_(base_rows > 0 ? base_rows : 1) {
    for (auto& c : chunks_) c.store(nullptr, std::memory_order_relaxed);
  }
  ~ChunkedArray() {
    for (size_t i = 0; i < chunks(); ++i) std::free(chunks_[i].load());
  }
  ChunkedArray(const ChunkedArray&) = delete;
  ChunkedArray& operator=(const ChunkedArray&) = delete;

  size_t width() const { return width_; }
  // Rows that have memory.
  uint64_t capacity() const {
    const size_t c = chunks();
    if (head_ == 0) return base_ * ((uint64_t{1} << c) - 1);
    if (c == 0) return 0;
    return head_ + base_ * ((uint64_t{1} << (c - 1)) - 1);
  }

  // Chunk 0 gets exactly `rows` (>= 1) rows. Only before the first Grow().
  void SetFirstChunk(uint64_t rows) {
    if (chunks() == 0 && rows > 0) head_ = rows;
  }

  // Makes rows [0, n) addressable; new rows are value-initialised (zero).
  void Grow(uint64_t n) {
    while (capacity() < n) {
      const size_t c = chunks();
      const uint64_t rows = ChunkRows(c);
      T* chunk = static_cast<T*>(std::calloc(rows * width_, sizeof(T)));
      if (chunk == nullptr) throw std::bad_alloc();
      chunks_[c].store(chunk, std::memory_order_release);
      allocated_chunks_.store(c + 1, std::memory_order_relaxed);
    }
  }

  T* Row(uint64_t id) { return const_cast<T*>(std::as_const(*this).Row(id)); }
  const T* Row(uint64_t id) const {
    size_t skip = 0;
    if (head_ != 0) {
      if (id < head_)
        return chunks_[0].load(std::memory_order_acquire) + id * width_;
      id -= head_;
      skip = 1;
    }
    const uint64_t q = id / base_ + 1;
    const int k = 63 - std::countl_zero(q);
    const uint64_t first = base_ * ((uint64_t{1} << k) - 1);
    return chunks_[k + skip].load(std::memory_order_acquire) +
           (id - first) * width_;
  }
  // Calls fn(first_row, rows_pointer, count) for the contiguous runs that
  // cover rows [0, n), in order. Runs end at chunk boundaries; two arrays
  // with the same base rows (and first chunk) split rows identically.
  template <typename Fn>
  void ForEachRun(uint64_t n, Fn&& fn) const {
    uint64_t first = 0;
    for (size_t k = 0; first < n; ++k) {
      const uint64_t rows = std::min<uint64_t>(ChunkRows(k), n - first);
      fn(first, chunks_[k].load(std::memory_order_acquire), rows);
      first += rows;
    }
  }
  // Bytes of memory held.
  uint64_t ResidentBytes() const { return capacity() * width_ * sizeof(T); }

 private:
  size_t chunks() const {
    return allocated_chunks_.load(std::memory_order_relaxed);
  }
  uint64_t ChunkRows(size_t k) const {
    if (head_ == 0) return base_ << k;
    return k == 0 ? head_ : base_ << (k - 1);
  }

  const size_t width_;
  const uint64_t base_;
  uint64_t head_ = 0;  // rows of chunk 0 when set by SetFirstChunk
  std::atomic<T*> chunks_[kMaxChunks];
  // Written by the writer only; read (relaxed) by capacity() and
  // ResidentBytes(), which other threads may call while it grows.
  std::atomic<size_t> allocated_chunks_{0};
};

}  // namespace zoom::index

#endif  // ZOOM_INDEX_CHUNKED_ARRAY_H_
