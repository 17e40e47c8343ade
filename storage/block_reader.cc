#include "storage/block_reader.h"

#include <fstream>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "storage/pread_block_reader.h"

#ifdef ZOOM_HAVE_LIBURING
#include "storage/uring_block_reader.h"
#endif

namespace zoom::storage {

absl::StatusOr<IoBackend> ParseIoBackend(std::string_view name) {
  const std::string lower =
      absl::AsciiStrToLower(absl::string_view(name.data(), name.size()));
  if (lower == "auto") return IoBackend::kAuto;
  if (lower == "io_uring" || lower == "uring") return IoBackend::kIoUring;
  if (lower == "pread") return IoBackend::kPread;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown I/O backend '", lower, "': use auto, io_uring or pread"));
}

const char* IoBackendName(IoBackend backend) {
  switch (backend) {
    case IoBackend::kAuto:
      return "auto";
    case IoBackend::kIoUring:
      return "io_uring";
    case IoBackend::kPread:
      return "pread";
  }
  return "unknown";
}

namespace {

// The default Submit: the reads happen in Wait().
class DeferredReads final : public PendingReads {
 public:
  DeferredReads(const BlockReader* reader, absl::Span<ReadRequest> requests)
      : reader_(reader), requests_(requests) {}
  absl::Status Wait() override {
    if (!done_) {
      done_ = true;
      status_ = reader_->ReadBatch(requests_);
    }
    return status_;
  }

 private:
  const BlockReader* reader_;
  absl::Span<ReadRequest> requests_;
  bool done_ = false;
  absl::Status status_;
};

}  // namespace

std::unique_ptr<PendingReads> BlockReader::Submit(absl::Span<ReadRequest> requests) const {
  return std::make_unique<DeferredReads>(this, requests);
}

absl::Status BlockReader::ReadBatchOverlapped(absl::Span<ReadRequest> requests,
                                              absl::FunctionRef<void()> while_waiting) const {
  std::unique_ptr<PendingReads> pending = Submit(requests);
  while_waiting();
  return pending->Wait();
}

absl::Status BlockReaderOptions::Validate() const {
  if (queue_depth == 0 || queue_depth > 32768) {
    return absl::InvalidArgumentError(absl::StrCat(
        "queue_depth ", queue_depth, " out of range 1..32768"));
  }
  return absl::OkStatus();
}

namespace {

IoUringProbe RunProbe() {
#ifndef ZOOM_HAVE_LIBURING
  IoUringProbe p;
  p.reason = "built without liburing (ZOOM_WITH_LIBURING=OFF)";
  return p;
#else
  return ProbeUringSupport();  // uring_block_reader.cc: the one user of liburing
#endif
}

}  // namespace

const IoUringProbe& ProbeIoUring() {
  static const IoUringProbe* probe = new IoUringProbe(RunProbe());
  return *probe;
}

absl::StatusOr<std::unique_ptr<BlockReader>> MakeBlockReader(
    const std::string& path, const BlockReaderOptions& options) {
  ZOOM_RETURN_IF_ERROR(options.Validate());
  std::string why;
  if (options.backend != IoBackend::kPread) {
    const IoUringProbe& probe = ProbeIoUring();
    if (probe.available) {
#ifdef ZOOM_HAVE_LIBURING
      auto reader = UringBlockReader::Open(path, options);
      if (reader.ok()) {
        ZOOM_LOG(INFO, "io backend for ", path, ": ", (*reader)->Describe());
        return std::unique_ptr<BlockReader>(std::move(reader).value());
      }
      if (!absl::IsFailedPrecondition(reader.status())) return reader.status();
      why = std::string(reader.status().message());
#endif
    } else {
      why = probe.reason;
    }
    if (options.backend == IoBackend::kIoUring) {
      return absl::FailedPreconditionError(absl::StrCat(
          "io_uring was requested but is unavailable: ", why,
          " (use the pread backend, or allow io_uring: see deploy/README.md)"));
    }
  } else {
    why = "pread requested";
  }
  ZOOM_ASSIGN_OR_RETURN(auto reader, PreadBlockReader::Open(path, options));
  ZOOM_LOG(INFO, "io backend for ", path, ": ", reader->Describe(), " (", why,
           ")");
  return std::unique_ptr<BlockReader>(std::move(reader));
}

}  // namespace zoom::storage
