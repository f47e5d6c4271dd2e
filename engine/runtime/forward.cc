#include "engine/runtime/forward.h"

#include <cmath>
#include <numbers>

#include "absl/strings/str_cat.h"
#include "engine/runtime/forward_device.h"
#include "engine/util/status_macros.h"

namespace flatstate {
namespace {

FeatureMap MapFor(AttentionKind k) {
  switch (k) {
    case AttentionKind::kCosformer: return FeatureMap::kCosformer;
    case AttentionKind::kCosine: return FeatureMap::kCosine;
    case AttentionKind::kFavor: return FeatureMap::kFavor;
    default:
      return FeatureMap::kEluPlusOne;  // linear_elu, hybrid's linear layers; gated: unused
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<ForwardPass>> ForwardPass::Create(const Model* model, Device device,
                                                                 KvBlockPool* kv,
                                                                 const Parallel* par,
                                                                 int chunk_size,
                                                                 const GemmWeightOptions& gemm) {
  const ModelConfig& c = model->config();
  if (c.has_kv() && kv == nullptr) {
    return absl::InvalidArgumentError("a model with softmax layers needs a KV block pool");
  }
  if (kv != nullptr && c.has_kv() &&
      (kv->num_layers() != c.kv_layers() || kv->hidden() != c.kv_dim())) {
    return absl::InvalidArgumentError("KV block pool shape does not match the model");
  }
  if (chunk_size <= 0) chunk_size = c.chunk_size;
  auto fp = std::unique_ptr<ForwardPass>(new ForwardPass());
  fp->cfg_ = &model->config();
  fp->kv_ = kv;
  fp->chunk_size_ = chunk_size;
  fp->state_floats_ = c.state_floats();
  std::vector<LinearHead> heads;  // [layer * H + h]
  if (c.has_state()) {
    for (int l = 0; l < c.num_hidden_layers; ++l) {
      const LayerWeights& lw = model->weights().layers[l];
      // Descriptors for every layer (indexed layer * H + h); only linear branches read them.
      for (int h = 0; h < c.num_attention_heads; ++h) {
        LinearHead head;
        head.map = MapFor(c.attention_kind);
        head.head_dim = c.head_dim;
        head.feature_dim = c.feature_dim();
        head.eps = c.linear_eps;
        head.use_den = c.attention_kind != AttentionKind::kCosine;
        head.cosformer_step = std::numbers::pi / (2.0 * c.cosformer_horizon);
        if (lw.decay_logit != nullptr) {
          head.cosine_exponent = 1.0 / (1.0 + std::exp(-static_cast<double>(lw.decay_logit[h])));
        }
        head.feature_proj = lw.feature_proj;
        if (lw.feature_log_scale != nullptr) head.rfa_scale = std::exp(lw.feature_log_scale[h]);
        if (lw.gate_bias != nullptr) head.gate_bias = lw.gate_bias[h];
        heads.push_back(head);
      }
    }
  }
  ASSIGN_OR_RETURN(fp->runner_, CreateStepRunner(device, model, kv, par, chunk_size, heads, gemm));
  return fp;
}

ForwardPass::~ForwardPass() = default;

absl::Status ForwardPass::SyncKvToHost(std::span<const int32_t> blocks) {
  return runner_->SyncKvToHost(blocks);
}

absl::Status ForwardPass::SyncKvToDevice(std::span<const int32_t> blocks) {
  return runner_->SyncKvToDevice(blocks);
}

absl::Status ForwardPass::AcquireState(SessionState* s) { return runner_->AcquireState(s); }

absl::Status ForwardPass::ReadState(const SessionState& s, float* host) {
  return runner_->ReadState(s, host);
}

void ForwardPass::ReleaseState(SessionState* s) { runner_->ReleaseState(s); }

size_t ForwardPass::state_pool_bytes() const { return runner_->state_pool_bytes(); }

absl::StatusOr<DeviceMemoryInfo> ForwardPass::device_memory() const {
  return runner_->device_memory();
}

absl::Status ForwardPass::Run(std::span<const SequenceRun> batch, std::vector<float>* logits) {
  const ModelConfig& c = *cfg_;
  const int V = c.vocab_size;
  // Validate everything before touching any state.
  std::vector<int64_t> row_start(batch.size() + 1, 0);
  for (size_t s = 0; s < batch.size(); ++s) {
    const SequenceRun& r = batch[s];
    if (r.state == nullptr || r.tokens.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("batch entry ", s, " has no tokens"));
    }
    for (size_t i = 0; i < r.tokens.size(); ++i) {
      if (r.tokens[i] < 0 || r.tokens[i] >= V) {
        return absl::InvalidArgumentError(absl::StrCat("token id ", r.tokens[i], " at index ", i,
                                                       " is out of range [0, ", V, ")"));
      }
    }
    const int64_t end = r.state->position + static_cast<int64_t>(r.tokens.size());
    if (r.state->linear.size() != state_floats_) {
      return absl::FailedPreconditionError("session state does not match the model");
    }
    if (c.has_kv()) {
      if (end > c.max_position_embeddings) {
        return absl::OutOfRangeError(absl::StrCat("context of ", end,
                                                  " tokens exceeds max_position_embeddings ",
                                                  c.max_position_embeddings));
      }
      const int64_t have = static_cast<int64_t>(r.state->kv_blocks.size()) * kv_->block_size();
      if (have < end) {
        return absl::FailedPreconditionError(absl::StrCat(
            "session has KV blocks for ", have, " tokens, needs ", end, " (reserve first)"));
      }
    }
    row_start[s + 1] = row_start[s] + static_cast<int64_t>(r.tokens.size());
  }
  RETURN_IF_ERROR(runner_->Run(batch, row_start, logits));
  for (const SequenceRun& r : batch) r.state->position += static_cast<int64_t>(r.tokens.size());
  return absl::OkStatus();
}

}  // namespace flatstate
