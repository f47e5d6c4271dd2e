// Helpers shared by the limits tests (limits_*_test.cc): GetStats, CreateSession and a check that
// a session still continues. Test-only; thread-safe as the stub is. Failures are gtest failures
// unless a function returns the call's status.
#ifndef FLATSTATE_TESTS_SYSTEM_LIMITS_TEST_UTIL_H_
#define FLATSTATE_TESTS_SYSTEM_LIMITS_TEST_UTIL_H_

#include <string>

#include "tests/server/server_test_util.h"

namespace flatstate::testing {

// The server's stats (a failed call is a gtest failure and gives empty stats).
inline pb::ServerStats Stats(pb::Inference::Stub* stub) {
  pb::ServerStats s;
  grpc::ClientContext ctx;
  EXPECT_TRUE(stub->GetStats(&ctx, pb::GetStatsRequest(), &s).ok());
  return s;
}

// CreateSession of `model` with default sampling into `out`; the call's status.
inline grpc::Status CreateSession(pb::Inference::Stub* stub, const std::string& model,
                                  pb::Session* out) {
  pb::CreateSessionRequest req;
  req.set_model(model);
  grpc::ClientContext ctx;
  return stub->CreateSession(&ctx, req, out);
}

// The session generates 2 more tokens.
inline void ExpectContinues(pb::Inference::Stub* stub, const std::string& session_id) {
  pb::GenerateRequest req = GenRequest("", "go on", 2);
  req.set_session_id(session_id);
  StreamResult r = RunGenerate(stub, req);
  EXPECT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.tokens.size(), 2u);
}

}  // namespace flatstate::testing

#endif  // FLATSTATE_TESTS_SYSTEM_LIMITS_TEST_UTIL_H_
