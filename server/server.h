// Server: a complete flatstate server (models, engine loop, gRPC service with health and
// reflection (reflection_service.h, behind --auth_token like the Inference service), the
// OpenAI-compatible HTTP API (http_server.h), metrics endpoint) that can run inside a test process
// or behind server/main.cc.
//
// Create loads the models and opens the checkpoint dir (deleting temporary files left there by
// a crash, CheckpointStore::RemoveStaleTemporaries); Start binds the ports and starts the
// threads; Shutdown stops everything (in-flight streams end with UNAVAILABLE). Not thread-safe:
// call Create/Start/Shutdown from one thread; port() may then be read from any thread.
// Failures are statuses naming the flag or file involved.
#ifndef FLATSTATE_SERVER_SERVER_H_
#define FLATSTATE_SERVER_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "server/core/metrics.h"
#include "server/core/options.h"
#include "server/grpc/inference_service.h"
#include "server/grpc/reflection_service.h"
#include "server/http/http_server.h"
#include "server/http/metrics_http.h"
#include "server/loop/engine_loop.h"

namespace flatstate::server {

class Server {
 public:
  static absl::StatusOr<std::unique_ptr<Server>> Create(const ServerOptions& options);
  ~Server();  // Shutdown()

  absl::Status Start();
  void Shutdown();
  // Blocks until Shutdown is called from another thread (or the server dies).
  void Wait();

  int port() const { return port_; }
  int metrics_port() const { return metrics_http_ ? metrics_http_->port() : 0; }
  int http_port() const { return http_api_ ? http_api_->port() : 0; }
  const std::string& default_model() const { return loop_->default_model(); }
  Metrics* metrics() { return &metrics_; }

 private:
  Server() = default;

  ServerOptions options_;
  std::string device_name_;
  Metrics metrics_;
  std::unique_ptr<EngineLoop> loop_;
  std::unique_ptr<InferenceService> service_;
  std::unique_ptr<ReflectionService> reflection_;
  std::unique_ptr<grpc::Server> grpc_;
  std::unique_ptr<MetricsHttpServer> metrics_http_;
  std::unique_ptr<HttpApiServer> http_api_;
  // Shared session store: publishes metrics.store_up as the health status of service
  // kStoreHealthService once a second (the server itself stays SERVING: in-memory sessions go
  // on while the store is away).
  std::unique_ptr<std::thread> store_health_;
  absl::Notification stop_store_health_;
  int port_ = 0;
  bool started_ = false;
};

// The grpc.health.v1 service name whose status tells whether the shared session store answers
// (SERVING / NOT_SERVING); unknown (NOT_FOUND) for the directory store.
inline constexpr char kStoreHealthService[] = "flatstate.v1.SessionStore";

}  // namespace flatstate::server

#endif  // FLATSTATE_SERVER_SERVER_H_
