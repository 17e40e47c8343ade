// File: tests/testing/fault_injecting_file_system.h
//
// FaultInjectingFileSystem: a FileSystem over another that fails chosen
// operations, for tests of every write path (the failures a disk gives:
// EIO, ENOSPC, a write cut short). A fault names the operation, a path
// substring and how many matching operations pass before it fires; it fires
// once, or on every later match when sticky. A short write writes the
// first half of the bytes, then fails with the fault's errno.
//
// Thread safety: all methods are thread-safe.
#ifndef ZOOM_TESTS_TESTING_FAULT_INJECTING_FILE_SYSTEM_H_
#define ZOOM_TESTS_TESTING_FAULT_INJECTING_FILE_SYSTEM_H_

#include <cerrno>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/file_system.h"

namespace zoom {

class FaultInjectingFileSystem final : public FileSystem {
 public:
  enum class Op { kOpen, kWrite, kSync, kRename, kSyncDir, kRemove };
  struct Fault {
    Op op = Op::kWrite;
    std::string path_contains;  // "" matches every path
    int skip = 0;               // matching operations that pass first
    int error = EIO;
    bool short_write = false;   // kWrite: half the bytes land, then `error`
    bool sticky = false;        // fire on every match after the first
  };

  explicit FaultInjectingFileSystem(FileSystem* base = FileSystem::Posix()) : base_(base) {}

  void Inject(const Fault& fault);
  void Clear();
  // Opens of paths containing `path_contains` wait until Release() (to
  // hold a writer at a chosen file, deterministically); AwaitHeld waits up
  // to `timeout` until one is waiting (true) and ReleaseAll lets them go.
  void HoldOpens(const std::string& path_contains);
  bool AwaitHeld(absl::Duration timeout);
  void ReleaseAll();
  // How many operations failed because of a fault.
  int fired() const;

  absl::StatusOr<std::unique_ptr<File>> Open(const std::string& path, Mode mode) override;
  absl::Status Rename(const std::string& from, const std::string& to) override;
  absl::Status SyncDir(const std::string& dir) override;
  absl::Status Remove(const std::string& path) override;

  // The fault for `op` on `path`, if one fires now (its errno), else 0;
  // *short_write tells a write to land half first. (For its files.)
  int Check(Op op, const std::string& path, bool* short_write = nullptr);

 private:
  struct Armed {
    Fault fault;
    int seen = 0;
    bool spent = false;
  };
  FileSystem* const base_;
  mutable absl::Mutex mu_;
  std::vector<Armed> faults_ ABSL_GUARDED_BY(mu_);
  int fired_ ABSL_GUARDED_BY(mu_) = 0;
  std::string hold_ ABSL_GUARDED_BY(mu_);  // "": none held
  int held_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace zoom

#endif  // ZOOM_TESTS_TESTING_FAULT_INJECTING_FILE_SYSTEM_H_
