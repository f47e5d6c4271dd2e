// The builtin library a template calls into: Jinja2 filters and tests, the Python str/dict/list
// methods templates use, the globals transformers provides (range, namespace, dict,
// raise_exception, strftime_now) and the Python operators and string helpers they share.
//
// Stateless functions; thread-safe. Each fails with an InvalidArgument whose message says what
// Python would have raised (a type error, a missing argument, an unknown method); the caller
// adds the template name and line.
#ifndef FLATSTATE_ENGINE_TEMPLATE_BUILTINS_H_
#define FLATSTATE_ENGINE_TEMPLATE_BUILTINS_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/template/value.h"

namespace flatstate::tmpl {

class Interpreter;

// filters.cc
bool IsKnownFilter(std::string_view name);
bool IsKnownTest(std::string_view name);
absl::StatusOr<Value> ApplyFilter(Interpreter& in, std::string_view name, const Value& v,
                                  CallArgs& args);
absl::StatusOr<bool> ApplyTest(Interpreter& in, std::string_view name, const Value& v,
                               CallArgs& args);

// filter_args.cc: fails when `args` do not fit the Python signature of filter `name`.
absl::Status CheckFilterArgs(std::string_view name, const CallArgs& args);

// methods.cc
bool HasMethod(const Value& obj, std::string_view name);
absl::StatusOr<Value> CallMethod(Interpreter& in, const Value& obj, std::string_view name,
                                 CallArgs& args);
// A builtin global function, or undefined when `name` is none.
Value GlobalFunction(std::string_view name);

// operators.cc
absl::StatusOr<Value> BinaryOp(Interpreter& in, std::string_view op, const Value& a,
                               const Value& b);
// Python ordering: -1, 0 or 1; fails for unorderable types.
absl::StatusOr<int> CompareValues(const Value& a, const Value& b);
absl::StatusOr<bool> Contains(const Value& container, const Value& item);
// Items of an iterable (list items, dict keys, string code points, nothing for undefined).
absl::StatusOr<List> Iterate(const Value& v);
absl::StatusOr<int64_t> Length(const Value& v);
// UTF-8 code point boundaries of s (size() + 1 offsets).
std::vector<size_t> CodePoints(std::string_view s);
bool IsPySpace(char c);
std::string PyStrip(std::string_view s, const Value* chars, bool left, bool right);
std::string PyLower(std::string_view s);
std::string PyUpper(std::string_view s);
std::string PyTitle(std::string_view s);
std::string JinjaTitle(const std::string& s);  // jinja2's title filter (words split at -({[<)
std::string Indent(const std::string& in, const Value& width, bool first, bool blank);
absl::StatusOr<Value> ArgOr(const CallArgs& args, size_t pos, std::string_view name,
                            Value fallback);

}  // namespace flatstate::tmpl

#endif  // FLATSTATE_ENGINE_TEMPLATE_BUILTINS_H_
