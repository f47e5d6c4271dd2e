// Jinja2 filters, with transformers' tojson override (tests are in jinja_tests.cc).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>

#include "absl/strings/str_cat.h"
#include "engine/template/builtins.h"
#include "engine/template/interpreter.h"
#include "engine/template/status_macros.h"

namespace flatstate::tmpl {
namespace {

absl::Status Err(std::string_view msg) { return absl::InvalidArgumentError(std::string(msg)); }

const std::set<std::string_view>& FilterNames() {
  static const auto* s = new std::set<std::string_view>{
      "abs",    "attr",  "capitalize", "count",      "d",      "default",    "dictsort", "e",
      "escape", "first", "float",      "indent",     "int",    "items",      "join",     "last",
      "length", "list",  "lower",      "map",        "reject", "rejectattr", "replace",  "reverse",
      "round",  "safe",  "select",     "selectattr", "sort",   "string",     "sum",      "title",
      "tojson", "trim",  "unique",     "upper"};
  return *s;
}
// jinja2's make_attrgetter: dotted path, integer parts index lists.
// *failed is set when a part is looked up on an undefined value (jinja2 raises there).
Value GetPath(const Value& v, const std::string& path, bool* failed = nullptr) {
  Value cur = v;
  size_t b = 0;
  while (b <= path.size()) {
    if (cur.is_undefined() && b > 0) {
      if (failed) *failed = true;
      return cur;
    }
    size_t e = path.find('.', b);
    if (e == std::string::npos) e = path.size();
    std::string part = path.substr(b, e - b);
    if (cur.is_dict() || cur.is_namespace()) {
      const Value* x = cur.dict().Find(part);
      cur = x ? *x : Value();
    } else if (cur.is_list() && !part.empty() &&
               part.find_first_not_of("0123456789") == std::string::npos) {
      size_t i = std::strtoul(part.c_str(), nullptr, 10);
      cur = i < cur.list().size() ? cur.list()[i] : Value();
    } else {
      return Value();
    }
    b = e + 1;
  }
  return cur;
}

Value SortKey(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::Str(PyLower(v.str()));
  return v;
}

absl::StatusOr<Value> ToJson(const Value& v, const CallArgs& a) {
  JsonDumpOptions o;
  if (a.positional.size() > 4) return Err("tojson() takes at most 5 arguments");
  for (const auto& [k, unused] : a.keyword) {
    if (k != "ensure_ascii" && k != "indent" && k != "separators" && k != "sort_keys") {
      return Err(absl::StrCat("tojson() got an unexpected keyword argument '", k, "'"));
    }
  }
  TPL_ASSIGN_OR_RETURN(Value ascii, ArgOr(a, 0, "ensure_ascii", Value::Bool(false)));
  TPL_ASSIGN_OR_RETURN(Value indent, ArgOr(a, 1, "indent", Value::None()));
  TPL_ASSIGN_OR_RETURN(Value seps, ArgOr(a, 2, "separators", Value::None()));
  TPL_ASSIGN_OR_RETURN(Value sort, ArgOr(a, 3, "sort_keys", Value::Bool(false)));
  o.ensure_ascii = ascii.Truthy();
  if (indent.is_int()) {
    o.indent = static_cast<int>(std::clamp<int64_t>(indent.as_int(), 0, 64));
  } else if (indent.is_string()) {
    o.indent = 0;
    o.indent_str = indent.str();
    if (o.indent_str.empty()) o.indent = 0;
  } else if (!indent.is_none()) {
    return Err("tojson: indent must be an int, a string or None");
  }
  if (seps.is_list()) {
    if (seps.list().size() != 2 || !seps.list()[0].is_string() || !seps.list()[1].is_string()) {
      return Err("tojson: separators must be a pair of strings");
    }
    o.has_separators = true;
    o.item_sep = seps.list()[0].str();
    o.key_sep = seps.list()[1].str();
  }
  o.sort_keys = sort.Truthy();
  std::string out;
  TPL_RETURN_IF_ERROR(JsonDump(v, o, &out));
  return Value::Str(std::move(out));
}

absl::StatusOr<Value> SelectOrReject(Interpreter& in, const Value& v, const CallArgs& a,
                                     bool select, bool by_attr) {
  TPL_ASSIGN_OR_RETURN(List items, Iterate(v));
  size_t k = 0;
  std::string attr;
  if (by_attr) {
    if (a.positional.empty() || !a.positional[0].is_string()) return Err("missing attribute");
    attr = a.positional[k++].str();
  }
  std::string test;
  if (k < a.positional.size()) {
    if (!a.positional[k].is_string()) return Err("test name must be a string");
    test = a.positional[k++].str();
    if (!IsKnownTest(test)) return Err(absl::StrCat("no test named '", test, "'"));
  }
  CallArgs targs;
  targs.positional.assign(a.positional.begin() + static_cast<std::ptrdiff_t>(k),
                          a.positional.end());
  List out;
  TPL_RETURN_IF_ERROR(in.Step(static_cast<int64_t>(items.size())));
  for (Value& item : items) {
    bool failed = false;
    Value x = by_attr ? GetPath(item, attr, &failed) : item;
    if (failed) return Err(absl::StrCat("undefined value has no attribute (", attr, ")"));
    bool r = x.Truthy();
    if (!test.empty()) {
      TPL_ASSIGN_OR_RETURN(r, ApplyTest(in, test, x, targs));
    }
    if (r == select) out.push_back(std::move(item));
  }
  return Value::MakeList(std::move(out));
}

absl::StatusOr<Value> Map(Interpreter& in, const Value& v, const CallArgs& a) {
  TPL_ASSIGN_OR_RETURN(List items, Iterate(v));
  TPL_RETURN_IF_ERROR(in.Step(static_cast<int64_t>(items.size())));
  List out;
  if (const Value* attr = a.Keyword("attribute")) {
    const Value* dflt = a.Keyword("default");
    for (const Value& item : items) {
      bool failed = false;
      Value x = GetPath(item, attr->ToString(), &failed);
      if (failed) return Err("undefined value has no attribute (" + attr->ToString() + ")");
      out.push_back(x.is_undefined() && dflt ? *dflt : x);
    }
    return Value::MakeList(std::move(out));
  }
  if (a.positional.empty() || !a.positional[0].is_string()) return Err("map: missing filter name");
  std::string name = a.positional[0].str();
  if (!IsKnownFilter(name)) return Err(absl::StrCat("no filter named '", name, "'"));
  CallArgs fargs;
  fargs.positional.assign(a.positional.begin() + 1, a.positional.end());
  fargs.keyword = a.keyword;
  for (const Value& item : items) {
    TPL_ASSIGN_OR_RETURN(Value x, ApplyFilter(in, name, item, fargs));
    out.push_back(std::move(x));
  }
  return Value::MakeList(std::move(out));
}

absl::StatusOr<Value> Sort(Interpreter& in, const Value& v, const CallArgs& a, bool unique) {
  TPL_ASSIGN_OR_RETURN(List items, Iterate(v));
  TPL_RETURN_IF_ERROR(in.Step(static_cast<int64_t>(items.size() * 4)));
  size_t base = unique ? 0 : 1;
  TPL_ASSIGN_OR_RETURN(Value reverse, unique ? absl::StatusOr<Value>(Value::Bool(false))
                                             : ArgOr(a, 0, "reverse", Value::Bool(false)));
  TPL_ASSIGN_OR_RETURN(Value cs, ArgOr(a, base, "case_sensitive", Value::Bool(false)));
  TPL_ASSIGN_OR_RETURN(Value attr, ArgOr(a, base + 1, "attribute", Value::None()));
  if (reverse.is_undefined() || cs.is_undefined()) return Err("undefined value used as a flag");
  auto key = [&](const Value& x) {
    return SortKey(attr.is_string() ? GetPath(x, attr.str()) : x, cs.Truthy());
  };
  if (unique) {
    List out, seen;
    for (const Value& x : items) {
      Value k = key(x);
      bool dup = false;
      for (const Value& s : seen) dup = dup || ValuesEqual(s, k);
      if (dup) continue;
      seen.push_back(k);
      out.push_back(x);
    }
    return Value::MakeList(std::move(out));
  }
  absl::Status st;
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    auto c = CompareValues(key(x), key(y));
    if (!c.ok()) {
      st = c.status();
      return false;
    }
    return reverse.Truthy() ? *c > 0 : *c < 0;
  });
  TPL_RETURN_IF_ERROR(st);
  return Value::MakeList(std::move(items));
}

absl::StatusOr<Value> ToInt(const Value& v, const CallArgs& a) {
  TPL_ASSIGN_OR_RETURN(Value dflt, ArgOr(a, 0, "default", Value::Int(0)));
  if (v.is_int() || v.is_bool()) return Value::Int(v.as_int());
  if (v.is_float()) {
    if (!std::isfinite(v.as_double()) || std::fabs(v.as_double()) > 9e18) return dflt;
    return Value::Int(static_cast<int64_t>(v.as_double()));
  }
  if (v.is_string()) {
    std::string s = PyStrip(v.str(), nullptr, true, true);
    std::string t;
    for (char c : s) {
      if (c != '_') t.push_back(c);
    }
    if (t.empty()) return dflt;
    char* end = nullptr;
    errno = 0;
    long long i = std::strtoll(t.c_str(), &end, 10);
    if (*end == 0 && errno == 0) return Value::Int(i);
    double d = std::strtod(t.c_str(), &end);
    if (*end == 0 && std::isfinite(d) && std::fabs(d) < 9e18)
      return Value::Int(static_cast<int64_t>(d));
  }
  return dflt;
}

absl::StatusOr<Value> ToFloat(const Value& v, const CallArgs& a) {
  TPL_ASSIGN_OR_RETURN(Value dflt, ArgOr(a, 0, "default", Value::Float(0.0)));
  if (v.is_number()) return Value::Float(v.as_double());
  if (v.is_string()) {
    std::string s = PyStrip(v.str(), nullptr, true, true);
    char* end = nullptr;
    double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && *end == 0 && s.find_first_of("xXpP") == std::string::npos) {
      return Value::Float(d);
    }
  }
  return dflt;
}

absl::StatusOr<Value> Round(const Value& v, const CallArgs& a) {
  TPL_ASSIGN_OR_RETURN(Value prec, ArgOr(a, 0, "precision", Value::Int(0)));
  TPL_ASSIGN_OR_RETURN(Value method, ArgOr(a, 1, "method", Value::Str("common")));
  if (!v.is_number()) return Err("round: value must be a number");
  int p = static_cast<int>(std::clamp<int64_t>(prec.as_int(), -300, 300));
  const std::string m = method.ToString();
  if (m == "common") {
    if (!v.is_float()) return Value::Int(v.as_int());
    if (p < 0 || p > 300) return Err("round: unsupported precision");
    char buf[512];
    std::snprintf(buf, sizeof(buf), "%.*f", p, v.as_double());
    return Value::Float(std::strtod(buf, nullptr));
  }
  if (m != "ceil" && m != "floor") return Err("method must be common, ceil or floor");
  double scale = std::pow(10.0, p);
  double x = v.as_double() * scale;
  return Value::Float((m == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
}

}  // namespace

bool IsKnownFilter(std::string_view name) { return FilterNames().count(name) > 0; }

absl::StatusOr<Value> ApplyFilter(Interpreter& in, std::string_view f, const Value& v,
                                  CallArgs& a) {
  TPL_RETURN_IF_ERROR(CheckFilterArgs(f, a));
  if ((f == "int" || f == "float") && v.is_undefined()) {
    return Err("undefined value cannot be converted to a number");
  }
  if (f == "tojson") return ToJson(v, a);
  if (f == "trim")
    return Value::Str(PyStrip(
        v.ToString(), a.positional.empty() ? a.Keyword("chars") : &a.positional[0], true, true));
  if (f == "length" || f == "count") {
    TPL_ASSIGN_OR_RETURN(int64_t n, Length(v));
    return Value::Int(n);
  }
  if (f == "string") return Value::Str(v.ToString());
  if (f == "safe") return v;
  if (f == "upper") return Value::Str(PyUpper(v.ToString()));
  if (f == "lower") return Value::Str(PyLower(v.ToString()));
  if (f == "title") return Value::Str(JinjaTitle(v.ToString()));
  if (f == "capitalize") {
    std::string r = PyLower(v.ToString());
    if (!r.empty()) r = PyUpper(r.substr(0, 1)) + r.substr(1);
    return Value::Str(std::move(r));
  }
  if (f == "default" || f == "d") {
    TPL_ASSIGN_OR_RETURN(Value dflt, ArgOr(a, 0, "default_value", Value::Str("")));
    TPL_ASSIGN_OR_RETURN(Value boolean, ArgOr(a, 1, "boolean", Value::Bool(false)));
    if (v.is_undefined() || (boolean.Truthy() && !v.Truthy())) return dflt;
    return v;
  }
  if (f == "items") {
    if (v.is_undefined()) return Value::MakeList({});
    if (!v.is_dict()) return Err("items: value must be a mapping");
    return CallMethod(in, v, "items", a);
  }
  if (f == "join") {
    TPL_ASSIGN_OR_RETURN(Value sep, ArgOr(a, 0, "d", Value::Str("")));
    TPL_ASSIGN_OR_RETURN(Value attr, ArgOr(a, 1, "attribute", Value::None()));
    TPL_ASSIGN_OR_RETURN(List items, Iterate(v));
    std::string r;
    const std::string s = sep.ToString();
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) r += s;
      (attr.is_none() ? items[i] : GetPath(items[i], attr.ToString())).AppendString(&r);
      TPL_RETURN_IF_ERROR(in.CheckSize(r.size()));
    }
    return Value::Str(std::move(r));
  }
  if (f == "first" || f == "last") {
    TPL_ASSIGN_OR_RETURN(List items, Iterate(v));
    if (items.empty()) return Value();
    return f == "first" ? items.front() : items.back();
  }
  if (f == "list") {
    TPL_ASSIGN_OR_RETURN(List items, Iterate(v));
    return Value::MakeList(std::move(items));
  }
  if (f == "reverse") {
    TPL_ASSIGN_OR_RETURN(List items, Iterate(v));
    std::reverse(items.begin(), items.end());
    if (!v.is_string()) return Value::MakeList(std::move(items));
    std::string r;
    for (const Value& c : items) r += c.str();
    return Value::Str(std::move(r));
  }
  if (f == "map") return Map(in, v, a);
  if (f == "select" || f == "reject") return SelectOrReject(in, v, a, f == "select", false);
  if (f == "selectattr" || f == "rejectattr") {
    return SelectOrReject(in, v, a, f == "selectattr", true);
  }
  if (f == "sort") return Sort(in, v, a, false);
  if (f == "unique") return Sort(in, v, a, true);
  if (f == "dictsort") {
    if (!v.is_dict()) return Err("dictsort: value must be a mapping");
    TPL_ASSIGN_OR_RETURN(Value cs, ArgOr(a, 0, "case_sensitive", Value::Bool(false)));
    TPL_ASSIGN_OR_RETURN(Value by, ArgOr(a, 1, "by", Value::Str("key")));
    TPL_ASSIGN_OR_RETURN(Value rev, ArgOr(a, 2, "reverse", Value::Bool(false)));
    CallArgs none;
    TPL_ASSIGN_OR_RETURN(Value items, CallMethod(in, v, "items", none));
    List l = items.list();
    size_t idx = by.ToString() == "value" ? 1 : 0;
    absl::Status st;
    std::stable_sort(l.begin(), l.end(), [&](const Value& x, const Value& y) {
      auto c =
          CompareValues(SortKey(x.list()[idx], cs.Truthy()), SortKey(y.list()[idx], cs.Truthy()));
      if (!c.ok()) st = c.status();
      return c.ok() && (rev.Truthy() ? *c > 0 : *c < 0);
    });
    TPL_RETURN_IF_ERROR(st);
    return Value::MakeList(std::move(l));
  }
  if (f == "replace") {
    if (!v.is_string()) {
      Value s = Value::Str(v.ToString());
      return CallMethod(in, s, "replace", a);
    }
    return CallMethod(in, v, "replace", a);
  }
  if (f == "int") return ToInt(v, a);
  if (f == "float") return ToFloat(v, a);
  if (f == "round") return Round(v, a);
  if (f == "abs") {
    if (v.is_float()) return Value::Float(std::fabs(v.as_double()));
    if (v.is_int() || v.is_bool()) {
      if (v.as_int() == INT64_MIN) return Err("integer overflow");
      return Value::Int(v.as_int() < 0 ? -v.as_int() : v.as_int());
    }
    return Err(absl::StrCat("bad operand type for abs(): '", std::string(v.TypeName()), "'"));
  }
  if (f == "indent") {
    TPL_ASSIGN_OR_RETURN(Value width, ArgOr(a, 0, "width", Value::Int(4)));
    TPL_ASSIGN_OR_RETURN(Value first, ArgOr(a, 1, "first", Value::Bool(false)));
    TPL_ASSIGN_OR_RETURN(Value blank, ArgOr(a, 2, "blank", Value::Bool(false)));
    if (!width.is_string() && !width.is_int() && !width.is_bool()) {
      return Err("indent: width must be int or str");
    }
    std::string r = Indent(v.ToString(), width, first.Truthy(), blank.Truthy());
    TPL_RETURN_IF_ERROR(in.CheckSize(r.size()));
    return Value::Str(std::move(r));
  }
  if (f == "escape" || f == "e") {
    std::string r;
    for (char c : v.ToString()) {
      switch (c) {
        case '&':
          r += "&amp;";
          break;
        case '<':
          r += "&lt;";
          break;
        case '>':
          r += "&gt;";
          break;
        case '"':
          r += "&#34;";
          break;
        case '\'':
          r += "&#39;";
          break;
        default:
          r.push_back(c);
      }
    }
    return Value::Str(std::move(r));
  }
  if (f == "sum") {
    TPL_ASSIGN_OR_RETURN(Value attr, ArgOr(a, 0, "attribute", Value::None()));
    TPL_ASSIGN_OR_RETURN(Value acc, ArgOr(a, 1, "start", Value::Int(0)));
    TPL_ASSIGN_OR_RETURN(List items, Iterate(v));
    for (const Value& x : items) {
      TPL_ASSIGN_OR_RETURN(
          acc, BinaryOp(in, "+", acc, attr.is_none() ? x : GetPath(x, attr.ToString())));
    }
    return acc;
  }
  if (f == "attr") {
    TPL_ASSIGN_OR_RETURN(Value name, ArgOr(a, 0, "name", Value()));
    if (!v.is_namespace() && !v.is_dict()) return Value();
    return v.is_namespace() ? GetPath(v, name.ToString()) : Value();
  }
  return Err(absl::StrCat("no filter named '", std::string(f), "'"));
}

}  // namespace flatstate::tmpl
