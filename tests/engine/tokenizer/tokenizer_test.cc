// The Tokenizer interface (engine/tokenizer/tokenizer.h) and its two implementations:
// ByteTokenizer (decoder state == IncrementalDecoder's pending bytes, the checkpoint text_tail)
// and IdsOnlyTokenizer (Hugging Face folders: ids, no text), and which one Model::Load picks.
#include "engine/tokenizer/tokenizer.h"

#include <string>
#include <vector>

#include "engine/model/model.h"
#include "engine/tokenizer/byte_tokenizer.h"
#include "engine/tokenizer/ids_only_tokenizer.h"
#include "gtest/gtest.h"
#include "tests/util/model_writer.h"

namespace flatstate {
namespace {

TEST(TokenizerTest, ByteTokenizerEncodesBytesAndAddsBosOnlyWhenAsked) {
  const ByteTokenizer t;
  EXPECT_EQ(t.vocab_size(), 256);
  EXPECT_EQ(t.kind(), "bytes");
  EXPECT_TRUE(t.has_text());
  EXPECT_EQ(t.bos_id(), -1);
  EXPECT_TRUE(t.eos_ids().empty());
  EXPECT_EQ(*t.Encode("h\xC3\xA9", false), (std::vector<int32_t>{104, 0xC3, 0xA9}));
  EXPECT_EQ(*t.Encode("h", true), (std::vector<int32_t>{104}));  // no BOS to add
  const ByteTokenizer with_bos(7, {9});
  EXPECT_EQ(*with_bos.Encode("h", true), (std::vector<int32_t>{7, 104}));
  EXPECT_EQ(*with_bos.Encode("h", false), (std::vector<int32_t>{104}));
  EXPECT_EQ(with_bos.eos_ids(), (std::vector<int32_t>{9}));
}

TEST(TokenizerTest, ByteTokenBytes) {
  const ByteTokenizer t;
  EXPECT_EQ(t.TokenBytes('A'), "A");
  EXPECT_EQ(t.TokenBytes(0xC3), "\xC3");
  EXPECT_EQ(t.TokenBytes(0), std::string(1, '\0'));
  EXPECT_EQ(t.TokenBytes(256), "");
  EXPECT_EQ(t.TokenBytes(-1), "");
}

// The decoder state is exactly IncrementalDecoder::pending_bytes(): what checkpoints stored as
// text_tail before the interface existed, so their bytes do not change.
TEST(TokenizerTest, ByteDecoderStateIsThePendingBytes) {
  const ByteTokenizer t;
  const std::string text = "a\xE2\x9C\x93" "b\xF0\x9F\x98\x80";  // a ✓ b 😀
  IncrementalDecoder ref;
  std::string state;
  const std::vector<int32_t> ids = *t.Encode(text, false);
  for (int32_t id : ids) {
    EXPECT_EQ(t.DecodeNext(id, &state), ref.Push(id));
    EXPECT_EQ(state, ref.pending_bytes());
    EXPECT_LE(state.size(), kMaxDecoderStateBytes);
  }
  EXPECT_EQ(t.Decode(ids), text);
}

// A stream cut anywhere and continued from its saved state (a checkpoint) gives the same text.
TEST(TokenizerTest, ByteDecoderResumesFromSavedState) {
  const ByteTokenizer t;
  const std::vector<int32_t> ids = *t.Encode("x\xE2\x9C\x93\xC3\xA9y", false);
  const std::string whole = t.Decode(ids);
  for (size_t cut = 0; cut <= ids.size(); ++cut) {
    TokenDecoder a(&t);
    std::string out;
    for (size_t i = 0; i < cut; ++i) out += a.Push(ids[i]);
    TokenDecoder b(&t, a.state());  // restored from the "checkpoint"
    for (size_t i = cut; i < ids.size(); ++i) out += b.Push(ids[i]);
    out += b.Flush();
    EXPECT_EQ(out, whole) << "cut at " << cut;
    EXPECT_FALSE(b.has_pending());
  }
}

TEST(TokenizerTest, ByteDecoderSurvivesForeignState) {
  const ByteTokenizer t;
  for (const std::string& bad : {std::string("abc"), std::string("\xFF\xFF"),
                                std::string("\x9C"), std::string("\xE2\x9C\x93\xE2")}) {
    std::string state = bad;
    const std::string out = t.DecodeNext('z', &state) + t.DecodeFlush(&state);
    EXPECT_TRUE(IsValidUtf8(out)) << out;
    EXPECT_TRUE(state.empty());
  }
  std::string state = "\xE2";
  EXPECT_EQ(t.DecodeFlush(&state), kReplacementChar);
}

TEST(TokenizerTest, ValidateIdsNamesFieldAndIndex) {
  const ByteTokenizer t;
  EXPECT_TRUE(t.ValidateIds(std::vector<int32_t>{0, 255}, "prompt_tokens").ok());
  absl::Status s = t.ValidateIds(std::vector<int32_t>{1, 256}, "prompt_tokens");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "prompt_tokens[1] = 256 is out of range [0, 256)");
  const IdsOnlyTokenizer ids("m", 512, 1, {2});
  EXPECT_TRUE(ids.ValidateIds(std::vector<int32_t>{511, 300}, "tokens").ok());
  EXPECT_EQ(ids.ValidateIds(std::vector<int32_t>{-1}, "tokens").message(),
            "tokens[0] = -1 is out of range [0, 512)");
}

TEST(TokenizerTest, IdsOnlyRefusesTextAndDecodesNothing) {
  const IdsOnlyTokenizer t("tiny-llama", 512, 1, {2});
  EXPECT_EQ(t.kind(), "ids-only");
  EXPECT_FALSE(t.has_text());
  EXPECT_EQ(t.vocab_size(), 512);
  EXPECT_EQ(t.bos_id(), 1);
  EXPECT_EQ(t.eos_ids(), (std::vector<int32_t>{2}));
  absl::StatusOr<std::vector<int32_t>> e = t.Encode("hello", true);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(e.status().message(),
            "model 'tiny-llama' has no tokenizer.json (flatstate reads Hugging Face tokenizers "
            "from tokenizer.json only): send token ids (prompt_tokens / prompt as an array of "
            "ids)");
  EXPECT_EQ(t.TokenBytes(5), "");
  EXPECT_EQ(t.Decode(std::vector<int32_t>{5, 6, 7}), "");
  std::string state = "junk";
  EXPECT_EQ(t.DecodeNext(5, &state), "");
  EXPECT_TRUE(state.empty());  // never carries state into a checkpoint
}

TEST(TokenizerTest, TokenDecoderWithoutTokenizerIsInert) {
  TokenDecoder d;
  EXPECT_EQ(d.Push(65), "");
  EXPECT_EQ(d.Flush(), "");
  EXPECT_TRUE(d.state().empty());
}

TEST(TokenizerTest, ModelPicksTokenizerByArchitecture) {
  const std::string dir = testing::TempDir() + "/tokenizer_test_model";
  ASSERT_TRUE(
      testing::WriteRandomModel(dir, testing::SmallConfig(AttentionKind::kLinearElu), 3).ok());
  absl::StatusOr<std::unique_ptr<Model>> byte_model = Model::Load(dir);
  ASSERT_TRUE(byte_model.ok()) << byte_model.status();
  EXPECT_EQ((*byte_model)->tokenizer().kind(), "bytes");
  EXPECT_EQ((*byte_model)->tokenizer().vocab_size(), 256);

  absl::StatusOr<std::unique_ptr<Model>> llama =
      Model::Load(std::string(FLATSTATE_SOURCE_DIR) + "/tests/data/hf_llama_tiny");
  ASSERT_TRUE(llama.ok()) << llama.status();
  const Tokenizer& t = (*llama)->tokenizer();
  EXPECT_EQ(t.kind(), "ids-only");
  EXPECT_EQ(t.vocab_size(), 512);
  EXPECT_EQ(t.bos_id(), 1);
  EXPECT_EQ(t.eos_ids(), (std::vector<int32_t>{2}));
  absl::StatusOr<std::vector<int32_t>> e = t.Encode("hi", false);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("model 'hf_llama_tiny'"), std::string::npos);
}

}  // namespace
}  // namespace flatstate
