// HttpApiServer: the OpenAI-compatible HTTP API (docs/http-api.md, contract version 1) served
// with cpp-httplib on --http_port, in the same process and on the same EngineLoop and sessions
// as the gRPC service: GET /health, GET /v1/models, POST /v1/completions and
// /v1/chat/completions (whole or as server-sent events), and the session extension
// (POST /v1/sessions, GET/DELETE /v1/sessions/{id}, POST /v1/sessions/{id}/checkpoint,
// POST /v1/sessions/{id}/fork, POST /v1/sessions:restore), and llama.cpp's tokenizer endpoints (POST /tokenize, /detokenize,
// /apply-template; http_tokenize.cc).
//
// Ownership: borrows the loop and metrics (they must outlive it); owns the httplib server, its
// handler threads and its listening thread. Threading: each request runs on an httplib handler
// thread, which posts work to the loop (never blocking it) and waits for the answer; Start/Stop/
// SetServing are called by Server (one thread). Failures: Start returns Unavailable naming
// http_port when it cannot listen; request failures are OpenAI-shaped errors (ToHttpError).
#ifndef FLATSTATE_SERVER_HTTP_HTTP_SERVER_H_
#define FLATSTATE_SERVER_HTTP_HTTP_SERVER_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/core/metrics.h"
#include "server/core/options.h"
#include "server/loop/engine_loop.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace flatstate::server {

class HttpApiServer {
 public:
  // Handler threads: the most HTTP requests served at once (a stream holds one throughout).
  static constexpr int kHandlerThreads = 64;

  HttpApiServer(EngineLoop* loop, Metrics* metrics, const ServerOptions& options,
                std::string device_name);
  ~HttpApiServer();  // Stop()

  // Port 0 picks a free port; port() tells which. GET /health answers 503 until SetServing(true).
  absl::Status Start(const std::string& host, int port);
  // 200 or 503 ("draining") from GET /health.
  void SetServing(bool serving) { serving_.store(serving); }
  // Stops listening and waits for the handlers (streams end as the loop ends them).
  void Stop();
  int port() const { return port_; }

 private:
  void Route();
  bool Authorized(const httplib::Request& req, httplib::Response& res) const;
  void Reply(httplib::Response& res, const char* route, int status, const std::string& body) const;
  // `status` as an OpenAI error body; a chat request's params get their chat names.
  void ReplyError(httplib::Response& res, const char* route, const absl::Status& status,
                  bool chat = false) const;

  void Models(httplib::Response& res) const;
  void Completion(const httplib::Request& req, httplib::Response& res, bool chat);
  void CreateSession(const httplib::Request& req, httplib::Response& res);
  void GetSession(const std::string& id, httplib::Response& res);
  void DeleteSession(const std::string& id, httplib::Response& res);
  void Fork(const std::string& id, const httplib::Request& req, httplib::Response& res);
  void Checkpoint(const std::string& id, httplib::Response& res);
  void Restore(const httplib::Request& req, httplib::Response& res);
  void Tokenize(const httplib::Request& req, httplib::Response& res);
  void Detokenize(const httplib::Request& req, httplib::Response& res);
  void ApplyTemplate(const httplib::Request& req, httplib::Response& res);
  // `name`, or the default model when empty; NotFound naming `model` (HTTP 404) otherwise.
  absl::StatusOr<const LoadedModel*> FindModel(const std::string& name) const;

  EngineLoop* const loop_;
  Metrics* const metrics_;
  const ServerOptions options_;
  const std::string device_;
  std::atomic<bool> serving_{false};
  std::unique_ptr<httplib::Server> http_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace flatstate::server

#endif  // FLATSTATE_SERVER_HTTP_HTTP_SERVER_H_
