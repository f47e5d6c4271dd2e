// Fuzzes config.json parsing through the architecture registry (engine/arch/): any text gives a
// config that passes its own invariants or an error. flatstate's own format is also fed to
// ParseModelConfig directly; Hugging Face families (LlamaForCausalLM, ..., Mamba2ForCausalLM,
// RWKV7ForCausalLM, fla's GLAForCausalLM, GatedDeltaNetForCausalLM and DeltaNetForCausalLM, with
// or without fla's hybrid attn layers) through their entry's
// ParseConfig, after JsonFromPython as Model::Load reads them; a config that parses is then also
// given the text as its generation_config.json.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/arch/architecture.h"
#include "engine/arch/hf_config.h"
#include "engine/model/config.h"
#include "engine/model/generation_config.h"
#include "nlohmann/json.hpp"

namespace {

void CheckInvariants(const flatstate::ModelConfig& c) {
  if (c.num_attention_heads < 1 || c.kv_heads() < 1) __builtin_trap();
  if (c.num_attention_heads % c.kv_heads() != 0) __builtin_trap();
  if (c.has_kv()) {  // RoPE's pairs (a pure recurrent family has no RoPE)
    if (c.head_dim < 2 || c.head_dim % 2 != 0) __builtin_trap();
    if (c.rotary() < 2 || c.rotary() > c.head_dim || c.rotary() % 2 != 0) __builtin_trap();
  }
  if (c.ssm.heads > 0) {
    if (c.ssm.groups < 1 || c.ssm.heads % c.ssm.groups != 0) __builtin_trap();
    if (c.ssm.inner() % c.ssm.groups != 0 || c.ssm.conv_kernel < 1) __builtin_trap();
    if (!(c.ssm.dt_min >= 0) || !(c.ssm.dt_max > c.ssm.dt_min)) __builtin_trap();
  }
  if (c.rwkv.heads > 0 && c.rwkv.width() != c.hidden_size) __builtin_trap();
  if (c.gla.heads > 0) {
    if (c.gla.key_dim < 1 || c.gla.value_dim < 1 || c.gla.gate_rank < 1) __builtin_trap();
    if (c.gla.kv_groups < 1 || c.gla.heads % c.gla.kv_groups != 0) __builtin_trap();
    if (!c.has_kv() && c.num_attention_heads != c.gla.heads) __builtin_trap();
    if (!(c.gla.clamp_min <= 0) || c.gla.conv_kernel < 0) __builtin_trap();
  }
  if (c.delta.value_heads > 0) {
    if (c.delta.key_heads < 1 || c.delta.value_heads % c.delta.key_heads != 0) __builtin_trap();
    if (c.delta.key_dim < 1 || c.delta.value_dim < 1 || c.delta.conv_kernel < 0) __builtin_trap();
    if (c.delta.decay && c.delta.conv_kernel < 1) __builtin_trap();  // Gated DeltaNet: a conv
    if (!(c.delta.beta_scale == 1.f || c.delta.beta_scale == 2.f)) __builtin_trap();
  }
  const bool fla = c.architecture == "gla" || c.architecture == "gated_deltanet" ||
                   c.architecture == "delta_net";
  if (fla && c.has_kv() && c.q_dim() != c.hidden_size) {
    __builtin_trap();  // fla's attn layers: head_dim = hidden_size / num_heads
  }
  if (c.vocab_size < 1) __builtin_trap();
  for (int32_t id : c.eos_token_ids) {
    if (id < 0 || id >= c.vocab_size) __builtin_trap();
  }
  for (double f : c.RopeInvFreq()) {
    if (!std::isfinite(f)) __builtin_trap();
  }
  (void)c.state_bytes();
  (void)c.kv_bytes_per_token();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto cfg = flatstate::ParseModelConfig(text, "fuzz/config.json");
  if (cfg.ok()) {
    if (cfg->hidden_size % cfg->num_attention_heads != 0) __builtin_trap();
    if (cfg->head_dim * cfg->num_attention_heads != cfg->hidden_size) __builtin_trap();
    CheckInvariants(*cfg);
  }
  const nlohmann::json j = nlohmann::json::parse(flatstate::JsonFromPython(text), nullptr,
                                                 /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  auto arch = flatstate::SelectArchitecture(j, "fuzz/config.json");
  if (!arch.ok()) return 0;
  std::vector<std::string> ignored;
  auto c = (*arch)->ParseConfig(text, j, "fuzz/config.json", &ignored);
  if (c.ok()) {
    CheckInvariants(*c);
    // The same text as the folder's generation_config.json: ids stay in the vocabulary.
    if (flatstate::ApplyGenerationConfig(text, "fuzz/generation_config.json", &*c).ok()) {
      CheckInvariants(*c);
    }
  }
  return 0;
}
