// RedisProcess (tests only): a real `redis-server` on a free loopback port, for the tests of the
// Redis session store and the system tests of the cluster.
//
// Started by the constructor with --port N --bind 127.0.0.1 --save "" --appendonly no --dir <a
// fresh temporary directory> (and --requirepass when a password is given; with `durable`,
// --appendonly yes --appendfsync always instead, so a SIGKILLed server keeps every write it
// acknowledged, as a production Redis behind flatstate should: docs/cluster.md); the constructor
// returns once the server answers PING. available() is false when it could not start (the
// binary is missing: tests then GTEST_SKIP() << skip_reason()). The binary is
// $FLATSTATE_REDIS_SERVER if set, else the first redis-server on PATH, /usr/bin or /usr/sbin.
// Kill() sends SIGKILL and reaps the process; Restart() starts it again on the same port (an
// empty data set unless `durable`: then the append-only file brings every write back). The destructor kills it and removes the directory. The
// child gets SIGKILL if the test process dies (PR_SET_PDEATHSIG).
//
// Owns the child process and the directory. Not thread-safe: use from the test's thread.
#ifndef FLATSTATE_TESTS_UTIL_REDIS_PROCESS_H_
#define FLATSTATE_TESTS_UTIL_REDIS_PROCESS_H_

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

namespace flatstate::testing {

class RedisProcess {
 public:
  explicit RedisProcess(std::string password = "", bool durable = false)
      : password_(std::move(password)), durable_(durable) {
    binary_ = FindBinary();
    if (binary_.empty()) {
      reason_ = "redis-server not found (install redis-server: scripts/setup.sh does)";
      return;
    }
    char tmpl[] = "/tmp/flatstate-redis-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) {
      reason_ = "cannot create a temporary directory";
      return;
    }
    dir_ = tmpl;
    for (int attempt = 0; attempt < 5 && pid_ <= 0; ++attempt) {
      port_ = FreePort();
      if (port_ > 0) Start();
    }
    if (pid_ <= 0) reason_ = "redis-server did not start (see " + dir_ + "/redis.log)";
  }
  ~RedisProcess() {
    Kill();
    if (!dir_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
    }
  }
  RedisProcess(const RedisProcess&) = delete;
  RedisProcess& operator=(const RedisProcess&) = delete;

  bool available() const { return pid_ > 0; }
  const std::string& skip_reason() const { return reason_; }
  int port() const { return port_; }
  // "redis://127.0.0.1:<port>/<db>", a --session_store value.
  std::string spec(int db = 0) const {
    return "redis://127.0.0.1:" + std::to_string(port_) + "/" + std::to_string(db);
  }

  void Kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }
  // Starts redis-server again on the same port; true once it answers PING.
  bool Restart() {
    Kill();
    for (int attempt = 0; attempt < 20 && pid_ <= 0; ++attempt) {
      Start();
      if (pid_ <= 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return pid_ > 0;
  }

 private:
  static std::string FindBinary() {
    if (const char* env = std::getenv("FLATSTATE_REDIS_SERVER"); env != nullptr && *env) {
      return ::access(env, X_OK) == 0 ? env : "";
    }
    std::vector<std::string> dirs;
    if (const char* path = std::getenv("PATH"); path != nullptr) {
      std::string p = path;
      for (size_t start = 0;;) {
        const size_t colon = p.find(':', start);
        dirs.push_back(p.substr(start, colon - start));
        if (colon == std::string::npos) break;
        start = colon + 1;
      }
    }
    dirs.push_back("/usr/bin");
    dirs.push_back("/usr/sbin");
    for (const std::string& d : dirs) {
      const std::string candidate = d + "/redis-server";
      if (!d.empty() && ::access(candidate.c_str(), X_OK) == 0) return candidate;
    }
    return "";
  }

  static int FreePort() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    int port = -1;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      port = ntohs(addr.sin_port);
    }
    ::close(fd);
    return port;
  }

  // True when something on the port answers PING (+PONG, or -NOAUTH with a password set).
  bool AnswersPing() const {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return false;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port_));
    bool ok = false;
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
      const char ping[] = "PING\r\n";
      char buf[64] = {0};
      if (::send(fd, ping, sizeof(ping) - 1, MSG_NOSIGNAL) == sizeof(ping) - 1 &&
          ::recv(fd, buf, sizeof(buf) - 1, 0) > 0) {
        const std::string reply = buf;
        ok = reply.rfind("+PONG", 0) == 0 || reply.rfind("-NOAUTH", 0) == 0;
      }
    }
    ::close(fd);
    return ok;
  }

  void Start() {
    std::vector<std::string> args = {
        binary_,  "--port",    std::to_string(port_), "--bind", "127.0.0.1",
        "--save", "",          "--appendonly",        "no",     "--dir",
        dir_,     "--logfile", dir_ + "/redis.log"};
    if (durable_) {
      args[8] = "yes";
      args.insert(args.end(), {"--appendfsync", "always"});
    }
    if (!password_.empty()) {
      args.push_back("--requirepass");
      args.push_back(password_);
    }
    const pid_t pid = ::fork();
    if (pid < 0) return;
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      const int devnull = ::open("/dev/null", O_RDWR);
      if (devnull >= 0) {
        ::dup2(devnull, 0);
        ::dup2(devnull, 1);
        ::dup2(devnull, 2);
      }
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(binary_.c_str(), argv.data());
      ::_exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid, &status, WNOHANG) == pid) return;  // exited: port taken, bad binary
      if (AnswersPing()) {
        pid_ = pid;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }

  std::string password_;
  bool durable_ = false;
  std::string binary_;
  std::string dir_;
  std::string reason_;
  int port_ = -1;
  pid_t pid_ = -1;
};

}  // namespace flatstate::testing

#endif  // FLATSTATE_TESTS_UTIL_REDIS_PROCESS_H_
