#include "engine/grammar/gbnf_parser.h"

#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace flatstate::grammar {
namespace {

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  absl::StatusOr<ParsedGrammar> Parse() {
    while (true) {
      SkipSpace(/*newlines=*/true);
      if (AtEnd()) break;
      if (!ParseRule()) return error_;
    }
    for (const ParsedRule& rule : grammar_.rules) {
      if (!rule.defined) {
        return Error(rule.line, rule.column, absl::StrCat("undefined rule '", rule.name, "'"));
      }
    }
    auto root = ids_.find("root");
    if (root == ids_.end()) return Error(1, 1, "the grammar has no 'root' rule");
    grammar_.root = root->second;
    return std::move(grammar_);
  }

 private:
  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek(size_t ahead = 0) const {
    return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0';
  }

  void LineColumn(size_t offset, int* line, int* column) const {
    *line = 1;
    size_t line_start = 0;
    for (size_t i = 0; i < offset && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++*line;
        line_start = i + 1;
      }
    }
    *column = static_cast<int>(offset - line_start) + 1;
  }
  static absl::Status Error(int line, int column, std::string_view what) {
    return absl::InvalidArgumentError(absl::StrFormat("GBNF %d:%d: %s", line, column, what));
  }
  // Records an error at `offset` (the current position by default); returns false.
  bool Fail(std::string_view what, std::optional<size_t> offset = std::nullopt) {
    int line, column;
    LineColumn(offset.value_or(pos_), &line, &column);
    error_ = Error(line, column, what);
    return false;
  }

  void SkipSpace(bool newlines) {
    while (!AtEnd()) {
      const char c = Peek();
      if (c == ' ' || c == '\t' || (newlines && (c == '\n' || c == '\r'))) {
        ++pos_;
      } else if (c == '#') {
        while (!AtEnd() && Peek() != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  std::string ParseName() {
    const size_t start = pos_;
    while (!AtEnd() && IsNameChar(Peek())) ++pos_;
    return std::string(text_.substr(start, pos_ - start));
  }

  uint32_t RuleId(const std::string& name, size_t offset) {
    auto [it, inserted] = ids_.try_emplace(name, static_cast<uint32_t>(grammar_.rules.size()));
    if (inserted) {
      ParsedRule rule;
      rule.name = name;
      rule.origin = name;
      LineColumn(offset, &rule.line, &rule.column);
      grammar_.rules.push_back(std::move(rule));
    }
    return it->second;
  }

  uint32_t NewRule(uint32_t parent, std::vector<std::vector<Symbol>> alternatives) {
    ParsedRule rule;
    rule.origin = grammar_.rules[parent].origin;
    rule.name = absl::StrCat(rule.origin, "_", ++generated_);
    rule.alternatives = std::move(alternatives);
    rule.defined = true;
    LineColumn(pos_, &rule.line, &rule.column);
    const uint32_t id = static_cast<uint32_t>(grammar_.rules.size());  // not referable by name
    grammar_.rules.push_back(std::move(rule));
    return id;
  }

  bool ParseRule() {
    const size_t start = pos_;
    const std::string name = ParseName();
    if (name.empty()) return Fail("expected a rule name");
    SkipSpace(false);
    if (text_.substr(pos_, 3) != "::=") return Fail("expected '::='");
    pos_ += 3;
    SkipSpace(true);
    const uint32_t id = RuleId(name, start);
    if (grammar_.rules[id].defined) {
      return Fail(absl::StrCat("rule '", name, "' is defined twice"), start);
    }
    grammar_.rules[id].defined = true;
    LineColumn(start, &grammar_.rules[id].line, &grammar_.rules[id].column);
    std::vector<std::vector<Symbol>> alternatives;
    if (!ParseAlternatives(id, /*nested=*/false, &alternatives)) return false;
    grammar_.rules[id].alternatives = std::move(alternatives);
    SkipSpace(false);
    if (!AtEnd() && Peek() != '\n' && Peek() != '\r') return Fail("expected the end of the line");
    return true;
  }

  bool ParseAlternatives(uint32_t rule, bool nested, std::vector<std::vector<Symbol>>* out) {
    out->emplace_back();
    if (!ParseSequence(rule, nested, &out->back())) return false;
    while (Peek() == '|') {
      ++pos_;
      SkipSpace(true);
      out->emplace_back();
      if (!ParseSequence(rule, nested, &out->back())) return false;
    }
    return true;
  }

  bool ParseSequence(uint32_t rule, bool nested, std::vector<Symbol>* seq) {
    size_t last_start = seq->size();  // where the last repeatable item begins
    while (!AtEnd()) {
      const char c = Peek();
      const size_t item_start = seq->size();
      if (c == '"') {
        ++pos_;
        while (Peek() != '"') {
          if (AtEnd() || Peek() == '\n') return Fail("unterminated string literal");
          uint32_t cp;
          if (!ParseChar(&cp)) return false;
          seq->push_back({Symbol::Kind::kChars, 0, CodePointSet::FromRanges({{cp, cp}})});
        }
        ++pos_;
      } else if (c == '[') {
        Symbol sym;
        if (!ParseClass(&sym.chars)) return false;
        seq->push_back(std::move(sym));
      } else if (c == '.') {
        ++pos_;
        seq->push_back({Symbol::Kind::kChars, 0, CodePointSet::All()});
      } else if (IsNameChar(c)) {
        const size_t start = pos_;
        const std::string name = ParseName();
        seq->push_back({Symbol::Kind::kRule, RuleId(name, start), {}});
      } else if (c == '(') {
        ++pos_;
        SkipSpace(true);
        std::vector<std::vector<Symbol>> alternatives;
        if (!ParseAlternatives(rule, /*nested=*/true, &alternatives)) return false;
        if (Peek() != ')') return Fail("expected ')'");
        ++pos_;
        seq->push_back({Symbol::Kind::kRule, NewRule(rule, std::move(alternatives)), {}});
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (last_start == seq->size()) return Fail("a repetition needs something before it");
        uint32_t min = 0, max = 0;
        bool unbounded = false;
        if (!ParseRepetition(&min, &max, &unbounded)) return false;
        ApplyRepetition(rule, last_start, min, max, unbounded, seq);
        SkipSpace(nested);
        continue;  // the repeated item stays the last one
      } else {
        break;
      }
      last_start = item_start;
      SkipSpace(nested);
    }
    return true;
  }

  bool ParseRepetition(uint32_t* min, uint32_t* max, bool* unbounded) {
    const char c = Peek();
    ++pos_;
    if (c == '*') {
      *min = 0, *unbounded = true;
    } else if (c == '+') {
      *min = 1, *unbounded = true;
    } else if (c == '?') {
      *min = 0, *max = 1;
    } else {
      SkipSpace(false);
      if (!ParseCount(min)) return false;
      SkipSpace(false);
      if (Peek() == ',') {
        ++pos_;
        SkipSpace(false);
        if (Peek() == '}') {
          *unbounded = true;
        } else {
          if (!ParseCount(max)) return false;
          if (*max < *min) return Fail("a repetition's maximum is below its minimum");
        }
        SkipSpace(false);
      } else {
        *max = *min;
      }
      if (Peek() != '}') return Fail("expected '}'");
      ++pos_;
    }
    return true;
  }

  bool ParseCount(uint32_t* n) {
    if (Peek() < '0' || Peek() > '9') return Fail("expected a number");
    uint64_t v = 0;
    while (Peek() >= '0' && Peek() <= '9') {
      v = v * 10 + static_cast<uint64_t>(Peek() - '0');
      if (v > kMaxRepetition) return Fail(absl::StrCat("repetition count over ", kMaxRepetition));
      ++pos_;
    }
    *n = static_cast<uint32_t>(v);
    return true;
  }

  // x{min,max} becomes min copies of x, then nested optional copies (or a recursive tail).
  void ApplyRepetition(uint32_t rule, size_t start, uint32_t min, uint32_t max, bool unbounded,
                       std::vector<Symbol>* seq) {
    std::vector<Symbol> operand(seq->begin() + static_cast<ptrdiff_t>(start), seq->end());
    seq->resize(start);
    Symbol x = operand.front();
    if (operand.size() > 1) x = {Symbol::Kind::kRule, NewRule(rule, {std::move(operand)}), {}};
    for (uint32_t i = 0; i < min; ++i) seq->push_back(x);
    if (unbounded) {
      // tail ::= x tail | (empty)
      const uint32_t tail = NewRule(rule, {});
      grammar_.rules[tail].alternatives = {{x, {Symbol::Kind::kRule, tail, {}}}, {}};
      seq->push_back({Symbol::Kind::kRule, tail, {}});
    } else if (max > min) {
      std::optional<Symbol> inner;
      for (uint32_t i = min; i < max; ++i) {
        std::vector<Symbol> more = {x};
        if (inner) more.push_back(*inner);
        inner = Symbol{Symbol::Kind::kRule, NewRule(rule, {std::move(more), {}}), {}};
      }
      seq->push_back(*inner);
    }
  }

  bool ParseClass(CodePointSet* out) {
    const size_t start = pos_;
    ++pos_;  // '['
    bool negated = false;
    if (Peek() == '^') {
      negated = true;
      ++pos_;
    }
    std::vector<CodePointSet::Range> ranges;
    while (Peek() != ']') {
      if (AtEnd()) return Fail("unterminated character class", start);
      uint32_t lo, hi;
      if (!ParseChar(&lo)) return false;
      hi = lo;
      if (Peek() == '-' && Peek(1) != ']' && pos_ + 1 < text_.size()) {
        ++pos_;
        if (!ParseChar(&hi)) return false;
        if (hi < lo) return Fail("a character range ends below its start");
      }
      ranges.push_back({lo, hi});
    }
    ++pos_;
    *out = CodePointSet::FromRanges(std::move(ranges));
    if (negated) *out = out->Complement();
    return true;
  }

  bool ParseHex(int digits, uint32_t* cp) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      const char c = Peek();
      int d;
      if (c >= '0' && c <= '9') {
        d = c - '0';
      } else if (c >= 'a' && c <= 'f') {
        d = c - 'a' + 10;
      } else if (c >= 'A' && c <= 'F') {
        d = c - 'A' + 10;
      } else {
        return Fail(absl::StrCat("expected ", digits, " hex digits"));
      }
      v = v * 16 + static_cast<uint32_t>(d);
      ++pos_;
    }
    if (v > kMaxCodePoint) return Fail("code point past U+10FFFF");
    *cp = v;
    return true;
  }

  // One character of a literal or class: an escape or one UTF-8 encoded code point.
  bool ParseChar(uint32_t* cp) {
    const size_t start = pos_;
    if (Peek() == '\\') {
      ++pos_;
      const char e = Peek();
      ++pos_;
      switch (e) {
        case 'n':
          *cp = '\n';
          return true;
        case 'r':
          *cp = '\r';
          return true;
        case 't':
          *cp = '\t';
          return true;
        case 'x':
          return ParseHex(2, cp);
        case 'u':
          return ParseHex(4, cp);
        case 'U':
          return ParseHex(8, cp);
        case '\\':
        case '"':
        case '[':
        case ']':
        case '-':
        case '^':
        case '/':
          *cp = static_cast<unsigned char>(e);
          return true;
        default:
          return Fail("unknown escape", start);
      }
    }
    Utf8Cursor cursor;
    bool complete = false;
    while (!complete) {
      if (AtEnd() || !cursor.Step(static_cast<uint8_t>(Peek()), &complete, cp)) {
        return Fail("invalid UTF-8", start);
      }
      ++pos_;
    }
    return true;
  }

  std::string_view text_;
  size_t pos_ = 0;
  ParsedGrammar grammar_;
  absl::flat_hash_map<std::string, uint32_t> ids_;
  int generated_ = 0;
  absl::Status error_;
};

}  // namespace

absl::StatusOr<ParsedGrammar> ParseGbnf(std::string_view text) { return Parser(text).Parse(); }

}  // namespace flatstate::grammar
