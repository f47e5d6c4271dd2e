// absl::Status -> what the HTTP API returns: an HTTP status with an OpenAI-shaped error
// (ToHttpError, docs/http-api.md). Its gRPC twin, ToGrpcStatus, is in server/grpc/grpc_api.h;
// this header includes no gRPC.
//
// Stateless and thread-safe; never fails. The message is kept as is. An OK status maps to HTTP
// 200.
#ifndef FLATSTATE_SERVER_API_STATUS_MAPPING_H_
#define FLATSTATE_SERVER_API_STATUS_MAPPING_H_

#include <string>

#include "absl/status/status.h"

namespace flatstate::server {

// An error as the HTTP API returns it: the status line and the body
// {"error": {"message", "type", "param", "code"}}.
struct HttpError {
  int http_status = 200;
  std::string type;     // OpenAI's error type: "invalid_request_error", "server_error", ...
  std::string code;     // the status code's lower-case name: "not_found", "resource_exhausted"
  std::string param;    // the request field the message starts with ("prompt: ..."), or empty
  std::string message;  // the status message
};

// InvalidArgument/OutOfRange 400, Unauthenticated 401, PermissionDenied 403, NotFound 404,
// FailedPrecondition (session busy)/Aborted (lease held elsewhere)/AlreadyExists 409,
// ResourceExhausted 429, Cancelled 499, Unimplemented 501, Unavailable 503, DeadlineExceeded 504,
// anything else 500. `param` is the leading field name of a 4xx message ("max_new_tokens must
// be > 0", "stop[0]: ...", "sampling.top_p = ..."); transports may rename it to their own field.
HttpError ToHttpError(const absl::Status& status);

}  // namespace flatstate::server

#endif  // FLATSTATE_SERVER_API_STATUS_MAPPING_H_
