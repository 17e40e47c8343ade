// File: storage/vector_store.h
//
// VectorStore: the full-precision vectors of one collection in one file,
// addressed by dense InternalId, laid out so that reading one vector costs
// one aligned read.
//
// File format 1.0 (little-endian):
//
//   block 0 (4096 bytes): header
//     0   char[8]  magic "ZOOMVEC\0"
//     8   u16      major (1)      10  u16 minor (0)
//     12  u32      header_bytes (4096)
//     16  u32      dim            20  u32 dtype (0 float32, 1 uint8)
//     24  u32      record_bytes = dim * sizeof(dtype)
//     28  u32      block_bytes (4096)
//     32  u32      records_per_block (>= 1)
//     36  u32      record_span: bytes from one record slot to the next
//                  (record_bytes when several share a block; record_bytes
//                  rounded up to block_bytes when a record fills blocks)
//     40  u64      count: records committed (durable)
//     48  u32      data_crc: CRC-32C of the committed records, in id order
//                  (record_bytes each, padding excluded)
//     52  u32      reserved (0)
//     56  u64      data_offset (4096)
//     64  ...      zero
//     4092 u32     header_crc: CRC-32C of bytes [0, 4092)
//   data: record i lives in block i / records_per_block at slot
//     i % records_per_block; a record never straddles a block boundary
//     unless it is larger than a block (then it starts on one).
//
// Durability: Append writes the records, fdatasync()s them, then writes the
// header with the new count and fdatasync()s it. A crash between the two
// leaves a torn tail past `count`, which Open ignores and the next Append
// overwrites. A reader never sees records past the committed count.
//
// Minor versions add fields in reserved space; a reader accepts any minor of
// its major. A newer major is refused with FailedPrecondition. Every major
// keeps the magic and header_crc (CRC-32C of bytes [0, 4092) at 4092) where
// 1.0 has them, and the reader checks the CRC before the version: a damaged
// version field is DataLoss.
//
// Thread safety: ReadVectors/ReadRaw are const and safe from many threads,
// also while one writer calls Append (single writer).
#ifndef ZOOM_STORAGE_VECTOR_STORE_H_
#define ZOOM_STORAGE_VECTOR_STORE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "common/file_system.h"
#include "common/ids.h"
#include "common/query_stats.h"
#include "storage/block_reader.h"
#include "storage/posix_file.h"

namespace zoom::storage {

enum class DType : uint32_t { kFloat32 = 0, kUint8 = 1 };
absl::StatusOr<DType> ParseDType(std::string_view name);  // "float32"|"uint8"
const char* DTypeName(DType dtype);
inline size_t DTypeSize(DType d) { return d == DType::kUint8 ? 1 : 4; }

struct VectorStoreOptions {
  // How the fullview reads (backend, O_DIRECT, registered buffers).
  BlockReaderOptions reader;
  // fdatasync() on every Append. Default: true. When false, records become
  // durable (and visible to readers) at the next Sync().
  bool sync_on_append = true;
  // Makes the fullview's reader. Default (empty): MakeBlockReader. Tests
  // inject faulty readers here, as RocksDB injects an Env.
  std::function<absl::StatusOr<std::unique_ptr<BlockReader>>(
      const std::string& path, const BlockReaderOptions& options)>
      reader_factory;
  // What the header and records are written through (null: POSIX). Tests
  // inject write faults here.
  FileSystem* file_system = nullptr;
  // Open reads every committed record and checks the data checksum
  // (VerifyData: DataLoss for a flipped bit anywhere in them): a full read
  // of the file, for an opener that has another copy to turn to (a cluster
  // node).
  bool verify_on_open = false;
};

class VectorStore {
 public:
  static constexpr char kMagic[8] = {'Z', 'O', 'O', 'M', 'V', 'E', 'C', '\0'};
  static constexpr uint16_t kMajorVersion = 1;
  static constexpr uint16_t kMinorVersion = 0;
  static constexpr uint32_t kBlockBytes = 4096;
  static constexpr uint32_t kHeaderBytes = 4096;

  // Creates a new, empty store at `path`. AlreadyExists if the file exists.
  static absl::StatusOr<std::unique_ptr<VectorStore>> Create(
      const std::string& path, uint32_t dim, DType dtype,
      const VectorStoreOptions& options = {});
  // Opens an existing store. DataLoss for a wrong magic, a checksum mismatch
  // or a truncated file; FailedPrecondition for a newer major version.
  static absl::StatusOr<std::unique_ptr<VectorStore>> Open(
      const std::string& path, const VectorStoreOptions& options = {});
  ~VectorStore();

  // Appends `n` records from `data` (n * record_bytes() bytes: float32 or
  // uint8 as dtype()), which get the ids count() .. count() + n - 1.
  // Durable on return when sync_on_append. On error nothing is committed.
  // Single writer.
  absl::Status Append(const void* data, size_t n);
  // Makes appended records durable and visible. Single writer.
  absl::Status Sync();

  // Reads the vectors of `ids` as float32 (uint8 widened) into `out`, which
  // holds ids.size() * dim() floats: out[i * dim()] is ids[i]'s vector. One
  // batch of reads; ids sharing a block share a read. Adds the reads and
  // bytes to `stats` when not null. OutOfRange for an id >= count().
  absl::Status ReadVectors(absl::Span<const InternalId> ids, float* out,
                           QueryStats* stats = nullptr) const;
  // ReadVectors in two phases (BlockReader::Submit): the reads are
  // submitted here and completed by the returned batch's Wait(), which
  // fills `out` and returns what ReadVectors would have. In between, this
  // thread may do other work (e.g. the next query's preview) but must not
  // read from this store. `ids`, `out` and `stats` must outlive the batch;
  // destroying it unwaited waits for the reads in flight.
  class PendingVectors {
   public:
    ~PendingVectors();
    absl::Status Wait();

   private:
    friend class VectorStore;
    PendingVectors() = default;
    const VectorStore* store_ = nullptr;
    float* out_ = nullptr;
    QueryStats* stats_ = nullptr;
    size_t n_ = 0, total_ = 0;
    std::unique_ptr<PendingReads> reads_;
    bool done_ = false;
    absl::Status status_;
  };
  std::unique_ptr<PendingVectors> SubmitReadVectors(absl::Span<const InternalId> ids, float* out,
                                                    QueryStats* stats = nullptr) const;
  // SubmitReadVectors, while_waiting(), Wait(): `while_waiting` runs
  // exactly once on this thread while the reads are in flight.
  absl::Status ReadVectorsOverlapped(
      absl::Span<const InternalId> ids, float* out, QueryStats* stats,
      absl::FunctionRef<void()> while_waiting) const;
  // As ReadVectors, copying the stored bytes (ids.size() * record_bytes()).
  absl::Status ReadRaw(absl::Span<const InternalId> ids, void* out,
                       QueryStats* stats = nullptr) const;

  // Recomputes the data checksum over all committed records (a full read)
  // and compares it with the header's. DataLoss on a mismatch.
  absl::Status VerifyData() const;

  uint32_t dim() const { return dim_; }
  DType dtype() const { return dtype_; }
  size_t record_bytes() const { return record_bytes_; }
  uint32_t records_per_block() const { return records_per_block_; }
  // Committed (durable, readable) records.
  uint64_t count() const { return count_.load(std::memory_order_acquire); }
  // Bytes the file takes for the committed records.
  uint64_t file_bytes() const;
  const std::string& path() const { return path_; }
  const BlockReader& reader() const { return *reader_; }
  // The file offset of record `id`.
  uint64_t RecordOffset(InternalId id) const;

 private:
  VectorStore() = default;
  // The reads of `ids` into this thread's scratch: the requests, one per
  // distinct block, and *total bytes.
  absl::Status PrepareRead(absl::Span<const InternalId> ids, size_t* total) const;
  // After the reads: the stats, the first failed request, then sink(pos,
  // record bytes) for each of the n ids.
  template <typename Sink>
  absl::Status CompleteRead(size_t n, size_t total, QueryStats* stats, Sink&& sink) const;
  template <typename Sink>
  absl::Status ReadImpl(absl::Span<const InternalId> ids, QueryStats* stats, Sink&& sink) const;
  // Widens or copies one stored record into dim() floats.
  void DecodeRecord(const uint8_t* rec, float* out) const;
  absl::Status WriteHeader(uint64_t count, uint32_t data_crc);
  uint64_t EndOffset(uint64_t count) const;

  std::string path_;
  VectorStoreOptions options_;
  uint32_t dim_ = 0;
  DType dtype_ = DType::kFloat32;
  uint32_t record_bytes_ = 0;
  uint32_t records_per_block_ = 1;
  uint32_t record_span_ = 0;
  uint64_t data_offset_ = kHeaderBytes;
  std::atomic<uint64_t> count_{0};
  // Writer state (single writer). The file the header and records are
  // written through (and verified from); the fullview reads via reader_.
  std::unique_ptr<File> file_;
  bool read_only_ = false;
  uint64_t pending_count_ = 0;  // appended, maybe not yet synced
  uint32_t pending_crc_ = 0;
  uint32_t committed_crc_ = 0;
  std::unique_ptr<BlockReader> reader_;
};

}  // namespace zoom::storage

#endif  // ZOOM_STORAGE_VECTOR_STORE_H_
