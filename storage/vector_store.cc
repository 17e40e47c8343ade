#include "storage/vector_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/aligned_buffer.h"
#include "common/crc32c.h"
#include "common/status_macros.h"

namespace zoom::storage {
namespace {

// Header field offsets (see the file comment in vector_store.h).
constexpr size_t kOffMagic = 0;
constexpr size_t kOffMajor = 8;
constexpr size_t kOffMinor = 10;
constexpr size_t kOffHeaderBytes = 12;
constexpr size_t kOffDim = 16;
constexpr size_t kOffDType = 20;
constexpr size_t kOffRecordBytes = 24;
constexpr size_t kOffBlockBytes = 28;
constexpr size_t kOffRecordsPerBlock = 32;
constexpr size_t kOffRecordSpan = 36;
constexpr size_t kOffCount = 40;
constexpr size_t kOffDataCrc = 48;
constexpr size_t kOffDataOffset = 56;
constexpr size_t kOffHeaderCrc = 4092;

template <typename T>
void Put(uint8_t* base, size_t off, T v) {
  std::memcpy(base + off, &v, sizeof(T));
}
template <typename T>
T Get(const uint8_t* base, size_t off) {
  T v;
  std::memcpy(&v, base + off, sizeof(T));
  return v;
}

struct Layout {
  uint32_t record_bytes;
  uint32_t records_per_block;
  uint32_t record_span;
};

Layout ComputeLayout(uint32_t dim, DType dtype) {
  Layout l;
  l.record_bytes = dim * static_cast<uint32_t>(DTypeSize(dtype));
  if (l.record_bytes <= VectorStore::kBlockBytes / 2) {
    l.records_per_block = VectorStore::kBlockBytes / l.record_bytes;
    l.record_span = l.record_bytes;
  } else {
    l.records_per_block = 1;
    l.record_span =
        static_cast<uint32_t>(AlignUp(l.record_bytes, VectorStore::kBlockBytes));
  }
  return l;
}

FileSystem& FsOf(const VectorStoreOptions& options) {
  return options.file_system != nullptr ? *options.file_system : *FileSystem::Posix();
}

// Per-thread buffers of ReadImpl, reused so the hot path does not allocate.
struct ReadScratch {
  struct Item {
    uint64_t block;
    uint32_t pos;
  };
  std::vector<Item> order;
  std::vector<ReadRequest> requests;
  std::vector<uint32_t> request_of;      // per pos: its request
  std::vector<uint32_t> offset_in_req;   // per pos: its record's byte offset
};
thread_local ReadScratch tls_read_scratch;

}  // namespace

absl::StatusOr<DType> ParseDType(std::string_view name) {
  const std::string lower =
      absl::AsciiStrToLower(absl::string_view(name.data(), name.size()));
  if (lower == "float32" || lower == "float" || lower == "f32") {
    return DType::kFloat32;
  }
  if (lower == "uint8" || lower == "u8" || lower == "byte") return DType::kUint8;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype '", lower, "': use float32 or uint8"));
}

const char* DTypeName(DType dtype) {
  return dtype == DType::kUint8 ? "uint8" : "float32";
}

VectorStore::~VectorStore() = default;

uint64_t VectorStore::RecordOffset(InternalId id) const {
  const uint64_t block = id / records_per_block_;
  const uint64_t slot = id % records_per_block_;
  const uint64_t block_span =
      records_per_block_ > 1 ? kBlockBytes : record_span_;
  return data_offset_ + block * block_span + slot * record_span_;
}

uint64_t VectorStore::EndOffset(uint64_t count) const {
  if (count == 0) return data_offset_;
  return RecordOffset(static_cast<InternalId>(count - 1)) + record_bytes_;
}

uint64_t VectorStore::file_bytes() const { return EndOffset(count()); }

absl::StatusOr<std::unique_ptr<VectorStore>> VectorStore::Create(
    const std::string& path, uint32_t dim, DType dtype,
    const VectorStoreOptions& options) {
  if (dim == 0 || dim > (1u << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("dimension ", dim, " out of range 1..", 1u << 20));
  }
  ZOOM_RETURN_IF_ERROR(options.reader.Validate());
  FileSystem& fs = FsOf(options);
  auto file = fs.Open(path, FileSystem::Mode::kCreateNew);
  if (!file.ok()) {
    if (absl::IsAlreadyExists(file.status())) {
      return absl::AlreadyExistsError(
          absl::StrCat(path, " already exists; Open it instead"));
    }
    return file.status();
  }
  std::unique_ptr<VectorStore> s(new VectorStore());
  s->file_ = std::move(*file);
  s->path_ = path;
  s->options_ = options;
  s->dim_ = dim;
  s->dtype_ = dtype;
  const Layout l = ComputeLayout(dim, dtype);
  s->record_bytes_ = l.record_bytes;
  s->records_per_block_ = l.records_per_block;
  s->record_span_ = l.record_span;
  s->data_offset_ = kHeaderBytes;
  absl::Status st = s->WriteHeader(0, 0);
  if (st.ok()) st = fs.SyncDir(ParentDir(path));
  if (!st.ok()) {
    s->file_.reset();
    fs.Remove(path).IgnoreError();
    return st;
  }
  ZOOM_ASSIGN_OR_RETURN(s->reader_, options.reader_factory
                                            ? options.reader_factory(path, options.reader)
                                            : MakeBlockReader(path, options.reader));
  return s;
}

absl::StatusOr<std::unique_ptr<VectorStore>> VectorStore::Open(
    const std::string& path, const VectorStoreOptions& options) {
  ZOOM_RETURN_IF_ERROR(options.reader.Validate());
  FileSystem& fs = FsOf(options);
  bool read_only = false;
  auto opened = fs.Open(path, FileSystem::Mode::kReadWrite);
  if (!opened.ok() && absl::IsPermissionDenied(opened.status())) {
    opened = fs.Open(path, FileSystem::Mode::kReadOnly);  // a read-only store
    read_only = true;
  }
  if (!opened.ok()) return opened.status();
  std::unique_ptr<File> file = std::move(*opened);
  ZOOM_ASSIGN_OR_RETURN(uint64_t size, file->Size());
  if (size < kHeaderBytes) {
    return absl::DataLossError(absl::StrCat(
        path, ": truncated: ", size, " bytes is shorter than the ",
        kHeaderBytes, "-byte header"));
  }
  uint8_t h[kHeaderBytes];
  ZOOM_RETURN_IF_ERROR(file->PRead(0, h, kHeaderBytes));
  if (std::memcmp(h + kOffMagic, kMagic, sizeof(kMagic)) != 0) {
    return absl::DataLossError(
        absl::StrCat(path, ": not a zoomd vector store (bad magic)"));
  }
  // The checksum before the version: every major keeps the header's CRC
  // where 1.0 has it, so a flipped version byte is damage (DataLoss), not a
  // newer format.
  const uint32_t want_crc = Get<uint32_t>(h, kOffHeaderCrc);
  const uint32_t got_crc = Crc32c(h, kOffHeaderCrc);
  if (want_crc != got_crc) {
    return absl::DataLossError(absl::StrCat(
        path, ": header checksum mismatch (stored ", want_crc, ", computed ",
        got_crc, "): the file is corrupt"));
  }
  const auto major = Get<uint16_t>(h, kOffMajor);
  const auto minor = Get<uint16_t>(h, kOffMinor);
  if (major > kMajorVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, ": vector store format ", major, ".", minor,
        " was written by a newer zoomd; this build reads format ",
        kMajorVersion, ".x"));
  }
  if (major != kMajorVersion) {
    return absl::DataLossError(absl::StrCat(
        path, ": unsupported vector store format ", major, ".", minor));
  }
  const uint32_t dim = Get<uint32_t>(h, kOffDim);
  const uint32_t dtype_raw = Get<uint32_t>(h, kOffDType);
  if (dim == 0 || dim > (1u << 20) || dtype_raw > 1 ||
      Get<uint32_t>(h, kOffHeaderBytes) != kHeaderBytes ||
      Get<uint32_t>(h, kOffBlockBytes) != kBlockBytes ||
      Get<uint64_t>(h, kOffDataOffset) != kHeaderBytes) {
    return absl::DataLossError(
        absl::StrCat(path, ": inconsistent header (dim ", dim, ", dtype ",
                     dtype_raw, ")"));
  }
  const auto dtype = static_cast<DType>(dtype_raw);
  const Layout l = ComputeLayout(dim, dtype);
  if (Get<uint32_t>(h, kOffRecordBytes) != l.record_bytes ||
      Get<uint32_t>(h, kOffRecordsPerBlock) != l.records_per_block ||
      Get<uint32_t>(h, kOffRecordSpan) != l.record_span) {
    return absl::DataLossError(
        absl::StrCat(path, ": inconsistent header record layout"));
  }
  std::unique_ptr<VectorStore> s(new VectorStore());
  s->path_ = path;
  s->options_ = options;
  s->dim_ = dim;
  s->dtype_ = dtype;
  s->record_bytes_ = l.record_bytes;
  s->records_per_block_ = l.records_per_block;
  s->record_span_ = l.record_span;
  s->data_offset_ = kHeaderBytes;
  const uint64_t count = Get<uint64_t>(h, kOffCount);
  if (count > kMaxInternalIds || s->EndOffset(count) > size) {
    return absl::DataLossError(absl::StrCat(
        path, ": truncated: the header commits ", count,
        " records but the file has only ", size, " bytes"));
  }
  s->count_.store(count);
  s->pending_count_ = count;
  s->committed_crc_ = s->pending_crc_ = Get<uint32_t>(h, kOffDataCrc);
  s->file_ = std::move(file);
  s->read_only_ = read_only;
  ZOOM_ASSIGN_OR_RETURN(s->reader_, options.reader_factory
                                            ? options.reader_factory(path, options.reader)
                                            : MakeBlockReader(path, options.reader));
  if (options.verify_on_open) ZOOM_RETURN_IF_ERROR(s->VerifyData());
  return s;
}

absl::Status VectorStore::WriteHeader(uint64_t count, uint32_t data_crc) {
  alignas(64) uint8_t h[kHeaderBytes];
  std::memset(h, 0, sizeof(h));
  std::memcpy(h + kOffMagic, kMagic, sizeof(kMagic));
  Put<uint16_t>(h, kOffMajor, kMajorVersion);
  Put<uint16_t>(h, kOffMinor, kMinorVersion);
  Put<uint32_t>(h, kOffHeaderBytes, kHeaderBytes);
  Put<uint32_t>(h, kOffDim, dim_);
  Put<uint32_t>(h, kOffDType, static_cast<uint32_t>(dtype_));
  Put<uint32_t>(h, kOffRecordBytes, record_bytes_);
  Put<uint32_t>(h, kOffBlockBytes, kBlockBytes);
  Put<uint32_t>(h, kOffRecordsPerBlock, records_per_block_);
  Put<uint32_t>(h, kOffRecordSpan, record_span_);
  Put<uint64_t>(h, kOffCount, count);
  Put<uint32_t>(h, kOffDataCrc, data_crc);
  Put<uint64_t>(h, kOffDataOffset, data_offset_);
  Put<uint32_t>(h, kOffHeaderCrc, Crc32c(h, kOffHeaderCrc));
  ZOOM_RETURN_IF_ERROR(file_->PWrite(0, h, sizeof(h)));
  return file_->Sync();
}

absl::Status VectorStore::Append(const void* data, size_t n) {
  if (n == 0) return absl::OkStatus();
  if (read_only_) {
    return absl::FailedPreconditionError(
        absl::StrCat(path_, " is open read-only"));
  }
  if (pending_count_ + n > kMaxInternalIds) {
    return absl::ResourceExhaustedError(absl::StrCat(
        path_, ": ", pending_count_, " + ", n, " records exceed the limit of ",
        kMaxInternalIds));
  }
  const auto* src = static_cast<const uint8_t*>(data);
  // Write in chunks of whole records into a zero-padded image of the region.
  constexpr size_t kChunkBytes = 4 << 20;
  const size_t per_chunk =
      std::max<size_t>(1, kChunkBytes / std::max<uint32_t>(record_span_, 1));
  std::vector<uint8_t> region;
  uint64_t next = pending_count_;
  for (size_t done = 0; done < n;) {
    const size_t m = std::min(per_chunk, n - done);
    const uint64_t begin = RecordOffset(static_cast<InternalId>(next));
    // Pad to the end of the last block, so that every aligned read of a
    // committed record lies inside the file.
    const uint64_t end = AlignUp(EndOffset(next + m), kBlockBytes);
    region.assign(end - begin, 0);
    for (size_t i = 0; i < m; ++i) {
      const uint64_t off = RecordOffset(static_cast<InternalId>(next + i));
      std::memcpy(region.data() + (off - begin),
                  src + (done + i) * record_bytes_, record_bytes_);
    }
    // Nothing is committed until the header moves: a failure here leaves a
    // tail that Open ignores and the next Append overwrites.
    ZOOM_RETURN_IF_ERROR(file_->PWrite(begin, region.data(), region.size()));
    done += m;
    next += m;
  }
  pending_crc_ = Crc32cExtend(pending_crc_, src, n * record_bytes_);
  pending_count_ += n;
  if (options_.sync_on_append) return Sync();
  return absl::OkStatus();
}

absl::Status VectorStore::Sync() {
  if (pending_count_ == count()) return absl::OkStatus();
  absl::Status st = file_->Sync();
  if (st.ok()) st = WriteHeader(pending_count_, pending_crc_);
  if (!st.ok()) {
    // Roll back to the committed state; the tail will be overwritten.
    pending_count_ = count();
    pending_crc_ = committed_crc_;
    return st;
  }
  committed_crc_ = pending_crc_;
  count_.store(pending_count_, std::memory_order_release);
  return absl::OkStatus();
}

absl::Status VectorStore::PrepareRead(absl::Span<const InternalId> ids, size_t* total) const {
  const size_t n = ids.size();
  const uint64_t committed = count();
  ReadScratch& s = tls_read_scratch;
  s.requests.clear();
  s.order.resize(n);
  for (size_t i = 0; i < n; ++i) {
    if (ids[i] >= committed) {
      return absl::OutOfRangeError(absl::StrCat(
          "vector id ", ids[i], " is not in ", path_, " (", committed,
          " vectors)"));
    }
    s.order[i] = {ids[i] / records_per_block_, static_cast<uint32_t>(i)};
  }
  std::sort(s.order.begin(), s.order.end(),
            [](const ReadScratch::Item& a, const ReadScratch::Item& b) {
              return a.block < b.block;
            });
  const uint64_t a = std::max<size_t>(reader_->alignment(), 1);
  s.request_of.resize(n);
  s.offset_in_req.resize(n);
  // One request per distinct block: the aligned range covering its records.
  *total = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    uint64_t lo = UINT64_MAX;
    uint64_t hi = 0;
    while (j < n && s.order[j].block == s.order[i].block) {
      const uint64_t off = RecordOffset(ids[s.order[j].pos]);
      lo = std::min(lo, AlignDown(off, a));
      hi = std::max(hi, AlignUp(off + record_bytes_, a));
      ++j;
    }
    const auto r = static_cast<uint32_t>(s.requests.size());
    ReadRequest req;
    req.offset = lo;
    req.len = hi - lo;
    s.requests.push_back(req);
    for (size_t k = i; k < j; ++k) {
      const uint32_t pos = s.order[k].pos;
      s.request_of[pos] = r;
      s.offset_in_req[pos] =
          static_cast<uint32_t>(RecordOffset(ids[pos]) - lo);
    }
    *total += hi - lo;
    i = j;
  }
  ZOOM_ASSIGN_OR_RETURN(uint8_t * scratch, reader_->Scratch(*total));
  size_t used = 0;
  for (ReadRequest& req : s.requests) {
    req.buffer = scratch + used;
    used += req.len;
  }
  return absl::OkStatus();
}

template <typename Sink>
absl::Status VectorStore::CompleteRead(size_t n, size_t total, QueryStats* stats,
                                       Sink&& sink) const {
  const ReadScratch& s = tls_read_scratch;
  if (stats != nullptr) {
    stats->reads += s.requests.size();
    stats->bytes_read += total;
  }
  for (const ReadRequest& req : s.requests) {
    if (!req.status.ok()) {
      if (stats != nullptr) ++stats->read_errors;
      return absl::Status(
          req.status.code(),
          absl::StrCat("reading vectors from ", path_, ": ",
                       req.status.message()));
    }
  }
  for (size_t pos = 0; pos < n; ++pos) {
    const ReadRequest& req = s.requests[s.request_of[pos]];
    sink(pos, static_cast<const uint8_t*>(req.buffer) + s.offset_in_req[pos]);
  }
  return absl::OkStatus();
}

template <typename Sink>
absl::Status VectorStore::ReadImpl(absl::Span<const InternalId> ids, QueryStats* stats,
                                   Sink&& sink) const {
  if (ids.empty()) return absl::OkStatus();
  size_t total = 0;
  ZOOM_RETURN_IF_ERROR(PrepareRead(ids, &total));
  ZOOM_RETURN_IF_ERROR(reader_->ReadBatch(absl::MakeSpan(tls_read_scratch.requests)));
  return CompleteRead(ids.size(), total, stats, sink);
}

void VectorStore::DecodeRecord(const uint8_t* rec, float* out) const {
  if (dtype_ == DType::kFloat32) {
    std::memcpy(out, rec, dim_ * sizeof(float));
  } else {
    for (size_t i = 0; i < dim_; ++i) out[i] = static_cast<float>(rec[i]);
  }
}

absl::Status VectorStore::ReadVectors(absl::Span<const InternalId> ids,
                                      float* out, QueryStats* stats) const {
  return ReadImpl(ids, stats, [&](size_t pos, const uint8_t* rec) {
    DecodeRecord(rec, out + pos * dim_);
  });
}

std::unique_ptr<VectorStore::PendingVectors> VectorStore::SubmitReadVectors(
    absl::Span<const InternalId> ids, float* out, QueryStats* stats) const {
  std::unique_ptr<PendingVectors> p(new PendingVectors());
  p->store_ = this;
  p->out_ = out;
  p->stats_ = stats;
  p->n_ = ids.size();
  if (ids.empty()) {
    p->done_ = true;
    return p;
  }
  absl::Status st = PrepareRead(ids, &p->total_);
  if (!st.ok()) {
    p->done_ = true;
    p->status_ = st;
    return p;
  }
  p->reads_ = reader_->Submit(absl::MakeSpan(tls_read_scratch.requests));
  return p;
}

VectorStore::PendingVectors::~PendingVectors() = default;  // reads_ waits for itself

absl::Status VectorStore::PendingVectors::Wait() {
  if (done_) return status_;
  done_ = true;
  status_ = reads_->Wait();
  if (status_.ok()) {
    status_ = store_->CompleteRead(n_, total_, stats_, [&](size_t pos, const uint8_t* rec) {
      store_->DecodeRecord(rec, out_ + pos * store_->dim_);
    });
  }
  return status_;
}

absl::Status VectorStore::ReadVectorsOverlapped(
    absl::Span<const InternalId> ids, float* out, QueryStats* stats,
    absl::FunctionRef<void()> while_waiting) const {
  std::unique_ptr<PendingVectors> pending = SubmitReadVectors(ids, out, stats);
  while_waiting();
  return pending->Wait();
}

absl::Status VectorStore::ReadRaw(absl::Span<const InternalId> ids, void* out,
                                  QueryStats* stats) const {
  auto* dst = static_cast<uint8_t*>(out);
  const size_t rb = record_bytes_;
  return ReadImpl(ids, stats, [&](size_t pos, const uint8_t* rec) {
    std::memcpy(dst + pos * rb, rec, rb);
  });
}

absl::Status VectorStore::VerifyData() const {
  const uint64_t committed = count();
  uint32_t crc = 0;
  constexpr uint64_t kChunkRecords = 8192;
  std::vector<uint8_t> buf;
  for (uint64_t first = 0; first < committed; first += kChunkRecords) {
    const uint64_t m = std::min(kChunkRecords, committed - first);
    const uint64_t begin = RecordOffset(static_cast<InternalId>(first));
    const uint64_t end = EndOffset(first + m);
    buf.resize(end - begin);
    ZOOM_RETURN_IF_ERROR(file_->PRead(begin, buf.data(), buf.size()));
    for (uint64_t i = 0; i < m; ++i) {
      const uint64_t off = RecordOffset(static_cast<InternalId>(first + i));
      crc = Crc32cExtend(crc, buf.data() + (off - begin), record_bytes_);
    }
  }
  if (crc != committed_crc_) {
    return absl::DataLossError(absl::StrCat(
        path_, ": data checksum mismatch over ", committed,
        " records (stored ", committed_crc_, ", computed ", crc,
        "): the file is corrupt"));
  }
  return absl::OkStatus();
}

}  // namespace zoom::storage
