#include "engine/runtime/forward.h"

#include "absl/strings/str_cat.h"
#include "engine/runtime/device_forward.h"
#include "engine/util/status_macros.h"

namespace flatstate {

ForwardPass::ForwardPass(const Model* model, KvBlockPool* kv, int chunk_size)
    : cfg_(&model->config()),
      kv_(kv),
      chunk_size_(chunk_size),
      state_floats_(model->config().state_floats()) {}

absl::StatusOr<std::unique_ptr<ForwardPass>> ForwardPass::Create(
    const Model* model, Device device, KvBlockPool* kv, const Parallel* par, int chunk_size,
    const GemmWeightOptions& gemm, std::optional<WeightDtype> head_dtype) {
  const ModelConfig& c = model->config();
  if (c.has_kv() && kv == nullptr) {
    return absl::InvalidArgumentError("a model with softmax layers needs a KV block pool");
  }
  if (kv != nullptr && c.has_kv() &&
      (kv->num_layers() != c.kv_layers() || kv->hidden() != c.kv_dim())) {
    return absl::InvalidArgumentError("KV block pool shape does not match the model");
  }
  if (chunk_size <= 0) chunk_size = c.chunk_size;
  return CreateDeviceForward(device, model, c.has_kv() ? kv : nullptr, par, chunk_size, gemm,
                             head_dtype);
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
    if (r.stepwise && !supports_stepwise()) {
      return absl::UnimplementedError("stepwise runs (speculative verification) need the CPU");
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
  RETURN_IF_ERROR(RunValidated(batch, row_start, logits));
  for (const SequenceRun& r : batch) r.state->position += static_cast<int64_t>(r.tokens.size());
  return absl::OkStatus();
}

}  // namespace flatstate
