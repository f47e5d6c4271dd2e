#include "engine/tokenizer/hf/json_reader.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/hf/json_string.h"

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
    const char* const data = s_.data();
    const size_t n = s_.size();
    size_t p = pos_;
    while (p < n && (data[p] == ' ' || data[p] == '\n' || data[p] == '\r' || data[p] == '\t')) ++p;
    pos_ = p;
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

  // A string at pos_ (json_string.h): a view of the text when it has no escapes, else of
  // scratch_ (valid until the next string).
  bool StringView(std::string_view* out) {
    JsonStringScanner scan(s_, pos_, &scratch_);
    const bool ok = scan.Read(out);
    pos_ = scan.pos();
    return ok || Fail(scan.error());
  }
  bool String(std::string* out) {
    std::string_view v;
    if (!StringView(&v)) return false;
    out->assign(v.data(), v.size());
    return true;
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
    std::string_view key;
    do {
      Ws();
      if (!StringView(&key)) return false;
      if (!Eat(':')) return Fail("expected ':'");
      Ws();
      int32_t id;
      if (SmallId(&id)) {
        parts_->AddToken(key, id);
        continue;
      }
      const std::string owned(key);  // scratch_ may be reused by the value
      nlohmann::json v;
      if (!Value(&v, depth + 1, kOther)) return false;
      parts_->AddToken(owned, v);
    } while (Eat(','));
    return Eat('}') || Fail("expected ',' or '}'");
  }

  // A plain decimal integer in [0, 2^24) at pos_ (what Number would read as that integer);
  // leaves pos_ alone and returns false for anything else.
  bool SmallId(int32_t* id) {
    size_t p = pos_;
    uint32_t v = 0;
    while (p < s_.size() && p - pos_ < 9 && s_[p] >= '0' && s_[p] <= '9') {
      v = v * 10 + static_cast<uint32_t>(s_[p] - '0');
      ++p;
    }
    if (p == pos_ || p - pos_ > 8 || (s_[pos_] == '0' && p - pos_ > 1) || v >= (1u << 24)) {
      return false;
    }
    if (p < s_.size()) {
      const char c = s_[p];
      if ((c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-') {
        return false;
      }
    }
    pos_ = p;
    *id = static_cast<int32_t>(v);
    return true;
  }

  bool Merges(int depth) {
    parts_->merges_captured = true;
    ++pos_;
    if (Eat(']')) return true;
    std::string& arena = parts_->arena;
    std::string_view a, b;
    do {
      Ws();
      const size_t start = pos_;
      const char c = pos_ < s_.size() ? s_[pos_] : '\0';
      bool ok = false;
      if (c == '"') {
        if (!StringView(&a)) return false;
        const size_t sp = a.find(' ');
        if (sp != std::string_view::npos) {
          const size_t mark = arena.size();
          arena.append(a.data(), sp);
          AddMerge(mark, sp, a.substr(sp + 1));
          ok = true;
        }
      } else if (c == '[') {
        ++pos_;
        Ws();
        const size_t mark = arena.size();
        if (StringView(&a)) {
          arena.append(a.data(), a.size());  // before b reuses scratch_
          if (Eat(',') && (Ws(), StringView(&b)) && Eat(']')) {
            AddMerge(mark, a.size(), b);
            ok = true;
          }
        }
        if (!ok) {
          arena.resize(mark);
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

  // A merge whose first half is arena[a, a + a_len), the arena's end, and whose second half is
  // b, appended after it.
  void AddMerge(size_t a, size_t a_len, std::string_view b) {
    const size_t bo = a + a_len;
    parts_->merges.push_back({static_cast<uint32_t>(a), static_cast<uint32_t>(a_len),
                              static_cast<uint32_t>(bo), static_cast<uint32_t>(b.size())});
    parts_->arena.append(b.data(), b.size());
  }

  std::string_view s_;
  BpeParts* parts_;
  size_t pos_ = 0;
  std::string error_;
  std::string scratch_;
};

}  // namespace

void BpeParts::AddToken(std::string_view key, const nlohmann::json& value) {
  if (value.is_number_integer() && value.get<int64_t>() >= 0 &&
      value.get<int64_t>() < (int64_t{1} << 24)) {
    AddToken(key, value.get<int32_t>());
  } else if (!vocab_bad) {
    vocab_bad = true;
    bad_key = std::string(key);
    bad_value = value.dump();
  }
}

absl::StatusOr<nlohmann::json> ReadTokenizerJson(std::string_view text, const std::string& file,
                                                 BpeParts* parts) {
  *parts = BpeParts();
  if (text.size() >= (uint64_t{1} << 32)) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": too large (4 GiB or more)"));
  }
  // Token strings are never longer than their JSON text: reserving the text's size (virtual
  // memory, touched only as written) spares the arena's regrowth copies.
  parts->arena.reserve(text.size());
  Reader r(text, parts);
  nlohmann::json out;
  if (!r.Document(&out)) {
    return absl::InvalidArgumentError(
        absl::StrCat(file, ": not valid JSON at byte ", r.pos(), ": ", r.error()));
  }
  return out;
}

namespace {

// The field `key` of `j` when it is present and not null; nullptr otherwise.
const nlohmann::json* PresentField(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

}  // namespace

absl::StatusOr<std::string> OptionalString(const nlohmann::json& j, const char* key,
                                           std::string dflt, const std::string& where) {
  const nlohmann::json* f = PresentField(j, key);
  if (f == nullptr) return dflt;
  if (!f->is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".", key, ": expected a string, got ", f->type_name()));
  }
  return f->get<std::string>();
}

absl::StatusOr<bool> OptionalBool(const nlohmann::json& j, const char* key, bool dflt,
                                  const std::string& where) {
  const nlohmann::json* f = PresentField(j, key);
  if (f == nullptr) return dflt;
  if (!f->is_boolean()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".", key, ": expected a boolean, got ", f->type_name()));
  }
  return f->get<bool>();
}

}  // namespace flatstate::hf
