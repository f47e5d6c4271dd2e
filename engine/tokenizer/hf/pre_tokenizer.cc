#include "engine/tokenizer/hf/pre_tokenizer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/hf/json_reader.h"
#include "engine/tokenizer/hf/pattern.h"
#include "engine/tokenizer/hf/text_util.h"
#include "engine/util/status_macros.h"

namespace flatstate::hf {
namespace {

// GPT-2's pre-tokenization regex, as ByteLevel(use_regex) applies it.
constexpr std::string_view kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string PrefixWith(std::string_view prefix, const std::string& s) {
  std::string out;
  out.reserve(prefix.size() + s.size());
  out.append(prefix.data(), prefix.size());
  out.append(s);
  return out;
}

// Splits every piece by `pattern` with `behavior` (the upstream NormalizedString::split).
void SplitPieces(const Pattern& pattern, bool invert, SplitBehavior behavior,
                 std::vector<Piece>* pieces) {
  std::vector<Piece> out;
  out.reserve(pieces->size());
  std::vector<Span> spans;
  std::vector<std::pair<size_t, size_t>> parts;
  for (Piece& p : *pieces) {
    pattern.FindMatches(p.text, invert, &spans);
    ApplyBehavior(spans, behavior, &parts);
    if (parts.size() == 1 && parts[0].first == 0 && parts[0].second == p.text.size()) {
      out.push_back(std::move(p));
      continue;
    }
    for (const auto& [s, e] : parts) {
      out.push_back({p.text.substr(s, e - s), p.at_start && s == 0});
    }
  }
  *pieces = std::move(out);
}

class ByteLevel final : public PreTokenizer {
 public:
  ByteLevel(bool add_prefix_space, std::unique_ptr<Pattern> regex)
      : add_prefix_space_(add_prefix_space), regex_(std::move(regex)) {}
  void PreTokenize(std::vector<Piece>* pieces) const override {
    if (add_prefix_space_) {
      for (Piece& p : *pieces) {
        if (p.text.empty() || p.text[0] != ' ') p.text = PrefixWith(" ", p.text);
      }
    }
    if (regex_) SplitPieces(*regex_, false, SplitBehavior::kIsolated, pieces);
    for (Piece& p : *pieces) {
      std::string mapped;
      mapped.reserve(p.text.size() * 2);
      for (char c : p.text) mapped += ByteToChar(static_cast<uint8_t>(c));
      p.text = std::move(mapped);
    }
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Pattern> regex_;
};

class Split final : public PreTokenizer {
 public:
  Split(std::unique_ptr<Pattern> p, SplitBehavior b, bool invert)
      : pattern_(std::move(p)), behavior_(b), invert_(invert) {}
  void PreTokenize(std::vector<Piece>* pieces) const override {
    SplitPieces(*pattern_, invert_, behavior_, pieces);
  }

 private:
  std::unique_ptr<Pattern> pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

enum class Prepend { kAlways, kFirst, kNever };

class Metaspace final : public PreTokenizer {
 public:
  Metaspace(std::string replacement, Prepend scheme, bool split)
      : replacement_(std::move(replacement)),
        scheme_(scheme),
        split_(split),
        pattern_(Pattern::Literal(replacement_)) {}
  void PreTokenize(std::vector<Piece>* pieces) const override {
    for (Piece& p : *pieces) {
      std::string out;
      for (char c : p.text) {
        if (c == ' ') {
          out += replacement_;
        } else {
          out.push_back(c);
        }
      }
      const bool starts = out.compare(0, replacement_.size(), replacement_) == 0;
      if (!starts && (scheme_ == Prepend::kAlways || (scheme_ == Prepend::kFirst && p.at_start))) {
        out = PrefixWith(replacement_, out);
      }
      p.text = std::move(out);
    }
    if (split_) SplitPieces(*pattern_, false, SplitBehavior::kMergedWithNext, pieces);
  }

 private:
  std::string replacement_;
  Prepend scheme_;
  bool split_;
  std::unique_ptr<Pattern> pattern_;
};

class Sequence final : public PreTokenizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<PreTokenizer>> items) : items_(std::move(items)) {}
  void PreTokenize(std::vector<Piece>* pieces) const override {
    for (const auto& p : items_) p->PreTokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> items_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizer::FromJson(const nlohmann::json& j,
                                                                     const std::string& where) {
  if (j.is_null()) return nullptr;
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ".type: missing or not a string"));
  }
  const std::string type = j["type"].get<std::string>();
  if (type == "ByteLevel") {
    std::unique_ptr<Pattern> re;
    ASSIGN_OR_RETURN(const bool use_regex, OptionalBool(j, "use_regex", true, where));
    ASSIGN_OR_RETURN(const bool add_prefix_space, OptionalBool(j, "add_prefix_space", true, where));
    if (use_regex) {
      auto r = Pattern::Regex(kGpt2Regex);
      if (!r.ok()) return r.status();
      re = std::move(*r);
    }
    return std::make_unique<ByteLevel>(add_prefix_space, std::move(re));
  }
  if (type == "Split") {
    auto pattern = Pattern::FromJson(j.contains("pattern") ? j["pattern"] : nlohmann::json(),
                                     where + ".pattern");
    if (!pattern.ok()) return pattern.status();
    auto behavior = ParseBehavior(j.value("behavior", nlohmann::json()), where + ".behavior");
    if (!behavior.ok()) return behavior.status();
    ASSIGN_OR_RETURN(const bool invert, OptionalBool(j, "invert", false, where));
    return std::make_unique<Split>(std::move(*pattern), *behavior, invert);
  }
  if (type == "Metaspace") {
    std::string rep = "\xE2\x96\x81";
    if (auto it = j.find("replacement"); it != j.end()) {
      std::string r = it->is_string() ? it->get<std::string>() : "";
      char32_t cp;
      if (r.empty() || DecodeUtf8(r, 0, &cp) != r.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ".replacement: must be one character, got ", it->dump()));
      }
      rep = r;
    }
    ASSIGN_OR_RETURN(const bool add_prefix_space, OptionalBool(j, "add_prefix_space", true, where));
    ASSIGN_OR_RETURN(const bool split, OptionalBool(j, "split", true, where));
    Prepend scheme = add_prefix_space ? Prepend::kAlways : Prepend::kNever;
    if (auto it = j.find("prepend_scheme"); it != j.end() && !it->is_null()) {
      const std::string s = it->is_string() ? it->get<std::string>() : "";
      if (s == "always") {
        scheme = Prepend::kAlways;
      } else if (s == "first") {
        scheme = Prepend::kFirst;
      } else if (s == "never") {
        scheme = Prepend::kNever;
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ".prepend_scheme: unknown value ", it->dump()));
      }
    }
    return std::make_unique<Metaspace>(rep, scheme, split);
  }
  if (type == "Digits") {
    auto p = Pattern::CharClass(IsNumeric);
    ASSIGN_OR_RETURN(const bool individual, OptionalBool(j, "individual_digits", false, where));
    return std::make_unique<Split>(
        std::move(p), individual ? SplitBehavior::kIsolated : SplitBehavior::kContiguous, false);
  }
  if (type == "Punctuation") {
    auto behavior = j.contains("behavior")
                        ? ParseBehavior(j["behavior"], where + ".behavior")
                        : absl::StatusOr<SplitBehavior>(SplitBehavior::kIsolated);
    if (!behavior.ok()) return behavior.status();
    return std::make_unique<Split>(Pattern::CharClass(IsPunctuation), *behavior, false);
  }
  if (type == "Whitespace") {
    auto r = Pattern::Regex(R"(\w+|[^\w\s]+)");
    if (!r.ok()) return r.status();
    return std::make_unique<Split>(std::move(*r), SplitBehavior::kRemoved, true);
  }
  if (type == "WhitespaceSplit") {
    return std::make_unique<Split>(Pattern::CharClass(IsWhitespace), SplitBehavior::kRemoved,
                                   false);
  }
  if (type == "BertPreTokenizer") {
    std::vector<std::unique_ptr<PreTokenizer>> items;
    items.push_back(
        std::make_unique<Split>(Pattern::CharClass(IsWhitespace), SplitBehavior::kRemoved, false));
    items.push_back(std::make_unique<Split>(Pattern::CharClass(IsPunctuation),
                                            SplitBehavior::kIsolated, false));
    return std::make_unique<Sequence>(std::move(items));
  }
  if (type == "Sequence") {
    auto it = j.find("pretokenizers");
    if (it == j.end() || !it->is_array()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".pretokenizers: missing or not a list"));
    }
    std::vector<std::unique_ptr<PreTokenizer>> items;
    for (size_t i = 0; i < it->size(); ++i) {
      auto p = FromJson((*it)[i], absl::StrCat(where, ".pretokenizers[", i, "]"));
      if (!p.ok()) return p.status();
      if (*p) items.push_back(std::move(*p));
    }
    return std::make_unique<Sequence>(std::move(items));
  }
  return absl::InvalidArgumentError(
      absl::StrCat(where, ".type: unsupported pre-tokenizer \"", type, "\""));
}

}  // namespace flatstate::hf
