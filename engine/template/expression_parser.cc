#include "engine/template/expression_parser.h"

#include <cstdlib>

#include "engine/template/status_macros.h"

namespace flatstate::tmpl {
namespace {

ExprPtr MakeExpr(ExprKind kind, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  return e;
}

}  // namespace

ExprOr ExpressionParser::ParseTuple(bool with_condexpr) {
  int line = Cur().line;
  TPL_ASSIGN_OR_RETURN(ExprPtr first, ParseExpression(with_condexpr));
  if (!IsOp(",")) return first;
  auto tuple = MakeExpr(ExprKind::kTuple, line);
  tuple->args.push_back(std::move(first));
  while (IsOp(",")) {
    Next();
    if (AtTupleEnd()) break;
    TPL_ASSIGN_OR_RETURN(ExprPtr e, ParseExpression(with_condexpr));
    tuple->args.push_back(std::move(e));
  }
  return tuple;
}
bool ExpressionParser::AtTupleEnd() const {
  return Cur().type == TokenType::kVarEnd || Cur().type == TokenType::kBlockEnd ||
         Cur().type == TokenType::kEof || IsOp(")") || IsName("if") || IsName("in");
}

ExprOr ExpressionParser::ParseExpression(bool with_condexpr) {
  if (++depth_ > kMaxParseDepth) return Fail("expression nested too deeply");
  ExprOr r = with_condexpr ? ParseCondExpr() : ParseOr();
  --depth_;
  return r;
}

ExprOr ExpressionParser::ParseCondExpr() {
  TPL_ASSIGN_OR_RETURN(ExprPtr e, ParseOr());
  while (IsName("if")) {
    auto c = MakeExpr(ExprKind::kCondExpr, Cur().line);
    Next();
    TPL_ASSIGN_OR_RETURN(ExprPtr test, ParseOr());
    ExprPtr other;
    if (IsName("else")) {
      Next();
      TPL_ASSIGN_OR_RETURN(other, ParseExpression(true));
    }
    c->args.push_back(std::move(test));
    c->args.push_back(std::move(e));
    c->args.push_back(std::move(other));
    e = std::move(c);
  }
  return e;
}

ExprPtr ExpressionParser::Binary(std::string op, ExprPtr a, ExprPtr b, int line) {
  auto e = MakeExpr(ExprKind::kBinary, line);
  e->name = std::move(op);
  e->args.push_back(std::move(a));
  e->args.push_back(std::move(b));
  return e;
}

ExprOr ExpressionParser::ParseOr() {
  TPL_ASSIGN_OR_RETURN(ExprPtr e, ParseAnd());
  while (IsName("or")) {
    int line = Cur().line;
    Next();
    TPL_ASSIGN_OR_RETURN(ExprPtr r, ParseAnd());
    e = Binary("or", std::move(e), std::move(r), line);
  }
  return e;
}
ExprOr ExpressionParser::ParseAnd() {
  TPL_ASSIGN_OR_RETURN(ExprPtr e, ParseNot());
  while (IsName("and")) {
    int line = Cur().line;
    Next();
    TPL_ASSIGN_OR_RETURN(ExprPtr r, ParseNot());
    e = Binary("and", std::move(e), std::move(r), line);
  }
  return e;
}
ExprOr ExpressionParser::ParseNot() {
  if (IsName("not")) {
    auto e = MakeExpr(ExprKind::kUnary, Cur().line);
    e->name = "not";
    Next();
    if (++depth_ > kMaxParseDepth) return Fail("expression nested too deeply");
    TPL_ASSIGN_OR_RETURN(ExprPtr x, ParseNot());
    --depth_;
    e->args.push_back(std::move(x));
    return e;
  }
  return ParseCompare();
}
ExprOr ExpressionParser::ParseCompare() {
  int line = Cur().line;
  TPL_ASSIGN_OR_RETURN(ExprPtr first, ParseMath1());
  ExprPtr cmp;
  while (true) {
    std::string op;
    if (Cur().type == TokenType::kOp &&
        (IsOp("==") || IsOp("!=") || IsOp("<") || IsOp(">") || IsOp("<=") || IsOp(">="))) {
      op = Cur().text;
      Next();
    } else if (IsName("in")) {
      op = "in";
      Next();
    } else if (IsName("not") && Peek().type == TokenType::kName && Peek().text == "in") {
      op = "notin";
      Next();
      Next();
    } else {
      break;
    }
    if (!cmp) {
      cmp = MakeExpr(ExprKind::kCompare, line);
      cmp->args.push_back(std::move(first));
    }
    TPL_ASSIGN_OR_RETURN(ExprPtr r, ParseMath1());
    cmp->ops.push_back(op);
    cmp->args.push_back(std::move(r));
  }
  return cmp ? std::move(cmp) : std::move(first);
}
ExprOr ExpressionParser::ParseMath1() {
  TPL_ASSIGN_OR_RETURN(ExprPtr e, ParseConcat());
  while (IsOp("+") || IsOp("-")) {
    std::string op = Cur().text;
    int line = Cur().line;
    Next();
    TPL_ASSIGN_OR_RETURN(ExprPtr r, ParseConcat());
    e = Binary(op, std::move(e), std::move(r), line);
  }
  return e;
}
ExprOr ExpressionParser::ParseConcat() {
  TPL_ASSIGN_OR_RETURN(ExprPtr e, ParseMath2());
  while (IsOp("~")) {
    int line = Cur().line;
    Next();
    TPL_ASSIGN_OR_RETURN(ExprPtr r, ParseMath2());
    e = Binary("~", std::move(e), std::move(r), line);
  }
  return e;
}
ExprOr ExpressionParser::ParseMath2() {
  TPL_ASSIGN_OR_RETURN(ExprPtr e, ParsePow());
  while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
    std::string op = Cur().text;
    int line = Cur().line;
    Next();
    TPL_ASSIGN_OR_RETURN(ExprPtr r, ParsePow());
    e = Binary(op, std::move(e), std::move(r), line);
  }
  return e;
}
ExprOr ExpressionParser::ParsePow() {
  TPL_ASSIGN_OR_RETURN(ExprPtr e, ParseUnary(true));
  while (IsOp("**")) {
    int line = Cur().line;
    Next();
    TPL_ASSIGN_OR_RETURN(ExprPtr r, ParseUnary(true));
    e = Binary("**", std::move(e), std::move(r), line);
  }
  return e;
}
ExprOr ExpressionParser::ParseUnary(bool with_filter) {
  if (++depth_ > kMaxParseDepth) return Fail("expression nested too deeply");
  ExprPtr e;
  if (IsOp("-") || IsOp("+")) {
    e = MakeExpr(ExprKind::kUnary, Cur().line);
    e->name = Cur().text;
    Next();
    TPL_ASSIGN_OR_RETURN(ExprPtr x, ParseUnary(false));
    e->args.push_back(std::move(x));
  } else {
    TPL_ASSIGN_OR_RETURN(e, ParsePrimary());
  }
  TPL_ASSIGN_OR_RETURN(e, ParsePostfix(std::move(e)));
  if (with_filter) {
    TPL_ASSIGN_OR_RETURN(e, ParseFilterExpr(std::move(e)));
  }
  --depth_;
  return e;
}

ExprOr ExpressionParser::ParsePrimary() {
  const Token& tok = Cur();
  int line = tok.line;
  if (tok.type == TokenType::kName) {
    const std::string& n = tok.text;
    auto e = MakeExpr(ExprKind::kLiteral, line);
    if (n == "true" || n == "True") {
      e->literal = Value::Bool(true);
    } else if (n == "false" || n == "False") {
      e->literal = Value::Bool(false);
    } else if (n == "none" || n == "None") {
      e->literal = Value::None();
    } else {
      e->kind = ExprKind::kName;
      e->name = n;
    }
    Next();
    return e;
  }
  if (tok.type == TokenType::kString) {
    std::string s;
    while (Cur().type == TokenType::kString) {
      s += Cur().text;
      Next();
    }
    auto e = MakeExpr(ExprKind::kLiteral, line);
    e->literal = Value::Str(std::move(s));
    return e;
  }
  if (tok.type == TokenType::kInt || tok.type == TokenType::kFloat) {
    auto e = MakeExpr(ExprKind::kLiteral, line);
    if (tok.type == TokenType::kInt) {
      errno = 0;
      long long v = std::strtoll(tok.text.c_str(), nullptr, 10);
      if (errno == ERANGE) return Fail("integer literal too large");
      e->literal = Value::Int(v);
    } else {
      e->literal = Value::Float(std::strtod(tok.text.c_str(), nullptr));
    }
    Next();
    return e;
  }
  if (IsOp("(")) {
    Next();
    if (IsOp(")")) {
      Next();
      return MakeExpr(ExprKind::kTuple, line);
    }
    TPL_ASSIGN_OR_RETURN(ExprPtr e, ParseTuple(true));
    TPL_RETURN_IF_ERROR(Expect(")"));
    return e;
  }
  if (IsOp("[") || IsOp("{")) {
    bool dict = IsOp("{");
    auto e = MakeExpr(dict ? ExprKind::kDict : ExprKind::kList, line);
    Next();
    const char* close = dict ? "}" : "]";
    while (!IsOp(close)) {
      if (!e->args.empty()) TPL_RETURN_IF_ERROR(Expect(","));
      if (IsOp(close)) break;
      TPL_ASSIGN_OR_RETURN(ExprPtr item, ParseExpression(true));
      e->args.push_back(std::move(item));
      if (dict) {
        TPL_RETURN_IF_ERROR(Expect(":"));
        TPL_ASSIGN_OR_RETURN(ExprPtr v, ParseExpression(true));
        e->args.push_back(std::move(v));
      }
    }
    Next();
    return e;
  }
  return Fail(absl::StrCat("unexpected '", tok.text.empty() ? "end of tag" : tok.text, "'"));
}

absl::Status ExpressionParser::ParseCallArgs(Expr* call) {
  TPL_RETURN_IF_ERROR(Expect("("));
  bool first = true;
  while (!IsOp(")")) {
    if (!first) TPL_RETURN_IF_ERROR(Expect(","));
    first = false;
    if (IsOp(")")) break;
    if (Cur().type == TokenType::kName && Peek().type == TokenType::kOp && Peek().text == "=") {
      std::string key = Cur().text;
      Next();
      Next();
      TPL_ASSIGN_OR_RETURN(ExprPtr v, ParseExpression(true));
      call->kwargs.emplace_back(std::move(key), std::move(v));
    } else {
      if (!call->kwargs.empty()) return Fail("positional argument after keyword argument");
      TPL_ASSIGN_OR_RETURN(ExprPtr v, ParseExpression(true));
      call->args.push_back(std::move(v));
    }
  }
  Next();
  return absl::OkStatus();
}

ExprOr ExpressionParser::ParsePostfix(ExprPtr e) {
  while (true) {
    int line = Cur().line;
    if (IsOp(".")) {
      Next();
      if (Cur().type == TokenType::kName) {
        auto g = MakeExpr(ExprKind::kGetAttr, line);
        g->name = Cur().text;
        g->args.push_back(std::move(e));
        e = std::move(g);
      } else if (Cur().type == TokenType::kInt) {
        auto g = MakeExpr(ExprKind::kGetItem, line);
        auto k = MakeExpr(ExprKind::kLiteral, line);
        k->literal = Value::Int(std::strtoll(Cur().text.c_str(), nullptr, 10));
        g->args.push_back(std::move(e));
        g->args.push_back(std::move(k));
        e = std::move(g);
      } else {
        return Fail("expected name after '.'");
      }
      Next();
    } else if (IsOp("[")) {
      Next();
      ExprPtr parts[3];
      bool slice = false;
      for (int i = 0; i < 3; ++i) {
        if (!IsOp(":") && !IsOp("]")) {
          TPL_ASSIGN_OR_RETURN(parts[i], ParseExpression(true));
        }
        if (!IsOp(":")) break;
        slice = true;
        Next();
      }
      TPL_RETURN_IF_ERROR(Expect("]"));
      auto g = MakeExpr(slice ? ExprKind::kSlice : ExprKind::kGetItem, line);
      g->args.push_back(std::move(e));
      if (!slice && !parts[0]) return Fail("expected subscript");
      for (int i = 0; i < (slice ? 3 : 1); ++i) g->args.push_back(std::move(parts[i]));
      e = std::move(g);
    } else if (IsOp("(")) {
      auto c = MakeExpr(ExprKind::kCall, line);
      c->args.push_back(std::move(e));
      TPL_RETURN_IF_ERROR(ParseCallArgs(c.get()));
      e = std::move(c);
    } else {
      return e;
    }
  }
}

ExprOr ExpressionParser::ParseFilter(ExprPtr subject) {
  auto f = MakeExpr(ExprKind::kFilter, Cur().line);
  TPL_ASSIGN_OR_RETURN(f->name, ExpectName());
  f->args.push_back(std::move(subject));
  if (IsOp("(")) TPL_RETURN_IF_ERROR(ParseCallArgs(f.get()));
  return f;
}

ExprOr ExpressionParser::ParseFilterExpr(ExprPtr e) {
  while (true) {
    if (IsOp("|")) {
      Next();
      TPL_ASSIGN_OR_RETURN(e, ParseFilter(std::move(e)));
    } else if (IsName("is")) {
      auto t = MakeExpr(ExprKind::kTest, Cur().line);
      Next();
      if (IsName("not")) {
        t->negated = true;
        Next();
      }
      TPL_ASSIGN_OR_RETURN(t->name, ExpectName());
      t->args.push_back(std::move(e));
      const Token& c = Cur();
      if (IsOp("(")) {
        TPL_RETURN_IF_ERROR(ParseCallArgs(t.get()));
      } else if ((c.type == TokenType::kName || c.type == TokenType::kString ||
                  c.type == TokenType::kInt || c.type == TokenType::kFloat || IsOp("[") ||
                  IsOp("{")) &&
                 !IsName("else") && !IsName("or") && !IsName("and")) {
        if (IsName("is")) return Fail("cannot chain multiple tests with is");
        TPL_ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());
        TPL_ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
        t->args.push_back(std::move(arg));
      }
      e = std::move(t);
    } else if (IsOp("(")) {
      auto c = MakeExpr(ExprKind::kCall, Cur().line);
      c->args.push_back(std::move(e));
      TPL_RETURN_IF_ERROR(ParseCallArgs(c.get()));
      e = std::move(c);
    } else {
      return e;
    }
  }
}

}  // namespace flatstate::tmpl
