// Helpers shared by the security tests (security_*_test.cc): the bearer token they configure, the
// authorization header on a call, a session made through a stub. Test-only; thread-safe as the
// stub is. A failed call is a gtest failure (and returns an empty session).
#ifndef FLATSTATE_TESTS_SYSTEM_SECURITY_TEST_UTIL_H_
#define FLATSTATE_TESTS_SYSTEM_SECURITY_TEST_UTIL_H_

#include <string>

#include "tests/server/server_test_util.h"

namespace flatstate::testing {

// The --auth_token of the servers that need one.
inline constexpr char kToken[] = "s3cret-token";

// Sends `header` as the call's authorization metadata; an empty one sends none.
inline void SetAuth(grpc::ClientContext* ctx, const std::string& header) {
  if (!header.empty()) ctx->AddMetadata("authorization", header);
}

// A session of the linear model, created with authorization `auth`.
inline pb::Session NewSession(pb::Inference::Stub* stub, const std::string& auth = "") {
  pb::CreateSessionRequest req;
  req.set_model(kLinear);
  pb::Session s;
  grpc::ClientContext ctx;
  SetAuth(&ctx, auth);
  grpc::Status st = stub->CreateSession(&ctx, req, &s);
  EXPECT_TRUE(st.ok()) << st.error_message();
  return s;
}

}  // namespace flatstate::testing

#endif  // FLATSTATE_TESTS_SYSTEM_SECURITY_TEST_UTIL_H_
