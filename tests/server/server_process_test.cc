// Checkpoint survives a server restart: real flatstate-server processes (posix_spawn), SIGTERM
// between them, restore in the second, continuation identical to an uninterrupted run.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <thread>

#include "absl/strings/str_cat.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "tests/server/server_test_util.h"

extern char** environ;

namespace flatstate::testing {
namespace {

// One flatstate-server child process on a free loopback port.
class ServerProcess {
 public:
  ServerProcess(const std::string& checkpoint_dir) {
    int fds[2];
    EXPECT_EQ(pipe(fds), 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    std::vector<std::string> args = {FLATSTATE_SERVER_BINARY,
                                     "--host=127.0.0.1",
                                     "--port=0",
                                     "--models_dir=" + ModelsDir(),
                                     "--checkpoint_dir=" + checkpoint_dir,
                                     "--metrics_port=0",
                                     "--threads=1",
                                     "--device=cpu",
                                     "--kv_blocks=512"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    EXPECT_EQ(posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    // The server prints "port N" once it listens.
    FILE* out = fdopen(fds[0], "r");
    char line[128] = {0};
    if (out != nullptr && std::fgets(line, sizeof(line), out) != nullptr) {
      std::sscanf(line, "port %d", &port_);
    }
    if (out != nullptr) std::fclose(out);
    EXPECT_GT(port_, 0) << "server did not report its port";
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", port_),
                                   grpc::InsecureChannelCredentials());
    // Wait for health SERVING.
    auto health = grpc::health::v1::Health::NewStub(channel_);
    bool serving = false;
    for (int i = 0; i < 100 && !serving; ++i) {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
      grpc::health::v1::HealthCheckResponse resp;
      serving = health->Check(&ctx, grpc::health::v1::HealthCheckRequest(), &resp).ok() &&
                resp.status() == grpc::health::v1::HealthCheckResponse::SERVING;
      if (!serving) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_TRUE(serving);
    stub_ = pb::Inference::NewStub(channel_);
  }
  ~ServerProcess() { Stop(); }

  // SIGTERM and wait: the server must exit cleanly (status 0).
  void Stop() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    int status = 0;
    waitpid(pid_, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
    pid_ = -1;
  }

  pb::Inference::Stub* stub() { return stub_.get(); }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<pb::Inference::Stub> stub_;
};

class ProcessRestartTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ProcessRestartTest, CheckpointSurvivesRestart) {
  const std::string model = GetParam();
  const std::string ckpt_dir = TempDir() + "/ckpt";
  const std::string prompt = "To be, or not to be, that is the question:";
  pb::Checkpoint ck;
  std::vector<int32_t> first;
  {
    ServerProcess p1(ckpt_dir);
    pb::CreateSessionRequest creq;
    creq.set_model(model);
    creq.mutable_sampling()->set_temperature(0.9f);
    creq.mutable_sampling()->set_top_k(50);
    creq.mutable_sampling()->set_top_p(0.9f);
    creq.mutable_sampling()->set_seed(1234);
    pb::Session s;
    {
      grpc::ClientContext ctx;
      ASSERT_TRUE(p1.stub()->CreateSession(&ctx, creq, &s).ok());
    }
    pb::GenerateRequest req = GenRequest("", prompt, 16);
    req.set_session_id(s.session_id());
    StreamResult r = RunGenerate(p1.stub(), req);
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    first = r.tokens;
    pb::CheckpointSessionRequest ckreq;
    ckreq.set_session_id(s.session_id());
    grpc::ClientContext ctx;
    grpc::Status st = p1.stub()->CheckpointSession(&ctx, ckreq, &ck);
    ASSERT_TRUE(st.ok()) << st.error_message();
    p1.Stop();
  }
  ServerProcess p2(ckpt_dir);
  // Restore by id (from --checkpoint_dir) and by the inline bytes: both continue identically.
  std::vector<std::vector<int32_t>> continuations;
  for (int by_id = 0; by_id < 2; ++by_id) {
    pb::RestoreSessionRequest rreq;
    if (by_id) rreq.set_checkpoint_id(ck.checkpoint_id());
    else rreq.set_data(ck.data());
    pb::Session restored;
    grpc::ClientContext ctx;
    grpc::Status st = p2.stub()->RestoreSession(&ctx, rreq, &restored);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(restored.model(), model);
    EXPECT_EQ(restored.context_tokens(), prompt.size() + 16);
    pb::GenerateRequest more = GenRequest("", "", 16);
    more.set_session_id(restored.session_id());
    StreamResult r = RunGenerate(p2.stub(), more);
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    continuations.push_back(r.tokens);
  }
  // Uninterrupted run in the same (second) process: one session, 32 tokens.
  pb::GenerateRequest whole = GenRequest(model, prompt, 32, 0.9f, 1234);
  whole.mutable_sampling()->set_top_k(50);
  whole.mutable_sampling()->set_top_p(0.9f);
  StreamResult w = RunGenerate(p2.stub(), whole);
  ASSERT_TRUE(w.status.ok()) << w.status.error_message();
  std::vector<int32_t> resumed = first;
  resumed.insert(resumed.end(), continuations[0].begin(), continuations[0].end());
  EXPECT_EQ(resumed, w.tokens);
  EXPECT_EQ(continuations[0], continuations[1]);
  // A corrupt copy of the checkpoint is DATA_LOSS in the new process too.
  std::string bad = ck.data();
  bad[bad.size() - 10] ^= 0x40;
  pb::RestoreSessionRequest rreq;
  rreq.set_data(bad);
  pb::Session restored;
  grpc::ClientContext ctx;
  EXPECT_EQ(p2.stub()->RestoreSession(&ctx, rreq, &restored).error_code(),
            grpc::StatusCode::DATA_LOSS);
}

INSTANTIATE_TEST_SUITE_P(Models, ProcessRestartTest, ::testing::Values(kLinear, kSoftmax),
                         [](const ::testing::TestParamInfo<const char*>& i) {
                           return std::string(i.param) == kLinear ? "linear_elu" : "softmax";
                         });

}  // namespace
}  // namespace flatstate::testing
