// GBNF text (llama.cpp's grammar format, grammars/README.md there) parsed into rules of symbols.
//
// ParseGbnf reads `name ::= alternatives` rules: sequences of literals ("..." with \n \r \t \\ \"
// \[ \] \xNN \uNNNN \UNNNNNNNN escapes), character classes ([a-z], negated [^"]), `.` (any code
// point), rule references, groups ( ), repetition * + ? {m} {m,} {m,n}, `#` comments. A newline
// ends a rule except inside parentheses or after `|`. Groups and repetitions become generated
// rules named `<rule>_<n>`. Every failure is InvalidArgument "GBNF <line>:<column>: <what>"
// (1-based; the column counts bytes). A free function over a value type: thread-safe.
#ifndef FLATSTATE_ENGINE_GRAMMAR_GBNF_PARSER_H_
#define FLATSTATE_ENGINE_GRAMMAR_GBNF_PARSER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/grammar/code_points.h"

namespace flatstate::grammar {

// The largest m or n a {m,n} repetition may name.
inline constexpr uint32_t kMaxRepetition = 10000;

struct Symbol {
  enum class Kind : uint8_t { kRule, kChars };
  Kind kind = Kind::kChars;
  uint32_t rule = 0;   // kRule: index into ParsedGrammar::rules
  CodePointSet chars;  // kChars: one code point out of this set
};

struct ParsedRule {
  std::string name;
  std::vector<std::vector<Symbol>> alternatives;  // an empty alternative matches the empty string
  std::string origin;  // the user rule a generated rule was made for (its own name otherwise)
  bool defined = false;
  int line = 0, column = 0;  // where it was defined, or first referenced while undefined
};

struct ParsedGrammar {
  std::vector<ParsedRule> rules;
  uint32_t root = 0;
};

absl::StatusOr<ParsedGrammar> ParseGbnf(std::string_view text);

}  // namespace flatstate::grammar

#endif  // FLATSTATE_ENGINE_GRAMMAR_GBNF_PARSER_H_
