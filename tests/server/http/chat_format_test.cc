// RenderChat and ParseChatRole (server/http/chat_format.h).
#include "server/http/chat_format.h"

#include "gtest/gtest.h"

namespace flatstate::server {
namespace {

// Aggregate-initialised: GCC 12 reports a false -Wrestrict for assigning short literals here.
ChatTemplate Template() { return ChatTemplate{"<sys>", "<user>", "<bot>", "|", {"|"}}; }

TEST(RenderChatTest, EachMessageIsPrefixContentSeparatorThenTheAssistantPrefix) {
  const std::vector<ChatMessage> messages = {{ChatRole::kSystem, "be brief"},
                                             {ChatRole::kUser, "hi"},
                                             {ChatRole::kAssistant, "hello"},
                                             {ChatRole::kUser, "bye"}};
  EXPECT_EQ(RenderChat(Template(), messages), "<sys>be brief|<user>hi|<bot>hello|<user>bye|<bot>");
}

TEST(RenderChatTest, NoMessagesIsJustTheReplyPrefix) {
  EXPECT_EQ(RenderChat(Template(), {}), "<bot>");
}

TEST(RenderChatTest, DefaultTemplateIsTheByteModelsDialogue) {
  EXPECT_EQ(RenderChat(ChatTemplate{}, {{ChatRole::kUser, "Wherefore?"}}),
            "ROMEO:\nWherefore?\n\nJULIET:\n");
}

TEST(ParseChatRoleTest, KnownRolesAndDeveloperIsSystem) {
  ChatRole r = ChatRole::kUser;
  EXPECT_TRUE(ParseChatRole("system", &r));
  EXPECT_EQ(r, ChatRole::kSystem);
  r = ChatRole::kUser;
  EXPECT_TRUE(ParseChatRole("developer", &r));
  EXPECT_EQ(r, ChatRole::kSystem);
  EXPECT_TRUE(ParseChatRole("assistant", &r));
  EXPECT_EQ(r, ChatRole::kAssistant);
  EXPECT_TRUE(ParseChatRole("user", &r));
  EXPECT_EQ(r, ChatRole::kUser);
  EXPECT_FALSE(ParseChatRole("tool", &r));
  EXPECT_FALSE(ParseChatRole("User", &r));
  EXPECT_EQ(r, ChatRole::kUser);  // unchanged on failure
}

}  // namespace
}  // namespace flatstate::server
