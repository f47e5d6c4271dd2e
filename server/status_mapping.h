// The one place that turns an absl::Status into a grpc::Status.
//
// Stateless and thread-safe. Codes map one to one (absl and gRPC share the numbering); the message
// is kept as is. An OK status maps to grpc::Status::OK.
#ifndef FLATSTATE_SERVER_STATUS_MAPPING_H_
#define FLATSTATE_SERVER_STATUS_MAPPING_H_

#include <grpcpp/support/status.h>

#include <string>

#include "absl/status/status.h"

namespace flatstate::server {

grpc::Status ToGrpcStatus(const absl::Status& status);

// Canonical upper-case name of a status code ("OK", "INVALID_ARGUMENT"...), for logs/metrics.
std::string GrpcCodeName(grpc::StatusCode code);

}  // namespace flatstate::server

#endif  // FLATSTATE_SERVER_STATUS_MAPPING_H_
