#include "engine/template/parser.h"

#include <cstdlib>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/template/status_macros.h"

namespace flatstate::tmpl {
namespace {

using ExprPtr = std::unique_ptr<Expr>;
using ExprOr = absl::StatusOr<ExprPtr>;

ExprPtr MakeExpr(ExprKind kind, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  return e;
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  absl::StatusOr<Body> Run() {
    std::string end;
    TPL_ASSIGN_OR_RETURN(Body body, ParseBody({}, &end));
    return body;
  }

 private:
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
      TPL_ASSIGN_OR_RETURN(s->body, ParseBody({"endfor", "else"}, &end));
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
      TPL_ASSIGN_OR_RETURN(s->body, ParseUntil("endmacro"));
    } else if (word == "call") {
      s->kind = StmtKind::kCallBlock;
      if (IsOp("(")) TPL_RETURN_IF_ERROR(ParseParams(s.get()));
      TPL_ASSIGN_OR_RETURN(s->expr, ParseExpression(true));
      if (s->expr->kind != ExprKind::kCall) return Fail("expected call");
      TPL_RETURN_IF_ERROR(ExpectBlockEnd());
      TPL_ASSIGN_OR_RETURN(s->body, ParseUntil("endcall"));
    } else if (word == "filter") {
      s->kind = StmtKind::kFilterBlock;
      TPL_RETURN_IF_ERROR(ParseFilterChain(s.get(), /*leading_pipe=*/false));
      TPL_RETURN_IF_ERROR(ExpectBlockEnd());
      TPL_ASSIGN_OR_RETURN(s->body, ParseUntil("endfilter"));
    } else if (word == "break" || word == "continue") {
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

  // ---- expressions ----
  ExprOr ParseTuple(bool with_condexpr) {
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
  bool AtTupleEnd() const {
    return Cur().type == TokenType::kVarEnd || Cur().type == TokenType::kBlockEnd ||
           Cur().type == TokenType::kEof || IsOp(")") || IsName("if") || IsName("in");
  }

  ExprOr ParseExpression(bool with_condexpr) {
    if (++depth_ > kMaxParseDepth) return Fail("expression nested too deeply");
    ExprOr r = with_condexpr ? ParseCondExpr() : ParseOr();
    --depth_;
    return r;
  }

  ExprOr ParseCondExpr() {
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

  ExprPtr Binary(std::string op, ExprPtr a, ExprPtr b, int line) {
    auto e = MakeExpr(ExprKind::kBinary, line);
    e->name = std::move(op);
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
  }

  ExprOr ParseOr() {
    TPL_ASSIGN_OR_RETURN(ExprPtr e, ParseAnd());
    while (IsName("or")) {
      int line = Cur().line;
      Next();
      TPL_ASSIGN_OR_RETURN(ExprPtr r, ParseAnd());
      e = Binary("or", std::move(e), std::move(r), line);
    }
    return e;
  }
  ExprOr ParseAnd() {
    TPL_ASSIGN_OR_RETURN(ExprPtr e, ParseNot());
    while (IsName("and")) {
      int line = Cur().line;
      Next();
      TPL_ASSIGN_OR_RETURN(ExprPtr r, ParseNot());
      e = Binary("and", std::move(e), std::move(r), line);
    }
    return e;
  }
  ExprOr ParseNot() {
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
  ExprOr ParseCompare() {
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
  ExprOr ParseMath1() {
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
  ExprOr ParseConcat() {
    TPL_ASSIGN_OR_RETURN(ExprPtr e, ParseMath2());
    while (IsOp("~")) {
      int line = Cur().line;
      Next();
      TPL_ASSIGN_OR_RETURN(ExprPtr r, ParseMath2());
      e = Binary("~", std::move(e), std::move(r), line);
    }
    return e;
  }
  ExprOr ParseMath2() {
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
  ExprOr ParsePow() {
    TPL_ASSIGN_OR_RETURN(ExprPtr e, ParseUnary(true));
    while (IsOp("**")) {
      int line = Cur().line;
      Next();
      TPL_ASSIGN_OR_RETURN(ExprPtr r, ParseUnary(true));
      e = Binary("**", std::move(e), std::move(r), line);
    }
    return e;
  }
  ExprOr ParseUnary(bool with_filter) {
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

  ExprOr ParsePrimary() {
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

  absl::Status ParseCallArgs(Expr* call) {
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

  ExprOr ParsePostfix(ExprPtr e) {
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

  ExprOr ParseFilter(ExprPtr subject) {
    auto f = MakeExpr(ExprKind::kFilter, Cur().line);
    TPL_ASSIGN_OR_RETURN(f->name, ExpectName());
    f->args.push_back(std::move(subject));
    if (IsOp("(")) TPL_RETURN_IF_ERROR(ParseCallArgs(f.get()));
    return f;
  }

  ExprOr ParseFilterExpr(ExprPtr e) {
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

  std::vector<Token> t_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

absl::StatusOr<Body> Parse(std::vector<Token> tokens) { return Parser(std::move(tokens)).Run(); }

}  // namespace flatstate::tmpl
