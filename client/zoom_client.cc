// File: client/zoom_client.cc
#include "client/zoom_client.h"

#include <grpcpp/grpcpp.h>

#include <grpcpp/support/client_interceptor.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/file_system.h"
#include "common/status_macros.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpc/health/v1/health.pb.h"

namespace zoom::client {

namespace {

std::string AsBytes(const float* v, size_t dim) {
  std::string bytes(dim, '\0');
  for (size_t i = 0; i < dim; ++i) bytes[i] = static_cast<char>(static_cast<uint8_t>(v[i]));
  return bytes;
}

}  // namespace

void SetVector(const float* v, size_t dim, bool as_bytes, v1::Point* point) {
  if (as_bytes) {
    point->clear_vector();
    point->set_vector_bytes(AsBytes(v, dim));
  } else {
    point->clear_vector_bytes();
    point->mutable_vector()->Assign(v, v + dim);
  }
}

void SetVector(const float* v, size_t dim, bool as_bytes, v1::SearchRequest* request) {
  if (as_bytes) {
    request->clear_vector();
    request->set_vector_bytes(AsBytes(v, dim));
  } else {
    request->clear_vector_bytes();
    request->mutable_vector()->Assign(v, v + dim);
  }
}

absl::Status FromGrpc(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  // grpc::StatusCode and absl::StatusCode share their numbering (0..16).
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

namespace {

// Adds the API key to every call's initial metadata. A client interceptor,
// not call credentials: those are dropped on plaintext channels (loopback).
class ApiKeyInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit ApiKeyInterceptor(const std::string* header) : header_(header) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->emplace("authorization", *header_);
    }
    methods->Proceed();
  }

 private:
  const std::string* header_;
};

class ApiKeyInterceptorFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit ApiKeyInterceptorFactory(const std::string& key) : header_("Bearer " + key) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new ApiKeyInterceptor(&header_);
  }

 private:
  const std::string header_;
};

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(what, " ", path, " cannot be read"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (text.find("-----BEGIN") == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(what, " ", path, " is not a PEM file"));
  }
  return text;
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const std::string& target,
                                                           const ClientOptions& options) {
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(options.max_message_bytes);
  args.SetMaxReceiveMessageSize(options.max_message_bytes);
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials();
  // Any TLS option turns TLS on (the system's roots when no CA is given):
  // never a plaintext channel carrying the key because one flag was left out.
  if (!options.tls_ca_file.empty() || !options.tls_cert_file.empty() ||
      !options.tls_key_file.empty() || !options.tls_server_name.empty()) {
    grpc::SslCredentialsOptions ssl;
    if (!options.tls_ca_file.empty()) {
      auto ca = ReadPem(options.tls_ca_file, "--tls_ca");
      if (!ca.ok()) return ca.status();
      ssl.pem_root_certs = std::move(*ca);
    }
    if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
      return absl::InvalidArgumentError("a client certificate needs both --tls_cert and --tls_key");
    }
    if (!options.tls_cert_file.empty()) {
      auto cert = ReadPem(options.tls_cert_file, "--tls_cert");
      if (!cert.ok()) return cert.status();
      auto key = ReadPem(options.tls_key_file, "--tls_key");
      if (!key.ok()) return key.status();
      ssl.pem_cert_chain = std::move(*cert);
      ssl.pem_private_key = std::move(*key);
    }
    creds = grpc::SslCredentials(ssl);
    if (!options.tls_server_name.empty()) {
      args.SetSslTargetNameOverride(options.tls_server_name);
    }
  }
  if (options.api_key.empty()) return grpc::CreateCustomChannel(target, creds, args);
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(std::make_unique<ApiKeyInterceptorFactory>(options.api_key));
  return grpc::experimental::CreateCustomChannelWithInterceptors(target, creds, args,
                                                                 std::move(interceptors));
}

absl::StatusOr<std::unique_ptr<ZoomClient>> ZoomClient::Open(const std::string& target,
                                                             const ClientOptions& options) {
  auto channel = MakeChannel(target, options);
  if (!channel.ok()) return channel.status();
  return std::make_unique<ZoomClient>(std::move(*channel), options);
}

std::shared_ptr<grpc::Channel> MakeChannelOrFailing(const std::string& target,
                                                    const ClientOptions& options) {
  auto channel = MakeChannel(target, options);
  if (channel.ok()) return std::move(*channel);
  std::fprintf(stderr, "zoom client: %s\n", std::string(channel.status().message()).c_str());
  return grpc::CreateChannel("unix:/nonexistent/zoom-client-tls-configuration-error",
                             grpc::InsecureChannelCredentials());
}

void PrepareContext(grpc::ClientContext* context, absl::Duration timeout,
                    const ClientOptions& options) {
  // Anything beyond a century is as good as no deadline (and keeps the
  // conversion to a chrono time point far from saturation).
  if (timeout != absl::InfiniteDuration() && timeout < absl::Hours(24 * 36500)) {
    context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  }
  context->set_wait_for_ready(options.wait_for_ready);
}

std::unique_ptr<ZoomClient> ZoomClient::Connect(const std::string& target,
                                                const ClientOptions& options) {
  return std::make_unique<ZoomClient>(MakeChannelOrFailing(target, options), options);
}

ZoomClient::ZoomClient(std::shared_ptr<grpc::Channel> channel,
                       const ClientOptions& options)
    : channel_(std::move(channel)),
      stub_(v1::VectorSearch::NewStub(channel_)),
      options_(options) {}

void ZoomClient::Prepare(grpc::ClientContext* context,
                         absl::Duration timeout) const {
  PrepareContext(context, timeout, options_);
}

absl::StatusOr<v1::CollectionInfo> ZoomClient::CreateCollection(
    const v1::CollectionSpec& spec) {
  grpc::ClientContext context;
  Prepare(&context, options_.timeout);
  v1::CreateCollectionRequest request;
  *request.mutable_spec() = spec;
  v1::CreateCollectionResponse response;
  absl::Status status =
      FromGrpc(stub_->CreateCollection(&context, request, &response));
  if (!status.ok()) return status;
  return std::move(*response.mutable_info());
}

absl::Status ZoomClient::DropCollection(const std::string& name) {
  grpc::ClientContext context;
  Prepare(&context, options_.timeout);
  v1::DropCollectionRequest request;
  request.set_name(name);
  v1::DropCollectionResponse response;
  return FromGrpc(stub_->DropCollection(&context, request, &response));
}

absl::StatusOr<std::vector<v1::CollectionInfo>> ZoomClient::ListCollections() {
  grpc::ClientContext context;
  Prepare(&context, options_.timeout);
  v1::ListCollectionsRequest request;
  v1::ListCollectionsResponse response;
  absl::Status status =
      FromGrpc(stub_->ListCollections(&context, request, &response));
  if (!status.ok()) return status;
  std::vector<v1::CollectionInfo> collections;
  collections.reserve(response.collections_size());
  for (v1::CollectionInfo& info : *response.mutable_collections()) {
    collections.push_back(std::move(info));
  }
  return collections;
}

absl::StatusOr<v1::CollectionInfo> ZoomClient::GetCollection(
    const std::string& name) {
  grpc::ClientContext context;
  Prepare(&context, options_.timeout);
  v1::GetCollectionRequest request;
  request.set_name(name);
  v1::GetCollectionResponse response;
  absl::Status status =
      FromGrpc(stub_->GetCollection(&context, request, &response));
  if (!status.ok()) return status;
  return std::move(*response.mutable_info());
}

absl::StatusOr<uint64_t> ZoomClient::Upsert(const v1::UpsertRequest& request) {
  grpc::ClientContext context;
  Prepare(&context, options_.timeout);
  v1::UpsertResponse response;
  absl::Status status = FromGrpc(stub_->Upsert(&context, request, &response));
  if (!status.ok()) return status;
  return response.upserted();
}

absl::StatusOr<uint64_t> ZoomClient::Delete(const std::string& collection,
                                            const std::vector<uint64_t>& ids) {
  grpc::ClientContext context;
  Prepare(&context, options_.timeout);
  v1::DeleteRequest request;
  request.set_collection(collection);
  request.mutable_ids()->Add(ids.begin(), ids.end());
  v1::DeleteResponse response;
  absl::Status status = FromGrpc(stub_->Delete(&context, request, &response));
  if (!status.ok()) return status;
  return response.deleted();
}

absl::StatusOr<v1::DeleteResponse> ZoomClient::Delete(const v1::DeleteRequest& request,
                                                      absl::Duration timeout) {
  grpc::ClientContext context;
  Prepare(&context, timeout);
  v1::DeleteResponse response;
  absl::Status status = FromGrpc(stub_->Delete(&context, request, &response));
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<uint64_t> ZoomClient::SetPayload(const v1::SetPayloadRequest& request) {
  grpc::ClientContext context;
  Prepare(&context, options_.timeout);
  v1::SetPayloadResponse response;
  absl::Status status = FromGrpc(stub_->SetPayload(&context, request, &response));
  if (!status.ok()) return status;
  return response.updated();
}

absl::StatusOr<uint64_t> ZoomClient::DeletePayload(const v1::DeletePayloadRequest& request) {
  grpc::ClientContext context;
  Prepare(&context, options_.timeout);
  v1::DeletePayloadResponse response;
  absl::Status status = FromGrpc(stub_->DeletePayload(&context, request, &response));
  if (!status.ok()) return status;
  return response.updated();
}

absl::StatusOr<v1::GetResponse> ZoomClient::Get(const v1::GetRequest& request) {
  grpc::ClientContext context;
  Prepare(&context, options_.timeout);
  v1::GetResponse response;
  absl::Status status = FromGrpc(stub_->Get(&context, request, &response));
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<uint64_t> ZoomClient::Import(
    const std::string& collection, uint64_t total,
    const std::function<void(uint64_t, v1::Point*)>& next, uint32_t batch,
    const std::function<void(uint64_t, uint64_t)>& progress) {
  if (batch == 0) {
    return absl::InvalidArgumentError("import batch size must be positive");
  }
  if (total > 0 && !next) {
    return absl::InvalidArgumentError("import needs a point source");
  }
  grpc::ClientContext context;
  Prepare(&context, options_.timeout);
  v1::ImportResponse response;
  std::unique_ptr<grpc::ClientWriter<v1::ImportRequest>> writer =
      stub_->Import(&context, &response);

  // One request reused for every batch: clearing its points keeps their
  // allocations, so later batches fill vectors without reallocating.
  v1::ImportRequest request;
  request.set_collection(collection);
  uint64_t sent = 0;
  bool stream_ok = true;
  // The first message always goes out (even with no points) so that the
  // server learns the collection and can report on it.
  do {
    const uint64_t n = std::min<uint64_t>(batch, total - sent);
    request.clear_points();
    request.mutable_points()->Reserve(
        static_cast<int>(std::min<uint64_t>(n, uint64_t{1} << 20)));
    for (uint64_t i = 0; i < n; ++i) next(sent + i, request.add_points());
    if (!writer->Write(request)) {
      // The server ended the call (an error, or a deadline); Finish below
      // fetches its status.
      stream_ok = false;
      break;
    }
    sent += n;
    if (progress) progress(sent, total);
    request.clear_collection();  // only the first message names it
  } while (sent < total);

  if (stream_ok) writer->WritesDone();
  absl::Status status = FromGrpc(writer->Finish());
  if (!status.ok()) return status;
  if (!stream_ok) {
    return absl::UnknownError(absl::StrCat(
        "the server closed the import stream of '", collection, "' after ",
        sent, " of ", total, " points without an error (it reported ",
        response.imported(), " imported)"));
  }
  return response.imported();
}

absl::StatusOr<v1::SearchResponse> ZoomClient::Search(
    const v1::SearchRequest& request) {
  return Search(request, options_.timeout);
}

absl::StatusOr<v1::SearchResponse> ZoomClient::Search(
    const v1::SearchRequest& request, absl::Duration timeout) {
  grpc::ClientContext context;
  Prepare(&context, timeout);
  v1::SearchResponse response;
  absl::Status status = FromGrpc(stub_->Search(&context, request, &response));
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<v1::SearchBatchResponse> ZoomClient::SearchBatch(
    const v1::SearchBatchRequest& request) {
  return SearchBatch(request, options_.timeout);
}

absl::StatusOr<v1::SearchBatchResponse> ZoomClient::SearchBatch(
    const v1::SearchBatchRequest& request, absl::Duration timeout) {
  grpc::ClientContext context;
  Prepare(&context, timeout);
  v1::SearchBatchResponse response;
  absl::Status status =
      FromGrpc(stub_->SearchBatch(&context, request, &response));
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<v1::CollectionInfo> ZoomClient::BuildIndex(
    const std::string& collection, bool wait) {
  grpc::ClientContext context;
  Prepare(&context, options_.timeout);
  v1::BuildIndexRequest request;
  request.set_collection(collection);
  request.set_wait(wait);
  v1::BuildIndexResponse response;
  absl::Status status =
      FromGrpc(stub_->BuildIndex(&context, request, &response));
  if (!status.ok()) return status;
  return std::move(*response.mutable_info());
}

absl::StatusOr<uint64_t> ZoomClient::DeleteByFilter(const std::string& collection,
                                                    const v1::Filter& filter, bool all) {
  grpc::ClientContext context;
  Prepare(&context, options_.timeout);
  v1::DeleteRequest request;
  request.set_collection(collection);
  *request.mutable_filter() = filter;
  request.set_all(all);
  v1::DeleteResponse response;
  absl::Status status = FromGrpc(stub_->Delete(&context, request, &response));
  if (!status.ok()) return status;
  return response.deleted();
}

absl::StatusOr<v1::ScrollResponse> ZoomClient::Scroll(const v1::ScrollRequest& request) {
  grpc::ClientContext context;
  Prepare(&context, options_.timeout);
  v1::ScrollResponse response;
  absl::Status status = FromGrpc(stub_->Scroll(&context, request, &response));
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<v1::CountResponse> ZoomClient::Count(const v1::CountRequest& request) {
  grpc::ClientContext context;
  Prepare(&context, options_.timeout);
  v1::CountResponse response;
  absl::Status status = FromGrpc(stub_->Count(&context, request, &response));
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<v1::CollectionInfo> ZoomClient::CreateFieldIndex(
    const v1::CreateFieldIndexRequest& request) {
  grpc::ClientContext context;
  Prepare(&context, options_.timeout);
  v1::CreateFieldIndexResponse response;
  absl::Status status = FromGrpc(stub_->CreateFieldIndex(&context, request, &response));
  if (!status.ok()) return status;
  return std::move(*response.mutable_info());
}

absl::StatusOr<v1::CollectionInfo> ZoomClient::DeleteFieldIndex(const std::string& collection,
                                                                const std::string& field) {
  grpc::ClientContext context;
  Prepare(&context, options_.timeout);
  v1::DeleteFieldIndexRequest request;
  request.set_collection(collection);
  request.set_field(field);
  v1::DeleteFieldIndexResponse response;
  absl::Status status = FromGrpc(stub_->DeleteFieldIndex(&context, request, &response));
  if (!status.ok()) return status;
  return std::move(*response.mutable_info());
}

absl::StatusOr<v1::CollectionInfo> ZoomClient::Compact(
    const std::string& collection) {
  grpc::ClientContext context;
  Prepare(&context, options_.timeout);
  v1::CompactRequest request;
  request.set_collection(collection);
  v1::CompactResponse response;
  absl::Status status = FromGrpc(stub_->Compact(&context, request, &response));
  if (!status.ok()) return status;
  return std::move(*response.mutable_info());
}

absl::StatusOr<v1::SnapshotInfo> ZoomClient::CreateSnapshot(const std::string& collection) {
  grpc::ClientContext context;
  Prepare(&context, options_.timeout);
  v1::CreateSnapshotRequest request;
  request.set_collection(collection);
  v1::CreateSnapshotResponse response;
  absl::Status status = FromGrpc(stub_->CreateSnapshot(&context, request, &response));
  if (!status.ok()) return status;
  return std::move(*response.mutable_snapshot());
}

absl::StatusOr<std::vector<v1::SnapshotInfo>> ZoomClient::ListSnapshots(
    const std::string& collection) {
  grpc::ClientContext context;
  Prepare(&context, options_.timeout);
  v1::ListSnapshotsRequest request;
  request.set_collection(collection);
  v1::ListSnapshotsResponse response;
  absl::Status status = FromGrpc(stub_->ListSnapshots(&context, request, &response));
  if (!status.ok()) return status;
  return std::vector<v1::SnapshotInfo>(response.snapshots().begin(), response.snapshots().end());
}

absl::Status ZoomClient::DeleteSnapshot(const std::string& collection, const std::string& name) {
  grpc::ClientContext context;
  Prepare(&context, options_.timeout);
  v1::DeleteSnapshotRequest request;
  request.set_collection(collection);
  request.set_name(name);
  v1::DeleteSnapshotResponse response;
  return FromGrpc(stub_->DeleteSnapshot(&context, request, &response));
}

absl::StatusOr<v1::SnapshotInfo> ZoomClient::DownloadSnapshot(
    const std::string& collection, const std::string& name, const SnapshotSink& sink,
    const std::function<void(uint64_t, uint64_t)>& progress) {
  grpc::ClientContext context;
  Prepare(&context, options_.timeout);
  v1::DownloadSnapshotRequest request;
  request.set_collection(collection);
  request.set_name(name);
  auto reader = stub_->DownloadSnapshot(&context, request);
  v1::SnapshotChunk chunk;
  v1::SnapshotInfo info;
  uint64_t received = 0;
  // A failure mid-stream cancels the call; Finish is still called (the
  // stream's contract) and its status dropped for ours.
  auto abandon = [&](absl::Status st) {
    context.TryCancel();
    while (reader->Read(&chunk)) {
    }
    (void)reader->Finish();
    return st;
  };
  while (reader->Read(&chunk)) {
    if (chunk.offset() == 0 && chunk.has_info()) info = chunk.info();
    if (chunk.offset() != received) {
      return abandon(absl::DataLossError("the snapshot's chunks came out of order"));
    }
    if (absl::Status st = sink(chunk.data(), chunk.offset()); !st.ok()) return abandon(st);
    received += chunk.data().size();
    if (progress) progress(received, info.size_bytes());
  }
  ZOOM_RETURN_IF_ERROR(FromGrpc(reader->Finish()));
  if (info.size_bytes() != 0 && received != info.size_bytes()) {
    return absl::DataLossError(
        absl::StrCat("received ", received, " of ", info.size_bytes(), " bytes"));
  }
  return info;
}

absl::StatusOr<v1::SnapshotInfo> ZoomClient::DownloadSnapshot(
    const std::string& collection, const std::string& name, const std::string& path,
    const std::function<void(uint64_t, uint64_t)>& progress) {
  FileSystem& files = *FileSystem::Posix();
  const std::string part = path + ".part";
  ZOOM_ASSIGN_OR_RETURN(std::unique_ptr<File> out, files.Open(part, FileSystem::Mode::kTruncate));
  absl::StatusOr<v1::SnapshotInfo> info = DownloadSnapshot(
      collection, name,
      [&out](absl::string_view chunk, uint64_t offset) {
        return out->PWrite(offset, chunk.data(), chunk.size());
      },
      progress);
  absl::Status st = info.status();
  if (st.ok()) st = out->Sync();
  if (absl::Status closed = out->Close(); st.ok()) st = closed;
  if (st.ok()) st = files.Rename(part, path);
  if (!st.ok()) {
    files.Remove(part).IgnoreError();
    return st;
  }
  return info;
}

absl::StatusOr<v1::CollectionInfo> ZoomClient::RestoreSnapshotFromFile(
    const std::string& collection, const std::string& path, bool overwrite,
    const std::function<void(uint64_t, uint64_t)>& progress) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("cannot read ", path));
  in.seekg(0, std::ios::end);
  const uint64_t total = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  grpc::ClientContext context;
  Prepare(&context, options_.timeout);
  v1::RestoreSnapshotResponse response;
  auto writer = stub_->RestoreSnapshot(&context, &response);
  v1::RestoreSnapshotRequest req;
  req.set_collection(collection);
  req.set_overwrite(overwrite);
  uint64_t sent = 0;
  bool first = true;
  std::string buf(1 << 20, '\0');
  while (first || sent < total) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const size_t n = static_cast<size_t>(in.gcount());
    req.set_data(buf.data(), n);
    if (!writer->Write(req)) break;  // the server ended the call: Finish says why
    sent += n;
    first = false;
    req.clear_collection();
    req.clear_overwrite();
    if (progress) progress(sent, total);
    if (n == 0) break;
  }
  writer->WritesDone();
  absl::Status status = FromGrpc(writer->Finish());
  if (!status.ok()) return status;
  return std::move(*response.mutable_info());
}

absl::StatusOr<v1::CollectionInfo> ZoomClient::RestoreSnapshotFromServer(
    const std::string& collection, const std::string& source, bool overwrite) {
  grpc::ClientContext context;
  Prepare(&context, options_.timeout);
  v1::RestoreSnapshotResponse response;
  auto writer = stub_->RestoreSnapshot(&context, &response);
  v1::RestoreSnapshotRequest req;
  req.set_collection(collection);
  req.set_overwrite(overwrite);
  req.set_source(source);
  writer->Write(req);
  writer->WritesDone();
  absl::Status status = FromGrpc(writer->Finish());
  if (!status.ok()) return status;
  return std::move(*response.mutable_info());
}

absl::StatusOr<std::string> ZoomClient::Health(const std::string& service) {
  // Stubs are cheap (a pointer to the shared channel); make one per call.
  std::unique_ptr<grpc::health::v1::Health::Stub> health =
      grpc::health::v1::Health::NewStub(channel_);
  grpc::ClientContext context;
  Prepare(&context, options_.timeout);
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  absl::Status status = FromGrpc(health->Check(&context, request, &response));
  if (!status.ok()) return status;
  std::string name = grpc::health::v1::HealthCheckResponse::ServingStatus_Name(
      response.status());
  // A value this proto does not know (from a newer server) reads as UNKNOWN.
  if (name.empty()) name = "UNKNOWN";
  return name;
}

}  // namespace zoom::client
