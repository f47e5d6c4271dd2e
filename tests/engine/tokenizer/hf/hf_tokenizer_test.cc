// Unit tests of the Hugging Face tokenizer pieces on small hand-written tokenizer.json snippets:
// BPE (merge forms, byte fallback, unk fusing, ignore_merges), added tokens (longest first,
// lstrip/rstrip/single_word, parse modes), normalizers, split behaviours, Metaspace, decoders and
// the streaming decoder state, the post-processor and tokenizer_config.json, load errors.
#include "engine/tokenizer/hf/hf_tokenizer.h"

#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "engine/model/model.h"
#include "engine/tokenizer/hf/normalizer.h"
#include "engine/tokenizer/hf/pattern.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/util/model_writer.h"

namespace flatstate {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Json = nlohmann::json;

// A small BPE: characters a-e, space as "▁", merges a+b, ab+c, b+c.
Json Base() {
  Json vocab = {{"<unk>", 0},
                {"<s>", 1},
                {"</s>", 2},
                {"a", 3},
                {"b", 4},
                {"c", 5},
                {"d", 6},
                {"e", 7},
                {"ab", 8},
                {"abc", 9},
                {"bc", 10},
                {"\xE2\x96\x81", 11},
                {"\xE2\x96\x81"
                 "a",
                 12}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab[name] = 13 + b;
  }
  return Json{{"version", "1.0"},
              {"added_tokens", Json::array({{{"id", 0}, {"content", "<unk>"}, {"special", true}},
                                            {{"id", 1}, {"content", "<s>"}, {"special", true}},
                                            {{"id", 2}, {"content", "</s>"}, {"special", true}}})},
              {"normalizer", nullptr},
              {"pre_tokenizer", nullptr},
              {"post_processor", nullptr},
              {"decoder", nullptr},
              {"model",
               {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", "<unk>"},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"vocab", vocab},
                {"merges", {"a b", "ab c", "b c", "\xE2\x96\x81 a"}}}}};
}

std::unique_ptr<HfTokenizer> Load(const Json& j, hf::TokenizerConfig config = {}) {
  auto t = HfTokenizer::FromJson(j.dump(), "tokenizer.json", std::move(config));
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

std::vector<int32_t> Enc(const HfTokenizer& t, const std::string& s, bool add = false,
                         bool parse = true) {
  return *t.EncodeWithOptions(s, {.add_special = add, .parse_special = parse});
}

std::string LoadError(const Json& j) {
  auto t = HfTokenizer::FromJson(j.dump(), "tokenizer.json");
  EXPECT_FALSE(t.ok());
  return t.ok() ? "" : std::string(t.status().message());
}

TEST(HfBpe, MergesByRankInBothForms) {
  auto t = Load(Base());
  EXPECT_THAT(Enc(*t, "abc"), ElementsAre(9));  // a+b first (rank 0), then ab+c
  EXPECT_THAT(Enc(*t, "bca"), ElementsAre(10, 3));
  Json j = Base();
  j["model"]["merges"] = Json::array({{"a", "b"}, {"ab", "c"}, {"b", "c"}});
  EXPECT_THAT(Enc(*Load(j), "abc"), ElementsAre(9));
  j["model"]["merges"] = Json::array({{"b", "c"}, {"a", "b"}});  // b+c outranks a+b now
  EXPECT_THAT(Enc(*Load(j), "abc"), ElementsAre(3, 10));
}

TEST(HfBpe, UnknownCharacters) {
  Json j = Base();
  EXPECT_THAT(Enc(*Load(j), "axxb"), ElementsAre(3, 0, 0, 4));
  j["model"]["fuse_unk"] = true;
  EXPECT_THAT(Enc(*Load(j), "axxb"), ElementsAre(3, 0, 4));
  j["model"]["byte_fallback"] = true;
  EXPECT_THAT(Enc(*Load(j), "a\xC3\xA9"), ElementsAre(3, 13 + 0xC3, 13 + 0xA9));
  j["model"]["unk_token"] = nullptr;
  j["model"]["byte_fallback"] = false;
  EXPECT_THAT(Enc(*Load(j), "axb"), ElementsAre(8));  // x dropped (as upstream), then a+b
}

TEST(HfBpe, IgnoreMerges) {
  Json j = Base();
  j["model"]["merges"] = {"b c"};
  EXPECT_THAT(Enc(*Load(j), "abc"), ElementsAre(3, 10));
  j["model"]["ignore_merges"] = true;
  EXPECT_THAT(Enc(*Load(j), "abc"), ElementsAre(9));  // the whole word is a token
}

TEST(HfAddedTokens, LongestFirstAndParseModes) {
  Json j = Base();
  j["added_tokens"].push_back({{"id", 300}, {"content", "<x>"}, {"special", true}});
  j["added_tokens"].push_back(
      {{"id", 301}, {"content", "<x>>"}, {"special", false}, {"normalized", false}});
  auto t = Load(j);
  EXPECT_EQ(t->vocab_size(), 302);
  EXPECT_THAT(Enc(*t, "a<x>>b"), ElementsAre(3, 301, 4));
  EXPECT_THAT(Enc(*t, "a<x>b"), ElementsAre(3, 300, 4));
  // Special text not parsed: the special token is text; the non-special one still matches.
  EXPECT_THAT(Enc(*t, "a<s>b", false, false), ElementsAre(3, 0, 0, 0, 4));
  EXPECT_THAT(Enc(*t, "a<s>b", false, true), ElementsAre(3, 1, 4));
  EXPECT_THAT(Enc(*t, "<x>>", false, false), ElementsAre(301));
  EXPECT_THAT(*t->Encode("<s>", false), ElementsAre(0, 0, 0));  // Encode: never parses
}

TEST(HfAddedTokens, StripAndSingleWord) {
  Json j = Base();
  j["normalizer"] = {
      {"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}};
  j["added_tokens"].push_back(
      {{"id", 300}, {"content", "ee"}, {"lstrip", true}, {"rstrip", true}, {"normalized", false}});
  j["added_tokens"].push_back(
      {{"id", 301}, {"content", "dd"}, {"single_word", true}, {"normalized", false}});
  auto t = Load(j);
  EXPECT_THAT(Enc(*t, "a  ee  b"), ElementsAre(3, 300, 4));
  EXPECT_THAT(Enc(*t, "a dd b"), ElementsAre(3, 11, 301, 11, 4));
  EXPECT_THAT(Enc(*t, "addb"), ElementsAre(3, 6, 6, 4));  // inside a word: not a match
}

TEST(HfNormalizers, EachKind) {
  const auto run = [](const Json& j, std::string s) {
    auto n = hf::Normalizer::FromJson(j, "normalizer");
    EXPECT_TRUE(n.ok()) << n.status();
    (*n)->Normalize(&s);
    return s;
  };
  EXPECT_EQ(run({{"type", "NFC"}}, "e\xCC\x81"), "\xC3\xA9");
  EXPECT_EQ(run({{"type", "NFD"}}, "\xC3\xA9"), "e\xCC\x81");
  EXPECT_EQ(run({{"type", "NFKC"}}, "\xEF\xAC\x81"), "fi");
  EXPECT_EQ(run({{"type", "Lowercase"}}, "ABC\xC3\x89"), "abc\xC3\xA9");
  EXPECT_EQ(run({{"type", "Strip"}, {"strip_left", true}, {"strip_right", false}}, " \t x "), "x ");
  EXPECT_EQ(run({{"type", "Prepend"}, {"prepend", "_"}}, "x"), "_x");
  EXPECT_EQ(run({{"type", "Prepend"}, {"prepend", "_"}}, ""), "");
  EXPECT_EQ(
      run({{"type", "Replace"}, {"pattern", {{"Regex", "\\s+"}}}, {"content", "-"}}, "a  b\tc"),
      "a-b-c");
  EXPECT_EQ(
      run({{"type", "Sequence"},
           {"normalizers", {{{"type", "Lowercase"}}, {{"type", "Prepend"}, {"prepend", ">"}}}}},
          "AB"),
      ">ab");
}

TEST(HfPattern, SplitBehaviors) {
  auto p = hf::Pattern::Literal("-");
  std::vector<hf::Span> spans;
  p->FindMatches("a-b--c", false, &spans);
  const auto pieces = [&](hf::SplitBehavior b) {
    std::vector<std::pair<size_t, size_t>> out;
    hf::ApplyBehavior(spans, b, &out);
    std::vector<std::string> s;
    for (auto [x, y] : out) s.push_back(std::string("a-b--c").substr(x, y - x));
    return s;
  };
  EXPECT_THAT(pieces(hf::SplitBehavior::kRemoved), ElementsAre("a", "b", "c"));
  EXPECT_THAT(pieces(hf::SplitBehavior::kIsolated), ElementsAre("a", "-", "b", "-", "-", "c"));
  EXPECT_THAT(pieces(hf::SplitBehavior::kMergedWithPrevious), ElementsAre("a-", "b-", "-", "c"));
  EXPECT_THAT(pieces(hf::SplitBehavior::kMergedWithNext), ElementsAre("a", "-b", "-", "-c"));
  EXPECT_THAT(pieces(hf::SplitBehavior::kContiguous), ElementsAre("a", "-", "b", "--", "c"));
  auto re = hf::Pattern::Regex("\\s+(?!\\S)|\\p{L}+");
  ASSERT_TRUE(re.ok());
  std::vector<std::pair<size_t, size_t>> m;
  (*re)->FindAll("ab   cd", &m);
  EXPECT_THAT(m,
              ElementsAre(std::make_pair(0u, 2u), std::make_pair(2u, 4u), std::make_pair(5u, 7u)));
}

TEST(HfMetaspace, PrependSchemeAndDecoder) {
  Json j = Base();
  j["pre_tokenizer"] = {{"type", "Metaspace"},
                        {"replacement", "\xE2\x96\x81"},
                        {"prepend_scheme", "first"},
                        {"split", true}};
  j["decoder"] = {{"type", "Metaspace"},
                  {"replacement", "\xE2\x96\x81"},
                  {"prepend_scheme", "first"},
                  {"split", true}};
  auto t = Load(j);
  EXPECT_THAT(Enc(*t, "a b"), ElementsAre(12, 11, 4));
  EXPECT_THAT(Enc(*t, "<s>a"), ElementsAre(1, 3));  // not at offset 0: no prepend
  const std::vector<int32_t> ids = {12, 11, 4};
  EXPECT_EQ(t->DecodeFull(ids, false), "a b");
  EXPECT_EQ(t->Decode(ids), "a b");
  EXPECT_EQ(t->TokenBytes(12), " a");
}

TEST(HfDecoder, StreamingStateFormat) {
  Json j = Base();
  j["model"]["byte_fallback"] = true;
  j["decoder"] = {
      {"type", "Sequence"},
      {"decoders",
       {{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
        {{"type", "ByteFallback"}},
        {{"type", "Fuse"}},
        {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  auto t = Load(j);
  // " é a": ▁, <0xC3>, <0xA9>, ▁a
  const std::vector<int32_t> ids = {11, 13 + 0xC3, 13 + 0xA9, 12};
  EXPECT_EQ(t->DecodeFull(ids, false), "\xC3\xA9 a");
  std::string state, out;
  std::vector<std::string> pieces;
  for (int32_t id : ids) {
    pieces.push_back(t->DecodeNext(id, &state));
    EXPECT_LE(state.size(), kMaxDecoderStateBytes);
  }
  out = pieces[0] + pieces[1] + pieces[2] + pieces[3] + t->DecodeFlush(&state);
  EXPECT_EQ(out, "\xC3\xA9 a");
  EXPECT_EQ(pieces[1], "");  // half a character is held back
  EXPECT_TRUE(state.empty());
  // The state: before any token ""; after the leading "▁" (stripped: one strip used) 0x80 | 0;
  // after half a character, that byte.
  state.clear();
  t->DecodeNext(11, &state);
  EXPECT_EQ(state, "\x80");
  t->DecodeNext(13 + 0xC3, &state);
  EXPECT_EQ(state, "\xC3");
  EXPECT_EQ(t->DecodeFlush(&state), "\xEF\xBF\xBD");
  // Foreign or corrupt states never crash.
  for (std::string s :
       {std::string("\xFF\xFF\xFF\xFF\xFF"), std::string("\x00", 1), std::string("\xBF\xE2\x82")}) {
    t->DecodeNext(3, &s);
    EXPECT_LE(s.size(), kMaxDecoderStateBytes);
    t->DecodeFlush(&s);
  }
  EXPECT_EQ(t->Decode(std::vector<int32_t>{99999, 3}),
            "\xEF\xBF\xBD"
            "a");
}

TEST(HfPostProcessor, TemplateAndConfig) {
  Json j = Base();
  auto plain = Load(j);
  EXPECT_THAT(Enc(*plain, "a", true), ElementsAre(3));
  hf::TokenizerConfig c;
  c.bos_token = "<s>";
  c.eos_token = "</s>";
  c.add_bos_token = true;
  auto llama = Load(j, c);
  EXPECT_THAT(Enc(*llama, "a", true), ElementsAre(1, 3));
  EXPECT_EQ(llama->bos_id(), 1);
  EXPECT_THAT(llama->eos_ids(), ElementsAre(2));
  j["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single",
                          {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                           {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                           {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}}},
                         {"special_tokens",
                          {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}},
                           {"</s>", {{"id", "</s>"}, {"ids", {2}}, {"tokens", {"</s>"}}}}}}};
  auto templ = Load(j, c);  // the template wins over add_bos_token
  EXPECT_THAT(Enc(*templ, "a", true), ElementsAre(1, 3, 2));
  EXPECT_THAT(Enc(*templ, "a", false), ElementsAre(3));
}

TEST(HfTokenizerConfig, ParsesTemplatesAndTokens) {
  auto c = hf::TokenizerConfig::Parse(
      R"({"bos_token": {"content": "<s>"}, "eos_token": "</s>", "add_bos_token": true,
          "chat_template": [{"name": "default", "template": "T"},
                            {"name": "tool_use", "template": "U"}]})",
      "tokenizer_config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->bos_token, "<s>");
  EXPECT_EQ(c->eos_token, "</s>");
  EXPECT_EQ(c->chat_template, "T");
  ASSERT_EQ(c->named_chat_templates.size(), 2u);
  EXPECT_EQ(c->named_chat_templates[1].first, "tool_use");
  auto bad = hf::TokenizerConfig::Parse(R"({"chat_template": 3})", "tokenizer_config.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("tokenizer_config.json: chat_template"));
}

TEST(HfLoadErrors, NameTheFileAndField) {
  EXPECT_THAT(std::string(HfTokenizer::FromJson("{", "dir/tokenizer.json").status().message()),
              HasSubstr("dir/tokenizer.json: not valid JSON at byte 1"));
  Json j = Base();
  j["model"]["type"] = "Unigram";
  EXPECT_THAT(LoadError(j), HasSubstr("tokenizer.json: model.type: unsupported model \"Unigram\""));
  j = Base();
  j["model"]["merges"].push_back("a zz");
  EXPECT_THAT(LoadError(j), HasSubstr("model.merges[4]: token \"zz\" is not in model.vocab"));
  j = Base();
  j["model"]["merges"] = {"c d"};
  EXPECT_THAT(LoadError(j), HasSubstr("model.merges[0]: merged token \"cd\""));
  j = Base();
  j["model"]["merges"] = {"abc"};
  EXPECT_THAT(LoadError(j), HasSubstr("model.merges[0]"));
  j = Base();
  j["model"]["dropout"] = 0.1;
  EXPECT_THAT(LoadError(j), HasSubstr("model.dropout"));
  j = Base();
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"}, {"pattern", {{"Regex", "(a"}}}, {"behavior", "Isolated"}}}}};
  EXPECT_THAT(LoadError(j), HasSubstr("pre_tokenizer.pretokenizers[0].pattern.Regex: bad regex"));
  j = Base();
  j["pre_tokenizer"] = {{"type", "Nope"}};
  EXPECT_THAT(LoadError(j), HasSubstr("pre_tokenizer.type: unsupported pre-tokenizer \"Nope\""));
  j = Base();
  j["normalizer"] = {{"type", "Precompiled"}};
  EXPECT_THAT(LoadError(j), HasSubstr("normalizer.type: unsupported normalizer"));
  j = Base();
  j["decoder"] = {{"type", "Strip"}};
  EXPECT_THAT(LoadError(j), HasSubstr("decoder.content"));
  j = Base();
  j["added_tokens"][1].erase("content");
  EXPECT_THAT(LoadError(j), HasSubstr("added_tokens[1].content"));
  j = Base();
  j["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single", {{{"SpecialToken", {{"id", "<q>"}}}}}}};
  EXPECT_THAT(LoadError(j),
              HasSubstr("post_processor.special_tokens: no entry with ids for \"<q>\""));
  j = Base();
  j["model"]["vocab"]["zz"] = -4;
  EXPECT_THAT(LoadError(j), HasSubstr("model.vocab[\"zz\"]"));
}

// Optional fields of the wrong JSON type are load errors naming the field (they used to throw
// nlohmann::type_error out of FromJson: a tokenizer_json_fuzzer crash); null means the default.
TEST(HfLoadErrors, WrongTypedOptionalFieldsNameTheField) {
  struct Case {
    std::function<void(Json&)> edit;
    std::string error;
  };
  const std::vector<Case> cases = {
      {[](Json& j) { j["model"]["type"] = 1; }, "model.type: expected a string, got number"},
      {[](Json& j) { j["model"]["byte_fallback"] = "yes"; },
       "model.byte_fallback: expected a boolean, got string"},
      {[](Json& j) { j["model"]["continuing_subword_prefix"] = 3; },
       "model.continuing_subword_prefix: expected a string"},
      {[](Json& j) { j["model"]["end_of_word_suffix"] = Json::array(); },
       "model.end_of_word_suffix: expected a string, got array"},
      {[](Json& j) { j["added_tokens"][1]["special"] = "true"; },
       "added_tokens[1].special: expected a boolean"},
      {[](Json& j) {
         j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"use_regex", 1}};
       },
       "pre_tokenizer.use_regex: expected a boolean"},
      {[](Json& j) {
         j["pre_tokenizer"] = {{"type", "Split"},
                               {"pattern", {{"String", " "}}},
                               {"behavior", "Isolated"},
                               {"invert", "no"}};
       },
       "pre_tokenizer.invert: expected a boolean"},
      {[](Json& j) {
         j["pre_tokenizer"] = {{"type", "Metaspace"}, {"split", 0}};
       },
       "pre_tokenizer.split: expected a boolean"},
      {[](Json& j) {
         j["pre_tokenizer"] = {{"type", "Digits"}, {"individual_digits", 1}};
       },
       "pre_tokenizer.individual_digits: expected a boolean"},
      {[](Json& j) {
         j["decoder"] = {{"type", "Metaspace"}, {"replacement", 5}};
       },
       "decoder.replacement: expected a string, got number"},
      {[](Json& j) {
         j["decoder"] = {{"type", "Metaspace"}, {"add_prefix_space", "x"}};
       },
       "decoder.add_prefix_space: expected a boolean"},
      {[](Json& j) {
         j["normalizer"] = {{"type", "Strip"}, {"strip_left", 1}};
       },
       "normalizer.strip_left: expected a boolean"},
      {[](Json& j) {
         j["post_processor"] = {{"type", "TemplateProcessing"},
                                {"single", {{{"SpecialToken", {{"id", "<q>"}}}}}},
                                {"special_tokens", {{"<q>", {{"ids", {int64_t{1} << 31}}}}}}};
       },
       "post_processor.special_tokens[\"<q>\"].ids: not a token id"},
  };
  for (const Case& c : cases) {
    Json j = Base();
    c.edit(j);
    EXPECT_THAT(LoadError(j), HasSubstr(c.error)) << j.dump();
  }
  Json j = Base();
  j["model"]["type"] = nullptr;
  j["model"]["continuing_subword_prefix"] = nullptr;
  j["model"]["byte_fallback"] = nullptr;
  j["added_tokens"][1]["special"] = nullptr;
  EXPECT_NE(Load(j), nullptr);
}

TEST(HfTokenizer, ModelLoadPicksItAndChecksVocabSize) {
  const std::string dir = testing::TempDir() + "/hf_tokenizer_test_model";
  std::filesystem::remove_all(dir);
  std::filesystem::copy(std::string(FLATSTATE_SOURCE_DIR) + "/tests/data/hf_llama_tiny", dir,
                        std::filesystem::copy_options::recursive);
  ASSERT_TRUE(testing::WriteFile(dir + "/tokenizer.json", Base().dump()));
  auto m = Model::Load(dir);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->tokenizer().kind(), "hf-bpe");
  EXPECT_EQ((*m)->tokenizer().bos_id(), 1);
  EXPECT_THAT(*(*m)->tokenizer().Encode("abc", true), ElementsAre(1, 9));
  Json big = Base();
  big["added_tokens"].push_back({{"id", 600}, {"content", "<big>"}, {"special", true}});
  ASSERT_TRUE(testing::WriteFile(dir + "/tokenizer.json", big.dump()));
  m = Model::Load(dir);
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(
      std::string(m.status().message()),
      HasSubstr("tokenizer.json: vocabulary has 601 tokens but config.json vocab_size is 512"));
  ASSERT_TRUE(testing::WriteFile(dir + "/tokenizer.json", "{\"model\": 3}"));
  m = Model::Load(dir);
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("tokenizer.json: model: missing"));
  std::filesystem::remove_all(dir);
}

TEST(HfTokenizer, ConcurrentEncodesAgree) {
  Json j = Base();
  // A regex pre-tokenizer too: Oniguruma searches share one compiled regex across threads.
  j["pre_tokenizer"] = {{"type", "Split"},
                        {"pattern", {{"Regex", "\\s+(?!\\S)|\\s+|\\p{L}+|[^\\s\\p{L}]+"}}},
                        {"behavior", "Isolated"}};
  auto t = Load(j);
  const std::string text = "abcabc bca abcd e <s>   ";
  const std::vector<int32_t> want = Enc(*t, text);
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      for (int i = 0; i < 500; ++i) ok[k] += Enc(*t, text + std::string(i % 7, 'a')).size() > 0;
      ok[k] += Enc(*t, text) == want ? 1 : 0;
    });
  }
  for (auto& th : threads) th.join();
  for (int k = 0; k < 4; ++k) EXPECT_EQ(ok[k], 501);
}

}  // namespace
}  // namespace flatstate
