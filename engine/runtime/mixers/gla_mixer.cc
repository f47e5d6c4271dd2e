#include "engine/runtime/mixers/gla_mixer.h"

#include <cmath>

#include "engine/util/status_macros.h"
#include "kernels/elementwise.h"
#include "kernels/gated_linear.h"
#include "kernels/recurrent_gates.h"

namespace flatstate {

template <Device D>
absl::StatusOr<std::unique_ptr<GlaMixer<D>>> GlaMixer<D>::Create(int layer, const LayerWeights& lw,
                                                                 const MixerResources<D>& res,
                                                                 DeviceWeights<D>* weights) {
  const GlaShape& s = res.config->gla;
  auto m = std::unique_ptr<GlaMixer>(new GlaMixer(res));
  m->lay_ = res.layout->layers[layer];
  ASSIGN_OR_RETURN(m->wqkv_, weights->PrepareGemm(lw.wqkv));
  if (s.output_gate) {
    ASSIGN_OR_RETURN(m->wg_, weights->PrepareGemm(lw.wzba));
  }
  ASSIGN_OR_RETURN(m->wgk1_, weights->PrepareGemm(lw.gla.gk1));
  ASSIGN_OR_RETURN(m->wgk2_, weights->PrepareGemm(lw.gla.gk2));
  ASSIGN_OR_RETURN(m->gk_bias_, weights->Place(lw.gla.gk_bias, s.key_width()));
  if (s.conv_kernel > 0) {
    ASSIGN_OR_RETURN(m->conv_, weights->Place(lw.conv, s.qkv_dim() * s.conv_kernel));
  }
  ASSIGN_OR_RETURN(m->norm_, weights->Place(lw.delta_norm, s.value_dim));
  RETURN_IF_ERROR(m->out_.Bind(*res.config, lw, weights));
  return m;
}

template <Device D>
int64_t GlaMixer<D>::ScratchFloats(int64_t rows) const {
  const GlaShape& s = res_.config->gla;
  // q|k|v before and after the conv, the output gate, the low-rank gate, gk, the output.
  return rows * (2 * s.qkv_dim() + s.value_width() + s.gate_rank + s.key_width() + s.value_width());
}

template <Device D>
void GlaMixer<D>::Forward(const float* in, float* residual, const MixerStep<D>& step) {
  const ModelConfig& c = *res_.config;
  const GlaShape& s = c.gla;
  const DeviceStep<D>& st = *step.step;
  const int64_t rows = st.rows, width = s.qkv_dim(), Kw = s.key_width(), Vw = s.value_width();
  float* raw = step.scratch;             // [rows][width]: q | k | v
  float* conv = raw + rows * width;      // [rows][width] after the conv
  float* gate = conv + rows * width;     // [rows][Vw]
  float* low = gate + rows * Vw;         // [rows][gate_rank]
  float* gk = low + rows * s.gate_rank;  // [rows][Kw]
  float* o = gk + rows * Kw;             // [rows][Vw]
  Gemm<D>(in, rows, wqkv_, raw, false, *step.pool);
  const float* qkv = raw;
  if (conv_ != nullptr) {
    CausalConv<D>(raw, width, s.conv_kernel, conv_, st.conv.on,
                  static_cast<int>(st.conv.host.size()),
                  static_cast<int64_t>(lay_.begin + lay_.conv), conv);
    SiluRows<D>(conv, rows, width, width);
    qkv = conv;
  }
  Gemm<D>(in, rows, wgk1_, low, false, *step.pool);
  Gemm<D>(low, rows, wgk2_, gk, false, *step.pool);
  GlaGates<D>(gk, rows, Kw, Kw, gk_bias_, s.gate_normalizer, s.clamp_min);
  GatedLinearBatch b;
  b.key_heads = s.heads;
  b.value_heads = s.heads;
  b.key_dim = s.key_dim;
  b.value_dim = s.value_dim;
  b.scale = 1.f / std::sqrt(static_cast<float>(s.key_dim));
  b.q = qkv;
  b.k = qkv + Kw;
  b.qk_stride = width;
  b.v = qkv + 2 * Kw;
  b.v_stride = width;
  b.per_key_decay = true;
  b.g = gk;
  b.g_stride = Kw;
  b.out = o;
  b.out_stride = Vw;
  step.SetSequences(lay_, res_.chunk, &b);
  GatedLinear<D>(b, step.PoolFor(rows * s.heads * s.key_dim * s.value_dim));
  if (s.output_gate) {
    Gemm<D>(in, rows, wg_, gate, false, *step.pool);
    GatedHeadRmsNorm<D>(o, Vw, gate, Vw, rows, s.heads, s.value_dim, norm_, 0, c.rms_norm_eps,
                        GateOrder::kNormThenGate);
  } else {
    HeadRmsNorm<D>(o, rows, Vw, s.heads, s.value_dim, norm_, c.rms_norm_eps);
  }
  out_.Apply(c, o, rows, *step.pool, residual);
}

template class GlaMixer<Device::kCpu>;
#ifdef FLATSTATE_HAVE_CUDA
template class GlaMixer<Device::kCuda>;
#endif

}  // namespace flatstate
