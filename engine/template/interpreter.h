// Interpreter: renders one parsed template (ast.h) for one context, holding the per-render state:
// the variable scopes, the output buffer, break/continue flow and the step/size/depth budgets.
//
// One Interpreter per render call, used by one thread; the tree it walks is shared read-only.
// Every failure (raise_exception, an unknown method, calling undefined, a type error, a limit)
// returns InvalidArgument "line N: <message>" with the line of the node being evaluated.
#ifndef FLATSTATE_ENGINE_TEMPLATE_INTERPRETER_H_
#define FLATSTATE_ENGINE_TEMPLATE_INTERPRETER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/template/ast.h"
#include "engine/template/value.h"

namespace flatstate::tmpl {

struct Limits {
  size_t max_output_bytes = 1 << 20;  // also bounds every string and list built while rendering
  int64_t max_steps = 1'000'000;      // statements, loop iterations and per-item filter work
  int max_recursion_depth = 64;       // nested macro calls
};

class Interpreter {
 public:
  Interpreter(const Limits& limits, std::string* out) : limits_(limits), out_(out) {}
  // Empties every namespace made during the render, breaking reference cycles through them
  // (`{% set ns.self = [ns] %}`), the only mutable objects a template can build.
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  // Binds a top-level variable (the render context: messages, tools, bos_token, ...).
  void SetGlobal(std::string name, Value value);
  absl::Status Render(const Body& body);

  // Used by filters and builtins.
  absl::StatusOr<Value> Eval(const Expr& e);
  absl::Status Step(int64_t n = 1);
  absl::Status CheckSize(size_t bytes) const;
  absl::Status Error(std::string_view message) const;
  // Adds "line N: " to a builtin's error unless it already names a line.
  absl::Status Located(const absl::Status& s) const;
  int line() const { return line_; }
  void TrackNamespace(const Value& ns) { namespaces_.push_back(ns); }

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  using Frame = std::vector<std::pair<std::string, Value>>;

  absl::Status RenderBody(const Body& body);
  absl::Status Exec(const Stmt& s);
  absl::Status ExecFor(const Stmt& s);
  absl::Status ExecSet(const Stmt& s);
  absl::Status Append(std::string_view text);
  absl::StatusOr<std::string> Capture(const Body& body);
  absl::StatusOr<Value> CallMacro(const Stmt& macro, CallArgs& args);
  absl::StatusOr<Value> ApplyFilters(const Stmt& s, Value v);
  absl::Status BindTargets(const Stmt& s, const Value& item);

  const Value* Lookup(std::string_view name) const;
  void Assign(std::string_view name, Value value);

  absl::StatusOr<Value> EvalCall(const Expr& e);
  absl::StatusOr<Value> EvalArgs(const Expr& e, size_t first, CallArgs* args);
  absl::StatusOr<Value> EvalBinary(const Expr& e);
  absl::StatusOr<Value> EvalCompare(const Expr& e);
  absl::StatusOr<Value> GetAttr(const Value& obj, const std::string& name);
  Value LoopAttr(const Value& loop, std::string_view name);
  absl::StatusOr<Value> GetItem(const Value& obj, const Value& key);
  absl::StatusOr<Value> Slice(const Value& obj, const Expr& e);
  absl::StatusOr<Value> Global(std::string_view name);

  Limits limits_;
  std::string* out_;
  std::vector<Frame> frames_{Frame()};
  size_t floor_ = 0;  // lookups see frames_[floor_..] and frames_[0]
  Flow flow_ = Flow::kNormal;
  std::vector<Value> namespaces_;
  int64_t steps_ = 0;
  int depth_ = 0;
  int line_ = 0;
};

}  // namespace flatstate::tmpl

#endif  // FLATSTATE_ENGINE_TEMPLATE_INTERPRETER_H_
