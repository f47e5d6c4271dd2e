// Chat messages and how a model's ChatTemplate (engine/model/config.h, config key chat_template,
// docs/model-format.md) turns them into prompt text. No template language: each message is its
// role's prefix, its content and the separator; the reply starts with the assistant prefix.
//
// Stateless; thread-safe; never fails (roles are checked when the request is parsed).
#ifndef FLATSTATE_SERVER_HTTP_CHAT_FORMAT_H_
#define FLATSTATE_SERVER_HTTP_CHAT_FORMAT_H_

#include <string>
#include <vector>

#include "engine/model/config.h"

namespace flatstate::server {

enum class ChatRole { kSystem, kUser, kAssistant };

struct ChatMessage {
  ChatRole role = ChatRole::kUser;
  std::string content;
};

// system/developer, user, assistant; false for any other role.
bool ParseChatRole(const std::string& name, ChatRole* role);

// prefix(role) + content + separator for each message, then the assistant prefix. A session that
// continues sends only its new messages: their text is appended to the session's context.
std::string RenderChat(const ChatTemplate& tmpl, const std::vector<ChatMessage>& messages);

}  // namespace flatstate::server

#endif  // FLATSTATE_SERVER_HTTP_CHAT_FORMAT_H_
