#include "server/grpc/reflection_service.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/echo.h"

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

class ReflectionReactor final
    : public grpc::ServerBidiReactor<rv1::ServerReflectionRequest, rv1::ServerReflectionResponse> {
 public:
  ReflectionReactor(const ReflectionV1Service* service, const absl::Status& refused)
      : service_(service) {
    if (!refused.ok()) {
      Finish(grpc::Status(static_cast<grpc::StatusCode>(refused.code()),
                          std::string(refused.message())));
      return;
    }
    StartRead(&req_);
  }
  void OnReadDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status::OK);
      return;
    }
    resp_.Clear();
    service_->Answer(req_, &sent_, &resp_);
    StartWrite(&resp_);
  }
  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the client went away"));
      return;
    }
    req_.Clear();
    StartRead(&req_);
  }
  void OnDone() override { delete this; }

 private:
  const ReflectionV1Service* service_;
  rv1::ServerReflectionRequest req_;
  rv1::ServerReflectionResponse resp_;
  std::vector<std::string> sent_;
};

}  // namespace

grpc::ServerBidiReactor<rv1::ServerReflectionRequest, rv1::ServerReflectionResponse>*
ReflectionV1Service::ServerReflectionInfo(grpc::CallbackServerContext* ctx) {
  return new ReflectionReactor(
      this, auth_ != nullptr ? auth_->Authorize(*ctx, Role::kRead) : absl::OkStatus());
}

void ReflectionV1Service::Answer(const rv1::ServerReflectionRequest& req,
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
