// Python methods of str, dict and list values, and the global functions of the environment.
#include <ctime>
#include <set>

#include "absl/strings/str_cat.h"
#include "engine/template/builtins.h"
#include "engine/template/interpreter.h"
#include "engine/template/status_macros.h"

namespace flatstate::tmpl {
namespace {

absl::Status Err(std::string_view msg) { return absl::InvalidArgumentError(std::string(msg)); }

const std::set<std::string_view>& StrMethods() {
  static const auto* m = new std::set<std::string_view>{
      "startswith", "endswith", "split",      "rsplit",       "strip",       "lstrip",  "rstrip",
      "replace",    "upper",    "lower",      "title",        "capitalize",  "find",    "rfind",
      "count",      "join",     "format",     "isdigit",      "isalpha",     "isalnum", "isspace",
      "islower",    "isupper",  "splitlines", "removeprefix", "removesuffix"};
  return *m;
}
const std::set<std::string_view>& DictMethods() {
  static const auto* m = new std::set<std::string_view>{
      "items", "keys", "values", "get", "pop", "update", "setdefault", "clear", "popitem", "copy"};
  return *m;
}
const std::set<std::string_view>& ListMethods() {
  static const auto* m = new std::set<std::string_view>{
      "append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse", "index", "count"};
  return *m;
}

absl::StatusOr<std::string> StrArg(const CallArgs& a, size_t i, std::string_view name) {
  TPL_ASSIGN_OR_RETURN(Value v, ArgOr(a, i, name, Value()));
  if (!v.is_string()) {
    return Err(absl::StrCat(std::string(name), " must be str, not ", std::string(v.TypeName())));
  }
  return v.str();
}

absl::StatusOr<Value> Split(const std::string& s, const CallArgs& a, bool from_right) {
  TPL_ASSIGN_OR_RETURN(Value sep, ArgOr(a, 0, "sep", Value::None()));
  TPL_ASSIGN_OR_RETURN(Value maxv, ArgOr(a, 1, "maxsplit", Value::Int(-1)));
  int64_t max = maxv.is_int() ? maxv.as_int() : -1;
  List parts;
  if (sep.is_none() || sep.is_undefined()) {
    std::vector<std::pair<size_t, size_t>> words;
    size_t i = 0;
    while (i < s.size()) {
      while (i < s.size() && IsPySpace(s[i])) ++i;
      if (i >= s.size()) break;
      size_t j = i;
      while (j < s.size() && !IsPySpace(s[j])) ++j;
      words.emplace_back(i, j);
      i = j;
    }
    if (max < 0 || static_cast<size_t>(max) >= words.size()) {
      for (auto [b, e] : words) parts.push_back(Value::Str(s.substr(b, e - b)));
    } else if (!from_right) {
      for (int64_t k = 0; k < max; ++k) {
        parts.push_back(Value::Str(s.substr(words[k].first, words[k].second - words[k].first)));
      }
      size_t e = s.size();
      while (e > 0 && IsPySpace(s[e - 1]) && max == 0) --e;
      parts.push_back(Value::Str(s.substr(words[max].first, e - words[max].first)));
    } else {
      size_t n = words.size();
      size_t b = 0;
      while (b < s.size() && IsPySpace(s[b]) && max == 0) ++b;
      parts.push_back(Value::Str(s.substr(b, words[n - max - 1].second - b)));
      for (size_t k = n - max; k < n; ++k) {
        parts.push_back(Value::Str(s.substr(words[k].first, words[k].second - words[k].first)));
      }
    }
    return Value::MakeList(std::move(parts));
  }
  if (!sep.is_string()) return Err("must be str or None");
  const std::string& d = sep.str();
  if (d.empty()) return Err("empty separator");
  std::vector<std::string> out;
  if (!from_right) {
    size_t pos = 0;
    while (max != 0) {
      size_t q = s.find(d, pos);
      if (q == std::string::npos) break;
      out.push_back(s.substr(pos, q - pos));
      pos = q + d.size();
      --max;
    }
    out.push_back(s.substr(pos));
  } else {
    size_t end = s.size();
    while (max != 0 && end >= d.size()) {
      size_t q = s.rfind(d, end - d.size());
      if (q == std::string::npos) break;
      out.insert(out.begin(), s.substr(q + d.size(), end - q - d.size()));
      end = q;
      --max;
    }
    out.insert(out.begin(), s.substr(0, end));
  }
  for (auto& p : out) parts.push_back(Value::Str(std::move(p)));
  return Value::MakeList(std::move(parts));
}

absl::StatusOr<Value> Replace(Interpreter& in, const std::string& s, const CallArgs& a) {
  TPL_ASSIGN_OR_RETURN(std::string from, StrArg(a, 0, "old"));
  TPL_ASSIGN_OR_RETURN(std::string to, StrArg(a, 1, "new"));
  TPL_ASSIGN_OR_RETURN(Value cv, ArgOr(a, 2, "count", Value::Int(-1)));
  int64_t count = cv.is_int() ? cv.as_int() : -1;
  std::string r;
  if (from.empty()) {
    std::vector<size_t> cp = CodePoints(s);
    for (size_t i = 0; i + 1 <= cp.size(); ++i) {
      if (count != 0) {
        r += to;
        --count;
      }
      if (i + 1 < cp.size()) r.append(s, cp[i], cp[i + 1] - cp[i]);
      TPL_RETURN_IF_ERROR(in.CheckSize(r.size()));
    }
    return Value::Str(std::move(r));
  }
  size_t pos = 0;
  while (count != 0) {
    size_t q = s.find(from, pos);
    if (q == std::string::npos) break;
    r.append(s, pos, q - pos);
    r += to;
    TPL_RETURN_IF_ERROR(in.CheckSize(r.size()));
    pos = q + from.size();
    --count;
  }
  r.append(s, pos, std::string::npos);
  TPL_RETURN_IF_ERROR(in.CheckSize(r.size()));
  return Value::Str(std::move(r));
}

absl::StatusOr<Value> Format(const std::string& f, const CallArgs& a) {
  std::string r;
  size_t auto_index = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    char c = f[i];
    if (c == '}' && i + 1 < f.size() && f[i + 1] == '}') {
      r.push_back('}');
      ++i;
    } else if (c == '{' && i + 1 < f.size() && f[i + 1] == '{') {
      r.push_back('{');
      ++i;
    } else if (c == '{') {
      size_t e = f.find('}', i);
      if (e == std::string::npos) return Err("Single '{' encountered in format string");
      std::string field = f.substr(i + 1, e - i - 1);
      if (field.find_first_of(":!.[") != std::string::npos) {
        return Err("format specs are not supported");
      }
      const Value* v = nullptr;
      if (field.empty()) {
        if (auto_index < a.positional.size()) v = &a.positional[auto_index++];
      } else if (field.find_first_not_of("0123456789") == std::string::npos) {
        size_t k = std::stoul(field);
        if (k < a.positional.size()) v = &a.positional[k];
      } else {
        v = a.Keyword(field);
      }
      if (v == nullptr) return Err(absl::StrCat("format: no argument for {", field, "}"));
      v->AppendString(&r);
      i = e;
    } else {
      r.push_back(c);
    }
  }
  return Value::Str(std::move(r));
}

template <typename Pred>
Value AllChars(const std::string& s, Pred p) {
  if (s.empty()) return Value::Bool(false);
  for (char c : s) {
    if (!p(static_cast<unsigned char>(c))) return Value::Bool(false);
  }
  return Value::Bool(true);
}

absl::StatusOr<Value> StrMethod(Interpreter& in, const std::string& s, std::string_view m,
                                const CallArgs& a) {
  static const auto* no_args =
      new std::set<std::string_view>{"upper",   "lower",   "title",   "capitalize", "isdigit",
                                     "isalpha", "isalnum", "isspace", "islower",    "isupper"};
  if (no_args->count(m) > 0 && (!a.positional.empty() || !a.keyword.empty())) {
    return Err(absl::StrCat("str.", std::string(m), "() takes no arguments"));
  }
  if (m == "startswith" || m == "endswith") {
    TPL_ASSIGN_OR_RETURN(Value p, ArgOr(a, 0, "prefix", Value()));
    List options = p.is_list() ? p.list() : List{p};
    for (const Value& o : options) {
      if (!o.is_string())
        return Err(absl::StrCat(std::string(m), " first arg must be str or a tuple of str"));
      const std::string& x = o.str();
      bool hit = m == "startswith"
                     ? s.compare(0, x.size(), x) == 0
                     : s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
      if (hit) return Value::Bool(true);
    }
    return Value::Bool(false);
  }
  if (m == "split" || m == "rsplit") return Split(s, a, m == "rsplit");
  if (m == "strip" || m == "lstrip" || m == "rstrip") {
    const Value* chars = a.positional.empty() ? a.Keyword("chars") : &a.positional[0];
    return Value::Str(PyStrip(s, chars, m != "rstrip", m != "lstrip"));
  }
  if (m == "replace") return Replace(in, s, a);
  if (m == "upper") return Value::Str(PyUpper(s));
  if (m == "lower") return Value::Str(PyLower(s));
  if (m == "title") return Value::Str(PyTitle(s));
  if (m == "capitalize") {
    std::string r = PyLower(s);
    if (!r.empty() && r[0] >= 'a' && r[0] <= 'z') r[0] = static_cast<char>(r[0] - 'a' + 'A');
    return Value::Str(std::move(r));
  }
  if (m == "find" || m == "rfind" || m == "count") {
    TPL_ASSIGN_OR_RETURN(std::string sub, StrArg(a, 0, "sub"));
    if (m == "count") {
      if (sub.empty()) return Value::Int(static_cast<int64_t>(CodePoints(s).size()));
      int64_t n = 0;
      for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
      return Value::Int(n);
    }
    size_t p = m == "find" ? s.find(sub) : s.rfind(sub);
    if (p == std::string::npos) return Value::Int(-1);
    std::vector<size_t> cp = CodePoints(s.substr(0, p));
    return Value::Int(static_cast<int64_t>(cp.size()) - 1);
  }
  if (m == "join") {
    TPL_ASSIGN_OR_RETURN(Value seq, ArgOr(a, 0, "iterable", Value()));
    TPL_ASSIGN_OR_RETURN(List items, Iterate(seq));
    std::string r;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_string()) return Err("sequence item: expected str instance");
      if (i) r += s;
      r += items[i].str();
      TPL_RETURN_IF_ERROR(in.CheckSize(r.size()));
    }
    return Value::Str(std::move(r));
  }
  if (m == "format") return Format(s, a);
  if (m == "isdigit") return AllChars(s, [](unsigned char c) { return c >= '0' && c <= '9'; });
  if (m == "isalpha") return AllChars(s, [](unsigned char c) { return std::isalpha(c) != 0; });
  if (m == "isalnum") return AllChars(s, [](unsigned char c) { return std::isalnum(c) != 0; });
  if (m == "isspace")
    return AllChars(s, [](unsigned char c) { return IsPySpace(static_cast<char>(c)); });
  if (m == "islower" || m == "isupper") {
    bool cased = false;
    for (char c : s) {
      bool lo = c >= 'a' && c <= 'z', up = c >= 'A' && c <= 'Z';
      if ((m == "islower" && up) || (m == "isupper" && lo)) return Value::Bool(false);
      cased = cased || lo || up;
    }
    return Value::Bool(cased);
  }
  if (m == "removeprefix" || m == "removesuffix") {
    TPL_ASSIGN_OR_RETURN(std::string x, StrArg(a, 0, "prefix"));
    if (m == "removeprefix" && s.compare(0, x.size(), x) == 0)
      return Value::Str(s.substr(x.size()));
    if (m == "removesuffix" && s.size() >= x.size() &&
        s.compare(s.size() - x.size(), x.size(), x) == 0) {
      return Value::Str(s.substr(0, s.size() - x.size()));
    }
    return Value::Str(s);
  }
  if (m == "splitlines") {
    List lines;
    size_t b = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      char c = s[i];
      if (c == '\n' || c == '\r' || c == '\v' || c == '\f' || (c >= '\x1c' && c <= '\x1e')) {
        lines.push_back(Value::Str(s.substr(b, i - b)));
        if (c == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
        b = i + 1;
      }
    }
    if (b < s.size()) lines.push_back(Value::Str(s.substr(b)));
    return Value::MakeList(std::move(lines));
  }
  return Err(absl::StrCat("'str' object has no attribute '", std::string(m), "'"));
}

}  // namespace

bool HasMethod(const Value& obj, std::string_view name) {
  if (obj.is_string()) return StrMethods().count(name) > 0;
  if (obj.is_dict()) return DictMethods().count(name) > 0;
  if (obj.is_list()) return ListMethods().count(name) > 0;
  return false;
}

absl::StatusOr<Value> CallMethod(Interpreter& in, const Value& obj, std::string_view name,
                                 CallArgs& args) {
  if (obj.is_string()) return StrMethod(in, obj.str(), name, args);
  if (obj.is_dict()) {
    const Dict& d = obj.dict();
    if ((name == "items" || name == "keys" || name == "values" || name == "copy") &&
        (!args.positional.empty() || !args.keyword.empty())) {
      return Err(absl::StrCat("dict.", std::string(name), "() takes no arguments"));
    }
    if (name == "items") {
      List items;
      items.reserve(d.entries.size());
      for (const auto& [k, v] : d.entries)
        items.push_back(Value::MakeList({Value::Str(k), v}, true));
      return Value::MakeList(std::move(items));
    }
    if (name == "keys" || name == "values") {
      List items;
      for (const auto& [k, v] : d.entries) items.push_back(name == "keys" ? Value::Str(k) : v);
      return Value::MakeList(std::move(items));
    }
    if (name == "get") {
      TPL_ASSIGN_OR_RETURN(Value key, ArgOr(args, 0, "key", Value()));
      TPL_ASSIGN_OR_RETURN(Value dflt, ArgOr(args, 1, "default", Value::None()));
      if (key.is_string()) {
        if (const Value* v = d.Find(key.str())) return *v;
      }
      return dflt;
    }
    if (name == "copy") return obj;
  }
  if (obj.is_list() && (name == "index" || name == "count")) {
    TPL_ASSIGN_OR_RETURN(Value x, ArgOr(args, 0, "value", Value()));
    int64_t n = 0;
    for (size_t i = 0; i < obj.list().size(); ++i) {
      if (!ValuesEqual(obj.list()[i], x)) continue;
      if (name == "index") return Value::Int(static_cast<int64_t>(i));
      ++n;
    }
    if (name == "index") return Err("value is not in list");
    return Value::Int(n);
  }
  return Err(absl::StrCat("access to attribute '", std::string(name), "' of '",
                          std::string(obj.TypeName()), "' object is unsafe"));
}

Value GlobalFunction(std::string_view name) {
  if (name == "range") {
    return Value::MakeCallable("range", [](Interpreter& in, CallArgs& a) -> absl::StatusOr<Value> {
      int64_t p[3] = {0, 0, 1};
      size_t n = a.positional.size();
      if (n < 1 || n > 3) return Err("range expected 1 to 3 arguments");
      for (size_t i = 0; i < n; ++i) {
        if (!a.positional[i].is_int() && !a.positional[i].is_bool()) {
          return Err("range arguments must be integers");
        }
      }
      if (n == 1) {
        p[1] = a.positional[0].as_int();
      } else {
        for (size_t i = 0; i < n; ++i) p[i] = a.positional[i].as_int();
      }
      if (p[2] == 0) return Err("range() arg 3 must not be zero");
      __int128 count = p[2] > 0 ? (static_cast<__int128>(p[1]) - p[0] + p[2] - 1) / p[2]
                                : (static_cast<__int128>(p[0]) - p[1] - p[2] - 1) / -p[2];
      if (count < 0) count = 0;
      TPL_RETURN_IF_ERROR(
          in.Step(count > (1 << 30) ? (int64_t{1} << 62) : static_cast<int64_t>(count)));
      List items;
      items.reserve(static_cast<size_t>(count));
      for (int64_t i = 0, v = p[0]; i < count; ++i, v += p[2]) items.push_back(Value::Int(v));
      return Value::MakeList(std::move(items));
    });
  }
  if (name == "namespace" || name == "dict") {
    bool ns = name == "namespace";
    return Value::MakeCallable(
        std::string(name), [ns](Interpreter& in, CallArgs& a) -> absl::StatusOr<Value> {
          Dict d;
          for (const Value& p : a.positional) {
            if (!p.is_dict()) return Err("namespace/dict positional argument must be a dict");
            for (const auto& [k, v] : p.dict().entries) d.Set(k, v);
          }
          for (const auto& [k, v] : a.keyword) d.Set(k, v);
          if (!ns) return Value::MakeDict(std::move(d));
          Value v = Value::MakeNamespace(std::move(d));
          in.TrackNamespace(v);
          return v;
        });
  }
  if (name == "raise_exception") {
    return Value::MakeCallable(
        "raise_exception", [](Interpreter&, CallArgs& a) -> absl::StatusOr<Value> {
          std::string msg = a.positional.empty() ? "" : a.positional[0].ToString();
          return Err(absl::StrCat("raise_exception: ", msg));
        });
  }
  if (name == "strftime_now") {
    return Value::MakeCallable(
        "strftime_now", [](Interpreter&, CallArgs& a) -> absl::StatusOr<Value> {
          if (a.positional.empty() || !a.positional[0].is_string())
            return Err("strftime_now(format)");
          std::time_t t = std::time(nullptr);
          std::tm tm{};
          localtime_r(&t, &tm);
          char buf[512];
          size_t n = std::strftime(buf, sizeof(buf), a.positional[0].str().c_str(), &tm);
          return Value::Str(std::string(buf, n));
        });
  }
  return Value();
}

}  // namespace flatstate::tmpl
