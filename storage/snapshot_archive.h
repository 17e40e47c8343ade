// File: storage/snapshot_archive.h
//
// A snapshot archive: named entries in one file, each checked by its own
// SHA-256, the whole closed by a trailer, so that a corrupt or truncated
// archive is refused (DataLoss) before anything is restored from it.
//
// File format "ZOOMSNAP" 1.0 (little-endian):
//
//   header   char[8] "ZOOMSNAP" | u16 major (1) | u16 minor (0) | u32 reserved (0)
//   entries  u32 name_bytes | name | u64 size | data[size] | u8[32] SHA-256 of
//            the entry's bytes before it (name_bytes .. data)
//   trailer  char[8] "ZSNAPEND" | u32 entry count | u8[32] SHA-256 of every
//            byte of the file before the trailer
//
// Nothing may follow the trailer. A reader accepts any minor of its major;
// a newer major is FailedPrecondition. The writer writes PATH.tmp and
// renames it to PATH at Finish (after fsync), so PATH is always whole.
//
// Signed archives: a writer given a SnapshotKey ends the entries with one
// named "signature" (text, format 1; golden tests/data/golden/
// snapshot_signature_v1.txt):
//
//   format=1
//   algorithm=hmac-sha256
//   key_id=<16 hex digits: the key's id, SnapshotKey::id>
//   mac=<64 hex digits: HMAC-SHA-256 under the key of the SHA-256 of every
//       byte of the file before the signature entry>
//
// The entries' own digests and the trailer catch damage; the signature
// catches an archive made or altered by someone without the key (who can
// recompute every SHA-256, not the HMAC). A "signature" entry must be the
// last (DataLoss otherwise). Archives of writers without a key, and of
// zoomds before signing, carry none: CheckSignature says whether that is
// acceptable.
//
// Thread safety: one thread per writer or reader.
#ifndef ZOOM_STORAGE_SNAPSHOT_ARCHIVE_H_
#define ZOOM_STORAGE_SNAPSHOT_ARCHIVE_H_

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/file_system.h"

namespace zoom::storage {

inline constexpr char kSnapshotMagic[8] = {'Z', 'O', 'O', 'M', 'S', 'N', 'A', 'P'};
inline constexpr char kSnapshotTrailer[8] = {'Z', 'S', 'N', 'A', 'P', 'E', 'N', 'D'};
inline constexpr uint16_t kSnapshotMajor = 1;
inline constexpr uint16_t kSnapshotMinor = 0;

// Incremental SHA-256.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void Update(const void* data, size_t n);
  std::array<uint8_t, 32> Final();
  // The digest of what was hashed so far; hashing goes on.
  std::array<uint8_t, 32> Peek() const;
  static std::string Hex(const std::array<uint8_t, 32>& digest);

 private:
  void* ctx_;  // EVP_MD_CTX
};

// The secret that signs and checks snapshots (zoomd --snapshot_key_file).
struct SnapshotKey {
  static constexpr size_t kMinSecretBytes = 16;
  std::string secret;
  // The first 16 hex digits of SHA-256("zoomd snapshot key id\n" + secret):
  // names the key in archives and messages without revealing it.
  std::string id;
  // InvalidArgument for a secret shorter than kMinSecretBytes.
  static absl::StatusOr<SnapshotKey> FromSecret(std::string secret);
  // A file holding the secret (trailing whitespace and newlines dropped),
  // at most 4 KiB: NotFound, InvalidArgument (not a regular file, too
  // short or too long) naming the path.
  static absl::StatusOr<SnapshotKey> ReadFile(const std::string& path);
};

inline constexpr char kSignatureEntry[] = "signature";

class ArchiveWriter {
 public:
  // Writes through `fs` (null: POSIX).
  static absl::StatusOr<std::unique_ptr<ArchiveWriter>> Create(const std::string& path,
                                                               FileSystem* fs = nullptr);
  ~ArchiveWriter();  // without Finish: removes PATH.tmp

  // A whole entry.
  absl::Status Add(std::string_view name, std::string_view data);
  // A streamed entry of exactly `size` bytes: Begin, Append..., End.
  absl::Status Begin(std::string_view name, uint64_t size);
  absl::Status Append(const void* data, size_t n);
  absl::Status End();
  // Signs the archive at Finish (the "signature" entry, last): `key` must
  // outlive the writer. Null: unsigned.
  void SignWith(const SnapshotKey* key) { key_ = key; }
  // Writes the signature (if any) and the trailer, syncs, renames PATH.tmp
  // to PATH.
  absl::Status Finish();

  uint64_t bytes() const { return offset_; }
  // SHA-256 of the whole file (valid after Finish), hex.
  const std::string& file_sha256() const { return file_sha256_; }

 private:
  ArchiveWriter() = default;
  absl::Status WriteRaw(const void* data, size_t n);
  absl::Status Flush();

  std::string path_, tmp_;
  FileSystem* fs_ = nullptr;
  std::unique_ptr<File> file_;
  uint64_t written_ = 0;  // bytes of the file written (the buffer excluded)
  std::string buffer_;
  uint64_t offset_ = 0;
  bool in_entry_ = false;
  uint64_t entry_left_ = 0;
  std::unique_ptr<Sha256> entry_hash_;
  Sha256 file_hash_;
  Sha256 body_hash_;  // every byte before the trailer
  uint32_t entries_ = 0;
  bool finished_ = false;
  std::string file_sha256_;
  const SnapshotKey* key_ = nullptr;
};

class ArchiveReader {
 public:
  struct Entry {
    std::string name;
    uint64_t offset = 0;  // of the data
    uint64_t size = 0;
  };
  // Opens PATH and reads every entry, checking every digest and the
  // trailer: DataLoss for a corrupt or truncated archive (naming the entry),
  // FailedPrecondition for a newer major version.
  static absl::StatusOr<std::unique_ptr<ArchiveReader>> Open(const std::string& path);
  ~ArchiveReader();

  const std::vector<Entry>& entries() const { return entries_; }
  const Entry* Find(std::string_view name) const;
  // A small entry whole (ResourceExhausted beyond max_bytes); NotFound when
  // absent.
  absl::StatusOr<std::string> Read(std::string_view name, uint64_t max_bytes) const;
  // An entry's bytes in chunks of up to `chunk` bytes.
  absl::Status ReadChunks(const Entry& entry, size_t chunk,
                          const std::function<absl::Status(const char*, size_t)>& fn) const;
  // SHA-256 of the whole file, hex.
  const std::string& file_sha256() const { return file_sha256_; }
  uint64_t bytes() const { return bytes_; }

  // Whether the archive ends with a signature entry, and the key id it
  // names ("" when unsigned).
  bool is_signed() const { return !signer_key_id_.empty(); }
  const std::string& signer_key_id() const { return signer_key_id_; }
  // OK when `key` is null (this server checks no signatures) or the
  // archive carries a valid signature by `key`; PermissionDenied, saying
  // which, when it is unsigned, signed with another key, or its signature
  // does not match its bytes (altered, or made without the key).
  absl::Status CheckSignature(const SnapshotKey* key) const;

 private:
  ArchiveReader() = default;
  int fd_ = -1;
  std::string path_;
  uint64_t bytes_ = 0;
  std::vector<Entry> entries_;
  std::string file_sha256_;
  std::string signer_key_id_;
  std::string signed_mac_;                // hex, from the signature entry
  std::array<uint8_t, 32> signed_digest_{};  // of the bytes before it
};

// The signature entry's text for `digest` (the SHA-256 of the bytes before
// it) under `key` (format 1, above).
std::string SignatureText(const SnapshotKey& key, const std::array<uint8_t, 32>& digest);

}  // namespace zoom::storage

#endif  // ZOOM_STORAGE_SNAPSHOT_ARCHIVE_H_
