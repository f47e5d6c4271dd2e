#include "engine/template/lexer.h"

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/util/utf8.h"

namespace flatstate::tmpl {
namespace {

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsNameChar(char c) { return IsNameStart(c) || IsDigit(c); }

int HexValue(char c) {
  if (IsDigit(c)) return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Decodes Python "unicode-escape" sequences, as jinja2 does for string literals.
// *bad is set on an escape Python rejects (truncated \x, \u, \U; \N{...}, unsupported here).
std::string DecodeEscapes(std::string_view s, bool* bad) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c != '\\' || i + 1 >= s.size()) {
      out.push_back(c);
      continue;
    }
    char e = s[++i];
    switch (e) {
      case 'n':
        out.push_back('\n');
        break;
      case 't':
        out.push_back('\t');
        break;
      case 'r':
        out.push_back('\r');
        break;
      case '\\':
        out.push_back('\\');
        break;
      case '\'':
        out.push_back('\'');
        break;
      case '"':
        out.push_back('"');
        break;
      case 'a':
        out.push_back('\a');
        break;
      case 'b':
        out.push_back('\b');
        break;
      case 'f':
        out.push_back('\f');
        break;
      case 'v':
        out.push_back('\v');
        break;
      case '\n':
        break;
      case 'N':  // \N{NAME}: not supported; malformed ones are errors in Python too
        *bad = true;
        break;
      case 'x':
      case 'u':
      case 'U': {
        size_t len = e == 'x' ? 2 : (e == 'u' ? 4 : 8);
        uint32_t cp = 0;
        bool ok = i + len < s.size();
        for (size_t k = 1; ok && k <= len; ++k) {
          int h = HexValue(s[i + k]);
          if (h < 0) ok = false;
          cp = cp * 16 + static_cast<uint32_t>(h);
        }
        if (!ok || cp > 0x10FFFF) {
          *bad = true;
          out.push_back('\\');
          out.push_back(e);
        } else {
          AppendUtf8(cp, &out);
          i += len;
        }
        break;
      }
      default:
        if (e >= '0' && e <= '7') {
          uint32_t cp = 0;
          size_t k = 0;
          while (k < 3 && i + k < s.size() && s[i + k] >= '0' && s[i + k] <= '7') {
            cp = cp * 8 + static_cast<uint32_t>(s[i + k] - '0');
            ++k;
          }
          i += k - 1;
          AppendUtf8(cp, &out);
        } else {
          out.push_back('\\');
          out.push_back(e);
        }
    }
  }
  return out;
}

class Lexer {
 public:
  Lexer(std::string src, const LexOptions& o) : src_(std::move(src)), o_(o) {}

  absl::StatusOr<std::vector<Token>> Run() {
    size_t pos = 0;
    bool line_starting = true;
    const size_t n = src_.size();
    while (pos < n) {
      size_t start = src_.find('{', pos);
      while (start != std::string::npos && start + 1 < n && src_[start + 1] != '{' &&
             src_[start + 1] != '%' && src_[start + 1] != '#') {
        start = src_.find('{', start + 1);
      }
      if (start == std::string::npos || start + 1 >= n) {
        Emit(TokenType::kData, src_.substr(pos), line_);
        break;
      }
      char kind = src_[start + 1];
      char mod = start + 2 < n ? src_[start + 2] : 0;
      if (mod != '-' && mod != '+') mod = 0;
      std::string text = src_.substr(pos, start - pos);
      size_t raw_end = kind == '%' ? MatchRawBegin(start) : 0;
      text = StripText(std::move(text), mod, kind != '{', line_starting);
      if (!text.empty()) Emit(TokenType::kData, text, line_);
      line_ += Newlines(pos, start);
      size_t after = start + 2 + (mod ? 1 : 0);
      if (raw_end) {
        auto r = LexRaw(start, raw_end);
        if (!r.ok()) return r.status();
        pos = *r;
      } else if (kind == '#') {
        size_t q = src_.find("#}", after);
        if (q == std::string::npos && after >= n) break;  // jinja2 accepts a bare "{#" at the end
        if (q == std::string::npos) return Error(line_, "missing end of comment tag");
        line_ += Newlines(start, q);
        pos = q + 2;
        if (q > after && src_[q - 1] == '-') {
          pos = SkipSpace(pos);
        } else if (!(q > after && src_[q - 1] == '+') && o_.trim_blocks && pos < n &&
                   src_[pos] == '\n') {
          ++pos;
          ++line_;
        }
      } else {
        auto r = LexTag(kind == '%', after);
        if (!r.ok()) return r.status();
        pos = *r;
      }
      line_starting = pos > 0 && src_[pos - 1] == '\n';
    }
    tokens_.push_back(Token{TokenType::kEof, "", line_});
    return std::move(tokens_);
  }

 private:
  absl::Status Error(int line, std::string_view msg) {
    return absl::InvalidArgumentError(absl::StrCat("line ", line, ": ", std::string(msg)));
  }

  int Newlines(size_t from, size_t to) {
    int c = 0;
    for (size_t i = from; i < to && i < src_.size(); ++i) c += src_[i] == '\n';
    return c;
  }

  size_t SkipSpace(size_t pos) {
    while (pos < src_.size() && IsSpace(src_[pos])) {
      line_ += src_[pos] == '\n';
      ++pos;
    }
    return pos;
  }

  std::string StripText(std::string text, char mod, bool lstrip_kind, bool line_starting) {
    if (mod == '-') {
      size_t e = text.size();
      while (e > 0 && IsSpace(text[e - 1])) --e;
      text.resize(e);
    } else if (mod != '+' && o_.lstrip_blocks && lstrip_kind) {
      size_t nl = text.rfind('\n');
      size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if (l_pos > 0 || line_starting) {
        bool blank = true;
        for (size_t i = l_pos; i < text.size(); ++i) {
          if (text[i] != ' ' && text[i] != '\t') blank = false;
        }
        if (blank) text.resize(l_pos);
      }
    }
    return text;
  }

  // {%[-+]?\s*raw\s*(-%}|%}): returns the position after the tag, or 0.
  size_t MatchRawBegin(size_t start) {
    size_t p = start + 2;
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
    while (p < src_.size() && IsSpace(src_[p])) ++p;
    if (src_.compare(p, 3, "raw") != 0) return 0;
    p += 3;
    while (p < src_.size() && IsSpace(src_[p])) ++p;
    if (src_.compare(p, 3, "-%}") == 0) return p + 3;
    if (src_.compare(p, 2, "%}") == 0) return p + 2;
    return 0;
  }

  absl::StatusOr<size_t> LexRaw(size_t start, size_t after_begin) {
    int raw_line = line_;
    line_ += Newlines(start, after_begin);
    size_t pos = after_begin;
    if (src_[after_begin - 3] == '-') pos = SkipSpace(pos);
    size_t search = pos;
    while (true) {
      size_t q = src_.find("{%", search);
      if (q == std::string::npos) return Error(raw_line, "missing end of raw directive");
      size_t p = q + 2;
      char mod = 0;
      if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) mod = src_[p++];
      while (p < src_.size() && IsSpace(src_[p])) ++p;
      if (src_.compare(p, 6, "endraw") != 0) {
        search = q + 2;
        continue;
      }
      p += 6;
      while (p < src_.size() && IsSpace(src_[p])) ++p;
      char end_mod = 0;
      if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) end_mod = src_[p++];
      if (src_.compare(p, 2, "%}") != 0) {
        search = q + 2;
        continue;
      }
      std::string body = src_.substr(pos, q - pos);
      bool line_starting = pos > 0 && src_[pos - 1] == '\n';
      body = StripText(std::move(body), mod, true, line_starting);
      if (!body.empty()) Emit(TokenType::kData, body, line_);
      line_ += Newlines(pos, p);
      p += 2;
      if (end_mod == '-') {
        p = SkipSpace(p);
      } else if (end_mod != '+' && o_.trim_blocks && p < src_.size() && src_[p] == '\n') {
        ++p;
        ++line_;
      }
      return p;
    }
  }

  absl::StatusOr<size_t> LexTag(bool block, size_t pos) {
    const int tag_line = line_;
    Emit(block ? TokenType::kBlockBegin : TokenType::kVarBegin, "", line_);
    int depth = 0;
    const size_t n = src_.size();
    while (true) {
      pos = SkipSpace(pos);
      if (pos >= n) return Error(tag_line, block ? "missing end of block tag" : "missing '}}'");
      if (depth == 0) {
        if (block) {
          if (src_.compare(pos, 3, "-%}") == 0) {
            Emit(TokenType::kBlockEnd, "", line_);
            return SkipSpace(pos + 3);
          }
          if (src_.compare(pos, 3, "+%}") == 0) {
            Emit(TokenType::kBlockEnd, "", line_);
            return pos + 3;
          }
          if (src_.compare(pos, 2, "%}") == 0) {
            Emit(TokenType::kBlockEnd, "", line_);
            pos += 2;
            if (o_.trim_blocks && pos < n && src_[pos] == '\n') {
              ++pos;
              ++line_;
            }
            return pos;
          }
        } else {
          if (src_.compare(pos, 3, "-}}") == 0) {
            Emit(TokenType::kVarEnd, "", line_);
            return SkipSpace(pos + 3);
          }
          if (src_.compare(pos, 2, "}}") == 0) {
            Emit(TokenType::kVarEnd, "", line_);
            return pos + 2;
          }
        }
      }
      char c = src_[pos];
      if (c == '\'' || c == '"') {
        size_t p = pos + 1;
        while (p < n && src_[p] != c) p += src_[p] == '\\' ? 2 : 1;
        if (p >= n) return Error(line_, "unexpected end of string");
        bool bad = false;
        std::string value =
            DecodeEscapes(std::string_view(src_).substr(pos + 1, p - pos - 1), &bad);
        if (bad) return Error(line_, "invalid escape sequence in string");
        Emit(TokenType::kString, std::move(value), line_);
        line_ += Newlines(pos, p);
        pos = p + 1;
      } else if (IsDigit(c)) {
        pos = LexNumber(pos);
      } else if (IsNameStart(c)) {
        size_t p = pos;
        while (p < n && IsNameChar(src_[p])) ++p;
        Emit(TokenType::kName, src_.substr(pos, p - pos), line_);
        pos = p;
      } else {
        static const char* const kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
        std::string op;
        for (const char* t : kTwo) {
          if (src_.compare(pos, 2, t) == 0) op = t;
        }
        if (op.empty()) {
          if (std::strchr("+-/*%~[](){}><=.:|,;", c) == nullptr || c == 0) {
            return Error(line_, absl::StrCat("unexpected char '", std::string(1, c), "'"));
          }
          op = std::string(1, c);
        }
        if (op == "(" || op == "[" || op == "{") ++depth;
        if ((op == ")" || op == "]" || op == "}") && depth > 0) --depth;
        Emit(TokenType::kOp, op, line_);
        pos += op.size();
      }
    }
  }

  size_t ScanDigits(size_t p) {
    while (p < src_.size() &&
           (IsDigit(src_[p]) || (src_[p] == '_' && p + 1 < src_.size() && IsDigit(src_[p + 1])))) {
      ++p;
    }
    return p;
  }

  size_t LexNumber(size_t pos) {
    size_t p = ScanDigits(pos);
    bool is_float = false;
    if (p + 1 < src_.size() && src_[p] == '.' && IsDigit(src_[p + 1])) {
      p = ScanDigits(p + 1);
      is_float = true;
    }
    if (p < src_.size() && (src_[p] == 'e' || src_[p] == 'E')) {
      size_t q = p + 1;
      if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
      if (q < src_.size() && IsDigit(src_[q])) {
        p = ScanDigits(q);
        is_float = true;
      }
    }
    if (!is_float && src_[pos] == '0') {
      // jinja2's integer_re: 0b/0o/0x literals, else only "0(_?0)*" (no leading zeros).
      char base = pos + 1 < src_.size() ? static_cast<char>(src_[pos + 1] | 0x20) : 0;
      int radix = base == 'b' ? 2 : base == 'o' ? 8 : base == 'x' ? 16 : 0;
      if (radix != 0) {
        size_t q = pos + 2;
        uint64_t v = 0;
        bool any = false, overflow = false;
        while (q < src_.size()) {
          char c = src_[q];
          if (c == '_' && any && q + 1 < src_.size() && src_[q + 1] != '_') {
            ++q;
            continue;
          }
          int d = IsDigit(c)                               ? c - '0'
                  : (c | 0x20) >= 'a' && (c | 0x20) <= 'f' ? (c | 0x20) - 'a' + 10
                                                           : 99;
          if (d >= radix) break;
          overflow = overflow || v > (UINT64_MAX >> 4);
          v = v * static_cast<uint64_t>(radix) + static_cast<uint64_t>(d);
          any = true;
          ++q;
        }
        if (any) {
          Emit(TokenType::kInt, overflow ? "99999999999999999999" : std::to_string(v), line_);
          return q;
        }
      }
      p = pos + 1;
      while (p < src_.size() &&
             (src_[p] == '0' || (src_[p] == '_' && p + 1 < src_.size() && src_[p + 1] == '0'))) {
        ++p;
      }
    }
    std::string text;
    for (size_t i = pos; i < p; ++i) {
      if (src_[i] != '_') text.push_back(src_[i]);
    }
    Emit(is_float ? TokenType::kFloat : TokenType::kInt, text, line_);
    return p;
  }

  void Emit(TokenType t, std::string text, int line) {
    tokens_.push_back(Token{t, std::move(text), line});
  }

  std::string src_;
  LexOptions o_;
  int line_ = 1;
  std::vector<Token> tokens_;
};

}  // namespace

absl::StatusOr<std::vector<Token>> Tokenize(std::string_view source, const LexOptions& options) {
  std::string src;
  src.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      src.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      src.push_back(source[i]);
    }
  }
  if (!options.keep_trailing_newline && !src.empty() && src.back() == '\n') src.pop_back();
  return Lexer(std::move(src), options).Run();
}

}  // namespace flatstate::tmpl
