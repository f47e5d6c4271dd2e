// `flatstate-cli generate --local_model DIR`: the engine in-process, text streamed to stdout
// (token ids instead, one per line, for a model whose tokenizer knows no text).
#include <chrono>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "clients/cli/flags.h"
#include "engine/runtime/engine.h"

namespace flatstate::cli {
namespace {

int Fail(const absl::Status& s) {
  std::cerr << "error: " << s << "\n";
  return 1;
}

}  // namespace

int LocalGenerate() {
  auto device = ParseDevice(absl::GetFlag(FLAGS_device));
  if (!device.ok()) return Fail(device.status());
  auto weight_dtype = ParseWeightDtypeOption(absl::GetFlag(FLAGS_weight_dtype));
  if (!weight_dtype.ok()) return Fail(weight_dtype.status());
  auto head_dtype = ParseWeightDtypeOption(absl::GetFlag(FLAGS_head_dtype), "head_dtype");
  if (!head_dtype.ok()) return Fail(head_dtype.status());
  auto kv_dtype = ParseKvDtype(absl::GetFlag(FLAGS_kv_dtype));
  if (!kv_dtype.ok()) return Fail(kv_dtype.status());
  auto model = Model::Load(absl::GetFlag(FLAGS_local_model));
  if (!model.ok()) return Fail(model.status());
  EngineOptions opts;
  opts.device = *device;
  opts.weight_dtype = *weight_dtype;
  opts.head_dtype = *head_dtype;
  opts.kv_dtype = *kv_dtype;
  opts.threads = absl::GetFlag(FLAGS_threads);
  auto engine = Engine::Create(std::move(*model), opts);
  if (!engine.ok()) return Fail(engine.status());
  SamplingParams sp{absl::GetFlag(FLAGS_temperature), absl::GetFlag(FLAGS_top_k),
                    absl::GetFlag(FLAGS_top_p), absl::GetFlag(FLAGS_seed)};
  if (absl::Status s = ValidateSamplingParams(sp); !s.ok()) return Fail(s);
  const uint32_t max_new = absl::GetFlag(FLAGS_max_new_tokens);
  if (max_new == 0) return Fail(absl::InvalidArgumentError("max_new_tokens must be > 0"));
  const Tokenizer& tok = (*engine)->model().tokenizer();
  std::vector<int32_t> prompt;
  const bool ids_given = !absl::GetFlag(FLAGS_prompt_tokens).empty();
  if (ids_given) {
    absl::StatusOr<std::vector<int32_t>> ids =
        ParseTokenIds(absl::GetFlag(FLAGS_prompt_tokens), "prompt_tokens");
    if (!ids.ok()) return Fail(ids.status());
    if (absl::Status s = tok.ValidateIds(*ids, "prompt_tokens"); !s.ok()) return Fail(s);
    prompt = std::move(*ids);
  } else {
    absl::StatusOr<std::vector<int32_t>> ids = tok.Encode(absl::GetFlag(FLAGS_prompt), false);
    if (!ids.ok()) return Fail(ids.status());
    prompt = std::move(*ids);
  }
  if (prompt.empty()) return Fail(absl::InvalidArgumentError("prompt is empty"));

  SessionState session = (*engine)->NewSession(sp);
  if (absl::Status s = (*engine)->Append(&session, prompt); !s.ok()) return Fail(s);
  TokenDecoder decoder(&tok);
  if (tok.has_text()) std::cout << tok.Decode(prompt) << std::flush;
  const auto t0 = std::chrono::steady_clock::now();
  auto t_first = t0;
  uint32_t generated = 0;
  std::vector<StepResult> results;
  while (generated < max_new) {
    StepRequest req{&session, 1 << 30, true};
    if (absl::Status s = (*engine)->Step(std::span<const StepRequest>(&req, 1), &results);
        !s.ok()) {
      return Fail(s);
    }
    if (!results[0].sampled) continue;
    if (generated == 0) t_first = std::chrono::steady_clock::now();
    ++generated;
    if (tok.has_text()) {
      std::cout << decoder.Push(results[0].token) << std::flush;
    } else {
      std::cout << results[0].token << "\n" << std::flush;
    }
  }
  if (tok.has_text()) std::cout << decoder.Flush() << std::endl;
  const auto t1 = std::chrono::steady_clock::now();
  if (absl::GetFlag(FLAGS_stats)) {
    const double ttft = std::chrono::duration<double>(t_first - t0).count();
    const double dec = std::chrono::duration<double>(t1 - t_first).count();
    std::cerr << absl::StrCat("[", (*engine)->model().name(), " ",
                              ModelKindName((*engine)->config()),
                              "] prompt ", prompt.size(), " tokens, generated ", generated,
                              ", first token ", ttft * 1e3, " ms, decode ",
                              generated > 1 ? (generated - 1) / dec : 0.0, " tokens/s, state ",
                              (*engine)->SessionBytes(session), " bytes\n");
  }
  (*engine)->ReleaseSession(&session);
  return 0;
}

}  // namespace flatstate::cli
