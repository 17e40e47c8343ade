// File: loadtest/workload_fgd.cc
//
// zoomload --workload fgd: the Fast Graph Decoder through gRPC, one caller,
// against a zoomd started here with the model's parent folder as its
// --models_dir: the model is loaded (LoadModel, wait), then the first
// --fgd_calls contexts of H.f32 are sent one TopK call each (batch 1, k,
// ef, return_probs), then one StreamTopK step each on one stream: the mean
// microseconds per context of each. Its in-process twin is zoombench
// --benchmarks=fgd --fgd_sections=in_process (the same contexts, ef and k
// through FgdIndex::Search); loadtest/grpc_overhead.py --workload fgd runs
// both and prints them side by side.
//
//   zoomload --workload fgd --dataset ../shared/data/lm-ptb --ef 64
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "client/decoder_client.h"
#include "common/binary_io.h"
#include "common/json.h"
#include "common/process.h"
#include "common/report_table.h"
#include "common/status_macros.h"
#include "common/timer.h"
#include "loadtest/server_workload.h"
#include "loadtest/zoomd_child.h"
#include "zoom/v1/decoder.pb.h"

ABSL_DECLARE_FLAG(std::string, model);

ABSL_FLAG(uint32_t, fgd_calls, 2000,
          "fgd: contexts sent (the first of H.f32): one TopK call each, then one StreamTopK "
          "step each");
ABSL_FLAG(std::string, fgd_work_dir, "/var/tmp/zoomload-fgd",
          "fgd: zoomd's data dir (wiped at the start)");

namespace zoom::load {
namespace {

namespace fs = std::filesystem;

class FgdWorkload : public ServerWorkload {
 public:
  absl::Status ReadFlags() override;
  absl::Status Setup() override;
  absl::Status Run(JsonLines& json) override;
  absl::Status Report(JsonLines& json) override;

 private:
  absl::Status LoadContexts();
  v1::TopKRequest Request(size_t i) const;

  std::string dataset_, model_, work_dir_;
  uint32_t k_ = 10, ef_ = 0, calls_ = 2000;
  uint32_t dim_ = 0;
  size_t n_ = 0;              // contexts sent
  std::vector<float> h_;      // n_ x dim_
  uint32_t ref_width_ = 0;    // 1 + the reference's top-K; 0: none
  std::vector<int32_t> ref_;  // n_ x ref_width_: the true next id, then the exact top ids
  std::unique_ptr<ZoomdChild> zoomd_;
  std::unique_ptr<client::DecoderClient> decoder_;
};

absl::Status FgdWorkload::ReadFlags() {
  dataset_ = absl::GetFlag(FLAGS_dataset);
  if (dataset_.empty()) return absl::InvalidArgumentError("--dataset DIR (the model) is required");
  model_ = absl::GetFlag(FLAGS_model);
  if (model_.empty()) model_ = "lm";
  work_dir_ = absl::GetFlag(FLAGS_fgd_work_dir);
  if (work_dir_.empty()) return absl::InvalidArgumentError("--fgd_work_dir is empty");
  ZOOM_ASSIGN_OR_RETURN(k_, KFlag());
  ef_ = absl::GetFlag(FLAGS_ef);
  calls_ = absl::GetFlag(FLAGS_fgd_calls);
  if (calls_ == 0) return absl::InvalidArgumentError("--fgd_calls must be >= 1");
  return absl::OkStatus();
}

absl::Status FgdWorkload::LoadContexts() {
  const std::string meta_path = dataset_ + "/meta.json";
  ZOOM_ASSIGN_OR_RETURN(const std::string meta, ReadFileToString(meta_path));
  const std::optional<uint64_t> dim = JsonUintField(meta, "dim");
  if (!dim.has_value() || *dim == 0 || *dim > 65536) {
    return absl::InvalidArgumentError(absl::StrCat(meta_path, " has no positive \"dim\""));
  }
  dim_ = static_cast<uint32_t>(*dim);
  ZOOM_ASSIGN_OR_RETURN(const std::string h, ReadFileToString(dataset_ + "/H.f32"));
  n_ = std::min<size_t>(h.size() / (4 * size_t{dim_}), calls_);
  if (n_ == 0) return absl::FailedPreconditionError(absl::StrCat(dataset_, "/H.f32 holds no context"));
  h_.resize(n_ * dim_);
  std::memcpy(h_.data(), h.data(), h_.size() * sizeof(float));
  const std::optional<uint64_t> topk = JsonUintField(meta, "topk");
  absl::StatusOr<std::string> ref = ReadFileToString(dataset_ + "/ref_ids.i32");
  if (ref.ok() && topk.has_value() && *topk > 0 && ref->size() >= n_ * (*topk + 1) * 4) {
    ref_width_ = static_cast<uint32_t>(*topk + 1);
    ref_.resize(n_ * ref_width_);
    std::memcpy(ref_.data(), ref->data(), ref_.size() * sizeof(int32_t));
  }
  return absl::OkStatus();
}

absl::Status FgdWorkload::Setup() {
  ZOOM_RETURN_IF_ERROR(LoadContexts());
  // The model's parent is zoomd's models directory; LoadModel names the
  // model's directory under it.
  fs::path model_path = fs::path(dataset_).lexically_normal();
  if (!model_path.has_filename()) model_path = model_path.parent_path();  // "dir/"
  ZOOM_ASSIGN_OR_RETURN(
      zoomd_, StartZoomd(work_dir_, DataDir::kWipe,
                         {"--threads=2",
                          absl::StrCat("--models_dir=", model_path.parent_path().string())}));
  // One channel for the load and the calls (it is connected when they start).
  client::ClientOptions client_options;
  client_options.timeout = absl::Minutes(30);
  decoder_ = client::DecoderClient::Connect(zoomd_->target(), client_options);
  Stopwatch sw;
  ZOOM_RETURN_IF_ERROR(
      decoder_->LoadModel(model_, model_path.filename().string(), /*wait=*/true).status());
  std::printf("model %s loaded by zoomd in %.1f s\n", dataset_.c_str(), sw.ElapsedMicros() / 1e6);
  return absl::OkStatus();
}

v1::TopKRequest FgdWorkload::Request(size_t i) const {
  v1::TopKRequest req;
  req.set_model(model_);
  req.set_k(k_);
  req.set_ef(ef_);
  req.set_return_probs(true);
  req.add_contexts()->mutable_h()->Assign(h_.data() + i * dim_, h_.data() + (i + 1) * dim_);
  return req;
}

absl::Status FgdWorkload::Run(JsonLines& json) {
  Stopwatch uw;
  size_t agree = 0;
  for (size_t i = 0; i < n_; ++i) {
    ZOOM_ASSIGN_OR_RETURN(const v1::TopKResponse resp, decoder_->TopK(Request(i)));
    if (ref_width_ > 1 && resp.results_size() > 0 && resp.results(0).ids_size() > 0) {
      agree += resp.results(0).ids(0) == static_cast<uint32_t>(ref_[i * ref_width_ + 1]);
    }
  }
  const double unary_us = uw.ElapsedMicros() / n_;
  Stopwatch sw;
  {
    std::unique_ptr<client::DecoderClient::Stream> stream = decoder_->OpenStream();
    for (size_t i = 0; i < n_; ++i) ZOOM_RETURN_IF_ERROR(stream->Step(Request(i)).status());
    ZOOM_RETURN_IF_ERROR(stream->Finish());
  }
  const double stream_us = sw.ElapsedMicros() / n_;
  std::printf("\n(5) through gRPC on loopback, batch 1, k = %u, ef = %u, %zu contexts\n", k_, ef_,
              n_);
  Table table({"path", "us/context"});
  table.Row({"TopK (unary)", Fmt(unary_us, 1)});
  table.Row({"StreamTopK", Fmt(stream_us, 1)});
  if (ref_width_ > 1) {
    std::printf("top-1 through gRPC equals the exact top-1 (ref_ids.i32) for %zu of %zu "
                "contexts\n",
                agree, n_);
  }
  json.Line({{"workload", std::string("fgd")},
             {"section", std::string("grpc")},
             {"ef", static_cast<int64_t>(ef_)},
             {"contexts", static_cast<int64_t>(n_)},
             {"topk_us", unary_us},
             {"stream_us", stream_us},
             {"top1_equals_exact", ref_width_ > 1 ? static_cast<double>(agree) / n_ : NAN}});
  return absl::OkStatus();
}

absl::Status FgdWorkload::Report(JsonLines& /*json*/) {
  std::printf("load average (1 min) after the run: %.2f\n", LoadAverage1m());
  decoder_.reset();
  return zoomd_->Stop();
}

const RegisterServerWorkload kRegisterFgd(
    "fgd",
    {"TopK and StreamTopK per context through gRPC against a zoomd it starts (the "
     "over-the-wire half of loadtest/grpc_overhead.py --workload fgd)",
     {"dataset", "model", "k", "ef", "zoomd", "fgd_calls", "fgd_work_dir"},
     [] { return std::make_unique<FgdWorkload>(); }});

}  // namespace
}  // namespace zoom::load
