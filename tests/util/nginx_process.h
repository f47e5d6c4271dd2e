// NginxProcess: a real nginx (Debian's, ngx_http_grpc_module) as the gRPC proxy in front of
// flatstate servers on loopback, configured from deploy/nginx.conf.template through
// deploy/render_nginx_conf.sh, so tests exercise the shipped proxy config (docs/cluster.md).
//
// Owns: the nginx master process (and, through its process group, the workers) and a prefix
// directory holding nginx.conf, the pid file, temp folders, error.log and access.log. Runs as
// any user. Test-only; not thread-safe. Failures to render or start are gtest failures: ok() is
// false, port() is 0 and error() says why (with nginx's error.log). When no nginx binary exists,
// Available() is false with the reason, for GTEST_SKIP.
#ifndef FLATSTATE_TESTS_UTIL_NGINX_PROCESS_H_
#define FLATSTATE_TESTS_UTIL_NGINX_PROCESS_H_

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace flatstate::testing {

// One access-log line (the "flatstate_grpc" log_format of the template).
struct NginxAccessLogEntry {
  std::string uri;          // "/flatstate.v1.Inference/Generate"
  std::string upstream;     // "127.0.0.1:PORT", or "A, B" when nginx moved on to B
  std::string session;      // the x-flatstate-session header, "" when absent
  std::string status;       // HTTP status nginx answered ("200", "204" from @unavailable)
  std::string grpc_status;  // from the upstream ("0", "5"...), "" when none came
  std::string line;         // the raw line
};

class NginxProcess {
 public:
  // The nginx binary: $FLATSTATE_NGINX, else /usr/sbin/nginx, else `nginx` on PATH. Returns ""
  // and sets *why when there is none.
  static std::string FindBinary(std::string* why = nullptr);
  static bool Available(std::string* why = nullptr) { return !FindBinary(why).empty(); }

  // Renders the template into `prefix_dir` (created if missing) with one worker, listening on a
  // free 127.0.0.1 port, upstreams 127.0.0.1:<each backend port>; starts nginx in the
  // foreground in its own process group and waits (10 s at most) until the port accepts.
  NginxProcess(const std::string& prefix_dir, const std::vector<int>& backend_ports);
  // Stops nginx; removes the prefix directory unless the test has failed (its logs then stay
  // for the reader).
  ~NginxProcess();
  NginxProcess(const NginxProcess&) = delete;
  NginxProcess& operator=(const NginxProcess&) = delete;

  // SIGTERM (nginx's fast shutdown) to the master and wait for it; no-op when not running.
  void Stop();
  // SIGKILL to the whole process group (master and workers) and reap: a proxy crash.
  void Kill();

  bool ok() const { return pid_ > 0; }
  int port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  const std::string& error() const { return error_; }
  const std::string& prefix() const { return prefix_; }

  // The access log now (nginx writes a line when a request ends).
  std::vector<NginxAccessLogEntry> AccessLog() const;
  // Waits until the access log holds at least `n` lines or `timeout` passes; returns it. A
  // client can see its status a moment before nginx has logged the request.
  std::vector<NginxAccessLogEntry> WaitForAccessLog(
      size_t n, std::chrono::milliseconds timeout = std::chrono::seconds(5)) const;

 private:
  bool Start(const std::string& binary, const std::vector<int>& backend_ports);

  std::string prefix_;
  std::string error_;
  pid_t pid_ = -1;
  int port_ = 0;
};

// Parses one line of the "flatstate_grpc" log_format; false when it is not one.
bool ParseNginxAccessLogLine(const std::string& line, NginxAccessLogEntry* out);

}  // namespace flatstate::testing

#endif  // FLATSTATE_TESTS_UTIL_NGINX_PROCESS_H_
