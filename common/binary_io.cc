#include "common/binary_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/crc32c.h"
#include "common/file_system.h"

namespace zoom {
namespace {

absl::Status ErrnoError(int err, const std::string& what) { return FileErrorToStatus(err, what); }

}  // namespace

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  // O_NONBLOCK: a FIFO planted under the path must not block the open (nor
  // the reads: it is refused below).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return ErrnoError(errno, absl::StrCat("open ", path));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a regular file"));
  }
  std::string out;
  out.reserve(static_cast<size_t>(st.st_size));
  char buf[1 << 16];
  for (;;) {
    const ssize_t got = ::read(fd, buf, sizeof(buf));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      const int err = errno;
      ::close(fd);
      return ErrnoError(err, absl::StrCat("read ", path));
    }
    if (got == 0) break;
    out.append(buf, static_cast<size_t>(got));
  }
  ::close(fd);
  return out;
}

BinaryWriter::BinaryWriter(std::string_view magic8, uint16_t major,
                           uint16_t minor) {
  char m[8] = {0};
  std::memcpy(m, magic8.data(), std::min<size_t>(8, magic8.size()));
  PutBytes(m, 8);
  Put(major);
  Put(minor);
}

BinaryWriter::BinaryWriter(std::string_view magic8, uint16_t major, uint16_t minor,
                           const std::string& path, FileSystem* fs)
    : BinaryWriter(magic8, major, minor) {
  path_ = path;
  fs_ = fs != nullptr ? fs : FileSystem::Posix();
  absl::StatusOr<std::unique_ptr<File>> file =
      fs_->Open(path_ + ".tmp", FileSystem::Mode::kTruncate);
  if (file.ok()) {
    file_ = *std::move(file);
    made_tmp_ = true;
  } else {
    status_ = file.status();
  }
}

BinaryWriter::~BinaryWriter() {
  if (file_ != nullptr) file_->Close().IgnoreError();
  if (made_tmp_ && !committed_) fs_->Remove(path_ + ".tmp").IgnoreError();
}

void BinaryWriter::WriteOut(const void* p, size_t n) {
  if (status_.ok() && file_ != nullptr && n > 0) {
    crc_ = Crc32cExtend(crc_, p, n);
    status_ = file_->PWrite(written_, p, n);
  }
  written_ += n;
}

void BinaryWriter::Flush() {
  WriteOut(buf_.data(), buf_.size());
  buf_.clear();
}

void BinaryWriter::PutStreamed(const void* p, size_t n) {
  Flush();
  if (n >= kStreamBufferBytes) {
    WriteOut(p, n);
  } else {
    buf_.append(static_cast<const char*>(p), n);
  }
}

absl::Status BinaryWriter::Commit(const std::string& path, FileSystem* fs) {
  if (path_.empty()) {
    // In memory: the CRC goes on the buffer itself (no second copy).
    const uint32_t crc = Crc32c(buf_.data(), buf_.size());
    buf_.append(reinterpret_cast<const char*>(&crc), sizeof(crc));
    return WriteFileAtomically(fs != nullptr ? *fs : *FileSystem::Posix(), path, buf_);
  }
  if (path != path_ || (fs != nullptr ? fs : FileSystem::Posix()) != fs_) {
    return absl::InternalError(absl::StrCat("BinaryWriter for ", path_, " committed as ", path));
  }
  if (!status_.ok()) return status_;  // the open or a write failed; ~ removes the temp
  Flush();
  uint32_t crc = crc_;
  absl::Status st = status_;
  if (st.ok()) st = file_->PWrite(written_, &crc, sizeof(crc));
  if (st.ok()) st = file_->Sync();
  absl::Status closed = file_->Close();
  file_.reset();
  if (st.ok()) st = closed;
  if (st.ok()) st = fs_->Rename(path_ + ".tmp", path_);
  if (!st.ok()) return st;  // ~ removes the temp
  committed_ = true;
  return fs_->SyncDir(ParentDir(path_));
}

absl::StatusOr<BinaryReader> BinaryReader::Open(const std::string& path,
                                                std::string_view magic8,
                                                uint16_t max_major,
                                                std::string_view what) {
  BinaryReader r;
  r.path_ = path;
  r.what_ = std::string(what);
  absl::StatusOr<std::string> data = ReadFileToString(path);
  if (!data.ok()) {
    return absl::Status(data.status().code(),
                        absl::StrCat(r.what_, ": ", data.status().message()));
  }
  r.data_ = *std::move(data);
  if (r.data_.size() < 8 + 4 + 4) return r.Corrupt("truncated (no header)");
  char m[8] = {0};
  std::memcpy(m, magic8.data(), std::min<size_t>(8, magic8.size()));
  if (std::memcmp(r.data_.data(), m, 8) != 0) {
    return absl::DataLossError(
        absl::StrCat(path, ": not a zoomd ", r.what_, " file (bad magic)"));
  }
  // The checksum before the version (the framing is every major's): a
  // flipped version field is damage, not a newer format.
  r.end_ = r.data_.size() - 4;
  uint32_t stored;
  std::memcpy(&stored, r.data_.data() + r.end_, 4);
  const uint32_t computed = Crc32c(r.data_.data(), r.end_);
  if (stored != computed) {
    return r.Corrupt(absl::StrCat("checksum mismatch (stored ", stored,
                                  ", computed ", computed, ")"));
  }
  std::memcpy(&r.major_, r.data_.data() + 8, 2);
  std::memcpy(&r.minor_, r.data_.data() + 10, 2);
  if (r.major_ > max_major) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, ": ", r.what_, " format ", r.major_, ".", r.minor_,
        " was written by a newer zoomd; this build reads up to ", max_major,
        ".x"));
  }
  r.pos_ = 12;
  return r;
}

absl::Status BinaryReader::GetBytes(void* p, size_t n) {
  if (n > remaining()) return Corrupt("truncated");
  if (n == 0) return absl::OkStatus();  // p may be null (an empty vector's data())
  std::memcpy(p, data_.data() + pos_, n);
  pos_ += n;
  return absl::OkStatus();
}

absl::Status BinaryReader::GetString(std::string* s) {
  uint64_t n = 0;
  absl::Status st = Get(&n);
  if (!st.ok()) return st;
  if (n > remaining()) return Corrupt("string length out of range");
  s->assign(data_.data() + pos_, n);
  pos_ += n;
  return absl::OkStatus();
}

absl::Status BinaryReader::Corrupt(std::string_view why) const {
  return absl::DataLossError(
      absl::StrCat(path_, ": corrupt ", what_, " file: ", std::string(why)));
}

}  // namespace zoom
