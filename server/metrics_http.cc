#include "server/metrics_http.h"

#include <httplib.h>

#include "absl/strings/str_cat.h"

namespace flatstate::server {

MetricsHttpServer::MetricsHttpServer(const Metrics* metrics) : metrics_(metrics) {}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

absl::Status MetricsHttpServer::Start(const std::string& host, int port) {
  http_ = std::make_unique<httplib::Server>();
  const Metrics* m = metrics_;
  http_->Get("/metrics", [m](const httplib::Request&, httplib::Response& res) {
    res.set_content(m->Render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  if (port == 0) {
    port_ = http_->bind_to_any_port(host.c_str());
    if (port_ < 0) port_ = 0;
  } else {
    port_ = http_->bind_to_port(host.c_str(), port) ? port : 0;
  }
  if (port_ == 0) {
    http_.reset();
    return absl::UnavailableError(absl::StrCat("metrics_port: cannot listen on ", host, ":", port));
  }
  thread_ = std::thread([this] { http_->listen_after_bind(); });
  return absl::OkStatus();
}

void MetricsHttpServer::Stop() {
  if (http_ != nullptr) http_->stop();
  if (thread_.joinable()) thread_.join();
  http_.reset();
}

}  // namespace flatstate::server
