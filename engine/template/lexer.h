// Lexer: splits a Jinja2 template source into tokens the way jinja2.lexer does, applying the
// whitespace control (trim_blocks, lstrip_blocks, "-"/"+" modifiers, keep_trailing_newline) and
// {% raw %} blocks here, so the parser only sees text, tag delimiters and expression tokens.
//
// Stateless function; thread-safe. Fails with InvalidArgument "line N: ..." on an unterminated
// tag, comment or string, or a character that starts no token.
#ifndef FLATSTATE_ENGINE_TEMPLATE_LEXER_H_
#define FLATSTATE_ENGINE_TEMPLATE_LEXER_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace flatstate::tmpl {

enum class TokenType {
  kData,        // literal template text (after whitespace control)
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,  // text holds the decoded value
  kInt,
  kFloat,
  kOp,  // text holds the operator
  kEof,
};

struct Token {
  TokenType type;
  std::string text;
  int line;
};

struct LexOptions {
  bool trim_blocks = false;
  bool lstrip_blocks = false;
  bool keep_trailing_newline = false;
};

absl::StatusOr<std::vector<Token>> Tokenize(std::string_view source, const LexOptions& options);

}  // namespace flatstate::tmpl

#endif  // FLATSTATE_ENGINE_TEMPLATE_LEXER_H_
