// JSON's primitive values as GBNF: the shared rules, literals, integer ranges and string formats.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "engine/grammar/json_schema_internal.h"

namespace flatstate::grammar::schema_internal {
namespace {

// Exactly one JSON-string character, raw or escaped (lone surrogate escapes are not generated).
constexpr char kCharRule[] =
    R"([^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" ([0-9a-cA-C] [0-9a-fA-F]{3} | [dD] [0-7] )"
    R"([0-9a-fA-F]{2} | [eEfF] [0-9a-fA-F]{3})))";

std::string Digits(uint64_t v) { return std::to_string(v); }

// Numbers with the digits of lo..hi (equal length; inner positions may be 0).
std::string SameLength(const std::string& lo, const std::string& hi) {
  if (lo == hi) return GbnfLiteral(lo);
  if (lo.size() == 1) return absl::StrCat("[", lo, "-", hi, "]");
  const std::string lo_rest = lo.substr(1), hi_rest = hi.substr(1);
  if (lo[0] == hi[0])
    return absl::StrCat(GbnfLiteral(lo.substr(0, 1)), " ", SameLength(lo_rest, hi_rest));
  const size_t n = lo_rest.size();
  const bool lo_full = lo_rest == std::string(n, '0'), hi_full = hi_rest == std::string(n, '9');
  std::vector<std::string> alts;
  char first_full = lo[0], last_full = hi[0];
  if (!lo_full) {
    alts.push_back(
        absl::StrCat(GbnfLiteral(lo.substr(0, 1)), " ", SameLength(lo_rest, std::string(n, '9'))));
    ++first_full;
  }
  if (!hi_full) --last_full;
  if (first_full <= last_full) {
    alts.push_back(absl::StrCat("[", std::string(1, first_full), "-", std::string(1, last_full),
                                "] [0-9]{", n, "}"));
  }
  if (!hi_full) {
    alts.push_back(
        absl::StrCat(GbnfLiteral(hi.substr(0, 1)), " ", SameLength(std::string(n, '0'), hi_rest)));
  }
  return absl::StrCat("(", absl::StrJoin(alts, " | "), ")");
}

std::string NonNegativeRange(uint64_t lo, uint64_t hi) {
  std::vector<std::string> alts;
  uint64_t low_of_len = 0, high_of_len = 9;
  for (size_t len = 1; len <= 20 && low_of_len <= hi; ++len) {
    const uint64_t a = std::max(lo, low_of_len), b = std::min(hi, high_of_len);
    if (a <= b) alts.push_back(SameLength(Digits(a), Digits(b)));
    low_of_len = high_of_len + 1;
    high_of_len = high_of_len * 10 + 9;
  }
  return absl::StrCat("(", absl::StrJoin(alts, " | "), ")");
}

}  // namespace

std::string GbnfLiteral(std::string_view text) {
  std::string out = "\"";
  for (char ch : text) {
    const uint8_t c = static_cast<uint8_t>(ch);
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(ch);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c == 0x7F) {
      out += absl::StrFormat("\\x%02X", c);
    } else {
      out.push_back(ch);
    }
  }
  out.push_back('"');
  return out;
}

void AddCommonRules(std::map<std::string, std::string>* rules) {
  auto& r = *rules;
  r["json-ws"] = R"(| " " | "\n" [ \t]{0,40})";
  r["json-char"] = kCharRule;
  r["json-string"] = R"("\"" json-char* "\"")";
  r["json-integer"] = R"("-"? ("0" | [1-9] [0-9]{0,15}))";
  r["json-number"] = R"(json-integer ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,2})?)";
  r["json-boolean"] = R"("true" | "false")";
  r["json-null"] = R"("null")";
  r["json-value"] =
      "json-object | json-array | json-string | json-number | json-boolean | json-null";
  r["json-object"] = R"("{" json-ws (json-string json-ws ":" json-ws json-value json-ws )"
                     R"(("," json-ws json-string json-ws ":" json-ws json-value json-ws)*)? "}")";
  r["json-array"] = R"("[" json-ws (json-value json-ws ("," json-ws json-value json-ws)*)? "]")";
}

std::string IntegerRangeGbnf(int64_t lo, int64_t hi) {
  auto neg = [](int64_t v) { return static_cast<uint64_t>(-(v + 1)) + 1; };  // |v| for v < 0
  if (hi < 0) return absl::StrCat("\"-\" ", NonNegativeRange(neg(hi), neg(lo)));
  if (lo >= 0) return NonNegativeRange(static_cast<uint64_t>(lo), static_cast<uint64_t>(hi));
  return absl::StrCat("(\"-\" ", NonNegativeRange(1, neg(lo)), " | ",
                      NonNegativeRange(0, static_cast<uint64_t>(hi)), ")");
}

absl::StatusOr<std::string> StringFormatGbnf(std::string_view format) {
  const std::string date =
      R"([0-9]{4} "-" ("0" [1-9] | "1" [0-2]) "-" ("0" [1-9] | [12] [0-9] | "3" [01]))";
  const std::string time =
      R"(([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{1,6})? )"
      R"(("Z" | [+-] ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9]))";
  const std::string hex = "[0-9a-fA-F]";
  if (format == "date") return date;
  if (format == "time") return time;
  if (format == "date-time") return absl::StrCat(date, " \"T\" ", time);
  if (format == "uuid") {
    return absl::StrCat(hex, "{8} \"-\" ", hex, "{4} \"-\" ", hex, "{4} \"-\" ", hex, "{4} \"-\" ",
                        hex, "{12}");
  }
  if (format == "email") {
    return R"([a-zA-Z0-9._%+-]{1,64} "@" [a-zA-Z0-9-]{1,63} ("." [a-zA-Z0-9-]{1,63}){1,4})";
  }
  return absl::NotFoundError(absl::StrCat("format '", std::string(format), "'"));
}

absl::Status UnsupportedKeyword(const std::string& keyword, const std::string& path,
                                std::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("unsupported JSON Schema keyword '", keyword,
                                                 "' at ", path, why.empty() ? "" : ": ",
                                                 std::string(why)));
}

absl::StatusOr<std::string> IntegerBoundsGbnf(const nlohmann::ordered_json& s,
                                              const std::string& path) {
  constexpr int64_t kLimit = 9999999999999999;  // 16 digits, as json-integer allows
  int64_t lo = -kLimit, hi = kLimit;
  bool bounded = false;
  for (const char* k : {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"}) {
    if (!s.contains(k)) continue;
    if (!s[k].is_number()) return UnsupportedKeyword(k, path, "not a number");
    const double v = s[k].get<double>();
    if (!std::isfinite(v) || std::fabs(v) > 1e16)
      return UnsupportedKeyword(k, path, "out of range");
    const std::string key = k;
    if (key == "minimum") {
      lo = std::max(lo, static_cast<int64_t>(std::ceil(v)));
    } else if (key == "exclusiveMinimum") {
      lo = std::max(lo, static_cast<int64_t>(std::floor(v)) + 1);
    } else if (key == "maximum") {
      hi = std::min(hi, static_cast<int64_t>(std::floor(v)));
    } else {
      hi = std::min(hi, static_cast<int64_t>(std::ceil(v)) - 1);
    }
    bounded = true;
  }
  if (!bounded) return std::string();
  if (lo > hi) return UnsupportedKeyword("minimum", path, "no integer lies within the bounds");
  return IntegerRangeGbnf(lo, hi);
}

}  // namespace flatstate::grammar::schema_internal
