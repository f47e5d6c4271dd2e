#include "engine/tokenizer/hf/hf_tokenizer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/byte_tokenizer.h"
#include "engine/tokenizer/hf/json_reader.h"
#include "engine/tokenizer/hf/text_util.h"
#include "engine/util/read_file.h"
#include "engine/util/status_macros.h"
#include "nlohmann/json.hpp"

namespace flatstate {
namespace {

// A regular file mapped read-only (the page cache's pages, no copy); empty when it cannot be.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    struct stat st;
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
      void* p = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ,
                       MAP_PRIVATE | MAP_POPULATE, fd, 0);
      if (p != MAP_FAILED) data_ = static_cast<const char*>(p), size_ = st.st_size;
    }
    ::close(fd);
  }
  ~MappedFile() {
    if (data_ != nullptr) ::munmap(const_cast<char*>(data_), size_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  bool ok() const { return data_ != nullptr; }
  std::string_view text() const { return {data_, size_}; }

 private:
  const char* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<HfTokenizer>> HfTokenizer::FromFile(const std::string& path) {
  // tokenizer.json is tens of megabytes at most: mapped rather than copied; read (which also
  // words the errors) when it cannot be mapped.
  MappedFile mapped(path);
  std::string read;
  if (!mapped.ok()) {
    auto text = ReadWholeFile(path);
    if (!text.ok()) return text.status();
    read = std::move(*text);
  }
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  auto config = hf::TokenizerConfig::LoadDir(dir);
  if (!config.ok()) return config.status();
  return FromJson(mapped.ok() ? mapped.text() : std::string_view(read), path, std::move(*config));
}

absl::StatusOr<std::unique_ptr<HfTokenizer>> HfTokenizer::FromJson(std::string_view json,
                                                                   const std::string& file,
                                                                   hf::TokenizerConfig config) {
  hf::BpeParts parts;
  auto doc = hf::ReadTokenizerJson(json, file, &parts);
  if (!doc.ok()) return doc.status();
  const nlohmann::json& j = *doc;
  if (!j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": not a JSON object"));
  }
  const std::string at = file + ": ";
  static const nlohmann::json* const kNull = new nlohmann::json();
  const auto field = [&](const char* key) -> const nlohmann::json& {
    auto it = j.find(key);
    return it == j.end() ? *kNull : *it;
  };
  std::unique_ptr<HfTokenizer> t(new HfTokenizer());
  t->config_ = std::move(config);
  const nlohmann::json& model = field("model");
  if (!model.is_object()) return absl::InvalidArgumentError(at + "model: missing or not an object");
  ASSIGN_OR_RETURN(const std::string type, hf::OptionalString(model, "type", "BPE", at + "model"));
  if (type != "BPE") {
    return absl::InvalidArgumentError(
        absl::StrCat(at, "model.type: unsupported model \"", type, "\" (only BPE)"));
  }
  auto bpe = hf::BpeModel::FromJson(model, at + "model", &parts);
  if (!bpe.ok()) return bpe.status();
  t->model_ = std::move(*bpe);
  auto norm = hf::Normalizer::FromJson(field("normalizer"), at + "normalizer");
  if (!norm.ok()) return norm.status();
  t->normalizer_ = std::move(*norm);
  auto pre = hf::PreTokenizer::FromJson(field("pre_tokenizer"), at + "pre_tokenizer");
  if (!pre.ok()) return pre.status();
  t->pre_tokenizer_ = std::move(*pre);
  auto added = hf::AddedVocabulary::FromJson(field("added_tokens"), at + "added_tokens",
                                             t->normalizer_.get());
  if (!added.ok()) return added.status();
  t->added_ = std::move(*added);
  auto dec = hf::Decoder::FromJson(field("decoder"), at + "decoder");
  if (!dec.ok()) return dec.status();
  t->decoder_ = std::move(*dec);
  auto post = hf::PostProcessor::FromJson(field("post_processor"), at + "post_processor");
  if (!post.ok()) return post.status();
  t->post_ = std::move(*post);

  t->vocab_size_ = t->model_->id_end();
  for (const hf::AddedToken& a : t->added_->tokens()) {
    t->vocab_size_ = std::max(t->vocab_size_, a.id + 1);
  }
  const auto check_ids = [&](const std::vector<int32_t>& ids) {
    for (int32_t id : ids) {
      if (id < 0 || id >= t->vocab_size_) {
        return absl::InvalidArgumentError(absl::StrCat(at, "post_processor: token id ", id,
                                                       " is outside the vocabulary (",
                                                       t->vocab_size_, ")"));
      }
    }
    return absl::OkStatus();
  };
  absl::Status s = check_ids(t->post_.prefix);
  if (s.ok()) s = check_ids(t->post_.suffix);
  if (!s.ok()) return s;
  const hf::TokenizerConfig& c = t->config_;
  if (!c.bos_token.empty()) t->bos_id_ = t->TokenToId(c.bos_token);
  if (!c.eos_token.empty() && t->TokenToId(c.eos_token) >= 0) {
    t->eos_ids_.push_back(t->TokenToId(c.eos_token));
  }
  if (!t->post_.adds_tokens) {
    if (c.add_bos_token.value_or(false) && t->bos_id_ >= 0) t->post_.prefix = {t->bos_id_};
    if (c.add_eos_token.value_or(false) && !t->eos_ids_.empty()) {
      t->post_.suffix = {t->eos_ids_[0]};
    }
    t->special_from_config_ = !t->post_.prefix.empty() || !t->post_.suffix.empty();
  }
  return t;
}

const std::string* HfTokenizer::IdToToken(int32_t id) const {
  if (const hf::AddedToken* a = added_->Find(id)) return &a->content;
  return model_->IdToToken(id);
}

int32_t HfTokenizer::TokenToId(std::string_view token) const {
  const int32_t id = added_->IdOf(token);
  return id >= 0 ? id : model_->TokenToId(token);
}

absl::StatusOr<std::vector<int32_t>> HfTokenizer::Encode(std::string_view text,
                                                         bool add_special) const {
  return EncodeWithOptions(text, EncodeOptions{.add_special = add_special, .parse_special = false});
}

void HfTokenizer::EncodePiece(hf::Piece piece, std::vector<int32_t>* ids) const {
  std::vector<hf::Piece> pieces;
  pieces.push_back(std::move(piece));
  if (pre_tokenizer_) pre_tokenizer_->PreTokenize(&pieces);
  for (const hf::Piece& p : pieces) model_->Tokenize(p.text, ids);
}

absl::StatusOr<std::vector<int32_t>> HfTokenizer::EncodeWithOptions(
    std::string_view text, const EncodeOptions& options) const {
  std::string valid;
  hf::MakeValidUtf8(text, &valid);
  std::vector<int32_t> ids;
  ids.reserve(valid.size() / 3 + 4);
  if (options.add_special) ids = post_.prefix;
  std::vector<hf::AddedSplit> splits, inner;
  added_->Split(valid, false, options.parse_special, &splits);
  for (const hf::AddedSplit& s : splits) {
    if (s.id >= 0) {
      ids.push_back(s.id);
      continue;
    }
    hf::Piece piece{valid.substr(s.start, s.end - s.start), s.start == 0};
    if (normalizer_) normalizer_->Normalize(&piece.text);
    if (piece.text.empty()) continue;
    if (!added_->has_normalized()) {
      EncodePiece(std::move(piece), &ids);
      continue;
    }
    added_->Split(piece.text, true, options.parse_special, &inner);
    for (const hf::AddedSplit& n : inner) {
      if (n.id >= 0) {
        ids.push_back(n.id);
      } else if (n.end > n.start) {
        EncodePiece({piece.text.substr(n.start, n.end - n.start), piece.at_start && n.start == 0},
                    &ids);
      }
    }
  }
  if (options.add_special) ids.insert(ids.end(), post_.suffix.begin(), post_.suffix.end());
  return ids;
}

std::vector<int32_t> HfTokenizer::SpecialIds() const {
  std::vector<int32_t> ids = Tokenizer::SpecialIds();
  if (added_ != nullptr) {
    for (const hf::AddedToken& t : added_->tokens()) {
      if (t.special) ids.push_back(t.id);
    }
  }
  return ids;
}

std::string HfTokenizer::TokenBytes(int32_t id) const {
  const std::string* t = IdToToken(id);
  return t == nullptr ? std::string() : decoder_->TokenBytes(*t, /*first=*/false);
}

namespace {

// The decoder state (hf_tokenizer.h): "" fresh; one byte 0x80 | S: started, S characters still to
// strip, nothing pending; else (a UTF-8 lead byte first) the pending bytes, started, no strip.
// Anything else is foreign: started, its first 3 bytes as pending bytes.
struct StreamState {
  bool started = false;
  int strip = 0;
  std::string_view pending;
};

StreamState ReadState(const std::string& state, int strip_config) {
  StreamState s;
  s.strip = strip_config;
  if (state.empty()) return s;
  s.started = true;
  const uint8_t h = static_cast<uint8_t>(state[0]);
  if (h >= 0x80 && h <= 0xBF) {
    s.strip = std::min<int>(h & 0x3F, strip_config);
  } else {
    s.strip = 0;
    s.pending = std::string_view(state).substr(0, 3);
  }
  return s;
}

}  // namespace

std::string HfTokenizer::DecodeNext(int32_t id, std::string* state) const {
  StreamState st = ReadState(*state, decoder_->leading_strip());
  const std::string* token = IdToToken(id);
  std::string bytes =
      token == nullptr ? std::string(kReplacementChar) : decoder_->TokenBytes(*token, !st.started);
  const std::string& content = decoder_->leading_strip_content();
  size_t cut = 0;
  while (st.strip > 0 && bytes.compare(cut, content.size(), content) == 0) {
    cut += content.size();
    --st.strip;
  }
  if (cut < bytes.size()) st.strip = 0;
  IncrementalDecoder d = IncrementalDecoder::WithPending(st.pending);
  std::string out;
  for (size_t i = cut; i < bytes.size(); ++i) out += d.Push(static_cast<uint8_t>(bytes[i]));
  // Pending bytes imply something past the strip was emitted, so S is 0 then.
  if (d.has_pending()) {
    *state = d.pending_bytes();
  } else {
    state->assign(1, static_cast<char>(0x80 | st.strip));
  }
  return out;
}

std::string HfTokenizer::DecodeFlush(std::string* state) const {
  const StreamState st = ReadState(*state, 0);
  IncrementalDecoder d = IncrementalDecoder::WithPending(st.pending);
  std::string out = d.Flush();
  state->clear();
  return out;
}

std::string HfTokenizer::DecodeFull(std::span<const int32_t> ids, bool skip_special) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    const hf::AddedToken* a = added_->Find(id);
    if (a != nullptr) {
      if (!(skip_special && a->special)) tokens.push_back(a->content);
    } else if (const std::string* t = model_->IdToToken(id)) {
      tokens.push_back(*t);
    }
  }
  return decoder_->DecodeTokens(tokens);
}

}  // namespace flatstate
