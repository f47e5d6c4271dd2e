#include "engine/tokenizer/rwkv_world_tokenizer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/byte_tokenizer.h"
#include "engine/tokenizer/hf/text_util.h"
#include "engine/util/read_file.h"

namespace flatstate {
namespace {

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

absl::StatusOr<std::string> ParsePythonLiteral(std::string_view lit) {
  bool bytes = false;
  if (!lit.empty() && (lit[0] == 'b' || lit[0] == 'B')) {
    bytes = true;
    lit.remove_prefix(1);
  }
  if (lit.size() < 2 || (lit[0] != '\'' && lit[0] != '"') || lit.back() != lit[0]) {
    return absl::InvalidArgumentError("not a quoted Python literal");
  }
  const char quote = lit[0];
  const std::string_view body = lit.substr(1, lit.size() - 2);
  std::string out;
  for (size_t i = 0; i < body.size();) {
    const char c = body[i];
    if (c == quote) return absl::InvalidArgumentError("unescaped quote inside the literal");
    if (c != '\\') {
      if (bytes && static_cast<uint8_t>(c) >= 0x80) {
        return absl::InvalidArgumentError("non-ASCII character in a bytes literal");
      }
      out.push_back(c);
      ++i;
      continue;
    }
    if (i + 1 >= body.size()) return absl::InvalidArgumentError("trailing backslash");
    const char e = body[i + 1];
    i += 2;
    const auto hex = [&](int n, uint32_t* v) {
      if (i + n > body.size()) return false;
      *v = 0;
      for (int k = 0; k < n; ++k) {
        const int d = HexDigit(body[i + k]);
        if (d < 0) return false;
        *v = *v * 16 + d;
      }
      i += n;
      return true;
    };
    uint32_t v = 0;
    switch (e) {
      case '\\':
        out.push_back('\\');
        break;
      case '\'':
        out.push_back('\'');
        break;
      case '"':
        out.push_back('"');
        break;
      case 'n':
        out.push_back('\n');
        break;
      case 'r':
        out.push_back('\r');
        break;
      case 't':
        out.push_back('\t');
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
      case 'x':
        if (!hex(2, &v)) return absl::InvalidArgumentError("bad \\x escape");
        if (bytes) {
          out.push_back(static_cast<char>(v));
        } else {
          hf::AppendUtf8(v, &out);
        }
        break;
      case 'u':
      case 'U':
        if (bytes) return absl::InvalidArgumentError("\\u escape in a bytes literal");
        if (!hex(e == 'u' ? 4 : 8, &v) || v > 0x10FFFF || (v >= 0xD800 && v < 0xE000)) {
          return absl::InvalidArgumentError("bad \\u escape");
        }
        hf::AppendUtf8(v, &out);
        break;
      default:
        if (e >= '0' && e <= '7') {  // octal, up to 3 digits
          v = e - '0';
          for (int k = 0; k < 2 && i < body.size() && body[i] >= '0' && body[i] <= '7'; ++k) {
            v = v * 8 + (body[i++] - '0');
          }
          if (bytes) {
            out.push_back(static_cast<char>(v & 0xFF));
          } else {
            hf::AppendUtf8(v, &out);
          }
        } else {
          out.push_back('\\');  // Python keeps unknown escapes as they are
          out.push_back(e);
        }
    }
  }
  return out;
}

absl::StatusOr<std::unique_ptr<RwkvWorldTokenizer>> RwkvWorldTokenizer::Load(
    const std::string& path) {
  auto text = ReadWholeFile(path);
  if (!text.ok()) return text.status();
  return Parse(*text, path);
}

absl::StatusOr<std::unique_ptr<RwkvWorldTokenizer>> RwkvWorldTokenizer::Parse(
    std::string_view text, const std::string& file) {
  std::unique_ptr<RwkvWorldTokenizer> t(new RwkvWorldTokenizer());
  t->tokens_.assign(kVocabSize, std::string());
  t->token_at_.push_back(-1);
  size_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const auto err = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat(file, ":", line_no, ": ", why));
    };
    const size_t first = line.find(' '), last = line.rfind(' ');
    if (first == std::string_view::npos || first == last) {
      return err("expected '<id> <literal> <length>'");
    }
    int64_t id = 0, len = 0;
    for (char c : line.substr(0, first)) {
      if (c < '0' || c > '9' || id > kVocabSize) return err("bad id");
      id = id * 10 + (c - '0');
    }
    for (char c : line.substr(last + 1)) {
      if (c < '0' || c > '9' || len > 1 << 20) return err("bad length");
      len = len * 10 + (c - '0');
    }
    if (first == 0 || last + 1 == line.size()) return err("expected '<id> <literal> <length>'");
    if (id < 1 || id >= kVocabSize) {
      return err(absl::StrCat("id ", id, " is outside [1, ", kVocabSize, ")"));
    }
    auto bytes = ParsePythonLiteral(line.substr(first + 1, last - first - 1));
    if (!bytes.ok()) return err(bytes.status().message());
    if (static_cast<int64_t>(bytes->size()) != len || bytes->empty()) {
      return err(absl::StrCat("the literal is ", bytes->size(), " bytes, the line says ", len));
    }
    if (!t->tokens_[id].empty()) return err(absl::StrCat("id ", id, " appears twice"));
    int32_t node = 0;
    for (char c : *bytes) {
      const uint64_t key = (static_cast<uint64_t>(node) << 8) | static_cast<uint8_t>(c);
      auto [it, inserted] = t->edges_.try_emplace(key, static_cast<int32_t>(t->token_at_.size()));
      if (inserted) t->token_at_.push_back(-1);
      node = it->second;
    }
    if (t->token_at_[node] >= 0) return err("the same bytes appear under two ids");
    t->token_at_[node] = static_cast<int32_t>(id);
    t->tokens_[id] = std::move(*bytes);
    t->max_id_ = std::max(t->max_id_, static_cast<int32_t>(id));
  }
  return t;
}

absl::StatusOr<std::vector<int32_t>> RwkvWorldTokenizer::Encode(std::string_view text,
                                                                bool /*add_special*/) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 1);
  for (size_t i = 0; i < text.size();) {
    int32_t node = 0, best = -1;
    size_t best_end = i;
    for (size_t k = i; k < text.size(); ++k) {
      auto it = edges_.find((static_cast<uint64_t>(node) << 8) | static_cast<uint8_t>(text[k]));
      if (it == edges_.end()) break;
      node = it->second;
      if (token_at_[node] >= 0) best = token_at_[node], best_end = k + 1;
    }
    if (best < 0) {
      return absl::InvalidArgumentError(absl::StrCat("rwkv-world: byte 0x",
                                                     absl::Hex(static_cast<uint8_t>(text[i])),
                                                     " at offset ", i, " has no token"));
    }
    ids.push_back(best);
    i = best_end;
  }
  return ids;
}

std::string RwkvWorldTokenizer::TokenBytes(int32_t id) const {
  return id > 0 && id < kVocabSize ? tokens_[id] : std::string();
}

std::string RwkvWorldTokenizer::DecodeNext(int32_t id, std::string* state) const {
  IncrementalDecoder d = IncrementalDecoder::WithPending(std::string_view(*state).substr(0, 3));
  std::string out;
  if (id < 0 || id >= kVocabSize || (id > 0 && tokens_[id].empty())) {
    out = d.Push(-1);  // ends any pending character, then U+FFFD
  } else {
    for (char c : tokens_[id]) out += d.Push(static_cast<uint8_t>(c));
  }
  *state = d.pending_bytes();
  return out;
}

std::string RwkvWorldTokenizer::DecodeFlush(std::string* state) const {
  IncrementalDecoder d = IncrementalDecoder::WithPending(std::string_view(*state).substr(0, 3));
  state->clear();
  return d.Flush();
}

}  // namespace flatstate
