// HttpApiServer: POST /v1/completions and /v1/chat/completions, whole or streamed as server-sent
// events (docs/http-api.md). The request becomes a GenerateJob (openai_request.h) that runs on
// the engine loop like a gRPC Generate; an HttpStreamSink carries its output back to this
// handler thread.
#include <httplib.h>

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/chat/tool_calls.h"
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
  if (absl::Status s = LoadInitialState(r->initial_state, loop_->store(), &*job); !s.ok()) {
    return ReplyError(res, route, s, chat);
  }

  CompletionMeta meta = NewCompletionMeta(chat);
  meta.model = model_name;
  // One sink per choice. The loop notices a client that closes its connection within one step
  // (http_peer.h). The watch ends when this handler returns, or, for a stream, when the response
  // is released.
  const int peer = FindPeerSocket(req.remote_addr, req.remote_port, req.local_port);
  auto sinks = std::make_shared<std::vector<std::shared_ptr<HttpStreamSink>>>();
  // n > 1: one waker for all choices, so the handler sleeps until any of them has output.
  auto waker = r->n > 1 ? std::make_shared<SinkWaker>() : nullptr;
  for (int i = 0; i < r->n; ++i) {
    sinks->push_back(std::make_shared<HttpStreamSink>(job->stop, waker));
    sinks->back()->WatchSocket(peer);
  }
  struct StopWatch {
    std::vector<std::shared_ptr<HttpStreamSink>>* sinks;
    bool handed_off = false;
    ~StopWatch() {
      if (handed_off) return;
      for (const auto& sink : *sinks) sink->StopWatchingSocket();
    }
  } stop_watch{sinks.get()};
  const int logprobs = job->logprobs;
  const Tokenizer* tokenizer = &model->tokenizer();  // the registry outlives the handlers
  // A chat with tools on a model whose template teaches a tool-call form: replies are parsed
  // for calls (engine/chat/tool_calls.h) unless tool_choice is "none".
  ToolCallFormat tool_format = ToolCallFormat::kNone;
  if (const ChatPrompt* p = model->engine->model().chat_prompt();
      chat && p != nullptr && !r->tools.is_null() && !r->tool_choice_none) {
    tool_format = p->tool_call_format();
  }
  const bool token_ids = r->return_token_ids || !tokenizer->has_text();
  if (r->n == 1) {
    loop_->Generate(std::move(*job), sinks->front());
  } else {
    loop_->GenerateChoices(std::move(*job), {sinks->begin(), sinks->end()});
  }

  // Wait for the first output (streams) or the end of every choice: a request refused before it
  // ran is an HTTP error, not a stream.
  auto pending = std::make_shared<std::vector<HttpStreamSink::Batch>>(sinks->size());
  // One choice: wait in its sink. Several: wait on the waker, then take what each sink has.
  const absl::Duration poll = waker == nullptr ? kPoll : absl::ZeroDuration();
  uint64_t seen = 0;
  auto all_finished = [&] {
    for (const auto& b : *pending) {
      if (!b.finished) return false;
    }
    return true;
  };
  auto any_output = [&] {
    for (const auto& b : *pending) {
      if (b.tokens > 0) return true;
    }
    return false;
  };
  while (!all_finished() && !(r->stream && any_output())) {
    if (waker != nullptr) seen = waker->Wait(seen, kPoll);
    for (size_t i = 0; i < sinks->size(); ++i) {
      if (!(*pending)[i].finished) Merge(&(*pending)[i], (*sinks)[i]->Next(poll));
    }
  }
  if (!r->stream || !any_output()) {
    for (const auto& b : *pending) {
      if (b.finished && !b.status.ok()) return ReplyError(res, route, b.status, chat);
    }
  }
  // A throwaway session's id names nothing after the request: only a stateful one is returned.
  meta.session_id = r->session_id;

  if (!r->stream) {
    nlohmann::json body;
    uint64_t completion_tokens = 0;
    for (size_t i = 0; i < pending->size(); ++i) {
      const HttpStreamSink::Batch& b = (*pending)[i];
      const GenerateSummary& sum = b.summary;
      size_t offset = 0;
      const nlohmann::json lp = logprobs >= 0 ? LogprobsJson(chat, *tokenizer, b.logprobs, &offset)
                                              : nlohmann::json(nullptr);
      nlohmann::json one = CompletionJson(meta, b.text, OpenAiFinishReason(sum.reason), lp, sum);
      nlohmann::json& choice = one["choices"][0];
      choice["index"] = i;
      if (tool_format != ToolCallFormat::kNone) {
        const ParsedReply parsed = ParseToolCalls(b.text, tool_format);
        if (!parsed.calls.empty()) {
          choice["message"]["content"] =
              parsed.content.empty() ? nlohmann::json(nullptr) : nlohmann::json(parsed.content);
          choice["message"]["tool_calls"] = ToolCallsJson(parsed.calls, /*with_index=*/false);
          choice["finish_reason"] = "tool_calls";
        }
      }
      if (token_ids) choice["token_ids"] = b.token_ids;
      completion_tokens += sum.generated_tokens;
      if (i == 0) {
        body = std::move(one);
      } else {
        body["choices"].push_back(std::move(choice));
      }
    }
    // Usage: the prompt once (prefilled once), the completions of every choice.
    body["usage"]["completion_tokens"] = completion_tokens;
    body["usage"]["total_tokens"] = (*pending)[0].summary.prompt_tokens + completion_tokens;
    Reply(res, route, 200, Dump(body));
    return;
  }

  metrics_->RecordRequest(route, "HTTP_200");
  res.set_header("Cache-Control", "no-cache");
  const bool include_usage = r->include_usage;
  res.set_chunked_content_provider(
      "text/event-stream",
      [sinks, pending, meta, chat, logprobs, include_usage, tokenizer, token_ids, poll, waker,
       seen, tool_format](size_t, httplib::DataSink& out) mutable {
        const size_t n = sinks->size();
        // Tool calls: from where a call may start, a choice's text is held until it ends.
        std::vector<ToolCallStreamer> calls_of(n, ToolCallStreamer(tool_format));
        std::vector<size_t> offset(n, 0);
        std::vector<bool> first(n, true), ended(n, false);
        bool failed = false;
        auto cancel_all = [&] {
          for (const auto& sink : *sinks) sink->Cancel();
        };
        auto write = [&](const std::string& s) {
          if (out.write(s.data(), s.size())) return true;
          cancel_all();  // the client went away: the loop ends the streams before their next step
          return false;
        };
        // Writes what batch `b` of choice `i` carries; at its end, the finish (or error) chunk.
        auto emit = [&](size_t i, const HttpStreamSink::Batch& b) {
          std::string text = calls_of[i].Push(b.text);
          std::vector<ToolCall> calls;
          if (b.finished) {
            ParsedReply rest = calls_of[i].Finish();
            text += rest.content;
            calls = std::move(rest.calls);
          }
          if (!text.empty() || !b.logprobs.empty() || (first[i] && b.tokens > 0) ||
              (token_ids && !b.token_ids.empty())) {
            const nlohmann::json lp = logprobs < 0
                                          ? nlohmann::json(nullptr)
                                          : LogprobsJson(chat, *tokenizer, b.logprobs, &offset[i]);
            nlohmann::json chunk = ChunkJson(meta, text, first[i], nullptr, lp, include_usage);
            chunk["choices"][0]["index"] = i;
            if (token_ids) chunk["choices"][0]["token_ids"] = b.token_ids;
            if (!write(Event(chunk))) return false;
            first[i] = false;
          }
          if (!b.finished) return true;
          ended[i] = true;
          if (!b.status.ok()) {
            // Ended by the server after it started (shutdown, KV pool full, engine error).
            failed = true;
            return write(Event(ErrorJson(ToHttpError(b.status))));
          }
          if (!calls.empty()) {
            nlohmann::json chunk = ChunkJson(meta, "", first[i], nullptr, nullptr, include_usage);
            chunk["choices"][0]["index"] = i;
            chunk["choices"][0]["delta"].erase("content");
            chunk["choices"][0]["delta"]["tool_calls"] = ToolCallsJson(calls, /*with_index=*/true);
            if (!write(Event(chunk))) return false;
            first[i] = false;
          }
          nlohmann::json fin =
              ChunkJson(meta, "", first[i],
                        calls.empty() ? OpenAiFinishReason(b.summary.reason) : "tool_calls",
                        nullptr, include_usage);
          fin["choices"][0]["index"] = i;
          return write(Event(fin));
        };
        // What the handler already collected goes first.
        std::vector<GenerateSummary> sums(n);
        for (size_t i = 0; i < n; ++i) {
          sums[i] = (*pending)[i].summary;
          if (!emit(i, (*pending)[i])) return false;
        }
        absl::Time last_write = absl::Now();
        auto open = [&] {
          for (size_t i = 0; i < n; ++i) {
            if (!ended[i]) return true;
          }
          return false;
        };
        while (open()) {
          if (waker != nullptr) seen = waker->Wait(seen, kPoll);
          for (size_t i = 0; i < n; ++i) {
            if (ended[i]) continue;
            HttpStreamSink::Batch b = (*sinks)[i]->Next(poll);
            if (b.finished) sums[i] = b.summary;
            if (b.tokens > 0 || b.finished) last_write = absl::Now();
            if (!emit(i, b)) return false;
          }
          if (absl::Now() - last_write > kKeepAlive) {
            if (!write(": keep-alive\n\n")) return false;
            last_write = absl::Now();
          }
        }
        if (include_usage && !failed) {
          GenerateSummary total = sums[0];
          for (size_t i = 1; i < n; ++i) total.generated_tokens += sums[i].generated_tokens;
          if (!write(Event(UsageChunkJson(meta, total)))) return false;
        }
        if (!write("data: [DONE]\n\n")) return false;
        out.done();
        return true;
      },
      [sinks](bool success) {  // before the server closes the connection
        for (const auto& sink : *sinks) {
          if (!success) sink->Cancel();
          sink->StopWatchingSocket();
        }
      });
  stop_watch.handed_off = true;
}

}  // namespace flatstate::server
