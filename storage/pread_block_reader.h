// File: storage/pread_block_reader.h
//
// PreadBlockReader: reads each request with a pread(2) loop (short reads
// continued, EINTR/EAGAIN retried). The portable fallback for io_uring.
// Thread-safe: pread has no shared file position.
#ifndef ZOOM_STORAGE_PREAD_BLOCK_READER_H_
#define ZOOM_STORAGE_PREAD_BLOCK_READER_H_

#include <memory>
#include <string>

#include "common/aligned_buffer.h"
#include "storage/block_reader.h"
#include "storage/per_thread.h"
#include "storage/posix_file.h"

namespace zoom::storage {

class PreadBlockReader final : public BlockReader {
 public:
  static absl::StatusOr<std::unique_ptr<PreadBlockReader>> Open(
      const std::string& path, const BlockReaderOptions& options = {});

  absl::Status ReadBatch(absl::Span<ReadRequest> requests) const override;
  absl::StatusOr<uint8_t*> Scratch(size_t bytes) const override;
  size_t alignment() const override { return file_.alignment; }
  IoBackend backend() const override { return IoBackend::kPread; }
  bool direct_io() const override { return file_.direct; }
  const std::string& path() const override { return file_.path; }
  std::string Describe() const override;

  // Reads one request with the pread loop. Exposed for the io_uring reader's
  // unaligned-tail path and for tests.
  static void ReadOne(int fd, const std::string& path, ReadRequest& req);

 private:
  explicit PreadBlockReader(ReadFile file);

  ReadFile file_;
  PerThread<AlignedBuffer> scratch_;
};

}  // namespace zoom::storage

#endif  // ZOOM_STORAGE_PREAD_BLOCK_READER_H_
