#include "storage/posix_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/aligned_buffer.h"
#include "common/file_system.h"
#include "common/logging.h"

namespace zoom::storage {

void FileDescriptor::Reset() {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

absl::Status ErrnoStatus(int err, absl::string_view context) {
  return FileErrorToStatus(err, context);
}

size_t DirectIoAlignment(int fd) {
#ifdef STATX_DIOALIGN
  struct statx stx;
  std::memset(&stx, 0, sizeof(stx));
  if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) == 0 &&
      (stx.stx_mask & STATX_DIOALIGN) != 0 && stx.stx_dio_mem_align != 0 &&
      stx.stx_dio_offset_align != 0) {
    const size_t a = std::max<size_t>(stx.stx_dio_mem_align,
                                      stx.stx_dio_offset_align);
    if (IsPowerOfTwo(a)) return std::max<size_t>(a, sizeof(void*));
  }
#else
  (void)fd;
#endif
  return 4096;
}

absl::StatusOr<ReadFile> OpenForRead(const std::string& path, bool direct) {
  ReadFile f;
  f.path = path;
  int fd = -1;
  if (direct) {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
    if (fd < 0 && errno == EINVAL) {
      ZOOM_LOG(WARNING, path,
               ": the file system refuses O_DIRECT; reading through the page "
               "cache (SSD figures will be cache figures)");
      direct = false;
    } else if (fd < 0) {
      return ErrnoStatus(errno, absl::StrCat("open ", path));
    }
  }
  if (fd < 0) {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ErrnoStatus(errno, absl::StrCat("open ", path));
  }
  f.fd = FileDescriptor(fd);
  f.direct = direct;
  f.alignment = direct ? DirectIoAlignment(fd) : 1;
  return f;
}

absl::Status CheckRequest(const ReadRequest& req, size_t alignment) {
  if (req.buffer == nullptr && req.len > 0) {
    return absl::InvalidArgumentError("read request has no buffer");
  }
  if (alignment <= 1) return absl::OkStatus();
  if (req.offset % alignment != 0 || req.len % alignment != 0 ||
      !IsAligned(req.buffer, alignment)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "O_DIRECT read (offset ", req.offset, ", len ", req.len,
        ") must have offset, length and buffer aligned to ", alignment));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> FileSize(int fd, absl::string_view path) {
  struct stat st;
  if (fstat(fd, &st) != 0) {
    return ErrnoStatus(errno, absl::StrCat("fstat ", path));
  }
  return static_cast<uint64_t>(st.st_size);
}

}  // namespace zoom::storage
