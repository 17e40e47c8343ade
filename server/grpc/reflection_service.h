// File: server/grpc/reflection_service.h
//
// ReflectionService: the gRPC server reflection protocol, served by zoomd
// itself in both its versions: grpc.reflection.v1 (the stable one) and
// grpc.reflection.v1alpha (what older clients such as grpc_cli ask first;
// gRPC's plugin used to serve it). The two have the same messages on the
// wire, so both run one handler that parses the v1 types. Answers come from
// the generated protobuf descriptor pool: list_services (the names given at
// construction), file_by_filename, file_containing_symbol,
// file_containing_extension and all_extension_numbers_of_type; a file comes
// with the files it imports that this stream has not been sent yet (before
// it). A name that is not found is an error_response with NOT_FOUND (the
// stream goes on).
//
// ServerReflectionInfo is a raw method (grpc::ByteBuffer messages, parsed
// here): a message that does not parse ends the stream with
// INVALID_ARGUMENT "message #N could not be parsed as a
// grpc.reflection.<version>.ServerReflectionRequest" (N counted from 0, as
// Import's messages and StreamTopK's steps; the answers already sent stay
// sent), where gRPC's typed reader would have taken it for the end of the
// stream and ended it OK. Both versions need a read key when the server has
// API keys (auth.h).
//
// Register both: builder.RegisterService(r.v1()); RegisterService(r.v1alpha()).
//
// Thread safety: immutable after construction; gRPC calls it from many
// threads; each stream's reactor runs one request at a time. The service
// outlives the grpc::Server it is registered with.
#ifndef ZOOM_SERVER_GRPC_REFLECTION_SERVICE_H_
#define ZOOM_SERVER_GRPC_REFLECTION_SERVICE_H_

#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "grpc/reflection/v1/reflection.grpc.pb.h"
#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "server/grpc/auth.h"

namespace zoom::server {

class ReflectionService {
 public:
  // `auth` (may be null): a read key is needed, as for the other services.
  explicit ReflectionService(std::vector<std::string> services,
                             const Authenticator* auth = nullptr);
  ReflectionService(const ReflectionService&) = delete;
  ReflectionService& operator=(const ReflectionService&) = delete;

  // The two services to register with a grpc::ServerBuilder.
  grpc::Service* v1() { return &v1_; }
  grpc::Service* v1alpha() { return &v1alpha_; }

  // One request's answer (the reactor's work; tests call it directly).
  // `sent` holds the file names already sent on the stream.
  void Answer(const grpc::reflection::v1::ServerReflectionRequest& req,
              std::vector<std::string>* sent,
              grpc::reflection::v1::ServerReflectionResponse* resp) const;

  // A stream of `package`'s ServerReflectionInfo (used by v1() and
  // v1alpha()).
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* NewStream(
      grpc::CallbackServerContext* ctx, const char* package) const;

 private:
  template <typename Base>
  class Version final : public Base {
   public:
    Version(const ReflectionService* owner, const char* package)
        : owner_(owner), package_(package) {}
    grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* ServerReflectionInfo(
        grpc::CallbackServerContext* ctx) override {
      return owner_->NewStream(ctx, package_);
    }

   private:
    const ReflectionService* owner_;
    const char* package_;
  };

  std::vector<std::string> services_;
  const Authenticator* auth_;
  Version<grpc::reflection::v1::ServerReflection::WithRawCallbackMethod_ServerReflectionInfo<
      grpc::reflection::v1::ServerReflection::Service>>
      v1_{this, "grpc.reflection.v1"};
  Version<grpc::reflection::v1alpha::ServerReflection::WithRawCallbackMethod_ServerReflectionInfo<
      grpc::reflection::v1alpha::ServerReflection::Service>>
      v1alpha_{this, "grpc.reflection.v1alpha"};
};

}  // namespace zoom::server

#endif  // ZOOM_SERVER_GRPC_REFLECTION_SERVICE_H_
