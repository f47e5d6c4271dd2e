#include "server/grpc/grpc_api.h"

#include <optional>

#include "absl/strings/string_view.h"
#include "server/api/auth.h"

namespace flatstate::server {

SamplingRequest ToSamplingRequest(const flatstate::v1::SamplingParams& p) {
  SamplingRequest s;
  s.temperature = p.temperature();
  s.top_p = p.top_p();
  s.top_k = p.top_k();
  s.seed = p.seed();
  return s;
}

GenerateRequest ToGenerateRequest(const flatstate::v1::GenerateRequest& req) {
  GenerateRequest g;
  g.model = req.model();
  g.session_id = req.session_id();
  g.prompt = req.prompt();
  g.prompt_tokens.assign(req.prompt_tokens().begin(), req.prompt_tokens().end());
  g.max_new_tokens = req.max_new_tokens();
  if (req.has_sampling()) g.sampling = ToSamplingRequest(req.sampling());
  g.stop.assign(req.stop().begin(), req.stop().end());
  g.ignore_eos = req.ignore_eos();
  g.stop_token_ids.assign(req.stop_token_ids().begin(), req.stop_token_ids().end());
  g.initial_state = req.initial_state();
  g.grammar = req.grammar();
  g.json_schema = req.json_schema();
  g.json_object = req.json_object();
  if (req.has_speculative()) g.speculative = req.speculative();
  g.max_draft_tokens = req.max_draft_tokens();
  return g;
}

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  grpc::StatusCode code;
  switch (status.code()) {
    case absl::StatusCode::kCancelled:
      code = grpc::StatusCode::CANCELLED;
      break;
    case absl::StatusCode::kUnknown:
      code = grpc::StatusCode::UNKNOWN;
      break;
    case absl::StatusCode::kInvalidArgument:
      code = grpc::StatusCode::INVALID_ARGUMENT;
      break;
    case absl::StatusCode::kDeadlineExceeded:
      code = grpc::StatusCode::DEADLINE_EXCEEDED;
      break;
    case absl::StatusCode::kNotFound:
      code = grpc::StatusCode::NOT_FOUND;
      break;
    case absl::StatusCode::kAlreadyExists:
      code = grpc::StatusCode::ALREADY_EXISTS;
      break;
    case absl::StatusCode::kPermissionDenied:
      code = grpc::StatusCode::PERMISSION_DENIED;
      break;
    case absl::StatusCode::kResourceExhausted:
      code = grpc::StatusCode::RESOURCE_EXHAUSTED;
      break;
    case absl::StatusCode::kFailedPrecondition:
      code = grpc::StatusCode::FAILED_PRECONDITION;
      break;
    case absl::StatusCode::kAborted:
      code = grpc::StatusCode::ABORTED;
      break;
    case absl::StatusCode::kOutOfRange:
      code = grpc::StatusCode::OUT_OF_RANGE;
      break;
    case absl::StatusCode::kUnimplemented:
      code = grpc::StatusCode::UNIMPLEMENTED;
      break;
    case absl::StatusCode::kInternal:
      code = grpc::StatusCode::INTERNAL;
      break;
    case absl::StatusCode::kUnavailable:
      code = grpc::StatusCode::UNAVAILABLE;
      break;
    case absl::StatusCode::kDataLoss:
      code = grpc::StatusCode::DATA_LOSS;
      break;
    case absl::StatusCode::kUnauthenticated:
      code = grpc::StatusCode::UNAUTHENTICATED;
      break;
    default:
      code = grpc::StatusCode::UNKNOWN;
      break;
  }
  return grpc::Status(code, std::string(status.message()));
}

std::string GrpcCodeName(grpc::StatusCode code) {
  // gRPC and absl share the canonical code numbering; absl owns the one name table.
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
}

absl::Status Authenticate(const grpc::ServerContextBase& ctx, const std::string& token) {
  const auto& md = ctx.client_metadata();
  auto it = md.find("authorization");
  std::optional<absl::string_view> value;
  if (it != md.end()) value = absl::string_view(it->second.data(), it->second.size());
  return AuthenticateBearer(value, token, "metadata");
}

}  // namespace flatstate::server
