// Limits and abuse, one request at a time: oversized messages, session floods, huge prompts and
// invalid UTF-8 get their documented error codes (never a hang or a crash), and existing sessions
// keep serving.
#include <atomic>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "engine/tokenizer/byte_tokenizer.h"
#include "tests/system/limits_test_util.h"

namespace flatstate::testing {
namespace {

TEST(LimitsTest, OversizedMessageIsResourceExhausted) {
  server::ServerOptions o = TestOptions();
  o.max_receive_message_bytes = 1 << 20;
  o.max_prompt_tokens = 1000;
  auto server = StartServer(o);
  ASSERT_NE(server, nullptr);
  auto stub = Connect(server->port());
  pb::Session s;
  ASSERT_TRUE(CreateSession(stub.get(), kLinear, &s).ok());

  StreamResult big = RunGenerate(stub.get(), GenRequest("", std::string(2 << 20, 'a'), 1));
  EXPECT_EQ(big.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << big.status.error_message();
  pb::RestoreSessionRequest restore;
  restore.set_data(std::string(3 << 20, '\0'));
  pb::Session out;
  grpc::ClientContext ctx;
  EXPECT_EQ(stub->RestoreSession(&ctx, restore, &out).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  // Just under the limit is accepted by the transport (and then judged by validation).
  StreamResult under = RunGenerate(stub.get(), GenRequest("", std::string(1000 << 10, 'a'), 1));
  EXPECT_EQ(under.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << under.status.error_message();
  EXPECT_NE(under.status.error_message().find("max_prompt_tokens"), std::string::npos);
  ExpectContinues(stub.get(), s.session_id());
}

TEST(LimitsTest, CreateSessionFloodBeyondMaxSessions) {
  server::ServerOptions o = TestOptions();
  o.max_sessions = 16;
  auto server = StartServer(o);
  ASSERT_NE(server, nullptr);
  auto stub = Connect(server->port());
  std::vector<std::string> ids;
  for (int i = 0; i < o.max_sessions; ++i) {
    pb::Session s;
    ASSERT_TRUE(CreateSession(stub.get(), i % 2 ? kSoftmax : kLinear, &s).ok());
    ids.push_back(s.session_id());
  }
  std::atomic<int> exhausted{0}, other{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 100; ++i) {
        pb::Session s;
        const grpc::Status st = CreateSession(stub.get(), kLinear, &s);
        (st.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED ? exhausted : other)++;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(exhausted.load(), 400);
  EXPECT_EQ(other.load(), 0);
  // A throwaway Generate needs a session slot too.
  EXPECT_EQ(RunGenerate(stub.get(), GenRequest(kLinear, "x", 1)).status.error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  for (const std::string& id : ids) ExpectContinues(stub.get(), id);
  EXPECT_EQ(Stats(stub.get()).active_sessions(), static_cast<uint64_t>(o.max_sessions));
  // Freeing one slot admits exactly one more.
  grpc::ClientContext ctx;
  pb::DeleteSessionRequest del;
  del.set_session_id(ids.back());
  pb::DeleteSessionResponse dresp;
  ASSERT_TRUE(stub->DeleteSession(&ctx, del, &dresp).ok());
  pb::Session again;
  EXPECT_TRUE(CreateSession(stub.get(), kLinear, &again).ok());
  EXPECT_EQ(CreateSession(stub.get(), kLinear, &again).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
}

TEST(LimitsTest, MillionTokenPromptsAreRejectedAndJustUnderARaisedLimitWorks) {
  server::ServerOptions o = TestOptions();
  o.max_prompt_tokens = 100000;  // raised from what a tiny model would need, lowered from 1 << 20
  o.step_token_budget = 4096;
  auto server = StartServer(o);
  ASSERT_NE(server, nullptr);
  auto stub = Connect(server->port());
  pb::Session s;
  ASSERT_TRUE(CreateSession(stub.get(), kLinear, &s).ok());
  // Two million tokens, as text and as token ids.
  StreamResult text = RunGenerate(stub.get(), GenRequest(kLinear, std::string(2000000, 'z'), 1));
  EXPECT_EQ(text.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(text.status.error_message().find("max_prompt_tokens"), std::string::npos);
  pb::GenerateRequest ids = GenRequest(kLinear, "", 1);
  ids.set_session_id(s.session_id());
  for (int i = 0; i < 2000000; ++i) ids.add_prompt_tokens(i % 256);
  EXPECT_EQ(RunGenerate(stub.get(), ids).status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // One over the limit, then exactly at it.
  EXPECT_EQ(
      RunGenerate(stub.get(), GenRequest(kLinear, std::string(100001, 'z'), 1)).status.error_code(),
      grpc::StatusCode::INVALID_ARGUMENT);
  std::string prompt;
  for (int i = 0; i < 100000; ++i) prompt.push_back(static_cast<char>('a' + i % 26));
  pb::GenerateRequest ok = GenRequest("", prompt, 2);
  ok.set_session_id(s.session_id());
  StreamResult r = RunGenerate(stub.get(), ok);
  EXPECT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.last.usage().context_tokens(), 100002u);
  ExpectContinues(stub.get(), s.session_id());
}

// Invalid UTF-8. `prompt` is bytes: any byte sequence is a prompt, one token per byte. A `stop`
// string that is not valid UTF-8 could never match the (always valid) text: INVALID_ARGUMENT
// naming it. The id and model fields are proto3 strings: gRPC's parser rejects invalid UTF-8 there
// before the server sees the call, and gRPC 1.51's callback server then answers UNIMPLEMENTED with
// an empty message (grpc/grpc#30454); asserted so that a change (a gRPC upgrade) is noticed, and
// documented in docs/server.md. Either way the server keeps serving.
TEST(LimitsTest, InvalidUtf8InRequestFields) {
  auto server = StartServer(TestOptions());
  ASSERT_NE(server, nullptr);
  auto stub = Connect(server->port());
  const std::vector<std::string> prompts = {
      "\xff\xfe", "\xc0\xaf" /* overlong '/' */, "\xed\xa0\x80" /* surrogate */,
      "ok\x80", std::string("\0\xff", 2), "\xf4\x90\x80\x80" /* > U+10FFFF */};
  for (const std::string& prompt : prompts) {
    const std::string name = absl::CEscape(prompt);
    StreamResult r = RunGenerate(stub.get(), GenRequest(kLinear, prompt, 3));
    ASSERT_TRUE(r.status.ok()) << name << ": " << r.status.error_message();
    EXPECT_EQ(r.last.usage().prompt_tokens(), prompt.size()) << name;
    EXPECT_EQ(r.tokens.size(), 3u) << name;
    EXPECT_TRUE(IsValidUtf8(r.text)) << name;
    // The bytes are the tokens: the same continuation as prompt_tokens with those byte values.
    pb::GenerateRequest by_tokens = GenRequest(kLinear, "", 3);
    for (unsigned char c : prompt) by_tokens.add_prompt_tokens(c);
    EXPECT_EQ(RunGenerate(stub.get(), by_tokens).tokens, r.tokens) << name;
  }
  // In a session the context grows by the byte count.
  pb::Session session;
  ASSERT_TRUE(CreateSession(stub.get(), kSoftmax, &session).ok());
  pb::GenerateRequest in_session = GenRequest("", "\xff\xfe\xfd", 2);
  in_session.set_session_id(session.session_id());
  StreamResult r = RunGenerate(stub.get(), in_session);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.last.usage().context_tokens(), 5u);

  pb::GenerateRequest bad_stop = GenRequest(kLinear, "x", 2);
  bad_stop.add_stop("ok");
  bad_stop.add_stop("\xff");
  StreamResult s = RunGenerate(stub.get(), bad_stop);
  EXPECT_EQ(s.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(s.status.error_message(), "stop[1]")) << s.status.error_message();

  // The string fields: rejected by gRPC's parser (UNIMPLEMENTED, no message).
  const std::string bad = "\xff";
  std::map<std::string, grpc::Status> unparsable;
  pb::GenerateRequest g = GenRequest(bad, "x", 1);
  unparsable["Generate.model"] = RunGenerate(stub.get(), g).status;
  g = GenRequest(kLinear, "x", 1);
  g.set_session_id(bad);
  unparsable["Generate.session_id"] = RunGenerate(stub.get(), g).status;
  // One unary call with a default response; `rpc` is the stub's blocking method.
  auto unary = [&](auto rpc, const auto& req, auto response) {
    grpc::ClientContext ctx;
    return ((*stub).*rpc)(&ctx, req, &response);
  };
  using Stub = pb::Inference::Stub;
  pb::CreateSessionRequest create;
  create.set_model(bad);
  unparsable["CreateSession.model"] = unary(&Stub::CreateSession, create, pb::Session());
  pb::GetSessionRequest get;
  get.set_session_id(bad);
  unparsable["GetSession.session_id"] = unary(&Stub::GetSession, get, pb::Session());
  pb::DeleteSessionRequest del;
  del.set_session_id(bad);
  unparsable["DeleteSession.session_id"] =
      unary(&Stub::DeleteSession, del, pb::DeleteSessionResponse());
  pb::CheckpointSessionRequest ckpt;
  ckpt.set_session_id(bad);
  unparsable["CheckpointSession.session_id"] =
      unary(&Stub::CheckpointSession, ckpt, pb::Checkpoint());
  pb::RestoreSessionRequest restore;
  restore.set_checkpoint_id(bad);
  unparsable["RestoreSession.checkpoint_id"] =
      unary(&Stub::RestoreSession, restore, pb::Session());
  for (const auto& [field, st] : unparsable) {
    EXPECT_EQ(st.error_code(), grpc::StatusCode::UNIMPLEMENTED)
        << field << ": " << st.error_code() << " " << st.error_message();
  }
  // Still serving, nothing leaked: the one session, which continues.
  ExpectContinues(stub.get(), session.session_id());
  EXPECT_EQ(Stats(stub.get()).active_sessions(), 1u);
}


}  // namespace
}  // namespace flatstate::testing
