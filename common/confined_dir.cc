#include "common/confined_dir.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/echo.h"

namespace zoom {
namespace {

absl::string_view AV(std::string_view s) { return absl::string_view(s.data(), s.size()); }

bool NameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '.' || c == '_' || c == '-';
}

}  // namespace

// ---- ConfinedFile ---------------------------------------------------------------

ConfinedFile& ConfinedFile::operator=(ConfinedFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    size_ = other.size_;
    name_ = std::move(other.name_);
    other.fd_ = -1;
  }
  return *this;
}

ConfinedFile::~ConfinedFile() {
  if (fd_ >= 0) ::close(fd_);
}

absl::Status ConfinedFile::ReadAll(void* out, uint64_t bytes) const {
  char* p = static_cast<char*>(out);
  uint64_t done = 0;
  while (done < bytes) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(bytes - done, 1 << 30));
    const ssize_t n = ::pread(fd_, p + done, want, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return absl::UnavailableError(absl::StrCat(name_, " would block (not a regular file?)"));
    }
    if (n < 0) {
      return absl::InternalError(absl::StrCat("reading ", name_, ": ", std::strerror(errno)));
    }
    if (n == 0) {
      return absl::DataLossError(absl::StrCat(name_, " ended after ", done, " of ", bytes,
                                              " bytes (did it change while it was read?)"));
    }
    done += static_cast<uint64_t>(n);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ConfinedFile::ReadToString(uint64_t max_bytes) const {
  if (size_ > max_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat(name_, " has ", size_, " bytes; at most ", max_bytes, " are read"));
  }
  std::string out(size_, '\0');
  absl::Status st = ReadAll(out.data(), size_);
  if (!st.ok()) return st;
  return out;
}

// ---- ConfinedDir ----------------------------------------------------------------

ConfinedDir& ConfinedDir::operator=(ConfinedDir&& other) noexcept {
  if (this != &other) {
    if (dir_fd_ >= 0) ::close(dir_fd_);
    dir_fd_ = other.dir_fd_;
    root_ = std::move(other.root_);
    real_root_ = std::move(other.real_root_);
    other.dir_fd_ = -1;
  }
  return *this;
}

ConfinedDir::~ConfinedDir() {
  if (dir_fd_ >= 0) ::close(dir_fd_);
}

absl::StatusOr<ConfinedDir> ConfinedDir::Open(const std::string& root) {
  if (root.empty()) return absl::FailedPreconditionError("no root directory given");
  const int fd = ::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot open the directory ", root, ": ", std::strerror(errno)));
  }
  char real[PATH_MAX];
  if (::realpath(root.c_str(), real) == nullptr) {
    ::close(fd);
    return absl::FailedPreconditionError(absl::StrCat("cannot resolve ", root));
  }
  ConfinedDir d;
  d.dir_fd_ = fd;
  d.root_ = root;
  d.real_root_ = real;
  return d;
}

absl::Status ConfinedDir::ValidateName(std::string_view name, std::string_view what) {
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        AV(what), " '", EchoForMessage(name), "' ", AV(why),
        ": give a name relative to the server's directory, of [A-Za-z0-9._-] segments "
        "separated by '/'"));
  };
  if (name.empty()) return bad("is empty");
  if (name.size() > 255) return bad("is longer than 255 bytes");
  if (name.front() == '/') return bad("is an absolute path");
  size_t start = 0;
  while (start <= name.size()) {
    size_t end = name.find('/', start);
    if (end == std::string_view::npos) end = name.size();
    const std::string_view seg = name.substr(start, end - start);
    if (seg.empty()) return bad("has an empty segment");
    if (seg == "." || seg == "..") return bad("has a '.' or '..' segment");
    for (char c : seg) {
      if (!NameChar(c)) return bad("has a character outside [A-Za-z0-9._-/]");
    }
    start = end + 1;
  }
  return absl::OkStatus();
}

int ConfinedDir::OpenBeneath(std::string_view name, int flags) const {
  const std::string rel(name);
  open_how how{};
  how.flags = static_cast<uint64_t>(flags | O_CLOEXEC);
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  const long fd = ::syscall(SYS_openat2, dir_fd_, rel.c_str(), &how, sizeof(how));
  if (fd >= 0) return static_cast<int>(fd);
  if (errno != ENOSYS && errno != EPERM && errno != E2BIG) {
    return errno == EXDEV ? -EACCES : -errno;  // EXDEV: resolution left the root
  }
  // No openat2 (old kernel, or a seccomp filter refusing it): resolve and
  // check, then open the resolved path without following a last symlink.
  char real[PATH_MAX];
  const std::string full = root_ + "/" + rel;
  if (::realpath(full.c_str(), real) == nullptr) return -errno;
  const std::string r(real);
  if (r != real_root_ && r.rfind(real_root_ + "/", 0) != 0) return -EACCES;
  const int fd2 = ::open(real, flags | O_CLOEXEC | O_NOFOLLOW);
  return fd2 >= 0 ? fd2 : -errno;
}

absl::StatusOr<ConfinedFile> ConfinedDir::OpenFile(std::string_view name) const {
  const std::string shown(name);
  const int fd = OpenBeneath(name, O_RDONLY | O_NONBLOCK | O_NOCTTY);
  if (fd == -ENOENT || fd == -ENOTDIR) {
    return absl::NotFoundError(absl::StrCat(shown, " does not exist"));
  }
  if (fd == -EACCES || fd == -ELOOP) {
    return absl::PermissionDeniedError(
        absl::StrCat(shown, " resolves outside the server's directory (a symlink leading out?)"));
  }
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("cannot open ", shown, ": ", std::strerror(-fd)));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat(shown, " is not a regular file (a FIFO, device or directory)"));
  }
  return ConfinedFile(fd, static_cast<uint64_t>(st.st_size), shown);
}

bool ConfinedDir::IsDirectory(std::string_view name) const {
  const int fd = OpenBeneath(name, O_RDONLY | O_DIRECTORY | O_NONBLOCK);
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

absl::Status ConfinedDir::CheckDirectory(std::string_view name, std::string_view what) const {
  const int fd = OpenBeneath(name, O_RDONLY | O_DIRECTORY | O_NONBLOCK);
  if (fd >= 0) {
    ::close(fd);
    return absl::OkStatus();
  }
  if (fd == -EACCES || fd == -ELOOP) {
    return absl::PermissionDeniedError(absl::StrCat(
        AV(what), " '", AV(name), "' resolves outside the server's directory (a symlink leading out?)"));
  }
  return absl::NotFoundError(
      absl::StrCat(AV(what), " '", AV(name), "' does not exist under the server's directory"));
}

bool ConfinedDir::Exists(std::string_view name) const {
  const int fd = OpenBeneath(name, O_PATH);
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

}  // namespace zoom
