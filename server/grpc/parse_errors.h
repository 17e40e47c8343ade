// File: server/grpc/parse_errors.h
//
// ParseErrorInterceptorFactory: a server interceptor that turns gRPC's
// answer to a unary request that does not parse (UNIMPLEMENTED with an
// empty message, hard-wired in the callback API's unary handler) into
// INVALID_ARGUMENT "could not parse the request ...", for the methods of
// the zoom.v1 services (looked up in the linked protobuf descriptors, so an
// unknown method keeps its UNIMPLEMENTED). The streaming methods parse their
// messages themselves (see ImportReactor and the StreamTopK reactor).
//
// Thread safety: the factory is used by gRPC from many threads; it is
// immutable after construction.
#ifndef ZOOM_SERVER_GRPC_PARSE_ERRORS_H_
#define ZOOM_SERVER_GRPC_PARSE_ERRORS_H_

#include <grpcpp/support/server_interceptor.h>

#include <functional>
#include <string>

namespace zoom::server {

class ParseErrorInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  // `on_parse_error(method)`: called once per request that did not parse
  // (metrics); may be empty.
  explicit ParseErrorInterceptorFactory(std::function<void(const std::string&)> on_parse_error)
      : on_parse_error_(std::move(on_parse_error)) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override;

 private:
  std::function<void(const std::string&)> on_parse_error_;
};

}  // namespace zoom::server

#endif  // ZOOM_SERVER_GRPC_PARSE_ERRORS_H_
