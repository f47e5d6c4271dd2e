// HttpApiServer: POST /tokenize, /detokenize and /apply-template (tokenize_api.h). They need no
// session and no engine step: the model's Tokenizer and ChatTemplate are immutable, so the
// handler thread answers itself.
#include <httplib.h>

#include "absl/strings/str_cat.h"
#include "server/http/chat_format.h"
#include "server/http/http_server.h"
#include "server/http/openai_request.h"
#include "server/http/openai_response.h"
#include "server/http/tokenize_api.h"

namespace flatstate::server {

absl::StatusOr<const LoadedModel*> HttpApiServer::FindModel(const std::string& name) const {
  const std::string& n = name.empty() ? loop_->models().default_model() : name;
  const LoadedModel* m = loop_->models().Find(n);
  if (m == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("model: model '", n, "' not found (loaded: ", loop_->models().Names(), ")"));
  }
  return m;
}

void HttpApiServer::Tokenize(const httplib::Request& req, httplib::Response& res) {
  constexpr char kRoute[] = "/tokenize";
  absl::StatusOr<TokenizeRequest> r = ParseTokenizeRequest(req.body);
  if (!r.ok()) return ReplyError(res, kRoute, r.status());
  absl::StatusOr<const LoadedModel*> m = FindModel(r->model);
  if (!m.ok()) return ReplyError(res, kRoute, m.status());
  absl::StatusOr<nlohmann::json> body = TokenizeJson((*m)->tokenizer(), *r);
  if (!body.ok()) return ReplyError(res, kRoute, body.status());
  Reply(res, kRoute, 200, Dump(*body));
}

void HttpApiServer::Detokenize(const httplib::Request& req, httplib::Response& res) {
  constexpr char kRoute[] = "/detokenize";
  absl::StatusOr<DetokenizeRequest> r = ParseDetokenizeRequest(req.body);
  if (!r.ok()) return ReplyError(res, kRoute, r.status());
  absl::StatusOr<const LoadedModel*> m = FindModel(r->model);
  if (!m.ok()) return ReplyError(res, kRoute, m.status());
  absl::StatusOr<nlohmann::json> body = DetokenizeJson((*m)->tokenizer(), *r);
  if (!body.ok()) return ReplyError(res, kRoute, body.status());
  Reply(res, kRoute, 200, Dump(*body));
}

void HttpApiServer::ApplyTemplate(const httplib::Request& req, httplib::Response& res) {
  constexpr char kRoute[] = "/apply-template";
  // The chat request's own parser: the same `messages` rules as /v1/chat/completions.
  absl::StatusOr<OpenAiRequest> r = ParseOpenAiRequest(req.body, /*chat=*/true);
  if (!r.ok()) return ReplyError(res, kRoute, r.status(), /*chat=*/true);
  absl::StatusOr<const LoadedModel*> m = FindModel(r->model);
  if (!m.ok()) return ReplyError(res, kRoute, m.status());
  absl::StatusOr<std::string> prompt = ChatPromptText(*r, (*m)->engine->model());
  if (!prompt.ok()) return ReplyError(res, kRoute, prompt.status(), /*chat=*/true);
  Reply(res, kRoute, 200, Dump(nlohmann::json{{"prompt", *prompt}}));
}

}  // namespace flatstate::server
