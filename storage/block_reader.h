// File: storage/block_reader.h
//
// The fullview read path: a BlockReader reads a batch of byte ranges of one
// file, each request with its own status. Two implementations:
//
//   * UringBlockReader (io_uring): one ring per thread; all requests of a
//     batch are prepared and submitted with one submit, then all completions
//     are reaped. Registered file and buffers where the kernel allows.
//   * PreadBlockReader: a correct pread(2) loop, the portable default.
//
// Both open the file with O_DIRECT by default, so the page cache does not
// answer, and then every request's offset, length and buffer must be
// multiples of alignment() (the file's DMA alignment from statx
// STATX_DIOALIGN, else 4096).
//
// MakeBlockReader() probes io_uring (it can be refused: io_uring_disabled,
// seccomp in containers, ENOSYS, RLIMIT_MEMLOCK), falls back to pread, and
// logs which backend it chose and why. BlockReaderOptions::backend forces one.
#ifndef ZOOM_STORAGE_BLOCK_READER_H_
#define ZOOM_STORAGE_BLOCK_READER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace zoom::storage {

// One range to read.
struct ReadRequest {
  uint64_t offset = 0;     // byte offset in the file
  size_t len = 0;          // bytes to read
  void* buffer = nullptr;  // at least `len` bytes; not owned
  // Out: OK when all `len` bytes were read; OutOfRange when the file ended
  // first (then `bytes_read` < len); InvalidArgument for a misaligned
  // request; the errno's status for an I/O error (EIO -> DataLoss).
  absl::Status status;
  size_t bytes_read = 0;  // out
};

enum class IoBackend { kAuto, kIoUring, kPread };

// "auto" | "io_uring" (also "uring") | "pread".
absl::StatusOr<IoBackend> ParseIoBackend(std::string_view name);
const char* IoBackendName(IoBackend backend);

struct BlockReaderOptions {
  // Which implementation. Default: auto (io_uring when the probe succeeds).
  IoBackend backend = IoBackend::kAuto;
  // Open with O_DIRECT. Default: true. If the file system refuses O_DIRECT
  // (tmpfs), the reader logs a warning and reads through the page cache.
  bool direct_io = true;
  // io_uring submission queue entries per ring; a larger batch is submitted
  // in chunks of this size. Default: 256.
  uint32_t queue_depth = 256;
  // Register the file with each ring (IOSQE_FIXED_FILE). Default: true.
  bool register_file = true;
  // Register each thread's scratch buffer (IORING_OP_READ_FIXED for
  // requests that read into Scratch()). Default: true.
  bool register_buffers = true;

  absl::Status Validate() const;
};

// A batch of reads in flight (BlockReader::Submit). Wait() completes it:
// every request's status and bytes_read are set, as ReadBatch sets them,
// and the batch's own status is returned (again on a second call). Call it
// on the thread that submitted. Destroying a batch without Wait() waits for
// the reads still in flight (they write into the requests' buffers), and
// drops their results.
class PendingReads {
 public:
  virtual ~PendingReads() = default;
  virtual absl::Status Wait() = 0;
};

class BlockReader {
 public:
  virtual ~BlockReader() = default;

  // Reads every request in `requests` and sets its `status` and
  // `bytes_read`. Returns non-OK only when the batch as a whole could not be
  // attempted (e.g. no ring could be set up); per-request failures are in
  // the requests. Thread-safe: any number of threads may call concurrently.
  virtual absl::Status ReadBatch(absl::Span<ReadRequest> requests) const = 0;

  // Two-phase reads (as RocksDB's ReadAsync/Poll): starts reading
  // `requests` and returns at once; PendingReads::Wait() completes them.
  // Between the two the calling thread may do any work except reading
  // through this reader or using its Scratch() (one pending batch per
  // thread per reader: io_uring fails a second one's Wait with
  // FailedPrecondition). `requests` and their buffers
  // must outlive the batch. The default (no asynchronous reads) reads in
  // Wait().
  virtual std::unique_ptr<PendingReads> Submit(absl::Span<ReadRequest> requests) const;

  // Submit, while_waiting(), Wait(): `while_waiting` runs exactly once on
  // the calling thread while the reads are in flight, under Submit's rules.
  absl::Status ReadBatchOverlapped(absl::Span<ReadRequest> requests,
                                   absl::FunctionRef<void()> while_waiting) const;

  // A buffer of at least `bytes`, aligned to alignment(), owned by the
  // calling thread's I/O context for this reader. Reads into it may be faster
  // (registered buffers). It stays valid until the same thread calls
  // Scratch() on this reader again or the reader is destroyed.
  virtual absl::StatusOr<uint8_t*> Scratch(size_t bytes) const = 0;

  // The alignment that offsets, lengths and buffers must share (1 when the
  // file is not open with O_DIRECT).
  virtual size_t alignment() const = 0;
  virtual IoBackend backend() const = 0;
  virtual bool direct_io() const = 0;
  virtual const std::string& path() const = 0;
  // Human-readable setup, e.g. "io_uring (O_DIRECT, align 512, fixed file,
  // fixed buffers)".
  virtual std::string Describe() const = 0;
};

// Whether io_uring can be used in this process, and if not, why.
struct IoUringProbe {
  bool available = false;
  std::string reason;  // e.g. "io_uring_setup: Operation not permitted"
};
// Probes once per process (cached): compiled in, not disabled by sysctl, a
// ring can be set up and it supports IORING_OP_READ.
const IoUringProbe& ProbeIoUring();

// Opens `path` for reading with the backend chosen by `options` (see the file
// comment). Logs the choice and the reason for a fallback. Errors: NotFound /
// PermissionDenied for the file; FailedPrecondition when io_uring is forced
// but unavailable; InvalidArgument for bad options.
absl::StatusOr<std::unique_ptr<BlockReader>> MakeBlockReader(
    const std::string& path, const BlockReaderOptions& options = {});

}  // namespace zoom::storage

#endif  // ZOOM_STORAGE_BLOCK_READER_H_
