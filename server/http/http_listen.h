// Binding a cpp-httplib server and serving it on a background thread: shared by the metrics
// endpoint (metrics_http.h) and the HTTP API (http_server.h).
#ifndef FLATSTATE_SERVER_HTTP_HTTP_LISTEN_H_
#define FLATSTATE_SERVER_HTTP_HTTP_LISTEN_H_

#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace httplib {
class Server;
}

namespace flatstate::server {

// Binds `http` to host:port (port 0: a free port) synchronously, so a busy port is a status, then
// starts `*thread` serving it. Returns the bound port, or Unavailable "<flag>: cannot listen on
// host:port" (nothing started). `http` must outlive the thread: stop and join it first.
absl::StatusOr<int> ListenInBackground(httplib::Server* http, const std::string& host, int port,
                                       absl::string_view flag, std::thread* thread);

}  // namespace flatstate::server

#endif  // FLATSTATE_SERVER_HTTP_HTTP_LISTEN_H_
