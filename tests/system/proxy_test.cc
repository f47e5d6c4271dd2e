// The shipped gRPC proxy (deploy/nginx.conf.template, real nginx) in front of real
// flatstate-server processes with their own directory stores (no Redis): calls pass through
// unchanged, one x-flatstate-session value always lands on one upstream, a SIGKILLed upstream is
// skipped for new calls, a kill mid-stream ends the client's stream with an error, and the
// per-token cost of the proxy is printed (docs/cluster.md, "Proxy"). Skips when nginx is missing.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "clients/common/session_metadata.h"
#include "tests/system/server_process.h"
#include "tests/util/nginx_process.h"

namespace flatstate::testing {
namespace {

using Clock = std::chrono::steady_clock;

std::unique_ptr<pb::Inference::Stub> StubTo(const std::string& address) {
  return pb::Inference::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
}

void Prepare(grpc::ClientContext* ctx, const std::string& session_header) {
  clients::AddSessionMetadata(session_header, ctx);
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
}

// Generate with `session_header` as x-flatstate-session (the request itself may name another
// session or none). Reads `read_first` messages, calls `between` (if set), then the rest.
StreamResult GenerateWithHeader(pb::Inference::Stub* stub, const pb::GenerateRequest& req,
                                const std::string& session_header, int read_first = 0,
                                const std::function<void()>& between = nullptr) {
  grpc::ClientContext ctx;
  Prepare(&ctx, session_header);
  StreamResult r;
  auto reader = stub->Generate(&ctx, req);
  pb::GenerateResponse msg;
  while (reader->Read(&msg)) {
    r.tokens.insert(r.tokens.end(), msg.token_ids().begin(), msg.token_ids().end());
    r.last = msg;
    if (++r.messages == read_first && between) between();
  }
  r.status = reader->Finish();
  return r;
}

grpc::Status GetSession(pb::Inference::Stub* stub, const std::string& id, pb::Session* out) {
  grpc::ClientContext ctx;
  Prepare(&ctx, id);
  pb::GetSessionRequest req;
  req.set_session_id(id);
  return stub->GetSession(&ctx, req, out);
}

// A well-formed session id (32 lower-case hex characters) that no server holds.
std::string SessionId(int i) { return absl::StrFormat("%032x", 0x5e55100 + i); }

std::string Port(const std::string& upstream) { return upstream.substr(upstream.rfind(':') + 1); }

// The upstream nginx picks for `session`: one GetSession (NOT_FOUND) through the proxy, read
// back from the access log.
std::string UpstreamFor(NginxProcess* nginx, pb::Inference::Stub* proxy, const std::string& id) {
  const size_t before = nginx->AccessLog().size();
  pb::Session s;
  EXPECT_EQ(GetSession(proxy, id, &s).error_code(), grpc::StatusCode::NOT_FOUND);
  const auto log = nginx->WaitForAccessLog(before + 1);
  return log.size() > before ? log.back().upstream : "";
}

// Two server processes behind one nginx (members start in declaration order).
struct TwoReplicas {
  ServerProcess a{TempDir()}, b{TempDir()};
  NginxProcess nginx{TempDir(), {a.port(), b.port()}};
  std::unique_ptr<pb::Inference::Stub> proxy = StubTo(nginx.address());

  // The replica nginx routes `session` to.
  ServerProcess& OwnerOf(const std::string& session) {
    const std::string port = Port(UpstreamFor(&nginx, proxy.get(), session));
    return port == std::to_string(a.port()) ? a : b;
  }
  ServerProcess& Other(const ServerProcess& s) { return &s == &a ? b : a; }
};

class ProxyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!NginxProcess::Available(&why)) GTEST_SKIP() << why;
  }
};

TEST_F(ProxyTest, SessionCallsPassThroughUnchanged) {
  ServerProcess server(TempDir());
  NginxProcess nginx(TempDir(), {server.port()});
  ASSERT_TRUE(nginx.ok()) << nginx.error();
  auto proxy = StubTo(nginx.address());

  pb::ListModelsResponse models;
  grpc::ClientContext lctx;
  Prepare(&lctx, "");
  ASSERT_TRUE(proxy->ListModels(&lctx, pb::ListModelsRequest(), &models).ok());
  EXPECT_EQ(models.models_size(), 2);

  pb::CreateSessionRequest creq;
  creq.set_model(kLinear);
  pb::Session s;
  grpc::ClientContext cctx;
  Prepare(&cctx, "");
  ASSERT_TRUE(proxy->CreateSession(&cctx, creq, &s).ok());
  const std::string sid = s.session_id();

  pb::GenerateRequest req = GenRequest("", "To be", 16);
  req.set_session_id(sid);
  const StreamResult turn = GenerateWithHeader(proxy.get(), req, sid);
  ASSERT_TRUE(turn.status.ok()) << turn.status.error_message();
  EXPECT_EQ(turn.tokens, Reference(kLinear, "To be", 16));

  pb::Session got;
  ASSERT_TRUE(GetSession(proxy.get(), sid, &got).ok());
  EXPECT_EQ(got.context_tokens(), turn.last.usage().context_tokens());
  pb::CheckpointSessionRequest ckreq;
  ckreq.set_session_id(sid);
  pb::Checkpoint ck;
  grpc::ClientContext kctx;
  Prepare(&kctx, sid);
  ASSERT_TRUE(proxy->CheckpointSession(&kctx, ckreq, &ck).ok());
  EXPECT_GT(ck.data().size(), 0u);
  pb::DeleteSessionRequest dreq;
  dreq.set_session_id(sid);
  pb::DeleteSessionResponse dresp;
  grpc::ClientContext dctx;
  Prepare(&dctx, sid);
  ASSERT_TRUE(proxy->DeleteSession(&dctx, dreq, &dresp).ok());
  // The server's own error status comes back through the proxy unchanged.
  const grpc::Status gone = GetSession(proxy.get(), sid, &got);
  EXPECT_EQ(gone.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(gone.error_message().find(sid), std::string::npos) << gone.error_message();

  // The access log: the calls that name the session carried it, the others did not.
  const auto log = nginx.WaitForAccessLog(7);
  ASSERT_EQ(log.size(), 7u);
  const std::vector<std::string> want_session = {"", "", sid, sid, sid, sid, sid};
  for (size_t i = 0; i < log.size(); ++i) {
    EXPECT_EQ(log[i].session, want_session[i]) << log[i].line;
    EXPECT_EQ(Port(log[i].upstream), std::to_string(server.port())) << log[i].line;
  }
  EXPECT_EQ(log.back().grpc_status, "5") << log.back().line;
}

TEST_F(ProxyTest, OneSessionHeaderAlwaysLandsOnOneUpstream) {
  TwoReplicas c;
  ASSERT_TRUE(c.nginx.ok()) << c.nginx.error();
  NginxProcess& nginx = c.nginx;
  pb::Inference::Stub* proxy = c.proxy.get();
  constexpr int kSessions = 16, kRepeats = 3;
  for (int r = 0; r < kRepeats; ++r) {
    for (int i = 0; i < kSessions; ++i) {
      pb::Session s;
      EXPECT_EQ(GetSession(proxy, SessionId(i), &s).error_code(), grpc::StatusCode::NOT_FOUND);
    }
  }
  // Calls without the header (ListModels names no session).
  constexpr int kUnrouted = 8;
  for (int i = 0; i < kUnrouted; ++i) {
    pb::ListModelsResponse m;
    grpc::ClientContext ctx;
    Prepare(&ctx, "");
    ASSERT_TRUE(proxy->ListModels(&ctx, pb::ListModelsRequest(), &m).ok());
  }
  const auto log = nginx.WaitForAccessLog(kSessions * kRepeats + kUnrouted);
  ASSERT_EQ(log.size(), static_cast<size_t>(kSessions * kRepeats + kUnrouted));
  std::map<std::string, std::set<std::string>> upstreams_of;
  std::set<std::string> used, used_unrouted;
  for (const auto& e : log) {
    if (e.session.empty()) {
      used_unrouted.insert(e.upstream);
    } else {
      upstreams_of[e.session].insert(e.upstream);
      used.insert(e.upstream);
    }
  }
  ASSERT_EQ(upstreams_of.size(), static_cast<size_t>(kSessions));
  for (const auto& [session, ups] : upstreams_of) {
    EXPECT_EQ(ups.size(), 1u) << "session " << session << " went to " << ups.size() << " upstreams";
  }
  EXPECT_EQ(used.size(), 2u) << "16 sessions should spread over both replicas";
  // nginx's hash balancer falls back to round robin for an empty key: calls without a
  // session spread too.
  EXPECT_EQ(used_unrouted.size(), 2u);
}

TEST_F(ProxyTest, KilledUpstreamIsSkippedForNewCalls) {
  TwoReplicas c;
  ASSERT_TRUE(c.nginx.ok()) << c.nginx.error();
  NginxProcess& nginx = c.nginx;
  pb::Inference::Stub* proxy = c.proxy.get();
  const std::string sid = SessionId(1);
  ServerProcess& dead = c.OwnerOf(sid);
  ServerProcess& alive = c.Other(dead);
  dead.Kill();
  const std::vector<int32_t> want = Reference(kLinear, "Hello", 8);
  for (int i = 0; i < 4; ++i) {
    const size_t before = nginx.AccessLog().size();
    const StreamResult r = GenerateWithHeader(proxy, GenRequest(kLinear, "Hello", 8), sid);
    ASSERT_TRUE(r.status.ok()) << "call " << i << ": " << r.status.error_message();
    EXPECT_EQ(r.tokens, want);
    const auto log = nginx.WaitForAccessLog(before + 1);
    ASSERT_GT(log.size(), before);
    // The first call after the kill may show both ("dead, alive"): nginx tried the dead one,
    // got connection refused and moved on within the same call.
    EXPECT_EQ(Port(log.back().upstream), std::to_string(alive.port())) << log.back().line;
    std::printf("after kill, call %d: upstream=%s\n", i, log.back().upstream.c_str());
  }
}

TEST_F(ProxyTest, KillMidStreamEndsTheClientStreamWithAnError) {
  TwoReplicas c;
  ASSERT_TRUE(c.nginx.ok()) << c.nginx.error();
  const std::string sid = SessionId(2);
  ServerProcess& victim = c.OwnerOf(sid);
  const StreamResult r = GenerateWithHeader(c.proxy.get(), GenRequest(kLinear, "Hello", 60000), sid,
                                            1, [&victim] { victim.Kill(); });
  ASSERT_FALSE(r.status.ok());
  EXPECT_LT(r.tokens.size(), 60000u);
  std::printf(
      "mid-stream kill through nginx: %s (code %d): %s after %zu tokens\n",
      absl::StatusCodeToString(static_cast<absl::StatusCode>(r.status.error_code())).c_str(),
      static_cast<int>(r.status.error_code()), r.status.error_message().c_str(), r.tokens.size());
  // nginx 1.22 has sent the response headers already, so it cannot turn the upstream's death
  // into a gRPC status: it resets the HTTP/2 stream (RST_STREAM INTERNAL_ERROR), which gRPC
  // reports as INTERNAL (docs/cluster.md, "Proxy").
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INTERNAL) << r.status.error_message();
  // The next call for that session goes to the survivor.
  const StreamResult next = GenerateWithHeader(c.proxy.get(), GenRequest(kLinear, "Hello", 4), sid);
  EXPECT_TRUE(next.status.ok()) << next.status.error_message();
}

// For comparison with the proxy: a client connected to the replica itself sees UNAVAILABLE when
// the replica dies mid-stream (the connection closes under the stream).
TEST_F(ProxyTest, DirectKillMidStreamIsUnavailable) {
  ServerProcess a(TempDir());
  auto direct = StubTo(absl::StrCat("127.0.0.1:", a.port()));
  const StreamResult r = GenerateWithHeader(direct.get(), GenRequest(kLinear, "Hello", 60000), "",
                                            1, [&a] { a.Kill(); });
  std::printf(
      "mid-stream kill, direct: %s: %s\n",
      absl::StatusCodeToString(static_cast<absl::StatusCode>(r.status.error_code())).c_str(),
      r.status.error_message().c_str());
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE) << r.status.error_message();
}

TEST_F(ProxyTest, AllUpstreamsDownIsUnavailableNamingTheProxy) {
  ServerProcess a(TempDir());
  NginxProcess nginx(TempDir(), {a.port()});
  ASSERT_TRUE(nginx.ok()) << nginx.error();
  auto proxy = StubTo(nginx.address());
  a.Kill();
  const StreamResult r = GenerateWithHeader(proxy.get(), GenRequest(kLinear, "Hello", 4), "");
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE) << r.status.error_message();
  EXPECT_NE(r.status.error_message().find("flatstate proxy"), std::string::npos)
      << r.status.error_message();
}

// Not a pass/fail check: prints what the proxy costs (docs/cluster.md, "Proxy"): per streamed
// token, per message, on the time to first token and on a unary round trip.
TEST_F(ProxyTest, MeasureProxyOverhead) {
  ServerProcess server(TempDir());
  NginxProcess nginx(TempDir(), {server.port()});
  ASSERT_TRUE(nginx.ok()) << nginx.error();
  auto direct = StubTo(absl::StrCat("127.0.0.1:", server.port()));
  auto proxy = StubTo(nginx.address());
  constexpr int kTokens = 512, kRuns = 7, kUnary = 200;
  const pb::GenerateRequest req = GenRequest(kLinear, "ROMEO:", kTokens);
  struct Sample {
    std::vector<double> per_token, ttft, per_message, unary;
  };
  auto stream_once = [&](pb::Inference::Stub* stub, Sample* out) {
    const Clock::time_point t0 = Clock::now();
    double first = -1;
    grpc::ClientContext ctx;
    Prepare(&ctx, "");
    auto reader = stub->Generate(&ctx, req);
    pb::GenerateResponse msg;
    size_t tokens = 0, messages = 0;
    while (reader->Read(&msg)) {
      if (tokens == 0 && msg.token_ids_size() > 0) {
        first = std::chrono::duration<double>(Clock::now() - t0).count();
      }
      tokens += msg.token_ids_size();
      ++messages;
    }
    ASSERT_TRUE(reader->Finish().ok());
    ASSERT_EQ(tokens, static_cast<size_t>(kTokens));
    const double total = std::chrono::duration<double>(Clock::now() - t0).count();
    out->per_token.push_back(total / kTokens);
    out->per_message.push_back(total / static_cast<double>(messages));
    out->ttft.push_back(first);
  };
  auto unary_once = [&](pb::Inference::Stub* stub, Sample* out) {
    const Clock::time_point t0 = Clock::now();
    pb::ListModelsResponse m;
    grpc::ClientContext ctx;
    Prepare(&ctx, "");
    ASSERT_TRUE(stub->ListModels(&ctx, pb::ListModelsRequest(), &m).ok());
    out->unary.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  };
  Sample d, p, warm;
  stream_once(direct.get(), &warm);  // warm-up: channels, caches
  stream_once(proxy.get(), &warm);
  for (int i = 0; i < kRuns; ++i) {  // interleaved, so drift hits both alike
    stream_once(direct.get(), &d);
    stream_once(proxy.get(), &p);
  }
  for (int i = 0; i < kUnary; ++i) {
    unary_once(direct.get(), &d);
    unary_once(proxy.get(), &p);
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double tokens_per_message = median(d.per_message) / median(d.per_token);
  std::printf(
      "proxy overhead (tiny-linear-elu, %d tokens, median of %d streams; %d unary calls):\n"
      "  stream: direct %.1f us/token, via nginx %.1f us/token (%+.1f us/token); "
      "%.1f tokens/message direct\n"
      "  time to first token: direct %.3f ms, via nginx %.3f ms (%+.3f ms)\n"
      "  unary ListModels round trip: direct %.3f ms, via nginx %.3f ms (%+.3f ms)\n",
      kTokens, kRuns, kUnary, 1e6 * median(d.per_token), 1e6 * median(p.per_token),
      1e6 * (median(p.per_token) - median(d.per_token)), tokens_per_message, 1e3 * median(d.ttft),
      1e3 * median(p.ttft), 1e3 * (median(p.ttft) - median(d.ttft)), 1e3 * median(d.unary),
      1e3 * median(p.unary), 1e3 * (median(p.unary) - median(d.unary)));
}

}  // namespace
}  // namespace flatstate::testing
