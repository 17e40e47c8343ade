#include "server/grpc/parse_errors.h"

#include <google/protobuf/descriptor.h>

#include "absl/strings/str_cat.h"

namespace zoom::server {
namespace {

class ParseErrorInterceptor final : public grpc::experimental::Interceptor {
 public:
  ParseErrorInterceptor(std::string method, std::string input_type,
                        const std::function<void(const std::string&)>* on_parse_error)
      : method_(std::move(method)),
        input_type_(std::move(input_type)),
        on_parse_error_(on_parse_error) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      const grpc::Status st = methods->GetSendStatus();
      // Our handlers never answer UNIMPLEMENTED without a message: this is
      // the handler's "the request did not deserialize".
      if (st.error_code() == grpc::StatusCode::UNIMPLEMENTED && st.error_message().empty()) {
        methods->ModifySendStatus(grpc::Status(
            grpc::StatusCode::INVALID_ARGUMENT,
            absl::StrCat("could not parse the request: it is not a valid ", input_type_,
                         " message (check the client's protos)")));
        if (*on_parse_error_) (*on_parse_error_)(method_);
      }
    }
    methods->Proceed();
  }

 private:
  std::string method_;
  std::string input_type_;
  const std::function<void(const std::string&)>* on_parse_error_;
};

}  // namespace

grpc::experimental::Interceptor* ParseErrorInterceptorFactory::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  // Unary and server-streaming calls parse their one request in gRPC's
  // handler; the client-streaming ones (Import, RestoreSnapshot, StreamTopK)
  // parse their own messages.
  if (info->type() != grpc::experimental::ServerRpcInfo::Type::UNARY &&
      info->type() != grpc::experimental::ServerRpcInfo::Type::SERVER_STREAMING) {
    return nullptr;
  }
  // "/zoom.v1.VectorSearch/Search" -> service and method.
  const std::string full = info->method() != nullptr ? info->method() : "";
  if (full.rfind("/zoom.v1.", 0) != 0) return nullptr;
  const size_t slash = full.find('/', 1);
  if (slash == std::string::npos) return nullptr;
  const google::protobuf::ServiceDescriptor* service =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
          full.substr(1, slash - 1));
  const google::protobuf::MethodDescriptor* method =
      service != nullptr ? service->FindMethodByName(full.substr(slash + 1)) : nullptr;
  if (method == nullptr) return nullptr;
  return new ParseErrorInterceptor(full.substr(slash + 1), method->input_type()->full_name(),
                                   &on_parse_error_);
}

}  // namespace zoom::server
