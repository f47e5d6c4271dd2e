// HttpApiServer: start/stop, routing, auth, errors, health, models and the session endpoints.
// The completion endpoints are in http_completions.cc.
#include "server/http/http_server.h"

#include <httplib.h>

#include "absl/strings/str_cat.h"
#include "server/api/auth.h"
#include "server/api/status_mapping.h"
#include "server/api/validation.h"
#include "server/http/http_listen.h"
#include "server/http/openai_request.h"
#include "server/http/openai_response.h"
#include "server/loop/loop_await.h"

namespace flatstate::server {

namespace {

const char* ReasonPhrase(int status) {
  switch (status) {
    case 404:
      return "no such endpoint";
    case 405:
      return "method not allowed";
    case 413:
      return "body: larger than --max_http_body_bytes";
    default:
      return "bad request";
  }
}

}  // namespace

HttpApiServer::HttpApiServer(EngineLoop* loop, Metrics* metrics, const ServerOptions& options,
                             std::string device_name)
    : loop_(loop), metrics_(metrics), options_(options), device_(std::move(device_name)) {}

HttpApiServer::~HttpApiServer() { Stop(); }

absl::Status HttpApiServer::Start(const std::string& host, int port) {
  http_ = std::make_unique<httplib::Server>();
  http_->new_task_queue = [] { return new httplib::ThreadPool(kHandlerThreads); };
  http_->set_payload_max_length(static_cast<size_t>(options_.max_http_body_bytes));
  Route();
  absl::StatusOr<int> bound = ListenInBackground(http_.get(), host, port, "http_port", &thread_);
  if (!bound.ok()) {
    http_.reset();
    return bound.status();
  }
  port_ = *bound;
  return absl::OkStatus();
}

void HttpApiServer::Stop() {
  serving_.store(false);
  if (http_ != nullptr) http_->stop();
  if (thread_.joinable()) thread_.join();
  http_.reset();
}

void HttpApiServer::Reply(httplib::Response& res, const char* route, int status,
                          const std::string& body) const {
  res.status = status;
  res.set_content(body, "application/json");
  metrics_->RecordRequest(route, absl::StrCat("HTTP_", status));
}

void HttpApiServer::ReplyError(httplib::Response& res, const char* route,
                               const absl::Status& status, bool chat) const {
  HttpError e = ToHttpError(status);
  e.param = RenameParamForHttp(e.param, chat);
  if (options_.log_requests) {
    std::fprintf(stderr, "[flatstate] HTTP %s status=%d error=\"%s\"\n", route, e.http_status,
                 e.message.c_str());
  }
  Reply(res, route, e.http_status, Dump(ErrorJson(e)));
}

bool HttpApiServer::Authorized(const httplib::Request& req, httplib::Response& res) const {
  // get_header_value returns a std::string (cpp-httplib 0.11): keep it alive for the check.
  const std::string header =
      req.has_header("Authorization") ? req.get_header_value("Authorization") : std::string();
  std::optional<absl::string_view> value;
  if (req.has_header("Authorization")) value = header;
  absl::Status s = AuthenticateBearer(value, options_.auth_token, "header");
  if (s.ok()) return true;
  res.set_header("WWW-Authenticate", "Bearer");
  ReplyError(res, req.path.c_str(), s);
  return false;
}

void HttpApiServer::Route() {
  httplib::Server& h = *http_;
  h.set_error_handler(
      httplib::Server::HandlerWithResponse([](const httplib::Request&, httplib::Response& res) {
        // Handlers write their own errors; this covers what httplib refuses itself (unknown paths,
        // bodies over the limit, malformed requests).
        if (res.body.empty()) {
          HttpError e;
          e.http_status = res.status;
          e.type = "invalid_request_error";
          e.code = res.status == 404 ? "not_found" : "invalid_argument";
          e.message = ReasonPhrase(res.status);
          if (res.status == 413) e.param = "body";
          res.set_content(Dump(ErrorJson(e)), "application/json");
        }
        return httplib::Server::HandlerResponse::Handled;
      }));
  h.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    HttpError e = ToHttpError(absl::InternalError("internal error"));
    res.status = e.http_status;
    res.set_content(Dump(ErrorJson(e)), "application/json");
  });
  h.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    const bool up = serving_.load();
    res.status = up ? 200 : 503;
    res.set_content(up ? R"({"status":"ok"})" : R"({"status":"unavailable"})", "application/json");
  });
  h.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
    if (Authorized(req, res)) Models(res);
  });
  h.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    if (Authorized(req, res)) Completion(req, res, /*chat=*/false);
  });
  h.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    if (Authorized(req, res)) Completion(req, res, /*chat=*/true);
  });
  h.Post("/v1/sessions", [this](const httplib::Request& req, httplib::Response& res) {
    if (Authorized(req, res)) CreateSession(req, res);
  });
  h.Post("/v1/sessions:restore", [this](const httplib::Request& req, httplib::Response& res) {
    if (Authorized(req, res)) Restore(req, res);
  });
  h.Get(R"(/v1/sessions/([^/:]+))", [this](const httplib::Request& req, httplib::Response& res) {
    if (Authorized(req, res)) GetSession(req.matches[1], res);
  });
  h.Delete(R"(/v1/sessions/([^/:]+))", [this](const httplib::Request& req, httplib::Response& res) {
    if (Authorized(req, res)) DeleteSession(req.matches[1], res);
  });
  h.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
    if (Authorized(req, res)) Tokenize(req, res);
  });
  h.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
    if (Authorized(req, res)) Detokenize(req, res);
  });
  h.Post("/apply-template", [this](const httplib::Request& req, httplib::Response& res) {
    if (Authorized(req, res)) ApplyTemplate(req, res);
  });
  h.Post(R"(/v1/sessions/([^/:]+)/checkpoint)",
         [this](const httplib::Request& req, httplib::Response& res) {
           if (Authorized(req, res)) Checkpoint(req.matches[1], res);
         });
  h.Post(R"(/v1/sessions/([^/:]+)/fork)",
         [this](const httplib::Request& req, httplib::Response& res) {
           if (Authorized(req, res)) Fork(req.matches[1], req, res);
         });
}

void HttpApiServer::Models(httplib::Response& res) const {
  Reply(res, "/v1/models", 200, Dump(ModelsJson(loop_->models(), device_)));
}

void HttpApiServer::CreateSession(const httplib::Request& req, httplib::Response& res) {
  constexpr char kRoute[] = "/v1/sessions";
  absl::StatusOr<SessionRequest> r = ParseSessionRequest(req.body);
  if (r.ok() && !r->model.empty() && loop_->models().Find(r->model) == nullptr) {
    r = absl::NotFoundError(absl::StrCat("model: model '", r->model,
                                         "' not found (loaded: ", loop_->models().Names(), ")"));
  }
  if (!r.ok()) return ReplyError(res, kRoute, r.status());
  absl::StatusOr<SessionInfo> info = Await<SessionInfo>(
      [&](auto done) { loop_->CreateSession(r->model, r->sampling, std::move(done)); });
  if (!info.ok()) return ReplyError(res, kRoute, info.status());
  Reply(res, kRoute, 200, Dump(SessionJson(*info)));
}

void HttpApiServer::GetSession(const std::string& id, httplib::Response& res) {
  constexpr char kRoute[] = "/v1/sessions/{id}";
  if (absl::Status s = ValidateSessionId(id); !s.ok()) return ReplyError(res, kRoute, s);
  absl::StatusOr<SessionInfo> info =
      Await<SessionInfo>([&](auto done) { loop_->GetSession(id, std::move(done)); });
  if (!info.ok()) return ReplyError(res, kRoute, info.status());
  Reply(res, kRoute, 200, Dump(SessionJson(*info)));
}

void HttpApiServer::DeleteSession(const std::string& id, httplib::Response& res) {
  constexpr char kRoute[] = "/v1/sessions/{id}";
  if (absl::Status s = ValidateSessionId(id); !s.ok()) return ReplyError(res, kRoute, s);
  absl::StatusOr<bool> ok = Await<bool>([&](std::function<void(absl::StatusOr<bool>)> done) {
    loop_->DeleteSession(id, [done = std::move(done)](absl::Status s) {
      done(s.ok() ? absl::StatusOr<bool>(true) : absl::StatusOr<bool>(s));
    });
  });
  if (!ok.ok()) return ReplyError(res, kRoute, ok.status());
  Reply(res, kRoute, 200,
        Dump(nlohmann::json{{"id", id}, {"object", "session.deleted"}, {"deleted", true}}));
}

void HttpApiServer::Checkpoint(const std::string& id, httplib::Response& res) {
  constexpr char kRoute[] = "/v1/sessions/{id}/checkpoint";
  if (absl::Status s = ValidateSessionId(id); !s.ok()) return ReplyError(res, kRoute, s);
  absl::StatusOr<CheckpointInfo> c =
      Await<CheckpointInfo>([&](auto done) { loop_->CheckpointSession(id, std::move(done)); });
  if (!c.ok()) return ReplyError(res, kRoute, c.status());
  Reply(res, kRoute, 200, Dump(CheckpointJson(*c)));
}

void HttpApiServer::Fork(const std::string& id, const httplib::Request& req,
                         httplib::Response& res) {
  constexpr char kRoute[] = "/v1/sessions/{id}/fork";
  absl::StatusOr<SessionRequest> r = ParseSessionRequest(req.body);
  if (absl::Status s = ValidateSessionId(id); !s.ok()) r = s;
  if (r.ok() && !r->model.empty()) {
    r = absl::InvalidArgumentError("model: a fork runs its original's model; omit model");
  }
  if (r.ok() && (!r->data.empty() || !r->checkpoint_id.empty())) {
    r = absl::InvalidArgumentError(absl::StrCat(
        r->data.empty() ? "checkpoint_id" : "data",
        ": a fork copies the live session; restore a checkpoint with /v1/sessions:restore"));
  }
  if (!r.ok()) return ReplyError(res, kRoute, r.status());
  absl::StatusOr<SessionInfo> info = Await<SessionInfo>(
      [&](auto done) { loop_->ForkSession(id, r->sampling, std::move(done)); });
  if (!info.ok()) return ReplyError(res, kRoute, info.status());
  Reply(res, kRoute, 200, Dump(SessionJson(*info)));
}

void HttpApiServer::Restore(const httplib::Request& req, httplib::Response& res) {
  constexpr char kRoute[] = "/v1/sessions:restore";
  absl::StatusOr<SessionRequest> r = ParseSessionRequest(req.body);
  if (r.ok() && r->data.empty() == r->checkpoint_id.empty()) {
    r = absl::InvalidArgumentError("data: set data (base64) or checkpoint_id");
  }
  if (r.ok() && !r->checkpoint_id.empty()) {
    absl::StatusOr<std::string> blob = ReadCheckpointById(r->checkpoint_id, loop_->store());
    if (blob.ok())
      r->data = std::move(*blob);
    else
      r = blob.status();
  }
  if (!r.ok()) return ReplyError(res, kRoute, r.status());
  absl::StatusOr<SessionInfo> info = Await<SessionInfo>(
      [&](auto done) { loop_->RestoreSession(std::move(r->data), std::move(done)); });
  if (!info.ok()) return ReplyError(res, kRoute, info.status());
  Reply(res, kRoute, 200, Dump(SessionJson(*info)));
}

}  // namespace flatstate::server
