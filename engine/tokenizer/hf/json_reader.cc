#include "engine/tokenizer/hf/json_reader.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/hf/text_util.h"

namespace flatstate::hf {
namespace {

constexpr int kMaxDepth = 256;

class Reader {
 public:
  Reader(std::string_view s, BpeParts* parts) : s_(s), parts_(parts) {}

  bool Document(nlohmann::json* out) {
    Ws();
    if (!Value(out, 0, kTop)) return false;
    Ws();
    return pos_ == s_.size() || Fail("trailing characters");
  }
  size_t pos() const { return pos_; }
  const std::string& error() const { return error_; }

 private:
  enum Where { kOther, kTop, kModel };

  bool Fail(const char* why) {
    if (error_.empty()) error_ = why;
    return false;
  }
  void Ws() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\r' || s_[pos_] == '\t')) {
      ++pos_;
    }
  }
  bool Eat(char c) {
    Ws();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool Literal(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) return Fail("bad literal");
    pos_ += word.size();
    return true;
  }

  bool Hex4(uint32_t* v) {
    if (pos_ + 4 > s_.size()) return Fail("short \\u escape");
    *v = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = s_[pos_++];
      *v <<= 4;
      if (c >= '0' && c <= '9') {
        *v |= c - '0';
      } else if (c >= 'a' && c <= 'f') {
        *v |= c - 'a' + 10;
      } else if (c >= 'A' && c <= 'F') {
        *v |= c - 'A' + 10;
      } else {
        return Fail("bad \\u escape");
      }
    }
    return true;
  }

  bool String(std::string* out) {
    if (pos_ >= s_.size() || s_[pos_] != '"') return Fail("expected a string");
    ++pos_;
    out->clear();
    while (true) {
      size_t run = pos_;
      while (run < s_.size() && s_[run] != '"' && s_[run] != '\\' &&
             static_cast<uint8_t>(s_[run]) >= 0x20 && static_cast<uint8_t>(s_[run]) < 0x80) {
        ++run;
      }
      out->append(s_.data() + pos_, run - pos_);
      pos_ = run;
      if (pos_ >= s_.size()) return Fail("unterminated string");
      const uint8_t c = static_cast<uint8_t>(s_[pos_]);
      if (c == '"') {
        ++pos_;
        return true;
      }
      if (c < 0x20) return Fail("control character in string");
      if (c >= 0x80) {
        char32_t cp;
        const size_t n = DecodeUtf8(s_, pos_, &cp);
        if (cp == 0xFFFD && n == 1) return Fail("invalid UTF-8 in string");
        out->append(s_.data() + pos_, n);
        pos_ += n;
        continue;
      }
      ++pos_;  // backslash
      if (pos_ >= s_.size()) return Fail("unterminated string");
      const char e = s_[pos_++];
      switch (e) {
        case '"':
          out->push_back('"');
          break;
        case '\\':
          out->push_back('\\');
          break;
        case '/':
          out->push_back('/');
          break;
        case 'b':
          out->push_back('\b');
          break;
        case 'f':
          out->push_back('\f');
          break;
        case 'n':
          out->push_back('\n');
          break;
        case 'r':
          out->push_back('\r');
          break;
        case 't':
          out->push_back('\t');
          break;
        case 'u': {
          uint32_t v;
          if (!Hex4(&v)) return false;
          if (v >= 0xDC00 && v < 0xE000) return Fail("lone low surrogate");
          if (v >= 0xD800 && v < 0xDC00) {
            uint32_t lo;
            if (s_.substr(pos_, 2) != "\\u") return Fail("lone high surrogate");
            pos_ += 2;
            if (!Hex4(&lo)) return false;
            if (lo < 0xDC00 || lo >= 0xE000) return Fail("bad low surrogate");
            v = 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
          }
          AppendUtf8(v, out);
          break;
        }
        default:
          return Fail("bad escape");
      }
    }
  }

  bool Number(nlohmann::json* out) {
    const size_t start = pos_;
    bool is_float = false;
    if (pos_ < s_.size() && s_[pos_] == '-') ++pos_;
    const size_t digits = pos_;
    while (pos_ < s_.size()) {
      const char c = s_[pos_];
      if (c >= '0' && c <= '9') {
        ++pos_;
      } else if (c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-') {
        is_float = true;
        ++pos_;
      } else {
        break;
      }
    }
    if (pos_ == digits || s_[digits] < '0' || s_[digits] > '9') return Fail("bad number");
    if (s_[digits] == '0' && pos_ > digits + 1 && s_[digits + 1] >= '0' && s_[digits + 1] <= '9') {
      return Fail("leading zero");
    }
    const std::string text(s_.substr(start, pos_ - start));
    char* end = nullptr;
    errno = 0;
    if (!is_float) {
      if (text[0] == '-') {
        const long long v = std::strtoll(text.c_str(), &end, 10);
        if (errno == 0 && *end == '\0') {
          *out = static_cast<int64_t>(v);
          return true;
        }
      } else {
        const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
        if (errno == 0 && *end == '\0') {
          *out = static_cast<uint64_t>(v);
          return true;
        }
      }
      errno = 0;
    }
    const double d = std::strtod(text.c_str(), &end);
    if (*end != '\0') return Fail("bad number");
    *out = d;
    return true;
  }

  bool Value(nlohmann::json* out, int depth, Where where) {
    if (depth > kMaxDepth) return Fail("nested too deeply");
    Ws();
    if (pos_ >= s_.size()) return Fail("unexpected end");
    const char c = s_[pos_];
    if (c == '{') return Object(out, depth, where);
    if (c == '[') {
      ++pos_;
      *out = nlohmann::json::array();
      if (Eat(']')) return true;
      do {
        nlohmann::json v;
        if (!Value(&v, depth + 1, kOther)) return false;
        out->push_back(std::move(v));
      } while (Eat(','));
      return Eat(']') || Fail("expected ',' or ']'");
    }
    if (c == '"') {
      std::string s;
      if (!String(&s)) return false;
      *out = std::move(s);
      return true;
    }
    if (c == 't') return Literal("true") && (*out = true, true);
    if (c == 'f') return Literal("false") && (*out = false, true);
    if (c == 'n') return Literal("null") && (*out = nullptr, true);
    return Number(out);
  }

  bool Object(nlohmann::json* out, int depth, Where where) {
    ++pos_;
    *out = nlohmann::json::object();
    if (Eat('}')) return true;
    std::string key;
    do {
      Ws();
      if (!String(&key)) return false;
      if (!Eat(':')) return Fail("expected ':'");
      Ws();
      const char next = pos_ < s_.size() ? s_[pos_] : '\0';
      if (where == kTop && key == "model" && next == '{') {
        nlohmann::json v;
        if (!Object(&v, depth + 1, kModel)) return false;
        (*out)[key] = std::move(v);
      } else if (where == kModel && key == "vocab" && next == '{' && !parts_->vocab_captured) {
        if (!Vocab(depth + 1)) return false;
      } else if (where == kModel && key == "merges" && next == '[' && !parts_->merges_captured) {
        if (!Merges(depth + 1)) return false;
      } else {
        nlohmann::json v;
        if (!Value(&v, depth + 1, kOther)) return false;
        (*out)[key] = std::move(v);
      }
    } while (Eat(','));
    return Eat('}') || Fail("expected ',' or '}'");
  }

  bool Vocab(int depth) {
    parts_->vocab_captured = true;
    ++pos_;
    if (Eat('}')) return true;
    do {
      Ws();
      std::pair<std::string, nlohmann::json> e;
      if (!String(&e.first)) return false;
      if (!Eat(':')) return Fail("expected ':'");
      if (!Value(&e.second, depth + 1, kOther)) return false;
      parts_->vocab.push_back(std::move(e));
    } while (Eat(','));
    return Eat('}') || Fail("expected ',' or '}'");
  }

  bool Merges(int depth) {
    parts_->merges_captured = true;
    ++pos_;
    if (Eat(']')) return true;
    std::string a, b;
    do {
      Ws();
      const size_t start = pos_;
      const char c = pos_ < s_.size() ? s_[pos_] : '\0';
      bool ok = false;
      if (c == '"') {
        if (!String(&a)) return false;
        const size_t sp = a.find(' ');
        if (sp != std::string::npos) {
          AddMerge(std::string_view(a).substr(0, sp), std::string_view(a).substr(sp + 1));
          ok = true;
        }
      } else if (c == '[') {
        ++pos_;
        Ws();
        if (String(&a) && Eat(',') && (Ws(), String(&b)) && Eat(']')) {
          AddMerge(a, b);
          ok = true;
        } else {
          error_.clear();
        }
      }
      if (!ok) {  // anything else: keep its text for the error
        pos_ = start;
        nlohmann::json v;
        if (!Value(&v, depth + 1, kOther)) return false;
        parts_->merges.push_back(
            {static_cast<uint32_t>(parts_->bad_merges.size()), BpeParts::kBadMerge, 0, 0});
        parts_->bad_merges.push_back(v.dump().substr(0, 80));
      }
    } while (Eat(','));
    return Eat(']') || Fail("expected ',' or ']'");
  }

  void AddMerge(std::string_view a, std::string_view b) {
    std::string& arena = parts_->arena;
    const uint32_t ao = static_cast<uint32_t>(arena.size());
    arena.append(a.data(), a.size());
    const uint32_t bo = static_cast<uint32_t>(arena.size());
    arena.append(b.data(), b.size());
    parts_->merges.push_back(
        {ao, static_cast<uint32_t>(a.size()), bo, static_cast<uint32_t>(b.size())});
  }

  std::string_view s_;
  BpeParts* parts_;
  size_t pos_ = 0;
  std::string error_;
};

}  // namespace

absl::StatusOr<nlohmann::json> ReadTokenizerJson(std::string_view text, const std::string& file,
                                                 BpeParts* parts) {
  *parts = BpeParts();
  Reader r(text, parts);
  nlohmann::json out;
  if (!r.Document(&out)) {
    return absl::InvalidArgumentError(
        absl::StrCat(file, ": not valid JSON at byte ", r.pos(), ": ", r.error()));
  }
  return out;
}

}  // namespace flatstate::hf
