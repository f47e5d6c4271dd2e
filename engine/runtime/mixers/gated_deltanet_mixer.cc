#include "engine/runtime/mixers/gated_deltanet_mixer.h"

#include <cmath>

#include "engine/util/status_macros.h"
#include "kernels/elementwise.h"
#include "kernels/gated_delta.h"
#include "kernels/recurrent_gates.h"

namespace flatstate {

template <Device D>
absl::StatusOr<std::unique_ptr<GatedDeltaNetMixer<D>>> GatedDeltaNetMixer<D>::Create(
    int layer, const LayerWeights& lw, const MixerResources<D>& res, DeviceWeights<D>* weights) {
  const ModelConfig& c = *res.config;
  const DeltaNetShape& dn = c.delta;
  auto m = std::unique_ptr<GatedDeltaNetMixer>(new GatedDeltaNetMixer(res));
  m->lay_ = res.layout->layers[layer];
  ASSIGN_OR_RETURN(m->wqkv_, weights->PrepareGemm(lw.wqkv));
  ASSIGN_OR_RETURN(m->wzba_, weights->PrepareGemm(lw.wzba));
  ASSIGN_OR_RETURN(m->conv_, weights->Place(lw.conv, dn.conv_dim() * dn.conv_kernel));
  ASSIGN_OR_RETURN(m->A_log_, weights->Place(lw.A_log, dn.value_heads));
  ASSIGN_OR_RETURN(m->dt_bias_, weights->Place(lw.dt_bias, dn.value_heads));
  ASSIGN_OR_RETURN(m->norm_, weights->Place(lw.delta_norm, dn.value_dim));
  RETURN_IF_ERROR(m->out_.Bind(c, lw, weights));
  return m;
}

template <Device D>
int64_t GatedDeltaNetMixer<D>::ScratchFloats(int64_t rows) const {
  const DeltaNetShape& dn = res_.config->delta;
  // qkv before and after the conv, z|b|a, g and beta, the rule's output.
  return rows * (2 * dn.conv_dim() + dn.value_width() + 2 * dn.value_heads + 2 * dn.value_heads +
                 dn.value_width());
}

template <Device D>
void GatedDeltaNetMixer<D>::Forward(const float* in, float* residual, const MixerStep<D>& step) {
  const ModelConfig& c = *res_.config;
  const DeltaNetShape& dn = c.delta;
  const DeviceStep<D>& s = *step.step;
  const int64_t rows = s.rows, conv = dn.conv_dim(), Vw = dn.value_width();
  const int64_t Hv = dn.value_heads, zba = Vw + 2 * Hv;
  float* raw = step.scratch;        // [rows][conv]
  float* qkv = raw + rows * conv;   // [rows][conv]
  float* zbuf = qkv + rows * conv;  // [rows][Vw + 2 Hv]: z | b | a
  float* g = zbuf + rows * zba;     // [rows][Hv]
  float* beta = g + rows * Hv;      // [rows][Hv]
  float* o = beta + rows * Hv;      // [rows][Vw]
  Gemm<D>(in, rows, wqkv_, raw, false, *step.pool);
  CausalConv<D>(raw, conv, dn.conv_kernel, conv_, s.conv.on, static_cast<int>(s.conv.host.size()),
                static_cast<int64_t>(lay_.begin + lay_.conv), qkv);
  SiluRows<D>(qkv, rows, conv, conv);
  Gemm<D>(in, rows, wzba_, zbuf, false, *step.pool);
  DeltaGates<D>(zbuf + Vw + Hv, zbuf + Vw, zba, rows, static_cast<int>(Hv), A_log_, dt_bias_, g,
                beta, Hv);
  GatedDeltaBatch b;
  b.key_heads = dn.key_heads;
  b.value_heads = dn.value_heads;
  b.key_dim = dn.key_dim;
  b.value_dim = dn.value_dim;
  b.scale = 1.f / std::sqrt(static_cast<float>(dn.key_dim));
  b.l2norm_qk = true;
  b.q = qkv;
  b.k = qkv + dn.key_width();
  b.qk_stride = conv;
  b.v = qkv + 2 * dn.key_width();
  b.v_stride = conv;
  b.g = g;
  b.beta = beta;
  b.gb_stride = Hv;
  b.out = o;
  b.out_stride = Vw;
  step.SetSequences(lay_, res_.chunk, &b);
  GatedDeltaRule<D>(b, step.PoolFor(rows * Hv * dn.key_dim * dn.value_dim));
  GatedHeadRmsNorm<D>(o, Vw, zbuf, zba, rows, static_cast<int>(Hv), dn.value_dim, norm_, 0,
                      c.rms_norm_eps, GateOrder::kNormThenGate);
  out_.Apply(c, o, rows, *step.pool, residual);
}

template class GatedDeltaNetMixer<Device::kCpu>;
#ifdef FLATSTATE_HAVE_CUDA
template class GatedDeltaNetMixer<Device::kCuda>;
#endif

}  // namespace flatstate
