#include "storage/snapshot_archive.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/endian.h"
#include "common/status_macros.h"
#include "storage/posix_file.h"

namespace zoom::storage {
namespace {

constexpr size_t kBufferBytes = 1 << 20;
constexpr uint32_t kMaxNameBytes = 256;

constexpr auto PutLe = PutLittleEndian;
constexpr auto GetLe = GetLittleEndian;

}  // namespace

// ---- Sha256 -------------------------------------------------------------------

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), EVP_sha256(), nullptr);
}
Sha256::~Sha256() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_)); }
void Sha256::Update(const void* data, size_t n) {
  EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), data, n);
}
std::array<uint8_t, 32> Sha256::Final() {
  std::array<uint8_t, 32> d{};
  unsigned int len = 0;
  EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), d.data(), &len);
  EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), EVP_sha256(), nullptr);
  return d;
}
std::array<uint8_t, 32> Sha256::Peek() const {
  std::array<uint8_t, 32> d{};
  EVP_MD_CTX* copy = EVP_MD_CTX_new();
  EVP_MD_CTX_copy_ex(copy, static_cast<const EVP_MD_CTX*>(ctx_));
  unsigned int len = 0;
  EVP_DigestFinal_ex(copy, d.data(), &len);
  EVP_MD_CTX_free(copy);
  return d;
}
std::string Sha256::Hex(const std::array<uint8_t, 32>& digest) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (uint8_t b : digest) {
    out += kHex[b >> 4];
    out += kHex[b & 0xf];
  }
  return out;
}

// ---- SnapshotKey and signatures -----------------------------------------------

namespace {

constexpr size_t kMaxKeyFileBytes = 4096;
constexpr uint64_t kMaxSignatureBytes = 4096;

std::array<uint8_t, 32> Mac(const SnapshotKey& key, const std::array<uint8_t, 32>& digest) {
  std::array<uint8_t, 32> out{};
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.secret.data(), static_cast<int>(key.secret.size()), digest.data(),
       digest.size(), out.data(), &len);
  return out;
}

}  // namespace

absl::StatusOr<SnapshotKey> SnapshotKey::FromSecret(std::string secret) {
  if (secret.size() < kMinSecretBytes) {
    return absl::InvalidArgumentError(absl::StrCat("a snapshot key needs at least ",
                                                   kMinSecretBytes, " bytes; this one has ",
                                                   secret.size()));
  }
  SnapshotKey k;
  Sha256 h;
  const std::string_view label = "zoomd snapshot key id\n";
  h.Update(label.data(), label.size());
  h.Update(secret.data(), secret.size());
  k.id = Sha256::Hex(h.Final()).substr(0, 16);
  k.secret = std::move(secret);
  return k;
}

absl::StatusOr<SnapshotKey> SnapshotKey::ReadFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("snapshot key file ", path));
  std::string secret;
  struct stat st;
  absl::Status status;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    status = absl::InvalidArgumentError(
        absl::StrCat("snapshot key file ", path, " is not a regular file"));
  } else if (static_cast<uint64_t>(st.st_size) > kMaxKeyFileBytes) {
    status = absl::InvalidArgumentError(absl::StrCat("snapshot key file ", path, " holds ",
                                                     st.st_size, " bytes; at most ",
                                                     kMaxKeyFileBytes));
  } else {
    secret.resize(static_cast<size_t>(st.st_size));
    size_t done = 0;
    while (done < secret.size()) {
      const ssize_t got = ::pread(fd, secret.data() + done, secret.size() - done,
                                  static_cast<off_t>(done));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) break;
      done += static_cast<size_t>(got);
    }
    secret.resize(done);
  }
  ::close(fd);
  if (!status.ok()) return status;
  while (!secret.empty() && absl::ascii_isspace(static_cast<unsigned char>(secret.back()))) {
    secret.pop_back();
  }
  absl::StatusOr<SnapshotKey> k = FromSecret(std::move(secret));
  if (!k.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("snapshot key file ", path, ": ", k.status().message()));
  }
  return k;
}

std::string SignatureText(const SnapshotKey& key, const std::array<uint8_t, 32>& digest) {
  return absl::StrCat("format=1\nalgorithm=hmac-sha256\nkey_id=", key.id,
                      "\nmac=", Sha256::Hex(Mac(key, digest)), "\n");
}

absl::Status ArchiveReader::CheckSignature(const SnapshotKey* key) const {
  if (key == nullptr) return absl::OkStatus();
  const std::string name = std::filesystem::path(path_).filename().string();
  if (!is_signed()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "snapshot ", name, " is not signed; this server restores only snapshots signed with "
        "its snapshot key (id ", key->id, ", --snapshot_key_file)"));
  }
  if (signer_key_id_ != key->id) {
    return absl::PermissionDeniedError(absl::StrCat(
        "snapshot ", name, " is signed with key ", signer_key_id_, "; this server's key is ",
        key->id, " (--snapshot_key_file)"));
  }
  const std::string want = Sha256::Hex(Mac(*key, signed_digest_));
  if (want.size() != signed_mac_.size() ||
      CRYPTO_memcmp(want.data(), signed_mac_.data(), want.size()) != 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        "snapshot ", name, ": its signature does not match its contents (altered, or made "
        "without key ", key->id, ")"));
  }
  return absl::OkStatus();
}

// ---- ArchiveWriter ------------------------------------------------------------

absl::StatusOr<std::unique_ptr<ArchiveWriter>> ArchiveWriter::Create(const std::string& path,
                                                                     FileSystem* fs) {
  std::unique_ptr<ArchiveWriter> w(new ArchiveWriter());
  w->path_ = path;
  w->tmp_ = path + ".tmp";
  w->fs_ = fs != nullptr ? fs : FileSystem::Posix();
  ZOOM_ASSIGN_OR_RETURN(w->file_, w->fs_->Open(w->tmp_, FileSystem::Mode::kTruncate));
  std::string header(kSnapshotMagic, 8);
  PutLe(&header, kSnapshotMajor, 2);
  PutLe(&header, kSnapshotMinor, 2);
  PutLe(&header, 0, 4);
  ZOOM_RETURN_IF_ERROR(w->WriteRaw(header.data(), header.size()));
  return w;
}

ArchiveWriter::~ArchiveWriter() {
  file_.reset();
  if (!finished_ && fs_ != nullptr) fs_->Remove(tmp_).IgnoreError();
}

absl::Status ArchiveWriter::WriteRaw(const void* data, size_t n) {
  file_hash_.Update(data, n);
  if (!finished_) body_hash_.Update(data, n);
  buffer_.append(static_cast<const char*>(data), n);
  offset_ += n;
  if (buffer_.size() >= kBufferBytes) return Flush();
  return absl::OkStatus();
}

absl::Status ArchiveWriter::Flush() {
  ZOOM_RETURN_IF_ERROR(file_->PWrite(written_, buffer_.data(), buffer_.size()));
  written_ += buffer_.size();
  buffer_.clear();
  return absl::OkStatus();
}

absl::Status ArchiveWriter::Begin(std::string_view name, uint64_t size) {
  if (in_entry_) return absl::FailedPreconditionError("an entry is open");
  if (name.empty() || name.size() > kMaxNameBytes) {
    return absl::InvalidArgumentError("archive entry names are 1..256 bytes");
  }
  std::string head;
  PutLe(&head, name.size(), 4);
  head.append(name.data(), name.size());
  PutLe(&head, size, 8);
  ZOOM_RETURN_IF_ERROR(WriteRaw(head.data(), head.size()));
  in_entry_ = true;
  entry_left_ = size;
  entry_hash_ = std::make_unique<Sha256>();
  entry_hash_->Update(head.data(), head.size());
  return absl::OkStatus();
}

absl::Status ArchiveWriter::Append(const void* data, size_t n) {
  if (!in_entry_ || n > entry_left_) {
    return absl::FailedPreconditionError("archive entry: more bytes than announced");
  }
  entry_hash_->Update(data, n);
  entry_left_ -= n;
  return WriteRaw(data, n);
}

absl::Status ArchiveWriter::End() {
  if (!in_entry_ || entry_left_ != 0) {
    return absl::FailedPreconditionError("archive entry: fewer bytes than announced");
  }
  const std::array<uint8_t, 32> d = entry_hash_->Final();
  ++entries_;
  in_entry_ = false;
  return WriteRaw(d.data(), d.size());
}

absl::Status ArchiveWriter::Add(std::string_view name, std::string_view data) {
  ZOOM_RETURN_IF_ERROR(Begin(name, data.size()));
  ZOOM_RETURN_IF_ERROR(Append(data.data(), data.size()));
  return End();
}

absl::Status ArchiveWriter::Finish() {
  if (in_entry_) return absl::FailedPreconditionError("an entry is open");
  if (key_ != nullptr) {
    ZOOM_RETURN_IF_ERROR(Add(kSignatureEntry, SignatureText(*key_, body_hash_.Peek())));
  }
  std::string trailer(kSnapshotTrailer, 8);
  PutLe(&trailer, entries_, 4);
  const std::array<uint8_t, 32> d = body_hash_.Final();
  trailer.append(reinterpret_cast<const char*>(d.data()), d.size());
  file_hash_.Update(trailer.data(), trailer.size());
  offset_ += trailer.size();
  buffer_.append(trailer);
  ZOOM_RETURN_IF_ERROR(Flush());
  ZOOM_RETURN_IF_ERROR(file_->Sync());
  ZOOM_RETURN_IF_ERROR(file_->Close());
  file_.reset();
  ZOOM_RETURN_IF_ERROR(fs_->Rename(tmp_, path_));
  finished_ = true;  // renamed: the destructor leaves it
  ZOOM_RETURN_IF_ERROR(fs_->SyncDir(ParentDir(path_)));
  file_sha256_ = Sha256::Hex(file_hash_.Final());
  return absl::OkStatus();
}

// ---- ArchiveReader ------------------------------------------------------------

ArchiveReader::~ArchiveReader() {
  if (fd_ >= 0) ::close(fd_);
}

absl::StatusOr<std::unique_ptr<ArchiveReader>> ArchiveReader::Open(const std::string& path) {
  std::unique_ptr<ArchiveReader> r(new ArchiveReader());
  r->path_ = path;
  r->fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (r->fd_ < 0) return ErrnoStatus(errno, absl::StrCat("open ", path));
  struct stat st;
  if (::fstat(r->fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a regular file"));
  }
  r->bytes_ = static_cast<uint64_t>(st.st_size);
  const std::string name = std::filesystem::path(path).filename().string();
  auto corrupt = [&](const std::string& why) {
    return absl::DataLossError(absl::StrCat("snapshot ", name, " is corrupt or truncated: ", why));
  };
  // Sequential reads, hashing the whole file and, apart, every byte before
  // the trailer.
  Sha256 file_hash, body;
  uint64_t pos = 0;
  auto read = [&](void* out, size_t n, Sha256* also) -> absl::Status {
    char* p = static_cast<char*>(out);
    size_t done = 0;
    while (done < n) {
      const ssize_t got = ::pread(r->fd_, p + done, n - done, static_cast<off_t>(pos + done));
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) return ErrnoStatus(errno, absl::StrCat("read ", path));
      if (got == 0) return corrupt(absl::StrCat("it ends at byte ", pos + done));
      done += static_cast<size_t>(got);
    }
    file_hash.Update(out, n);
    if (also != nullptr) also->Update(out, n);
    pos += n;
    return absl::OkStatus();
  };
  char header[16];
  ZOOM_RETURN_IF_ERROR(read(header, sizeof(header), &body));
  if (std::memcmp(header, kSnapshotMagic, 8) != 0) return corrupt("not a zoomd snapshot (magic)");
  const uint16_t major = static_cast<uint16_t>(GetLe(header + 8, 2));
  if (major > kSnapshotMajor) {
    return absl::FailedPreconditionError(absl::StrCat(
        "snapshot ", name, " has format version ", major, ", newer than this zoomd reads"));
  }
  if (major != kSnapshotMajor) return corrupt("unknown format version");
  std::vector<char> chunk(kBufferBytes);
  for (;;) {
    char tag[8];
    ZOOM_RETURN_IF_ERROR(read(tag, 4, nullptr));
    if (std::memcmp(tag, kSnapshotTrailer, 4) == 0) {
      ZOOM_RETURN_IF_ERROR(read(tag + 4, 4, nullptr));
      if (std::memcmp(tag, kSnapshotTrailer, 8) != 0) return corrupt("bad trailer");
      char tail[36];
      ZOOM_RETURN_IF_ERROR(read(tail, sizeof(tail), nullptr));
      if (GetLe(tail, 4) != r->entries_.size()) return corrupt("the entry count differs");
      const std::array<uint8_t, 32> want = body.Final();
      if (std::memcmp(tail + 4, want.data(), 32) != 0) return corrupt("the file's digest differs");
      if (pos != r->bytes_) return corrupt("bytes follow the trailer");
      break;
    }
    if (!r->signer_key_id_.empty()) return corrupt("an entry follows the signature");
    const std::array<uint8_t, 32> before = body.Peek();
    Sha256 h;
    body.Update(tag, 4);
    h.Update(tag, 4);
    const uint32_t name_bytes = static_cast<uint32_t>(GetLe(tag, 4));
    if (name_bytes == 0 || name_bytes > kMaxNameBytes) return corrupt("bad entry name length");
    Entry e;
    e.name.resize(name_bytes);
    ZOOM_RETURN_IF_ERROR(read(e.name.data(), name_bytes, &body));
    h.Update(e.name.data(), name_bytes);
    char size_bytes[8];
    ZOOM_RETURN_IF_ERROR(read(size_bytes, 8, &body));
    h.Update(size_bytes, 8);
    e.size = GetLe(size_bytes, 8);
    if (e.size > r->bytes_ - pos) return corrupt("an entry is cut short");
    e.offset = pos;
    const bool signature = e.name == kSignatureEntry;
    if (signature && e.size > kMaxSignatureBytes) return corrupt("the signature is too large");
    std::string signature_text;
    for (uint64_t left = e.size; left > 0;) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(left, chunk.size()));
      ZOOM_RETURN_IF_ERROR(read(chunk.data(), n, &body));
      h.Update(chunk.data(), n);
      if (signature) signature_text.append(chunk.data(), n);
      left -= n;
    }
    uint8_t digest[32];
    ZOOM_RETURN_IF_ERROR(read(digest, 32, &body));
    const std::array<uint8_t, 32> got = h.Final();
    if (std::memcmp(got.data(), digest, 32) != 0) {
      return corrupt(absl::StrCat("entry #", r->entries_.size(), " fails its checksum"));
    }
    if (signature) {
      std::string format, algorithm, key_id, mac;
      for (absl::string_view line : absl::StrSplit(signature_text, '\n', absl::SkipEmpty())) {
        std::pair<absl::string_view, absl::string_view> kv =
            absl::StrSplit(line, absl::MaxSplits('=', 1));
        if (kv.first == "format") format = std::string(kv.second);
        if (kv.first == "algorithm") algorithm = std::string(kv.second);
        if (kv.first == "key_id") key_id = std::string(kv.second);
        if (kv.first == "mac") mac = std::string(kv.second);
      }
      if (format != "1") return corrupt(absl::StrCat("signature format '", format, "' unknown"));
      if (algorithm != "hmac-sha256" || key_id.size() != 16 || mac.size() != 64) {
        return corrupt("the signature entry is malformed");
      }
      r->signer_key_id_ = key_id;
      r->signed_mac_ = mac;
      r->signed_digest_ = before;
    }
    r->entries_.push_back(std::move(e));
  }
  r->file_sha256_ = Sha256::Hex(file_hash.Final());
  return r;
}

const ArchiveReader::Entry* ArchiveReader::Find(std::string_view name) const {
  for (const Entry& e : entries_) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

absl::StatusOr<std::string> ArchiveReader::Read(std::string_view name, uint64_t max_bytes) const {
  const Entry* e = Find(name);
  if (e == nullptr) {
    return absl::NotFoundError(absl::StrCat("the snapshot has no '", std::string(name), "' entry"));
  }
  if (e->size > max_bytes) {
    return absl::DataLossError(absl::StrCat("snapshot entry '", e->name, "' is too large"));
  }
  std::string out;
  out.reserve(e->size);
  ZOOM_RETURN_IF_ERROR(ReadChunks(*e, 1 << 20, [&](const char* p, size_t n) {
    out.append(p, n);
    return absl::OkStatus();
  }));
  return out;
}

absl::Status ArchiveReader::ReadChunks(
    const Entry& entry, size_t chunk,
    const std::function<absl::Status(const char*, size_t)>& fn) const {
  std::vector<char> buf(std::max<size_t>(chunk, 1));
  uint64_t pos = entry.offset;
  for (uint64_t left = entry.size; left > 0;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(left, buf.size()));
    size_t done = 0;
    while (done < n) {
      const ssize_t got = ::pread(fd_, buf.data() + done, n - done, static_cast<off_t>(pos + done));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) return absl::DataLossError(absl::StrCat("snapshot ", path_, " changed while read"));
      done += static_cast<size_t>(got);
    }
    ZOOM_RETURN_IF_ERROR(fn(buf.data(), n));
    pos += n;
    left -= n;
  }
  return absl::OkStatus();
}

}  // namespace zoom::storage
