// File: storage/posix_file.h
//
// Small POSIX helpers shared by the readers and the vector store: an owning
// file descriptor, errno -> Status, opening for O_DIRECT reads with the
// file's own DMA alignment.
#ifndef ZOOM_STORAGE_POSIX_FILE_H_
#define ZOOM_STORAGE_POSIX_FILE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/strings/string_view.h"
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "storage/block_reader.h"

namespace zoom::storage {

// An owning file descriptor (closed on destruction). Move-only.
class FileDescriptor {
 public:
  FileDescriptor() = default;
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(FileDescriptor&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  FileDescriptor& operator=(FileDescriptor&& o) noexcept {
    if (this != &o) {
      Reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() { Reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void Reset();

 private:
  int fd_ = -1;
};

// The Status for errno value `err`, with `context` (e.g. "pread foo.vec")
// and strerror in the message: common/file_system.h's ErrnoToStatus (the
// one mapping).
absl::Status ErrnoStatus(int err, absl::string_view context);

// A file opened for reading, possibly with O_DIRECT.
struct ReadFile {
  FileDescriptor fd;
  std::string path;
  bool direct = false;
  size_t alignment = 1;  // DMA alignment when direct, else 1
};

// Opens `path` read-only. With `direct`, tries O_DIRECT and, if the file
// system refuses it (EINVAL), logs a warning and opens buffered.
absl::StatusOr<ReadFile> OpenForRead(const std::string& path, bool direct);

// The alignment O_DIRECT needs for `fd`: max(memory, offset) alignment from
// statx(STATX_DIOALIGN) where the kernel reports it, else 4096.
size_t DirectIoAlignment(int fd);

// OK when `req` may be read from a file that needs `alignment`; else
// InvalidArgument naming the misaligned field.
absl::Status CheckRequest(const ReadRequest& req, size_t alignment);

// The current size of the open file `fd`, or an error.
absl::StatusOr<uint64_t> FileSize(int fd, absl::string_view path);

}  // namespace zoom::storage

#endif  // ZOOM_STORAGE_POSIX_FILE_H_
