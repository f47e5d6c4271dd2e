// The gRPC side of server/api: flatstate.v1 messages -> the transport-neutral requests
// (server/api/validation.h), absl::Status -> grpc::Status (ToGrpcStatus: the one place that
// mapping is written), and the bearer-token check on a call's metadata.
//
// Stateless functions; thread-safe. The conversions never fail (validation does, afterwards);
// Authenticate fails with Unauthenticated and never echoes the token.
#ifndef FLATSTATE_SERVER_GRPC_GRPC_API_H_
#define FLATSTATE_SERVER_GRPC_GRPC_API_H_

#include <grpcpp/grpcpp.h>

#include <string>

#include "absl/status/status.h"
#include "flatstate/v1/inference.pb.h"
#include "server/api/validation.h"

namespace flatstate::server {

// Field by field; nothing is checked here.
SamplingRequest ToSamplingRequest(const flatstate::v1::SamplingParams& p);
GenerateRequest ToGenerateRequest(const flatstate::v1::GenerateRequest& req);

// gRPC codes map one to one (absl and gRPC share the numbering); the message is kept as is. An OK
// status maps to grpc::Status::OK.
grpc::Status ToGrpcStatus(const absl::Status& status);

// Canonical upper-case name of a status code ("OK", "INVALID_ARGUMENT"...), for logs/metrics.
std::string GrpcCodeName(grpc::StatusCode code);

// OK when `token` is empty (no authentication) or the call's metadata holds exactly
// "authorization: Bearer <token>" (AuthenticateBearer, server/api/auth.h); else Unauthenticated.
absl::Status Authenticate(const grpc::ServerContextBase& ctx, const std::string& token);

}  // namespace flatstate::server

#endif  // FLATSTATE_SERVER_GRPC_GRPC_API_H_
