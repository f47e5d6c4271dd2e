// In-process server tests of Generate: the streamed output equals the engine's, alone and in 32
// concurrent streams; sessions continue across calls; stop strings; cancellation and deadlines
// stop the stream and leave the session usable.
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "tests/server/server_test_fixture.h"

namespace flatstate::testing {
namespace {

TEST_F(ServerTest, StreamEqualsEngineOutput) {
  for (const char* model : {kLinear, kSoftmax}) {
    for (float temp : {0.f, 0.9f}) {
      const std::string prompt = "ROMEO: but soft, what light through yonder window breaks?";
      const absl::Time start = absl::Now();
      StreamResult r = RunGenerate(stub_.get(), GenRequest(model, prompt, 40, temp, 5));
      const absl::Duration elapsed = absl::Now() - start;
      ASSERT_TRUE(r.status.ok()) << r.status.error_message();
      const std::vector<int32_t> ref = Reference(model, prompt, 40, temp, 5);
      EXPECT_EQ(r.tokens, ref) << model << " T=" << temp;
      EXPECT_EQ(r.text, Decode(ref));
      EXPECT_TRUE(IsValidUtf8(r.text));
      EXPECT_EQ(r.last.finish_reason(), pb::LENGTH);
      EXPECT_EQ(r.last.usage().prompt_tokens(), prompt.size());
      EXPECT_EQ(r.last.usage().generated_tokens(), 40u);
      EXPECT_EQ(r.last.usage().context_tokens(), prompt.size() + 40);
      EXPECT_GT(r.last.usage().state_bytes(), 0u);
      // Server-side decode time: positive, and no longer than the client saw the stream take.
      EXPECT_GT(r.last.usage().decode_us(), 0u);
      EXPECT_LE(r.last.usage().decode_us(), absl::ToInt64Microseconds(elapsed));
    }
  }
  StreamResult one = RunGenerate(stub_.get(), GenRequest(kLinear, "ROMEO:", 1));
  ASSERT_TRUE(one.status.ok());
  EXPECT_EQ(one.last.usage().decode_us(), 0u) << "one token has no decode time";
}

TEST_F(ServerTest, DefaultModelIsLinear) {
  EXPECT_EQ(server_->default_model(), kLinear);
  StreamResult r = RunGenerate(stub_.get(), GenRequest("", "hello", 8));
  ASSERT_TRUE(r.status.ok());
  EXPECT_EQ(r.tokens, Reference(kLinear, "hello", 8));
}

TEST_F(ServerTest, ConcurrentStreamsEqualTheirRunAlone) {
  constexpr int kStreams = 32;
  constexpr int kTokens = 24;
  std::vector<std::string> prompts(kStreams), models(kStreams);
  std::vector<pb::Session> sessions(kStreams);
  for (int i = 0; i < kStreams; ++i) {
    models[i] = i % 2 == 0 ? kLinear : kSoftmax;
    // Lengths from 3 to ~190 bytes: some prefills need several steps under the 64-token budget.
    prompts[i] = absl::StrCat("stream ", i, ": ", std::string(static_cast<size_t>(i * 6), 'a' + i % 26));
    sessions[i] = Create(models[i], 0.8f, 100 + i);
  }
  std::vector<StreamResult> results(kStreams);
  std::vector<std::thread> threads;
  for (int i = 0; i < kStreams; ++i) {
    threads.emplace_back([&, i] {
      auto stub = Connect(server_->port());
      pb::GenerateRequest req = GenRequest("", prompts[i], kTokens);
      req.set_session_id(sessions[i].session_id());
      results[i] = RunGenerate(stub.get(), req);
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kStreams; ++i) {
    ASSERT_TRUE(results[i].status.ok()) << i << ": " << results[i].status.error_message();
    EXPECT_EQ(results[i].tokens, Reference(models[i], prompts[i], kTokens, 0.8f, 100 + i))
        << "stream " << i;
  }
}

TEST_F(ServerTest, SessionContinuesAcrossCalls) {
  pb::Session s = Create(kLinear, 0.7f, 42);
  pb::GenerateRequest req = GenRequest("", "The quick brown fox", 10);
  req.set_session_id(s.session_id());
  StreamResult a = RunGenerate(stub_.get(), req);
  ASSERT_TRUE(a.status.ok()) << a.status.error_message();
  req.clear_prompt();  // continue from the pending token
  StreamResult b = RunGenerate(stub_.get(), req);
  ASSERT_TRUE(b.status.ok()) << b.status.error_message();
  std::vector<int32_t> all = a.tokens;
  all.insert(all.end(), b.tokens.begin(), b.tokens.end());
  EXPECT_EQ(all, Reference(kLinear, "The quick brown fox", 20, 0.7f, 42));
  EXPECT_EQ(Get(s.session_id()).context_tokens(), 19u + 20u);
}

TEST_F(ServerTest, StopString) {
  const std::vector<int32_t> ref = Reference(kLinear, "stop test", 30);
  const std::string text = Decode(ref);
  // A stop string that is a valid UTF-8 prefix of the streamed text, ending after token k.
  std::string stop;
  size_t k = 4;
  for (; k < ref.size(); ++k) {
    stop = Decode(std::vector<int32_t>(ref.begin(), ref.begin() + k));
    if (text.compare(0, stop.size(), stop) == 0) break;
  }
  ASSERT_LT(k, ref.size());
  pb::GenerateRequest req = GenRequest(kLinear, "stop test", 30);
  req.add_stop(stop);
  StreamResult r = RunGenerate(stub_.get(), req);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.last.finish_reason(), pb::STOP);
  // The token that completes the stop string may release more text (a held-back byte).
  EXPECT_LE(r.tokens.size(), k + 1);
  EXPECT_EQ(r.text.compare(0, stop.size(), stop), 0) << r.text;
}

TEST_F(ServerTest, CancelMidStreamKeepsSessionUsable) {
  for (const char* model : {kLinear, kSoftmax}) {
    pb::Session s = Create(model, 0.8f, 9);
    const std::string prompt = "cancel me";
    std::vector<int32_t> received;
    {
      grpc::ClientContext ctx;
      pb::GenerateRequest req = GenRequest("", prompt, 5000);
      req.set_session_id(s.session_id());
      auto reader = stub_->Generate(&ctx, req);
      pb::GenerateResponse msg;
      for (int i = 0; i < 3 && reader->Read(&msg); ++i) {
        received.insert(received.end(), msg.token_ids().begin(), msg.token_ids().end());
      }
      ctx.TryCancel();
      while (reader->Read(&msg)) {
        received.insert(received.end(), msg.token_ids().begin(), msg.token_ids().end());
      }
      EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
    }
    ASSERT_GE(received.size(), 3u);
    // The stream stops within a step; the session holds every token the server emitted, which
    // is what the client received plus at most those still in flight when it cancelled.
    pb::Session after;
    for (int tries = 0; tries < 100; ++tries) {
      after = Get(s.session_id());
      if (!after.generating()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_FALSE(after.generating());
    const size_t emitted = after.context_tokens() - prompt.size();
    EXPECT_GE(emitted, received.size());
    EXPECT_LT(emitted, 5000u);
    const std::vector<int32_t> ref = Reference(model, prompt, static_cast<int>(emitted) + 10, 0.8f, 9);
    EXPECT_EQ(std::vector<int32_t>(ref.begin(), ref.begin() + received.size()), received);
    // The next Generate continues exactly after the emitted tokens.
    pb::GenerateRequest req = GenRequest("", "", 10);
    req.set_session_id(s.session_id());
    StreamResult r = RunGenerate(stub_.get(), req);
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.tokens, std::vector<int32_t>(ref.begin() + emitted, ref.end()));
    EXPECT_EQ(r.last.usage().context_tokens(), prompt.size() + emitted + 10);
  }
}

TEST_F(ServerTest, DeadlineStopsStream) {
  pb::Session s = Create(kLinear);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(300));
  pb::GenerateRequest req = GenRequest("", "deadline", 60000);
  req.set_session_id(s.session_id());
  auto reader = stub_->Generate(&ctx, req);
  pb::GenerateResponse msg;
  while (reader->Read(&msg)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  pb::Session after;
  for (int tries = 0; tries < 100; ++tries) {
    after = Get(s.session_id());
    if (!after.generating()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_FALSE(after.generating());
  EXPECT_LT(after.context_tokens(), 60000u);
}

}  // namespace
}  // namespace flatstate::testing
