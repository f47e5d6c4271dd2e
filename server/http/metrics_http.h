// Serves Metrics::Render() at GET /metrics over plain HTTP (cpp-httplib) on its own thread.
//
// Start binds synchronously (so a busy port is a status, not a crash) and then listens on a
// background thread; Stop (also run by the destructor) stops and joins it. Start/Stop are not
// thread-safe with each other; the HTTP thread only reads the thread-safe Metrics.
#ifndef FLATSTATE_SERVER_HTTP_METRICS_HTTP_H_
#define FLATSTATE_SERVER_HTTP_METRICS_HTTP_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "server/core/metrics.h"

namespace httplib {
class Server;
}

namespace flatstate::server {

class MetricsHttpServer {
 public:
  explicit MetricsHttpServer(const Metrics* metrics);
  ~MetricsHttpServer();

  // Port 0 picks a free port; port() tells which.
  absl::Status Start(const std::string& host, int port);
  void Stop();
  int port() const { return port_; }

 private:
  const Metrics* metrics_;
  std::unique_ptr<httplib::Server> http_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace flatstate::server

#endif  // FLATSTATE_SERVER_HTTP_METRICS_HTTP_H_
