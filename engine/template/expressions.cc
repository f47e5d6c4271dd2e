// Expression evaluation of Interpreter (the statements are in interpreter.cc).
#include <string>

#include "absl/strings/str_cat.h"
#include "engine/template/builtins.h"
#include "engine/template/interpreter.h"
#include "engine/template/status_macros.h"

namespace flatstate::tmpl {

absl::StatusOr<Value> Interpreter::Eval(const Expr& e) {
  line_ = e.line;
  switch (e.kind) {
    case ExprKind::kLiteral:
      return e.literal;
    case ExprKind::kName: {
      if (const Value* v = Lookup(e.name)) return *v;
      return Global(e.name);
    }
    case ExprKind::kList:
    case ExprKind::kTuple: {
      List items;
      items.reserve(e.args.size());
      for (const auto& a : e.args) {
        TPL_ASSIGN_OR_RETURN(Value v, Eval(*a));
        items.push_back(std::move(v));
      }
      return Value::MakeList(std::move(items), e.kind == ExprKind::kTuple);
    }
    case ExprKind::kDict: {
      Dict d;
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        TPL_ASSIGN_OR_RETURN(Value k, Eval(*e.args[i]));
        if (!k.is_string()) return Error("only string keys are supported in dict literals");
        TPL_ASSIGN_OR_RETURN(Value v, Eval(*e.args[i + 1]));
        d.Set(k.str(), std::move(v));
      }
      return Value::MakeDict(std::move(d));
    }
    case ExprKind::kGetAttr: {
      TPL_ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0]));
      line_ = e.line;
      return GetAttr(obj, e.name);
    }
    case ExprKind::kGetItem: {
      TPL_ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0]));
      TPL_ASSIGN_OR_RETURN(Value key, Eval(*e.args[1]));
      line_ = e.line;
      return GetItem(obj, key);
    }
    case ExprKind::kSlice: {
      TPL_ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0]));
      return Slice(obj, e);
    }
    case ExprKind::kCall:
      return EvalCall(e);
    case ExprKind::kFilter: {
      TPL_ASSIGN_OR_RETURN(Value subject, Eval(*e.args[0]));
      CallArgs args;
      TPL_ASSIGN_OR_RETURN(Value unused, EvalArgs(e, 1, &args));
      (void)unused;
      line_ = e.line;
      auto r = ApplyFilter(*this, e.name, subject, args);
      if (!r.ok()) return Located(r.status());
      return r;
    }
    case ExprKind::kTest: {
      TPL_ASSIGN_OR_RETURN(Value subject, Eval(*e.args[0]));
      CallArgs args;
      TPL_ASSIGN_OR_RETURN(Value unused, EvalArgs(e, 1, &args));
      (void)unused;
      line_ = e.line;
      auto r = ApplyTest(*this, e.name, subject, args);
      if (!r.ok()) return Located(r.status());
      return Value::Bool(*r != e.negated);
    }
    case ExprKind::kUnary: {
      TPL_ASSIGN_OR_RETURN(Value v, Eval(*e.args[0]));
      line_ = e.line;
      if (e.name == "not") return Value::Bool(!v.Truthy());
      if (v.is_bool() || v.is_int()) {
        if (e.name == "+") return Value::Int(v.as_int());
        if (v.as_int() == INT64_MIN) return Error("integer overflow");
        return Value::Int(-v.as_int());
      }
      if (v.is_float()) return Value::Float(e.name == "-" ? -v.as_double() : v.as_double());
      return Error(absl::StrCat("bad operand type for unary ", e.name, ": '",
                                std::string(v.TypeName()), "'"));
    }
    case ExprKind::kBinary:
      return EvalBinary(e);
    case ExprKind::kCompare:
      return EvalCompare(e);
    case ExprKind::kCondExpr: {
      TPL_ASSIGN_OR_RETURN(Value c, Eval(*e.args[0]));
      if (c.Truthy()) return Eval(*e.args[1]);
      if (e.args[2]) return Eval(*e.args[2]);
      return Value();
    }
  }
  return Value();
}

absl::StatusOr<Value> Interpreter::EvalArgs(const Expr& e, size_t first, CallArgs* args) {
  for (size_t i = first; i < e.args.size(); ++i) {
    TPL_ASSIGN_OR_RETURN(Value v, Eval(*e.args[i]));
    args->positional.push_back(std::move(v));
  }
  for (const auto& [k, x] : e.kwargs) {
    TPL_ASSIGN_OR_RETURN(Value v, Eval(*x));
    args->keyword.emplace_back(k, std::move(v));
  }
  if (first == 0) return Value();
  // For calls (first == 1 in EvalCall) the callee is evaluated by the caller.
  return Value();
}

absl::StatusOr<Value> Interpreter::EvalCall(const Expr& e) {
  const Expr& callee = *e.args[0];
  CallArgs args;
  Value fn;
  if (callee.kind == ExprKind::kGetAttr) {
    TPL_ASSIGN_OR_RETURN(Value obj, Eval(*callee.args[0]));
    line_ = e.line;
    if (obj.is_undefined()) return Error("undefined value has no attribute '" + callee.name + "'");
    if (!obj.is_namespace() && HasMethod(obj, callee.name)) {
      TPL_ASSIGN_OR_RETURN(Value unused, EvalArgs(e, 1, &args));
      (void)unused;
      line_ = e.line;
      auto r = CallMethod(*this, obj, callee.name, args);
      if (!r.ok()) return Located(r.status());
      return r;
    }
    TPL_ASSIGN_OR_RETURN(fn, GetAttr(obj, callee.name));
  } else {
    TPL_ASSIGN_OR_RETURN(fn, Eval(callee));
  }
  line_ = e.line;
  if (!fn.is_callable()) {
    if (fn.is_undefined()) return Error("'" + callee.name + "' is undefined");
    return Error(absl::StrCat("'", std::string(fn.TypeName()), "' object is not callable"));
  }
  TPL_ASSIGN_OR_RETURN(Value unused, EvalArgs(e, 1, &args));
  (void)unused;
  line_ = e.line;
  auto r = fn.callable().fn(*this, args);
  if (!r.ok()) return Located(r.status());
  return r;
}

absl::StatusOr<Value> Interpreter::EvalBinary(const Expr& e) {
  TPL_ASSIGN_OR_RETURN(Value a, Eval(*e.args[0]));
  if (e.name == "and") return a.Truthy() ? Eval(*e.args[1]) : a;
  if (e.name == "or") return a.Truthy() ? a : Eval(*e.args[1]);
  TPL_ASSIGN_OR_RETURN(Value b, Eval(*e.args[1]));
  line_ = e.line;
  auto r = BinaryOp(*this, e.name, a, b);
  if (!r.ok()) return Located(r.status());
  return r;
}

absl::StatusOr<Value> Interpreter::EvalCompare(const Expr& e) {
  TPL_ASSIGN_OR_RETURN(Value left, Eval(*e.args[0]));
  for (size_t i = 0; i < e.ops.size(); ++i) {
    TPL_ASSIGN_OR_RETURN(Value right, Eval(*e.args[i + 1]));
    line_ = e.line;
    const std::string& op = e.ops[i];
    bool r;
    if (op == "==") {
      r = ValuesEqual(left, right);
    } else if (op == "!=") {
      r = !ValuesEqual(left, right);
    } else if (op == "in" || op == "notin") {
      auto c = Contains(right, left);
      if (!c.ok()) return Located(c.status());
      r = *c == (op == "in");
    } else {
      auto c = CompareValues(left, right);
      if (!c.ok()) return Located(c.status());
      r = op == "<" ? *c < 0 : op == "<=" ? *c <= 0 : op == ">" ? *c > 0 : *c >= 0;
    }
    if (!r) return Value::Bool(false);
    left = std::move(right);
  }
  return Value::Bool(true);
}

absl::StatusOr<Value> Interpreter::GetAttr(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Value::Kind::kUndefined:
      return Error(absl::StrCat("undefined value has no attribute '", name, "'"));
    case Value::Kind::kLoop:
      return LoopAttr(obj, name);
    case Value::Kind::kDict:
    case Value::Kind::kNamespace:
      if (obj.is_dict() && HasMethod(obj, name)) break;
      if (const Value* v = obj.dict().Find(name)) return *v;
      return Value();
    default:
      if (HasMethod(obj, name)) break;
      return Value();
  }
  // A bound method used as a value (e.g. passed to a call later).
  Value self = obj;
  std::string method = name;
  return Value::MakeCallable(name, [self, method](Interpreter& in, CallArgs& args) {
    return CallMethod(in, self, method, args);
  });
}

Value Interpreter::LoopAttr(const Value& loop, std::string_view name) {
  const LoopState& st = loop.loop();
  const int64_t i = st.index0, n = static_cast<int64_t>(st.items.size());
  if (name == "index0") return Value::Int(i);
  if (name == "index") return Value::Int(i + 1);
  if (name == "first") return Value::Bool(i == 0);
  if (name == "last") return Value::Bool(i == n - 1);
  if (name == "length") return Value::Int(n);
  if (name == "revindex") return Value::Int(n - i);
  if (name == "revindex0") return Value::Int(n - i - 1);
  if (name == "previtem") return i > 0 ? st.items[i - 1] : Value();
  if (name == "nextitem") return i + 1 < n ? st.items[i + 1] : Value();
  if (name == "depth") return Value::Int(1);
  if (name == "depth0") return Value::Int(0);
  if (name == "cycle") {
    std::shared_ptr<LoopState> ptr = loop.loop_ptr();
    return Value::MakeCallable("cycle", [ptr](Interpreter& in, CallArgs& args) {
      if (args.positional.empty()) {
        return absl::StatusOr<Value>(in.Error("no items for cycling given"));
      }
      return absl::StatusOr<Value>(
          args.positional[static_cast<size_t>(ptr->index0) % args.positional.size()]);
    });
  }
  return Value();
}

absl::StatusOr<Value> Interpreter::GetItem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) return Error("undefined value is not subscriptable");
  if (obj.is_dict() || obj.is_namespace()) {
    if (key.is_string()) {
      if (const Value* v = obj.dict().Find(key.str())) return *v;
      if (obj.is_dict() && HasMethod(obj, key.str())) return GetAttr(obj, key.str());
    }
    return Value();
  }
  if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t i = key.as_int();
    if (obj.is_list()) {
      int64_t n = static_cast<int64_t>(obj.list().size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value();
      return obj.list()[static_cast<size_t>(i)];
    }
    std::vector<size_t> cp = CodePoints(obj.str());
    int64_t n = static_cast<int64_t>(cp.size()) - 1;
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value();
    return Value::Str(obj.str().substr(cp[i], cp[i + 1] - cp[i]));
  }
  if (key.is_string()) return GetAttr(obj, key.str());
  return Value();
}

absl::StatusOr<Value> Interpreter::Slice(const Value& obj, const Expr& e) {
  int64_t parts[3] = {0, 0, 1};
  bool given[3] = {false, false, false};
  for (int i = 0; i < 3; ++i) {
    if (!e.args[i + 1]) continue;
    TPL_ASSIGN_OR_RETURN(Value v, Eval(*e.args[i + 1]));
    if (v.is_none()) continue;
    if (!v.is_int() && !v.is_bool()) return Error("slice indices must be integers or None");
    parts[i] = v.as_int();
    given[i] = true;
  }
  line_ = e.line;
  if (parts[2] == 0) return Error("slice step cannot be zero");
  std::vector<size_t> cp;
  int64_t n;
  if (obj.is_list()) {
    n = static_cast<int64_t>(obj.list().size());
  } else if (obj.is_string()) {
    cp = CodePoints(obj.str());
    n = static_cast<int64_t>(cp.size()) - 1;
  } else {
    return Error(absl::StrCat("'", std::string(obj.TypeName()), "' object is not subscriptable"));
  }
  const int64_t step = parts[2];
  auto clamp = [&](int64_t v, bool g, int64_t dflt) {
    if (!g) return dflt;
    if (v < 0) v += n;
    if (step > 0) return std::min(std::max<int64_t>(v, 0), n);
    return std::min(std::max<int64_t>(v, -1), n - 1);
  };
  int64_t start = clamp(parts[0], given[0], step > 0 ? 0 : n - 1);
  int64_t stop = clamp(parts[1], given[1], step > 0 ? n : -1);
  List items;
  std::string s;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (obj.is_list()) {
      items.push_back(obj.list()[static_cast<size_t>(i)]);
    } else {
      s.append(obj.str(), cp[i], cp[i + 1] - cp[i]);
    }
  }
  TPL_RETURN_IF_ERROR(Step(static_cast<int64_t>(items.size() + s.size() / 16)));
  if (obj.is_list()) return Value::MakeList(std::move(items), obj.is_tuple());
  return Value::Str(std::move(s));
}

absl::StatusOr<Value> Interpreter::Global(std::string_view name) { return GlobalFunction(name); }

}  // namespace flatstate::tmpl
