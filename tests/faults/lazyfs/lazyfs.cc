// lazyfs: a FUSE file system that loses what was not synced, as a power
// failure does (the idea of Jepsen's LazyFS), for the fault harness of issue
// 47 (tests/faults/README.md). A passthrough over BACKING_DIR, which always
// holds the durable state, "the disk":
//
//   lazyfs BACKING_DIR MOUNTPOINT [-f] [-d] [-o allow_other,...]
//
// Crash model:
// - File data: writes, truncations and fallocate go to an in-memory cache of
//   the file (4 KiB dirty pages, a logical size). fsync or fdatasync of the
//   file writes them to the backing file (pages, then length); nothing else
//   does, except "sync" and a clean unmount.
// - The namespace (create, link, mkdir, unlink, rmdir, rename, including
//   over an existing file or empty directory) is changed in the backing
//   directory at once, each change journaled with its undo; removed and
//   replaced entries wait in BACKING_DIR/.lazyfs-trash. Any fsync, fdatasync
//   or fsync of a directory commits the whole journal, as ext4's and XFS's
//   log do (POSIX asks for an fsync of the parent directory: this keeps a
//   change a little earlier than that, never later).
// - A power failure ("crash") undoes the uncommitted journal, newest first,
//   then drops every dirty page: each file's content and length are what
//   its last fsync left. A file created since the last fsync of anything is
//   gone; one whose creation was committed but whose data never was is
//   empty; a rename since the last fsync is undone (the old target is back
//   with its synced content); so are unlink, mkdir, rmdir.
// - Not rolled back: chmod, chown, utimens. Nothing is fsync'd on the backing
//   file system: the simulated crash is the only one modelled.
//
// Control: the file /.lazyfs-ctl (hidden from readdir). Writing "crash" or
// "sync" returns when done; after a crash the mount shows what a reboot
// would (kill the programs using it first: pages they mmap'd may stay).
// Reading it gives counters. A clean unmount (fusermount3 -u) syncs all.
//
// O_DIRECT opens: the backing file is opened without O_DIRECT (tmpfs refuses
// it; the cache is in memory anyway) and the handle gets FUSE's direct_io, so
// its I/O skips the kernel page cache, at any alignment. Other handles use
// the kernel page cache, dropped at each open, so mmap works (msync is
// fsync). No lock handlers: the kernel keeps fcntl and flock locks itself,
// exact between processes of this machine. No symlinks, xattrs or mknod.
//
// The high-level libfuse API: paths map directly onto the backing directory,
// the cache is keyed by backing inode (renames and hard links keep it), and
// libfuse does the lookups and forgets.
//
// The state (the page cache, the journal, the control commands) is in
// lazyfs_state.h; this file holds the FUSE operations and main.

#define FUSE_USE_VERSION 31

#include <dirent.h>
#include <fcntl.h>
#include <fuse.h>
#include <linux/falloc.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>

#include "tests/faults/lazyfs/lazyfs_state.h"

namespace zoom::lazyfs {
namespace {

struct Handle {
  std::shared_ptr<FileState> file;  // null: the control file
};

int Errno(int r) { return r == 0 ? 0 : -errno; }

// The backing path of a mount path ("/" -> "."); "" for the reserved names.
std::string Rel(const char* path) {
  if (path == nullptr) return "";
  std::string p = path[1] != '\0' ? path + 1 : ".";
  const std::string trash = kTrashName;
  if (p == trash || p.rfind(trash + "/", 0) == 0 || p == kCtlName) return "";
  return p;
}
bool IsCtl(const char* path) {
  return path != nullptr && strcmp(path + 1, kCtlName) == 0;
}
Handle* HandleOf(fuse_file_info* fi) {
  return fi == nullptr ? nullptr : reinterpret_cast<Handle*>(fi->fh);
}

// New entries belong to the caller (with -o allow_other, not only root).
void ChownToCaller(const std::string& rel) {
  if (getuid() != 0) return;
  const fuse_context* c = fuse_get_context();
  fchownat(g_fs->root, rel.c_str(), c->uid, c->gid, AT_SYMLINK_NOFOLLOW);
}

// ---- FUSE operations -------------------------------------------------------

int GetAttr(const char* path, struct stat* st, fuse_file_info* fi) {
  std::lock_guard lock(g_fs->mu);
  const Handle* h = HandleOf(fi);
  std::shared_ptr<FileState> f = h != nullptr ? h->file : nullptr;
  if (IsCtl(path) || (h != nullptr && f == nullptr)) {
    *st = {};
    st->st_mode = S_IFREG | 0666;
    st->st_nlink = 1;
    st->st_uid = getuid();
    st->st_gid = getgid();
    return 0;
  }
  if (f != nullptr) {
    if (fstat(f->fd, st) != 0) return -errno;
  } else {
    const std::string rel = Rel(path);
    if (rel.empty()) return -ENOENT;
    if (fstatat(g_fs->root, rel.c_str(), st, AT_SYMLINK_NOFOLLOW) != 0) {
      return -errno;
    }
    auto it = g_fs->files.find(st->st_ino);
    if (S_ISREG(st->st_mode) && it != g_fs->files.end()) f = it->second;
  }
  if (f != nullptr) {
    st->st_size = f->size;
    st->st_blocks = (f->size + 511) / 512;
    if (f->dirty) st->st_mtim = st->st_ctim = f->mtime;
  }
  return 0;
}

int Attach(std::shared_ptr<FileState> f, fuse_file_info* fi) {
  if ((fi->flags & O_TRUNC) != 0) TruncateData(*f, 0);
  if ((fi->flags & O_DIRECT) != 0) fi->direct_io = 1;  // no kernel cache
  ++f->handles;
  fi->fh = reinterpret_cast<uint64_t>(new Handle{std::move(f)});
  return 0;
}

int Open(const char* path, fuse_file_info* fi) {
  std::lock_guard lock(g_fs->mu);
  if (IsCtl(path)) {
    fi->direct_io = 1;
    fi->fh = reinterpret_cast<uint64_t>(new Handle{});
    return 0;
  }
  const std::string rel = Rel(path);
  if (rel.empty()) return -ENOENT;
  int err = 0;
  std::shared_ptr<FileState> f = Lookup(rel, &err);
  return f == nullptr ? err : Attach(std::move(f), fi);
}

int Create(const char* path, mode_t mode, fuse_file_info* fi) {
  std::lock_guard lock(g_fs->mu);
  const std::string rel = Rel(path);
  if (rel.empty()) return -EPERM;
  const int fd = openat(g_fs->root, rel.c_str(),
                        O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd >= 0) {
    g_fs->journal.push_back({JournalEntry::kCreated, rel, ""});
    ChownToCaller(rel);
    return Attach(Adopt(fd), fi);
  }
  if (errno != EEXIST || (fi->flags & O_EXCL) != 0) return -errno;
  int err = 0;
  std::shared_ptr<FileState> f = Lookup(rel, &err);
  return f == nullptr ? err : Attach(std::move(f), fi);
}

int Read(const char*, char* buf, size_t size, off_t off, fuse_file_info* fi) {
  std::lock_guard lock(g_fs->mu);
  const Handle* h = HandleOf(fi);
  if (h->file != nullptr) return ReadData(*h->file, buf, off, size);
  const std::string s = Status();
  if (static_cast<size_t>(off) >= s.size()) return 0;
  const size_t n = std::min(size, s.size() - off);
  memcpy(buf, s.data() + off, n);
  return static_cast<int>(n);
}

int Write(const char*, const char* buf, size_t size, off_t off,
          fuse_file_info* fi) {
  std::lock_guard lock(g_fs->mu);
  const Handle* h = HandleOf(fi);
  if (h->file == nullptr) return Control(buf, size);
  WriteData(*h->file, buf, off, size);
  return static_cast<int>(size);
}

int Truncate(const char* path, off_t size, fuse_file_info* fi) {
  std::lock_guard lock(g_fs->mu);
  const Handle* h = HandleOf(fi);
  if (IsCtl(path) || (h != nullptr && h->file == nullptr)) return 0;
  int err = 0;
  std::shared_ptr<FileState> f =
      h != nullptr ? h->file : Lookup(Rel(path), &err);
  if (f == nullptr) return err;
  TruncateData(*f, size);
  ForgetIfIdle(f);
  return 0;
}

int Fallocate(const char*, int mode, off_t off, off_t len, fuse_file_info* fi) {
  std::lock_guard lock(g_fs->mu);
  FileState* f = HandleOf(fi)->file.get();
  if (f == nullptr || (mode & ~FALLOC_FL_KEEP_SIZE) != 0) return -EOPNOTSUPP;
  const uint64_t end = off + len;
  if ((mode & FALLOC_FL_KEEP_SIZE) == 0 && end > f->size) {
    TruncateData(*f, end);
  }
  return 0;
}

int Fsync(const char*, int, fuse_file_info* fi) {  // fsync and fdatasync
  std::lock_guard lock(g_fs->mu);
  FileState* f = HandleOf(fi)->file.get();
  if (f == nullptr) return 0;
  if (const int r = Flush(*f); r != 0) return r;
  Commit();
  return 0;
}

int FsyncDir(const char*, int, fuse_file_info*) {
  std::lock_guard lock(g_fs->mu);
  Commit();
  return 0;
}

int Release(const char*, fuse_file_info* fi) {
  std::lock_guard lock(g_fs->mu);
  std::unique_ptr<Handle> h(HandleOf(fi));
  if (h->file != nullptr) {
    --h->file->handles;
    ForgetIfIdle(h->file);
  }
  return 0;
}

int Mkdir(const char* path, mode_t mode) {
  std::lock_guard lock(g_fs->mu);
  const std::string rel = Rel(path);
  if (rel.empty()) return -EPERM;
  if (mkdirat(g_fs->root, rel.c_str(), mode) != 0) return -errno;
  g_fs->journal.push_back({JournalEntry::kMkdir, rel, ""});
  ChownToCaller(rel);
  return 0;
}

// unlink (dir = false) and rmdir (dir = true).
int Remove(const char* path, bool dir) {
  std::lock_guard lock(g_fs->mu);
  const std::string rel = Rel(path);
  if (rel.empty() || rel == ".") return IsCtl(path) ? -EPERM : -EBUSY;
  struct stat st;
  if (fstatat(g_fs->root, rel.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return -errno;
  }
  if (S_ISDIR(st.st_mode) != dir) return dir ? -ENOTDIR : -EISDIR;
  if (dir && !IsEmptyDir(rel)) return -ENOTEMPTY;
  return Trash(rel);
}
int Unlink(const char* path) { return Remove(path, false); }
int Rmdir(const char* path) { return Remove(path, true); }

int Rename(const char* from, const char* to, unsigned int flags) {
  std::lock_guard lock(g_fs->mu);
  if ((flags & ~RENAME_NOREPLACE) != 0) return -EINVAL;  // no EXCHANGE
  const std::string src = Rel(from), dst = Rel(to);
  if (src.empty() || dst.empty()) return -EPERM;
  struct stat sf, sd;
  if (fstatat(g_fs->root, src.c_str(), &sf, AT_SYMLINK_NOFOLLOW) != 0) {
    return -errno;
  }
  const bool replace =
      fstatat(g_fs->root, dst.c_str(), &sd, AT_SYMLINK_NOFOLLOW) == 0;
  if (replace) {
    if ((flags & RENAME_NOREPLACE) != 0) return -EEXIST;
    if (sf.st_ino == sd.st_ino) return 0;  // the same file: nothing to do
    if (S_ISDIR(sf.st_mode) && !S_ISDIR(sd.st_mode)) return -ENOTDIR;
    if (!S_ISDIR(sf.st_mode) && S_ISDIR(sd.st_mode)) return -EISDIR;
    if (S_ISDIR(sd.st_mode) && !IsEmptyDir(dst)) return -ENOTEMPTY;
    if (const int r = Trash(dst); r != 0) return r;
  }
  if (renameat(g_fs->root, src.c_str(), g_fs->root, dst.c_str()) != 0) {
    const int err = errno;
    if (replace) {  // put the target back
      renameat(g_fs->root, TrashPath(g_fs->journal.back().other).c_str(),
               g_fs->root, dst.c_str());
      g_fs->journal.pop_back();
    }
    return -err;
  }
  g_fs->journal.push_back({JournalEntry::kRenamed, src, dst});
  return 0;
}

int Link(const char* from, const char* to) {
  std::lock_guard lock(g_fs->mu);
  const std::string src = Rel(from), dst = Rel(to);
  if (src.empty() || dst.empty()) return -EPERM;
  if (linkat(g_fs->root, src.c_str(), g_fs->root, dst.c_str(), 0) != 0) {
    return -errno;
  }
  g_fs->journal.push_back({JournalEntry::kCreated, dst, ""});
  return 0;
}

int ReadDir(const char* path, void* buf, fuse_fill_dir_t fill, off_t,
            fuse_file_info*, fuse_readdir_flags) {
  std::lock_guard lock(g_fs->mu);
  const std::string rel = Rel(path);
  if (rel.empty()) return -ENOENT;
  const int fd =
      openat(g_fs->root, rel.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR* d = fd < 0 ? nullptr : fdopendir(fd);
  if (d == nullptr) return -errno;
  while (const dirent* e = readdir(d)) {
    if (rel == "." && strcmp(e->d_name, kTrashName) == 0) continue;
    struct stat st = {};
    st.st_ino = e->d_ino;
    st.st_mode = DTTOIF(e->d_type);
    fill(buf, e->d_name, &st, 0, static_cast<fuse_fill_dir_flags>(0));
  }
  closedir(d);
  return 0;
}

// chmod, chown, utimens: by path (libfuse gives it for open files too),
// applied at once, not rolled back.
int Chmod(const char* path, mode_t mode, fuse_file_info*) {
  std::lock_guard lock(g_fs->mu);
  const std::string rel = Rel(path);
  if (rel.empty()) return IsCtl(path) ? 0 : -ENOENT;
  return Errno(fchmodat(g_fs->root, rel.c_str(), mode, 0));
}

int Chown(const char* path, uid_t uid, gid_t gid, fuse_file_info*) {
  std::lock_guard lock(g_fs->mu);
  const std::string rel = Rel(path);
  if (rel.empty()) return IsCtl(path) ? 0 : -ENOENT;
  return Errno(
      fchownat(g_fs->root, rel.c_str(), uid, gid, AT_SYMLINK_NOFOLLOW));
}

int Utimens(const char* path, const timespec tv[2], fuse_file_info*) {
  std::lock_guard lock(g_fs->mu);
  const std::string rel = Rel(path);
  if (rel.empty()) return IsCtl(path) ? 0 : -ENOENT;
  return Errno(utimensat(g_fs->root, rel.c_str(), tv, AT_SYMLINK_NOFOLLOW));
}

int StatFs(const char*, struct statvfs* st) {
  return Errno(fstatvfs(g_fs->root, st));
}

void* Init(fuse_conn_info* conn, fuse_config* cfg) {
  // Every lookup and stat asks this process: a crash changes the answers.
  cfg->entry_timeout = cfg->attr_timeout = cfg->negative_timeout = 0;
  cfg->use_ino = 1;      // st_ino: the backing inode
  cfg->hard_remove = 1;  // no .fuse_hidden files: unlink is journaled
  cfg->kernel_cache = 0;
  conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;  // every write reaches this cache
  return nullptr;
}

void Destroy(void*) {  // a clean unmount: nothing is lost
  std::lock_guard lock(g_fs->mu);
  SyncAll();
}

int TakeBackingDir(void* data, const char* arg, int key, fuse_args*) {
  auto* backing = static_cast<std::string*>(data);
  if (key != FUSE_OPT_KEY_NONOPT || !backing->empty()) return 1;  // libfuse's
  *backing = arg;
  return 0;
}

int Main(int argc, char** argv) {
  fuse_args args = FUSE_ARGS_INIT(argc, argv);
  std::string backing;
  if (fuse_opt_parse(&args, &backing, nullptr, TakeBackingDir) != 0) return 2;
  if (backing.empty()) {
    fprintf(stderr,
            "usage: lazyfs BACKING_DIR MOUNTPOINT [-f] [-d] [-o OPTIONS]\n"
            "  writes stay in memory until fsync; write \"crash\" or \"sync\""
            " to MOUNTPOINT/%s\n",
            kCtlName);
    return 2;
  }
  umask(0);  // the kernel already applied the caller's umask
  g_fs = new Fs;
  g_fs->root = open(backing.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  // The trash of a lazyfs that was killed: its removals are committed.
  std::error_code ec;
  std::filesystem::remove_all(std::filesystem::path(backing) / kTrashName, ec);
  if (g_fs->root < 0 || mkdirat(g_fs->root, kTrashName, 0700) != 0) {
    fprintf(stderr, "lazyfs: %s: %s\n", backing.c_str(), strerror(errno));
    return 1;
  }
  fuse_operations ops = {};
  ops.getattr = GetAttr;
  ops.mkdir = Mkdir;
  ops.unlink = Unlink;
  ops.rmdir = Rmdir;
  ops.rename = Rename;
  ops.link = Link;
  ops.chmod = Chmod;
  ops.chown = Chown;
  ops.truncate = Truncate;
  ops.open = Open;
  ops.read = Read;
  ops.write = Write;
  ops.statfs = StatFs;
  ops.release = Release;
  ops.fsync = Fsync;
  ops.readdir = ReadDir;
  ops.fsyncdir = FsyncDir;
  ops.init = Init;
  ops.destroy = Destroy;
  ops.create = Create;
  ops.utimens = Utimens;
  ops.fallocate = Fallocate;
  fuse_opt_add_arg(&args, "-odefault_permissions,fsname=lazyfs,subtype=lazyfs");
  const int rc = fuse_main(args.argc, args.argv, &ops, nullptr);
  fuse_opt_free_args(&args);
  return rc;
}

}  // namespace
}  // namespace zoom::lazyfs

int main(int argc, char** argv) { return zoom::lazyfs::Main(argc, argv); }
