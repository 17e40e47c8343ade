#include "storage/pread_block_reader.h"

#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace zoom::storage {

absl::StatusOr<std::unique_ptr<PreadBlockReader>> PreadBlockReader::Open(
    const std::string& path, const BlockReaderOptions& options) {
  ZOOM_RETURN_IF_ERROR(options.Validate());
  ZOOM_ASSIGN_OR_RETURN(ReadFile file, OpenForRead(path, options.direct_io));
  return std::unique_ptr<PreadBlockReader>(
      new PreadBlockReader(std::move(file)));
}

PreadBlockReader::PreadBlockReader(ReadFile file)
    : file_(std::move(file)), scratch_([] {
        return std::make_unique<AlignedBuffer>();
      }) {}

std::string PreadBlockReader::Describe() const {
  return file_.direct ? absl::StrCat("pread (O_DIRECT, align ", file_.alignment, ")")
                      : std::string("pread (buffered)");
}

void PreadBlockReader::ReadOne(int fd, const std::string& path,
                               ReadRequest& req) {
  req.bytes_read = 0;
  auto* buf = static_cast<uint8_t*>(req.buffer);
  int retries = 0;
  while (req.bytes_read < req.len) {
    const ssize_t n = ::pread(fd, buf + req.bytes_read, req.len - req.bytes_read,
                              static_cast<off_t>(req.offset + req.bytes_read));
    if (n < 0) {
      if ((errno == EINTR || errno == EAGAIN) && ++retries < 100) continue;
      req.status = ErrnoStatus(
          errno, absl::StrCat("pread ", path, " at offset ",
                              req.offset + req.bytes_read));
      return;
    }
    if (n == 0) {
      req.status = absl::OutOfRangeError(absl::StrCat(
          "read past the end of ", path, ": got ", req.bytes_read, " of ",
          req.len, " bytes at offset ", req.offset));
      return;
    }
    req.bytes_read += static_cast<size_t>(n);
  }
  req.status = absl::OkStatus();
}

absl::Status PreadBlockReader::ReadBatch(
    absl::Span<ReadRequest> requests) const {
  for (ReadRequest& req : requests) {
    req.bytes_read = 0;
    req.status = CheckRequest(req, file_.alignment);
    if (!req.status.ok()) continue;
    ReadOne(file_.fd.get(), file_.path, req);
  }
  return absl::OkStatus();
}

absl::StatusOr<uint8_t*> PreadBlockReader::Scratch(size_t bytes) const {
  AlignedBuffer* buf = scratch_.Get();
  if (buf->size() < bytes) {
    const size_t align = std::max<size_t>(file_.alignment, 64);
    ZOOM_ASSIGN_OR_RETURN(
        *buf, AlignedBuffer::Allocate(AlignUp(bytes, align), align, false));
  }
  return buf->data();
}

}  // namespace zoom::storage
