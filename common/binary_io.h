// File: common/binary_io.h
//
// Versioned binary files: a writer that commits the file atomically (temp
// file, fsync, rename, fsync dir), built in memory or streamed to the temp
// file as it is put (RAM bounded whatever the file's size), and a reader
// with bounds-checked reads. Layout of every such file:
//
//   char[8] magic | u16 major | u16 minor | payload ... | u32 crc32c
//
// where the CRC-32C covers everything before it; every major keeps this
// framing. Open() checks the magic, then the CRC (DataLoss: a flipped
// version field is damage), then refuses a newer major
// (FailedPrecondition).
//
// Thread safety: one thread per writer / reader.
#ifndef ZOOM_COMMON_BINARY_IO_H_
#define ZOOM_COMMON_BINARY_IO_H_

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/file_system.h"

namespace zoom {

// The whole file as bytes. NotFound / PermissionDenied / Internal with the
// path and the OS's reason when it cannot be opened or read;
// InvalidArgument for what is not a regular file (a directory, a FIFO: its
// open does not block).
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

class BinaryWriter {
 public:
  // In memory: the whole file is held until Commit(path, fs).
  BinaryWriter(std::string_view magic8, uint16_t major, uint16_t minor);
  // Streaming: the bytes go to `path` + ".tmp" through `fs` (null: POSIX)
  // whenever kStreamBufferBytes are buffered, so the writer holds at most
  // that much whatever the file's size (an index snapshot of 10M points is
  // ~600 MB). A write error is kept and returned by Commit; the temp file
  // is removed when the writer is destroyed uncommitted or the commit fails.
  BinaryWriter(std::string_view magic8, uint16_t major, uint16_t minor,
               const std::string& path, FileSystem* fs);
  ~BinaryWriter();
  BinaryWriter(const BinaryWriter&) = delete;
  BinaryWriter& operator=(const BinaryWriter&) = delete;

  static constexpr size_t kStreamBufferBytes = size_t{4} << 20;

  template <typename T>
  void Put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    PutBytes(&v, sizeof(T));
  }
  void PutBytes(const void* p, size_t n) {
    if (path_.empty() || buf_.size() + n < kStreamBufferBytes) {
      buf_.append(static_cast<const char*>(p), n);
    } else {
      PutStreamed(p, n);
    }
  }
  template <typename T>
  void PutVector(const std::vector<T>& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    Put<uint64_t>(v.size());
    PutBytes(v.data(), v.size() * sizeof(T));
  }
  void PutString(std::string_view s) {
    Put<uint64_t>(s.size());
    PutBytes(s.data(), s.size());
  }
  // Bytes put so far (with the header).
  size_t size() const { return written_ + buf_.size(); }

  // Appends the CRC and writes the file atomically through `fs` (default:
  // POSIX; see WriteFileAtomically). ResourceExhausted on a full disk,
  // DataLoss on EIO, and then the old file (if any) is untouched. A
  // streaming writer must be given the path and fs it was made with
  // (Internal otherwise). Call once.
  absl::Status Commit(const std::string& path, FileSystem* fs = nullptr);

 private:
  // Streaming: buf_ to the temp file; then p (n bytes) too when that is
  // at least a buffer's worth, else p into buf_.
  void PutStreamed(const void* p, size_t n);
  void Flush();
  void WriteOut(const void* p, size_t n);

  std::string buf_;
  // Streaming only.
  std::string path_;
  FileSystem* fs_ = nullptr;
  std::unique_ptr<File> file_;
  absl::Status status_;  // the first write error
  uint64_t written_ = 0;
  uint32_t crc_ = 0;  // of the bytes written
  bool made_tmp_ = false;
  bool committed_ = false;
};

class BinaryReader {
 public:
  // Reads and verifies the whole file. `what` names it in errors.
  static absl::StatusOr<BinaryReader> Open(const std::string& path,
                                           std::string_view magic8,
                                           uint16_t max_major,
                                           std::string_view what);
  uint16_t major() const { return major_; }
  uint16_t minor() const { return minor_; }

  template <typename T>
  absl::Status Get(T* v) {
    static_assert(std::is_trivially_copyable_v<T>);
    return GetBytes(v, sizeof(T));
  }
  absl::Status GetBytes(void* p, size_t n);
  // Reads a vector written by PutVector; refuses sizes above `max_elems`.
  template <typename T>
  absl::Status GetVector(std::vector<T>* v, uint64_t max_elems = UINT64_MAX) {
    uint64_t n = 0;
    absl::Status st = Get(&n);
    if (!st.ok()) return st;
    if (n > max_elems || n > remaining() / sizeof(T)) {
      return Corrupt("vector length out of range");
    }
    v->resize(n);
    return GetBytes(v->data(), n * sizeof(T));
  }
  absl::Status GetString(std::string* s);
  size_t remaining() const { return end_ - pos_; }
  // A DataLoss error naming the file.
  absl::Status Corrupt(std::string_view why) const;

 private:
  BinaryReader() = default;
  std::string data_;
  std::string path_;
  std::string what_;
  size_t pos_ = 0;
  size_t end_ = 0;  // excludes the CRC
  uint16_t major_ = 0;
  uint16_t minor_ = 0;
};

}  // namespace zoom

#endif  // ZOOM_COMMON_BINARY_IO_H_
