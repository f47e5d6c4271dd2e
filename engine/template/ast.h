// The syntax tree of a parsed template: expressions (Expr) and statements (Stmt).
//
// Built once by the parser and never modified afterwards, so a tree is safe to read from any
// number of threads. Nodes own their children through unique_ptr. Nothing here fails.
#ifndef FLATSTATE_ENGINE_TEMPLATE_AST_H_
#define FLATSTATE_ENGINE_TEMPLATE_AST_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/template/value.h"

namespace flatstate::tmpl {

enum class ExprKind {
  kLiteral,   // literal
  kName,      // name
  kList,      // args: items
  kTuple,     // args: items
  kDict,      // args: key, value, key, value, ...
  kGetAttr,   // args[0].name
  kGetItem,   // args[0][args[1]]
  kSlice,     // args[0][args[1]:args[2]:args[3]] (null parts allowed)
  kCall,      // args[0](args[1..], kwargs)
  kFilter,    // args[0] | name(args[1..], kwargs); args[0] null inside a filter block
  kTest,      // args[0] is [not] name(args[1..])
  kUnary,     // op args[0]: "-", "+", "not"
  kBinary,    // args[0] op args[1]: + - * / // % ** ~ and or
  kCompare,   // args[0] ops[0] args[1] ops[1] args[2] ...
  kCondExpr,  // args[1] if args[0] else args[2] (args[2] may be null)
};

struct Expr {
  ExprKind kind;
  int line = 0;
  Value literal;
  std::string name;  // variable, attribute, filter or test name, or the operator
  bool negated = false;
  std::vector<std::unique_ptr<Expr>> args;
  std::vector<std::pair<std::string, std::unique_ptr<Expr>>> kwargs;
  std::vector<std::string> ops;
};

enum class StmtKind {
  kText,         // text
  kOutput,       // {{ expr }}
  kIf,           // conds[i] -> bodies[i]; bodies.back() is the else body when size > conds
  kFor,          // targets in expr [if cond]: body, else_body
  kSet,          // targets = expr, or attr_owner.name = expr (attr_target)
  kSetBlock,     // targets[0] = rendered body, filtered through filters
  kMacro,        // name(params with defaults): body
  kCallBlock,    // expr (the macro call) with caller(params): body
  kFilterBlock,  // body rendered then passed through filters
  kBreak,
  kContinue,
  kScope,  // body rendered in place ({% generation %})
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
  StmtKind kind;
  int line = 0;
  std::string text;
  std::unique_ptr<Expr> expr;
  std::unique_ptr<Expr> cond;
  std::vector<std::unique_ptr<Expr>> conds;
  std::vector<Body> bodies;
  Body body;
  Body else_body;
  std::vector<std::string> targets;
  bool tuple_target = false;
  std::string attr;  // kSet with "ns.attr = ...": targets[0] is ns
  std::string name;
  std::vector<std::pair<std::string, std::unique_ptr<Expr>>> params;  // macro parameters
  std::vector<std::unique_ptr<Expr>> filters;  // kFilter nodes with a null subject
};

}  // namespace flatstate::tmpl

#endif  // FLATSTATE_ENGINE_TEMPLATE_AST_H_
