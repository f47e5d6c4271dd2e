#include "server/grpc/reflection_service.h"

#include <cstdio>
#include <set>

#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/descriptor.pb.h"
#include "server/grpc/grpc_api.h"

namespace flatstate::server {
namespace {

namespace rpb = grpc::reflection::v1alpha;
using google::protobuf::DescriptorPool;
using google::protobuf::FileDescriptor;

constexpr char kMethod[] = "ServerReflectionInfo";

// `file` and every file it imports, each once, dependencies first.
void AddFileAndDependencies(const FileDescriptor* file, std::set<std::string>* seen,
                            rpb::FileDescriptorResponse* out) {
  if (!seen->insert(file->name()).second) return;
  for (int i = 0; i < file->dependency_count(); ++i) {
    AddFileAndDependencies(file->dependency(i), seen, out);
  }
  google::protobuf::FileDescriptorProto proto;
  file->CopyTo(&proto);
  proto.SerializeToString(out->add_file_descriptor_proto());
}

void SetError(grpc::StatusCode code, std::string message, rpb::ServerReflectionResponse* resp) {
  resp->mutable_error_response()->set_error_code(code);
  resp->mutable_error_response()->set_error_message(std::move(message));
}

// One stream: read a request, write its answer, repeat until the client half-closes.
class Reactor final
    : public grpc::ServerBidiReactor<rpb::ServerReflectionRequest, rpb::ServerReflectionResponse> {
 public:
  Reactor(const ReflectionService* service, Metrics* metrics, const absl::Status& auth)
      : service_(service), metrics_(metrics) {
    if (!auth.ok()) {
      End(ToGrpcStatus(auth));
      return;
    }
    StartRead(&req_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the client half-closed (or went away): done
      End(grpc::Status::OK);
      return;
    }
    resp_ = service_->Answer(req_);
    StartWrite(&resp_);
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      End(grpc::Status(grpc::StatusCode::CANCELLED, "reflection: the client went away"));
      return;
    }
    StartRead(&req_);
  }

  void OnDone() override { delete this; }

 private:
  void End(const grpc::Status& status) {
    metrics_->RecordRequest(kMethod, GrpcCodeName(status.error_code()));
    Finish(status);
  }

  const ReflectionService* const service_;
  Metrics* const metrics_;
  rpb::ServerReflectionRequest req_;
  rpb::ServerReflectionResponse resp_;
};

}  // namespace

ReflectionService::ReflectionService(std::vector<std::string> services, std::string auth_token,
                                     Metrics* metrics)
    : services_(std::move(services)), auth_token_(std::move(auth_token)), metrics_(metrics) {}

grpc::ServerBidiReactor<rpb::ServerReflectionRequest, rpb::ServerReflectionResponse>*
ReflectionService::ServerReflectionInfo(grpc::CallbackServerContext* ctx) {
  return new Reactor(this, metrics_, Authenticate(*ctx, auth_token_));
}

rpb::ServerReflectionResponse ReflectionService::Answer(
    const rpb::ServerReflectionRequest& req) const {
  const DescriptorPool* pool = DescriptorPool::generated_pool();
  rpb::ServerReflectionResponse resp;
  resp.set_valid_host(req.host());
  *resp.mutable_original_request() = req;
  std::set<std::string> seen;
  switch (req.message_request_case()) {
    case rpb::ServerReflectionRequest::kListServices:
      for (const std::string& name : services_) {
        resp.mutable_list_services_response()->add_service()->set_name(name);
      }
      break;
    case rpb::ServerReflectionRequest::kFileByFilename: {
      const FileDescriptor* f = pool->FindFileByName(req.file_by_filename());
      if (f == nullptr) {
        SetError(grpc::StatusCode::NOT_FOUND,
                 absl::StrCat("file_by_filename: no file '", req.file_by_filename(), "'"), &resp);
      } else {
        AddFileAndDependencies(f, &seen, resp.mutable_file_descriptor_response());
      }
      break;
    }
    case rpb::ServerReflectionRequest::kFileContainingSymbol: {
      const FileDescriptor* f = pool->FindFileContainingSymbol(req.file_containing_symbol());
      if (f == nullptr) {
        SetError(
            grpc::StatusCode::NOT_FOUND,
            absl::StrCat("file_containing_symbol: no symbol '", req.file_containing_symbol(), "'"),
            &resp);
      } else {
        AddFileAndDependencies(f, &seen, resp.mutable_file_descriptor_response());
      }
      break;
    }
    case rpb::ServerReflectionRequest::kFileContainingExtension: {
      const rpb::ExtensionRequest& e = req.file_containing_extension();
      const google::protobuf::Descriptor* type = pool->FindMessageTypeByName(e.containing_type());
      const google::protobuf::FieldDescriptor* ext =
          type == nullptr ? nullptr : pool->FindExtensionByNumber(type, e.extension_number());
      if (ext == nullptr) {
        SetError(grpc::StatusCode::NOT_FOUND,
                 absl::StrCat("file_containing_extension: no extension ", e.extension_number(),
                              " of '", e.containing_type(), "'"),
                 &resp);
      } else {
        AddFileAndDependencies(ext->file(), &seen, resp.mutable_file_descriptor_response());
      }
      break;
    }
    case rpb::ServerReflectionRequest::kAllExtensionNumbersOfType: {
      const google::protobuf::Descriptor* type =
          pool->FindMessageTypeByName(req.all_extension_numbers_of_type());
      if (type == nullptr) {
        SetError(grpc::StatusCode::NOT_FOUND,
                 absl::StrCat("all_extension_numbers_of_type: no message type '",
                              req.all_extension_numbers_of_type(), "'"),
                 &resp);
      } else {
        std::vector<const google::protobuf::FieldDescriptor*> exts;
        pool->FindAllExtensions(type, &exts);
        rpb::ExtensionNumberResponse* out = resp.mutable_all_extension_numbers_response();
        out->set_base_type_name(type->full_name());
        for (const auto* x : exts) out->add_extension_number(x->number());
      }
      break;
    }
    case rpb::ServerReflectionRequest::MESSAGE_REQUEST_NOT_SET:
      SetError(grpc::StatusCode::UNIMPLEMENTED,
               "message_request: not set or not a request this server knows", &resp);
      break;
  }
  return resp;
}

}  // namespace flatstate::server
