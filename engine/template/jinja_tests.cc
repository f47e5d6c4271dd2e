// Jinja2 tests (`x is defined`, `x is divisibleby 3`, ...).
#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"
#include "engine/template/builtins.h"
#include "engine/template/status_macros.h"

namespace flatstate::tmpl {
namespace {

absl::Status Err(std::string_view msg) { return absl::InvalidArgumentError(std::string(msg)); }

const std::set<std::string_view>& TestNames() {
  static const auto* s = new std::set<std::string_view>{
      "boolean",     "callable", "defined", "divisibleby", "eq",    "equalto",   "==",
      "escaped",     "even",     "false",   "filter",      "float", "ge",        "gt",
      "greaterthan", "in",       "integer", "iterable",    "le",    "lower",     "lt",
      "lessthan",    "mapping",  "ne",      "!=",          "none",  "number",    "odd",
      "sameas",      "sequence", "string",  "test",        "true",  "undefined", "upper",
      ">",           ">=",       "<",       "<="};
  return *s;
}

}  // namespace

bool IsKnownTest(std::string_view name) { return TestNames().count(name) > 0; }

absl::StatusOr<bool> ApplyTest(Interpreter& in, std::string_view t, const Value& v, CallArgs& a) {
  (void)in;
  const Value arg = a.positional.empty() ? Value() : a.positional[0];
  static const auto* no_arg = new std::set<std::string_view>{
      "boolean",  "callable", "defined", "escaped",   "even", "false",  "float",
      "integer",  "iterable", "lower",   "mapping",   "none", "number", "odd",
      "sequence", "string",   "true",    "undefined", "upper"};
  const size_t nargs = a.positional.size() + a.keyword.size();
  if (no_arg->count(t) > 0 ? nargs != 0 : nargs != 1) {
    return Err(absl::StrCat("test '", std::string(t), "' got the wrong number of arguments"));
  }
  if (t == "defined") return !v.is_undefined();
  if (t == "undefined") return v.is_undefined();
  if (t == "none") return v.is_none();
  if (t == "boolean") return v.is_bool();
  if (t == "true") return v.is_bool() && v.as_bool();
  if (t == "false") return v.is_bool() && !v.as_bool();
  if (t == "integer") return v.is_int();
  if (t == "float") return v.is_float();
  if (t == "number") return v.is_number();
  if (t == "string") return v.is_string();
  if (t == "mapping") return v.is_dict();
  if (t == "iterable") return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();
  if (t == "sequence") return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();
  if (t == "callable") return v.is_callable();
  if (t == "escaped") return false;
  if (t == "sameas") {
    if (v.is_none() || v.is_bool() || v.is_undefined() || v.is_int()) {
      return v.kind() == arg.kind() && ValuesEqual(v, arg);
    }
    return false;
  }
  if (t == "eq" || t == "equalto" || t == "==") return ValuesEqual(v, arg);
  if (t == "ne" || t == "!=") return !ValuesEqual(v, arg);
  if (t == "in") return Contains(arg, v);
  if (t == "lower" || t == "upper") {
    std::string s = v.ToString();
    return t == "lower" ? PyLower(s) == s : PyUpper(s) == s;
  }
  if (t == "filter") return arg.is_string() && IsKnownFilter(arg.str());
  if (t == "test") return arg.is_string() && IsKnownTest(arg.str());
  if (t == "odd" || t == "even" || t == "divisibleby") {
    if (!v.is_number() || (t == "divisibleby" && !arg.is_number())) return Err("not a number");
    if (v.is_float() || arg.is_float()) {
      double m = std::fmod(v.as_double(), t == "divisibleby" ? arg.as_double() : 2.0);
      if (t == "divisibleby") return m == 0;
      return (m != 0) == (t == "odd");
    }
    int64_t d = t == "divisibleby" ? arg.as_int() : 2;
    if (d == 0) return Err("integer division or modulo by zero");
    int64_t m = d == -1 ? 0 : v.as_int() % d;
    if (t == "divisibleby") return m == 0;
    return (m != 0) == (t == "odd");
  }
  TPL_ASSIGN_OR_RETURN(int c, CompareValues(v, arg));
  if (t == "lt" || t == "<" || t == "lessthan") return c < 0;
  if (t == "le" || t == "<=") return c <= 0;
  if (t == "gt" || t == ">" || t == "greaterthan") return c > 0;
  if (t == "ge" || t == ">=") return c >= 0;
  return Err(absl::StrCat("no test named '", std::string(t), "'"));
}

}  // namespace flatstate::tmpl
