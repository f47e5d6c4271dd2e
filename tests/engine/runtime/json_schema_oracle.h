// Test helpers for constrained decoding: random JSON Schemas of the supported subset with bounded
// output (strings with maxLength, arrays with maxItems, integer ranges, enums, booleans, nested
// objects, optional properties) and a validator for exactly that subset, written independently
// of the GBNF converter (engine/grammar/json_schema.cc).
#ifndef FLATSTATE_TESTS_ENGINE_RUNTIME_JSON_SCHEMA_ORACLE_H_
#define FLATSTATE_TESTS_ENGINE_RUNTIME_JSON_SCHEMA_ORACLE_H_

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace flatstate::testing {

// A small deterministic generator (xorshift).
class SchemaRng {
 public:
  explicit SchemaRng(uint64_t seed) : x_(seed * 0x9E3779B97F4A7C15ull + 1) {}
  uint32_t Below(uint32_t n) {
    x_ ^= x_ << 13;
    x_ ^= x_ >> 7;
    x_ ^= x_ << 17;
    return static_cast<uint32_t>(x_ % n);
  }

 private:
  uint64_t x_;
};

// A schema whose every valid document is short: depth <= 2.
inline nlohmann::ordered_json RandomSchema(SchemaRng* rng, int depth = 0) {
  using nlohmann::ordered_json;
  const uint32_t pick = rng->Below(depth >= 2 ? 5 : 7);
  ordered_json s = ordered_json::object();
  switch (pick) {
    case 0:
      s["type"] = "string";
      s["maxLength"] = 1 + rng->Below(8);
      if (rng->Below(2) == 0) s["minLength"] = rng->Below(2);
      break;
    case 1: {
      s["type"] = "integer";
      const int lo = static_cast<int>(rng->Below(50)) - 20;
      s["minimum"] = lo;
      s["maximum"] = lo + static_cast<int>(rng->Below(300));
      break;
    }
    case 2:
      s["type"] = "boolean";
      break;
    case 3:
      s["enum"] = ordered_json::array({"red", "green", 3, nullptr});
      break;
    case 4:
      s["type"] = "string";
      s["enum"] = ordered_json::array({"a\"b", "é", "plain"});
      break;
    case 5:
      s["type"] = "array";
      s["items"] = RandomSchema(rng, depth + 1);
      s["maxItems"] = 1 + rng->Below(3);
      break;
    default: {
      s["type"] = "object";
      ordered_json props = ordered_json::object();
      ordered_json required = ordered_json::array();
      const uint32_t n = 1 + rng->Below(3);
      for (uint32_t i = 0; i < n; ++i) {
        const std::string name = absl::StrCat("p", depth, "_", i);
        props[name] = RandomSchema(rng, depth + 1);
        if (rng->Below(3) != 0) required.push_back(name);
      }
      s["properties"] = props;
      s["required"] = required;
      s["additionalProperties"] = false;
      break;
    }
  }
  return s;
}

// An object schema of 2-4 random properties (RandomSchema's), some optional.
inline nlohmann::ordered_json RandomObjectSchema(SchemaRng* rng) {
  nlohmann::ordered_json props = nlohmann::ordered_json::object();
  nlohmann::ordered_json required = nlohmann::ordered_json::array();
  const uint32_t n = 2 + rng->Below(3);
  for (uint32_t i = 0; i < n; ++i) {
    const std::string name = absl::StrCat("field_", i);
    props[name] = RandomSchema(rng, 1);
    if (rng->Below(4) != 0) required.push_back(name);
  }
  return {{"type", "object"}, {"properties", props}, {"required", required}};
}

// Code points of a UTF-8 string.
inline size_t CodePoints(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// Empty when `v` is valid for `schema` (the subset RandomSchema writes), else why not.
inline std::string SchemaViolation(const nlohmann::ordered_json& schema, const nlohmann::json& v,
                                   const std::string& path = "#") {
  if (auto e = schema.find("enum"); e != schema.end()) {
    for (const auto& x : *e) {
      if (nlohmann::json::parse(x.dump()) == v) return "";
    }
    return path + ": not in enum";
  }
  const std::string type = schema.value("type", "");
  if (type == "string") {
    if (!v.is_string()) return path + ": not a string";
    const size_t n = CodePoints(v.get<std::string>());
    if (n > schema.value("maxLength", size_t{1} << 30)) return path + ": too long";
    if (n < schema.value("minLength", size_t{0})) return path + ": too short";
    return "";
  }
  if (type == "integer") {
    if (!v.is_number_integer()) return path + ": not an integer";
    const int64_t x = v.get<int64_t>();
    if (x < schema["minimum"].get<int64_t>() || x > schema["maximum"].get<int64_t>()) {
      return path + ": out of range";
    }
    return "";
  }
  if (type == "boolean") return v.is_boolean() ? "" : path + ": not a boolean";
  if (type == "array") {
    if (!v.is_array()) return path + ": not an array";
    if (v.size() > schema["maxItems"].get<size_t>()) return path + ": too many items";
    for (size_t i = 0; i < v.size(); ++i) {
      std::string e = SchemaViolation(schema["items"], v[i], absl::StrCat(path, "/", i));
      if (!e.empty()) return e;
    }
    return "";
  }
  if (type == "object") {
    if (!v.is_object()) return path + ": not an object";
    for (const auto& r : schema["required"]) {
      if (!v.contains(r.get<std::string>())) return path + ": missing " + r.get<std::string>();
    }
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!schema["properties"].contains(it.key())) return path + ": extra " + it.key();
      std::string e =
          SchemaViolation(schema["properties"][it.key()], it.value(), path + "/" + it.key());
      if (!e.empty()) return e;
    }
    return "";
  }
  return path + ": unknown schema";
}

}  // namespace flatstate::testing

#endif  // FLATSTATE_TESTS_ENGINE_RUNTIME_JSON_SCHEMA_ORACLE_H_
