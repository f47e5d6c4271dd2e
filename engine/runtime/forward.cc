#include "engine/runtime/forward.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>

#include "absl/strings/str_cat.h"
#include "engine/runtime/forward_cuda.h"
#include "engine/util/status_macros.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/paged_attention.h"

namespace flatstate {
namespace {

FeatureMap MapFor(AttentionKind k) {
  switch (k) {
    case AttentionKind::kCosformer: return FeatureMap::kCosformer;
    case AttentionKind::kCosine: return FeatureMap::kCosine;
    case AttentionKind::kFavor: return FeatureMap::kFavor;
    default: return FeatureMap::kEluPlusOne;
  }
}

std::vector<float>& Grow(std::vector<float>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ForwardPass>> ForwardPass::Create(const Model* model,
                                                                 Device device, KvBlockPool* kv,
                                                                 const Parallel* par,
                                                                 int chunk_size) {
  const ModelConfig& c = model->config();
  if (!c.is_linear() && kv == nullptr) {
    return absl::InvalidArgumentError("softmax model needs a KV block pool");
  }
  if (kv != nullptr && !c.is_linear() &&
      (kv->num_layers() != c.num_hidden_layers || kv->hidden() != c.hidden_size)) {
    return absl::InvalidArgumentError("KV block pool shape does not match the model");
  }
  if (c.head_dim > 1024) {
    return absl::InvalidArgumentError(absl::StrCat("head_dim ", c.head_dim, " > 1024"));
  }
  if (chunk_size <= 0) chunk_size = c.chunk_size;
  auto fp = std::unique_ptr<ForwardPass>(new ForwardPass());
  fp->model_ = model;
  fp->cfg_ = &model->config();
  fp->device_ = device;
  fp->kv_ = kv;
  fp->par_ = par;
  fp->chunk_size_ = chunk_size;
  fp->layout_ = LinearLayout(c);
  if (c.is_linear()) {
    for (int l = 0; l < c.num_hidden_layers; ++l) {
      const LayerWeights& lw = model->weights().layers[l];
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
        head.favor_proj = lw.feature_proj;
        fp->heads_.push_back(head);
      }
    }
  }
  if (device == Device::kCuda) {
    ASSIGN_OR_RETURN(fp->cuda_, ForwardCuda::Create(model, kv, chunk_size, fp->heads_));
  } else {
    const int64_t D = c.hidden_size, FF = c.intermediate_size;
    for (const LayerWeights& lw : model->weights().layers) {
      fp->packed_.push_back({PackedWeight::Pack(lw.wqkv, 3 * D, D),
                             PackedWeight::Pack(lw.wo, D, D), PackedWeight::Pack(lw.w1, FF, D),
                             PackedWeight::Pack(lw.w2, D, FF)});
    }
    fp->packed_lm_head_ = PackedWeight::Pack(model->weights().lm_head, c.vocab_size, D);
  }
  return fp;
}

ForwardPass::~ForwardPass() = default;

absl::Status ForwardPass::SyncKvToHost(std::span<const int32_t> blocks) {
  if (cuda_ == nullptr || cfg_->is_linear()) return absl::OkStatus();
  return cuda_->SyncKvToHost(blocks);
}

absl::Status ForwardPass::SyncKvToDevice(std::span<const int32_t> blocks) {
  if (cuda_ == nullptr || cfg_->is_linear()) return absl::OkStatus();
  return cuda_->SyncKvToDevice(blocks);
}

void ForwardPass::Attention(int layer, std::span<const SequenceRun> batch,
                            const std::vector<int64_t>& row_start) {
  const ModelConfig& c = *cfg_;
  const int H = c.num_attention_heads, hd = c.head_dim, D = c.hidden_size;
  const int64_t qkv_stride = 3 * D;
  const int64_t tasks = static_cast<int64_t>(batch.size()) * H;
  const int64_t rows = row_start.back();
  if (c.is_linear()) {
    const int64_t work = rows * H * c.feature_dim() * hd;
    PoolFor(work).For(tasks, [&](int64_t b, int64_t e) {
      thread_local std::vector<float> scratch;
      for (int64_t task = b; task < e; ++task) {
        const size_t s = task / H;
        const int h = static_cast<int>(task % H);
        SessionState* st = batch[s].state;
        const LinearHead& head = heads_[layer * H + h];
        const int64_t T = static_cast<int64_t>(batch[s].tokens.size());
        float* base = st->linear.data() + layout_.per_layer * layer;
        const int F = head.feature_dim;
        float* S = base + layout_.s + static_cast<int64_t>(h) * F * hd;
        float* z = base + layout_.z + static_cast<int64_t>(h) * F;
        float* M = base + layout_.m + h;
        Grow(scratch, LinearAttentionScratch(head, T, chunk_size_));
        const float* q = qkv_.data() + row_start[s] * qkv_stride + h * hd;
        LinearAttention<Device::kCpu>(head, q, q + D, q + 2 * D, qkv_stride, T, st->position,
                                      chunk_size_, S, z, M, att_.data() + row_start[s] * D + h * hd,
                                      D, scratch.data());
      }
    });
    return;
  }
  // Softmax: RoPE on q and k, write K/V into the pool, then attend per (sequence, head, token).
  PagedKv view{kv_->K(0, 0, 0), kv_->block_size(), kv_->num_layers(), kv_->hidden()};
  int64_t attended = 0;  // (query row, key row) pairs
  for (size_t s = 0; s < batch.size(); ++s) {
    const int64_t T = row_start[s + 1] - row_start[s];
    attended += T * batch[s].state->position + T * (T + 1) / 2;
  }
  const Parallel& par = PoolFor(attended * D);
  par.For(static_cast<int64_t>(batch.size()), [&](int64_t b, int64_t e) {
    for (int64_t s = b; s < e; ++s) {
      const SessionState* st = batch[s].state;
      const int64_t T = static_cast<int64_t>(batch[s].tokens.size());
      float* rows = qkv_.data() + row_start[s] * qkv_stride;
      Rope<Device::kCpu>(rows, T, qkv_stride, st->position, H, hd, c.rope_theta);      // q
      Rope<Device::kCpu>(rows + D, T, qkv_stride, st->position, H, hd, c.rope_theta);  // k
      for (int64_t t = 0; t < T; ++t) {
        const int64_t p = st->position + t;
        std::memcpy(view.Key(st->kv_blocks.data(), layer, p), rows + t * qkv_stride + D,
                    sizeof(float) * D);
        std::memcpy(view.Value(st->kv_blocks.data(), layer, p), rows + t * qkv_stride + 2 * D,
                    sizeof(float) * D);
      }
    }
  });
  // One task per query row, all heads at once (each K/V row is read once per query row).
  par.For(rows, [&](int64_t b, int64_t e) {
    thread_local std::vector<float> scratch;
    size_t s = std::upper_bound(row_start.begin(), row_start.end(), b) - row_start.begin() - 1;
    for (int64_t r = b; r < e; ++r) {
      while (r >= row_start[s + 1]) ++s;
      const SessionState* st = batch[s].state;
      const int64_t ctx = st->position + (r - row_start[s]) + 1;
      Grow(scratch, static_cast<size_t>(H * ctx));
      PagedAttentionAllHeads<Device::kCpu>(view, st->kv_blocks.data(), layer, H, hd,
                                           qkv_.data() + r * qkv_stride, ctx,
                                           att_.data() + r * D, scratch.data());
    }
  });
}

absl::Status ForwardPass::Run(std::span<const SequenceRun> batch, std::vector<float>* logits) {
  const ModelConfig& c = *cfg_;
  const ModelWeights& w = model_->weights();
  const int D = c.hidden_size, FF = c.intermediate_size, V = c.vocab_size;
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
    if (c.is_linear()) {
      if (r.state->linear.size() != layout_.per_layer * c.num_hidden_layers) {
        return absl::FailedPreconditionError("session state does not match the model");
      }
    } else {
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
  if (cuda_ != nullptr) {
    RETURN_IF_ERROR(cuda_->Run(batch, row_start, logits));
    for (const SequenceRun& r : batch) r.state->position += static_cast<int64_t>(r.tokens.size());
    return absl::OkStatus();
  }
  const int64_t N = row_start.back();
  float* x = Grow(x_, N * D).data();
  float* h = Grow(h_, N * D).data();
  float* h2 = Grow(h2_, N * D).data();
  Grow(qkv_, N * 3 * D);
  Grow(att_, N * D);
  float* mlp = Grow(mlp_, N * FF).data();
  for (size_t s = 0; s < batch.size(); ++s) {
    for (size_t i = 0; i < batch[s].tokens.size(); ++i) {
      std::memcpy(x + (row_start[s] + i) * D, w.embed + batch[s].tokens[i] * D,
                  sizeof(float) * D);
    }
  }
  const int K = c.conv_kernel_size;
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const LayerWeights& lw = w.layers[l];
    RmsNorm<Device::kCpu>(x, lw.attn_norm, N, D, c.rms_norm_eps, h);
    const float* attn_in = h;
    if (lw.conv != nullptr) {
      for (size_t s = 0; s < batch.size(); ++s) {
        float* window = batch[s].state->linear.data() + layout_.per_layer * l + layout_.conv;
        CausalConv<Device::kCpu>(h + row_start[s] * D, row_start[s + 1] - row_start[s], D, K,
                                 lw.conv, window, h2 + row_start[s] * D);
      }
      attn_in = h2;
    }
    const PackedLayer& pw = packed_[l];
    GemmPacked(attn_in, N, pw.wqkv, qkv_.data(), false, *par_);
    Attention(l, batch, row_start);
    GemmPacked(att_.data(), N, pw.wo, x, /*accumulate=*/true, *par_);
    RmsNorm<Device::kCpu>(x, lw.mlp_norm, N, D, c.rms_norm_eps, h);
    GemmPacked(h, N, pw.w1, mlp, false, *par_);
    Gelu<Device::kCpu>(mlp, N * FF);
    GemmPacked(mlp, N, pw.w2, x, /*accumulate=*/true, *par_);
  }
  // Final norm + head over the rows that are returned.
  std::vector<int64_t> rows;
  for (size_t s = 0; s < batch.size(); ++s) {
    if (batch[s].all_logits) {
      for (int64_t r = row_start[s]; r < row_start[s + 1]; ++r) rows.push_back(r);
    } else {
      rows.push_back(row_start[s + 1] - 1);
    }
    batch[s].state->position += static_cast<int64_t>(batch[s].tokens.size());
  }
  const int64_t R = static_cast<int64_t>(rows.size());
  float* last = Grow(last_, R * D).data();
  for (int64_t i = 0; i < R; ++i) {
    RmsNorm<Device::kCpu>(x + rows[i] * D, w.norm, 1, D, c.rms_norm_eps, last + i * D);
  }
  logits->resize(static_cast<size_t>(R * V));
  GemmPacked(last, R, packed_lm_head_, logits->data(), false, *par_);
  return absl::OkStatus();
}

}  // namespace flatstate
