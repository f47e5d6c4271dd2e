#include "server/server.h"

#include <grpcpp/health_check_service_interface.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "engine/util/status_macros.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "server/core/model_registry.h"
#include "server/sessions/session_store_factory.h"
#include "server/store/checkpoint_store.h"
#include "server/store/session_store.h"

namespace flatstate::server {
namespace {

absl::StatusOr<std::string> ReadText(const std::string& path, absl::string_view flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(flag, ": cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Server>> Server::Create(const ServerOptions& options) {
  auto s = std::unique_ptr<Server>(new Server());
  s->options_ = options;
  if (options.max_draft_tokens < 1 || options.max_draft_tokens > 32) {
    return absl::InvalidArgumentError("max_draft_tokens must be in [1, 32]");
  }
  if (options.step_token_budget < 1) {
    return absl::InvalidArgumentError("step_token_budget must be >= 1");
  }
  if (options.max_sessions < 1) return absl::InvalidArgumentError("max_sessions must be >= 1");
  if (options.tls_cert.empty() != options.tls_key.empty()) {
    return absl::InvalidArgumentError("tls_cert and tls_key must be given together");
  }
  if (options.session_lease < absl::Milliseconds(100) || options.session_ttl <= options.session_lease) {
    return absl::InvalidArgumentError(
        "session_lease must be at least 100ms and session_ttl longer than session_lease");
  }
  ASSIGN_OR_RETURN(Device device, ParseDevice(options.device));
  s->device_name_ = std::string(DeviceName(device));
  EngineOptions eo;
  eo.device = device;
  eo.threads = options.threads;
  eo.kv_blocks = options.kv_blocks;
  eo.batch_invariant = options.batch_invariant;
  eo.prefix_cache_bytes = options.prefix_cache_bytes;
  ASSIGN_OR_RETURN(eo.weight_dtype, ParseWeightDtypeOption(options.weight_dtype));
  ASSIGN_OR_RETURN(eo.head_dtype, ParseWeightDtypeOption(options.head_dtype, "head_dtype"));
  ASSIGN_OR_RETURN(eo.kv_dtype, ParseKvDtype(options.kv_dtype));
  ASSIGN_OR_RETURN(ModelRegistry models,
                   ModelRegistry::Load(options.models_dir, eo, options.default_model));
  for (const std::string& note : models.notes()) std::fprintf(stderr, "[flatstate] %s\n", note.c_str());
  if (!options.draft_model.empty() && models.Find(options.draft_model) == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("draft_model: no model '", options.draft_model,
                                                   "' loaded from ", options.models_dir));
  }
  if (s->options_.replica_id.empty()) {
    char host[256] = {0};
    if (gethostname(host, sizeof(host) - 1) != 0) std::snprintf(host, sizeof(host), "flatstate");
    s->options_.replica_id = absl::StrCat(host, ":", options.port, ":", getpid());
  }
  SessionStoreConfig store_config;
  store_config.spec = options.session_store.empty() ? absl::StrCat("dir:", options.checkpoint_dir)
                                                    : options.session_store;
  store_config.password_file = options.redis_password_file;
  store_config.session_ttl = options.session_ttl;
  store_config.lease = options.session_lease;
  store_config.replica_id = s->options_.replica_id;
  store_config.optional = options.session_store_optional;
  ASSIGN_OR_RETURN(std::unique_ptr<SessionStore> store, OpenSessionStore(store_config));
  s->loop_ = std::make_unique<EngineLoop>(std::move(models), std::move(store), s->options_,
                                          &s->metrics_);
  s->service_ = std::make_unique<InferenceService>(s->loop_.get(), &s->metrics_, s->options_,
                                                   s->device_name_);
  // Naming a health message keeps health.pb.cc linked, so reflection can describe the health
  // service too (gRPC's built-in health service does not use protobuf's generated pool).
  (void)grpc::health::v1::HealthCheckRequest::descriptor();
  s->reflection_ = std::make_unique<ReflectionService>(
      std::vector<std::string>{flatstate::v1::Inference::service_full_name(),
                               grpc::health::v1::Health::service_full_name(),
                               grpc::reflection::v1alpha::ServerReflection::service_full_name()},
      options.auth_token, &s->metrics_);
  return s;
}

Server::~Server() { Shutdown(); }

absl::Status Server::Start() {
  std::shared_ptr<grpc::ServerCredentials> creds = grpc::InsecureServerCredentials();
  if (!options_.tls_cert.empty()) {
    grpc::SslServerCredentialsOptions ssl;
    grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
    ASSIGN_OR_RETURN(pair.private_key, ReadText(options_.tls_key, "tls_key"));
    ASSIGN_OR_RETURN(pair.cert_chain, ReadText(options_.tls_cert, "tls_cert"));
    ssl.pem_key_cert_pairs.push_back(std::move(pair));
    creds = grpc::SslServerCredentials(ssl);
  }
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat(options_.host, ":", options_.port), creds, &port_);
  builder.RegisterService(service_.get());
  builder.RegisterService(reflection_.get());
  builder.SetMaxReceiveMessageSize(options_.max_receive_message_bytes);
  builder.SetMaxSendMessageSize(options_.max_receive_message_bytes);
  loop_->Start();
  grpc_ = builder.BuildAndStart();
  if (grpc_ == nullptr || port_ == 0) {
    loop_->Stop();
    grpc_.reset();
    return absl::UnavailableError(
        absl::StrCat("port: cannot listen on ", options_.host, ":", options_.port));
  }
  if (options_.metrics_port > 0 || options_.metrics_any_port) {
    metrics_http_ = std::make_unique<MetricsHttpServer>(&metrics_);
    absl::Status st = metrics_http_->Start(options_.metrics_host,
                                           options_.metrics_any_port ? 0 : options_.metrics_port);
    if (!st.ok()) {
      metrics_http_.reset();
      Shutdown();
      return st;
    }
  }
  if (options_.http_port > 0 || options_.http_any_port) {
    http_api_ = std::make_unique<HttpApiServer>(loop_.get(), &metrics_, options_, device_name_);
    absl::Status st =
        http_api_->Start(options_.host, options_.http_any_port ? 0 : options_.http_port);
    if (!st.ok()) {
      http_api_.reset();
      Shutdown();
      return st;
    }
    http_api_->SetServing(true);
  }
  if (loop_->store().shared()) {
    grpc::HealthCheckServiceInterface* health = grpc_->GetHealthCheckService();
    store_health_ = std::make_unique<std::thread>([this, health] {
      do {
        health->SetServingStatus(kStoreHealthService, metrics_.store_up.load() != 0);
      } while (!stop_store_health_.WaitForNotificationWithTimeout(absl::Seconds(1)));
    });
  }
  started_ = true;
  return absl::OkStatus();
}

void Server::Shutdown() {
  if (store_health_ != nullptr) {
    stop_store_health_.Notify();
    store_health_->join();
    store_health_.reset();
  }
  if (http_api_ != nullptr) http_api_->SetServing(false);  // GET /health: 503 from now on
  if (loop_ != nullptr) loop_->BeginShutdown();
  if (grpc_ != nullptr) {
    grpc_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  }
  // HTTP handlers wait for the loop's answers: stop them while it still runs.
  if (http_api_ != nullptr) http_api_->Stop();
  if (loop_ != nullptr) loop_->Stop();
  if (grpc_ != nullptr) {
    grpc_->Wait();
    grpc_.reset();
  }
  if (metrics_http_ != nullptr) metrics_http_->Stop();
  started_ = false;
}

void Server::Wait() {
  if (grpc_ != nullptr) grpc_->Wait();
}

}  // namespace flatstate::server
