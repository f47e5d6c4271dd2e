#include "engine/chat/tool_calls.h"

#include <algorithm>

#include "nlohmann/json.hpp"

namespace flatstate {
namespace {

constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";

std::string_view Trim(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  const size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

// {"name": string, <args_key>: object} (args_key "arguments", or for Llama also "parameters")
// as a call; false when `json_text` is not that.
bool CallOf(std::string_view json_text, bool llama, ToolCall* out) {
  const nlohmann::json j = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return false;
  auto name = j.find("name");
  if (name == j.end() || !name->is_string() || name->get<std::string>().empty()) return false;
  auto args = j.find("arguments");
  if (args == j.end() && llama) args = j.find("parameters");
  nlohmann::json a = args == j.end() ? nlohmann::json::object() : *args;
  if (a.is_string()) {  // arguments given as JSON text
    a = nlohmann::json::parse(a.get<std::string>(), nullptr, /*allow_exceptions=*/false);
  }
  if (!a.is_object()) return false;
  out->name = name->get<std::string>();
  out->arguments = a.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return true;
}

ParsedReply ParseHermes(std::string_view text) {
  ParsedReply r;
  std::string content;
  size_t at = 0;
  while (at < text.size()) {
    const size_t open = text.find(kOpen, at);
    if (open == std::string_view::npos) break;
    const size_t body = open + kOpen.size();
    const size_t close = text.find(kClose, body);
    // An unclosed last block (the reply ended at EOS right after it) still counts.
    const std::string_view inner =
        text.substr(body, close == std::string_view::npos ? std::string_view::npos : close - body);
    const size_t end = close == std::string_view::npos ? text.size() : close + kClose.size();
    ToolCall call;
    content.append(text.substr(at, open - at));
    if (CallOf(Trim(inner), /*llama=*/false, &call)) {
      r.calls.push_back(std::move(call));
    } else {
      content.append(text.substr(open, end - open));
    }
    at = end;
  }
  if (at < text.size()) content.append(text.substr(at));
  r.content = std::string(Trim(content));
  return r;
}

ParsedReply ParseLlama3(std::string_view text) {
  ParsedReply r;
  std::string_view t = Trim(text);
  if (t.substr(0, kPythonTag.size()) == kPythonTag) t = Trim(t.substr(kPythonTag.size()));
  std::vector<ToolCall> calls;
  size_t at = 0;
  while (at < t.size()) {
    // Split on ';' outside strings and braces.
    size_t end = at;
    int depth = 0;
    bool in_string = false, escaped = false;
    for (; end < t.size(); ++end) {
      const char c = t[end];
      if (in_string) {
        if (escaped) {
          escaped = false;
        } else if (c == '\\') {
          escaped = true;
        } else if (c == '"') {
          in_string = false;
        }
      } else if (c == '"') {
        in_string = true;
      } else if (c == '{') {
        ++depth;
      } else if (c == '}') {
        --depth;
      } else if (c == ';' && depth == 0) {
        break;
      }
    }
    ToolCall call;
    if (!CallOf(Trim(t.substr(at, end - at)), /*llama=*/true, &call)) {
      r.content = std::string(Trim(text));
      return r;
    }
    calls.push_back(std::move(call));
    at = end + 1;
  }
  if (calls.empty()) {
    r.content = std::string(Trim(text));
    return r;
  }
  r.calls = std::move(calls);
  return r;
}

}  // namespace

ToolCallFormat DetectToolCallFormat(std::string_view src) {
  if (src.find(kOpen) != std::string_view::npos) return ToolCallFormat::kHermes;
  const bool calls = src.find("tool_calls") != std::string_view::npos;
  const bool params = src.find("\"parameters\"") != std::string_view::npos ||
                      src.find("ipython") != std::string_view::npos;
  if (calls && params) return ToolCallFormat::kLlama3Json;
  return ToolCallFormat::kNone;
}

ParsedReply ParseToolCalls(std::string_view text, ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes:
      return ParseHermes(text);
    case ToolCallFormat::kLlama3Json:
      return ParseLlama3(text);
    case ToolCallFormat::kNone:
      break;
  }
  return ParsedReply{std::string(text), {}};
}

size_t ToolCallStart(std::string_view text, ToolCallFormat format) {
  if (format == ToolCallFormat::kHermes) {
    if (const size_t at = text.find(kOpen); at != std::string_view::npos) return at;
    for (size_t n = std::min(kOpen.size() - 1, text.size()); n > 0; --n) {
      if (text.substr(text.size() - n) == kOpen.substr(0, n)) return text.size() - n;
    }
    return std::string_view::npos;
  }
  if (format == ToolCallFormat::kLlama3Json) {
    const std::string_view t = Trim(text);
    if (t.empty() || t[0] == '{') return 0;
    if (kPythonTag.substr(0, std::min(t.size(), kPythonTag.size())) ==
        t.substr(0, std::min(t.size(), kPythonTag.size()))) {
      return 0;
    }
  }
  return std::string_view::npos;
}

std::string ToolCallStreamer::Push(std::string_view text) {
  if (format_ == ToolCallFormat::kNone) return std::string(text);
  all_.append(text);
  size_t limit = all_.size();
  if (const size_t start = ToolCallStart(all_, format_); start != std::string::npos) {
    limit = std::max(start, sent_);
  }
  std::string out = all_.substr(sent_, limit - sent_);
  sent_ = limit;
  return out;
}

ParsedReply ToolCallStreamer::Finish() {
  if (format_ == ToolCallFormat::kNone) return {};
  std::string rest = all_.substr(sent_);
  sent_ = all_.size();
  ParsedReply parsed = ParseToolCalls(rest, format_);
  if (parsed.calls.empty()) return ParsedReply{std::move(rest), {}};
  return parsed;
}

}  // namespace flatstate
