#include "tests/testing/fault_injecting_file_system.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace zoom {
namespace {

const char* OpName(FaultInjectingFileSystem::Op op) {
  switch (op) {
    case FaultInjectingFileSystem::Op::kOpen: return "open";
    case FaultInjectingFileSystem::Op::kWrite: return "write";
    case FaultInjectingFileSystem::Op::kSync: return "fdatasync";
    case FaultInjectingFileSystem::Op::kRename: return "rename";
    case FaultInjectingFileSystem::Op::kSyncDir: return "fsync directory";
    case FaultInjectingFileSystem::Op::kRemove: return "remove";
  }
  return "?";
}

absl::Status Injected(FaultInjectingFileSystem::Op op, int err, const std::string& path) {
  return FileErrorToStatus(err, absl::StrCat(OpName(op), " ", path, " (injected)"));
}

class FaultyFile final : public File {
 public:
  FaultyFile(std::unique_ptr<File> base, FaultInjectingFileSystem* fs)
      : File(base->path()), base_(std::move(base)), fs_(fs) {}

  absl::Status PRead(uint64_t offset, void* data, size_t n) const override {
    return base_->PRead(offset, data, n);
  }
  absl::Status PWrite(uint64_t offset, const void* data, size_t n) override {
    bool short_write = false;
    if (const int err = fs_->Check(FaultInjectingFileSystem::Op::kWrite, path(), &short_write)) {
      if (short_write && n > 1) base_->PWrite(offset, data, n / 2).IgnoreError();
      return Injected(FaultInjectingFileSystem::Op::kWrite, err, path());
    }
    return base_->PWrite(offset, data, n);
  }
  absl::Status Sync() override {
    if (const int err = fs_->Check(FaultInjectingFileSystem::Op::kSync, path())) {
      return Injected(FaultInjectingFileSystem::Op::kSync, err, path());
    }
    return base_->Sync();
  }
  absl::StatusOr<uint64_t> Size() const override { return base_->Size(); }
  absl::Status Close() override { return base_->Close(); }

 private:
  std::unique_ptr<File> base_;
  FaultInjectingFileSystem* fs_;
};

}  // namespace

void FaultInjectingFileSystem::Inject(const Fault& fault) {
  absl::MutexLock l(&mu_);
  faults_.push_back(Armed{fault});
}

void FaultInjectingFileSystem::Clear() {
  absl::MutexLock l(&mu_);
  faults_.clear();
}

int FaultInjectingFileSystem::fired() const {
  absl::MutexLock l(&mu_);
  return fired_;
}

int FaultInjectingFileSystem::Check(Op op, const std::string& path, bool* short_write) {
  absl::MutexLock l(&mu_);
  for (Armed& a : faults_) {
    if (a.spent || a.fault.op != op || path.find(a.fault.path_contains) == std::string::npos) {
      continue;
    }
    if (a.seen++ < a.fault.skip) continue;
    if (!a.fault.sticky) a.spent = true;
    ++fired_;
    if (short_write != nullptr) *short_write = a.fault.short_write;
    return a.fault.error;
  }
  return 0;
}

void FaultInjectingFileSystem::HoldOpens(const std::string& path_contains) {
  absl::MutexLock l(&mu_);
  hold_ = path_contains;
}

bool FaultInjectingFileSystem::AwaitHeld(absl::Duration timeout) {
  absl::MutexLock l(&mu_);
  auto held = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return held_ > 0; };
  return mu_.AwaitWithTimeout(absl::Condition(&held), timeout);
}

void FaultInjectingFileSystem::ReleaseAll() {
  absl::MutexLock l(&mu_);
  hold_.clear();
}

absl::StatusOr<std::unique_ptr<File>> FaultInjectingFileSystem::Open(const std::string& path,
                                                                     Mode mode) {
  {
    absl::MutexLock l(&mu_);
    if (!hold_.empty() && path.find(hold_) != std::string::npos) {
      ++held_;
      auto released = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return hold_.empty(); };
      mu_.Await(absl::Condition(&released));
      --held_;
    }
  }
  if (const int err = Check(Op::kOpen, path)) return Injected(Op::kOpen, err, path);
  auto file = base_->Open(path, mode);
  if (!file.ok()) return file.status();
  return std::unique_ptr<File>(std::make_unique<FaultyFile>(std::move(*file), this));
}

absl::Status FaultInjectingFileSystem::Rename(const std::string& from, const std::string& to) {
  if (const int err = Check(Op::kRename, to)) return Injected(Op::kRename, err, to);
  return base_->Rename(from, to);
}

absl::Status FaultInjectingFileSystem::SyncDir(const std::string& dir) {
  if (const int err = Check(Op::kSyncDir, dir)) return Injected(Op::kSyncDir, err, dir);
  return base_->SyncDir(dir);
}

absl::Status FaultInjectingFileSystem::Remove(const std::string& path) {
  if (const int err = Check(Op::kRemove, path)) return Injected(Op::kRemove, err, path);
  return base_->Remove(path);
}

}  // namespace zoom
