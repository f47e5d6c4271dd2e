#include "engine/template/interpreter.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "engine/template/builtins.h"
#include "engine/template/status_macros.h"

namespace flatstate::tmpl {

Interpreter::~Interpreter() {
  for (Value& ns : namespaces_) ns.mutable_namespace().entries.clear();
}

void Interpreter::SetGlobal(std::string name, Value value) {
  frames_[0].emplace_back(std::move(name), std::move(value));
}

absl::Status Interpreter::Error(std::string_view message) const {
  return absl::InvalidArgumentError(absl::StrCat("line ", line_, ": ", std::string(message)));
}

absl::Status Interpreter::Located(const absl::Status& s) const {
  if (s.message().substr(0, 5) == "line ") return s;
  return Error(std::string(s.message()));
}

absl::Status Interpreter::Step(int64_t n) {
  steps_ += n;
  if (steps_ > limits_.max_steps) {
    return absl::InvalidArgumentError(
        absl::StrCat("line ", line_, ": step limit of ", limits_.max_steps, " exceeded"));
  }
  return absl::OkStatus();
}

absl::Status Interpreter::CheckSize(size_t bytes) const {
  if (bytes > limits_.max_output_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("line ", line_, ": output limit of ",
                                                   limits_.max_output_bytes, " bytes exceeded"));
  }
  return absl::OkStatus();
}

absl::Status Interpreter::Append(std::string_view text) {
  out_->append(text);
  return CheckSize(out_->size());
}

const Value* Interpreter::Lookup(std::string_view name) const {
  for (size_t f = frames_.size(); f-- > floor_;) {
    for (auto it = frames_[f].rbegin(); it != frames_[f].rend(); ++it) {
      if (it->first == name) return &it->second;
    }
    if (f == 0) return nullptr;
  }
  for (auto it = frames_[0].rbegin(); it != frames_[0].rend(); ++it) {
    if (it->first == name) return &it->second;
  }
  return nullptr;
}

void Interpreter::Assign(std::string_view name, Value value) {
  for (auto& [k, v] : frames_.back()) {
    if (k == name) {
      v = std::move(value);
      return;
    }
  }
  frames_.back().emplace_back(std::string(name), std::move(value));
}

absl::Status Interpreter::Render(const Body& body) { return RenderBody(body); }

absl::Status Interpreter::RenderBody(const Body& body) {
  for (const auto& s : body) {
    TPL_RETURN_IF_ERROR(Exec(*s));
    if (flow_ != Flow::kNormal) return absl::OkStatus();
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> Interpreter::Capture(const Body& body) {
  std::string buf;
  std::string* saved = out_;
  out_ = &buf;
  absl::Status s = RenderBody(body);
  out_ = saved;
  if (!s.ok()) return s;
  return buf;
}

absl::StatusOr<Value> Interpreter::ApplyFilters(const Stmt& s, Value v) {
  for (const auto& f : s.filters) {
    CallArgs args;
    TPL_ASSIGN_OR_RETURN(Value unused, EvalArgs(*f, 1, &args));
    (void)unused;
    TPL_ASSIGN_OR_RETURN(v, ApplyFilter(*this, f->name, v, args));
  }
  return v;
}

absl::Status Interpreter::Exec(const Stmt& s) {
  line_ = s.line;
  TPL_RETURN_IF_ERROR(Step());
  switch (s.kind) {
    case StmtKind::kText:
      return Append(s.text);
    case StmtKind::kOutput: {
      TPL_ASSIGN_OR_RETURN(Value v, Eval(*s.expr));
      if (v.is_string()) return Append(v.str());
      v.AppendString(out_);
      return CheckSize(out_->size());
    }
    case StmtKind::kIf:
      for (size_t i = 0; i < s.conds.size(); ++i) {
        TPL_ASSIGN_OR_RETURN(Value c, Eval(*s.conds[i]));
        if (c.Truthy()) return RenderBody(s.bodies[i]);
      }
      if (s.bodies.size() > s.conds.size()) return RenderBody(s.bodies.back());
      return absl::OkStatus();
    case StmtKind::kFor:
      return ExecFor(s);
    case StmtKind::kSet:
      return ExecSet(s);
    case StmtKind::kSetBlock: {
      TPL_ASSIGN_OR_RETURN(std::string text, Capture(s.body));
      TPL_ASSIGN_OR_RETURN(Value v, ApplyFilters(s, Value::Str(std::move(text))));
      Assign(s.targets[0], std::move(v));
      return absl::OkStatus();
    }
    case StmtKind::kFilterBlock: {
      TPL_ASSIGN_OR_RETURN(std::string text, Capture(s.body));
      TPL_ASSIGN_OR_RETURN(Value v, ApplyFilters(s, Value::Str(std::move(text))));
      return Append(v.ToString());
    }
    case StmtKind::kMacro: {
      const Stmt* macro = &s;
      Assign(s.name,
             Value::MakeCallable(
                 s.name,
                 [macro](Interpreter& in, CallArgs& args) { return in.CallMacro(*macro, args); },
                 /*is_macro=*/true));
      return absl::OkStatus();
    }
    case StmtKind::kCallBlock: {
      const Stmt* block = &s;
      CallArgs args;
      TPL_ASSIGN_OR_RETURN(Value callee, Eval(*s.expr->args[0]));
      TPL_ASSIGN_OR_RETURN(Value unused, EvalArgs(*s.expr, 1, &args));
      (void)unused;
      if (!callee.is_callable()) return Error("call block target is not callable");
      args.keyword.emplace_back(
          "caller", Value::MakeCallable("caller", [block](Interpreter& in, CallArgs& a) {
            return in.CallMacro(*block, a);
          }));
      TPL_ASSIGN_OR_RETURN(Value r, callee.callable().fn(*this, args));
      return Append(r.ToString());
    }
    case StmtKind::kBreak:
      flow_ = Flow::kBreak;
      return absl::OkStatus();
    case StmtKind::kContinue:
      flow_ = Flow::kContinue;
      return absl::OkStatus();
    case StmtKind::kScope:
      return RenderBody(s.body);
  }
  return absl::OkStatus();
}

absl::Status Interpreter::BindTargets(const Stmt& s, const Value& item) {
  if (!s.tuple_target) {
    Assign(s.targets[0], item);
    return absl::OkStatus();
  }
  TPL_ASSIGN_OR_RETURN(List parts, Iterate(item));
  if (parts.size() != s.targets.size()) {
    return Error(absl::StrCat("cannot unpack ", parts.size(), " values into ", s.targets.size()));
  }
  for (size_t i = 0; i < parts.size(); ++i) Assign(s.targets[i], std::move(parts[i]));
  return absl::OkStatus();
}

absl::Status Interpreter::ExecSet(const Stmt& s) {
  TPL_ASSIGN_OR_RETURN(Value v, Eval(*s.expr));
  if (!s.attr.empty()) {
    const Value* ns = Lookup(s.targets[0]);
    if (ns == nullptr || !ns->is_namespace()) {
      return Error("can only assign attributes of a namespace object");
    }
    ns->mutable_namespace().Set(s.attr, std::move(v));
    return absl::OkStatus();
  }
  return BindTargets(s, v);
}

absl::Status Interpreter::ExecFor(const Stmt& s) {
  TPL_ASSIGN_OR_RETURN(Value seq, Eval(*s.expr));
  TPL_ASSIGN_OR_RETURN(List items, Iterate(seq));
  frames_.emplace_back();
  if (s.cond) {
    List kept;
    for (Value& item : items) {
      TPL_RETURN_IF_ERROR(Step());
      frames_.back().clear();
      TPL_RETURN_IF_ERROR(BindTargets(s, item));
      TPL_ASSIGN_OR_RETURN(Value c, Eval(*s.cond));
      if (c.Truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  const int64_t n = static_cast<int64_t>(items.size());
  auto state = std::make_shared<LoopState>();
  state->items = std::move(items);
  const Value loop = Value::MakeLoop(state);
  absl::Status status;
  for (int64_t i = 0; i < n; ++i) {
    status = Step();
    if (!status.ok()) break;
    state->index0 = i;
    frames_.back().clear();
    frames_.back().emplace_back("loop", loop);
    status = BindTargets(s, state->items[i]);
    if (status.ok()) status = RenderBody(s.body);
    if (!status.ok()) break;
    Flow f = flow_;
    flow_ = Flow::kNormal;
    if (f == Flow::kBreak) break;
  }
  frames_.pop_back();
  TPL_RETURN_IF_ERROR(status);
  if (n == 0 && !s.else_body.empty()) return RenderBody(s.else_body);
  return absl::OkStatus();
}

absl::StatusOr<Value> Interpreter::CallMacro(const Stmt& macro, CallArgs& args) {
  if (depth_ >= limits_.max_recursion_depth) {
    return Error(absl::StrCat("recursion limit of ", limits_.max_recursion_depth, " exceeded"));
  }
  if (args.positional.size() > macro.params.size()) {
    return Error(absl::StrCat("macro '", macro.name, "' takes not more than ", macro.params.size(),
                              " argument(s)"));
  }
  const size_t saved_floor = floor_;
  const Flow saved_flow = flow_;
  const int saved_line = line_;
  frames_.emplace_back();
  floor_ = frames_.size() - 1;
  ++depth_;
  absl::Status status;
  for (const auto& [k, v] : args.keyword) {
    bool known = k == "caller";
    for (const auto& p : macro.params) known = known || p.first == k;
    if (!known) status = Error(absl::StrCat("macro '", macro.name, "' has no argument '", k, "'"));
  }
  for (size_t i = 0; status.ok() && i < macro.params.size(); ++i) {
    const auto& [pname, pdefault] = macro.params[i];
    if (i < args.positional.size()) {
      Assign(pname, args.positional[i]);
    } else if (const Value* kw = args.Keyword(pname)) {
      Assign(pname, *kw);
    } else if (pdefault) {
      absl::StatusOr<Value> d = Eval(*pdefault);
      if (!d.ok()) {
        status = d.status();
      } else {
        Assign(pname, *std::move(d));
      }
    } else {
      Assign(pname, Value());
    }
  }
  if (const Value* caller = args.Keyword("caller"); caller && status.ok())
    Assign("caller", *caller);
  absl::StatusOr<std::string> text = status.ok() ? Capture(macro.body) : status;
  --depth_;
  frames_.pop_back();
  floor_ = saved_floor;
  flow_ = saved_flow;
  if (!text.ok()) return text.status();
  line_ = saved_line;
  return Value::Str(*std::move(text));
}

}  // namespace flatstate::tmpl
