// ServerProcess: one real flatstate-server child process (posix_spawn) on a free loopback port,
// serving the test models (server_test_util.h). Used by tests that need process boundaries:
// restart, SIGKILL, TLS from the outside. Test-only; not thread-safe (stub() may be shared: gRPC
// stubs are thread-safe). Start failures are gtest failures (port() stays 0).
#ifndef FLATSTATE_TESTS_SYSTEM_SERVER_PROCESS_H_
#define FLATSTATE_TESTS_SYSTEM_SERVER_PROCESS_H_

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "tests/server/server_test_util.h"

extern char** environ;

namespace flatstate::testing {

class ServerProcess {
 public:
  // Starts the server with --checkpoint_dir and `extra_args` (later flags win), waits for it to
  // print its port and for health SERVING over `creds` (default: plaintext).
  explicit ServerProcess(const std::string& checkpoint_dir,
                         const std::vector<std::string>& extra_args = {},
                         std::shared_ptr<grpc::ChannelCredentials> creds = nullptr) {
    if (creds == nullptr) creds = grpc::InsecureChannelCredentials();
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
                                     "--http_port=0",
                                     "--threads=1",
                                     "--device=cpu",
                                     "--kv_blocks=512"};
    args.insert(args.end(), extra_args.begin(), extra_args.end());
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
    // Even then a stub is made (its calls fail with UNAVAILABLE instead of crashing the test).
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", port_), creds);
    stub_ = pb::Inference::NewStub(channel_);
    if (port_ <= 0) return;
    auto health = grpc::health::v1::Health::NewStub(channel_);
    bool serving = false;
    for (int i = 0; i < 200 && !serving; ++i) {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
      grpc::health::v1::HealthCheckResponse resp;
      serving = health->Check(&ctx, grpc::health::v1::HealthCheckRequest(), &resp).ok() &&
                resp.status() == grpc::health::v1::HealthCheckResponse::SERVING;
      if (!serving) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_TRUE(serving);
  }
  ~ServerProcess() { Stop(); }
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  // SIGTERM and wait: the server must exit cleanly (status 0).
  void Stop() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    int status = 0;
    waitpid(pid_, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
    pid_ = -1;
  }

  // SIGKILL and reap: a crash at an arbitrary instruction.
  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
    pid_ = -1;
  }

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  pb::Inference::Stub* stub() { return stub_.get(); }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<pb::Inference::Stub> stub_;
};

}  // namespace flatstate::testing

#endif  // FLATSTATE_TESTS_SYSTEM_SERVER_PROCESS_H_
