// Python operators and string helpers shared by the interpreter, filters and methods.
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "engine/template/builtins.h"
#include "engine/template/interpreter.h"
#include "engine/template/status_macros.h"

namespace flatstate::tmpl {
namespace {

absl::Status TypeError(std::string_view op, const Value& a, const Value& b) {
  if (a.is_undefined() || b.is_undefined()) {
    return absl::InvalidArgumentError("undefined value used in an expression");
  }
  return absl::InvalidArgumentError(absl::StrCat("unsupported operand type(s) for ",
                                                 std::string(op), ": '", std::string(a.TypeName()),
                                                 "' and '", std::string(b.TypeName()), "'"));
}

bool IsIntLike(const Value& v) { return v.is_int() || v.is_bool(); }

absl::StatusOr<Value> Repeat(Interpreter& in, const Value& seq, int64_t n) {
  if (n <= 0) return seq.is_string() ? Value::Str("") : Value::MakeList({}, seq.is_tuple());
  if (seq.is_string()) {
    if (seq.str().size() * static_cast<unsigned __int128>(n) > (1u << 30)) {
      return in.CheckSize(std::numeric_limits<size_t>::max());
    }
    TPL_RETURN_IF_ERROR(in.CheckSize(seq.str().size() * static_cast<size_t>(n)));
    std::string s;
    for (int64_t i = 0; i < n; ++i) s += seq.str();
    return Value::Str(std::move(s));
  }
  TPL_RETURN_IF_ERROR(in.Step(static_cast<int64_t>(seq.list().size()) * n > (1 << 30)
                                  ? std::numeric_limits<int64_t>::max() / 2
                                  : static_cast<int64_t>(seq.list().size()) * n));
  List items;
  for (int64_t i = 0; i < n; ++i) items.insert(items.end(), seq.list().begin(), seq.list().end());
  return Value::MakeList(std::move(items), seq.is_tuple());
}

}  // namespace

absl::StatusOr<Value> BinaryOp(Interpreter& in, std::string_view op, const Value& a,
                               const Value& b) {
  if (op == "~") {
    std::string s = a.ToString();
    b.AppendString(&s);
    TPL_RETURN_IF_ERROR(in.CheckSize(s.size()));
    return Value::Str(std::move(s));
  }
  if (a.is_number() && b.is_number()) {
    const bool f = a.is_float() || b.is_float();
    const double x = a.as_double(), y = b.as_double();
    const int64_t i = a.as_int(), j = b.as_int();
    int64_t r;
    switch (op[0]) {
      case '+':
        if (f) return Value::Float(x + y);
        if (__builtin_add_overflow(i, j, &r)) return absl::InvalidArgumentError("integer overflow");
        return Value::Int(r);
      case '-':
        if (f) return Value::Float(x - y);
        if (__builtin_sub_overflow(i, j, &r)) return absl::InvalidArgumentError("integer overflow");
        return Value::Int(r);
      case '*':
        if (op.size() == 2) {  // **
          if (!f && j >= 0) {
            int64_t acc = 1;
            for (int64_t k = 0; k < j; ++k) {
              if (__builtin_mul_overflow(acc, i, &acc)) {
                return absl::InvalidArgumentError("integer overflow");
              }
              if (acc == 0 || acc == 1) break;
            }
            return Value::Int(acc);
          }
          if (x == 0 && y < 0) return absl::InvalidArgumentError("division by zero");
          return Value::Float(std::pow(x, y));
        }
        if (f) return Value::Float(x * y);
        if (__builtin_mul_overflow(i, j, &r)) return absl::InvalidArgumentError("integer overflow");
        return Value::Int(r);
      case '/':
        if (y == 0) return absl::InvalidArgumentError("division by zero");
        if (op.size() == 2) {  // floor division
          if (f) return Value::Float(std::floor(x / y));
          if (i == std::numeric_limits<int64_t>::min() && j == -1) {
            return absl::InvalidArgumentError("integer overflow");
          }
          int64_t q = i / j;
          if ((i % j != 0) && ((i < 0) != (j < 0))) --q;
          return Value::Int(q);
        }
        return Value::Float(x / y);
      case '%':
        if (y == 0) return absl::InvalidArgumentError("division by zero");
        if (f) {
          double m = std::fmod(x, y);
          if (m != 0 && ((m < 0) != (y < 0))) m += y;
          return Value::Float(m);
        }
        if (j == -1) return Value::Int(0);
        r = i % j;
        if (r != 0 && ((r < 0) != (j < 0))) r += j;
        return Value::Int(r);
    }
  }
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      TPL_RETURN_IF_ERROR(in.CheckSize(a.str().size() + b.str().size()));
      return Value::Str(a.str() + b.str());
    }
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
      TPL_RETURN_IF_ERROR(in.Step(static_cast<int64_t>(a.list().size() + b.list().size())));
      List items = a.list();
      items.insert(items.end(), b.list().begin(), b.list().end());
      return Value::MakeList(std::move(items), a.is_tuple());
    }
  }
  if (op == "*") {
    if ((a.is_string() || a.is_list()) && IsIntLike(b)) return Repeat(in, a, b.as_int());
    if ((b.is_string() || b.is_list()) && IsIntLike(a)) return Repeat(in, b, a.as_int());
  }
  return TypeError(op, a, b);
}

absl::StatusOr<int> CompareValues(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (!a.is_float() && !b.is_float()) {
      return a.as_int() < b.as_int() ? -1 : (a.as_int() > b.as_int() ? 1 : 0);
    }
    double x = a.as_double(), y = b.as_double();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    int c = a.str().compare(b.str());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list()) {
    size_t n = std::min(a.list().size(), b.list().size());
    for (size_t i = 0; i < n; ++i) {
      if (ValuesEqual(a.list()[i], b.list()[i])) continue;
      return CompareValues(a.list()[i], b.list()[i]);
    }
    return a.list().size() < b.list().size() ? -1 : (a.list().size() > b.list().size() ? 1 : 0);
  }
  return absl::InvalidArgumentError(absl::StrCat("'<' not supported between instances of '",
                                                 std::string(a.TypeName()), "' and '",
                                                 std::string(b.TypeName()), "'"));
}

absl::StatusOr<bool> Contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kString:
      if (!item.is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "'in <string>' requires string as left operand, not ", std::string(item.TypeName())));
      }
      return container.str().find(item.str()) != std::string::npos;
    case Value::Kind::kList:
      for (const Value& v : container.list()) {
        if (ValuesEqual(v, item)) return true;
      }
      return false;
    case Value::Kind::kDict:
      return item.is_string() && container.dict().Find(item.str()) != nullptr;
    case Value::Kind::kUndefined:
      return false;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "argument of type '", std::string(container.TypeName()), "' is not iterable"));
  }
}

std::vector<size_t> CodePoints(std::string_view s) {
  std::vector<size_t> cp;
  cp.reserve(s.size() + 1);
  for (size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) cp.push_back(i);
  }
  cp.push_back(s.size());
  if (cp.front() != 0) cp.insert(cp.begin(), 0);
  return cp;
}

absl::StatusOr<List> Iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kList:
      return v.list();
    case Value::Kind::kDict: {
      List keys;
      keys.reserve(v.dict().entries.size());
      for (const auto& [k, unused] : v.dict().entries) keys.push_back(Value::Str(k));
      return keys;
    }
    case Value::Kind::kString: {
      std::vector<size_t> cp = CodePoints(v.str());
      List chars;
      chars.reserve(cp.size());
      for (size_t i = 0; i + 1 < cp.size(); ++i) {
        chars.push_back(Value::Str(v.str().substr(cp[i], cp[i + 1] - cp[i])));
      }
      return chars;
    }
    case Value::Kind::kUndefined:
      return List();
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("'", std::string(v.TypeName()), "' object is not iterable"));
  }
}

absl::StatusOr<int64_t> Length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kString:
      return static_cast<int64_t>(CodePoints(v.str()).size()) - 1;
    case Value::Kind::kList:
      return static_cast<int64_t>(v.list().size());
    case Value::Kind::kDict:
      return static_cast<int64_t>(v.dict().entries.size());
    case Value::Kind::kUndefined:
      return 0;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("object of type '", std::string(v.TypeName()), "' has no len()"));
  }
}

bool IsPySpace(char c) {
  return c == ' ' || (c >= '\t' && c <= '\r') || (c >= '\x1c' && c <= '\x1f');
}

std::string PyStrip(std::string_view s, const Value* chars, bool left, bool right) {
  size_t b = 0, e = s.size();
  if (chars == nullptr || !chars->is_string()) {
    while (left && b < e && IsPySpace(s[b])) ++b;
    while (right && e > b && IsPySpace(s[e - 1])) --e;
    return std::string(s.substr(b, e - b));
  }
  const std::string& set = chars->str();
  std::vector<size_t> cp = CodePoints(s);
  size_t lo = 0, hi = cp.size() - 1;
  auto in_set = [&](size_t k) {
    return set.find(s.substr(cp[k], cp[k + 1] - cp[k])) != std::string::npos;
  };
  while (left && lo < hi && in_set(lo)) ++lo;
  while (right && hi > lo && in_set(hi - 1)) --hi;
  return std::string(s.substr(cp[lo], cp[hi] - cp[lo]));
}

std::string PyLower(std::string_view s) {
  std::string r(s);
  for (char& c : r) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return r;
}

std::string PyUpper(std::string_view s) {
  std::string r(s);
  for (char& c : r) {
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  }
  return r;
}

std::string PyTitle(std::string_view s) {
  std::string r(s);
  bool prev_cased = false;
  for (char& c : r) {
    bool lower = c >= 'a' && c <= 'z', upper = c >= 'A' && c <= 'Z';
    if (lower && !prev_cased) c = static_cast<char>(c - 'a' + 'A');
    if (upper && prev_cased) c = static_cast<char>(c - 'A' + 'a');
    prev_cased = lower || upper;
  }
  return r;
}

std::string Indent(const std::string& in, const Value& width, bool first, bool blank) {
  std::string ind =
      width.is_string()
          ? width.str()
          : std::string(static_cast<size_t>(std::clamp<int64_t>(width.as_int(), 0, 256)), ' ');
  std::string s = in + "\n";
  std::vector<std::string> lines;
  size_t b = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '\n' || c == '\r' || c == '\v' || c == '\f' || (c >= '\x1c' && c <= '\x1e')) {
      lines.push_back(s.substr(b, i - b));
      if (c == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
      b = i + 1;
    }
  }
  if (b < s.size()) lines.push_back(s.substr(b));
  std::string rv;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i) rv += "\n";
    if (i && (blank || !lines[i].empty())) rv += ind;
    rv += lines[i];
  }
  if (first) rv = ind + rv;
  return rv;
}

std::string JinjaTitle(const std::string& s) {
  std::string r;
  bool word_start = true;
  for (char c : s) {
    bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || IsPySpace(c);
    if (sep) {
      r.push_back(c);
      word_start = true;
    } else {
      r += word_start ? PyUpper(std::string(1, c)) : PyLower(std::string(1, c));
      word_start = false;
    }
  }
  return r;
}

absl::StatusOr<Value> ArgOr(const CallArgs& args, size_t pos, std::string_view name,
                            Value fallback) {
  if (pos < args.positional.size()) {
    if (args.Keyword(name) != nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("got multiple values for argument '", std::string(name), "'"));
    }
    return args.positional[pos];
  }
  if (const Value* v = args.Keyword(name)) return *v;
  return fallback;
}

}  // namespace flatstate::tmpl
