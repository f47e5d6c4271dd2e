#include "engine/template/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace flatstate::tmpl {

const Value* Dict::Find(std::string_view key) const {
  for (const auto& [k, v] : entries) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Dict::Set(std::string key, Value value) {
  for (auto& [k, v] : entries) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  entries.emplace_back(std::move(key), std::move(value));
}

const Value* CallArgs::Keyword(std::string_view name) const {
  for (const auto& [k, v] : keyword) {
    if (k == name) return &v;
  }
  return nullptr;
}

Value Value::MakeList(List items, bool tuple) {
  Value v(Kind::kList);
  v.tuple_ = tuple;
  v.obj_ = std::make_shared<List>(std::move(items));
  return v;
}

Value Value::MakeDict(Dict dict) {
  Value v(Kind::kDict);
  v.obj_ = std::make_shared<Dict>(std::move(dict));
  return v;
}

Value Value::MakeNamespace(Dict dict) {
  Value v(Kind::kNamespace);
  v.obj_ = std::make_shared<Dict>(std::move(dict));
  return v;
}

Value Value::MakeCallable(std::string name,
                          std::function<absl::StatusOr<Value>(Interpreter&, CallArgs&)> fn,
                          bool is_macro) {
  Value v(Kind::kCallable);
  v.obj_ = std::make_shared<Callable>(Callable{std::move(name), std::move(fn), is_macro});
  return v;
}

Value Value::MakeLoop(std::shared_ptr<LoopState> state) {
  Value v(Kind::kLoop);
  v.obj_ = std::move(state);
  return v;
}

Value Value::FromJson(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return None();
    case nlohmann::ordered_json::value_t::boolean:
      return Bool(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Int(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned:
      return Int(static_cast<int64_t>(j.get<uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float:
      return Float(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Str(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(FromJson(e));
      return MakeList(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict d;
      d.entries.reserve(j.size());
      for (const auto& [k, e] : j.items()) d.entries.emplace_back(k, FromJson(e));
      return MakeDict(std::move(d));
    }
    default:
      return Value();
  }
}

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
    case Kind::kInt:
      return i_ != 0;
    case Kind::kFloat:
      return f_ != 0;
    case Kind::kString:
      return !s_.empty();
    case Kind::kList:
      return !list().empty();
    case Kind::kDict:
      return !dict().entries.empty();
    default:
      return true;
  }
}

std::string_view Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return tuple_ ? "tuple" : "list";
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kCallable:
      return "function";
    case Kind::kLoop:
      return "LoopContext";
  }
  return "object";
}

void AppendPythonFloat(double d, std::string* out) {
  if (std::isnan(d)) {
    out->append("nan");
    return;
  }
  if (std::isinf(d)) {
    out->append(d < 0 ? "-inf" : "inf");
    return;
  }
  // Shortest round-trip digits in scientific form, then Python's repr layout: fixed notation for
  // exponents in [-4, 16), scientific (at least two exponent digits) otherwise.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string_view s(buf, res.ptr - buf);
  bool neg = false;
  if (!s.empty() && s[0] == '-') {
    neg = true;
    s.remove_prefix(1);
  }
  size_t e = s.find('e');
  std::string digits;
  for (char c : s.substr(0, e)) {
    if (c != '.') digits.push_back(c);
  }
  int exp = 0;
  std::from_chars(s.data() + e + 1 + (s[e + 1] == '+'), s.data() + s.size(), exp);
  if (neg) out->push_back('-');
  int n = static_cast<int>(digits.size());
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out->append("0.");
      out->append(static_cast<size_t>(-exp - 1), '0');
      out->append(digits);
    } else if (exp + 1 >= n) {
      out->append(digits);
      out->append(static_cast<size_t>(exp + 1 - n), '0');
      out->append(".0");
    } else {
      out->append(digits, 0, exp + 1);
      out->push_back('.');
      out->append(digits, exp + 1, std::string::npos);
    }
    return;
  }
  out->push_back(digits[0]);
  if (n > 1) {
    out->push_back('.');
    out->append(digits, 1, std::string::npos);
  }
  char ebuf[16];
  std::snprintf(ebuf, sizeof(ebuf), "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
  out->append(ebuf);
}

void Value::AppendString(std::string* out) const {
  switch (kind_) {
    case Kind::kUndefined:
      return;
    case Kind::kString:
      out->append(s_);
      return;
    default:
      AppendRepr(out);
  }
}

std::string Value::ToString() const {
  if (kind_ == Kind::kString) return s_;
  std::string out;
  AppendString(&out);
  return out;
}

namespace {

void AppendStrRepr(std::string_view s, std::string* out) {
  char quote = '\'';
  if (s.find('\'') != std::string_view::npos && s.find('"') == std::string_view::npos) quote = '"';
  out->push_back(quote);
  for (unsigned char c : s) {
    if (c == static_cast<unsigned char>(quote) || c == '\\') {
      out->push_back('\\');
      out->push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out->append("\\n");
    } else if (c == '\r') {
      out->append("\\r");
    } else if (c == '\t') {
      out->append("\\t");
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out->append(buf);
    } else {
      out->push_back(static_cast<char>(c));
    }
  }
  out->push_back(quote);
}

}  // namespace

void Value::AppendRepr(std::string* out) const {
  switch (kind_) {
    case Kind::kUndefined:
      out->append("Undefined");
      return;
    case Kind::kNone:
      out->append("None");
      return;
    case Kind::kBool:
      out->append(i_ ? "True" : "False");
      return;
    case Kind::kInt:
      out->append(std::to_string(i_));
      return;
    case Kind::kFloat:
      AppendPythonFloat(f_, out);
      return;
    case Kind::kString:
      AppendStrRepr(s_, out);
      return;
    case Kind::kList: {
      out->push_back(tuple_ ? '(' : '[');
      for (size_t i = 0; i < list().size(); ++i) {
        if (i) out->append(", ");
        list()[i].AppendRepr(out);
      }
      if (tuple_ && list().size() == 1) out->push_back(',');
      out->push_back(tuple_ ? ')' : ']');
      return;
    }
    case Kind::kDict: {
      out->push_back('{');
      bool first = true;
      for (const auto& [k, v] : dict().entries) {
        if (!first) out->append(", ");
        first = false;
        AppendStrRepr(k, out);
        out->append(": ");
        v.AppendRepr(out);
      }
      out->push_back('}');
      return;
    }
    case Kind::kNamespace:
      out->append("<Namespace>");
      return;
    case Kind::kLoop:
      absl::StrAppend(out, "<LoopContext ", loop().index0 + 1, "/", loop().items.size(), ">");
      return;
    case Kind::kCallable:
      if (callable().is_macro) {
        absl::StrAppend(out, "<Macro '", callable().name, "'>");
      } else {
        absl::StrAppend(out, "<function ", callable().name, ">");
      }
      return;
  }
}

bool ValuesEqual(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.str() == b.str();
    case Value::Kind::kList: {
      if (a.is_tuple() != b.is_tuple() || a.list().size() != b.list().size()) return false;
      for (size_t i = 0; i < a.list().size(); ++i) {
        if (!ValuesEqual(a.list()[i], b.list()[i])) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      if (a.dict().entries.size() != b.dict().entries.size()) return false;
      for (const auto& [k, v] : a.dict().entries) {
        const Value* o = b.dict().Find(k);
        if (o == nullptr || !ValuesEqual(v, *o)) return false;
      }
      return true;
    }
    default:
      return &a.dict() == &b.dict();
  }
}

}  // namespace flatstate::tmpl
