#include "server/http/metrics_http.h"

#include <httplib.h>

#include "server/http/http_listen.h"

namespace flatstate::server {

MetricsHttpServer::MetricsHttpServer(const Metrics* metrics) : metrics_(metrics) {}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

absl::Status MetricsHttpServer::Start(const std::string& host, int port) {
  http_ = std::make_unique<httplib::Server>();
  const Metrics* m = metrics_;
  http_->Get("/metrics", [m](const httplib::Request&, httplib::Response& res) {
    res.set_content(m->Render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  absl::StatusOr<int> bound = ListenInBackground(http_.get(), host, port, "metrics_port", &thread_);
  if (!bound.ok()) {
    http_.reset();
    return bound.status();
  }
  port_ = *bound;
  return absl::OkStatus();
}

void MetricsHttpServer::Stop() {
  if (http_ != nullptr) http_->stop();
  if (thread_.joinable()) thread_.join();
  http_.reset();
}

}  // namespace flatstate::server
