// ServerTest, the fixture of the in-process server tests (server_*_test.cc): one Server on
// TestOptions(), shared by all ServerTest tests of a process (started in SetUpTestSuite, deleted in
// TearDownTestSuite), a stub of its own per test, and Create/Get for sessions through that stub.
// MetricValue reads one sample from a Prometheus text body. Test-only; not thread-safe (threads a
// test starts connect their own stubs). Failures are gtest failures: a server that does not start
// fails the suite's set-up.
#ifndef FLATSTATE_TESTS_SERVER_SERVER_TEST_FIXTURE_H_
#define FLATSTATE_TESTS_SERVER_SERVER_TEST_FIXTURE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "tests/server/server_test_util.h"

namespace flatstate::testing {

class ServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = StartServer(TestOptions()).release();
    ASSERT_NE(server_, nullptr);
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override { stub_ = Connect(server_->port()); }

  pb::Session Create(const std::string& model, float temperature = 0.f, uint64_t seed = 0) {
    pb::CreateSessionRequest req;
    req.set_model(model);
    if (temperature > 0) {
      req.mutable_sampling()->set_temperature(temperature);
      req.mutable_sampling()->set_top_k(40);
      req.mutable_sampling()->set_top_p(0.95f);
      req.mutable_sampling()->set_seed(seed);
    }
    pb::Session s;
    grpc::ClientContext ctx;
    grpc::Status st = stub_->CreateSession(&ctx, req, &s);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return s;
  }
  pb::Session Get(const std::string& id, grpc::Status* status = nullptr) {
    pb::GetSessionRequest req;
    req.set_session_id(id);
    pb::Session s;
    grpc::ClientContext ctx;
    grpc::Status st = stub_->GetSession(&ctx, req, &s);
    if (status != nullptr) *status = st;
    else EXPECT_TRUE(st.ok()) << st.error_message();
    return s;
  }

  inline static server::Server* server_ = nullptr;
  std::unique_ptr<pb::Inference::Stub> stub_;
};

// The value of the sample `name` (no labels) in `body`, or 0 when it has none.
inline uint64_t MetricValue(const std::string& body, const std::string& name) {
  const size_t p = body.find("\n" + name + " ");
  if (p == std::string::npos) return 0;
  return std::stoull(body.substr(p + name.size() + 2));
}

}  // namespace flatstate::testing

#endif  // FLATSTATE_TESTS_SERVER_SERVER_TEST_FIXTURE_H_
