// File: client/zoom_client.h
//
// ZoomClient: a typed wrapper over the zoom.v1.VectorSearch stub, shared by
// zoomctl, zoomload and the integration tests. Every call returns an
// absl::Status / StatusOr whose code is the gRPC status code and whose
// message is the server's.
//
// Thread safety: a ZoomClient may be used from many threads at once (the
// channel and stub are thread-safe); it owns its channel.
#ifndef ZOOM_CLIENT_ZOOM_CLIENT_H_
#define ZOOM_CLIENT_ZOOM_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "zoom/v1/zoom.grpc.pb.h"
#include "zoom/v1/zoom.pb.h"

namespace zoom::client {

struct ClientOptions {
  // Deadline of each call; absl::InfiniteDuration() for none.
  absl::Duration timeout = absl::Seconds(60);
  // Largest message sent or received (bytes).
  int max_message_bytes = 64 << 20;
  // Wait for the channel to connect (up to `timeout`) instead of failing
  // fast with UNAVAILABLE when the server is not up yet.
  bool wait_for_ready = false;
  // API key sent with every call on the channel, as
  // "authorization: Bearer KEY" ("" = none).
  std::string api_key;
  // TLS: PEM file of the CA certificates the server's certificate must
  // chain to ("" = plaintext); for mTLS the client's certificate chain and
  // key; the name the server's certificate must carry ("" = the target's
  // host).
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_server_name;
};

// A channel to `target` with the options' credentials (TLS, API key).
// InvalidArgument when a TLS file cannot be read or is not PEM.
absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const std::string& target,
                                                           const ClientOptions& options);

// MakeChannel, or (saying why on stderr) a channel on which every call
// fails with UNAVAILABLE: a bad TLS file is never a silent downgrade to
// plaintext. For the clients' Connect.
std::shared_ptr<grpc::Channel> MakeChannelOrFailing(const std::string& target,
                                                    const ClientOptions& options);

// A call's deadline (`timeout` from now; none when infinite) and the
// options' wait_for_ready.
void PrepareContext(grpc::ClientContext* context, absl::Duration timeout,
                    const ClientOptions& options);

// grpc::Status -> absl::Status (same code, same message).
absl::Status FromGrpc(const grpc::Status& status);

// Sets a point's or a query's vector of `dim` floats: as vector_bytes (one
// byte a dimension, a quarter of the size on the wire) when `as_bytes` (the
// values must be integers in 0..255: a uint8 data set read as floats), else
// as floats.
void SetVector(const float* v, size_t dim, bool as_bytes, v1::Point* point);
void SetVector(const float* v, size_t dim, bool as_bytes, v1::SearchRequest* request);

class ZoomClient {
 public:
  // Connects (lazily) to `target` ("host:port"); TLS and the API key as
  // the options say. Open reports a bad TLS file; Connect prints it to
  // stderr and returns a client whose calls fail (tests, benchmarks).
  static absl::StatusOr<std::unique_ptr<ZoomClient>> Open(const std::string& target,
                                                          const ClientOptions& options = {});
  static std::unique_ptr<ZoomClient> Connect(const std::string& target,
                                             const ClientOptions& options = {});
  ZoomClient(std::shared_ptr<grpc::Channel> channel, const ClientOptions& options);

  absl::StatusOr<v1::CollectionInfo> CreateCollection(const v1::CollectionSpec& spec);
  absl::Status DropCollection(const std::string& name);
  absl::StatusOr<std::vector<v1::CollectionInfo>> ListCollections();
  absl::StatusOr<v1::CollectionInfo> GetCollection(const std::string& name);

  absl::StatusOr<uint64_t> Upsert(const v1::UpsertRequest& request);
  absl::StatusOr<uint64_t> Delete(const std::string& collection,
                                  const std::vector<uint64_t>& ids);
  // The whole request (its write concern, a filter) and the whole answer
  // (tokens, the concern it was acknowledged under), with a per-call
  // deadline (none when infinite).
  absl::StatusOr<v1::DeleteResponse> Delete(const v1::DeleteRequest& request,
                                            absl::Duration timeout);
  absl::StatusOr<v1::GetResponse> Get(const v1::GetRequest& request);
  // The typed payload of existing points (see v1::SetPayloadRequest);
  // returns how many points changed.
  absl::StatusOr<uint64_t> SetPayload(const v1::SetPayloadRequest& request);
  absl::StatusOr<uint64_t> DeletePayload(const v1::DeletePayloadRequest& request);

  // Streams `total` points to `collection`: next(i, &point) fills point i
  // (0 <= i < total). Points go in batches of `batch` per message; each
  // batch is acknowledged by flow control before the next is sent.
  // progress(done, total), when set, is called after each batch is written.
  // Returns the number of points imported.
  absl::StatusOr<uint64_t> Import(
      const std::string& collection, uint64_t total,
      const std::function<void(uint64_t, v1::Point*)>& next, uint32_t batch = 1000,
      const std::function<void(uint64_t, uint64_t)>& progress = nullptr);

  absl::StatusOr<v1::SearchResponse> Search(const v1::SearchRequest& request);
  // As Search with a per-call deadline (overrides options.timeout).
  absl::StatusOr<v1::SearchResponse> Search(const v1::SearchRequest& request,
                                            absl::Duration timeout);
  absl::StatusOr<v1::SearchBatchResponse> SearchBatch(const v1::SearchBatchRequest& request);
  // As SearchBatch with a per-call deadline (overrides options.timeout).
  absl::StatusOr<v1::SearchBatchResponse> SearchBatch(const v1::SearchBatchRequest& request,
                                                      absl::Duration timeout);

  // Deletes by filter (see v1::DeleteRequest); returns how many. A filter
  // that matches every point is refused unless `all` (with `all`, an empty
  // filter deletes every point).
  absl::StatusOr<uint64_t> DeleteByFilter(const std::string& collection, const v1::Filter& filter,
                                          bool all = false);
  // One page of points passing request.filter, ascending by id.
  absl::StatusOr<v1::ScrollResponse> Scroll(const v1::ScrollRequest& request);
  // Live points passing request.filter (all without one).
  absl::StatusOr<v1::CountResponse> Count(const v1::CountRequest& request);
  // Payload indexes (see v1::CreateFieldIndexRequest).
  absl::StatusOr<v1::CollectionInfo> CreateFieldIndex(const v1::CreateFieldIndexRequest& request);
  absl::StatusOr<v1::CollectionInfo> DeleteFieldIndex(const std::string& collection,
                                                      const std::string& field);

  absl::StatusOr<v1::CollectionInfo> BuildIndex(const std::string& collection, bool wait);
  absl::StatusOr<v1::CollectionInfo> Compact(const std::string& collection);

  // Snapshots (see docs/operations.md, "Snapshots").
  absl::StatusOr<v1::SnapshotInfo> CreateSnapshot(const std::string& collection);
  absl::StatusOr<std::vector<v1::SnapshotInfo>> ListSnapshots(const std::string& collection);
  absl::Status DeleteSnapshot(const std::string& collection, const std::string& name);
  // Receives a snapshot archive's bytes in order: `chunk` holds the bytes
  // at `offset`, each chunk starting where the previous one ended (the
  // first at 0); the view lives for the call only. A non-OK return ends
  // the download with that status.
  using SnapshotSink = std::function<absl::Status(absl::string_view chunk, uint64_t offset)>;
  // Streams the snapshot's archive into `sink` (the caller writes it where
  // and how it must: a server node through its own FileSystem);
  // progress(bytes, total) after each chunk. DataLoss when the chunks come
  // out of order or fewer bytes than the archive's size arrive; the
  // sink's error as it returned it. On any error the sink may have taken
  // part of the archive: the caller discards it.
  absl::StatusOr<v1::SnapshotInfo> DownloadSnapshot(
      const std::string& collection, const std::string& name, const SnapshotSink& sink,
      const std::function<void(uint64_t, uint64_t)>& progress = nullptr);
  // Writes the snapshot's archive to `path` through FileSystem::Posix()
  // (PATH.part, synced, renamed when complete; removed on any error);
  // progress(bytes, total) after each chunk.
  absl::StatusOr<v1::SnapshotInfo> DownloadSnapshot(
      const std::string& collection, const std::string& name, const std::string& path,
      const std::function<void(uint64_t, uint64_t)>& progress = nullptr);
  // Uploads the archive at `path` and restores it into `collection`.
  absl::StatusOr<v1::CollectionInfo> RestoreSnapshotFromFile(
      const std::string& collection, const std::string& path, bool overwrite,
      const std::function<void(uint64_t, uint64_t)>& progress = nullptr);
  // Restores a snapshot kept on the server ("<collection>/<name>.zsnap"
  // under its --snapshots_dir).
  absl::StatusOr<v1::CollectionInfo> RestoreSnapshotFromServer(const std::string& collection,
                                                               const std::string& source,
                                                               bool overwrite);

  // grpc.health.v1 Check for `service` ("" = the server as a whole):
  // "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN" or "UNKNOWN".
  absl::StatusOr<std::string> Health(const std::string& service = "");

  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }
  v1::VectorSearch::Stub& stub() { return *stub_; }

 private:
  void Prepare(grpc::ClientContext* context, absl::Duration timeout) const;

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::VectorSearch::Stub> stub_;
  ClientOptions options_;
};

}  // namespace zoom::client

#endif  // ZOOM_CLIENT_ZOOM_CLIENT_H_
