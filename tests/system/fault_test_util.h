// Helpers shared by the fault tests (fault_*_test.cc): an acknowledged checkpoint, raw file
// reads and writes, sessions created with sampling, and restores that continue the session and
// delete it. Test-only; thread-safe as the stub is. A failed call is a gtest failure (and returns
// an empty result) unless a function returns the call's status.
#ifndef FLATSTATE_TESTS_SYSTEM_FAULT_TEST_UTIL_H_
#define FLATSTATE_TESTS_SYSTEM_FAULT_TEST_UTIL_H_

#include <chrono>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/server/server_test_util.h"

namespace flatstate::testing {

// A checkpoint as CheckpointSession acknowledged it.
struct Acked {
  std::string checkpoint_id;
  std::string data;
  uint64_t context_tokens = 0;
};

// The bytes of the file at `path` (empty when it cannot be read).
inline std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Replaces the file at `path` with `bytes`.
inline void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// RestoreSession with a 30 s deadline.
inline grpc::Status Restore(pb::Inference::Stub* stub, const pb::RestoreSessionRequest& req,
                            pb::Session* out) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  return stub->RestoreSession(&ctx, req, out);
}

// Deletes the session; failing is a gtest failure.
inline void Delete(pb::Inference::Stub* stub, const std::string& session_id) {
  grpc::ClientContext ctx;
  pb::DeleteSessionRequest req;
  req.set_session_id(session_id);
  pb::DeleteSessionResponse resp;
  EXPECT_TRUE(stub->DeleteSession(&ctx, req, &resp).ok());
}

// Restores `req`, generates 4 more tokens, deletes the session; the tokens (empty on failure).
inline std::vector<int32_t> RestoreAndContinue(pb::Inference::Stub* stub,
                                               const pb::RestoreSessionRequest& req,
                                               uint64_t context_tokens) {
  pb::Session s;
  grpc::Status st = Restore(stub, req, &s);
  EXPECT_TRUE(st.ok()) << st.error_message();
  if (!st.ok()) return {};
  EXPECT_EQ(s.context_tokens(), context_tokens);
  pb::GenerateRequest more = GenRequest("", "", 4);
  more.set_session_id(s.session_id());
  StreamResult r = RunGenerate(stub, more);
  EXPECT_TRUE(r.status.ok()) << r.status.error_message();
  Delete(stub, s.session_id());
  return r.tokens;
}

// The session `req` asks for, created through `stub`; its id (a failure is an EXPECT failure).
inline std::string CreateSessionFrom(pb::Inference::Stub* stub,
                                     const pb::CreateSessionRequest& req) {
  pb::Session s;
  grpc::ClientContext ctx;
  grpc::Status st = stub->CreateSession(&ctx, req, &s);
  EXPECT_TRUE(st.ok()) << st.error_message();
  return s.session_id();
}

// A session of `model` that samples (temperature 0.9, top_k 40, `seed`); its id.
inline std::string CreateSession(pb::Inference::Stub* stub, const std::string& model,
                                 uint64_t seed) {
  pb::CreateSessionRequest req;
  req.set_model(model);
  req.mutable_sampling()->set_temperature(0.9f);
  req.mutable_sampling()->set_top_k(40);
  req.mutable_sampling()->set_seed(seed);
  return CreateSessionFrom(stub, req);
}

}  // namespace flatstate::testing

#endif  // FLATSTATE_TESTS_SYSTEM_FAULT_TEST_UTIL_H_
