// Parser: turns the lexer's tokens into the statement tree (ast.h), following jinja2.parser's
// grammar and operator precedence for the statements and expressions chat templates use.
//
// Stateless function; thread-safe. Fails with InvalidArgument "line N: ..." on a syntax error, an
// unknown tag, an unclosed block or nesting deeper than 200 levels.
#ifndef FLATSTATE_ENGINE_TEMPLATE_PARSER_H_
#define FLATSTATE_ENGINE_TEMPLATE_PARSER_H_

#include <vector>

#include "absl/status/statusor.h"
#include "engine/template/ast.h"
#include "engine/template/lexer.h"

namespace flatstate::tmpl {

absl::StatusOr<Body> Parse(std::vector<Token> tokens);

}  // namespace flatstate::tmpl

#endif  // FLATSTATE_ENGINE_TEMPLATE_PARSER_H_
