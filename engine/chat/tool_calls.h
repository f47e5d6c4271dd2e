// Tool calls in a chat model's reply: which form a chat template teaches its model, and the
// parse of a finished reply into OpenAI `tool_calls` plus the remaining text.
// - kHermes (Qwen2.5/3, Hermes, many fine-tunes; the template writes "<tool_call>"): every
//   <tool_call>{"name": ..., "arguments": {...}}</tool_call> block is a call; text outside the
//   blocks is the content.
// - kLlama3Json (Llama 3.1+ templates that render tool calls as {"name", "parameters"}): a reply
//   that is, after an optional "<|python_tag|>", one JSON object {"name", "parameters" |
//   "arguments"} or several separated by ";" is a call each; any other reply is content.
// A block whose JSON does not parse or lacks a string "name" stays in the content: a model that
// writes a broken call gets its text back, never a call with made-up fields.
//
// Pure functions; thread-safe; never fail.
#ifndef FLATSTATE_ENGINE_CHAT_TOOL_CALLS_H_
#define FLATSTATE_ENGINE_CHAT_TOOL_CALLS_H_

#include <string>
#include <string_view>
#include <vector>

namespace flatstate {

enum class ToolCallFormat { kNone, kHermes, kLlama3Json };

// The form a chat template's source teaches (above); kNone when it teaches neither.
ToolCallFormat DetectToolCallFormat(std::string_view template_source);

struct ToolCall {
  std::string name;
  std::string arguments;  // a JSON object's text, as OpenAI's function.arguments
};

struct ParsedReply {
  std::string content;  // the text outside the calls, trimmed of surrounding whitespace
  std::vector<ToolCall> calls;
};

ParsedReply ParseToolCalls(std::string_view text, ToolCallFormat format);

// Where a streamed reply may start a call: the offset of the first "<tool_call>" (kHermes), or 0
// when the reply so far could still become a kLlama3Json call (it is empty, whitespace, or
// starts with "{" or "<|python_tag|>"); std::string_view::npos when no call can start in it yet.
// Text before the offset is safe to stream as content. For kHermes a tail that "<tool_call>"
// starts with is also held back (the offset of that tail).
size_t ToolCallStart(std::string_view text, ToolCallFormat format);

// A streamed reply's text with its tool calls held back: Push gives the text that may go out as
// content now (nothing from where a call may start, ToolCallStart), Finish the rest of the
// content and the calls parsed from what was held. With kNone it passes text through. A value
// type; one per streamed choice; not thread-safe.
class ToolCallStreamer {
 public:
  explicit ToolCallStreamer(ToolCallFormat format) : format_(format) {}
  std::string Push(std::string_view text);
  ParsedReply Finish();

 private:
  ToolCallFormat format_;
  std::string all_;  // the reply so far
  size_t sent_ = 0;  // bytes of all_ given out as content
};

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_CHAT_TOOL_CALLS_H_
