// The statement half of the parser (expressions are in expression_parser.cc).
#include "engine/template/parser.h"

#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/template/expression_parser.h"
#include "engine/template/status_macros.h"

namespace flatstate::tmpl {
namespace {

class Parser : public ExpressionParser {
 public:
  explicit Parser(std::vector<Token> tokens) : ExpressionParser(std::move(tokens)) {}

  absl::StatusOr<Body> Run() {
    std::string end;
    TPL_ASSIGN_OR_RETURN(Body body, ParseBody({}, &end));
    return body;
  }

 private:
  // Parses statements until a {% <one of ends> %} tag; *end gets the tag name (its block end is
  // left for the caller, which may read arguments first).
  absl::StatusOr<Body> ParseBody(const std::vector<std::string_view>& ends, std::string* end) {
    Body body;
    while (true) {
      const Token& tok = Cur();
      if (tok.type == TokenType::kEof) {
        if (!ends.empty()) {
          return Fail(absl::StrCat("unexpected end of template, expected '",
                                   std::string(ends.front()), "'"));
        }
        return body;
      }
      if (tok.type == TokenType::kData) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kText;
        s->line = tok.line;
        s->text = tok.text;
        body.push_back(std::move(s));
        Next();
      } else if (tok.type == TokenType::kVarBegin) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kOutput;
        s->line = tok.line;
        Next();
        TPL_ASSIGN_OR_RETURN(s->expr, ParseTuple(true));
        if (Cur().type != TokenType::kVarEnd) return Fail("expected '}}'");
        Next();
        body.push_back(std::move(s));
      } else if (tok.type == TokenType::kBlockBegin) {
        Next();
        if (Cur().type != TokenType::kName) return Fail("expected a statement name");
        for (std::string_view e : ends) {
          if (Cur().text == e) {
            *end = Cur().text;
            Next();
            return body;
          }
        }
        TPL_ASSIGN_OR_RETURN(auto s, ParseStatement());
        body.push_back(std::move(s));
      } else {
        return Fail("unexpected token");
      }
    }
  }

  absl::StatusOr<Body> ParseUntil(std::string_view end_name) {
    std::string end;
    TPL_ASSIGN_OR_RETURN(Body b, ParseBody({end_name}, &end));
    TPL_RETURN_IF_ERROR(ExpectBlockEnd());
    return b;
  }

  absl::StatusOr<std::unique_ptr<Stmt>> ParseStatement() {
    if (++depth_ > kMaxParseDepth) return Fail("template nested too deeply");
    auto s = std::make_unique<Stmt>();
    s->line = Cur().line;
    std::string word = Cur().text;
    Next();
    std::string end;
    if (word == "if") {
      s->kind = StmtKind::kIf;
      while (true) {
        TPL_ASSIGN_OR_RETURN(auto cond, ParseTuple(false));
        s->conds.push_back(std::move(cond));
        TPL_RETURN_IF_ERROR(ExpectBlockEnd());
        TPL_ASSIGN_OR_RETURN(Body b, ParseBody({"elif", "else", "endif"}, &end));
        s->bodies.push_back(std::move(b));
        if (end != "elif") break;
      }
      if (end == "else") {
        TPL_RETURN_IF_ERROR(ExpectBlockEnd());
        TPL_ASSIGN_OR_RETURN(Body b, ParseUntil("endif"));
        s->bodies.push_back(std::move(b));
      } else {
        TPL_RETURN_IF_ERROR(ExpectBlockEnd());
      }
    } else if (word == "for") {
      s->kind = StmtKind::kFor;
      TPL_RETURN_IF_ERROR(ParseTargets(s.get()));
      if (!IsName("in")) return Fail("expected 'in'");
      Next();
      TPL_ASSIGN_OR_RETURN(s->expr, ParseTuple(false));
      if (IsName("if")) {
        Next();
        TPL_ASSIGN_OR_RETURN(s->cond, ParseExpression(true));
      }
      if (IsName("recursive")) return Fail("recursive loops are not supported");
      TPL_RETURN_IF_ERROR(ExpectBlockEnd());
      ++loop_depth_;
      auto body = ParseBody({"endfor", "else"}, &end);
      --loop_depth_;
      if (!body.ok()) return body.status();
      s->body = *std::move(body);
      TPL_RETURN_IF_ERROR(ExpectBlockEnd());
      if (end == "else") {
        TPL_ASSIGN_OR_RETURN(s->else_body, ParseUntil("endfor"));
      }
    } else if (word == "set") {
      TPL_RETURN_IF_ERROR(ParseTargets(s.get()));
      if (IsOp(".") && !s->tuple_target) {
        Next();
        TPL_ASSIGN_OR_RETURN(s->attr, ExpectName());
      }
      if (IsOp("=")) {
        Next();
        s->kind = StmtKind::kSet;
        TPL_ASSIGN_OR_RETURN(s->expr, ParseTuple(true));
        TPL_RETURN_IF_ERROR(ExpectBlockEnd());
      } else {
        if (s->tuple_target || !s->attr.empty()) return Fail("expected '='");
        s->kind = StmtKind::kSetBlock;
        TPL_RETURN_IF_ERROR(ParseFilterChain(s.get()));
        TPL_RETURN_IF_ERROR(ExpectBlockEnd());
        TPL_ASSIGN_OR_RETURN(s->body, ParseUntil("endset"));
      }
    } else if (word == "macro") {
      s->kind = StmtKind::kMacro;
      TPL_ASSIGN_OR_RETURN(s->name, ExpectName());
      TPL_RETURN_IF_ERROR(ParseParams(s.get()));
      TPL_RETURN_IF_ERROR(ExpectBlockEnd());
      const int saved_loops = loop_depth_;
      loop_depth_ = 0;  // a macro body is a function of its own: no loop to break out of
      auto body = ParseUntil("endmacro");
      loop_depth_ = saved_loops;
      if (!body.ok()) return body.status();
      s->body = *std::move(body);
    } else if (word == "call") {
      s->kind = StmtKind::kCallBlock;
      if (IsOp("(")) TPL_RETURN_IF_ERROR(ParseParams(s.get()));
      TPL_ASSIGN_OR_RETURN(s->expr, ParseExpression(true));
      if (s->expr->kind != ExprKind::kCall) return Fail("expected call");
      TPL_RETURN_IF_ERROR(ExpectBlockEnd());
      const int saved_loops = loop_depth_;
      loop_depth_ = 0;  // a macro body is a function of its own: no loop to break out of
      auto body = ParseUntil("endcall");
      loop_depth_ = saved_loops;
      if (!body.ok()) return body.status();
      s->body = *std::move(body);
    } else if (word == "filter") {
      s->kind = StmtKind::kFilterBlock;
      TPL_RETURN_IF_ERROR(ParseFilterChain(s.get(), /*leading_pipe=*/false));
      TPL_RETURN_IF_ERROR(ExpectBlockEnd());
      TPL_ASSIGN_OR_RETURN(s->body, ParseUntil("endfilter"));
    } else if (word == "break" || word == "continue") {
      if (loop_depth_ == 0) return Fail(absl::StrCat("'", word, "' outside loop"));
      s->kind = word == "break" ? StmtKind::kBreak : StmtKind::kContinue;
      TPL_RETURN_IF_ERROR(ExpectBlockEnd());
    } else if (word == "generation") {
      s->kind = StmtKind::kScope;
      TPL_RETURN_IF_ERROR(ExpectBlockEnd());
      TPL_ASSIGN_OR_RETURN(s->body, ParseUntil("endgeneration"));
    } else {
      --pos_;
      return Fail(absl::StrCat("unknown tag '", word, "'"));
    }
    --depth_;
    return s;
  }

  absl::Status ParseTargets(Stmt* s) {
    bool paren = IsOp("(");
    if (paren) Next();
    while (true) {
      TPL_ASSIGN_OR_RETURN(std::string n, ExpectName());
      s->targets.push_back(std::move(n));
      if (!IsOp(",")) break;
      Next();
      s->tuple_target = true;
      if (Cur().type != TokenType::kName) break;
    }
    if (paren) TPL_RETURN_IF_ERROR(Expect(")"));
    return absl::OkStatus();
  }

  absl::Status ParseParams(Stmt* s) {
    TPL_RETURN_IF_ERROR(Expect("("));
    while (!IsOp(")")) {
      if (!s->params.empty()) TPL_RETURN_IF_ERROR(Expect(","));
      if (IsOp(")")) break;
      TPL_ASSIGN_OR_RETURN(std::string n, ExpectName());
      ExprPtr def;
      if (IsOp("=")) {
        Next();
        TPL_ASSIGN_OR_RETURN(def, ParseExpression(true));
      }
      s->params.emplace_back(std::move(n), std::move(def));
    }
    Next();
    return absl::OkStatus();
  }

  absl::Status ParseFilterChain(Stmt* s, bool leading_pipe = true) {
    bool first = true;
    while ((first && !leading_pipe) || IsOp("|")) {
      if (!(first && !leading_pipe)) Next();
      first = false;
      TPL_ASSIGN_OR_RETURN(auto f, ParseFilter(nullptr));
      s->filters.push_back(std::move(f));
    }
    return absl::OkStatus();
  }
};

}  // namespace

absl::StatusOr<Body> Parse(std::vector<Token> tokens) { return Parser(std::move(tokens)).Run(); }

}  // namespace flatstate::tmpl
