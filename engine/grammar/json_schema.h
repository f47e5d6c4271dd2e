// JSON Schema -> GBNF for constrained JSON output (OpenAI response_format json_schema /
// json_object).
//
// Supported (docs/grammar.md has the full list): type (one or a list), object with properties
// (emitted in the schema's order; optional ones may be left out, order kept), required,
// additionalProperties (false, true or absent: only the declared properties are generated — any
// output still validates; a schema-valued additionalProperties is refused), arrays with items,
// minItems, maxItems, enum, const, strings with minLength, maxLength, format (date, time,
// date-time, uuid, email) and an anchored ^...$ pattern in a regex subset, integers with minimum,
// maximum, exclusiveMinimum, exclusiveMaximum, numbers (no bounds), boolean, null, anyOf, oneOf
// (as anyOf: branches are not checked to be exclusive), allOf of one schema, $ref to #,
// #/$defs/... and #/definitions/... (recursion allowed), annotations (title, description, ...).
// Anything else is InvalidArgument naming the keyword and its JSON path ("unsupported JSON Schema
// keyword 'multipleOf' at #/properties/price") — never silently unconstrained. Pure functions:
// thread-safe.
#ifndef FLATSTATE_ENGINE_GRAMMAR_JSON_SCHEMA_H_
#define FLATSTATE_ENGINE_GRAMMAR_JSON_SCHEMA_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace flatstate::grammar {

// The GBNF text of a grammar whose root matches exactly the JSON texts the schema accepts (within
// the subset above), with optional whitespace between tokens.
absl::StatusOr<std::string> JsonSchemaToGbnf(const nlohmann::ordered_json& schema);
// The same from the schema's JSON text (keeps the property order as written).
absl::StatusOr<std::string> JsonSchemaTextToGbnf(std::string_view schema_json);
// response_format json_object: any JSON object.
std::string JsonObjectGbnf();

}  // namespace flatstate::grammar

#endif  // FLATSTATE_ENGINE_GRAMMAR_JSON_SCHEMA_H_
