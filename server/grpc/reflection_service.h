// ReflectionService: gRPC server reflection (grpc.reflection.v1alpha.ServerReflection, what
// grpcurl and grpc_cli use) on the callback API, answering from protobuf's generated descriptor
// pool. flatstate serves it itself, not through gRPC's reflection plugin, so that it requires
// --auth_token like the Inference service (gRPC interceptors cannot reject a call).
//
// Answers list_services (the names given to the constructor), file_by_filename,
// file_containing_symbol and file_containing_extension (each with the file's transitive
// dependencies) and all_extension_numbers_of_type; unknown names get an error_response NOT_FOUND
// on the stream, which stays open. A call without the token ends at once with UNAUTHENTICATED and
// no response. Thread-safe and immutable after construction; `metrics` must outlive it.
#ifndef FLATSTATE_SERVER_GRPC_REFLECTION_SERVICE_H_
#define FLATSTATE_SERVER_GRPC_REFLECTION_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <string>
#include <vector>

#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "server/core/metrics.h"

namespace flatstate::server {

class ReflectionService final
    : public grpc::reflection::v1alpha::ServerReflection::CallbackService {
 public:
  // `services`: the fully qualified names list_services reports. `auth_token` empty: no auth.
  ReflectionService(std::vector<std::string> services, std::string auth_token, Metrics* metrics);

  grpc::ServerBidiReactor<grpc::reflection::v1alpha::ServerReflectionRequest,
                          grpc::reflection::v1alpha::ServerReflectionResponse>*
  ServerReflectionInfo(grpc::CallbackServerContext* ctx) override;

  // The response to one request (exposed for tests).
  grpc::reflection::v1alpha::ServerReflectionResponse Answer(
      const grpc::reflection::v1alpha::ServerReflectionRequest& req) const;

 private:
  const std::vector<std::string> services_;
  const std::string auth_token_;
  Metrics* const metrics_;
};

}  // namespace flatstate::server

#endif  // FLATSTATE_SERVER_GRPC_REFLECTION_SERVICE_H_
