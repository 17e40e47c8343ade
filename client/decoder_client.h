// File: client/decoder_client.h
//
// DecoderClient: the typed client of zoom.v1.Decoder (FGD top-K softmax),
// beside ZoomClient and on the same channel options (TLS, API key, call
// deadline). Used by zoomload, zoombench and the tests.
//
// Thread safety: the unary calls are safe from many threads; one Stream is
// used by one thread at a time.
#ifndef ZOOM_CLIENT_DECODER_CLIENT_H_
#define ZOOM_CLIENT_DECODER_CLIENT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/zoom_client.h"
#include "zoom/v1/decoder.grpc.pb.h"
#include "zoom/v1/decoder.pb.h"

namespace zoom::client {

class DecoderClient {
 public:
  // As ZoomClient::Open / Connect.
  static absl::StatusOr<std::unique_ptr<DecoderClient>> Open(const std::string& target,
                                                             const ClientOptions& options = {});
  static std::unique_ptr<DecoderClient> Connect(const std::string& target,
                                                const ClientOptions& options = {});
  DecoderClient(std::shared_ptr<grpc::Channel> channel, const ClientOptions& options);

  // Loads model directory `dir` (a name under the server's --models_dir)
  // as `name`; with `wait`, answers once it serves (or failed). m and
  // ef_construction 0: the server's defaults; default_ef 0: calibrated from
  // the directory's H.f32 (else built-in).
  absl::StatusOr<v1::ModelInfo> LoadModel(const std::string& name, const std::string& dir,
                                          bool wait, uint32_t m = 0,
                                          uint32_t ef_construction = 0,
                                          uint32_t default_ef = 0);
  absl::Status UnloadModel(const std::string& name);
  absl::StatusOr<std::vector<v1::ModelInfo>> ListModels();

  absl::StatusOr<v1::TopKResponse> TopK(const v1::TopKRequest& request);
  // As TopK with a per-call deadline (overrides options.timeout).
  absl::StatusOr<v1::TopKResponse> TopK(const v1::TopKRequest& request, absl::Duration timeout);

  // StreamTopK: one decoding step per message, answered in order.
  class Stream {
   public:
    // The answer to `step`; the stream's status once it has ended.
    absl::StatusOr<v1::TopKResponse> Step(const v1::TopKRequest& step);
    // Half-closes and returns the stream's final status.
    absl::Status Finish();

   private:
    friend class DecoderClient;
    Stream() = default;
    grpc::ClientContext context_;
    std::unique_ptr<grpc::ClientReaderWriter<v1::TopKRequest, v1::TopKResponse>> rw_;
    bool done_ = false;
    absl::Status last_;
  };
  // The stream's deadline is options.timeout from now.
  std::unique_ptr<Stream> OpenStream();

  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }
  // For the asynchronous (callback) API (zoomload's open loop).
  v1::Decoder::Stub& stub() { return *stub_; }

 private:
  void Prepare(grpc::ClientContext* context, absl::Duration timeout) const;

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Decoder::Stub> stub_;
  ClientOptions options_;
};

}  // namespace zoom::client

#endif  // ZOOM_CLIENT_DECODER_CLIENT_H_
