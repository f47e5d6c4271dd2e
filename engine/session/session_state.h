// Everything one session needs for an exact continuation. Value type; not thread-safe (one engine
// loop owns it). Serialized by engine/session/checkpoint.h.
//
// Context = tokens already run through the model (`position`) + `pending` tokens appended to the
// context but not yet run (typically the last sampled token). No logits are stored: running the
// pending tokens reproduces them exactly.
//
// Every layer that is not a softmax layer: `linear` holds, for each layer in order, the parts that
// layer has (StateLayout below; docs/kinds.md), in this order:
//   S [H][F][hd]  (F = feature_dim; relative to the running stabiliser M)    linear branch
//   z [H][F]                                                                 linear branch
//   M [H]         (favor's running log-stabiliser, -inf before the first token, 0 for the other
//                 maps; gated: the weight mass n = 1 - prod g)               linear branch
//   conv [K-1][D] (last K-1 normalised attention inputs, oldest first)      layer_has_conv
//   ring_k [W][D], ring_v [W][D] (rotated key and value of position p in slot p mod W; slots
//                 never written are zero)                                    window branch
// A Gated DeltaNet layer instead holds S [Hv][dk][dv] then its conv window [K-1][conv_dim]
// (DeltaNetShape), a Mamba-2 layer S [heads][state_size][head_dim] then its conv window
// [K-1][conv_dim] (SsmShape), an RWKV-7 layer S [heads][head_dim][head_dim], the time mix's
// previous input [D] and the channel mix's [D] (Rwkv7Shape), a GLA layer S [heads][dk][dv] then,
// with short convolutions, their window [K-1][2 heads dk + heads dv] (GlaShape);
// i.e. ModelConfig::state_floats() floats, constant in the context length.
// Where the forward pass keeps linear states in device memory (CUDA), `device` names the slot of
// the step runner's pool holding this session's state; from its first step on, that slot is the
// truth and `linear` is only as new as the last Engine::SyncToHost (Checkpoint and
// CheckpointSplitFrom read the slot themselves).
// Softmax layers (the softmax kind's, or those of layer_types, which hold no part of `linear`):
// `kv_blocks` is the block table into the engine's KvBlockPool; token t lives in block
// kv_blocks[t / block_size], slot t % block_size. A model with both keeps both.
#ifndef FLATSTATE_ENGINE_SESSION_SESSION_STATE_H_
#define FLATSTATE_ENGINE_SESSION_SESSION_STATE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/cache/prefix_key.h"
#include "engine/model/config.h"
#include "engine/sampling/grammar_constraint.h"
#include "engine/sampling/sampler.h"

namespace flatstate {

// A session's slot in a device pool of linear states. A move carries the slot; a copy gets none,
// and a copy made while the slot was newer than `linear` is refused by the forward pass
// (FailedPrecondition) rather than run from a stale state: call Engine::SyncToHost first.
// Overwriting a state that holds a slot without Engine::ReleaseSession leaks the slot until its
// engine is destroyed.
struct DeviceSlot {
  int32_t id = -1;          // -1: none
  bool host_stale = false;  // the slot (or, for a copy, the original's slot) is newer than `linear`

  DeviceSlot() = default;
  DeviceSlot(const DeviceSlot& o) : host_stale(o.host_stale) {}
  DeviceSlot& operator=(const DeviceSlot& o) {
    id = -1;
    host_stale = o.host_stale;
    return *this;
  }
  DeviceSlot(DeviceSlot&& o) noexcept
      : id(std::exchange(o.id, -1)), host_stale(std::exchange(o.host_stale, false)) {}
  DeviceSlot& operator=(DeviceSlot&& o) noexcept {
    if (this != &o) {
      id = std::exchange(o.id, -1);
      host_stale = std::exchange(o.host_stale, false);
    }
    return *this;
  }
};

struct SessionState {
  int64_t position = 0;
  std::vector<int32_t> pending;
  std::vector<float> linear;
  std::vector<int32_t> kv_blocks;
  SamplingParams sampling;
  Rng rng;
  // The server's detokenizer state (Tokenizer::DecodeNext; at most kMaxDecoderStateBytes, for a
  // byte-level model the bytes of an incomplete UTF-8 character already generated but not yet
  // emitted as text). Carried in checkpoints so a restored session's text continues exactly too.
  std::string text_tail;
  DeviceSlot device;  // linear kinds off the host only; see above
  // Constrained decoding (docs/grammar.md): while set, every token the session samples is masked
  // by the grammar and advances its state; cleared when the grammar is complete and nothing more
  // may follow. Carried in checkpoints (source text and state, format version 2).
  std::optional<SessionGrammar> grammar;
  // Set by Engine::AppendPrompt: when the session has run marks.back().first tokens, the engine
  // stores prefix-cache snapshots for these (prefix length, key) pairs, ascending, then clears
  // them. Transient: not in checkpoints, which lose nothing by it but a cache entry.
  std::vector<std::pair<int64_t, PrefixKey>> prefix_marks;

  int64_t context_tokens() const { return position + static_cast<int64_t>(pending.size()); }
};

// Fresh state for `config`: position 0, state zeroed except favor's M = -inf, rng seeded from
// `sampling.seed`.
SessionState NewSessionState(const ModelConfig& config, const SamplingParams& sampling);

// Where one layer's parts sit in SessionState::linear, in floats from the start of the layer's
// slice (`begin` from the start of the state). A part the layer lacks has no meaningful offset.
struct LayerStateLayout {
  size_t begin = 0;
  size_t s = 0, z = 0, m = 0;  // linear branch (delta, ssm: S at s)
  size_t conv = 0;  // ModelConfig::layer_has_conv(layer), or a delta / ssm layer's window
  size_t ring_k = 0, ring_v = 0;  // window branch
  size_t ffn_shift = 0;           // RWKV-7: the channel mix's previous input (conv: the time mix's)
  size_t floats = 0;              // the slice's length
  LayerAttention attention;
};
struct StateLayout {
  std::vector<LayerStateLayout> layers;  // empty without state (the softmax kind)
  size_t floats = 0;                     // ModelConfig::state_floats()
};
StateLayout MakeStateLayout(const ModelConfig& config);

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_SESSION_SESSION_STATE_H_
