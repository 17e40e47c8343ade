// File: common/file_system.h
//
// The one way zoomd writes its own durable files (the vector file, index
// and model files, snapshot archives): a small file interface in the
// spirit of LevelDB's Env and RocksDB's FileSystem, reduced to what zoomd
// does — open, pread, pwrite, fdatasync, rename, fsync a directory — with
// one errno mapping. The POSIX implementation is FileSystem::Posix();
// FaultInjectingFileSystem (tests/testing/fault_injecting_file_system.h)
// is its test twin.
// (RocksDB's own files go through RocksDB's Env; reads on the query path
// go through storage::BlockReader.)
//
// Errors: every Status names the operation and the path. EIO -> DataLoss,
// ENOSPC/EDQUOT/EFBIG -> ResourceExhausted, ENOENT -> NotFound,
// EEXIST -> AlreadyExists, EACCES/EPERM/EROFS -> PermissionDenied,
// EINVAL -> InvalidArgument, others as absl::ErrnoToStatusCode.
//
// Thread safety: a File's PRead is safe from many threads; its writes and
// Sync are the single writer's. FileSystem methods are thread-safe.
#ifndef ZOOM_COMMON_FILE_SYSTEM_H_
#define ZOOM_COMMON_FILE_SYSTEM_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace zoom {

// The Status of errno value `err` for `context` ("fdatasync foo.zvec").
absl::Status FileErrorToStatus(int err, absl::string_view context);

class File {
 public:
  virtual ~File() = default;
  const std::string& path() const { return path_; }

  // Reads exactly n bytes at `offset`; DataLoss when the file ends first.
  virtual absl::Status PRead(uint64_t offset, void* data, size_t n) const = 0;
  // Writes all n bytes at `offset` (a short write is continued; one that
  // makes no progress is an error). After an error the bytes there are
  // unknown: callers rewrite them before they commit anything that covers
  // them.
  virtual absl::Status PWrite(uint64_t offset, const void* data, size_t n) = 0;
  // fdatasync: the bytes written so far (and the size) are durable.
  virtual absl::Status Sync() = 0;
  virtual absl::StatusOr<uint64_t> Size() const = 0;
  // Closes, reporting the error (the destructor closes silently).
  virtual absl::Status Close() = 0;

 protected:
  explicit File(std::string path) : path_(std::move(path)) {}

 private:
  std::string path_;
};

class FileSystem {
 public:
  enum class Mode {
    kCreateNew,  // read-write; AlreadyExists if the file exists
    kTruncate,   // read-write; created or emptied
    kReadWrite,  // an existing file
    kReadOnly,   // an existing file; writes fail
  };

  virtual ~FileSystem() = default;
  // The POSIX file system (process-wide, stateless).
  static FileSystem* Posix();

  virtual absl::StatusOr<std::unique_ptr<File>> Open(const std::string& path, Mode mode) = 0;
  virtual absl::Status Rename(const std::string& from, const std::string& to) = 0;
  // fsync of a directory: the entries created or renamed in it are durable.
  virtual absl::Status SyncDir(const std::string& dir) = 0;
  virtual absl::Status Remove(const std::string& path) = 0;
};

// The directory holding `path` ("." for a bare name).
std::string ParentDir(const std::string& path);

// Writes `data` to `path` atomically and durably: a temporary file beside
// it, written and synced, renamed over `path`, the directory synced. Every
// step's failure is reported (the temporary file is removed); readers see
// the old file or the new one, never a part.
absl::Status WriteFileAtomically(FileSystem& fs, const std::string& path, std::string_view data);

}  // namespace zoom

#endif  // ZOOM_COMMON_FILE_SYSTEM_H_
