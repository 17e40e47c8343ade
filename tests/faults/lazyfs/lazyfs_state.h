// File: tests/faults/lazyfs/lazyfs_state.h
//
// The state of lazyfs, without FUSE: the per-file page cache of unsynced
// data, the journal of namespace changes since the last commit, and the
// control commands (sync, crash, status). The crash model is in the comment
// at the top of lazyfs.cc; lazyfs.cc maps the FUSE operations onto this.
//
// Thread safety: one lock, g_fs->mu, guards everything here (g_fs itself,
// every FileState, the journal, the counters). Every function below except
// TrashPath must be called with g_fs->mu held and g_fs set; none takes or
// releases it. Paths ("rel") are relative to the backing directory
// g_fs->root; none of them may be a reserved name (kCtlName, kTrashName).
#ifndef ZOOM_TESTS_FAULTS_LAZYFS_LAZYFS_STATE_H_
#define ZOOM_TESTS_FAULTS_LAZYFS_LAZYFS_STATE_H_

#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace zoom::lazyfs {

inline constexpr uint64_t kPage = 4096;
inline constexpr char kCtlName[] = ".lazyfs-ctl";
inline constexpr char kTrashName[] = ".lazyfs-trash";

// A regular file of the backing directory as the mount shows it.
struct FileState {
  ~FileState() { close(fd); }
  int fd = -1;         // the backing file (O_RDWR if allowed); pins the inode
  ino_t ino = 0;       // the key of Fs::files
  uint64_t size = 0;   // the logical size
  uint64_t valid = 0;  // backing bytes [0, valid) are content; above: zeros
  std::map<uint64_t, std::vector<char>> pages;  // dirty, by index; 0s past size
  bool dirty = false;
  timespec mtime{};  // of the last unsynced change
  int handles = 0;   // open file handles
};

// An undoable change of the backing namespace since the last commit.
struct JournalEntry {
  enum Kind { kCreated, kMkdir, kTrashed, kRenamed } kind;
  std::string path;   // the new entry; kTrashed: the old name; kRenamed: from
  std::string other;  // kTrashed: the name in the trash; kRenamed: to
};

struct Fs {
  std::mutex mu;  // every operation holds it
  int root = -1;  // the backing directory
  std::unordered_map<ino_t, std::shared_ptr<FileState>> files;
  std::vector<JournalEntry> journal;
  uint64_t trash_seq = 0;
  uint64_t crashes = 0;
  uint64_t syncs = 0;
};
// The one file system of the process: set by main before the mount, never
// freed.
extern Fs* g_fs;

// The backing path of the trash entry `name`. Needs no lock.
std::string TrashPath(const std::string& name);

// ---- File data -------------------------------------------------------------
// The cache of one file. None of these fails or touches the backing file,
// except Flush.

// Copies the logical bytes [off, off + len) of `f`, clipped to its size, to
// `dst`: from the dirty pages, else the backing file below `valid`, else
// zeros (a short read of the backing file reads as zeros). Returns the
// number of bytes copied: 0 at or past the end.
size_t ReadData(const FileState& f, char* dst, uint64_t off, size_t len);

// Writes `src` to the logical bytes [off, off + len) of `f`, in dirty pages
// only; grows the size to off + len if smaller; marks `f` dirty (mtime:
// now).
void WriteData(FileState& f, const char* src, uint64_t off, size_t len);

// Sets the logical size of `f`; bytes past a smaller size are gone (they read
// as zeros if the file grows again). A new size marks `f` dirty (mtime: now);
// the same size changes nothing.
void TruncateData(FileState& f, uint64_t size);

// Writes the file's cache to the backing file: it becomes durable (pages,
// then the length; nothing is fsync'd on the backing file system). Returns 0,
// or -errno with the cache kept (still dirty; the backing file may hold part
// of it). A clean `f` is left alone.
int Flush(FileState& f);

// ---- Cached files ----------------------------------------------------------

// Forgets `f` (removes it from g_fs->files, if it is still there for its
// inode) if nothing can reach its unsynced state any more: no open handle,
// and clean or with no link left in the backing directory. `f` stays valid
// while the caller holds it.
void ForgetIfIdle(const std::shared_ptr<FileState>& f);

// The state of the backing regular file `fd` (taking the descriptor): clean,
// with the backing file's size, registered in g_fs->files under its inode
// (replacing any state there).
std::shared_ptr<FileState> Adopt(int fd);

// The state of the regular file at `rel` (symlinks not followed): the
// registered one for its inode, else loaded by Adopt from a new descriptor
// (O_RDWR, or O_RDONLY where writing is not allowed). On failure returns
// null and sets *err to -errno (-EISDIR: a directory, -EINVAL: another
// non-regular file).
std::shared_ptr<FileState> Lookup(const std::string& rel, int* err);

// ---- The namespace journal -------------------------------------------------
// The namespace operations change the backing directory at once and push
// their undo onto g_fs->journal (kCreated, kMkdir, kRenamed directly;
// removals through Trash). A crash undoes it, newest first.

// Makes every journaled change durable: the trash is emptied (errors are
// ignored) and the journal cleared.
void Commit();

// Moves `rel` to the trash, undoably (unlink, rmdir, a replaced target): on
// success journals a kTrashed entry and returns 0 (to take it back at once,
// rename TrashPath(g_fs->journal.back().other) to `rel` and pop the entry);
// on failure returns -errno and journals nothing.
int Trash(const std::string& rel);

// Whether `rel` is a directory that can be opened and holds only "." and
// "..".
bool IsEmptyDir(const std::string& rel);

// ---- Control ---------------------------------------------------------------

// Flushes every cached file (a failure is logged to stderr, not returned:
// that file stays dirty), commits the journal, forgets the idle files and
// counts a sync. What "sync" and a clean unmount do.
void SyncAll();

// A power failure: undoes the uncommitted journal, newest first (a failed
// undo is logged to stderr), drops every file's cache (content and length
// are the backing file's again), forgets the idle files and counts a crash.
void Crash();

// The counters, as the control file reads: "dirty_files N\ndirty_pages N\n
// journal_entries N\ncrashes N\nsyncs N\n".
std::string Status();

// Runs the command written to the control file, `buf` (trailing whitespace
// ignored): "crash" (Crash) or "sync" (SyncAll). Returns `len` when done;
// -EINVAL (logged to stderr) for any other command.
int Control(const char* buf, size_t len);

}  // namespace zoom::lazyfs

#endif  // ZOOM_TESTS_FAULTS_LAZYFS_LAZYFS_STATE_H_
