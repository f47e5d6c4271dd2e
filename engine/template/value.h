// Value: the dynamic value a chat template computes with, modelled on the Python objects Jinja2
// sees (undefined, None, bool, int, float, str, list/tuple, dict, namespace, callables).
//
// A Value owns its scalar or string by value and shares lists, dicts and callables through
// shared_ptr. Lists and dicts are immutable once built (transformers renders with Jinja2's
// ImmutableSandboxedEnvironment, which forbids mutating them); a namespace is the one mutable
// object, changed only by the thread rendering with it. Values are not thread-safe to mutate
// but a compiled template only holds immutable literals, so sharing those across threads is safe.
// Nothing here fails except the conversions that return absl::Status (tojson of an undefined).
#ifndef FLATSTATE_ENGINE_TEMPLATE_VALUE_H_
#define FLATSTATE_ENGINE_TEMPLATE_VALUE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace flatstate::tmpl {

class Value;
class Interpreter;

using List = std::vector<Value>;

// An insertion-ordered dict with string keys (what JSON and chat templates produce).
struct Dict {
  std::vector<std::pair<std::string, Value>> entries;
  const Value* Find(std::string_view key) const;
  void Set(std::string key, Value value);
};

// Positional and keyword arguments of a call.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  const Value* Keyword(std::string_view name) const;
};

// The `loop` object of a for loop: one per loop, advanced in place (as jinja2's LoopContext).
struct LoopState {
  List items;
  int64_t index0 = 0;
};

// A macro, a builtin global (range, namespace, raise_exception, ...) or a bound helper.
struct Callable {
  std::string name;
  std::function<absl::StatusOr<Value>(Interpreter&, CallArgs&)> fn;
  bool is_macro = false;  // printed as <Macro 'name'>
};

class Value {
 public:
  enum class Kind : uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kNamespace,
    kCallable,
    kLoop
  };

  Value() = default;
  static Value None() { return Value(Kind::kNone); }
  static Value Bool(bool b) {
    Value v(Kind::kBool);
    v.i_ = b;
    return v;
  }
  static Value Int(int64_t i) {
    Value v(Kind::kInt);
    v.i_ = i;
    return v;
  }
  static Value Float(double f) {
    Value v(Kind::kFloat);
    v.f_ = f;
    return v;
  }
  static Value Str(std::string s) {
    Value v(Kind::kString);
    v.s_ = std::move(s);
    return v;
  }
  static Value MakeList(List items, bool tuple = false);
  static Value MakeDict(Dict dict);
  static Value MakeNamespace(Dict dict);
  static Value MakeCallable(std::string name,
                            std::function<absl::StatusOr<Value>(Interpreter&, CallArgs&)> fn,
                            bool is_macro = false);
  static Value MakeLoop(std::shared_ptr<LoopState> state);
  // Converts parsed JSON (objects keep their key order).
  static Value FromJson(const nlohmann::ordered_json& j);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat || is_bool(); }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_tuple() const { return kind_ == Kind::kList && tuple_; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_callable() const { return kind_ == Kind::kCallable; }
  bool is_loop() const { return kind_ == Kind::kLoop; }

  bool as_bool() const { return i_ != 0; }
  int64_t as_int() const { return i_; }
  double as_double() const { return kind_ == Kind::kFloat ? f_ : static_cast<double>(i_); }
  const std::string& str() const { return s_; }
  const List& list() const { return *static_cast<const List*>(obj_.get()); }
  const Dict& dict() const { return *static_cast<const Dict*>(obj_.get()); }
  Dict& mutable_namespace() const { return *static_cast<Dict*>(obj_.get()); }
  const Callable& callable() const { return *static_cast<const Callable*>(obj_.get()); }
  LoopState& loop() const { return *static_cast<LoopState*>(obj_.get()); }
  std::shared_ptr<LoopState> loop_ptr() const { return std::static_pointer_cast<LoopState>(obj_); }

  // Python truthiness.
  bool Truthy() const;
  // Python str(): what {{ value }} prints.
  std::string ToString() const;
  void AppendString(std::string* out) const;
  // Python repr(), used for items inside printed lists and dicts.
  void AppendRepr(std::string* out) const;
  // The Python type name for error messages ("str", "dict", "undefined", ...).
  std::string_view TypeName() const;

 private:
  explicit Value(Kind k) : kind_(k) {}
  Kind kind_ = Kind::kUndefined;
  bool tuple_ = false;
  union {
    int64_t i_ = 0;
    double f_;
  };
  std::string s_;
  std::shared_ptr<void> obj_;  // the List, Dict (dict or namespace) or Callable, by kind_
};

// Python == between two values (1 == 1.0 == True; different types are unequal).
bool ValuesEqual(const Value& a, const Value& b);
// Python repr of a float (shortest round trip; 1.0, 1e-05, 1e+16, inf, nan).
void AppendPythonFloat(double d, std::string* out);

// json.dumps(value, ensure_ascii=False, indent=indent, separators=..., sort_keys=sort_keys) as
// transformers' tojson filter calls it. indent < 0 means None. Fails on undefined or callables.
struct JsonDumpOptions {
  int indent = -1;
  std::string indent_str;  // when set (indent given as a string), used instead of spaces
  std::string item_sep;    // empty: Python's default for the indent
  std::string key_sep;
  bool has_separators = false;
  bool sort_keys = false;
  bool ensure_ascii = false;  // escape every non-ASCII character as \uXXXX (surrogate pairs)
};
absl::Status JsonDump(const Value& v, const JsonDumpOptions& options, std::string* out);

}  // namespace flatstate::tmpl

#endif  // FLATSTATE_ENGINE_TEMPLATE_VALUE_H_
