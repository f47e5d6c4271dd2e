// ReadResponseFormat (server/http/response_format.h) through ParseOpenAiRequest, and the job it
// becomes (ToGenerateJob: the schema converted to GBNF by ValidateGenerate), without a server.
#include "server/http/response_format.h"

#include <string>

#include "gtest/gtest.h"
#include "server/api/status_mapping.h"
#include "server/http/openai_request.h"

namespace flatstate::server {
namespace {

TEST(ResponseFormatTest, ReadsEachFormatKeepingTheSchemaKeyOrder) {
  auto r = ParseOpenAiRequest(R"({"prompt": "x", "response_format": {"type": "json_schema",
      "json_schema": {"name": "p", "strict": true, "schema": {"type": "object",
      "properties": {"zeta": {"type": "string"}, "alpha": {"type": "integer"}}}}}})",
                              false);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(
      r->structured.json_schema,
      R"({"type":"object","properties":{"zeta":{"type":"string"},"alpha":{"type":"integer"}}})");
  EXPECT_FALSE(r->structured.json_object);
  r = ParseOpenAiRequest(R"({"prompt": "x", "response_format": {"type": "json_object"}})", false);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->structured.json_object);
  r = ParseOpenAiRequest(R"({"prompt": "x", "response_format": {"type": "text"},
                             "grammar": "root ::= \"a\""})",
                         false);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->structured.grammar, "root ::= \"a\"");
  EXPECT_FALSE(r->structured.json_object);
}

TEST(ResponseFormatTest, ErrorsNameTheField) {
  for (const char* body : {
           R"({"prompt": "x", "response_format": {"type": "yaml"}})",
           R"({"prompt": "x", "response_format": {}})",
           R"({"prompt": "x", "response_format": {"type": "json_schema", "json_schema": 1}})",
           R"({"prompt": "x", "response_format": {"type": "json_schema",
               "json_schema": {"name": 3, "schema": {}}}})",
           R"({"prompt": "x", "response_format": {"type": "json_schema",
               "json_schema": {"strict": "yes", "schema": {}}}})",
           R"({"prompt": "x", "response_format": {"type": "json_object"}, "grammar": "x"})",
       }) {
    auto r = ParseOpenAiRequest(body, false);
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(ToHttpError(r.status()).param, "response_format") << r.status();
  }
  auto r = ParseOpenAiRequest(R"({"prompt": "x", "grammar": ["a"]})", false);
  EXPECT_EQ(ToHttpError(r.status()).param, "grammar");
}

// The job: the schema as GBNF, unsupported keywords and bad GBNF refused naming the field.
TEST(ResponseFormatTest, JobCarriesGbnfAndRefusesBadSchemas) {
  const ModelRegistry models{{}, ""};  // none: validation only
  const ServerOptions options;
  auto job = [&](const std::string& body) {
    absl::StatusOr<OpenAiRequest> r = ParseOpenAiRequest(body, false);
    EXPECT_TRUE(r.ok()) << r.status();
    return ToGenerateJob(*r, ChatTemplate{}, models, options);
  };
  absl::StatusOr<GenerateJob> j = job(R"({"prompt": "x", "response_format":
      {"type": "json_schema", "json_schema": {"schema": {"type": "boolean"}}}})");
  ASSERT_TRUE(j.ok()) << j.status();
  ASSERT_TRUE(j->grammar.has_value());
  EXPECT_NE(j->grammar->find("root ::="), std::string::npos) << *j->grammar;
  j = job(R"({"prompt": "x"})");
  ASSERT_TRUE(j.ok());
  EXPECT_FALSE(j->grammar.has_value());
  j = job(R"({"prompt": "x", "response_format": {"type": "json_schema", "json_schema":
      {"schema": {"type": "object", "properties": {"p": {"type": "number", "minimum": 1}}}}}})");
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(RenameParamForHttp(ToHttpError(j.status()).param, false), "response_format");
  EXPECT_NE(j.status().message().find("unsupported JSON Schema keyword 'minimum' at "
                                      "#/properties/p"),
            absl::string_view::npos)
      << j.status();
  j = job(R"({"prompt": "x", "grammar": "root ::= \"a"})");
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(RenameParamForHttp(ToHttpError(j.status()).param, false), "grammar");
  EXPECT_NE(j.status().message().find("GBNF 1:"), absl::string_view::npos) << j.status();
}

}  // namespace
}  // namespace flatstate::server
