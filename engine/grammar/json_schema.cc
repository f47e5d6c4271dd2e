#include "engine/grammar/json_schema.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/grammar/gbnf_parser.h"
#include "engine/grammar/json_schema_internal.h"
#include "engine/util/status_macros.h"

namespace flatstate::grammar {
namespace {

using Json = nlohmann::ordered_json;
using schema_internal::GbnfLiteral;

const std::set<std::string>& Annotations() {
  static const auto* k = new std::set<std::string>{
      "title",    "description", "$schema",  "$id",       "$comment", "default",
      "examples", "deprecated",  "readOnly", "writeOnly", "$defs",    "definitions"};
  return *k;
}

const std::set<std::string>& Supported() {
  static const auto* k = new std::set<std::string>{"type",
                                                   "enum",
                                                   "const",
                                                   "anyOf",
                                                   "oneOf",
                                                   "allOf",
                                                   "$ref",
                                                   "properties",
                                                   "required",
                                                   "additionalProperties",
                                                   "items",
                                                   "minItems",
                                                   "maxItems",
                                                   "minLength",
                                                   "maxLength",
                                                   "pattern",
                                                   "format",
                                                   "minimum",
                                                   "maximum",
                                                   "exclusiveMinimum",
                                                   "exclusiveMaximum"};
  return *k;
}

std::string PathKey(const std::string& path, const std::string& key) {
  std::string k;
  for (char c : key) {
    if (c == '~') {
      k += "~0";
    } else if (c == '/') {
      k += "~1";
    } else {
      k.push_back(c);
    }
  }
  return absl::StrCat(path, "/", k);
}

absl::Status Unsupported(const std::string& keyword, const std::string& path,
                         std::string_view why = "") {
  return schema_internal::UnsupportedKeyword(keyword, path, why);
}

class Converter {
 public:
  explicit Converter(const Json& root) : root_(root) {}

  absl::StatusOr<std::string> Run() {
    schema_internal::AddCommonRules(&rules_);
    ASSIGN_OR_RETURN(std::string root, Visit(root_, "#"));
    std::string out = absl::StrCat("root ::= ", root, "\n");
    for (const auto& [name, body] : rules_) absl::StrAppend(&out, name, " ::= ", body, "\n");
    return out;
  }

 private:
  std::string NewRule(const std::string& path, std::string body) {
    std::string name = "s";
    for (char c : path.substr(1)) {
      const bool word = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
      if (word) {
        name.push_back(c);
      } else if (name.back() != '-') {
        name.push_back('-');
      }
    }
    while (name.back() == '-') name.pop_back();
    name = absl::StrCat(name, "-", ++counter_);
    rules_[name] = std::move(body);
    return name;
  }

  absl::StatusOr<std::string> Visit(const Json& s, const std::string& path) {
    if (s.is_boolean()) {
      if (s.get<bool>()) return std::string("json-value");
      return absl::InvalidArgumentError(
          absl::StrCat("JSON Schema 'false' at ", path, " matches nothing"));
    }
    if (!s.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat("JSON Schema at ", path, " is not an object"));
    }
    std::vector<std::string> keywords;
    for (const auto& [key, value] : s.items()) {
      if (Annotations().count(key)) continue;
      if (!Supported().count(key)) return Unsupported(key, path);
      keywords.push_back(key);
    }
    auto has = [&](const char* k) { return s.contains(k); };
    auto only = [&](const char* k) -> absl::Status {
      for (const std::string& other : keywords) {
        if (other != k)
          return Unsupported(other, path, absl::StrCat("not supported beside '", k, "'"));
      }
      return absl::OkStatus();
    };
    if (has("$ref")) {
      RETURN_IF_ERROR(only("$ref"));
      return Ref(s["$ref"], path);
    }
    if (has("const")) return GbnfLiteral(s["const"].dump());
    if (has("enum")) {
      if (!s["enum"].is_array() || s["enum"].empty()) return Unsupported("enum", path, "empty");
      std::vector<std::string> alts;
      for (const Json& v : s["enum"]) alts.push_back(GbnfLiteral(v.dump()));
      return absl::StrCat("(", absl::StrJoin(alts, " | "), ")");
    }
    for (const char* k : {"anyOf", "oneOf", "allOf"}) {
      if (!has(k)) continue;
      RETURN_IF_ERROR(only(k));
      const Json& list = s[k];
      if (!list.is_array() || list.empty()) return Unsupported(k, path, "needs a non-empty list");
      if (std::string(k) == "allOf" && list.size() != 1) {
        return Unsupported(k, path, "only a one-schema allOf is supported");
      }
      std::vector<std::string> alts;
      for (size_t i = 0; i < list.size(); ++i) {
        ASSIGN_OR_RETURN(std::string alt, Visit(list[i], absl::StrCat(PathKey(path, k), "/", i)));
        alts.push_back(std::move(alt));
      }
      return absl::StrCat("(", absl::StrJoin(alts, " | "), ")");
    }
    std::vector<std::string> types;
    if (has("type")) {
      const Json& t = s["type"];
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else if (t.is_array()) {
        for (const Json& one : t) {
          if (!one.is_string()) return Unsupported("type", path, "not a string");
          types.push_back(one.get<std::string>());
        }
      } else {
        return Unsupported("type", path, "not a string or a list");
      }
    } else if (has("properties") || has("required") || has("additionalProperties")) {
      types.push_back("object");
    } else if (has("items") || has("minItems") || has("maxItems")) {
      types.push_back("array");
    } else if (has("minLength") || has("maxLength") || has("pattern") || has("format")) {
      types.push_back("string");
    } else if (!keywords.empty()) {
      return Unsupported(keywords.front(), path, "needs a 'type'");
    } else {
      return std::string("json-value");
    }
    std::vector<std::string> alts;
    for (const std::string& t : types) {
      ASSIGN_OR_RETURN(std::string alt, Typed(s, t, path));
      alts.push_back(std::move(alt));
    }
    return alts.size() == 1 ? alts[0] : absl::StrCat("(", absl::StrJoin(alts, " | "), ")");
  }

  absl::StatusOr<std::string> Typed(const Json& s, const std::string& type,
                                    const std::string& path) {
    if (type == "object") return Object(s, path);
    if (type == "array") return Array(s, path);
    if (type == "string") return String(s, path);
    if (type == "integer") return Integer(s, path);
    if (type == "number") {
      for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
        if (s.contains(k)) return Unsupported(k, path, "bounds are supported on integers only");
      }
      return std::string("json-number");
    }
    if (type == "boolean") return std::string("json-boolean");
    if (type == "null") return std::string("json-null");
    return Unsupported("type", path, absl::StrCat("unknown type '", type, "'"));
  }

  absl::StatusOr<uint32_t> Count(const Json& s, const char* key, const std::string& path) {
    const Json& v = s[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > kMaxRepetition) {
      return Unsupported(key, path,
                         absl::StrCat("must be an integer in [0, ", kMaxRepetition, "]"));
    }
    return static_cast<uint32_t>(v.get<int64_t>());
  }

  absl::StatusOr<std::string> Object(const Json& s, const std::string& path);
  absl::StatusOr<std::string> Array(const Json& s, const std::string& path);
  absl::StatusOr<std::string> String(const Json& s, const std::string& path);
  absl::StatusOr<std::string> Integer(const Json& s, const std::string& path);
  absl::StatusOr<std::string> Ref(const Json& ref, const std::string& path);

  const Json& root_;
  std::map<std::string, std::string> rules_;
  std::map<std::string, std::string> ref_rules_;
  int counter_ = 0;
};

absl::StatusOr<std::string> Converter::Object(const Json& s, const std::string& path) {
  if (s.contains("additionalProperties")) {
    const Json& extra = s["additionalProperties"];
    if (!extra.is_boolean() && !(extra.is_object() && extra.empty())) {
      return Unsupported("additionalProperties", path, "only false or true is supported");
    }
  }
  const Json empty = Json::object();
  const Json& props = s.contains("properties") ? s["properties"] : empty;
  if (!props.is_object()) return Unsupported("properties", path, "not an object");
  std::set<std::string> required;
  if (s.contains("required")) {
    if (!s["required"].is_array()) return Unsupported("required", path, "not a list");
    for (const Json& r : s["required"]) {
      if (!r.is_string() || !props.contains(r.get<std::string>())) {
        return Unsupported("required", path, absl::StrCat(r.dump(), " is not among 'properties'"));
      }
      required.insert(r.get<std::string>());
    }
  }
  if (props.empty()) {
    const bool closed = s.contains("additionalProperties") &&
                        s["additionalProperties"].is_boolean() &&
                        !s["additionalProperties"].get<bool>();
    return closed ? std::string(R"("{" json-ws "}")") : std::string("json-object");
  }
  std::vector<std::string> kv;
  std::vector<bool> req;
  const std::string props_path = PathKey(path, "properties");
  for (const auto& [key, sub] : props.items()) {
    const std::string sub_path = PathKey(props_path, key);
    ASSIGN_OR_RETURN(std::string value, Visit(sub, sub_path));
    kv.push_back(NewRule(sub_path, absl::StrCat(GbnfLiteral(Json(key).dump()),
                                                " json-ws \":\" json-ws ", value, " json-ws")));
    req.push_back(required.count(key) > 0);
  }
  // after[i]: properties i.. once one has been written (each then needs its comma).
  const size_t n = kv.size();
  std::vector<std::string> after(n + 1);
  for (size_t i = n; i-- > 0;) {
    std::string piece = absl::StrCat("\",\" json-ws ", kv[i]);
    if (!req[i]) piece = absl::StrCat("(", piece, ")?");
    after[i] = NewRule(path, absl::StrCat(piece, after[i + 1].empty() ? "" : " ", after[i + 1]));
  }
  std::vector<std::string> first;  // the first property written is k; all before it optional
  for (size_t k = 0; k < n; ++k) {
    first.push_back(absl::StrCat(kv[k], after[k + 1].empty() ? "" : " ", after[k + 1]));
    if (req[k]) break;
  }
  bool all_optional = true;
  for (bool r : req) all_optional = all_optional && !r;
  if (all_optional) first.push_back("");
  return NewRule(path, absl::StrCat("\"{\" json-ws (", absl::StrJoin(first, " | "), ") \"}\""));
}

absl::StatusOr<std::string> Converter::Array(const Json& s, const std::string& path) {
  std::string item = "json-value";
  if (s.contains("items")) {
    ASSIGN_OR_RETURN(item, Visit(s["items"], PathKey(path, "items")));
  }
  uint32_t min = 0;
  int64_t max = -1;
  if (s.contains("minItems")) {
    ASSIGN_OR_RETURN(min, Count(s, "minItems", path));
  }
  if (s.contains("maxItems")) {
    ASSIGN_OR_RETURN(max, Count(s, "maxItems", path));
  }
  if (max >= 0 && max < min) return Unsupported("maxItems", path, "below minItems");
  const std::string elem = NewRule(PathKey(path, "items"), absl::StrCat(item, " json-ws"));
  const std::string more = absl::StrCat("\",\" json-ws ", elem);
  std::string body;
  if (max == 0) {
    body = R"("[" json-ws "]")";
  } else if (min == 0) {
    const std::string rest = max < 0 ? "*" : absl::StrCat("{0,", max - 1, "}");
    body = absl::StrCat("\"[\" json-ws (", elem, " (", more, ")", rest, ")? \"]\"");
  } else {
    const std::string rest =
        max < 0 ? absl::StrCat("{", min - 1, ",}") : absl::StrCat("{", min - 1, ",", max - 1, "}");
    body = absl::StrCat("\"[\" json-ws ", elem, " (", more, ")", rest, " \"]\"");
  }
  return NewRule(path, body);
}

absl::StatusOr<std::string> Converter::String(const Json& s, const std::string& path) {
  const bool format = s.contains("format"), pattern = s.contains("pattern");
  if (format || pattern) {
    for (const char* k : {"minLength", "maxLength"}) {
      if (s.contains(k)) return Unsupported(k, path, "not supported beside format or pattern");
    }
    if (format && pattern) return Unsupported("pattern", path, "not supported beside 'format'");
    const char* key = format ? "format" : "pattern";
    if (!s[key].is_string()) return Unsupported(key, path, "not a string");
    const std::string text = s[key].get<std::string>();
    absl::StatusOr<std::string> body =
        format ? schema_internal::StringFormatGbnf(text) : schema_internal::PatternGbnf(text);
    if (!body.ok()) {
      return Unsupported(
          key, path,
          format ? absl::StrCat("format '", text, "'") : std::string(body.status().message()));
    }
    return NewRule(path, absl::StrCat("\"\\\"\" ", *body, " \"\\\"\""));
  }
  if (!s.contains("minLength") && !s.contains("maxLength")) return std::string("json-string");
  uint32_t min = 0;
  int64_t max = -1;
  if (s.contains("minLength")) {
    ASSIGN_OR_RETURN(min, Count(s, "minLength", path));
  }
  if (s.contains("maxLength")) {
    ASSIGN_OR_RETURN(max, Count(s, "maxLength", path));
  }
  if (max >= 0 && max < min) return Unsupported("maxLength", path, "below minLength");
  const std::string reps =
      max < 0 ? absl::StrCat("{", min, ",}") : absl::StrCat("{", min, ",", max, "}");
  return NewRule(path, absl::StrCat("\"\\\"\" json-char", reps, " \"\\\"\""));
}

absl::StatusOr<std::string> Converter::Integer(const Json& s, const std::string& path) {
  ASSIGN_OR_RETURN(std::string range, schema_internal::IntegerBoundsGbnf(s, path));
  return range.empty() ? std::string("json-integer") : NewRule(path, std::move(range));
}

absl::StatusOr<std::string> Converter::Ref(const Json& ref, const std::string& path) {
  if (!ref.is_string()) return Unsupported("$ref", path, "not a string");
  const std::string target = ref.get<std::string>();
  if (auto it = ref_rules_.find(target); it != ref_rules_.end()) return it->second;
  const Json* schema = nullptr;
  if (target == "#") {
    schema = &root_;
  } else {
    for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
      const std::string p = prefix;
      if (target.rfind(p, 0) != 0) continue;
      std::string name;
      const std::string raw = target.substr(p.size());
      for (size_t i = 0; i < raw.size(); ++i) {  // JSON pointer escapes
        if (raw[i] == '~' && i + 1 < raw.size() && (raw[i + 1] == '0' || raw[i + 1] == '1')) {
          name.push_back(raw[++i] == '0' ? '~' : '/');
        } else {
          name.push_back(raw[i]);
        }
      }
      const std::string defs = p.substr(2, p.size() - 3);
      if (root_.contains(defs) && root_[defs].is_object() && root_[defs].contains(name)) {
        schema = &root_[defs][name];
      }
    }
  }
  if (schema == nullptr) {
    return Unsupported(
        "$ref", path,
        absl::StrCat("cannot resolve '", target, "' (only #, #/$defs/... and #/definitions/...)"));
  }
  const std::string name = NewRule(target, "");
  ref_rules_[target] = name;
  ASSIGN_OR_RETURN(std::string body, Visit(*schema, target));
  rules_[name] = body;
  return name;
}

}  // namespace

absl::StatusOr<std::string> JsonSchemaToGbnf(const nlohmann::ordered_json& schema) {
  return Converter(schema).Run();
}

absl::StatusOr<std::string> JsonSchemaTextToGbnf(std::string_view schema_json) {
  Json schema = Json::parse(schema_json, nullptr, /*allow_exceptions=*/false);
  if (schema.is_discarded()) return absl::InvalidArgumentError("JSON Schema: not valid JSON");
  return JsonSchemaToGbnf(schema);
}

std::string JsonObjectGbnf() {
  std::map<std::string, std::string> rules;
  schema_internal::AddCommonRules(&rules);
  std::string out = "root ::= json-object\n";
  for (const auto& [name, body] : rules) absl::StrAppend(&out, name, " ::= ", body, "\n");
  return out;
}

}  // namespace flatstate::grammar
