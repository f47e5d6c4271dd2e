// Fuzzes config.json parsing: any text gives a config that passes its own invariants or an error.
#include <cstdint>
#include <string>

#include "engine/model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto cfg = flatstate::ParseModelConfig(text, "fuzz/config.json");
  if (cfg.ok()) {
    if (cfg->hidden_size % cfg->num_attention_heads != 0) __builtin_trap();
    if (cfg->head_dim * cfg->num_attention_heads != cfg->hidden_size) __builtin_trap();
    (void)cfg->state_bytes();
    (void)cfg->kv_bytes_per_token();
  }
  return 0;
}
