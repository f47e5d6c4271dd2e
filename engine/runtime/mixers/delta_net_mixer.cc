#include "engine/runtime/mixers/delta_net_mixer.h"

#include <cmath>

#include "engine/util/status_macros.h"
#include "kernels/elementwise.h"
#include "kernels/gated_delta.h"
#include "kernels/recurrent_gates.h"

namespace flatstate {

template <Device D>
absl::StatusOr<std::unique_ptr<DeltaNetMixer<D>>> DeltaNetMixer<D>::Create(
    int layer, const LayerWeights& lw, const MixerResources<D>& res, DeviceWeights<D>* weights) {
  const DeltaNetShape& dn = res.config->delta;
  auto m = std::unique_ptr<DeltaNetMixer>(new DeltaNetMixer(res));
  m->lay_ = res.layout->layers[layer];
  ASSIGN_OR_RETURN(m->wqkv_, weights->PrepareGemm(lw.wqkv));
  if (m->zb_width() > 0) {
    ASSIGN_OR_RETURN(m->wzb_, weights->PrepareGemm(lw.wzba));
  }
  if (dn.conv_kernel > 0) {
    ASSIGN_OR_RETURN(m->conv_, weights->Place(lw.conv, dn.conv_dim() * dn.conv_kernel));
  }
  ASSIGN_OR_RETURN(m->norm_, weights->Place(lw.delta_norm, dn.value_dim));
  RETURN_IF_ERROR(m->out_.Bind(*res.config, lw, weights));
  return m;
}

template <Device D>
int64_t DeltaNetMixer<D>::zb_width() const {
  const DeltaNetShape& dn = res_.config->delta;
  return (dn.output_gate ? dn.value_width() : 0) + (dn.use_beta ? dn.value_heads : 0);
}

template <Device D>
int64_t DeltaNetMixer<D>::ScratchFloats(int64_t rows) const {
  const DeltaNetShape& dn = res_.config->delta;
  // qkv before and after the conv, z|b, beta, the rule's output.
  return rows * (2 * dn.conv_dim() + zb_width() + dn.value_heads + dn.value_width());
}

template <Device D>
void DeltaNetMixer<D>::Forward(const float* in, float* residual, const MixerStep<D>& step) {
  const ModelConfig& c = *res_.config;
  const DeltaNetShape& dn = c.delta;
  const DeviceStep<D>& s = *step.step;
  const int64_t rows = s.rows, width = dn.conv_dim(), Kw = dn.key_width(), Vw = dn.value_width();
  const int64_t H = dn.value_heads, zb = zb_width();
  float* raw = step.scratch;          // [rows][width]: q | k | v
  float* conv = raw + rows * width;   // [rows][width] after the conv
  float* zbuf = conv + rows * width;  // [rows][zb]: z | b
  float* beta = zbuf + rows * zb;     // [rows][H]
  float* o = beta + rows * H;         // [rows][Vw]
  Gemm<D>(in, rows, wqkv_, raw, false, *step.pool);
  float* qkv = raw;
  if (conv_ != nullptr) {
    CausalConv<D>(raw, width, dn.conv_kernel, conv_, s.conv.on,
                  static_cast<int>(s.conv.host.size()),
                  static_cast<int64_t>(lay_.begin + lay_.conv), conv);
    qkv = conv;
  }
  if (dn.qk_silu) {
    SiluRows<D>(qkv, rows, width, width);
  } else {
    SiluRows<D>(qkv + 2 * Kw, rows, width, Vw);
  }
  if (zb > 0) Gemm<D>(in, rows, wzb_, zbuf, false, *step.pool);
  const float* b_in = dn.use_beta ? zbuf + (dn.output_gate ? Vw : 0) : nullptr;
  DeltaBeta<D>(b_in, zb, rows, static_cast<int>(H), dn.beta_scale, beta, H);
  GatedDeltaBatch b;
  b.key_heads = dn.key_heads;
  b.value_heads = dn.value_heads;
  b.key_dim = dn.key_dim;
  b.value_dim = dn.value_dim;
  b.scale = 1.f / std::sqrt(static_cast<float>(dn.key_dim));
  b.l2norm_qk = true;
  b.q = qkv;
  b.k = qkv + Kw;
  b.qk_stride = width;
  b.v = qkv + 2 * Kw;
  b.v_stride = width;
  b.g = nullptr;  // no decay
  b.beta = beta;
  b.gb_stride = H;
  b.out = o;
  b.out_stride = Vw;
  step.SetSequences(lay_, res_.chunk, &b);
  GatedDeltaRule<D>(b, step.PoolFor(rows * H * dn.key_dim * dn.value_dim));
  if (dn.output_gate) {
    GatedHeadRmsNorm<D>(o, Vw, zbuf, zb, rows, static_cast<int>(H), dn.value_dim, norm_, 0,
                        c.rms_norm_eps, GateOrder::kNormThenGate);
  } else {
    HeadRmsNorm<D>(o, rows, Vw, static_cast<int>(H), dn.value_dim, norm_, c.rms_norm_eps);
  }
  out_.Apply(c, o, rows, *step.pool, residual);
}

template class DeltaNetMixer<Device::kCpu>;
#ifdef FLATSTATE_HAVE_CUDA
template class DeltaNetMixer<Device::kCuda>;
#endif

}  // namespace flatstate
