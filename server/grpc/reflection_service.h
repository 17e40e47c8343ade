// File: server/grpc/reflection_service.h
//
// ReflectionV1Service: grpc.reflection.v1.ServerReflection, the stable
// version of the server reflection protocol (gRPC 1.51's plugin, also
// installed by ZoomServer, serves only grpc.reflection.v1alpha). Answers from
// the generated protobuf descriptor pool: list_services (the names given at
// construction), file_by_filename, file_containing_symbol,
// file_containing_extension and all_extension_numbers_of_type; a file comes
// with the files it imports that this stream has not been sent yet. A name
// that is not found is an error_response with NOT_FOUND (the stream goes
// on).
//
// Thread safety: immutable after construction; gRPC calls it from many
// threads; each stream's reactor runs one request at a time.
#ifndef ZOOM_SERVER_GRPC_REFLECTION_SERVICE_H_
#define ZOOM_SERVER_GRPC_REFLECTION_SERVICE_H_

#include <string>
#include <vector>

#include "grpc/reflection/v1/reflection.grpc.pb.h"
#include "server/grpc/auth.h"

namespace zoom::server {

class ReflectionV1Service final : public grpc::reflection::v1::ServerReflection::CallbackService {
 public:
  // `auth` (may be null): a read key is needed, as for the other services.
  explicit ReflectionV1Service(std::vector<std::string> services,
                               const Authenticator* auth = nullptr)
      : services_(std::move(services)), auth_(auth) {}

  grpc::ServerBidiReactor<grpc::reflection::v1::ServerReflectionRequest,
                          grpc::reflection::v1::ServerReflectionResponse>*
  ServerReflectionInfo(grpc::CallbackServerContext* ctx) override;

  // One request's answer (the reactor's work; tests call it directly).
  // `sent` holds the file names already sent on the stream.
  void Answer(const grpc::reflection::v1::ServerReflectionRequest& req,
              std::vector<std::string>* sent,
              grpc::reflection::v1::ServerReflectionResponse* resp) const;

 private:
  std::vector<std::string> services_;
  const Authenticator* auth_;
};

}  // namespace zoom::server

#endif  // ZOOM_SERVER_GRPC_REFLECTION_SERVICE_H_
