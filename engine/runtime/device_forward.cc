#include "engine/runtime/device_forward.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <utility>

#include "engine/runtime/batch_split.h"
#include "engine/util/status_macros.h"
#include "kernels/elementwise.h"
#include "kernels/gated_attention.h"
#include "kernels/gated_delta.h"
#include "kernels/gated_linear.h"
#include "kernels/linear_attention.h"
#include "kernels/paged_attention.h"
#include "kernels/rwkv7.h"
#include "kernels/window_attention.h"

namespace flatstate {

template <Device D>
DeviceForward<D>::DeviceForward(const Model* model, KvBlockPool* kv, const Parallel* par,
                                int chunk_size, const GemmWeightOptions& gemm)
    : ForwardPass(model, kv, chunk_size),
      model_(model),
      cfg_(&model->config()),
      par_(par),
      layout_(MakeStateLayout(model->config())),
      weights_(model->config().torch_dtype, gemm),
      states_(model->config().state_floats()) {
  const char* split = std::getenv("FLATSTATE_SPLIT_STEPS");
  split_steps_ = split == nullptr || std::string_view(split) != "0";
}

template <Device D>
absl::StatusOr<std::unique_ptr<DeviceForward<D>>> DeviceForward<D>::Create(
    const Model* model, KvBlockPool* kv, const Parallel* par, int chunk_size,
    const GemmWeightOptions& gemm, std::optional<WeightDtype> head_dtype) {
  const ModelConfig& c = model->config();
  const StateLayout layout = MakeStateLayout(c);
  for (const LayerStateLayout& l : layout.layers) {
    if (l.attention.linear && c.attention_kind == AttentionKind::kGated) {
      RETURN_IF_ERROR(CheckGatedAttentionShape<D>(c.head_dim, c.feature_dim()));
    } else if (l.attention.linear) {
      RETURN_IF_ERROR(CheckLinearAttentionShape<D>(c.head_dim, c.feature_dim(), chunk_size));
    }
    if (l.attention.window)
      RETURN_IF_ERROR(CheckWindowAttentionShape<D>(c.head_dim, c.window_size));
    if (l.attention.delta) {
      RETURN_IF_ERROR(CheckGatedDeltaShape<D>(c.delta.key_heads, c.delta.value_heads,
                                              c.delta.key_dim, c.delta.value_dim, chunk_size));
    }
    if (l.attention.rwkv7) RETURN_IF_ERROR(CheckRwkv7Shape<D>(c.rwkv.heads, c.rwkv.head_dim));
    if (l.attention.gla) {
      RETURN_IF_ERROR(CheckGatedLinearShape<D>(c.gla.heads, c.gla.heads, c.gla.key_dim,
                                               c.gla.value_dim, chunk_size));
    }
    if (l.attention.ssm) {
      RETURN_IF_ERROR(CheckGatedLinearShape<D>(c.ssm.groups, c.ssm.heads, c.ssm.state_size,
                                               c.ssm.head_dim, chunk_size));
    }
  }
  if (c.has_kv()) RETURN_IF_ERROR(CheckPagedAttentionShape<D>(c.head_dim, kv->dtype()));
  auto f = std::unique_ptr<DeviceForward>(new DeviceForward(model, kv, par, chunk_size, gemm));
  f->head_dtype_ = head_dtype;
  RETURN_IF_ERROR(f->Bind(kv));
  RETURN_IF_ERROR(Synchronize<D>());  // the weight copies are complete
  f->head_bits_ = {};                 // the bf16 head's source bits, copied by now
  return f;
}

template <Device D>
absl::Status DeviceForward<D>::Bind(KvBlockPool* kv) {
  const ModelConfig& c = *cfg_;
  const ModelWeights& w = model_->weights();
  const int64_t hidden = c.hidden_size, V = c.vocab_size;
  RETURN_IF_ERROR(kv_.Init(kv));
  res_.config = cfg_;
  res_.layout = &layout_;
  res_.kv = &kv_.view();
  res_.chunk = chunk_size();
  res_.shape = {c.num_attention_heads, c.kv_heads(), c.head_dim};
  if (c.has_kv()) {
    rope_inv_host_ = c.RopeInvFreq();
    ASSIGN_OR_RETURN(
        res_.rope.inv_freq,
        weights_.Place(rope_inv_host_.data(), static_cast<int64_t>(rope_inv_host_.size())));
    res_.rope.rotary_dim = c.rotary();
  }
  ASSIGN_OR_RETURN(embed_, weights_.Place(w.embed, V * hidden));
  ASSIGN_OR_RETURN(norm_, weights_.Place(w.norm, hidden));
  ASSIGN_OR_RETURN(norm_bias_, weights_.Place(w.norm_bias, hidden));
  // The output head: the type EngineOptions::head_dtype names, from the head's f32 values; unset,
  // bf16 when the layers run narrower than f32 and every head value is exactly a bf16 (a BF16
  // file's head, widened exactly: the same logits in half the bytes), else f32 whatever the
  // layers' type (see device_forward.h). An f32 engine keeps its f32 head.
  const bool invariant = weights_.gemm().batch_invariant;
  const int64_t head = V * hidden;
  bool head_bf16 = !head_dtype_.has_value() && weights_.gemm().dtype != WeightDtype::kF32;
  for (int64_t i = 0; head_bf16 && i < head; ++i) {
    uint32_t u;
    std::memcpy(&u, &w.lm_head[i], sizeof(u));
    head_bf16 = (u & 0xffffu) == 0;
  }
  if (head_bf16) {
    head_bits_.resize(static_cast<size_t>(head));
    for (int64_t i = 0; i < head; ++i) {
      uint32_t u;
      std::memcpy(&u, &w.lm_head[i], sizeof(u));
      head_bits_[i] = static_cast<uint16_t>(u >> 16);
    }
    // bf16dot layers take a bf16dot head (their lossier, faster chain); every other type kBf16.
    const WeightDtype head_type =
        weights_.gemm().dtype == WeightDtype::kBf16Dot ? WeightDtype::kBf16Dot : WeightDtype::kBf16;
    ASSIGN_OR_RETURN(
        lm_head_, PrepareGemmWeightBf16<D>(head_bits_.data(), V, hidden, {head_type, invariant}));
  } else {
    ASSIGN_OR_RETURN(lm_head_,
                     PrepareGemmWeight<D>(w.lm_head, V, hidden,
                                          {head_dtype_.value_or(WeightDtype::kF32), invariant}));
  }
  layers_.resize(w.layers.size());
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const LayerWeights& lw = w.layers[l];
    Layer& out = layers_[l];
    ASSIGN_OR_RETURN(out.attn_norm, weights_.Place(lw.attn_norm, hidden));
    ASSIGN_OR_RETURN(out.mlp_norm, weights_.Place(lw.mlp_norm, hidden));
    ASSIGN_OR_RETURN(out.attn_norm_bias, weights_.Place(lw.attn_norm_bias, hidden));
    ASSIGN_OR_RETURN(out.mlp_norm_bias, weights_.Place(lw.mlp_norm_bias, hidden));
    ASSIGN_OR_RETURN(out.mixer, MakeTokenMixer<D>(static_cast<int>(l), lw, res_, &weights_));
    const LayerStateLayout none;
    RETURN_IF_ERROR(
        out.mlp.Bind(c, lw, layout_.layers.empty() ? none : layout_.layers[l], &weights_));
  }
  return absl::OkStatus();
}

template <Device D>
absl::Status DeviceForward<D>::Prepare(std::span<const SequenceRun> batch,
                                       const std::vector<int64_t>& row_start, Workspace* ws) {
  const ModelConfig& c = *cfg_;
  const int64_t hidden = c.hidden_size;
  const int64_t N = row_start.back();
  RETURN_IF_ERROR(ws->x.Reserve(sizeof(float) * N * hidden));
  RETURN_IF_ERROR(ws->h.Reserve(sizeof(float) * N * hidden));
  int64_t scratch = 0, carry = 0;
  for (const Layer& l : layers_) {
    scratch = std::max({scratch, l.mixer->ScratchFloats(N), l.mlp.ScratchFloats(N)});
    carry = std::max(carry, l.mixer->CarryFloats(N));
  }
  RETURN_IF_ERROR(ws->scratch.Reserve(sizeof(float) * scratch));
  RETURN_IF_ERROR(ws->carry.Reserve(sizeof(float) * carry));
  return ws->step.Build(c, chunk_size(), batch, row_start, &states_);
}

template <Device D>
absl::Status DeviceForward<D>::RunLayers(std::span<const SequenceRun> batch,
                                         const std::vector<int64_t>& row_start,
                                         std::vector<float>* logits) {
  const ModelConfig& c = *cfg_;
  const int64_t V = c.vocab_size;
  RETURN_IF_ERROR(TakeError<D>());  // a stale error must not be blamed on this step
  std::vector<size_t> cuts;
  if constexpr (D == Device::kCpu) {
    if (split_steps_) cuts = SplitSequences(row_start, par_->num_threads());
  }
  if (cuts.empty()) cuts = {0, batch.size()};
  const size_t shares = cuts.size() - 1;
  if (ws_.size() < shares) ws_.resize(shares);
  std::vector<int64_t> out_at{0};  // each share's first returned row
  for (size_t g = 0; g < shares; ++g) {
    std::vector<int64_t> starts(row_start.begin() + static_cast<int64_t>(cuts[g]),
                                row_start.begin() + static_cast<int64_t>(cuts[g + 1]) + 1);
    for (int64_t& r : starts) r -= row_start[cuts[g]];
    RETURN_IF_ERROR(Prepare(batch.subspan(cuts[g], cuts[g + 1] - cuts[g]), starts, &ws_[g]));
    out_at.push_back(out_at.back() + static_cast<int64_t>(ws_[g].step.out_rows.host.size()));
  }
  const int64_t R = out_at.back();
  RETURN_IF_ERROR(last_.Reserve(sizeof(float) * R * c.hidden_size));
  float* last = last_.template as<float>();
  float* out = nullptr;
  if constexpr (kHostMemory<D>) {
    logits->resize(static_cast<size_t>(R * V));
    out = logits->data();
  } else {
    RETURN_IF_ERROR(logits_.Reserve(sizeof(float) * R * V));
    out = logits_.template as<float>();
  }

  if constexpr (!kHostMemory<D>) {
    // From the first kernel on, the slots are newer than the sessions' host copies.
    if (c.has_state()) {
      for (const SequenceRun& r : batch) r.state->device.host_stale = true;
    }
  }
  if (shares == 1) {
    Layers(&ws_[0], *par_, last);
  } else {
    par_->For(static_cast<int64_t>(shares), [&](int64_t g0, int64_t g1) {
      for (int64_t g = g0; g < g1; ++g) {
        Layers(&ws_[g], serial_, last + out_at[g] * c.hidden_size);
      }
    });
  }
  // The final norm and the head over every returned row at once, on the pool: the head is the
  // largest GEMM (a third to a half of a small model's weights), which each share would
  // otherwise stream whole.
  const MixerStep<D> head{&ws_[0].step, nullptr, nullptr, par_, &serial_};
  Norm(last, norm_, norm_bias_, R, last, head);
  Gemm<D>(last, R, lm_head_, out, false, *par_);
  if constexpr (!kHostMemory<D>) {
    // Straight into the caller's vector (one copy; at a 248k vocabulary a row is 1 MB).
    logits->resize(static_cast<size_t>(R * V));
    RETURN_IF_ERROR(CopyToHost<D>(logits->data(), out, sizeof(float) * R * V));
    RETURN_IF_ERROR(Synchronize<D>());
  }
  return absl::OkStatus();
}

template <Device D>
void DeviceForward<D>::Layers(Workspace* ws, const Parallel& par, float* last) {
  const ModelConfig& c = *cfg_;
  const int64_t hidden = c.hidden_size;
  const int64_t N = ws->step.rows;
  const int64_t R = static_cast<int64_t>(ws->step.out_rows.host.size());
  float* x = ws->x.template as<float>();
  float* h = ws->h.template as<float>();
  const MixerStep<D> step{&ws->step, ws->scratch.template as<float>(),
                          ws->carry.template as<float>(), &par, &serial_};
  GatherRows<D>(embed_, ws->step.tokens.on, N, hidden, x);
  for (const Layer& l : layers_) {
    Norm(x, l.attn_norm, l.attn_norm_bias, N, h, step);
    l.mixer->Forward(h, x, step);
    if (!l.mlp.present()) continue;  // Mamba-2: the token mixer is the whole layer
    Norm(x, l.mlp_norm, l.mlp_norm_bias, N, h, step);
    l.mlp.Forward(h, step, x);
  }
  GatherRows<D>(x, ws->step.out_rows.on, R, hidden, last);  // the rows that are returned
}

template <Device D>
void DeviceForward<D>::Norm(const float* x, const float* weight, const float* bias, int64_t rows,
                            float* y, const MixerStep<D>& step) const {
  const ModelConfig& c = *cfg_;
  const int64_t dim = c.hidden_size;
  step.ForRows(rows, rows * dim * kElementWork, [&](int64_t r0, int64_t r1) {
    if (c.norm_kind == NormKind::kLayer) {
      LayerNorm<D>(x + r0 * dim, weight, bias, r1 - r0, dim, c.rms_norm_eps, y + r0 * dim);
    } else {
      RmsNorm<D>(x + r0 * dim, weight, r1 - r0, dim, c.rms_norm_eps, y + r0 * dim);
    }
  });
}

template <Device D>
absl::Status DeviceForward<D>::RunValidated(std::span<const SequenceRun> batch,
                                            const std::vector<int64_t>& row_start,
                                            std::vector<float>* logits) {
  absl::Status st = RunLayers(batch, row_start, logits);
  if (!st.ok()) Synchronize<D>().IgnoreError();  // drain the queue; keep the first error
  return st;
}

template class DeviceForward<Device::kCpu>;
#ifdef FLATSTATE_HAVE_CUDA
template class DeviceForward<Device::kCuda>;
#endif

absl::StatusOr<std::unique_ptr<ForwardPass>> CreateDeviceForward(
    Device d, const Model* model, KvBlockPool* kv, const Parallel* par, int chunk_size,
    const GemmWeightOptions& gemm, std::optional<WeightDtype> head_dtype) {
  RETURN_IF_ERROR(CheckDevice(d));
  if (d == Device::kCpu) {
    return DeviceForward<Device::kCpu>::Create(model, kv, par, chunk_size, gemm, head_dtype);
  }
#ifdef FLATSTATE_HAVE_CUDA
  return DeviceForward<Device::kCuda>::Create(model, kv, par, chunk_size, gemm, head_dtype);
#else
  return absl::FailedPreconditionError("device cuda: this build has no CUDA backend");
#endif
}

}  // namespace flatstate
