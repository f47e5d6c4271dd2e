// A GBNF grammar compiled to a flat program that matches UTF-8 bytes (see grammar_state.h).
//
// Each rule is a list of alternatives; each alternative is a run of elements in one array ended by
// kEnd. A literal code point becomes one kByte element per UTF-8 byte; a class of ASCII code points
// one kByte element; any other class one kClass element (a whole code point, matched a byte at a
// time with a Utf8Cursor). Positions (indices into the element array) are what parse stacks hold.
//
// Compile refuses, with InvalidArgument naming the rule: left recursion (a rule that can reach
// itself before consuming a byte, e.g. `expr ::= expr "+" term`, or `(x?)*`), and programs over
// kMaxElements. Parse errors come from ParseGbnf ("GBNF <line>:<column>: ..."). A CompiledGrammar
// is immutable after construction; share it (std::shared_ptr<const>) between threads freely.
#ifndef FLATSTATE_ENGINE_GRAMMAR_COMPILED_GRAMMAR_H_
#define FLATSTATE_ENGINE_GRAMMAR_COMPILED_GRAMMAR_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/grammar/code_points.h"
#include "engine/grammar/gbnf_parser.h"

namespace flatstate::grammar {

inline constexpr size_t kMaxElements = size_t{1} << 22;

enum class ElementKind : uint8_t { kEnd, kRule, kByte, kClass };

struct Element {
  ElementKind kind;
  uint32_t arg;  // kRule: rule id; kByte: byte set id; kClass: class id; kEnd: rule id
};

using ByteSet = std::array<uint64_t, 4>;
inline bool ByteSetHas(const ByteSet& set, uint8_t b) { return (set[b >> 6] >> (b & 63)) & 1; }

class CompiledGrammar {
 public:
  static absl::StatusOr<std::shared_ptr<const CompiledGrammar>> FromGbnf(std::string_view text);
  static absl::StatusOr<std::shared_ptr<const CompiledGrammar>> FromParsed(
      const ParsedGrammar& parsed);

  uint32_t root() const { return root_; }
  size_t num_rules() const { return rules_.size(); }
  const std::string& rule_name(uint32_t rule) const { return rules_[rule].name; }
  // Start positions of a rule's alternatives.
  const std::vector<uint32_t>& alternatives(uint32_t rule) const { return rules_[rule].alts; }
  size_t num_elements() const { return elements_.size(); }
  const Element& element(uint32_t pos) const { return elements_[pos]; }
  const ByteSet& byte_set(uint32_t id) const { return byte_sets_[id]; }
  const CodePointSet& char_class(uint32_t id) const { return classes_[id].chars; }
  // Lead bytes of the class's members.
  const ByteSet& class_lead_bytes(uint32_t id) const { return classes_[id].lead_bytes; }
  // Whether the class holds every non-ASCII scalar value (so which one a multi-byte sequence
  // encodes does not matter to it: [^"], `.`).
  bool class_covers_non_ascii(uint32_t id) const { return classes_[id].covers_non_ascii; }
  // Whether `pos` may appear in a parse stack below the top: it follows a rule reference.
  bool IsContinuation(uint32_t pos) const {
    return pos > 0 && pos < elements_.size() && elements_[pos].kind != ElementKind::kEnd &&
           elements_[pos - 1].kind == ElementKind::kRule;
  }
  // A hash of the whole program; serialized states carry it to refuse a different grammar.
  uint64_t fingerprint() const { return fingerprint_; }

 private:
  struct Rule {
    std::string name;
    std::vector<uint32_t> alts;
  };
  struct Class {
    CodePointSet chars;
    ByteSet lead_bytes;
    bool covers_non_ascii;
  };
  CompiledGrammar() = default;

  std::vector<Rule> rules_;
  std::vector<Element> elements_;
  std::vector<ByteSet> byte_sets_;
  std::vector<Class> classes_;
  uint32_t root_ = 0;
  uint64_t fingerprint_ = 0;
};

}  // namespace flatstate::grammar

#endif  // FLATSTATE_ENGINE_GRAMMAR_COMPILED_GRAMMAR_H_
