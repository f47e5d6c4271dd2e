#include "engine/runtime/mixers/flatstate_linear_mixer.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "engine/util/status_macros.h"
#include "kernels/elementwise.h"
#include "kernels/gated_attention.h"
#include "kernels/window_attention.h"

namespace flatstate {
namespace {

FeatureMap MapFor(AttentionKind k) {
  switch (k) {
    case AttentionKind::kCosformer:
      return FeatureMap::kCosformer;
    case AttentionKind::kCosine:
      return FeatureMap::kCosine;
    case AttentionKind::kFavor:
      return FeatureMap::kFavor;
    default:
      return FeatureMap::kEluPlusOne;  // linear_elu, hybrid's linear layers; gated: unused
  }
}

}  // namespace

template <Device D>
absl::StatusOr<std::unique_ptr<FlatstateLinearMixer<D>>> FlatstateLinearMixer<D>::Create(
    int layer, const LayerWeights& lw, const MixerResources<D>& res, DeviceWeights<D>* weights) {
  const ModelConfig& c = *res.config;
  auto m = std::unique_ptr<FlatstateLinearMixer>(new FlatstateLinearMixer(res));
  m->branches_ = c.layer_attention(layer);
  m->lay_ = res.layout->layers[layer];
  const bool gated = c.attention_kind == AttentionKind::kGated;
  m->qkv_.width =
      int64_t{c.q_dim()} + 2 * int64_t{c.kv_dim()} + (gated ? c.num_attention_heads : 0);
  RETURN_IF_ERROR(m->qkv_.BindVectors(c, layer, lw, *res.layout, weights));
  RETURN_IF_ERROR(m->BindQkv(lw, weights));
  RETURN_IF_ERROR(m->out_.Bind(c, lw, weights));
  RETURN_IF_ERROR(m->BindHeads(lw, weights));
  return m;
}

template <Device D>
absl::Status FlatstateLinearMixer<D>::BindQkv(const LayerWeights& lw, DeviceWeights<D>* weights) {
  const ModelConfig& c = *res_.config;
  if (lw.gate_weight == nullptr) {
    ASSIGN_OR_RETURN(qkv_.w, weights->PrepareGemm(lw.wqkv));
    return absl::OkStatus();
  }
  // gated: one GEMM for q|k|v and the H gate logits (an output element's chain does not depend
  // on the other rows, so q, k, v are the bits of the plain wqkv GEMM). A BF16 file's wqkv is
  // widened (exact), so the fused weight is the one an F32 file holding those values gives, and
  // rounds back to the same bits for a bf16 engine. An int8 / int4 file run as its own type: the
  // F32 gate rows are quantised as the load quantises them and appended to the stored quants
  // (each column is quantised alone, so this is the quantisation of the fused fp32 weight); run
  // as f32 / bf16: the dequantised wqkv values.
  const int64_t hidden = c.hidden_size, H = c.num_attention_heads;
  if (lw.wqkv.q != nullptr) {
    RETURN_IF_ERROR(CheckQuantizedTarget({weights->stored()}, weights->gemm().dtype));
  }
  if (lw.wqkv.q != nullptr && weights->gemm().dtype == weights->stored()) {
    const QuantizedWeight gate = QuantizeWeight(lw.gate_weight, H, hidden, weights->stored());
    const QuantizedWeight fused = ConcatRows(weights->Quants(lw.wqkv), gate.view());
    ASSIGN_OR_RETURN(qkv_.w, PrepareGemmWeightQuantized<D>(fused.view(), weights->gemm()));
    return Synchronize<D>();  // `fused` dies here; the copy must be complete
  }
  std::vector<float> fused(3 * hidden * hidden + H * hidden);
  if (lw.wqkv.q != nullptr) {
    DequantizeWeight(weights->Quants(lw.wqkv), fused.data());
  } else {
    for (int64_t i = 0; i < 3 * hidden * hidden; ++i) {
      fused[i] = lw.wqkv.bf16 != nullptr ? FloatFromBf16(lw.wqkv.bf16[i]) : lw.wqkv.f32[i];
    }
  }
  std::copy(lw.gate_weight, lw.gate_weight + H * hidden, fused.begin() + 3 * hidden * hidden);
  ASSIGN_OR_RETURN(qkv_.w, weights->PrepareF32(fused.data(), qkv_.width, hidden));
  return absl::OkStatus();
}

template <Device D>
absl::Status FlatstateLinearMixer<D>::BindHeads(const LayerWeights& lw, DeviceWeights<D>* weights) {
  const ModelConfig& c = *res_.config;
  const int64_t proj =
      c.attention_kind == AttentionKind::kFavor   ? int64_t{c.favor_num_features} * c.head_dim
      : c.attention_kind == AttentionKind::kGated ? int64_t{c.rfa_num_features} * c.head_dim
                                                  : 0;
  ASSIGN_OR_RETURN(const float* feature_proj, weights->Place(lw.feature_proj, proj));
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
    head.feature_proj = feature_proj;
    if (lw.feature_log_scale != nullptr) head.rfa_scale = std::exp(lw.feature_log_scale[h]);
    if (lw.gate_bias != nullptr) head.gate_bias = lw.gate_bias[h];
    heads_host_.push_back(head);
  }
  ASSIGN_OR_RETURN(heads_, OnDevice<D>(&heads_buf_, heads_host_));
  return absl::OkStatus();
}

template <Device D>
int64_t FlatstateLinearMixer<D>::ScratchFloats(int64_t rows) const {
  const ModelConfig& c = *res_.config;
  const int64_t both = branches_.linear && branches_.window ? rows * c.hidden_size : 0;
  return qkv_.ScratchFloats(c, rows) + rows * qkv_.width + rows * c.hidden_size + both;
}

template <Device D>
void FlatstateLinearMixer<D>::Forward(const float* in, float* residual, const MixerStep<D>& step) {
  const ModelConfig& c = *res_.config;
  const int64_t rows = step.step->rows;
  float* qkv = step.scratch + qkv_.ScratchFloats(c, rows);
  float* att = qkv + rows * qkv_.width;
  float* att2 = att + rows * c.hidden_size;  // both branches: the window branch's output
  qkv_.Apply(c, in, step, step.scratch, qkv);
  if (branches_.linear) Linear(qkv, att, step);
  if (branches_.window) {
    // After the linear branch: this rotates q and k in place.
    float* out = branches_.linear ? att2 : att;
    Window(qkv, out, step);
    if (branches_.linear) AddInPlace<D>(att, out, rows * c.hidden_size);
  }
  out_.Apply(c, att, rows, *step.pool, residual);
}

template <Device D>
void FlatstateLinearMixer<D>::Linear(const float* qkv, float* att, const MixerStep<D>& step) const {
  const ModelConfig& c = *res_.config;
  const DeviceStep<D>& s = *step.step;
  const int H = c.num_attention_heads, hd = c.head_dim, hidden = c.hidden_size;
  LinearBatch b;
  b.heads = heads_;
  b.H = H;
  b.head_dim = hd;
  b.feature_dim = c.feature_dim();
  b.q = qkv;
  b.k = qkv + hidden;
  b.v = qkv + 2 * hidden;
  b.gate = qkv + 3 * hidden;  // read by GatedAttention only
  b.in_stride = qkv_.width;
  b.out = att;
  b.out_stride = hidden;
  step.SetSequences(lay_, res_.chunk, &b);
  b.z_off = static_cast<int64_t>(lay_.z);
  b.m_off = static_cast<int64_t>(lay_.m);
  b.row_seq = s.row_seq.on;
  b.row_t = s.row_t.on;
  b.prefill_rows = static_cast<int64_t>(s.row_t.host.size());
  b.workspace = s.workspace.template as<float>();
  const Parallel& par = step.PoolFor(s.rows * H * c.feature_dim() * hd);
  if (c.attention_kind == AttentionKind::kGated) {
    GatedAttention<D>(b, par);
  } else {
    LinearAttention<D>(b, par);
  }
}

template <Device D>
void FlatstateLinearMixer<D>::Window(float* qkv, float* out, const MixerStep<D>& step) const {
  const ModelConfig& c = *res_.config;
  const DeviceStep<D>& s = *step.step;
  const int hidden = c.hidden_size;
  WindowBatch w;
  w.seqs = s.window.on;
  w.num = static_cast<int>(s.window.host.size());
  w.H = c.num_attention_heads;
  w.head_dim = c.head_dim;
  w.window = c.window_size;
  w.rope_theta = c.rope_theta;
  w.q = qkv;
  w.k = qkv + hidden;
  w.v = qkv + 2 * hidden;
  w.in_stride = qkv_.width;
  w.out = out;
  w.out_stride = hidden;
  w.ring_k = static_cast<int64_t>(lay_.begin + lay_.ring_k);
  w.ring_v = static_cast<int64_t>(lay_.begin + lay_.ring_v);
  WindowAttention<D>(w, step.PoolFor(s.rows * std::min<int64_t>(s.rows, c.window_size) * hidden));
}

template class FlatstateLinearMixer<Device::kCpu>;
#ifdef FLATSTATE_HAVE_CUDA
template class FlatstateLinearMixer<Device::kCuda>;
#endif

}  // namespace flatstate
