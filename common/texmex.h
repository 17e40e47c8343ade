// File: common/texmex.h
//
// Streaming readers and writers for the INRIA TEXMEX vector formats:
// every record is a little-endian int32 dimension d followed by d components
// (.fvecs: float32, .bvecs: uint8, .ivecs: int32). The number of records is
// file_size / (4 + d * sizeof(component)).
//
// Errors are Status, never a crash: a file whose size is not a whole number
// of records (truncated), a record whose dimension differs from the first
// (inconsistent), a zero or absurd dimension, or an unreadable file.
//
// Thread safety: a reader or writer is used by one thread at a time.
#ifndef ZOOM_COMMON_TEXMEX_H_
#define ZOOM_COMMON_TEXMEX_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace zoom {

enum class VecsType { kFloat32, kUint8, kInt32 };  // fvecs, bvecs, ivecs

// Bytes per component: 4, 1, 4.
size_t VecsComponentSize(VecsType type);
// The type named by the file's extension (.fvecs, .bvecs, .ivecs).
absl::StatusOr<VecsType> VecsTypeFromPath(const std::string& path);

// The largest dimension accepted (guards against reading garbage as a size).
inline constexpr uint32_t kMaxVecsDim = 1u << 20;

class VecsReader {
 public:
  // Opens `path` and validates its size against the first record's
  // dimension. An empty file opens with count() == 0 and dim() == 0.
  static absl::StatusOr<VecsReader> Open(const std::string& path,
                                         VecsType type);
  // As Open(path, type) with the type taken from the extension.
  static absl::StatusOr<VecsReader> Open(const std::string& path);

  VecsReader(VecsReader&&) = default;
  VecsReader& operator=(VecsReader&&) = default;

  uint32_t dim() const { return dim_; }
  uint64_t count() const { return count_; }
  uint64_t position() const { return position_; }  // rows consumed so far
  VecsType type() const { return type_; }
  const std::string& path() const { return path_; }

  // Reads up to `max_rows` further rows into `out`, which must hold
  // max_rows * dim() components of the file's type, packed without the
  // per-row dimension. Returns the number of rows read (0 at the end).
  absl::StatusOr<size_t> Read(size_t max_rows, void* out);
  // As Read, widening uint8/int32 components to float. `out` holds
  // max_rows * dim() floats.
  absl::StatusOr<size_t> ReadAsFloat(size_t max_rows, float* out);
  // Moves to row `row` (0 <= row <= count()).
  absl::Status Seek(uint64_t row);

 private:
  struct FileCloser {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  VecsReader() = default;

  std::unique_ptr<std::FILE, FileCloser> file_;
  std::string path_;
  VecsType type_ = VecsType::kFloat32;
  uint32_t dim_ = 0;
  uint64_t count_ = 0;
  uint64_t position_ = 0;
  std::vector<uint8_t> row_;  // one record, including its dimension
};

// A whole file in memory, as float (fvecs/bvecs) or int32 (ivecs).
template <typename T>
struct VecsMatrix {
  uint32_t dim = 0;
  uint64_t rows = 0;
  std::vector<T> data;  // rows * dim, row-major
  const T* row(uint64_t i) const { return data.data() + i * dim; }
};

// Loads at most `max_rows` rows (all when 0) of an fvecs/bvecs file as float.
absl::StatusOr<VecsMatrix<float>> LoadVecsAsFloat(const std::string& path,
                                                  uint64_t max_rows = 0);
// Loads at most `max_rows` rows (all when 0) of a .bvecs file as bytes.
absl::StatusOr<VecsMatrix<uint8_t>> LoadBvecs(const std::string& path,
                                              uint64_t max_rows = 0);
// Loads at most `max_rows` rows (all when 0) of an .ivecs file.
absl::StatusOr<VecsMatrix<int32_t>> LoadIvecs(const std::string& path,
                                              uint64_t max_rows = 0);

class VecsWriter {
 public:
  // Creates (truncates) `path` for rows of `dim` components of `type`.
  static absl::StatusOr<VecsWriter> Create(const std::string& path,
                                           VecsType type, uint32_t dim);
  VecsWriter(VecsWriter&&) = default;
  VecsWriter& operator=(VecsWriter&&) = default;
  ~VecsWriter();

  // Appends `rows` rows from `data` (rows * dim components, packed).
  absl::Status Append(const void* data, size_t rows);
  // Flushes and closes; the first error of any write is reported here too.
  absl::Status Close();
  uint64_t rows_written() const { return rows_; }

 private:
  struct FileCloser {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  VecsWriter() = default;

  std::unique_ptr<std::FILE, FileCloser> file_;
  std::string path_;
  VecsType type_ = VecsType::kFloat32;
  uint32_t dim_ = 0;
  uint64_t rows_ = 0;
};

}  // namespace zoom

#endif  // ZOOM_COMMON_TEXMEX_H_
