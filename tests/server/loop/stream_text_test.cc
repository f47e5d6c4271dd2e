// StreamText: text of each token through the session's decoder, and stop strings matched across
// token boundaries and UTF-8 character boundaries (server/loop/stream_text.h).
#include "server/loop/stream_text.h"

#include <string>
#include <vector>

#include "engine/tokenizer/byte_tokenizer.h"
#include "gtest/gtest.h"

namespace flatstate::server {
namespace {

// Pushes each byte of `bytes` as one token; returns the index of the first push that reported a
// stop (-1: none) and appends every returned text to `*text`.
int PushAll(StreamText* st, TokenDecoder* d, const std::string& bytes, std::string* text) {
  int stopped_at = -1;
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string t;
    const bool stop = st->Push(d, static_cast<unsigned char>(bytes[i]), &t);
    *text += t;
    if (stop && stopped_at < 0) stopped_at = static_cast<int>(i);
  }
  return stopped_at;
}

class StreamTextTest : public ::testing::Test {
 protected:
  ByteTokenizer tokenizer_;
  TokenDecoder decoder_{&tokenizer_};
};

TEST_F(StreamTextTest, NoStopStringsPassesTextThrough) {
  StreamText st;
  std::string text;
  EXPECT_EQ(PushAll(&st, &decoder_, "hello world", &text), -1);
  EXPECT_EQ(text, "hello world");
}

TEST_F(StreamTextTest, StopStringSplitAcrossTokensStopsOnTheTokenThatCompletesIt) {
  StreamText st({"lo w"});
  std::string text;
  // "l" "o" " " "w": the match spans four tokens and ends at index 6 (the 'w').
  EXPECT_EQ(PushAll(&st, &decoder_, "hello world", &text), 6);
  // The completing token's text is still returned (the caller cuts at the stop string).
  EXPECT_EQ(text, "hello world");
}

// A speculative draft is cut before the token that would complete a stop string, with the match
// spanning the text already emitted and a UTF-8 character split across tokens; the stream itself
// is untouched (the same Push results afterwards).
TEST_F(StreamTextTest, TokensBeforeStopFindsTheTokenThatWouldCompleteAStop) {
  StreamText st({"l\xc3\xa9 w", "zz"});
  std::string text;
  EXPECT_EQ(PushAll(&st, &decoder_, "hel", &text), -1);
  auto ids = [](const std::string& bytes) {
    std::vector<int32_t> out;
    for (unsigned char c : bytes) out.push_back(c);
    return out;
  };
  // "\xc3" "\xa9" " " "w" "x": the stop ("l" already emitted) completes at index 3.
  EXPECT_EQ(st.TokensBeforeStop(decoder_, ids("\xc3\xa9 wx")), 3u);
  EXPECT_EQ(st.TokensBeforeStop(decoder_, ids("\xc3\xa9 ")), 3u);  // none completes: all of it
  EXPECT_EQ(st.TokensBeforeStop(decoder_, ids("azzz")), 2u);
  EXPECT_EQ(st.TokensBeforeStop(decoder_, {}), 0u);
  EXPECT_EQ(StreamText().TokensBeforeStop(decoder_, ids("zz")), 2u);  // no stop strings
  // Nothing was consumed: pushing the same bytes stops where the cut said.
  EXPECT_EQ(PushAll(&st, &decoder_, "\xc3\xa9 wx", &text), 3);
}

TEST_F(StreamTextTest, AnyOfSeveralStopStringsAndOnlyANewMatchCounts) {
  StreamText st({"zz", "b"});
  std::string t;
  EXPECT_FALSE(st.Push(&decoder_, 'a', &t));
  EXPECT_TRUE(st.Push(&decoder_, 'b', &t));
  EXPECT_EQ(t, "b");
  // "b" stays in the text, but a match that does not end in the new text is not reported again.
  EXPECT_FALSE(st.Push(&decoder_, 'c', &t));
  EXPECT_FALSE(st.Push(&decoder_, 'z', &t));
  EXPECT_TRUE(st.Push(&decoder_, 'z', &t));
}

TEST_F(StreamTextTest, APrefixOfAStopStringDoesNotStop) {
  StreamText st({"abc"});
  std::string text;
  EXPECT_EQ(PushAll(&st, &decoder_, "ababxabd", &text), -1);
  EXPECT_EQ(text, "ababxabd");
}

TEST_F(StreamTextTest, MultiByteCharacterIsHeldUntilCompleteAndCanBeAStop) {
  const std::string e_acute = "\xC3\xA9";  // é: two byte tokens
  StreamText st({e_acute});
  std::string t;
  EXPECT_FALSE(st.Push(&decoder_, 'x', &t));
  EXPECT_EQ(t, "x");
  EXPECT_FALSE(st.Push(&decoder_, 0xC3, &t));
  EXPECT_EQ(t, "");  // incomplete character: no text yet
  EXPECT_TRUE(decoder_.has_pending());
  EXPECT_TRUE(st.Push(&decoder_, 0xA9, &t));
  EXPECT_EQ(t, e_acute);
  EXPECT_FALSE(decoder_.has_pending());
}

TEST_F(StreamTextTest, StopStringEndingInsideAFourByteCharacterWaitsForTheCharacter) {
  const std::string emoji = "\xF0\x9F\x99\x82";  // U+1F642, four byte tokens
  StreamText st({"a" + emoji});
  std::string text;
  const int at = PushAll(&st, &decoder_, "a" + emoji + "b", &text);
  EXPECT_EQ(at, 4);  // the 4th byte of the emoji completes it
  EXPECT_EQ(text, "a" + emoji + "b");
}

TEST_F(StreamTextTest, DecoderCarriesAnIncompleteCharacterFromAnEarlierStream) {
  // A previous Generate call ended after the first byte of "é" (the session's decoder keeps it).
  std::string t;
  StreamText first;
  EXPECT_FALSE(first.Push(&decoder_, 0xC3, &t));
  EXPECT_EQ(t, "");
  StreamText second({"\xC3\xA9!"});
  EXPECT_FALSE(second.Push(&decoder_, 0xA9, &t));
  EXPECT_EQ(t, "\xC3\xA9");
  EXPECT_TRUE(second.Push(&decoder_, '!', &t));
}

TEST(EncodePromptTest, AppendsTheTokenizersIds) {
  ByteTokenizer tokenizer;
  std::vector<int32_t> ids = {7};
  ASSERT_TRUE(EncodePrompt(tokenizer, "hi", &ids).ok());
  EXPECT_EQ(ids, (std::vector<int32_t>{7, 'h', 'i'}));
}

}  // namespace
}  // namespace flatstate::server
