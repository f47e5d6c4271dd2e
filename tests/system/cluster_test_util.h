// Cluster: the issue-12 topology in one test process: a real redis-server, N real
// flatstate-server replicas sharing it (--session_store=redis://...), and real nginx in front
// (deploy/nginx.conf.template). Helpers to run one turn of a session (with the
// x-flatstate-session metadata the clients send) and to find which replica served a session's
// last call (nginx's access log). Test-only; not thread-safe except the stubs. Missing binaries
// make available() false with a reason, and the tests skip with it.
#ifndef FLATSTATE_TESTS_SYSTEM_CLUSTER_TEST_UTIL_H_
#define FLATSTATE_TESTS_SYSTEM_CLUSTER_TEST_UTIL_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/system/fault_test_util.h"
#include "tests/system/server_process.h"
#include "tests/util/nginx_process.h"
#include "tests/util/redis_process.h"

namespace flatstate::testing {

inline constexpr char kSessionHeader[] = "x-flatstate-session";

// The flags that make a replica use the shared store at `redis_port`, then `extra`.
inline std::vector<std::string> ReplicaFlags(int redis_port, const std::string& replica_id,
                                             const std::string& lease = "2s",
                                             const std::vector<std::string>& extra = {}) {
  std::vector<std::string> flags = {absl::StrCat("--session_store=redis://127.0.0.1:", redis_port),
                                    "--replica_id=" + replica_id, "--session_lease=" + lease,
                                    "--log_requests=false"};
  flags.insert(flags.end(), extra.begin(), extra.end());
  return flags;
}

class Cluster {
 public:
  // Starts redis (append-only file, fsync always: a SIGKILLed redis keeps acknowledged writes),
  // `replicas` servers (with ReplicaFlags(..., lease, extra_flags)) and, with `proxy`, nginx
  // over all of them.
  Cluster(int replicas, bool proxy, const std::string& lease = "2s",
          std::vector<std::string> extra_flags = {})
      : lease_(lease), extra_flags_(std::move(extra_flags)) {
    if (!redis_.available()) {
      skip_reason_ = redis_.skip_reason();
      return;
    }
    for (int i = 0; i < replicas; ++i) StartReplica(i);
    if (proxy) {
      std::vector<int> ports;
      for (auto& r : replicas_) ports.push_back(r->port());
      std::string why;
      if (!NginxProcess::Available(&why)) {
        skip_reason_ = why;
        return;
      }
      nginx_ = std::make_unique<NginxProcess>(
          ::testing::TempDir() + absl::StrCat("/cluster-nginx-", getpid()), ports);
      EXPECT_TRUE(nginx_->ok()) << nginx_->error();
    }
  }

  bool available() const { return skip_reason_.empty(); }
  const std::string& skip_reason() const { return skip_reason_; }
  RedisProcess& redis() { return redis_; }
  ServerProcess& replica(int i) { return *replicas_[i]; }
  int replicas() const { return static_cast<int>(replicas_.size()); }
  // (Re)starts replica `i` (after Kill) on a new port; the proxy does not know the new port.
  void StartReplica(int i) {
    const std::string dir = ::testing::TempDir() + absl::StrCat("/cluster-r", i, "-", getpid());
    auto p = std::make_unique<ServerProcess>(
        dir, ReplicaFlags(redis_.port(), absl::StrCat("replica-", i), lease_, extra_flags_));
    if (i < static_cast<int>(replicas_.size())) {
      replicas_[i] = std::move(p);
    } else {
      replicas_.push_back(std::move(p));
    }
  }

  pb::Inference::Stub* proxy() {
    if (proxy_stub_ == nullptr) proxy_stub_ = Connect(nginx_->port());
    return proxy_stub_.get();
  }
  NginxProcess& nginx() { return *nginx_; }

  // The replica index that answered the `calls`-th proxied call naming `session_id` (nginx's
  // access log: the last upstream listed is the one that answered), or -1. nginx writes a line
  // when it has finished a request, which may be just after the client saw the end: waits up to
  // 5 s for the line.
  int LastUpstreamOf(const std::string& session_id, int calls) {
    std::string upstream;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    for (int seen = 0; seen < calls && std::chrono::steady_clock::now() < deadline;) {
      seen = 0;
      for (const NginxAccessLogEntry& e : nginx_->AccessLog()) {
        if (e.session != session_id) continue;
        ++seen;
        upstream = e.upstream;
      }
      if (seen < calls) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    const size_t comma = upstream.rfind(", ");
    if (comma != std::string::npos) upstream = upstream.substr(comma + 2);
    for (int i = 0; i < replicas(); ++i) {
      if (upstream == absl::StrCat("127.0.0.1:", replicas_[i]->port())) return i;
    }
    return -1;
  }

 private:
  std::string lease_;
  std::vector<std::string> extra_flags_;
  RedisProcess redis_{"", /*durable=*/true};
  std::vector<std::unique_ptr<ServerProcess>> replicas_;
  std::unique_ptr<NginxProcess> nginx_;
  std::unique_ptr<pb::Inference::Stub> proxy_stub_;
  std::string skip_reason_;
};

// One Generate turn of `session_id` with the affinity metadata. `on_tokens` (if set) runs after
// each message with the tokens so far (a test kills a replica there).
inline StreamResult Turn(
    pb::Inference::Stub* stub, const std::string& session_id, const std::string& prompt, uint32_t n,
    const std::function<void(const std::vector<int32_t>&)>& on_tokens = nullptr) {
  grpc::ClientContext ctx;
  ctx.AddMetadata(kSessionHeader, session_id);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  pb::GenerateRequest req = GenRequest("", prompt, n);
  req.set_session_id(session_id);
  auto reader = stub->Generate(&ctx, req);
  return ReadGenerate(reader.get(), [&](const StreamResult& r) {
    if (on_tokens) on_tokens(r.tokens);
  });
}

// A session of `model` (seeded sampling when seed != 0, else greedy) created through `stub`.
inline std::string NewSession(pb::Inference::Stub* stub, const std::string& model, uint64_t seed) {
  if (seed != 0) return CreateSession(stub, model, seed);
  pb::CreateSessionRequest req;
  req.set_model(model);
  return CreateSessionFrom(stub, req);
}

}  // namespace flatstate::testing

#endif  // FLATSTATE_TESTS_SYSTEM_CLUSTER_TEST_UTIL_H_
