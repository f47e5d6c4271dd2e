// Fuzzes the chat template engine (engine/template/): any bytes are parsed as a template and, when
// they parse, rendered against a small fixed chat context under tight limits. Parsing and
// rendering must return a value or an error: no crash, no sanitizer report, no hang (the step
// limit bounds loops, the byte limit bounds strings, the depth limits bound recursion).
#include <cstdint>
#include <string>
#include <string_view>

#include "engine/template/chat_template.h"
#include "nlohmann/json.hpp"

namespace {

const nlohmann::ordered_json& Context() {
  static const auto* ctx = new nlohmann::ordered_json(nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "sys"},
      {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "image"}]},
      {"role": "assistant", "content": "<think>r</think>ok", "reasoning_content": "r",
       "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"a": 1.5}}}]},
      {"role": "tool", "content": "{\"x\": null}"}],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
               "properties": {"a": {"type": "number"}}, "required": ["a"]}}}],
    "add_generation_prompt": true, "enable_thinking": false,
    "bos_token": "<s>", "eos_token": "</s>", "n": 3, "f": -0.5, "none": null})"));
  return *ctx;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 8192) return 0;
  std::string_view src(reinterpret_cast<const char*>(data), size);
  flatstate::tmpl::TemplateOptions options;
  if (size > 0) {  // the first byte picks the whitespace options
    options.trim_blocks = data[0] & 1;
    options.lstrip_blocks = data[0] & 2;
    options.keep_trailing_newline = data[0] & 4;
  }
  auto t = flatstate::tmpl::ChatTemplate::Parse("fuzz", src, options);
  if (!t.ok()) {
    if (t.status().message().empty()) __builtin_trap();
    return 0;
  }
  flatstate::tmpl::RenderLimits limits;
  limits.max_output_bytes = 1 << 16;
  limits.max_steps = 20'000;
  limits.max_recursion_depth = 16;
  auto out = (*t)->Render(Context(), limits);
  if (out.ok() && out->size() > limits.max_output_bytes) __builtin_trap();
  return 0;
}
