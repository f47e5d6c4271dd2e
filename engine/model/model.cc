#include "engine/model/model.h"

#include <array>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/arch/architecture.h"
#include "engine/arch/hf_config.h"
#include "engine/model/generation_config.h"
#include "engine/model/weight_files.h"
#include "engine/tokenizer/byte_tokenizer.h"
#include "engine/tokenizer/hf/hf_tokenizer.h"
#include "engine/tokenizer/ids_only_tokenizer.h"
#include "engine/tokenizer/rwkv_world_tokenizer.h"
#include "engine/util/read_file.h"
#include "engine/util/sha256.h"
#include "engine/util/status_macros.h"
#include "nlohmann/json.hpp"

namespace flatstate {
namespace {

// "models/foo/" -> "models/foo"; "/" stays "/".
std::string StripTrailingSlashes(std::string s) {
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

// generation_config.json (Hugging Face; optional): see generation_config.h.
absl::Status ReadGenerationConfig(const std::string& path, ModelConfig* c) {
  absl::StatusOr<std::string> text = ReadWholeFile(path);
  if (absl::IsNotFound(text.status())) return absl::OkStatus();
  RETURN_IF_ERROR(text.status());
  return ApplyGenerationConfig(*text, path, c);
}

// The tokenizer of a model: flatstate's own format is byte-level; a Hugging Face folder with a
// tokenizer.json gets HfTokenizer (its vocabulary must fit the model's), else one with RWKV's
// rwkv_vocab_v20230424.txt RwkvWorldTokenizer (likewise), else it knows its vocabulary size and
// special ids but no text (IdsOnlyTokenizer).
absl::StatusOr<std::unique_ptr<Tokenizer>> MakeTokenizer(const std::string& name,
                                                         const std::string& prefix,
                                                         const ModelConfig& c) {
  if (c.architecture == "flatstate") {
    return std::make_unique<ByteTokenizer>(c.bos_token_id, c.eos_token_ids);
  }
  std::error_code ec;
  if (const std::string world = prefix + "rwkv_vocab_v20230424.txt";
      !std::filesystem::exists(prefix + "tokenizer.json", ec) &&
      std::filesystem::exists(world, ec)) {
    ASSIGN_OR_RETURN(std::unique_ptr<RwkvWorldTokenizer> t, RwkvWorldTokenizer::Load(world));
    if (t->vocab_size() > c.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(world, ": ids reach ", t->vocab_size() - 1,
                                                     " but config.json vocab_size is ",
                                                     c.vocab_size));
    }
    return std::unique_ptr<Tokenizer>(std::move(t));
  }
  const std::string path = prefix + "tokenizer.json";
  if (!std::filesystem::exists(path, ec)) {
    return std::make_unique<IdsOnlyTokenizer>(name, c.vocab_size, c.bos_token_id, c.eos_token_ids);
  }
  ASSIGN_OR_RETURN(std::unique_ptr<HfTokenizer> t, HfTokenizer::FromFile(path));
  if (t->vocab_size() > c.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": vocabulary has ", t->vocab_size(),
                                                   " tokens but config.json vocab_size is ",
                                                   c.vocab_size));
  }
  t->OverrideSpecialIds(c.bos_token_id, c.eos_token_ids);
  return std::unique_ptr<Tokenizer>(std::move(t));
}

}  // namespace

Model::~Model() = default;

size_t TensorStore::bytes() const {
  size_t n = 0;
  for (const auto& v : f32_) n += v.size() * sizeof(float);
  for (const auto& v : bf16_) n += v.size() * sizeof(uint16_t);
  return n;
}

absl::StatusOr<std::unique_ptr<Model>> Model::Load(const std::string& dir) {
  std::unique_ptr<Model> m(new Model());
  m->dir_ = StripTrailingSlashes(dir.empty() ? std::string(".") : dir);
  const size_t slash = m->dir_.find_last_of('/');
  m->name_ = slash == std::string::npos ? m->dir_ : m->dir_.substr(slash + 1);
  const std::string prefix = m->dir_ == "/" ? "/" : m->dir_ + "/";
  const std::string config_path = prefix + "config.json";

  ASSIGN_OR_RETURN(const std::string config_text, ReadWholeFile(config_path));
  // Python's NaN / Infinity literals (transformers writes them) read as strings.
  const nlohmann::json j =
      nlohmann::json::parse(JsonFromPython(config_text), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(config_path, ": not valid JSON"));
  }
  ASSIGN_OR_RETURN(const Architecture* arch, SelectArchitecture(j, config_path));
  ASSIGN_OR_RETURN(m->config_, arch->ParseConfig(config_text, j, config_path, &m->ignored_keys_));
  if (m->config_.architecture != "flatstate") {
    RETURN_IF_ERROR(ReadGenerationConfig(prefix + "generation_config.json", &m->config_));
  }
  ASSIGN_OR_RETURN(m->files_, WeightFiles::Open(prefix));
  RETURN_IF_ERROR(arch->BindWeights(&m->config_, *m->files_, &m->store_, &m->weights_));
  for (const WeightFiles::Found& f : m->files_->All()) m->weight_bytes_ += f.tensor->size_bytes;
  ASSIGN_OR_RETURN(m->tokenizer_, MakeTokenizer(m->name_, prefix, m->config_));
  m->chat_prompt_status_ = absl::NotFoundError(
      absl::StrCat("model '", m->name_, "' has no chat template (no chat_template in ",
                   "tokenizer_config.json, no chat_template.jinja)"));
  if (const auto* hf = dynamic_cast<const HfTokenizer*>(m->tokenizer_.get());
      hf != nullptr && !hf->config().chat_template.empty()) {
    const hf::TokenizerConfig& tc = hf->config();
    absl::StatusOr<std::unique_ptr<ChatPrompt>> p =
        ChatPrompt::Create(m->name_, tc.chat_template, tc.bos_token, tc.eos_token, hf);
    if (p.ok()) {
      m->chat_prompt_ = std::move(*p);
      m->chat_prompt_status_ = absl::OkStatus();
    } else {
      m->chat_prompt_status_ = p.status();
    }
  } else if (const Architecture::ChatFormat f = arch->default_chat_format();
             !f.jinja.empty() && m->tokenizer_->has_text()) {
    // The family's own format (RWKV's), for a tokenizer that ships no template.
    ASSIGN_OR_RETURN(m->chat_prompt_,
                     ChatPrompt::Create(m->name_, f.jinja, "", "", m->tokenizer_.get(), f.stop));
    m->chat_prompt_status_ = absl::OkStatus();
  }

  Sha256 h;
  h.Update(config_text.data(), config_text.size());
  for (const auto& file : m->files_->files()) h.Update(file->file_data(), file->file_size());
  const std::array<uint8_t, 32> digest = h.Final();
  m->fingerprint_ = HexLower(digest.data(), 16);
  return m;
}

}  // namespace flatstate
