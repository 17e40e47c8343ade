#include "server/grpc/reflection_service.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/echo.h"
#include "server/grpc/unary_call.h"

namespace zoom::server {
namespace {

namespace pb = google::protobuf;
namespace rv1 = grpc::reflection::v1;

// `file` and, first, the files it imports (depth first), skipping those in
// `sent`; each added to it.
void AddFile(const pb::FileDescriptor* file, std::vector<std::string>* sent,
             rv1::FileDescriptorResponse* out) {
  if (std::find(sent->begin(), sent->end(), file->name()) != sent->end()) return;
  sent->push_back(file->name());
  for (int i = 0; i < file->dependency_count(); ++i) AddFile(file->dependency(i), sent, out);
  pb::FileDescriptorProto proto;
  file->CopyTo(&proto);
  proto.SerializeToString(out->add_file_descriptor_proto());
}

void NotFound(const std::string& what, rv1::ServerReflectionResponse* resp) {
  rv1::ErrorResponse* e = resp->mutable_error_response();
  e->set_error_code(static_cast<int>(grpc::StatusCode::NOT_FOUND));
  e->set_error_message(what);
}

// Reads a request, answers it, writes the answer, then reads the next (one
// write in flight). The client's half-close ends the stream OK; a message
// that does not parse ends it with INVALID_ARGUMENT.
class ReflectionReactor final
    : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  ReflectionReactor(const ReflectionService* service, const char* package,
                    const absl::Status& refused)
      : service_(service), package_(package) {
    if (!refused.ok()) {
      Finish(ToGrpc(refused));
      return;
    }
    StartRead(&raw_in_);
  }
  void OnReadDone(bool ok) override {
    if (!ok) {  // the client half-closed (or the call broke)
      Finish(grpc::Status::OK);
      return;
    }
    req_.Clear();
    const grpc::Status parsed =
        grpc::SerializationTraits<rv1::ServerReflectionRequest>::Deserialize(&raw_in_, &req_);
    raw_in_.Clear();
    if (!parsed.ok()) {
      Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          absl::StrCat("message #", messages_, " could not be parsed as a ",
                                       package_, ".ServerReflectionRequest (", messages_,
                                       " answered before it)")));
      return;
    }
    resp_.Clear();
    service_->Answer(req_, &sent_, &resp_);
    if (!SerializeToByteBuffer(resp_, &raw_out_)) {
      Finish(grpc::Status(grpc::StatusCode::INTERNAL,
                          absl::StrCat("the answer to message #", messages_,
                                       " could not be serialized")));
      return;
    }
    ++messages_;
    StartWrite(&raw_out_);
  }
  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the client went away"));
      return;
    }
    StartRead(&raw_in_);
  }
  void OnDone() override { delete this; }

 private:
  const ReflectionService* service_;
  const char* package_;
  grpc::ByteBuffer raw_in_, raw_out_;
  rv1::ServerReflectionRequest req_;
  rv1::ServerReflectionResponse resp_;
  std::vector<std::string> sent_;
  uint64_t messages_ = 0;
};

}  // namespace

ReflectionService::ReflectionService(std::vector<std::string> services,
                                     const Authenticator* auth)
    : services_(std::move(services)), auth_(auth) {}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* ReflectionService::NewStream(
    grpc::CallbackServerContext* ctx, const char* package) const {
  return new ReflectionReactor(this, package, AuthorizeCall(auth_, *ctx, Role::kRead));
}

void ReflectionService::Answer(const rv1::ServerReflectionRequest& req,
                               std::vector<std::string>* sent,
                               rv1::ServerReflectionResponse* resp) const {
  const pb::DescriptorPool* pool = pb::DescriptorPool::generated_pool();
  resp->set_valid_host(req.host());
  *resp->mutable_original_request() = req;
  switch (req.message_request_case()) {
    case rv1::ServerReflectionRequest::kListServices:
      for (const std::string& s : services_) {
        resp->mutable_list_services_response()->add_service()->set_name(s);
      }
      return;
    case rv1::ServerReflectionRequest::kFileByFilename: {
      const pb::FileDescriptor* f = pool->FindFileByName(req.file_by_filename());
      if (f == nullptr) {
        return NotFound(absl::StrCat("file '", EchoForMessage(req.file_by_filename(), 256),
                                     "' not found"), resp);
      }
      return AddFile(f, sent, resp->mutable_file_descriptor_response());
    }
    case rv1::ServerReflectionRequest::kFileContainingSymbol: {
      const pb::FileDescriptor* f = pool->FindFileContainingSymbol(req.file_containing_symbol());
      if (f == nullptr) {
        return NotFound(absl::StrCat("symbol '", EchoForMessage(req.file_containing_symbol(), 256),
                                     "' not found"), resp);
      }
      return AddFile(f, sent, resp->mutable_file_descriptor_response());
    }
    case rv1::ServerReflectionRequest::kFileContainingExtension: {
      const rv1::ExtensionRequest& e = req.file_containing_extension();
      const pb::Descriptor* type = pool->FindMessageTypeByName(e.containing_type());
      const pb::FieldDescriptor* ext =
          type != nullptr ? pool->FindExtensionByNumber(type, e.extension_number()) : nullptr;
      if (ext == nullptr) {
        return NotFound(absl::StrCat("extension ", e.extension_number(), " of '",
                                     EchoForMessage(e.containing_type(), 256), "' not found"),
                        resp);
      }
      return AddFile(ext->file(), sent, resp->mutable_file_descriptor_response());
    }
    case rv1::ServerReflectionRequest::kAllExtensionNumbersOfType: {
      const pb::Descriptor* type = pool->FindMessageTypeByName(req.all_extension_numbers_of_type());
      if (type == nullptr) {
        return NotFound(absl::StrCat("type '",
                                     EchoForMessage(req.all_extension_numbers_of_type(), 256),
                                     "' not found"), resp);
      }
      std::vector<const pb::FieldDescriptor*> exts;
      pool->FindAllExtensions(type, &exts);
      rv1::ExtensionNumberResponse* out = resp->mutable_all_extension_numbers_response();
      out->set_base_type_name(type->full_name());
      for (const pb::FieldDescriptor* f : exts) out->add_extension_number(f->number());
      return;
    }
    case rv1::ServerReflectionRequest::MESSAGE_REQUEST_NOT_SET:
      break;
  }
  rv1::ErrorResponse* e = resp->mutable_error_response();
  e->set_error_code(static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
  e->set_error_message("the request names no reflection operation");
}

}  // namespace zoom::server
