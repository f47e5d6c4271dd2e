// InferenceService: the flatstate.v1.Inference gRPC service on the callback API.
//
// Transport threads only authenticate, validate and convert; everything touching a session is
// posted to the EngineLoop, which completes the call (Finish) from its thread. ListModels is
// answered inline (model metadata is immutable). Thread-safe; never blocks in a handler.
// `loop` and `metrics` must outlive the service.
#ifndef FLATSTATE_SERVER_GRPC_INFERENCE_SERVICE_H_
#define FLATSTATE_SERVER_GRPC_INFERENCE_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <string>

#include "absl/time/time.h"
#include "flatstate/v1/inference.grpc.pb.h"
#include "server/core/metrics.h"
#include "server/core/options.h"
#include "server/loop/engine_loop.h"

namespace flatstate::server {

class InferenceService final : public flatstate::v1::Inference::CallbackService {
 public:
  InferenceService(EngineLoop* loop, Metrics* metrics, const ServerOptions& options,
                   std::string device_name);

  grpc::ServerWriteReactor<flatstate::v1::GenerateResponse>* Generate(
      grpc::CallbackServerContext* ctx, const flatstate::v1::GenerateRequest* req) override;
  grpc::ServerUnaryReactor* CreateSession(grpc::CallbackServerContext* ctx,
                                          const flatstate::v1::CreateSessionRequest* req,
                                          flatstate::v1::Session* resp) override;
  grpc::ServerUnaryReactor* GetSession(grpc::CallbackServerContext* ctx,
                                       const flatstate::v1::GetSessionRequest* req,
                                       flatstate::v1::Session* resp) override;
  grpc::ServerUnaryReactor* DeleteSession(grpc::CallbackServerContext* ctx,
                                          const flatstate::v1::DeleteSessionRequest* req,
                                          flatstate::v1::DeleteSessionResponse* resp) override;
  grpc::ServerUnaryReactor* CheckpointSession(grpc::CallbackServerContext* ctx,
                                              const flatstate::v1::CheckpointSessionRequest* req,
                                              flatstate::v1::Checkpoint* resp) override;
  grpc::ServerUnaryReactor* RestoreSession(grpc::CallbackServerContext* ctx,
                                           const flatstate::v1::RestoreSessionRequest* req,
                                           flatstate::v1::Session* resp) override;
  grpc::ServerUnaryReactor* ForkSession(grpc::CallbackServerContext* ctx,
                                        const flatstate::v1::ForkSessionRequest* req,
                                        flatstate::v1::Session* resp) override;
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* ctx,
                                       const flatstate::v1::ListModelsRequest* req,
                                       flatstate::v1::ListModelsResponse* resp) override;
  grpc::ServerUnaryReactor* GetStats(grpc::CallbackServerContext* ctx,
                                     const flatstate::v1::GetStatsRequest* req,
                                     flatstate::v1::ServerStats* resp) override;

 private:
  // OK, or Unauthenticated when --auth_token is set and the metadata lacks
  // "authorization: Bearer <token>".
  absl::Status Authenticate(const grpc::CallbackServerContext* ctx) const;
  // Finishes a unary call, records the request metric and logs errors.
  void Done(grpc::ServerUnaryReactor* r, const char* method, const absl::Status& s,
            absl::Time start) const;

  EngineLoop* const loop_;
  Metrics* const metrics_;
  const ServerOptions options_;
  const std::string device_;
  const absl::Time started_ = absl::Now();
};

}  // namespace flatstate::server

#endif  // FLATSTATE_SERVER_GRPC_INFERENCE_SERVICE_H_
