#include "tests/util/nginx_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "gtest/gtest.h"

extern char** environ;

namespace flatstate::testing {

namespace {

bool IsExecutable(const std::string& path) { return access(path.c_str(), X_OK) == 0; }

// A loopback port that was free a moment ago (bind to port 0, read it back, close).
int FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  close(fd);
  return port;
}

bool Accepts(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  close(fd);
  return ok;
}

// Runs argv with stdout to `out_path` and stderr to `err_path`; the exit status (-1: no start).
int RunTo(const std::vector<std::string>& args, const std::string& out_path,
          const std::string& err_path) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, out_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, err_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<std::string> copy = args;
  std::vector<char*> argv;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return -1;
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The value after `key` up to the next " name=" field (or the end of the line).
std::string Field(const std::string& line, const std::string& key,
                  const std::vector<std::string>& later_keys) {
  const size_t at = line.find(key);
  if (at == std::string::npos) return "";
  const size_t begin = at + key.size();
  size_t end = line.size();
  for (const std::string& k : later_keys) {
    const size_t next = line.find(k, begin);
    if (next != std::string::npos && next < end) end = next;
  }
  return line.substr(begin, end - begin);
}

}  // namespace

bool ParseNginxAccessLogLine(const std::string& line, NginxAccessLogEntry* out) {
  static const std::vector<std::string> kKeys = {
      " uri=",          " status=",   " grpc_status=", " upstream=", " upstream_status=",
      " request_time=", " session=\""};
  for (const std::string& k : kKeys) {
    if (line.find(k) == std::string::npos) return false;
  }
  auto field = [&](size_t i) {
    return Field(line, kKeys[i], std::vector<std::string>(kKeys.begin() + i + 1, kKeys.end()));
  };
  out->line = line;
  out->uri = field(0);
  out->status = field(1);
  out->grpc_status = field(2);
  if (out->grpc_status == "-") out->grpc_status.clear();  // nginx logs a missing value as "-"
  out->upstream = field(3);
  std::string session = field(6);
  if (!session.empty() && session.back() == '"') session.pop_back();
  out->session = session == "-" ? "" : session;
  return true;
}

std::string NginxProcess::FindBinary(std::string* why) {
  if (const char* env = std::getenv("FLATSTATE_NGINX"); env != nullptr && *env != '\0') {
    if (IsExecutable(env)) return env;
    if (why != nullptr) *why = std::string("FLATSTATE_NGINX=") + env + " is not executable";
    return "";
  }
  if (IsExecutable("/usr/sbin/nginx")) return "/usr/sbin/nginx";
  if (const char* path = std::getenv("PATH"); path != nullptr) {
    std::stringstream dirs(path);
    for (std::string dir; std::getline(dirs, dir, ':');) {
      if (!dir.empty() && IsExecutable(dir + "/nginx")) return dir + "/nginx";
    }
  }
  if (why != nullptr) *why = "nginx not installed (scripts/setup.sh installs Debian's nginx)";
  return "";
}

NginxProcess::NginxProcess(const std::string& prefix_dir, const std::vector<int>& backend_ports)
    : prefix_(prefix_dir) {
  std::error_code ec;
  std::filesystem::create_directories(prefix_, ec);
  const std::string binary = FindBinary(&error_);
  // A port picked free can be taken before nginx binds it: try a few.
  for (int attempt = 0; !binary.empty() && attempt < 3 && !ok(); ++attempt) {
    Start(binary, backend_ports);
  }
  EXPECT_TRUE(ok()) << error_;
}

bool NginxProcess::Start(const std::string& binary, const std::vector<int>& backend_ports) {
  port_ = FreeLoopbackPort();
  std::vector<std::string> render = {
      "/bin/bash", std::string(FLATSTATE_SOURCE_DIR) + "/deploy/render_nginx_conf.sh",
      "--listen",  address(),
      "--prefix",  prefix_,
      "--workers", "1"};
  for (int p : backend_ports) render.push_back("127.0.0.1:" + std::to_string(p));
  const std::string conf = prefix_ + "/nginx.conf";
  if (RunTo(render, conf, prefix_ + "/render.err") != 0) {
    error_ = "render_nginx_conf.sh failed: " + Slurp(prefix_ + "/render.err");
    port_ = 0;
    return false;
  }
  std::filesystem::remove(prefix_ + "/error.log");
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);  // its own group: Kill() reaches the workers too
  std::vector<std::string> args = {
      binary, "-p", prefix_, "-c", conf, "-e", prefix_ + "/error.log", "-g", "daemon off;"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0], nullptr, &attr, argv.data(), environ);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    error_ = "posix_spawn(" + binary + ") failed";
    port_ = 0;
    return false;
  }
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < give_up) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      error_ = "nginx exited at start (status " + std::to_string(status) +
               "); error.log: " + Slurp(prefix_ + "/error.log");
      port_ = 0;
      return false;
    }
    if (Accepts(port_)) {
      pid_ = pid;
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(-pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  error_ = "nginx did not accept on " + address() +
           " within 10 s; error.log: " + Slurp(prefix_ + "/error.log");
  port_ = 0;
  return false;
}

NginxProcess::~NginxProcess() {
  Stop();
  if (!::testing::Test::HasFailure()) {
    std::error_code ec;
    std::filesystem::remove_all(prefix_, ec);
  }
}

void NginxProcess::Stop() {
  if (pid_ <= 0) return;
  kill(pid_, SIGTERM);
  int status = 0;
  waitpid(pid_, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "nginx status " << status;
  pid_ = -1;
}

void NginxProcess::Kill() {
  if (pid_ <= 0) return;
  kill(-pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

std::vector<NginxAccessLogEntry> NginxProcess::AccessLog() const {
  std::vector<NginxAccessLogEntry> out;
  std::ifstream in(prefix_ + "/access.log");
  for (std::string line; std::getline(in, line);) {
    NginxAccessLogEntry e;
    if (ParseNginxAccessLogLine(line, &e)) out.push_back(std::move(e));
  }
  return out;
}

std::vector<NginxAccessLogEntry> NginxProcess::WaitForAccessLog(
    size_t n, std::chrono::milliseconds timeout) const {
  const auto give_up = std::chrono::steady_clock::now() + timeout;
  std::vector<NginxAccessLogEntry> log = AccessLog();
  while (log.size() < n && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    log = AccessLog();
  }
  return log;
}

}  // namespace flatstate::testing
