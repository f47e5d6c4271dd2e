#include "engine/tokenizer/hf/decoder.h"

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/byte_tokenizer.h"
#include "engine/tokenizer/hf/json_reader.h"
#include "engine/tokenizer/hf/text_util.h"
#include "engine/util/status_macros.h"

namespace flatstate::hf {
namespace {

// <0xNN> -> NN, else -1.
int ByteToken(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  int v = 0;
  for (char c : t.substr(3, 2)) {
    v <<= 4;
    if (c >= '0' && c <= '9') {
      v |= c - '0';
    } else if (c >= 'A' && c <= 'F') {
      v |= c - 'A' + 10;
    } else if (c >= 'a' && c <= 'f') {
      v |= c - 'a' + 10;
    } else {
      return -1;
    }
  }
  return v;
}

std::string ByteLevelBytes(std::string_view t) {
  std::string out;
  out.reserve(t.size());
  for (size_t i = 0; i < t.size();) {
    char32_t cp;
    i += DecodeUtf8(t, i, &cp);
    const int b = CharToByte(cp);
    if (b < 0) return std::string(t);
    out.push_back(static_cast<char>(b));
  }
  return out;
}

std::string ReplaceAll(const Pattern& p, std::string_view t, const std::string& content) {
  std::vector<std::pair<size_t, size_t>> m;
  p.FindAll(t, &m);
  if (m.empty()) return std::string(t);
  std::string out;
  size_t prev = 0;
  for (const auto& [s, e] : m) {
    out.append(t.substr(prev, s - prev));
    out += content;
    prev = e;
  }
  out.append(t.substr(prev));
  return out;
}

std::string MetaspaceToken(std::string_view t, const std::string& rep, bool drop) {
  std::string out;
  for (size_t i = 0; i < t.size();) {
    if (t.compare(i, rep.size(), rep) == 0) {
      if (!drop) out.push_back(' ');
      i += rep.size();
    } else {
      out.push_back(t[i++]);
    }
  }
  return out;
}

std::string StripToken(std::string_view t, const std::string& content, int start, int stop) {
  size_t b = 0, e = t.size();
  for (int k = 0; k < start && t.compare(b, content.size(), content) == 0 && b < e; ++k) {
    b += content.size();
  }
  for (int k = 0; k < stop && e - b >= content.size() &&
                  t.compare(e - content.size(), content.size(), content) == 0;
       ++k) {
    e -= content.size();
  }
  return std::string(t.substr(b, e - b));
}

std::string Lossy(std::string_view bytes) {
  std::string out;
  MakeValidUtf8(bytes, &out);
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Decoder>> Decoder::FromJson(const nlohmann::json& j,
                                                           const std::string& where) {
  std::unique_ptr<Decoder> d(new Decoder());
  if (j.is_null()) {
    d->none_ = true;
    return d;
  }
  absl::Status s = d->Add(j, where);
  if (!s.ok()) return s;
  bool fused = false;
  for (const Step& st : d->steps_) {
    if (st.kind == Kind::kFuse || st.kind == Kind::kByteLevel) fused = true;
    if (st.kind == Kind::kStrip && fused && d->leading_strip_ == 0) {
      d->leading_strip_ = st.start;
      d->leading_strip_content_ = st.a;
    }
  }
  return d;
}

absl::Status Decoder::Add(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ".type: missing or not a string"));
  }
  const std::string type = j["type"].get<std::string>();
  Step st;
  if (type == "Sequence") {
    auto it = j.find("decoders");
    if (it == j.end() || !it->is_array()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ".decoders: missing or not a list"));
    }
    for (size_t i = 0; i < it->size(); ++i) {
      absl::Status s = Add((*it)[i], absl::StrCat(where, ".decoders[", i, "]"));
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  } else if (type == "ByteLevel") {
    st.kind = Kind::kByteLevel;
  } else if (type == "ByteFallback") {
    st.kind = Kind::kByteFallback;
  } else if (type == "Fuse") {
    st.kind = Kind::kFuse;
  } else if (type == "Metaspace") {
    st.kind = Kind::kMetaspace;
    ASSIGN_OR_RETURN(st.a, OptionalString(j, "replacement", "\xE2\x96\x81", where));
    ASSIGN_OR_RETURN(const bool add, OptionalBool(j, "add_prefix_space", true, where));
    const std::string scheme = j.contains("prepend_scheme") && j["prepend_scheme"].is_string()
                                   ? j["prepend_scheme"].get<std::string>()
                                   : (add ? "always" : "never");
    st.prepend = scheme != "never";
    if (st.a.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ".replacement: empty"));
    }
  } else if (type == "Strip") {
    st.kind = Kind::kStrip;
    auto c = j.find("content");
    if (c == j.end() || !c->is_string() || c->get<std::string>().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ".content: missing or empty"));
    }
    st.a = c->get<std::string>();
    const auto count = [&](const char* key) {
      auto it = j.find(key);
      return it != j.end() && it->is_number_unsigned() ? std::min<int>(it->get<int64_t>(), 64) : 0;
    };
    st.start = count("start");
    st.stop = count("stop");
  } else if (type == "Replace") {
    st.kind = Kind::kReplace;
    auto c = j.find("content");
    if (c == j.end() || !c->is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ".content: missing or not a string"));
    }
    st.b = c->get<std::string>();
    auto p = Pattern::FromJson(j.contains("pattern") ? j["pattern"] : nlohmann::json(),
                               where + ".pattern");
    if (!p.ok()) return p.status();
    st.pattern = std::move(*p);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".type: unsupported decoder \"", type, "\""));
  }
  steps_.push_back(std::move(st));
  return absl::OkStatus();
}

std::string Decoder::DecodeTokens(const std::vector<std::string>& in) const {
  std::string out;
  if (none_) {
    for (size_t i = 0; i < in.size(); ++i) absl::StrAppend(&out, i ? " " : "", in[i]);
    return out;
  }
  std::vector<std::string> t = in;
  for (const Step& st : steps_) {
    std::vector<std::string> next;
    switch (st.kind) {
      case Kind::kByteLevel: {
        std::string bytes;
        for (const auto& s : t) bytes += ByteLevelBytes(s);
        next.push_back(Lossy(bytes));
        break;
      }
      case Kind::kFuse: {
        std::string all;
        for (const auto& s : t) all += s;
        next.push_back(std::move(all));
        break;
      }
      case Kind::kMetaspace:
        for (size_t i = 0; i < t.size(); ++i) {
          next.push_back(MetaspaceToken(t[i], st.a, i == 0 && st.prepend));
        }
        break;
      case Kind::kReplace:
        for (const auto& s : t) next.push_back(ReplaceAll(*st.pattern, s, st.b));
        break;
      case Kind::kStrip:
        for (const auto& s : t) next.push_back(StripToken(s, st.a, st.start, st.stop));
        break;
      case Kind::kByteFallback: {
        std::string run;
        const auto flush = [&] {
          if (run.empty()) return;
          std::string fixed;
          if (!MakeValidUtf8(run, &fixed)) {
            next.push_back(run);
          } else {
            for (size_t k = 0; k < run.size(); ++k) next.emplace_back(kReplacementChar);
          }
          run.clear();
        };
        for (const auto& s : t) {
          const int b = ByteToken(s);
          if (b >= 0) {
            run.push_back(static_cast<char>(b));
          } else {
            flush();
            next.push_back(s);
          }
        }
        flush();
        break;
      }
    }
    t = std::move(next);
  }
  for (const auto& s : t) out += s;
  return out;
}

std::string Decoder::TokenBytes(std::string_view token, bool first) const {
  if (none_) {
    std::string out = first ? "" : " ";
    out.append(token.data(), token.size());
    return out;
  }
  std::string t(token);
  bool fused = false;
  for (const Step& st : steps_) {
    switch (st.kind) {
      case Kind::kByteLevel:
        t = ByteLevelBytes(t);
        fused = true;
        break;
      case Kind::kFuse:
        fused = true;
        break;
      case Kind::kMetaspace:
        t = MetaspaceToken(t, st.a, first && st.prepend);
        break;
      case Kind::kReplace:
        t = ReplaceAll(*st.pattern, t, st.b);
        break;
      case Kind::kStrip:
        if (!fused) t = StripToken(t, st.a, st.start, st.stop);
        break;
      case Kind::kByteFallback:
        if (const int b = ByteToken(t); b >= 0) t.assign(1, static_cast<char>(b));
        break;
    }
  }
  return t;
}

}  // namespace flatstate::hf
