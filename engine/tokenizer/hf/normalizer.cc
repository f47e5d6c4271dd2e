#include "engine/tokenizer/hf/normalizer.h"

#include <cstdlib>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/hf/json_reader.h"
#include "engine/tokenizer/hf/pattern.h"
#include "engine/tokenizer/hf/text_util.h"
#include "engine/util/status_macros.h"
#include "utf8proc.h"

namespace flatstate::hf {
namespace {

class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(int options) : options_(options) {}
  void Normalize(std::string* text) const override {
    bool ascii = true;
    for (char c : *text) ascii &= static_cast<uint8_t>(c) < 0x80;
    if (ascii) return;  // every form leaves ASCII as it is
    utf8proc_uint8_t* out = nullptr;
    const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text->data()),
                                            static_cast<utf8proc_ssize_t>(text->size()), &out,
                                            static_cast<utf8proc_option_t>(options_));
    if (n >= 0) text->assign(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
    std::free(out);
  }

 private:
  int options_;
};

class Lowercase final : public Normalizer {
 public:
  void Normalize(std::string* text) const override {
    std::string out;
    out.reserve(text->size());
    for (size_t i = 0; i < text->size();) {
      char32_t cp;
      i += DecodeUtf8(*text, i, &cp);
      AppendUtf8(static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))), &out);
    }
    *text = std::move(out);
  }
};

class Strip final : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  void Normalize(std::string* text) const override {
    size_t b = 0, e = text->size();
    if (left_) {
      while (b < e) {
        char32_t cp;
        const size_t n = DecodeUtf8(*text, b, &cp);
        if (!IsWhitespace(cp)) break;
        b += n;
      }
    }
    if (right_) {
      while (e > b) {
        size_t s = e - 1;
        while (s > b && (static_cast<uint8_t>((*text)[s]) & 0xC0) == 0x80) --s;
        char32_t cp;
        DecodeUtf8(*text, s, &cp);
        if (!IsWhitespace(cp)) break;
        e = s;
      }
    }
    *text = text->substr(b, e - b);
  }

 private:
  bool left_, right_;
};

class Replace final : public Normalizer {
 public:
  Replace(std::unique_ptr<Pattern> p, std::string content)
      : pattern_(std::move(p)), content_(std::move(content)) {}
  void Normalize(std::string* text) const override {
    std::vector<std::pair<size_t, size_t>> m;
    pattern_->FindAll(*text, &m);
    if (m.empty()) return;
    std::string out;
    size_t prev = 0;
    for (const auto& [s, e] : m) {
      out.append(*text, prev, s - prev);
      out += content_;
      prev = e;
    }
    out.append(*text, prev);
    *text = std::move(out);
  }

 private:
  std::unique_ptr<Pattern> pattern_;
  std::string content_;
};

class Prepend final : public Normalizer {
 public:
  explicit Prepend(std::string p) : prepend_(std::move(p)) {}
  void Normalize(std::string* text) const override {
    if (text->empty()) return;
    std::string out;
    out.reserve(prepend_.size() + text->size());
    out.append(prepend_);
    out.append(*text);
    *text = std::move(out);
  }

 private:
  std::string prepend_;
};

class Sequence final : public Normalizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Normalizer>> n) : items_(std::move(n)) {}
  void Normalize(std::string* text) const override {
    for (const auto& n : items_) n->Normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> items_;
};

absl::StatusOr<std::string> GetString(const nlohmann::json& j, const char* key,
                                      const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ".", key, ": missing or not a string"));
  }
  return it->get<std::string>();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Normalizer>> Normalizer::FromJson(const nlohmann::json& j,
                                                                 const std::string& where) {
  if (j.is_null()) return nullptr;
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ".type: missing or not a string"));
  }
  const std::string type = j["type"].get<std::string>();
  const int stable = UTF8PROC_STABLE;
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(stable | UTF8PROC_COMPOSE);
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(stable | UTF8PROC_DECOMPOSE);
  if (type == "NFKC") {
    return std::make_unique<UnicodeNormalizer>(stable | UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
  }
  if (type == "NFKD") {
    return std::make_unique<UnicodeNormalizer>(stable | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
  }
  if (type == "Lowercase") return std::make_unique<Lowercase>();
  if (type == "Strip" || type == "StripNormalizer") {
    ASSIGN_OR_RETURN(const bool left, OptionalBool(j, "strip_left", true, where));
    ASSIGN_OR_RETURN(const bool right, OptionalBool(j, "strip_right", true, where));
    return std::make_unique<Strip>(left, right);
  }
  if (type == "Prepend") {
    auto p = GetString(j, "prepend", where);
    if (!p.ok()) return p.status();
    return std::make_unique<Prepend>(*p);
  }
  if (type == "Replace") {
    auto content = GetString(j, "content", where);
    if (!content.ok()) return content.status();
    auto pattern = Pattern::FromJson(j.contains("pattern") ? j["pattern"] : nlohmann::json(),
                                     where + ".pattern");
    if (!pattern.ok()) return pattern.status();
    return std::make_unique<Replace>(std::move(*pattern), *content);
  }
  if (type == "Sequence") {
    auto it = j.find("normalizers");
    if (it == j.end() || !it->is_array()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ".normalizers: missing or not a list"));
    }
    std::vector<std::unique_ptr<Normalizer>> items;
    for (size_t i = 0; i < it->size(); ++i) {
      auto n = FromJson((*it)[i], absl::StrCat(where, ".normalizers[", i, "]"));
      if (!n.ok()) return n.status();
      if (*n) items.push_back(std::move(*n));
    }
    return std::make_unique<Sequence>(std::move(items));
  }
  return absl::InvalidArgumentError(
      absl::StrCat(where, ".type: unsupported normalizer \"", type, "\""));
}

}  // namespace flatstate::hf
