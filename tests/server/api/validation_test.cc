// ValidateGenerate, ConvertSampling and the id checks on the transport-neutral GenerateRequest
// (server/api/validation.h): what both transports reject, naming the field.
#include "server/api/validation.h"

#include <cmath>
#include <limits>
#include <string>

#include "gtest/gtest.h"
#include "server/api/status_mapping.h"
#include "server/store/checkpoint_store.h"

namespace flatstate::server {
namespace {

// No models: validation-only (prompt text is bytes, token ids are checked against 256).
class ValidationTest : public ::testing::Test {
 protected:
  GenerateRequest Request(std::string prompt = "hi") {
    GenerateRequest r;
    r.prompt = std::move(prompt);
    r.max_new_tokens = 4;
    return r;
  }
  // The error's field as the HTTP API names it (ToHttpError's param); "" when accepted.
  std::string Field(const GenerateRequest& r) {
    absl::StatusOr<GenerateJob> job = ValidateGenerate(r, models_, options_);
    return job.ok() ? "" : ToHttpError(job.status()).param;
  }
  ModelRegistry models_{{}, ""};
  ServerOptions options_;
};

TEST_F(ValidationTest, AcceptedRequestBecomesTheJob) {
  GenerateRequest r = Request("ab");
  r.stop = {"x", "\xC3\xA9"};
  r.ignore_eos = true;
  r.stop_token_ids = {7, 9};
  r.sampling = SamplingRequest{0.5f, 0.f, 3, 9};
  absl::StatusOr<GenerateJob> job = ValidateGenerate(r, models_, options_);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->prompt, (std::vector<int32_t>{'a', 'b'}));
  EXPECT_FALSE(job->prompt_text.has_value());
  EXPECT_EQ(job->max_new_tokens, 4u);
  EXPECT_EQ(job->stop, r.stop);
  EXPECT_TRUE(job->ignore_eos);
  EXPECT_EQ(job->stop_token_ids, r.stop_token_ids);
  ASSERT_TRUE(job->sampling.has_value());
  EXPECT_EQ(job->sampling->temperature, 0.5f);
  EXPECT_EQ(job->sampling->top_p, 1.f);  // 0: unset
  EXPECT_EQ(job->sampling->top_k, 3);
  EXPECT_EQ(job->sampling->seed, 9u);
}

TEST_F(ValidationTest, TokenPromptIsCheckedAgainstTheVocabulary) {
  GenerateRequest r = Request("");
  r.prompt_tokens = {0, 255};
  absl::StatusOr<GenerateJob> job = ValidateGenerate(r, models_, options_);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->prompt, r.prompt_tokens);
  r.prompt_tokens = {1, 256};
  EXPECT_EQ(Field(r), "prompt_tokens[1]");
  r.prompt_tokens = {-1};
  EXPECT_EQ(Field(r), "prompt_tokens[0]");
}

TEST_F(ValidationTest, EachBadFieldIsNamed) {
  GenerateRequest r = Request();
  r.prompt_tokens = {1};
  EXPECT_EQ(Field(r), "prompt");  // "prompt and prompt_tokens are both set"

  r = Request();
  r.max_new_tokens = 0;
  EXPECT_EQ(Field(r), "max_new_tokens");
  r.max_new_tokens = options_.max_new_tokens_limit + 1;
  EXPECT_EQ(Field(r), "max_new_tokens");
  r.max_new_tokens = options_.max_new_tokens_limit;
  EXPECT_EQ(Field(r), "");

  r = Request(std::string(11, 'x'));
  options_.max_prompt_tokens = 10;
  EXPECT_EQ(Field(r), "prompt");
  options_.max_prompt_tokens = 11;
  EXPECT_EQ(Field(r), "");

  r = Request("");
  EXPECT_EQ(Field(r), "prompt");  // empty input on a throwaway session

  r = Request();
  r.stop = {"ok", ""};
  EXPECT_EQ(Field(r), "stop[1]");
  r.stop = {"\xC3"};
  EXPECT_EQ(Field(r), "stop[0]");

  r = Request();
  r.stop_token_ids = {3, -1};
  EXPECT_EQ(Field(r), "stop_token_ids[1]");
  r.stop_token_ids.assign(17, 3);
  EXPECT_EQ(Field(r), "stop_token_ids");
  r.stop_token_ids.assign(16, 3);
  EXPECT_EQ(Field(r), "");

  r = Request();
  r.model = "nope";
  EXPECT_FALSE(ValidateGenerate(r, models_, options_).ok());
}

TEST_F(ValidationTest, SessionContinuationMayHaveNoPromptButNeedsAWellFormedId) {
  GenerateRequest r = Request("");
  r.session_id = std::string(32, 'a');
  EXPECT_EQ(Field(r), "");
  r.session_id = "not-an-id";
  absl::StatusOr<GenerateJob> job = ValidateGenerate(r, models_, options_);
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ToHttpError(job.status()).param, "session_id");
  EXPECT_TRUE(ValidateSessionId(std::string(32, 'f')).ok());
  EXPECT_EQ(ValidateSessionId(std::string(32, 'F')).code(), absl::StatusCode::kNotFound);
}

TEST(ConvertSamplingTest, RangesNameTheSamplingField) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (float t : {-0.1f, nan, inf}) {
    absl::StatusOr<SamplingParams> s = ConvertSampling(SamplingRequest{t, 1.f, 0, 0});
    ASSERT_FALSE(s.ok()) << t;
    EXPECT_EQ(ToHttpError(s.status()).param, "sampling.temperature") << t;
  }
  for (float p : {-0.5f, 1.5f, nan}) {
    absl::StatusOr<SamplingParams> s = ConvertSampling(SamplingRequest{1.f, p, 0, 0});
    ASSERT_FALSE(s.ok()) << p;
    EXPECT_EQ(ToHttpError(s.status()).param, "sampling.top_p") << p;
  }
  absl::StatusOr<SamplingParams> ok = ConvertSampling(SamplingRequest{0.f, 0.f, 0, 5});
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->top_p, 1.f);
  EXPECT_EQ(ok->seed, 5u);
}

TEST(ReadCheckpointByIdTest, MalformedIdNamesCheckpointIdAndUnknownIsTheStoresNotFound) {
  absl::StatusOr<CheckpointStore> cs =
      CheckpointStore::Open(::testing::TempDir() + "/validation_test_ckpt");
  ASSERT_TRUE(cs.ok()) << cs.status();
  DirSessionStore store(std::move(*cs));
  absl::StatusOr<std::string> bad = ReadCheckpointById("../etc/passwd", store);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ToHttpError(bad.status()).param, "checkpoint_id");
  EXPECT_EQ(ReadCheckpointById(std::string(32, '0'), store).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace flatstate::server
