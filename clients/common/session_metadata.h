// Session-affinity request metadata: every flatstate client (flatstate-cli, flatstate-loadtest;
// the Python client has its own copy of this rule in flatstate_client/client.py) sends the
// session id of a call that names one as "x-flatstate-session: <id>", so a proxy in front of
// several replicas can route a session's calls to one replica (deploy/nginx.conf hashes on it;
// docs/cluster.md). The header is a routing hint only: the server never reads it, and a call
// without it is served the same way (any replica loads the session from the shared store).
//
// Stateless free functions; thread-safe. Never fails: an id that is not a legal gRPC metadata
// value is simply not sent (the server then answers the request's own session_id field).
#ifndef FLATSTATE_CLIENTS_COMMON_SESSION_METADATA_H_
#define FLATSTATE_CLIENTS_COMMON_SESSION_METADATA_H_

#include <grpcpp/client_context.h>

#include <string_view>

namespace flatstate::clients {

// The metadata key (lower case, as HTTP/2 requires). nginx sees it as $http_x_flatstate_session.
inline constexpr char kSessionMetadataKey[] = "x-flatstate-session";

// True iff `session_id` may be sent as the value of an ASCII gRPC metadata entry: non-empty,
// at most 512 bytes, printable ASCII only (0x20..0x7e).
bool IsSendableSessionId(std::string_view session_id);

// Adds "x-flatstate-session: <session_id>" to `ctx` when IsSendableSessionId(session_id); adds
// nothing otherwise (no session: nothing to route on). Call before the RPC starts, once per
// ClientContext.
void AddSessionMetadata(std::string_view session_id, grpc::ClientContext* ctx);

}  // namespace flatstate::clients

#endif  // FLATSTATE_CLIENTS_COMMON_SESSION_METADATA_H_
