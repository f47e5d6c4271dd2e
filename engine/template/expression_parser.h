// ExpressionParser: the expression half of the template parser (jinja2.parser's precedence:
// conditional, or, and, not, comparisons, + -, ~, * / // %, **, unary, primary, postfix,
// filters and tests) over a token cursor that the statement parser (parser.cc) extends.
//
// One instance per Parse call, single-threaded. Fails with InvalidArgument "line N: ..." on a
// syntax error or nesting deeper than kMaxParseDepth.
#ifndef FLATSTATE_ENGINE_TEMPLATE_EXPRESSION_PARSER_H_
#define FLATSTATE_ENGINE_TEMPLATE_EXPRESSION_PARSER_H_

#include <algorithm>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "engine/template/ast.h"
#include "engine/template/lexer.h"

namespace flatstate::tmpl {

inline constexpr int kMaxParseDepth = 200;

using ExprPtr = std::unique_ptr<Expr>;
using ExprOr = absl::StatusOr<ExprPtr>;

class ExpressionParser {
 public:
  explicit ExpressionParser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

 protected:
  const Token& Cur() const { return t_[pos_]; }
  const Token& Peek(size_t k = 1) const { return t_[std::min(pos_ + k, t_.size() - 1)]; }
  void Next() {
    if (pos_ + 1 < t_.size()) ++pos_;
  }
  bool IsOp(std::string_view op) const { return Cur().type == TokenType::kOp && Cur().text == op; }
  bool IsName(std::string_view n) const {
    return Cur().type == TokenType::kName && Cur().text == n;
  }
  absl::Status Fail(std::string_view msg) const {
    return absl::InvalidArgumentError(absl::StrCat("line ", Cur().line, ": ", std::string(msg)));
  }
  absl::Status Expect(std::string_view op) {
    if (!IsOp(op)) return Fail(absl::StrCat("expected '", std::string(op), "'"));
    Next();
    return absl::OkStatus();
  }
  absl::Status ExpectBlockEnd() {
    if (Cur().type != TokenType::kBlockEnd) return Fail("expected end of statement block");
    Next();
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> ExpectName() {
    if (Cur().type != TokenType::kName) return Fail("expected a name");
    std::string n = Cur().text;
    Next();
    return n;
  }

  ExprOr ParseTuple(bool with_condexpr);
  ExprOr ParseExpression(bool with_condexpr);
  absl::Status ParseCallArgs(Expr* call);
  ExprOr ParseFilter(ExprPtr subject);

  std::vector<Token> t_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;  // for loops around the statement being parsed

 private:
  bool AtTupleEnd() const;
  ExprOr ParseCondExpr();
  ExprPtr Binary(std::string op, ExprPtr a, ExprPtr b, int line);
  ExprOr ParseOr();
  ExprOr ParseAnd();
  ExprOr ParseNot();
  ExprOr ParseCompare();
  ExprOr ParseMath1();
  ExprOr ParseConcat();
  ExprOr ParseMath2();
  ExprOr ParsePow();
  ExprOr ParseUnary(bool with_filter);
  ExprOr ParsePrimary();
  ExprOr ParsePostfix(ExprPtr e);
  ExprOr ParseFilterExpr(ExprPtr e);
};

}  // namespace flatstate::tmpl

#endif  // FLATSTATE_ENGINE_TEMPLATE_EXPRESSION_PARSER_H_
