// EngineLoop tests without gRPC: a recording TokenSink receives each stream's output. A stream
// that cannot get KV blocks ends alone (RESOURCE_EXHAUSTED, KV_POOL_FULL) while the streams that
// share its steps produce exactly their solo tokens; shutdown, cancellation and rejection each
// have their own finish reason; a turn that finds its session's stream cancelled by its client
// ends that stream and goes on.
#include "server/loop/engine_loop.h"

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "server/store/session_store.h"
#include "tests/util/model_writer.h"

namespace flatstate::server {
namespace {

class RecordingSink final : public TokenSink {
 public:
  bool Cancelled() const override { return cancelled_.load(); }
  void OnTokens(std::vector<int32_t> ids, std::string text) override {
    absl::MutexLock lock(&mu_);
    tokens_.insert(tokens_.end(), ids.begin(), ids.end());
    text_ += text;
  }
  void OnFinish(const GenerateSummary& summary, const absl::Status& status) override {
    absl::MutexLock lock(&mu_);
    ++finishes_;
    summary_ = summary;
    status_ = status;
  }
  void Cancel() { cancelled_ = true; }
  // Waits for OnFinish; false after 60 s.
  bool WaitFinished() {
    absl::MutexLock lock(&mu_);
    auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return finishes_ > 0; };
    return mu_.AwaitWithTimeout(absl::Condition(&done), absl::Seconds(60));
  }
  std::vector<int32_t> tokens() {
    absl::MutexLock lock(&mu_);
    return tokens_;
  }
  GenerateSummary summary() {
    absl::MutexLock lock(&mu_);
    return summary_;
  }
  absl::Status status() {
    absl::MutexLock lock(&mu_);
    return status_;
  }
  int finishes() {
    absl::MutexLock lock(&mu_);
    return finishes_;
  }

 private:
  std::atomic<bool> cancelled_{false};
  absl::Mutex mu_;
  std::vector<int32_t> tokens_ ABSL_GUARDED_BY(mu_);
  std::string text_ ABSL_GUARDED_BY(mu_);
  GenerateSummary summary_ ABSL_GUARDED_BY(mu_);
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  int finishes_ ABSL_GUARDED_BY(mu_) = 0;
};

const std::string& ModelsDir() {
  static const std::string* dir = [] {
    auto* d = new std::string(testing::TempDir() + "/engine_loop_models");
    EXPECT_TRUE(
        testing::WriteRandomModel(*d + "/soft", testing::SmallConfig(AttentionKind::kSoftmax), 21)
            .ok());
    return d;
  }();
  return *dir;
}

std::unique_ptr<EngineLoop> MakeLoop(int kv_blocks, Metrics* metrics) {
  EngineOptions eo;
  eo.threads = 1;
  eo.kv_blocks = kv_blocks;
  auto models = ModelRegistry::Load(ModelsDir(), eo, "");
  EXPECT_TRUE(models.ok()) << models.status();
  auto files = CheckpointStore::Open(testing::TempDir() + "/engine_loop_ckpt");
  EXPECT_TRUE(files.ok()) << files.status();
  ServerOptions o;
  o.step_token_budget = 64;
  o.log_requests = false;
  return std::make_unique<EngineLoop>(
      std::move(*models), std::make_unique<DirSessionStore>(std::move(*files)), o, metrics);
}

std::vector<int32_t> Prompt(int n, int seed) {
  std::vector<int32_t> p(n);
  for (int i = 0; i < n; ++i) p[i] = (i * 37 + seed * 11) % 256;
  return p;
}

GenerateJob Job(int prompt, int seed, uint32_t max_new) {
  GenerateJob j;
  j.prompt = Prompt(prompt, seed);
  j.max_new_tokens = max_new;
  j.sampling = SamplingParams{0.8f, 0, 1.f, static_cast<uint64_t>(seed)};
  return j;
}

// The job run alone on a loop with a pool large enough for anything.
std::vector<int32_t> Solo(const GenerateJob& job) {
  Metrics metrics;
  auto loop = MakeLoop(1024, &metrics);
  auto sink = std::make_shared<RecordingSink>();
  loop->Generate(job, sink);
  loop->Start();
  EXPECT_TRUE(sink->WaitFinished());
  EXPECT_TRUE(sink->status().ok()) << sink->status();
  return sink->tokens();
}

StatsInfo GetStats(EngineLoop* loop) {
  absl::Notification got;
  StatsInfo stats;
  loop->GetStats([&](absl::StatusOr<StatsInfo> s) {
    stats = *s;
    got.Notify();
  });
  EXPECT_TRUE(got.WaitForNotificationWithTimeout(absl::Seconds(60)));
  return stats;
}

std::string CreateSession(EngineLoop* loop) {
  absl::Notification got;
  std::string id;
  loop->CreateSession("", std::nullopt, [&](absl::StatusOr<SessionInfo> s) {
    EXPECT_TRUE(s.ok()) << s.status();
    if (s.ok()) id = s->session_id;
    got.Notify();
  });
  EXPECT_TRUE(got.WaitForNotificationWithTimeout(absl::Seconds(60)));
  return id;
}

// 8 blocks (128 tokens) cannot hold all three at their peak (1 + 1 + 7 blocks). Posted before
// Start, the three are admitted in the first iteration and share every step; the big one takes
// 6 blocks (to its last grid point, 96, step_plan.h), then its last piece needs a 7th and has to
// wait for a block that one of the two small throwaway streams (16 tokens each at most) hands
// back when it ends. Every stream produces exactly its solo tokens.
// A Hugging Face Llama folder whose generation_config names, as its end-of-sequence id, the
// fifth token greedy decoding produces: the stream ends there with EOS (that token counted, not
// sent); with ignore_eos it runs to max_new_tokens and sends it.
TEST(EngineLoopTest, EosEndsTheStreamUnlessIgnored) {
  namespace fs = std::filesystem;
  const std::string tiny = std::string(FLATSTATE_SOURCE_DIR) + "/tests/data/hf_llama_tiny";
  const std::string dir = testing::TempDir() + "/engine_loop_eos";
  fs::remove_all(dir);
  fs::create_directories(dir + "/llama");
  for (const auto& e : fs::directory_iterator(tiny)) {
    if (e.is_regular_file())
      fs::copy_file(e.path(), dir + "/llama/" + e.path().filename().string());
  }
  const std::vector<int32_t> prompt = {1, 100, 200, 300, 400, 17};
  auto run = [&](bool ignore_eos, int32_t eos) {
    if (eos >= 0) {
      EXPECT_TRUE(testing::WriteFile(dir + "/llama/generation_config.json",
                                     absl::StrCat("{\"eos_token_id\": ", eos, "}")));
    }
    EngineOptions eo;
    eo.threads = 1;
    eo.kv_blocks = 64;
    auto models = ModelRegistry::Load(dir, eo, "");
    EXPECT_TRUE(models.ok()) << models.status();
    auto files = CheckpointStore::Open(testing::TempDir() + "/engine_loop_eos_ckpt");
    Metrics metrics;
    ServerOptions o;
    o.log_requests = false;
    EngineLoop loop(std::move(*models), std::make_unique<DirSessionStore>(std::move(*files)), o,
                    &metrics);
    GenerateJob j;
    j.prompt = prompt;
    j.max_new_tokens = 12;
    j.ignore_eos = ignore_eos;
    auto sink = std::make_shared<RecordingSink>();
    loop.Generate(j, sink);
    loop.Start();
    EXPECT_TRUE(sink->WaitFinished());
    EXPECT_TRUE(sink->status().ok()) << sink->status();
    return std::make_pair(sink->tokens(), sink->summary());
  };
  // The config's own eos id (2) is not among these 12 greedy tokens; the fifth becomes the EOS.
  const auto [free_run, free_summary] = run(false, -1);
  ASSERT_EQ(free_run.size(), 12u);
  EXPECT_EQ(free_summary.reason, FinishReason::kLength);
  const auto [eos_run, eos_summary] = run(false, free_run[4]);
  EXPECT_EQ(eos_run, std::vector<int32_t>(free_run.begin(), free_run.begin() + 4));
  EXPECT_EQ(eos_summary.reason, FinishReason::kEos);
  EXPECT_EQ(eos_summary.generated_tokens, 5u);
  const auto [ignored, ignored_summary] = run(true, free_run[4]);
  EXPECT_EQ(ignored, free_run);
  EXPECT_EQ(ignored_summary.reason, FinishReason::kLength);
}

TEST(EngineLoopTest, StreamWaitsForBlocksThatThrowawayStreamsHandBack) {
  const GenerateJob a = Job(10, 1, 6), b = Job(11, 2, 5), big = Job(100, 3, 5);
  const std::vector<int32_t> solo_a = Solo(a), solo_b = Solo(b), solo_big = Solo(big);
  ASSERT_EQ(solo_a.size(), 6u);

  Metrics metrics;
  auto loop = MakeLoop(/*kv_blocks=*/8, &metrics);
  auto sa = std::make_shared<RecordingSink>(), sb = std::make_shared<RecordingSink>(),
       sbig = std::make_shared<RecordingSink>();
  loop->Generate(a, sa);
  loop->Generate(big, sbig);
  loop->Generate(b, sb);
  loop->Start();
  for (auto* s : {&sa, &sb, &sbig}) {
    ASSERT_TRUE((*s)->WaitFinished());
    EXPECT_TRUE((*s)->status().ok()) << (*s)->status();
    EXPECT_EQ((*s)->summary().reason, FinishReason::kLength);
    EXPECT_EQ((*s)->finishes(), 1);
  }
  EXPECT_EQ(sa->tokens(), solo_a);
  EXPECT_EQ(sb->tokens(), solo_b);
  EXPECT_EQ(sbig->tokens(), solo_big);
  const StatsInfo stats = GetStats(loop.get());
  EXPECT_EQ(stats.kv_blocks_used, 0u);  // all three were throwaway sessions
  EXPECT_EQ(stats.kv_blocks_total, 8u);
}

// Two named sessions keep their blocks after their streams; the big throwaway stream can only
// get blocks the others hold for good, so it ends alone with RESOURCE_EXHAUSTED (KV_POOL_FULL)
// while the two others run on, token for token as alone.
TEST(EngineLoopTest, FullKvPoolEndsOnlyTheStreamThatDoesNotFit) {
  GenerateJob a = Job(10, 1, 30), b = Job(11, 2, 30);
  const GenerateJob big = Job(100, 3, 5);
  const std::vector<int32_t> solo_a = Solo(a), solo_b = Solo(b);

  Metrics metrics;
  auto loop = MakeLoop(/*kv_blocks=*/8, &metrics);
  loop->Start();
  a.session_id = CreateSession(loop.get());
  b.session_id = CreateSession(loop.get());
  auto sa = std::make_shared<RecordingSink>(), sb = std::make_shared<RecordingSink>(),
       sbig = std::make_shared<RecordingSink>();
  loop->Generate(a, sa);
  loop->Generate(big, sbig);
  loop->Generate(b, sb);
  for (auto* s : {&sa, &sb, &sbig}) ASSERT_TRUE((*s)->WaitFinished());

  EXPECT_EQ(sbig->status().code(), absl::StatusCode::kResourceExhausted) << sbig->status();
  EXPECT_NE(sbig->status().message().find("KV block pool"), std::string::npos);
  EXPECT_EQ(sbig->summary().reason, FinishReason::kKvPoolFull);
  EXPECT_EQ(sbig->finishes(), 1);
  for (auto* s : {&sa, &sb}) {
    EXPECT_TRUE((*s)->status().ok()) << (*s)->status();
    EXPECT_EQ((*s)->summary().reason, FinishReason::kLength);
  }
  EXPECT_EQ(sa->tokens(), solo_a);
  EXPECT_EQ(sb->tokens(), solo_b);
  // The named sessions hold 3 blocks each (41 tokens); the big one's went back to the pool.
  const StatsInfo stats = GetStats(loop.get());
  EXPECT_EQ(stats.kv_blocks_used, 6u);
  EXPECT_EQ(stats.active_sessions, 2u);
}

TEST(EngineLoopTest, PromptLargerThanThePoolEndsAtOnce) {
  Metrics metrics;
  auto loop = MakeLoop(/*kv_blocks=*/4, &metrics);  // 64 tokens
  auto small = std::make_shared<RecordingSink>(), huge = std::make_shared<RecordingSink>();
  loop->Generate(Job(100, 4, 3), huge);
  loop->Generate(Job(5, 5, 3), small);
  loop->Start();
  ASSERT_TRUE(huge->WaitFinished());
  ASSERT_TRUE(small->WaitFinished());
  EXPECT_EQ(huge->status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(huge->summary().reason, FinishReason::kKvPoolFull);
  EXPECT_TRUE(small->status().ok()) << small->status();
  EXPECT_EQ(small->tokens().size(), 3u);
}

TEST(EngineLoopTest, ShutdownCancelAndRejectionHaveTheirOwnReasons) {
  Metrics metrics;
  auto loop = MakeLoop(64, &metrics);
  auto unknown = std::make_shared<RecordingSink>(), cancelled = std::make_shared<RecordingSink>(),
       running = std::make_shared<RecordingSink>();
  GenerateJob bad = Job(3, 1, 2);
  bad.model = "no-such-model";
  loop->Generate(bad, unknown);
  cancelled->Cancel();
  loop->Generate(Job(3, 2, 2), cancelled);
  loop->Generate(Job(3, 3, 60000), running);
  loop->Start();
  ASSERT_TRUE(unknown->WaitFinished());
  ASSERT_TRUE(cancelled->WaitFinished());
  EXPECT_EQ(unknown->status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(unknown->summary().reason, FinishReason::kRejected);
  EXPECT_EQ(cancelled->status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(cancelled->summary().reason, FinishReason::kCancelled);
  loop->Stop();
  ASSERT_TRUE(running->WaitFinished());
  EXPECT_EQ(running->status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(running->summary().reason, FinishReason::kShutdown);
  EXPECT_EQ(running->finishes(), 1);
}

// A client cancels its Generate and at once starts the session's next turn: the loop may not have
// stepped since (the cancelled stream is still on the session), and the next turn must not be
// refused as "already generating". The loop is held (a GetStats callback blocks it) while the
// first turn, the cancellation (in a callback on the loop thread, after that turn's admission) and
// the second turn are queued, so all three run in one batch with no step between them.
TEST(EngineLoopTest, ATurnAfterACancelledOneIsNotRefused) {
  Metrics metrics;
  auto loop = MakeLoop(64, &metrics);
  loop->Start();
  const std::string id = CreateSession(loop.get());
  ASSERT_FALSE(id.empty());
  absl::Notification hold, release;
  loop->GetStats([&](absl::StatusOr<StatsInfo>) {
    hold.Notify();
    release.WaitForNotification();
  });
  ASSERT_TRUE(hold.WaitForNotificationWithTimeout(absl::Seconds(60)));
  auto first = std::make_shared<RecordingSink>(), second = std::make_shared<RecordingSink>();
  GenerateJob a = Job(3, 1, 60000), b = Job(3, 2, 4);
  a.session_id = id;
  b.session_id = id;
  loop->Generate(a, first);
  loop->GetStats([&](absl::StatusOr<StatsInfo>) { first->Cancel(); });
  loop->Generate(b, second);
  release.Notify();
  ASSERT_TRUE(first->WaitFinished());
  ASSERT_TRUE(second->WaitFinished());
  EXPECT_EQ(first->status().code(), absl::StatusCode::kCancelled) << first->status();
  EXPECT_EQ(first->summary().reason, FinishReason::kCancelled);
  EXPECT_TRUE(second->status().ok()) << second->status();
  EXPECT_EQ(second->tokens().size(), 4u);
  // A stream that was not cancelled still makes the next turn wait.
  auto running = std::make_shared<RecordingSink>(), refused = std::make_shared<RecordingSink>();
  GenerateJob c = Job(3, 3, 60000), d = Job(3, 4, 4);
  c.session_id = id;
  d.session_id = id;
  loop->Generate(c, running);
  loop->Generate(d, refused);
  ASSERT_TRUE(refused->WaitFinished());
  EXPECT_EQ(refused->status().code(), absl::StatusCode::kFailedPrecondition) << refused->status();
  running->Cancel();
  ASSERT_TRUE(running->WaitFinished());
  EXPECT_EQ(running->summary().reason, FinishReason::kCancelled);
}

}  // namespace
}  // namespace flatstate::server
