#include "server/api/status_mapping.h"

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"

namespace flatstate::server {

namespace {

// The field name a validation message starts with: an identifier (with '.', '[', ']' and digits)
// followed by ':', " =" or " must"; else empty.
std::string LeadingParam(absl::string_view m) {
  size_t i = 0;
  while (i < m.size() && (absl::ascii_isalnum(static_cast<unsigned char>(m[i])) || m[i] == '_' ||
                          m[i] == '.' || m[i] == '[' || m[i] == ']')) {
    ++i;
  }
  if (i == 0 || !absl::ascii_islower(static_cast<unsigned char>(m[0]))) return "";
  const absl::string_view rest = m.substr(i);
  if (absl::StartsWith(rest, ":") || absl::StartsWith(rest, " =") ||
      absl::StartsWith(rest, " must") || absl::StartsWith(rest, " exceeds") ||
      absl::StartsWith(rest, " and ")) {
    return std::string(m.substr(0, i));
  }
  return "";
}

}  // namespace

HttpError ToHttpError(const absl::Status& status) {
  HttpError e;
  if (status.ok()) return e;
  e.message = std::string(status.message());
  e.code = absl::AsciiStrToLower(absl::StatusCodeToString(status.code()));
  e.type = "invalid_request_error";
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      e.http_status = 400;
      break;
    case absl::StatusCode::kUnauthenticated:
      e.http_status = 401;
      e.type = "authentication_error";
      break;
    case absl::StatusCode::kPermissionDenied:
      e.http_status = 403;
      e.type = "permission_error";
      break;
    case absl::StatusCode::kNotFound:
      e.http_status = 404;
      e.type = "not_found_error";
      break;
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kAlreadyExists:
      e.http_status = 409;
      e.type = "conflict_error";
      break;
    case absl::StatusCode::kResourceExhausted:
      e.http_status = 429;
      e.type = "rate_limit_error";
      break;
    case absl::StatusCode::kCancelled:
      e.http_status = 499;
      break;
    case absl::StatusCode::kUnimplemented:
      e.http_status = 501;
      e.type = "server_error";
      break;
    case absl::StatusCode::kUnavailable:
      e.http_status = 503;
      e.type = "server_error";
      break;
    case absl::StatusCode::kDeadlineExceeded:
      e.http_status = 504;
      e.type = "server_error";
      break;
    default:
      e.http_status = 500;
      e.type = "server_error";
      break;
  }
  if (e.http_status < 500) e.param = LeadingParam(e.message);
  return e;
}

}  // namespace flatstate::server
