// `pattern`: an anchored regex in a subset of ECMAScript's syntax, as GBNF for the JSON text of
// the strings it matches.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "engine/grammar/code_points.h"
#include "engine/grammar/json_schema_internal.h"

namespace flatstate::grammar::schema_internal {
namespace {

std::string Hex(uint32_t cp) {
  if (cp < 0x100) return absl::StrFormat("\\x%02X", cp);
  if (cp < 0x10000) return absl::StrFormat("\\u%04X", cp);
  return absl::StrFormat("\\U%08X", cp);
}

// One character of the decoded string out of `set`, as JSON text: raw where JSON allows it,
// escaped for '"' and '\\'; of the control characters only \t \n \r are generated (as escapes).
std::string JsonCharsFrom(const CodePointSet& set) {
  std::vector<std::string> alts;
  std::string cls;
  auto piece = [&](uint32_t a, uint32_t b) {
    if (a > b) return;
    absl::StrAppend(&cls, Hex(a));
    if (b > a) absl::StrAppend(&cls, "-", Hex(b));
  };
  for (auto [lo, hi] : set.ranges()) {
    for (uint32_t c : {uint32_t{'\t'}, uint32_t{'\n'}, uint32_t{'\r'}}) {
      if (c >= lo && c <= hi) {
        alts.push_back(GbnfLiteral(c == '\t' ? "\\t" : c == '\n' ? "\\n" : "\\r"));
      }
    }
    if (hi < 0x20) continue;
    uint32_t a = std::max(lo, uint32_t{0x20});
    for (uint32_t skip : {uint32_t{'"'}, uint32_t{'\\'}}) {
      if (skip >= a && skip <= hi) {
        piece(a, skip - 1);
        a = skip + 1;
        alts.push_back(GbnfLiteral(skip == '"' ? "\\\"" : "\\\\"));
      }
    }
    piece(a, hi);
  }
  if (!cls.empty()) alts.insert(alts.begin(), absl::StrCat("[", cls, "]"));
  if (alts.empty()) return "[^\\x00-\\U0010FFFF]";  // matches nothing
  return alts.size() == 1 ? alts[0] : absl::StrCat("(", absl::StrJoin(alts, " | "), ")");
}

class RegexConverter {
 public:
  explicit RegexConverter(std::string_view re) : re_(re) {}

  absl::StatusOr<std::string> Convert() {
    if (re_.size() < 2 || re_.front() != '^' || re_.back() != '$') {
      return Unsupported("only patterns anchored with ^ and $ are supported");
    }
    re_ = re_.substr(1, re_.size() - 2);
    std::string out = Alternation();
    if (!error_.empty()) return Unsupported(error_);
    if (pos_ != re_.size())
      return Unsupported(absl::StrCat("unexpected '", std::string(1, re_[pos_]), "'"));
    return out;
  }

 private:
  absl::Status Unsupported(std::string_view why) const {
    return absl::InvalidArgumentError(absl::StrCat("pattern: ", std::string(why)));
  }
  bool AtEnd() const { return pos_ >= re_.size(); }

  std::string Alternation() {
    std::vector<std::string> alts = {Sequence()};
    while (!AtEnd() && re_[pos_] == '|') {
      ++pos_;
      alts.push_back(Sequence());
    }
    return alts.size() == 1 ? alts[0] : absl::StrCat("(", absl::StrJoin(alts, " | "), ")");
  }

  std::string Sequence() {
    std::vector<std::string> items;
    while (!AtEnd() && re_[pos_] != '|' && re_[pos_] != ')' && error_.empty()) {
      std::string atom = Atom();
      if (!error_.empty()) break;
      if (!AtEnd() && std::string_view("*+?{").find(re_[pos_]) != std::string_view::npos) {
        atom = absl::StrCat("(", atom, ")", Quantifier());
        if (!AtEnd() && re_[pos_] == '?') ++pos_;  // lazy: the same language
      }
      items.push_back(std::move(atom));
    }
    return items.empty() ? "\"\"" : absl::StrJoin(items, " ");
  }

  std::string Quantifier() {
    const char c = re_[pos_++];
    if (c != '{') return std::string(1, c);
    const size_t close = re_.find('}', pos_);
    if (close == std::string_view::npos) {
      error_ = "unterminated {";
      return "";
    }
    std::string body(re_.substr(pos_, close - pos_));
    pos_ = close + 1;
    for (char d : body) {
      if (!(d >= '0' && d <= '9') && d != ',') error_ = "bad {m,n}";
    }
    return absl::StrCat("{", body, "}");
  }

  std::string Atom() {
    const char c = re_[pos_];
    if (c == '(') {
      ++pos_;
      if (re_.substr(pos_, 2) == "?:") {
        pos_ += 2;
      } else if (!AtEnd() && re_[pos_] == '?') {
        error_ = "lookaround and named groups are not supported";
        return "";
      }
      std::string inner = Alternation();
      if (AtEnd() || re_[pos_] != ')') {
        error_ = "missing )";
        return "";
      }
      ++pos_;
      return absl::StrCat("(", inner, ")");
    }
    if (c == '[') return JsonCharsFrom(Class());
    if (c == '.') {
      ++pos_;
      return JsonCharsFrom(
          CodePointSet::FromRanges({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}).Complement());
    }
    if (c == '^' || c == '$') {
      error_ = "anchors inside the pattern are not supported";
      return "";
    }
    if (c == '*' || c == '+' || c == '?' || c == '{') {
      error_ = "a quantifier with nothing before it";
      return "";
    }
    return JsonCharsFrom(Escape(/*in_class=*/false));
  }

  // One literal character or class escape at pos_ (outside or inside [...]).
  CodePointSet Escape(bool in_class) {
    if (re_[pos_] != '\\') {
      Utf8Cursor cursor;
      bool complete = false;
      uint32_t cp = 0;
      while (!complete && !AtEnd()) {
        if (!cursor.Step(static_cast<uint8_t>(re_[pos_++]), &complete, &cp)) break;
      }
      if (!complete) error_ = "invalid UTF-8";
      return CodePointSet::FromRanges({{cp, cp}});
    }
    ++pos_;
    if (AtEnd()) {
      error_ = "trailing backslash";
      return {};
    }
    const char e = re_[pos_++];
    const CodePointSet digit = CodePointSet::FromRanges({{'0', '9'}});
    const CodePointSet word =
        CodePointSet::FromRanges({{'0', '9'}, {'A', 'Z'}, {'a', 'z'}, {'_', '_'}});
    const CodePointSet space = CodePointSet::FromRanges({{'\t', '\r'},
                                                         {' ', ' '},
                                                         {0xA0, 0xA0},
                                                         {0x1680, 0x1680},
                                                         {0x2000, 0x200A},
                                                         {0x2028, 0x2029},
                                                         {0x202F, 0x202F},
                                                         {0x205F, 0x205F},
                                                         {0x3000, 0x3000},
                                                         {0xFEFF, 0xFEFF}});
    switch (e) {
      case 'd':
        return digit;
      case 'D':
        return digit.Complement();
      case 'w':
        return word;
      case 'W':
        return word.Complement();
      case 's':
        return space;
      case 'S':
        return space.Complement();
      case 'n':
        return CodePointSet::FromRanges({{'\n', '\n'}});
      case 'r':
        return CodePointSet::FromRanges({{'\r', '\r'}});
      case 't':
        return CodePointSet::FromRanges({{'\t', '\t'}});
      default:
        break;
    }
    if (std::string_view(".*+?()[]{}|\\/^$-").find(e) != std::string_view::npos) {
      return CodePointSet::FromRanges({{uint32_t(e), uint32_t(e)}});
    }
    error_ =
        absl::StrCat(in_class ? "class " : "", "escape \\", std::string(1, e), " is not supported");
    return {};
  }

  CodePointSet Class() {
    ++pos_;  // '['
    bool negated = false;
    if (!AtEnd() && re_[pos_] == '^') {
      negated = true;
      ++pos_;
    }
    std::vector<CodePointSet::Range> ranges;
    bool first = true;
    while (!AtEnd() && (re_[pos_] != ']' || first) && error_.empty()) {
      first = false;
      CodePointSet lo = Escape(true);
      const bool single = lo.ranges().size() == 1 && lo.ranges()[0].first == lo.ranges()[0].second;
      if (single && pos_ + 1 < re_.size() && re_[pos_] == '-' && re_[pos_ + 1] != ']') {
        ++pos_;
        CodePointSet hi = Escape(true);
        if (hi.ranges().size() != 1 || hi.ranges()[0].first != hi.ranges()[0].second ||
            hi.ranges()[0].first < lo.ranges()[0].first) {
          error_ = "bad class range";
          return {};
        }
        ranges.push_back({lo.ranges()[0].first, hi.ranges()[0].first});
        continue;
      }
      for (auto r : lo.ranges()) ranges.push_back(r);
    }
    if (AtEnd()) {
      error_ = "unterminated [";
      return {};
    }
    ++pos_;  // ']'
    CodePointSet set = CodePointSet::FromRanges(ranges);
    return negated ? set.Complement() : set;
  }

  std::string_view re_;
  size_t pos_ = 0;
  std::string error_;
};

}  // namespace

absl::StatusOr<std::string> PatternGbnf(std::string_view pattern) {
  return RegexConverter(pattern).Convert();
}

}  // namespace flatstate::grammar::schema_internal
