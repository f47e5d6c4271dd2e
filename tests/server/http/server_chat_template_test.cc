// /v1/chat/completions and /apply-template with a model that ships a Jinja chat template
// (engine/chat/chat_prompt.h): a copy of tests/data/hf_qwen35_tiny given a byte-level BPE
// tokenizer.json with ChatML's two special tokens and a ChatML chat_template in
// tokenizer_config.json. The rendered prompt, its token count in `usage`, tool messages and
// kwargs reaching the template, and a template's own error as a 400 naming the line.
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "tests/server/http/http_test_util.h"

namespace flatstate::testing {
namespace {

constexpr char kChat[] = "tiny-chat";

// GPT-2's bytes_to_unicode: printable bytes map to themselves, the others to U+0100 + n.
std::string ByteLevelVocabJson() {
  nlohmann::json vocab = nlohmann::json::object();
  int next = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    const uint32_t cp = printable ? b : 256 + next++;
    std::string utf8;
    if (cp < 0x80) {
      utf8 = std::string(1, static_cast<char>(cp));
    } else {
      utf8 = {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
    }
    vocab[utf8] = b;
  }
  return vocab.dump();
}

const std::string& ChatModelsDir() {
  static const std::string* dir = [] {
    auto* d = new std::string(TempDir() + "/chat_models");
    const std::string m = *d + "/" + kChat;
    std::error_code ec;
    std::filesystem::create_directories(*d, ec);
    std::filesystem::copy(std::string(FLATSTATE_SOURCE_DIR) + "/tests/data/hf_qwen35_tiny", m,
                          std::filesystem::copy_options::recursive |
                              std::filesystem::copy_options::overwrite_existing,
                          ec);
    EXPECT_FALSE(ec) << ec.message();
    std::ofstream(m + "/tokenizer.json")
        << absl::StrCat(R"({
      "version": "1.0",
      "added_tokens": [
        {"id": 256, "content": "<|im_start|>", "special": true, "single_word": false,
         "lstrip": false, "rstrip": false, "normalized": false},
        {"id": 257, "content": "<|im_end|>", "special": true, "single_word": false,
         "lstrip": false, "rstrip": false, "normalized": false}],
      "normalizer": null,
      "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true,
                        "use_regex": true},
      "post_processor": null,
      "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true,
                  "use_regex": true},
      "model": {"type": "BPE", "dropout": null, "unk_token": null,
                "continuing_subword_prefix": null, "end_of_word_suffix": null,
                "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
                "vocab": )",
                        ByteLevelVocabJson(), R"(, "merges": []}})");
    const nlohmann::json config{
        {"eos_token", "<|im_end|>"},
        {"chat_template",
         "{%- if messages[0].role == 'robot' %}{{ raise_exception('no robots') }}{% endif %}"
         "{%- for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content }}"
         "{% if tools and loop.first %} [{{ tools | length }} tools]{% endif %}"
         "{{ '<|im_end|>\\n' }}{% endfor %}"
         "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
         "{% if enable_thinking is false %}<think></think>{% endif %}{% endif %}"}};
    std::ofstream(m + "/tokenizer_config.json") << config.dump();
    std::filesystem::remove(m + "/tokenizer.model", ec);
    return d;
  }();
  return *dir;
}

class ChatTemplateApiTest : public HttpTest {
 protected:
  static void SetUpTestSuite() {
    server::ServerOptions o = HttpTestOptions();
    o.models_dir = ChatModelsDir();
    o.default_model = kChat;
    StartSuiteServer(o);
  }
};

TEST_F(ChatTemplateApiTest, TheModelsTemplateRendersTheConversation) {
  const json messages = {{{"role", "user"}, {"content", "hi"}}};
  HttpReply r = Post("/apply-template", {{"messages", messages}});
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["prompt"], "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  // Tools, a tool message, kwargs and add_generation_prompt all reach the template.
  r = Post("/apply-template", {{"messages",
                                {{{"role", "user"}, {"content", "w?"}},
                                 {{"role", "tool"}, {"tool_call_id", "c"}, {"content", "21"}}}},
                               {"tools", {{{"type", "function"}, {"function", {{"name", "f"}}}}}},
                               {"chat_template_kwargs", {{"enable_thinking", false}}}});
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["prompt"],
            "<|im_start|>user\nw? [1 tools]<|im_end|>\n<|im_start|>tool\n21<|im_end|>\n"
            "<|im_start|>assistant\n<think></think>");
  r = Post("/apply-template", {{"messages", messages}, {"add_generation_prompt", false}});
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["prompt"], "<|im_start|>user\nhi<|im_end|>\n");
}

TEST_F(ChatTemplateApiTest, ChatCompletionRunsTheRenderedIds) {
  HttpReply r = Post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                                              {"max_tokens", 3},
                                              {"temperature", 0},
                                              {"ignore_eos", true}});
  ASSERT_EQ(r.status, 200) << r.raw;
  // <|im_start|> u s e r \n h i <|im_end|> \n <|im_start|> a s s i s t a n t \n: 1 + 7 + 1 + 1 +
  // 1 + 10 = 21 ids (special tokens parsed, every other byte its own token).
  EXPECT_EQ(r.body["usage"]["prompt_tokens"], 21) << r.raw;
  EXPECT_EQ(r.body["usage"]["completion_tokens"], 3) << r.raw;
}

TEST_F(ChatTemplateApiTest, TemplateErrorsAre400sNamingTheLine) {
  HttpReply r = Post("/v1/chat/completions",
                     {{"messages", {{{"role", "robot"}, {"content", "beep"}}}}, {"max_tokens", 2}});
  EXPECT_EQ(r.status, 400) << r.raw;
  EXPECT_EQ(r.body["error"]["param"], "messages") << r.raw;
  const std::string msg = r.body["error"]["message"];
  EXPECT_NE(msg.find("chat template \"tiny-chat\" line 1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("no robots"), std::string::npos) << msg;
}

}  // namespace
}  // namespace flatstate::testing
