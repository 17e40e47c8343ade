// File: tests/testing/fault_injecting_block_reader.h
//
// A BlockReader that reads through a real one and injects faults into chosen
// requests: EIO (status DataLoss, nothing read) or a short read (a prefix of
// the bytes, then status DataLoss "short read"). Which requests fail is
// decided by a seeded generator, and recorded so that a test can check that
// exactly those requests report an error.
//
// Thread-safe like the reader it wraps; last_faults() reports the calling
// thread's most recent batch.
#ifndef ZOOM_TESTS_TESTING_FAULT_INJECTING_BLOCK_READER_H_
#define ZOOM_TESTS_TESTING_FAULT_INJECTING_BLOCK_READER_H_

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "storage/block_reader.h"

namespace zoom::testing {

class FaultInjectingBlockReader final : public storage::BlockReader {
 public:
  enum class Fault : uint8_t { kNone, kEio, kShortRead };

  // `eio_rate` and `short_rate` are probabilities per request.
  FaultInjectingBlockReader(std::unique_ptr<storage::BlockReader> inner,
                            double eio_rate, double short_rate, uint64_t seed)
      : inner_(std::move(inner)),
        eio_rate_(eio_rate),
        short_rate_(short_rate),
        rng_(seed) {}

  absl::Status ReadBatch(
      absl::Span<storage::ReadRequest> requests) const override {
    std::vector<Fault> faults(requests.size(), Fault::kNone);
    {
      absl::MutexLock lock(&mu_);
      std::uniform_real_distribution<double> u(0, 1);
      for (Fault& f : faults) {
        const double x = u(rng_);
        if (x < eio_rate_) {
          f = Fault::kEio;
        } else if (x < eio_rate_ + short_rate_) {
          f = Fault::kShortRead;
        }
      }
    }
    // Read the healthy and short requests through the real reader.
    std::vector<storage::ReadRequest> pass;
    std::vector<size_t> pass_index;
    for (size_t i = 0; i < requests.size(); ++i) {
      if (faults[i] == Fault::kEio) continue;
      pass.push_back(requests[i]);
      pass_index.push_back(i);
    }
    absl::Status st = inner_->ReadBatch(absl::MakeSpan(pass));
    if (!st.ok()) return st;
    for (size_t k = 0; k < pass.size(); ++k) {
      requests[pass_index[k]].status = pass[k].status;
      requests[pass_index[k]].bytes_read = pass[k].bytes_read;
    }
    for (size_t i = 0; i < requests.size(); ++i) {
      storage::ReadRequest& r = requests[i];
      if (faults[i] == Fault::kEio) {
        r.bytes_read = 0;
        r.status = absl::DataLossError("injected EIO: Input/output error");
      } else if (faults[i] == Fault::kShortRead && r.status.ok() && r.len > 0) {
        // Keep a prefix (the bytes really read), drop the rest.
        r.bytes_read = r.len / 2;
        r.status = absl::DataLossError("injected short read");
      }
    }
    absl::MutexLock lock(&mu_);
    last_faults_[std::this_thread::get_id()] = std::move(faults);
    return absl::OkStatus();
  }

  absl::StatusOr<uint8_t*> Scratch(size_t bytes) const override {
    return inner_->Scratch(bytes);
  }
  size_t alignment() const override { return inner_->alignment(); }
  storage::IoBackend backend() const override { return inner_->backend(); }
  bool direct_io() const override { return inner_->direct_io(); }
  const std::string& path() const override { return inner_->path(); }
  std::string Describe() const override {
    return "fault-injecting " + inner_->Describe();
  }

  // The faults of the calling thread's most recent batch.
  std::vector<Fault> last_faults() const {
    absl::MutexLock lock(&mu_);
    auto it = last_faults_.find(std::this_thread::get_id());
    return it == last_faults_.end() ? std::vector<Fault>() : it->second;
  }

 private:
  std::unique_ptr<storage::BlockReader> inner_;
  const double eio_rate_;
  const double short_rate_;
  mutable absl::Mutex mu_;
  mutable std::mt19937_64 rng_ ABSL_GUARDED_BY(mu_);
  mutable std::unordered_map<std::thread::id, std::vector<Fault>> last_faults_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace zoom::testing

#endif  // ZOOM_TESTS_TESTING_FAULT_INJECTING_BLOCK_READER_H_
