// Bearer-token authentication (--auth_token), shared by every service the server implements
// (Inference, reflection). The gRPC health service is gRPC's own and stays open.
//
// Stateless and thread-safe. Fails with Unauthenticated; the message never echoes the token.
#ifndef FLATSTATE_SERVER_AUTH_H_
#define FLATSTATE_SERVER_AUTH_H_

#include <grpcpp/grpcpp.h>

#include <string>

#include "absl/status/status.h"

namespace flatstate::server {

// OK when `token` is empty (no authentication) or the call's metadata holds exactly
// "authorization: Bearer <token>" (compared in constant time); else Unauthenticated.
absl::Status Authenticate(const grpc::ServerContextBase& ctx, const std::string& token);

}  // namespace flatstate::server

#endif  // FLATSTATE_SERVER_AUTH_H_
