// Fuzzes the HTTP API's JSON request bodies (docs/http-api.md) as the handlers read them, with no
// server around them: /v1/completions and /v1/chat/completions bodies through ParseOpenAiRequest
// and on to the validated job (server/http/openai_request.h; an empty model registry, so ids are
// bytes as validation-only callers see them), the chat messages rendered by a ChatML template
// (engine/chat/chat_prompt.h, as /apply-template does), and /tokenize and /detokenize bodies
// (server/http/tokenize_api.h) against the byte tokenizer and a byte-level BPE tokenizer.json
// with two special tokens. Nothing may crash or throw; every answer must serialise (nlohmann's
// dump throws on invalid UTF-8) and every accepted job must satisfy what the engine loop assumes.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "engine/chat/chat_prompt.h"
#include "engine/tokenizer/byte_tokenizer.h"
#include "engine/tokenizer/hf/hf_tokenizer.h"
#include "engine/tokenizer/hf/text_util.h"
#include "server/core/model_registry.h"
#include "server/core/options.h"
#include "server/http/openai_request.h"
#include "server/http/tokenize_api.h"

namespace {

using flatstate::ByteTokenizer;
using flatstate::HfTokenizer;
using flatstate::Tokenizer;
namespace srv = flatstate::server;

// A byte-level BPE over the 256 bytes (GPT-2's byte-to-unicode map), ChatML's two specials and
// two merges.
std::string TokenizerJson() {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[flatstate::hf::ByteToChar(static_cast<uint8_t>(b))] = b;
  // Two merges, so BPE merging runs too.
  vocab["hi"] = 258;
  vocab["Ġt"] = 259;
  nlohmann::json merges = nlohmann::json::array({"h i", "Ġ t"});
  nlohmann::json added = nlohmann::json::array();
  for (auto [id, text] : {std::pair<int, const char*>{256, "<|im_start|>"}, {257, "<|im_end|>"}}) {
    added.push_back({{"id", id}, {"content", text}, {"special", true}, {"single_word", false},
                     {"lstrip", false}, {"rstrip", false}, {"normalized", false}});
  }
  nlohmann::json level = {{"type", "ByteLevel"}, {"add_prefix_space", false},
                          {"trim_offsets", true}, {"use_regex", true}};
  return nlohmann::json{{"version", "1.0"},
                        {"added_tokens", added},
                        {"normalizer", nullptr},
                        {"pre_tokenizer", level},
                        {"post_processor", nullptr},
                        {"decoder", level},
                        {"model",
                         {{"type", "BPE"},
                          {"vocab", vocab},
                          {"merges", merges},
                          {"unk_token", nullptr},
                          {"byte_fallback", false}}}}
      .dump();
}

constexpr char kChatMl[] =
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' }}"
    "{% if m['content'] is string %}{{ m['content'] }}{% endif %}{{ '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

struct Fixture {
  ByteTokenizer bytes;
  std::unique_ptr<HfTokenizer> bpe;
  std::unique_ptr<flatstate::ChatPrompt> chat;
  srv::ModelRegistry models{{}, ""};
  srv::ServerOptions options;
  flatstate::ChatTemplate config_template;
};

const Fixture& F() {
  static const Fixture* f = [] {
    auto* x = new Fixture();
    auto bpe = HfTokenizer::FromJson(TokenizerJson(), "fuzz/tokenizer.json");
    if (!bpe.ok()) {
      std::fprintf(stderr, "fixture tokenizer: %s\n", bpe.status().ToString().c_str());
      __builtin_trap();
    }
    x->bpe = std::move(*bpe);
    auto chat = flatstate::ChatPrompt::Create("fuzz", kChatMl, "", "<|im_end|>", x->bpe.get());
    if (!chat.ok()) {
      std::fprintf(stderr, "fixture template: %s\n", chat.status().ToString().c_str());
      __builtin_trap();
    }
    x->chat = std::move(*chat);
    return x;
  }();
  return *f;
}

void CheckJob(const srv::GenerateJob& job) {
  if (job.max_new_tokens < 1) __builtin_trap();
  if (job.prompt.empty() && !job.prompt_text.has_value() && job.session_id.empty()) {
    __builtin_trap();
  }
  for (int32_t id : job.prompt) {
    if (id < 0 || id >= 256) __builtin_trap();  // no models: byte ids
  }
  for (const std::string& s : job.stop) {
    if (s.empty() || !flatstate::IsValidUtf8(s)) __builtin_trap();
  }
  if (job.stop_token_ids.size() > 16) __builtin_trap();
  for (int32_t id : job.stop_token_ids) {
    if (id < 0) __builtin_trap();
  }
}

void Completions(const std::string& body, bool chat) {
  const Fixture& f = F();
  absl::StatusOr<srv::OpenAiRequest> r = srv::ParseOpenAiRequest(body, chat);
  if (!r.ok()) return;
  absl::StatusOr<srv::GenerateJob> job =
      srv::ToGenerateJob(*r, f.config_template, f.models, f.options);
  if (job.ok()) CheckJob(*job);
  if (chat) {
    flatstate::Conversation c;
    c.messages = r->chat_messages;
    c.tools = r->tools;
    c.kwargs = r->chat_template_kwargs;
    c.add_generation_prompt = r->add_generation_prompt;
    absl::StatusOr<std::vector<int32_t>> ids = f.chat->Encode(c);
    if (ids.ok()) {
      for (int32_t id : *ids) {
        if (id < 0 || id >= f.bpe->vocab_size()) __builtin_trap();
      }
    }
  }
}

void TokenizeBoth(const std::string& body) {
  const Fixture& f = F();
  absl::StatusOr<srv::TokenizeRequest> t = srv::ParseTokenizeRequest(body);
  if (t.ok()) {
    for (const Tokenizer* tok : {static_cast<const Tokenizer*>(&f.bytes),
                                 static_cast<const Tokenizer*>(f.bpe.get())}) {
      absl::StatusOr<nlohmann::json> out = srv::TokenizeJson(*tok, *t);
      if (out.ok()) (void)out->dump();
    }
  }
  absl::StatusOr<srv::DetokenizeRequest> d = srv::ParseDetokenizeRequest(body);
  if (d.ok()) {
    for (const Tokenizer* tok : {static_cast<const Tokenizer*>(&f.bytes),
                                 static_cast<const Tokenizer*>(f.bpe.get())}) {
      absl::StatusOr<nlohmann::json> out = srv::DetokenizeJson(*tok, *d);
      if (out.ok()) (void)out->dump();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 64 * 1024) return 0;
  const std::string body(reinterpret_cast<const char*>(data), size);
  Completions(body, /*chat=*/false);
  Completions(body, /*chat=*/true);
  TokenizeBoth(body);
  return 0;
}
