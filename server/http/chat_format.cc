#include "server/http/chat_format.h"

namespace flatstate::server {

bool ParseChatRole(const std::string& name, ChatRole* role) {
  if (name == "system" || name == "developer") {
    *role = ChatRole::kSystem;
  } else if (name == "user") {
    *role = ChatRole::kUser;
  } else if (name == "assistant") {
    *role = ChatRole::kAssistant;
  } else {
    return false;
  }
  return true;
}

std::string RenderChat(const ChatTemplate& tmpl, const std::vector<ChatMessage>& messages) {
  std::string out;
  for (const ChatMessage& m : messages) {
    switch (m.role) {
      case ChatRole::kSystem:
        out += tmpl.system;
        break;
      case ChatRole::kUser:
        out += tmpl.user;
        break;
      case ChatRole::kAssistant:
        out += tmpl.assistant;
        break;
    }
    out += m.content;
    out += tmpl.separator;
  }
  out += tmpl.assistant;
  return out;
}

}  // namespace flatstate::server
