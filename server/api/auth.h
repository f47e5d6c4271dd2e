// Bearer-token authentication (--auth_token), shared by every service the server implements
// (Inference, reflection, the HTTP API). The gRPC health service is gRPC's own and stays open,
// and so does the HTTP API's GET /health.
//
// Stateless and thread-safe. Fails with Unauthenticated; the message never echoes the token.
#ifndef FLATSTATE_SERVER_API_AUTH_H_
#define FLATSTATE_SERVER_API_AUTH_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace flatstate::server {

// OK when `token` is empty (no authentication) or `authorization` (nullopt: absent) is exactly
// "Bearer <token>" (compared in constant time); else Unauthenticated. `where` names the
// transport's carrier in messages ("metadata", "header"); gRPC's wrapper is
// server/grpc/grpc_api.h's Authenticate.
absl::Status AuthenticateBearer(std::optional<absl::string_view> authorization,
                                const std::string& token, absl::string_view where);

}  // namespace flatstate::server

#endif  // FLATSTATE_SERVER_API_AUTH_H_
