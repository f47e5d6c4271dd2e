// The HTTP API's tokenizer endpoints (docs/http-api.md), in llama.cpp server's request and
// response shapes plus a `model` field: POST /tokenize {"content", "add_special", "with_pieces"}
// -> {"tokens": [ids]} or {"tokens": [{"id", "piece"}]}; POST /detokenize {"tokens"} ->
// {"content"}; POST /apply-template {"messages"} -> {"prompt"}. This file parses the bodies and
// builds the answers with a model's Tokenizer / ChatTemplate; http_tokenize.cc serves them.
//
// Stateless functions; thread-safe. Failures are InvalidArgument whose message starts with the
// field ("content: ...", "tokens[2] = 900 is out of range [0, 512)"), so ToHttpError names it.
#ifndef FLATSTATE_SERVER_HTTP_TOKENIZE_API_H_
#define FLATSTATE_SERVER_HTTP_TOKENIZE_API_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace flatstate::server {

struct TokenizeRequest {
  std::string model;  // empty: the default model
  std::string content;
  bool add_special = false;  // llama.cpp's default: no BOS
  bool with_pieces = false;
};
// `content` is required (a string); the booleans must be booleans.
absl::StatusOr<TokenizeRequest> ParseTokenizeRequest(absl::string_view body);
// {"tokens": [ids]}; with_pieces: {"tokens": [{"id", "piece"}]}, the piece a string when the
// token's bytes are valid UTF-8, else an array of its byte values (as llama.cpp does).
// InvalidArgument "content: ..." when the tokenizer cannot encode text.
absl::StatusOr<nlohmann::json> TokenizeJson(const Tokenizer& tokenizer, const TokenizeRequest& r);

struct DetokenizeRequest {
  std::string model;
  std::vector<int32_t> tokens;
};
// `tokens` is required: an array of integers.
absl::StatusOr<DetokenizeRequest> ParseDetokenizeRequest(absl::string_view body);
// {"content": text} (valid UTF-8; empty for a tokenizer without text); InvalidArgument naming
// tokens[i] for an id outside the vocabulary.
absl::StatusOr<nlohmann::json> DetokenizeJson(const Tokenizer& tokenizer,
                                              const DetokenizeRequest& r);

}  // namespace flatstate::server

#endif  // FLATSTATE_SERVER_HTTP_TOKENIZE_API_H_
