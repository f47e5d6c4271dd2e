// HttpApiServer: POST /v1/completions and /v1/chat/completions, whole or streamed as server-sent
// events (docs/http-api.md). The request becomes a GenerateJob (openai_request.h) that runs on
// the engine loop like a gRPC Generate; an HttpStreamSink carries its output back to this
// handler thread.
#include <httplib.h>

#include <memory>

#include "absl/strings/str_cat.h"
#include "server/api/validation.h"
#include "server/http/http_peer.h"
#include "server/http/http_server.h"
#include "server/http/http_stream_sink.h"
#include "server/http/openai_request.h"
#include "server/http/openai_response.h"
#include "server/loop/loop_await.h"

namespace flatstate::server {
namespace {

constexpr absl::Duration kPoll = absl::Milliseconds(250);
// A stream that has written nothing for this long writes an SSE comment, so a client that went
// away is noticed (the write fails) even while a long prompt is prefilled.
constexpr absl::Duration kKeepAlive = absl::Seconds(2);

// Appends `b` (text, logprobs, tokens; the end when it carries it) to `into`.
void Merge(HttpStreamSink::Batch* into, HttpStreamSink::Batch b) {
  into->text += b.text;
  into->logprobs.insert(into->logprobs.end(), b.logprobs.begin(), b.logprobs.end());
  into->tokens += b.tokens;
  into->token_ids.insert(into->token_ids.end(), b.token_ids.begin(), b.token_ids.end());
  if (b.finished) {
    into->finished = true;
    into->summary = b.summary;
    into->status = b.status;
  }
}

std::string Event(const nlohmann::json& j) { return absl::StrCat("data: ", Dump(j), "\n\n"); }

}  // namespace

void HttpApiServer::Completion(const httplib::Request& req, httplib::Response& res, bool chat) {
  const char* route = chat ? "/v1/chat/completions" : "/v1/completions";
  absl::StatusOr<OpenAiRequest> r = ParseOpenAiRequest(req.body, chat);
  if (!r.ok()) return ReplyError(res, route, r.status(), chat);

  // The model decides the chat template: the one named, the session's, or the default.
  std::string model_name = r->model;
  if (model_name.empty() && !r->session_id.empty()) {
    if (absl::Status s = ValidateSessionId(r->session_id); !s.ok()) {
      return ReplyError(res, route, s, chat);
    }
    absl::StatusOr<SessionInfo> info =
        Await<SessionInfo>([&](auto done) { loop_->GetSession(r->session_id, std::move(done)); });
    if (!info.ok()) return ReplyError(res, route, info.status(), chat);
    model_name = info->model;
  }
  if (model_name.empty()) model_name = loop_->default_model();
  const LoadedModel* model = loop_->models().Find(model_name);
  if (model == nullptr) {
    return ReplyError(
        res, route,
        absl::NotFoundError(absl::StrCat("model: model '", model_name,
                                         "' not found (loaded: ", loop_->models().Names(), ")")),
        chat);
  }
  absl::StatusOr<GenerateJob> job =
      ToGenerateJobFor(*r, model->engine->model(), loop_->models(), options_);
  if (!job.ok()) return ReplyError(res, route, job.status(), chat);

  CompletionMeta meta = NewCompletionMeta(chat);
  meta.model = model_name;
  auto sink = std::make_shared<HttpStreamSink>(job->stop);
  // The loop notices a client that closes its connection within one step (http_peer.h). The watch
  // ends when this handler returns, or, for a stream, when the response is released.
  sink->WatchSocket(FindPeerSocket(req.remote_addr, req.remote_port, req.local_port));
  struct StopWatch {
    HttpStreamSink* sink;
    bool handed_off = false;
    ~StopWatch() {
      if (!handed_off) sink->StopWatchingSocket();
    }
  } stop_watch{sink.get()};
  const int logprobs = job->logprobs;
  const Tokenizer* tokenizer = &model->tokenizer();  // the registry outlives the handlers
  const bool token_ids = r->return_token_ids || !tokenizer->has_text();
  loop_->Generate(std::move(*job), sink);

  // Wait for the first output (streams) or the end: a request refused before it ran is an HTTP
  // error, not a stream.
  auto pending = std::make_shared<HttpStreamSink::Batch>();
  while (!pending->finished && !(r->stream && pending->tokens > 0)) {
    Merge(pending.get(), sink->Next(kPoll));
  }
  if (pending->finished && !pending->status.ok() && (!r->stream || pending->tokens == 0)) {
    return ReplyError(res, route, pending->status, chat);
  }
  // A throwaway session's id names nothing after the request: only a stateful one is returned.
  meta.session_id = r->session_id;

  if (!r->stream) {
    const GenerateSummary& sum = pending->summary;
    size_t offset = 0;
    const nlohmann::json lp = logprobs >= 0
                                  ? LogprobsJson(chat, *tokenizer, pending->logprobs, &offset)
                                  : nlohmann::json(nullptr);
    nlohmann::json body =
        CompletionJson(meta, pending->text, OpenAiFinishReason(sum.reason), lp, sum);
    if (token_ids) body["choices"][0]["token_ids"] = pending->token_ids;
    Reply(res, route, 200, Dump(body));
    return;
  }

  metrics_->RecordRequest(route, "HTTP_200");
  res.set_header("Cache-Control", "no-cache");
  const bool include_usage = r->include_usage;
  res.set_chunked_content_provider(
      "text/event-stream",
      [sink, pending, meta, chat, logprobs, include_usage, tokenizer, token_ids](
          size_t, httplib::DataSink& out) {
        size_t offset = 0;
        bool first = true;
        auto lp_json = [&](const std::vector<TokenLogprobs>& lps) {
          if (logprobs < 0) return nlohmann::json(nullptr);
          return LogprobsJson(chat, *tokenizer, lps, &offset);
        };
        auto write = [&](const std::string& s) {
          if (out.write(s.data(), s.size())) return true;
          sink->Cancel();  // the client went away: the loop ends the stream before its next step
          return false;
        };
        // What the handler already collected goes first.
        HttpStreamSink::Batch b = std::move(*pending);
        absl::Time last_write = absl::Now();
        while (true) {
          if (!b.text.empty() || !b.logprobs.empty() || (first && b.tokens > 0) ||
              (token_ids && !b.token_ids.empty())) {
            nlohmann::json chunk =
                ChunkJson(meta, b.text, first, nullptr, lp_json(b.logprobs), include_usage);
            if (token_ids) chunk["choices"][0]["token_ids"] = b.token_ids;
            if (!write(Event(chunk))) return false;
            first = false;
            last_write = absl::Now();
          }
          if (b.finished) break;
          if (absl::Now() - last_write > kKeepAlive) {
            if (!write(": keep-alive\n\n")) return false;
            last_write = absl::Now();
          }
          b = sink->Next(kPoll);
        }
        if (!b.status.ok()) {
          // Ended by the server after it started (shutdown, KV pool full, engine error).
          if (!write(Event(ErrorJson(ToHttpError(b.status))))) return false;
        } else {
          if (!write(Event(ChunkJson(meta, "", first, OpenAiFinishReason(b.summary.reason), nullptr,
                                     include_usage)))) {
            return false;
          }
          if (include_usage && !write(Event(UsageChunkJson(meta, b.summary)))) return false;
        }
        if (!write("data: [DONE]\n\n")) return false;
        out.done();
        return true;
      },
      [sink](bool success) {  // before the server closes the connection
        if (!success) sink->Cancel();
        sink->StopWatchingSocket();
      });
  stop_watch.handed_off = true;
}

}  // namespace flatstate::server
