// What a chat request hands a model's Jinja chat template (engine/chat/chat_prompt.h) besides
// the kwargs: its `tools`, checked to be function tools, and its `messages` as templates read
// them (docs/http-api.md, `messages` and `tools`).
//
// Stateless functions; thread-safe. Failures are InvalidArgument whose message starts with the
// field ("tools[1].function.name: ..."), so ToHttpError names it.
#ifndef FLATSTATE_SERVER_HTTP_CHAT_TEMPLATE_INPUT_H_
#define FLATSTATE_SERVER_HTTP_CHAT_TEMPLATE_INPUT_H_

#include "absl/status/status.h"
#include "nlohmann/json.hpp"

namespace flatstate::server {

// OK when `tools` is an array of function tools, each {"type": "function" (or no type),
// "function": {"name": a non-empty string, "description"?: string, "parameters"?: object}};
// otherwise InvalidArgument naming the first bad field (tools, tools[i], tools[i].type,
// tools[i].function, tools[i].function.name, ...). A null member counts as absent.
absl::Status CheckTools(const nlohmann::ordered_json& tools);

// `messages` (an array, as sent) with every object message's `content` that is null or absent
// set to "" (as vLLM renders it: OpenAI clients send an assistant message that carries
// `tool_calls` back with `content: null`, and templates such as Qwen3's test it with `in` or
// concatenate it). Everything else is kept as sent.
nlohmann::ordered_json MessagesForTemplate(nlohmann::ordered_json messages);

}  // namespace flatstate::server

#endif  // FLATSTATE_SERVER_HTTP_CHAT_TEMPLATE_INPUT_H_
