// Building blocks of the JSON Schema converter (json_schema.cc): GBNF for JSON's primitive values.
// Pure functions; thread-safe.
#ifndef FLATSTATE_ENGINE_GRAMMAR_JSON_SCHEMA_INTERNAL_H_
#define FLATSTATE_ENGINE_GRAMMAR_JSON_SCHEMA_INTERNAL_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace flatstate::grammar::schema_internal {

// The shared rules every converted grammar may reference: ws, char, string, number, integer,
// value, object, array, boolean, null (named json-*; added to *rules).
void AddCommonRules(std::map<std::string, std::string>* rules);

// A GBNF literal ("...") matching exactly `text`.
std::string GbnfLiteral(std::string_view text);

// Integers in [lo, hi] as JSON text (no leading zeros; "-" for negatives). lo <= hi.
std::string IntegerRangeGbnf(int64_t lo, int64_t hi);

// The body of a string format ("date", ...) between the quotes, or NotFound.
absl::StatusOr<std::string> StringFormatGbnf(std::string_view format);

// InvalidArgument "unsupported JSON Schema keyword '<keyword>' at <path>[: <why>]".
absl::Status UnsupportedKeyword(const std::string& keyword, const std::string& path,
                                std::string_view why = "");

// The GBNF of an integer schema's bounds (minimum, maximum, exclusive*), "" when it has none.
absl::StatusOr<std::string> IntegerBoundsGbnf(const nlohmann::ordered_json& s,
                                              const std::string& path);

// An anchored regex ("^...$") in the supported subset, as GBNF for the string's characters
// between the quotes (JSON-escaped where needed); InvalidArgument saying what is not supported.
absl::StatusOr<std::string> PatternGbnf(std::string_view pattern);

}  // namespace flatstate::grammar::schema_internal

#endif  // FLATSTATE_ENGINE_GRAMMAR_JSON_SCHEMA_INTERNAL_H_
