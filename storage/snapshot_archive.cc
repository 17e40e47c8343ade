#include "storage/snapshot_archive.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
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
std::string Sha256::Hex(const std::array<uint8_t, 32>& digest) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (uint8_t b : digest) {
    out += kHex[b >> 4];
    out += kHex[b & 0xf];
  }
  return out;
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
    for (uint64_t left = e.size; left > 0;) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(left, chunk.size()));
      ZOOM_RETURN_IF_ERROR(read(chunk.data(), n, &body));
      h.Update(chunk.data(), n);
      left -= n;
    }
    uint8_t digest[32];
    ZOOM_RETURN_IF_ERROR(read(digest, 32, &body));
    const std::array<uint8_t, 32> got = h.Final();
    if (std::memcmp(got.data(), digest, 32) != 0) {
      return corrupt(absl::StrCat("entry #", r->entries_.size(), " fails its checksum"));
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
