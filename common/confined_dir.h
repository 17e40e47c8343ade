// File: common/confined_dir.h
//
// ConfinedDir: reading files named by an outside client, only from beneath
// one root directory (the server's --models_dir). A name is relative:
// '/'-separated segments of [A-Za-z0-9._-], none "." or "..". Resolution
// never leaves the root: openat2(RESOLVE_BENEATH) where the kernel has it
// (symlinks that stay inside the root are followed; one that leads out is
// refused), else a realpath() check of the same rule. Only regular files are
// opened (a FIFO, device, socket or directory is refused before any read),
// always with O_NONBLOCK, so no open or read can block forever.
//
// Error messages name files by their relative name only: nothing about the
// filesystem outside the root (whether a path exists, its size) is revealed.
//
// Thread safety: const methods are safe from many threads.
#ifndef ZOOM_COMMON_CONFINED_DIR_H_
#define ZOOM_COMMON_CONFINED_DIR_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace zoom {

// An open regular file (move-only; closes on destruction).
class ConfinedFile {
 public:
  ConfinedFile() = default;
  ConfinedFile(int fd, uint64_t size, std::string name) : fd_(fd), size_(size), name_(std::move(name)) {}
  ConfinedFile(ConfinedFile&& other) noexcept { *this = std::move(other); }
  ConfinedFile& operator=(ConfinedFile&& other) noexcept;
  ConfinedFile(const ConfinedFile&) = delete;
  ConfinedFile& operator=(const ConfinedFile&) = delete;
  ~ConfinedFile();

  uint64_t size() const { return size_; }
  const std::string& name() const { return name_; }
  // Reads exactly `bytes` from offset 0 into `out` (DataLoss if the file is
  // shorter than it was when opened).
  absl::Status ReadAll(void* out, uint64_t bytes) const;
  // The whole file; ResourceExhausted (before reading) beyond `max_bytes`.
  absl::StatusOr<std::string> ReadToString(uint64_t max_bytes) const;

 private:
  int fd_ = -1;
  uint64_t size_ = 0;
  std::string name_;
};

class ConfinedDir {
 public:
  // FailedPrecondition unless `root` is an existing directory.
  static absl::StatusOr<ConfinedDir> Open(const std::string& root);
  ConfinedDir(ConfinedDir&& other) noexcept { *this = std::move(other); }
  ConfinedDir& operator=(ConfinedDir&& other) noexcept;
  ConfinedDir(const ConfinedDir&) = delete;
  ConfinedDir& operator=(const ConfinedDir&) = delete;
  ~ConfinedDir();

  // InvalidArgument unless `name` is a relative name of the form above
  // (1..255 bytes). `what` names it in the message ("model directory").
  static absl::Status ValidateName(std::string_view name, std::string_view what);

  // Opens ROOT/name. NotFound when absent; PermissionDenied when it
  // resolves outside the root; InvalidArgument when it is not a regular
  // file.
  absl::StatusOr<ConfinedFile> OpenFile(std::string_view name) const;
  // Whether ROOT/name is a directory inside the root (false when absent or
  // outside).
  bool IsDirectory(std::string_view name) const;
  // Ok when ROOT/name is a directory inside the root; NotFound when absent
  // (or not a directory), PermissionDenied when it resolves outside.
  // `what` names it in the message.
  absl::Status CheckDirectory(std::string_view name, std::string_view what) const;
  // Whether ROOT/name exists inside the root (of any type).
  bool Exists(std::string_view name) const;

  const std::string& root() const { return root_; }

 private:
  ConfinedDir() = default;
  // An fd of ROOT/name opened with `flags`, or -errno.
  int OpenBeneath(std::string_view name, int flags) const;

  int dir_fd_ = -1;
  std::string root_;       // as given
  std::string real_root_;  // realpath, for the fallback check
};

}  // namespace zoom

#endif  // ZOOM_COMMON_CONFINED_DIR_H_
