// JsonDump: Python's json.dumps as transformers' tojson filter calls it.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/template/value.h"

namespace flatstate::tmpl {

namespace {

void AppendEscaped(uint32_t cp, std::string* out) {
  char buf[16];
  if (cp >= 0x10000) {
    cp -= 0x10000;
    std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
  } else {
    std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
  }
  out->append(buf);
}

// Decodes the UTF-8 sequence at s[*i] (advancing *i past it); a stray byte decodes as itself.
uint32_t NextCodePoint(std::string_view s, size_t* i) {
  unsigned char c = static_cast<unsigned char>(s[*i]);
  int len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
  if (*i + static_cast<size_t>(len) > s.size()) len = 1;
  uint32_t cp = len == 1 ? c : c & (0x3F >> (len - 1));
  for (int k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[*i + k]) & 0x3F);
  *i += static_cast<size_t>(len);
  return cp;
}

void AppendJsonString(std::string_view s, bool ascii, std::string* out) {
  out->push_back('"');
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (ascii && c >= 0x7F) {
      AppendEscaped(NextCodePoint(s, &i), out);
      continue;
    }
    ++i;
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      case '\b':
        out->append("\\b");
        break;
      case '\f':
        out->append("\\f");
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out->append(buf);
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
  }
  out->push_back('"');
}

absl::Status Dump(const Value& v, const JsonDumpOptions& o, int depth, std::string* out) {
  if (depth > 512) return absl::InvalidArgumentError("tojson: nesting too deep");
  const bool pretty = o.indent >= 0 || !o.indent_str.empty();
  const std::string item_sep = o.has_separators ? o.item_sep : (pretty ? "," : ", ");
  const std::string key_sep = o.has_separators ? o.key_sep : ": ";
  auto newline = [&](int level) {
    out->push_back('\n');
    for (int i = 0; i < level; ++i) {
      if (!o.indent_str.empty()) {
        out->append(o.indent_str);
      } else {
        out->append(static_cast<size_t>(o.indent), ' ');
      }
    }
  };
  switch (v.kind()) {
    case Value::Kind::kNone:
      out->append("null");
      return absl::OkStatus();
    case Value::Kind::kBool:
      out->append(v.as_bool() ? "true" : "false");
      return absl::OkStatus();
    case Value::Kind::kInt:
      out->append(std::to_string(v.as_int()));
      return absl::OkStatus();
    case Value::Kind::kFloat: {
      double d = v.as_double();
      if (std::isnan(d)) {
        out->append("NaN");
      } else if (std::isinf(d)) {
        out->append(d < 0 ? "-Infinity" : "Infinity");
      } else {
        AppendPythonFloat(d, out);
      }
      return absl::OkStatus();
    }
    case Value::Kind::kString:
      AppendJsonString(v.str(), o.ensure_ascii, out);
      return absl::OkStatus();
    case Value::Kind::kList: {
      if (v.list().empty()) {
        out->append("[]");
        return absl::OkStatus();
      }
      out->push_back('[');
      bool first = true;
      for (const Value& e : v.list()) {
        if (!first) out->append(item_sep);
        first = false;
        if (pretty) newline(depth + 1);
        absl::Status s = Dump(e, o, depth + 1, out);
        if (!s.ok()) return s;
      }
      if (pretty) newline(depth);
      out->push_back(']');
      return absl::OkStatus();
    }
    case Value::Kind::kDict: {
      if (v.dict().entries.empty()) {
        out->append("{}");
        return absl::OkStatus();
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& e : v.dict().entries) items.push_back(&e);
      if (o.sort_keys) {
        std::stable_sort(items.begin(), items.end(),
                         [](auto* a, auto* b) { return a->first < b->first; });
      }
      out->push_back('{');
      bool first = true;
      for (const auto* e : items) {
        if (!first) out->append(item_sep);
        first = false;
        if (pretty) newline(depth + 1);
        AppendJsonString(e->first, o.ensure_ascii, out);
        out->append(key_sep);
        absl::Status s = Dump(e->second, o, depth + 1, out);
        if (!s.ok()) return s;
      }
      if (pretty) newline(depth);
      out->push_back('}');
      return absl::OkStatus();
    }
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "tojson: Object of type ", std::string(v.TypeName()), " is not JSON serializable"));
  }
}

}  // namespace

absl::Status JsonDump(const Value& v, const JsonDumpOptions& options, std::string* out) {
  return Dump(v, options, 0, out);
}

}  // namespace flatstate::tmpl
