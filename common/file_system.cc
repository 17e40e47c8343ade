#include "common/file_system.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"

namespace zoom {
namespace {

class PosixFile final : public File {
 public:
  PosixFile(std::string path, int fd) : File(std::move(path)), fd_(fd) {}
  ~PosixFile() override {
    if (fd_ >= 0) ::close(fd_);
  }

  absl::Status PRead(uint64_t offset, void* data, size_t n) const override {
    auto* p = static_cast<uint8_t*>(data);
    size_t done = 0;
    while (done < n) {
      const ssize_t r = ::pread(fd_, p + done, n - done, static_cast<off_t>(offset + done));
      if (r < 0) {
        if (errno == EINTR) continue;
        return FileErrorToStatus(errno, absl::StrCat("read ", path()));
      }
      if (r == 0) {
        return absl::DataLossError(absl::StrCat(path(), ": truncated: wanted ", n,
                                                " bytes at offset ", offset,
                                                ", the file ends after ", done));
      }
      done += static_cast<size_t>(r);
    }
    return absl::OkStatus();
  }

  absl::Status PWrite(uint64_t offset, const void* data, size_t n) override {
    const auto* p = static_cast<const uint8_t*>(data);
    size_t done = 0;
    while (done < n) {
      const ssize_t w = ::pwrite(fd_, p + done, n - done, static_cast<off_t>(offset + done));
      if (w < 0) {
        if (errno == EINTR) continue;
        return FileErrorToStatus(errno, absl::StrCat("write ", path()));
      }
      if (w == 0) return FileErrorToStatus(EIO, absl::StrCat("write ", path(), " (no progress)"));
      done += static_cast<size_t>(w);
    }
    return absl::OkStatus();
  }

  absl::Status Sync() override {
    if (::fdatasync(fd_) != 0) return FileErrorToStatus(errno, absl::StrCat("fdatasync ", path()));
    return absl::OkStatus();
  }

  absl::StatusOr<uint64_t> Size() const override {
    struct stat st;
    if (::fstat(fd_, &st) != 0) return FileErrorToStatus(errno, absl::StrCat("stat ", path()));
    return static_cast<uint64_t>(st.st_size);
  }

  absl::Status Close() override {
    const int fd = std::exchange(fd_, -1);
    if (fd >= 0 && ::close(fd) != 0) return FileErrorToStatus(errno, absl::StrCat("close ", path()));
    return absl::OkStatus();
  }

 private:
  int fd_;
};

class PosixFileSystem final : public FileSystem {
 public:
  absl::StatusOr<std::unique_ptr<File>> Open(const std::string& path, Mode mode) override {
    int flags = O_CLOEXEC;
    switch (mode) {
      case Mode::kCreateNew: flags |= O_RDWR | O_CREAT | O_EXCL; break;
      case Mode::kTruncate: flags |= O_RDWR | O_CREAT | O_TRUNC; break;
      case Mode::kReadWrite: flags |= O_RDWR; break;
      case Mode::kReadOnly: flags |= O_RDONLY; break;
    }
    const int fd = ::open(path.c_str(), flags, 0644);
    if (fd < 0) return FileErrorToStatus(errno, absl::StrCat("open ", path));
    return std::make_unique<PosixFile>(path, fd);
  }

  absl::Status Rename(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) {
      return FileErrorToStatus(errno, absl::StrCat("rename ", from, " -> ", to));
    }
    return absl::OkStatus();
  }

  absl::Status SyncDir(const std::string& dir) override {
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return FileErrorToStatus(errno, absl::StrCat("open directory ", dir));
    const int rc = ::fsync(fd);
    const int err = errno;
    ::close(fd);
    if (rc != 0) return FileErrorToStatus(err, absl::StrCat("fsync directory ", dir));
    return absl::OkStatus();
  }

  absl::Status Remove(const std::string& path) override {
    if (::unlink(path.c_str()) != 0) return FileErrorToStatus(errno, absl::StrCat("remove ", path));
    return absl::OkStatus();
  }
};

}  // namespace

absl::Status FileErrorToStatus(int err, absl::string_view context) {
  const std::string msg = absl::StrCat(context, ": ", std::strerror(err));
  switch (err) {
    case EIO:
      return absl::DataLossError(msg);
    case ENOSPC:
    case EDQUOT:
    case EFBIG:  // the file-size limit (RLIMIT_FSIZE, file system maximum)
      return absl::ResourceExhaustedError(msg);
    case ENOENT:
      return absl::NotFoundError(msg);
    case EEXIST:
      return absl::AlreadyExistsError(msg);
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::PermissionDeniedError(msg);
    case EINVAL:
      return absl::InvalidArgumentError(msg);
    default:
      return absl::Status(absl::ErrnoToStatusCode(err), msg);
  }
}

FileSystem* FileSystem::Posix() {
  static FileSystem* const fs = new PosixFileSystem();
  return fs;
}

std::string ParentDir(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

absl::Status WriteFileAtomically(FileSystem& fs, const std::string& path, std::string_view data) {
  const std::string tmp = path + ".tmp";
  absl::Status st;
  {
    auto file = fs.Open(tmp, FileSystem::Mode::kTruncate);
    if (!file.ok()) return file.status();
    st = (*file)->PWrite(0, data.data(), data.size());
    if (st.ok()) st = (*file)->Sync();
    if (absl::Status c = (*file)->Close(); st.ok()) st = c;
  }
  if (st.ok()) st = fs.Rename(tmp, path);
  if (!st.ok()) {
    fs.Remove(tmp).IgnoreError();
    return st;
  }
  return fs.SyncDir(ParentDir(path));
}

}  // namespace zoom
