// File: storage/uring_block_reader.h
//
// UringBlockReader: reads a batch through io_uring. Each calling thread gets
// its own ring (created on first use, destroyed with the reader); a batch is
// prepared whole, submitted with one io_uring_enter (in chunks of
// queue_depth when larger), and all completions are reaped before return.
// Short reads are continued, -EAGAIN/-EINTR retried, other errors reported
// per request. The file is registered with each ring (IOSQE_FIXED_FILE) and
// each thread's Scratch() buffer is registered (READ_FIXED) when the kernel
// allows (RLIMIT_MEMLOCK may refuse: then plain reads, logged once).
//
// Submit prepares and submits a batch (its first queue_depth requests) and
// returns; Wait reaps, submits the rest and retries until all are done.
//
// Thread-safe: ReadBatch and Scratch may be called from any number of threads.
#ifndef ZOOM_STORAGE_URING_BLOCK_READER_H_
#define ZOOM_STORAGE_URING_BLOCK_READER_H_

#include <atomic>
#include <memory>
#include <string>

#include "storage/block_reader.h"
#include "storage/per_thread.h"
#include "storage/posix_file.h"

namespace zoom::storage {

// Whether this kernel and process can use io_uring reads (the body of
// ProbeIoUring; liburing is used in uring_block_reader.cc only).
IoUringProbe ProbeUringSupport();

class UringBlockReader final : public BlockReader {
 public:
  // Opens `path` and sets up one ring to check that io_uring works here.
  // FailedPrecondition when it does not (the caller may fall back to pread).
  static absl::StatusOr<std::unique_ptr<UringBlockReader>> Open(
      const std::string& path, const BlockReaderOptions& options = {});
  ~UringBlockReader() override;

  absl::Status ReadBatch(absl::Span<ReadRequest> requests) const override;
  std::unique_ptr<PendingReads> Submit(absl::Span<ReadRequest> requests) const override;
  absl::StatusOr<uint8_t*> Scratch(size_t bytes) const override;
  size_t alignment() const override { return file_.alignment; }
  IoBackend backend() const override { return IoBackend::kIoUring; }
  bool direct_io() const override { return file_.direct; }
  const std::string& path() const override { return file_.path; }
  std::string Describe() const override;

  struct Ring;   // one per thread; defined in the .cc
  class Batch;  // a batch in flight on one ring; defined in the .cc

 private:
  UringBlockReader(ReadFile file, const BlockReaderOptions& options);
  absl::StatusOr<std::unique_ptr<Ring>> MakeRing() const;

  ReadFile file_;
  BlockReaderOptions options_;
  PerThread<Ring> rings_;
  // What the first ring managed; later rings try the same.
  mutable std::atomic<bool> fixed_file_{false};
  mutable std::atomic<bool> fixed_buffers_{false};
  mutable std::atomic<bool> warned_buffers_{false};
  mutable std::string first_error_;  // why the last ring setup failed
};

}  // namespace zoom::storage

#endif  // ZOOM_STORAGE_URING_BLOCK_READER_H_
