// File: tests/faults/lazyfs/lazyfs_state.cc
//
// The state of lazyfs (lazyfs_state.h). The crash model: the comment at the
// top of lazyfs.cc.

#include "tests/faults/lazyfs/lazyfs_state.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace zoom::lazyfs {

Fs* g_fs = nullptr;

std::string TrashPath(const std::string& name) {
  return std::string(kTrashName) + "/" + name;
}

// ---- File data -------------------------------------------------------------

namespace {

// Logical bytes [off, off + len) outside the dirty pages.
void ReadBase(const FileState& f, char* dst, uint64_t off, uint64_t len) {
  uint64_t n = 0;
  const uint64_t want = off < f.valid ? std::min(len, f.valid - off) : 0;
  while (n < want) {
    const ssize_t r = pread(f.fd, dst + n, want - n, off + n);
    if (r <= 0) break;
    n += r;
  }
  memset(dst + n, 0, len - n);
}

void Touch(FileState& f) {
  f.dirty = true;
  clock_gettime(CLOCK_REALTIME, &f.mtime);
}

// A power failure: back to what the backing file holds.
void Drop(FileState& f) {
  struct stat st;
  f.pages.clear();
  f.dirty = false;
  f.size = f.valid = fstat(f.fd, &st) == 0 ? st.st_size : 0;
}

}  // namespace

size_t ReadData(const FileState& f, char* dst, uint64_t off, size_t len) {
  if (off >= f.size) return 0;
  len = std::min<uint64_t>(len, f.size - off);
  for (uint64_t pos = off; pos < off + len;) {
    const uint64_t in = pos % kPage;
    const uint64_t n = std::min(kPage - in, off + len - pos);
    auto it = f.pages.find(pos / kPage);
    if (it != f.pages.end()) {
      memcpy(dst + (pos - off), it->second.data() + in, n);
    } else {
      ReadBase(f, dst + (pos - off), pos, n);
    }
    pos += n;
  }
  return len;
}

void WriteData(FileState& f, const char* src, uint64_t off, size_t len) {
  for (uint64_t pos = off; pos < off + len;) {
    const uint64_t idx = pos / kPage, in = pos % kPage;
    const uint64_t n = std::min(kPage - in, off + len - pos);
    auto [it, added] = f.pages.try_emplace(idx);
    if (added) {  // valid <= size: the base is the page's whole content
      it->second.resize(kPage);
      ReadBase(f, it->second.data(), idx * kPage, kPage);
    }
    memcpy(it->second.data() + in, src + (pos - off), n);
    pos += n;
  }
  f.size = std::max<uint64_t>(f.size, off + len);
  Touch(f);
}

void TruncateData(FileState& f, uint64_t size) {
  if (size == f.size) return;
  if (size < f.size) {
    f.pages.erase(f.pages.lower_bound((size + kPage - 1) / kPage),
                  f.pages.end());
    auto it = f.pages.find(size / kPage);
    if (size % kPage != 0 && it != f.pages.end()) {
      memset(it->second.data() + size % kPage, 0, kPage - size % kPage);
    }
    f.valid = std::min(f.valid, size);
  }
  f.size = size;
  Touch(f);
}

// Writes the file's cache to the backing file: it becomes durable.
int Flush(FileState& f) {
  if (!f.dirty) return 0;
  if (ftruncate(f.fd, f.valid) != 0) return -errno;
  for (const auto& [idx, page] : f.pages) {
    const size_t n = std::min(kPage, f.size - idx * kPage);
    if (pwrite(f.fd, page.data(), n, idx * kPage) != static_cast<ssize_t>(n)) {
      return errno != 0 ? -errno : -EIO;
    }
  }
  if (ftruncate(f.fd, f.size) != 0) return -errno;
  f.pages.clear();
  f.valid = f.size;
  f.dirty = false;
  return 0;
}

// ---- Cached files ----------------------------------------------------------

// Forgets `f` if nothing can reach its unsynced state any more.
void ForgetIfIdle(const std::shared_ptr<FileState>& f) {
  struct stat st;
  const bool gone = fstat(f->fd, &st) != 0 || st.st_nlink == 0;
  auto it = g_fs->files.find(f->ino);
  if (f->handles == 0 && (!f->dirty || gone) && it != g_fs->files.end() &&
      it->second == f) {
    g_fs->files.erase(it);
  }
}

// The state of the backing regular file `fd` (taking the descriptor).
std::shared_ptr<FileState> Adopt(int fd) {
  struct stat st;
  if (fstat(fd, &st) != 0) st = {};
  auto f = std::make_shared<FileState>();
  f->fd = fd;
  f->ino = st.st_ino;
  f->size = f->valid = st.st_size;
  g_fs->files[st.st_ino] = f;
  return f;
}

// The state of the regular file at `rel`, loaded if needed.
std::shared_ptr<FileState> Lookup(const std::string& rel, int* err) {
  struct stat st;
  if (fstatat(g_fs->root, rel.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    *err = -errno;
    return nullptr;
  }
  if (!S_ISREG(st.st_mode)) {
    *err = S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
    return nullptr;
  }
  if (auto it = g_fs->files.find(st.st_ino); it != g_fs->files.end()) {
    return it->second;
  }
  const int flags = O_CLOEXEC | O_NOFOLLOW;
  int fd = openat(g_fs->root, rel.c_str(), O_RDWR | flags);
  if (fd < 0 && (errno == EACCES || errno == EPERM || errno == EROFS)) {
    fd = openat(g_fs->root, rel.c_str(), O_RDONLY | flags);
  }
  if (fd < 0) {
    *err = -errno;
    return nullptr;
  }
  return Adopt(fd);
}

// ---- The namespace journal -------------------------------------------------

namespace {

void Rollback() {
  const int root = g_fs->root;
  for (auto e = g_fs->journal.rbegin(); e != g_fs->journal.rend(); ++e) {
    const char* path = e->path.c_str();
    int r = 0;
    if (e->kind == JournalEntry::kCreated || e->kind == JournalEntry::kMkdir) {
      r = unlinkat(root, path,
                   e->kind == JournalEntry::kMkdir ? AT_REMOVEDIR : 0);
    } else {
      const std::string now =
          e->kind == JournalEntry::kTrashed ? TrashPath(e->other) : e->other;
      r = renameat(root, now.c_str(), root, path);
    }
    if (r != 0) fprintf(stderr, "lazyfs: rollback of %s: %m\n", path);
  }
  g_fs->journal.clear();
}

}  // namespace

// Makes every journaled change durable: the trash is emptied.
void Commit() {
  for (const JournalEntry& e : g_fs->journal) {
    if (e.kind != JournalEntry::kTrashed) continue;
    const std::string t = TrashPath(e.other);
    if (unlinkat(g_fs->root, t.c_str(), 0) != 0 && errno == EISDIR) {
      unlinkat(g_fs->root, t.c_str(), AT_REMOVEDIR);
    }
  }
  g_fs->journal.clear();
}

// Moves `rel` to the trash, undoably (unlink, rmdir, a replaced target).
int Trash(const std::string& rel) {
  const std::string name = std::to_string(++g_fs->trash_seq);
  if (renameat(g_fs->root, rel.c_str(), g_fs->root, TrashPath(name).c_str()) !=
      0) {
    return -errno;
  }
  g_fs->journal.push_back({JournalEntry::kTrashed, rel, name});
  return 0;
}

bool IsEmptyDir(const std::string& rel) {
  const int fd =
      openat(g_fs->root, rel.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR* d = fd < 0 ? nullptr : fdopendir(fd);
  if (d == nullptr) return false;
  int entries = 0;  // "." and ".."
  while (readdir(d) != nullptr && entries <= 2) ++entries;
  closedir(d);
  return entries <= 2;
}

// ---- Control ---------------------------------------------------------------

namespace {

void ForgetAllIdle() {
  std::vector<std::shared_ptr<FileState>> all;
  for (const auto& [ino, f] : g_fs->files) all.push_back(f);
  for (const auto& f : all) ForgetIfIdle(f);
}

}  // namespace

void SyncAll() {
  for (const auto& [ino, f] : g_fs->files) {
    if (const int r = Flush(*f); r != 0) {
      fprintf(stderr, "lazyfs: sync of inode %lu: %s\n",
              static_cast<unsigned long>(ino), strerror(-r));
    }
  }
  Commit();
  ForgetAllIdle();
  ++g_fs->syncs;
}

void Crash() {
  Rollback();
  for (const auto& [ino, f] : g_fs->files) Drop(*f);
  ForgetAllIdle();
  ++g_fs->crashes;
}

std::string Status() {
  size_t dirty = 0, pages = 0;
  for (const auto& [ino, f] : g_fs->files) {
    dirty += f->dirty ? 1 : 0;
    pages += f->pages.size();
  }
  char s[256];
  snprintf(s, sizeof(s),
           "dirty_files %zu\ndirty_pages %zu\njournal_entries %zu\n"
           "crashes %lu\nsyncs %lu\n",
           dirty, pages, g_fs->journal.size(), g_fs->crashes, g_fs->syncs);
  return s;
}

int Control(const char* buf, size_t len) {
  std::string cmd(buf, len);
  cmd.erase(cmd.find_last_not_of(" \t\r\n") + 1);
  if (cmd == "crash") {
    Crash();
  } else if (cmd == "sync") {
    SyncAll();
  } else {
    fprintf(stderr, "lazyfs: unknown command '%s' (crash | sync)\n",
            cmd.c_str());
    return -EINVAL;
  }
  return static_cast<int>(len);
}

}  // namespace zoom::lazyfs
