#include "server/api/validation.h"

#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/grammar/compiled_grammar.h"
#include "engine/grammar/json_schema.h"
#include "engine/tokenizer/byte_tokenizer.h"
#include "server/loop/stream_text.h"
#include "server/store/ids.h"

namespace flatstate::server {
namespace {

constexpr size_t kMaxStopTokenIds = 16;

// The model a request runs on when validation can know it: the one named, or (no session) the
// default. Null when it depends on the session (or the registry is empty: validation-only uses).
const LoadedModel* KnownModel(const GenerateRequest& req, const ModelRegistry& models) {
  if (!req.model.empty()) return models.Find(req.model);
  if (!req.session_id.empty()) return nullptr;
  return models.Find(models.default_model());
}

// The request's grammar as GBNF (unset: none), compiled once here so that a bad one is refused
// on the transport thread; the engine compiles it again from its cache.
absl::StatusOr<std::optional<std::string>> GrammarOf(const GenerateRequest& req,
                                                     const LoadedModel* model) {
  const int set = int{!req.grammar.empty()} + int{!req.json_schema.empty()} + int{req.json_object};
  if (set == 0) return std::nullopt;
  if (set > 1) {
    return absl::InvalidArgumentError(
        "grammar: set at most one of grammar, json_schema and json_object");
  }
  if (model != nullptr && !model->tokenizer().has_text()) {
    return absl::InvalidArgumentError(
        absl::StrCat("grammar: model '", model->name,
                     "' decodes no text (no tokenizer flatstate can read), so its output cannot be "
                     "constrained"));
  }
  std::string gbnf;
  if (req.json_object) {
    gbnf = grammar::JsonObjectGbnf();
  } else if (!req.json_schema.empty()) {
    absl::StatusOr<std::string> g = grammar::JsonSchemaTextToGbnf(req.json_schema);
    if (!g.ok()) {
      return absl::Status(g.status().code(), absl::StrCat("json_schema: ", g.status().message()));
    }
    gbnf = std::move(*g);
  } else {
    gbnf = req.grammar;
  }
  if (auto c = grammar::CompiledGrammar::FromGbnf(gbnf); !c.ok()) {
    return absl::Status(c.status().code(),
                        absl::StrCat(req.json_schema.empty() ? "grammar: " : "json_schema: ",
                                     c.status().message()));
  }
  return gbnf;
}

}  // namespace

absl::StatusOr<SamplingParams> ConvertSampling(const SamplingRequest& p) {
  SamplingParams s;
  s.temperature = p.temperature;
  s.top_k = p.top_k;
  s.top_p = p.top_p == 0.f ? 1.f : p.top_p;
  s.seed = p.seed;
  if (!(s.temperature >= 0.f) || !std::isfinite(s.temperature)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling.temperature = ", p.temperature, " must be a finite value >= 0"));
  }
  if (!(s.top_p > 0.f && s.top_p <= 1.f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling.top_p = ", p.top_p, " must be in (0, 1]"));
  }
  if (absl::Status st = ValidateSamplingParams(s); !st.ok()) return st;
  return s;
}

absl::Status ValidateModelName(const std::string& model, const ModelRegistry& models) {
  if (model.empty()) return absl::OkStatus();
  return models.Resolve(model).status();
}

absl::Status ValidateSessionId(const std::string& id) {
  if (!IsValidId(id)) {
    return absl::NotFoundError(absl::StrCat("session_id: session '", id, "' not found"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadCheckpointById(const std::string& id, const SessionStore& store) {
  if (!IsValidId(id)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint_id: '", id, "' is not a checkpoint id (32 lower-case hex characters)"));
  }
  return store.GetCheckpoint(id);
}

absl::Status LoadInitialState(const std::string& checkpoint_id, const SessionStore& store,
                              GenerateJob* job) {
  if (checkpoint_id.empty()) return absl::OkStatus();
  absl::StatusOr<std::string> blob = ReadCheckpointById(checkpoint_id, store);
  if (!blob.ok()) {
    absl::string_view msg = blob.status().message();
    if (absl::StartsWith(msg, "checkpoint_id: ")) msg.remove_prefix(15);
    return absl::Status(blob.status().code(), absl::StrCat("initial_state: ", msg));
  }
  job->initial_state = std::move(*blob);
  return absl::OkStatus();
}

absl::StatusOr<GenerateJob> ValidateGenerate(const GenerateRequest& req,
                                             const ModelRegistry& models,
                                             const ServerOptions& options) {
  GenerateJob job;
  if (!req.initial_state.empty()) {
    if (!req.session_id.empty()) {
      return absl::InvalidArgumentError(
          "initial_state: a session continues its own state; send initial_state without "
          "session_id (or restore the checkpoint as a session)");
    }
    if (!IsValidId(req.initial_state)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "initial_state: '", req.initial_state,
          "' is not a checkpoint id (32 lower-case hex characters)"));
    }
  }
  if (absl::Status s = ValidateModelName(req.model, models); !s.ok()) return s;
  if (!req.session_id.empty()) {
    if (absl::Status s = ValidateSessionId(req.session_id); !s.ok()) return s;
  }
  if (!req.prompt.empty() && !req.prompt_tokens.empty()) {
    return absl::InvalidArgumentError("prompt and prompt_tokens are both set; send one of them");
  }
  if (req.max_new_tokens == 0) {
    return absl::InvalidArgumentError("max_new_tokens must be > 0");
  }
  if (req.max_new_tokens > options.max_new_tokens_limit) {
    return absl::InvalidArgumentError(absl::StrCat("max_new_tokens = ", req.max_new_tokens,
                                                   " exceeds the server limit ",
                                                   options.max_new_tokens_limit));
  }
  if (req.sampling.has_value()) {
    absl::StatusOr<SamplingParams> sp = ConvertSampling(*req.sampling);
    if (!sp.ok()) return sp.status();
    job.sampling = *sp;
  }
  // The model's tokenizer encodes text and bounds token ids; without a known model (a session's
  // turn that names none) ids are checked by the engine and text is encoded by the loop.
  const LoadedModel* model = KnownModel(req, models);
  if (!req.prompt_tokens.empty()) {
    job.prompt.assign(req.prompt_tokens.begin(), req.prompt_tokens.end());
    if (model != nullptr) {
      if (absl::Status s = model->tokenizer().ValidateIds(job.prompt, "prompt_tokens"); !s.ok()) {
        return s;
      }
    } else if (models.models().empty()) {  // no models (validation-only): byte ids
      if (absl::Status s = ValidateTokens(job.prompt, kByteVocabSize, "prompt_tokens"); !s.ok()) {
        return s;
      }
    }
  } else if (!req.prompt.empty()) {
    if (model != nullptr) {
      if (absl::Status s = EncodePrompt(model->tokenizer(), req.prompt, &job.prompt); !s.ok()) {
        return s;
      }
    } else if (models.models().empty()) {
      job.prompt = Encode(req.prompt);  // no models (validation-only): bytes
    } else {
      job.prompt_text = req.prompt;
    }
  }
  // Deferred text counts its bytes (the most tokens a byte-level model makes of it); the loop's
  // encoding is bounded by the engine's context checks.
  const int64_t n = job.prompt_text.has_value() ? static_cast<int64_t>(job.prompt_text->size())
                                                : static_cast<int64_t>(job.prompt.size());
  if (n > options.max_prompt_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt: ", n,
        " tokens exceed the server limit max_prompt_tokens = ", options.max_prompt_tokens));
  }
  if (job.prompt.empty() && !job.prompt_text.has_value() && req.session_id.empty() &&
      req.initial_state.empty()) {
    return absl::InvalidArgumentError(
        "prompt: empty input on a throwaway session (set prompt or prompt_tokens, or pass the "
        "session_id of a session to continue)");
  }
  job.model = req.model;
  job.session_id = req.session_id;
  job.max_new_tokens = req.max_new_tokens;
  job.ignore_eos = req.ignore_eos;
  for (size_t i = 0; i < req.stop.size(); ++i) {
    const std::string& s = req.stop[i];
    if (s.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("stop[", i, "]: empty stop string"));
    }
    if (!IsValidUtf8(s)) {
      return absl::InvalidArgumentError(
          absl::StrCat("stop[", i,
                       "]: not valid UTF-8 (stop strings are matched against the generated "
                       "text, which is always valid UTF-8)"));
    }
    if (model != nullptr && !model->tokenizer().has_text()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "stop[", i, "]: model '", model->name,
          "' decodes no text yet (no tokenizer flatstate can read), so a stop string cannot "
          "match; stop on the model's end-of-sequence ids or max_new_tokens"));
    }
    job.stop.push_back(s);
  }
  if (req.stop_token_ids.size() > kMaxStopTokenIds) {
    return absl::InvalidArgumentError(absl::StrCat("stop_token_ids: ", req.stop_token_ids.size(),
                                                   " ids, at most ", kMaxStopTokenIds));
  }
  if (model != nullptr) {
    if (absl::Status s = model->tokenizer().ValidateIds(req.stop_token_ids, "stop_token_ids");
        !s.ok()) {
      return s;
    }
  } else if (absl::Status s = ValidateTokens(req.stop_token_ids, std::numeric_limits<int>::max(),
                                             "stop_token_ids");
             !s.ok()) {
    return s;
  }
  job.stop_token_ids = req.stop_token_ids;
  if (req.max_draft_tokens > kMaxDraftTokens) {
    return absl::InvalidArgumentError(absl::StrCat("max_draft_tokens: ", req.max_draft_tokens,
                                                   " is outside [1, ", kMaxDraftTokens, "]"));
  }
  if (req.speculative.value_or(options.speculative)) {
    job.max_draft_tokens = req.max_draft_tokens > 0 ? static_cast<int>(req.max_draft_tokens)
                                                    : options.max_draft_tokens;
  }
  absl::StatusOr<std::optional<std::string>> grammar = GrammarOf(req, model);
  if (!grammar.ok()) return grammar.status();
  job.grammar = std::move(*grammar);
  return job;
}

}  // namespace flatstate::server
