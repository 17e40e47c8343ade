#include "common/texmex.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace zoom {
namespace {

absl::Status ErrnoError(const std::string& what, const std::string& path) {
  const int e = errno;
  std::string msg = absl::StrCat(what, " ", path, ": ", std::strerror(e));
  if (e == ENOENT) return absl::NotFoundError(msg);
  if (e == EACCES || e == EPERM) return absl::PermissionDeniedError(msg);
  return absl::InternalError(msg);
}

const char* TypeName(VecsType t) {
  switch (t) {
    case VecsType::kFloat32:
      return "fvecs";
    case VecsType::kUint8:
      return "bvecs";
    case VecsType::kInt32:
      return "ivecs";
  }
  return "?";
}

}  // namespace

size_t VecsComponentSize(VecsType type) {
  return type == VecsType::kUint8 ? 1 : 4;
}

absl::StatusOr<VecsType> VecsTypeFromPath(const std::string& path) {
  if (absl::EndsWith(path, ".fvecs")) return VecsType::kFloat32;
  if (absl::EndsWith(path, ".bvecs")) return VecsType::kUint8;
  if (absl::EndsWith(path, ".ivecs")) return VecsType::kInt32;
  return absl::InvalidArgumentError(absl::StrCat(
      path, ": unknown vector file type; expected .fvecs, .bvecs or .ivecs"));
}

absl::StatusOr<VecsReader> VecsReader::Open(const std::string& path) {
  ZOOM_ASSIGN_OR_RETURN(VecsType type, VecsTypeFromPath(path));
  return Open(path, type);
}

absl::StatusOr<VecsReader> VecsReader::Open(const std::string& path,
                                            VecsType type) {
  VecsReader r;
  r.path_ = path;
  r.type_ = type;
  r.file_.reset(std::fopen(path.c_str(), "rb"));
  if (!r.file_) return ErrnoError("cannot open", path);
  struct stat st;
  if (fstat(fileno(r.file_.get()), &st) != 0) return ErrnoError("cannot stat", path);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size == 0) return r;
  int32_t d = 0;
  if (size < sizeof(d) || std::fread(&d, sizeof(d), 1, r.file_.get()) != 1) {
    return absl::DataLossError(absl::StrCat(
        path, ": truncated: ", size, " bytes is less than one record header"));
  }
  if (d <= 0 || static_cast<uint32_t>(d) > kMaxVecsDim) {
    return absl::DataLossError(absl::StrCat(
        path, ": first record has dimension ", d, ", expected 1..", kMaxVecsDim,
        " (is this really a ", TypeName(type), " file?)"));
  }
  r.dim_ = static_cast<uint32_t>(d);
  const uint64_t record = 4 + uint64_t{r.dim_} * VecsComponentSize(type);
  if (size % record != 0) {
    return absl::DataLossError(absl::StrCat(
        path, ": truncated or inconsistent: ", size,
        " bytes is not a whole number of ", record, "-byte records (dim ",
        r.dim_, ", ", TypeName(type), "); ", size / record,
        " whole records and ", size % record, " stray bytes"));
  }
  r.count_ = size / record;
  r.row_.resize(record);
  std::setvbuf(r.file_.get(), nullptr, _IOFBF, 1 << 20);
  if (std::fseek(r.file_.get(), 0, SEEK_SET) != 0) return ErrnoError("cannot seek", path);
  return r;
}

absl::Status VecsReader::Seek(uint64_t row) {
  if (row > count_) {
    return absl::OutOfRangeError(absl::StrCat(path_, ": seek to row ", row,
                                              " past the end (", count_, ")"));
  }
  const uint64_t off = row * row_.size();
  if (std::fseek(file_.get(), static_cast<long>(off), SEEK_SET) != 0) {
    return ErrnoError("cannot seek", path_);
  }
  position_ = row;
  return absl::OkStatus();
}

absl::StatusOr<size_t> VecsReader::Read(size_t max_rows, void* out) {
  const size_t payload = row_.size() - 4;
  auto* dst = static_cast<uint8_t*>(out);
  size_t n = 0;
  while (n < max_rows && position_ < count_) {
    if (std::fread(row_.data(), 1, row_.size(), file_.get()) != row_.size()) {
      return absl::DataLossError(absl::StrCat(
          path_, ": short read at row ", position_, " of ", count_,
          " (file changed while reading?)"));
    }
    int32_t d;
    std::memcpy(&d, row_.data(), 4);
    if (d != static_cast<int32_t>(dim_)) {
      return absl::DataLossError(absl::StrCat(
          path_, ": inconsistent: row ", position_, " has dimension ", d,
          " but row 0 has ", dim_));
    }
    std::memcpy(dst + n * payload, row_.data() + 4, payload);
    ++n;
    ++position_;
  }
  return n;
}

absl::StatusOr<size_t> VecsReader::ReadAsFloat(size_t max_rows, float* out) {
  if (type_ == VecsType::kFloat32) return Read(max_rows, out);
  std::vector<uint8_t> tmp(max_rows * dim_ * VecsComponentSize(type_));
  ZOOM_ASSIGN_OR_RETURN(size_t n, Read(max_rows, tmp.data()));
  const size_t total = n * dim_;
  if (type_ == VecsType::kUint8) {
    for (size_t i = 0; i < total; ++i) out[i] = static_cast<float>(tmp[i]);
  } else {
    const auto* src = reinterpret_cast<const int32_t*>(tmp.data());
    for (size_t i = 0; i < total; ++i) out[i] = static_cast<float>(src[i]);
  }
  return n;
}

namespace {

template <typename T, typename ReadFn>
absl::StatusOr<VecsMatrix<T>> LoadAll(VecsReader& r, uint64_t max_rows,
                                      ReadFn read) {
  VecsMatrix<T> m;
  m.dim = r.dim();
  m.rows = (max_rows == 0 || max_rows > r.count()) ? r.count() : max_rows;
  m.data.resize(m.rows * m.dim);
  ZOOM_ASSIGN_OR_RETURN(size_t got, read(r, m.rows, m.data.data()));
  if (got != m.rows) {
    return absl::DataLossError(
        absl::StrCat(r.path(), ": read ", got, " of ", m.rows, " rows"));
  }
  return m;
}

}  // namespace

absl::StatusOr<VecsMatrix<float>> LoadVecsAsFloat(const std::string& path,
                                                  uint64_t max_rows) {
  ZOOM_ASSIGN_OR_RETURN(VecsReader r, VecsReader::Open(path));
  if (r.type() == VecsType::kInt32) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": expected .fvecs or .bvecs vectors, got .ivecs"));
  }
  return LoadAll<float>(r, max_rows, [](VecsReader& rr, size_t n, float* out) {
    return rr.ReadAsFloat(n, out);
  });
}

absl::StatusOr<VecsMatrix<uint8_t>> LoadBvecs(const std::string& path,
                                              uint64_t max_rows) {
  ZOOM_ASSIGN_OR_RETURN(VecsReader r, VecsReader::Open(path, VecsType::kUint8));
  return LoadAll<uint8_t>(r, max_rows,
                          [](VecsReader& rr, size_t n, uint8_t* out) {
                            return rr.Read(n, out);
                          });
}

absl::StatusOr<VecsMatrix<int32_t>> LoadIvecs(const std::string& path,
                                              uint64_t max_rows) {
  ZOOM_ASSIGN_OR_RETURN(VecsReader r, VecsReader::Open(path, VecsType::kInt32));
  return LoadAll<int32_t>(r, max_rows,
                          [](VecsReader& rr, size_t n, int32_t* out) {
                            return rr.Read(n, out);
                          });
}

absl::StatusOr<VecsWriter> VecsWriter::Create(const std::string& path,
                                              VecsType type, uint32_t dim) {
  if (dim == 0 || dim > kMaxVecsDim) {
    return absl::InvalidArgumentError(
        absl::StrCat("vector dimension ", dim, " out of range 1..", kMaxVecsDim));
  }
  VecsWriter w;
  w.path_ = path;
  w.type_ = type;
  w.dim_ = dim;
  w.file_.reset(std::fopen(path.c_str(), "wb"));
  if (!w.file_) return ErrnoError("cannot create", path);
  return w;
}

VecsWriter::~VecsWriter() = default;

absl::Status VecsWriter::Append(const void* data, size_t rows) {
  if (!file_) return absl::FailedPreconditionError("writer is closed");
  const size_t payload = size_t{dim_} * VecsComponentSize(type_);
  const auto* src = static_cast<const uint8_t*>(data);
  const int32_t d = static_cast<int32_t>(dim_);
  for (size_t i = 0; i < rows; ++i) {
    if (std::fwrite(&d, 4, 1, file_.get()) != 1 ||
        std::fwrite(src + i * payload, 1, payload, file_.get()) != payload) {
      return ErrnoError("cannot write", path_);
    }
  }
  rows_ += rows;
  return absl::OkStatus();
}

absl::Status VecsWriter::Close() {
  if (!file_) return absl::OkStatus();
  std::FILE* f = file_.release();
  const bool flush_ok = std::fflush(f) == 0;
  const bool close_ok = std::fclose(f) == 0;
  if (!flush_ok || !close_ok) return ErrnoError("cannot write", path_);
  return absl::OkStatus();
}

}  // namespace zoom
